/* Activation gradients whose lifetimes in a step do not overlap share memory (per slice).
 *
 * Positions in a step: the loss is -1, layer l's backward is m->n - 1 - l (step.c submits the
 * backward from the last layer). The gradient of layer j's output lives from its first writer (the
 * loss for the output layer, else its first consumer in backward order) to its reader (layer j's
 * backward, or that of the layer a fused relu j runs inside). A gradient is written and read only
 * there, and a batch normalisation's last slice writes and reads every slice's buffers at its own
 * position. A later consumer's contribution is written into a buffer of its own and added into the
 * gradient at the consumer's position: these contribution buffers are members too, live at that one
 * position. Two members share a buffer only where one's last reader comes strictly before the
 * other's first writer, so no task touches two of them at once.
 *
 * Every gradient keeps its own StarPU handle (with its own size, which the kernels read) over the
 * shared memory, so StarPU does not see that they alias: before the first writer of a gradient, a
 * task that runs nowhere takes the buffer's previous occupant and the gradient in RW (gate), which
 * orders the new writes after every access to the previous occupant, and the buffer's members
 * follow one another in a cycle across steps. No arithmetic changes: every first writer overwrites
 * its gradient whole (the buffers held the previous step's values before sharing too).
 *
 * Off (every gradient its own buffer) with tsr_trainer_opts.separate_grads, spatially split samples
 * (halo'd gradients and block copies), asynchronous slices (a slice runs ahead of the others) and
 * CUDA workers (a device copy per handle would not see the other handles' writes). */
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"
#include "runtime/error.h"
#include "runtime/submit.h"

static int pos(const tsr_trainer *t, int l) { return t->model->n - 1 - l; }

/* Layer l owns an output gradient that is written and read in every training step. */
static int shareable(const tsr_trainer *t, int l) {
  const struct _tsr_lstate *st = &t->ls[l];
  return st->live && st->needs_grad && st->relu < 0 && t->model->layers[l].spec.kind != TSR_LAYER_INPUT;
}

/* The backward position that reads layer l's output gradient: its own, or that of the layer whose
 * tasks run the fused relu l. */
static int reader(const tsr_trainer *t, int l) {
  if (!t->ls[l].fused) return pos(t, l);
  for (int k = 0; k < t->model->n; k++)
    if (t->ls[k].relu == l) return pos(t, k);
  return pos(t, l);
}

/* The first position that writes layer l's output gradient. */
static int first_writer(const tsr_trainer *t, int l) {
  const tsr_model *m = t->model;
  if (l == t->output_layer) return -1;
  int first = m->n;
  for (int c = 0; c < m->n; c++)
    for (int k = 0; t->ls[c].live && k < m->layers[c].ninputs; k++)
      if (m->layers[c].inputs[k] == l && pos(t, c) < first) first = pos(t, c);
  return first;
}

/* Per sample floats of layer l's gradient buffer: its output with the padding channels of its layout
 * (as footprint.c counts them), half as many rounded up for a gradient stored in bf16. */
static size_t grad_elems(const tsr_trainer *t, int l) {
  const struct _tsr_layer *L = &t->model->layers[l];
  size_t n = (size_t)_tsr_layer_elems(L) / (size_t)L->c * (size_t)_tsr_blk_channels(L->c, t->ls[l].blk);
  return t->ls[l].gbf16 ? (n + 1) / 2 : n;
}

static int by_start(const void *a, const void *b, void *arg) {
  const int *start = arg, x = *(const int *)a, y = *(const int *)b;
  return start[x] != start[y] ? (start[x] > start[y]) - (start[x] < start[y]) : (x < y) - (x > y);
}

/* Insertion sort of the members by first write, higher ids first on ties: a few hundred. */
static void sort_layers(int *order, int n, int *start) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && by_start(&order[j - 1], &order[j], start) > 0; j--) {
      int x = order[j];
      order[j] = order[j - 1], order[j - 1] = x;
    }
}

/* Member id: a layer's output gradient (id < n) or contribution id - n. */
static starpu_data_handle_t member(const tsr_trainer *t, int id, int s) {
  return id < t->model->n ? t->ls[id].g[s] : t->gs_ch[id - t->model->n][s];
}

/* Counts the contributions (later consumers' gradients of an input that are not added in place:
 * edge_add) and numbers them. */
static int contributions(tsr_trainer *t) {
  const tsr_model *m = t->model;
  int nc = 0;
  for (int c = 0; c < m->n; c++)
    for (int k = 0; t->ls[c].live && k < m->layers[c].ninputs; k++) {
      int j = m->layers[c].inputs[k];
      t->gs_cidx[c * TSR_MAX_CONCAT + k] = -1;
      if (t->ls[j].needs_grad && !t->edge_first[c * TSR_MAX_CONCAT + k] && !t->edge_add[c * TSR_MAX_CONCAT + k] &&
          shareable(t, j))
        t->gs_cidx[c * TSR_MAX_CONCAT + k] = nc++;
    }
  return nc;
}

tsr_status _tsr_grad_share_plan(tsr_trainer *t, const tsr_trainer_opts *o, int spatial) {
  const tsr_model *m = t->model;
  int n = m->n;
  t->gs_n = 0, t->gs_nc = 0;
  t->gs_cidx = malloc((size_t)n * TSR_MAX_CONCAT * sizeof *t->gs_cidx);
  if (!t->gs_cidx) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  for (int i = 0; i < n * TSR_MAX_CONCAT; i++) t->gs_cidx[i] = -1;
  int on = !(o && o->separate_grads) && !spatial && !t->async &&
           !(starpu_is_initialized() && starpu_cuda_worker_get_count() > 0);
  int nc = on ? contributions(t) : 0, nm = n + nc;
  t->gs_nc = nc;
  t->gs_buf = malloc((size_t)nm * sizeof *t->gs_buf), t->gs_prev = malloc((size_t)nm * sizeof *t->gs_prev);
  t->gs_start = malloc((size_t)nm * sizeof *t->gs_start);
  t->gs_elems = calloc((size_t)nm, sizeof *t->gs_elems);
  t->gs_cl = calloc((size_t)nc + 1, sizeof *t->gs_cl), t->gs_ck = calloc((size_t)nc + 1, sizeof *t->gs_ck);
  int *end = calloc((size_t)nm, sizeof *end), *last = calloc((size_t)nm, sizeof *last);
  int *first = calloc((size_t)nm, sizeof *first), *order = calloc((size_t)nm, sizeof *order);
  size_t *need = calloc((size_t)nm, sizeof *need);
  if (!t->gs_buf || !t->gs_prev || !t->gs_start || !t->gs_elems || !t->gs_cl || !t->gs_ck || !end || !last || !first ||
      !order || !need) {
    free(end), free(last), free(first), free(order), free(need);
    return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  }
  int count = 0, *mend = calloc((size_t)nm, sizeof *mend); /* per member its last reader */
  if (!mend) {
    free(end), free(last), free(first), free(order), free(need);
    return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  }
  for (int id = 0; id < nm; id++) t->gs_buf[id] = -1, t->gs_prev[id] = -1, t->gs_start[id] = n;
  for (int l = 0; on && l < n; l++) {
    if (!shareable(t, l)) continue;
    t->gs_start[l] = first_writer(t, l), mend[l] = reader(t, l), need[l] = grad_elems(t, l);
    order[count++] = l;
  }
  for (int c = 0; on && c < n; c++)
    for (int k = 0; k < m->layers[c].ninputs; k++) {
      int i = t->gs_cidx[c * TSR_MAX_CONCAT + k];
      if (i < 0) continue;
      t->gs_cl[i] = c, t->gs_ck[i] = k;
      t->gs_start[n + i] = mend[n + i] = pos(t, c), need[n + i] = grad_elems(t, m->layers[c].inputs[k]);
      order[count++] = n + i;
    }
  sort_layers(order, count, t->gs_start);
  /* Greedy over first writes: the free buffer (its last reader before this first writer) that is
   * already big enough and smallest, else the biggest free one (it grows), else a new one. */
  for (int i = 0; i < count; i++) {
    int id = order[i], pick = -1;
    for (int b = 0; b < t->gs_n; b++) {
      if (end[b] >= t->gs_start[id]) continue;
      if (pick < 0) {
        pick = b;
        continue;
      }
      int fits = t->gs_elems[b] >= need[id], pfits = t->gs_elems[pick] >= need[id];
      if (fits && (!pfits || t->gs_elems[b] < t->gs_elems[pick])) pick = b;
      if (!fits && !pfits && t->gs_elems[b] > t->gs_elems[pick]) pick = b;
    }
    if (pick < 0) pick = t->gs_n++, first[pick] = id, last[pick] = -1;
    if (need[id] > t->gs_elems[pick]) t->gs_elems[pick] = need[id];
    t->gs_buf[id] = pick, t->gs_prev[id] = last[pick], last[pick] = id, end[pick] = mend[id];
  }
  /* the cycle: a buffer's first member follows its last one of the step before */
  for (int b = 0; b < t->gs_n; b++)
    if (first[b] != last[b]) t->gs_prev[first[b]] = last[b];
  free(end), free(last), free(first), free(order), free(need), free(mend);
  return TSR_OK;
}

float *_tsr_grad_share_mem(tsr_trainer *t, int id, int s) {
  int b = t->gs_buf[id];
  if (!t->gs_mem && !(t->gs_mem = calloc((size_t)t->gs_n, sizeof *t->gs_mem))) return NULL;
  if (!t->gs_mem[b] && !(t->gs_mem[b] = calloc((size_t)t->slices, sizeof *t->gs_mem[b]))) return NULL;
  if (!t->gs_mem[b][s]) {
    size_t bytes = ((size_t)t->slice_n[s] * t->gs_elems[b] * sizeof(float) + 63) & ~(size_t)63;
    if (!(t->gs_mem[b][s] = aligned_alloc(64, bytes))) return NULL;
    memset(t->gs_mem[b][s], 0, bytes);
  }
  return t->gs_mem[b][s];
}

tsr_status _tsr_grad_share_alloc(tsr_trainer *t) {
  if (!t->gs_nc) return TSR_OK;
  if (!(t->gs_ch = calloc((size_t)t->gs_nc, sizeof *t->gs_ch)))
    return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  for (int i = 0; i < t->gs_nc; i++) {
    const struct _tsr_layer *C = &t->model->layers[t->gs_cl[i]];
    int j = C->inputs[t->gs_ck[i]];
    if (!(t->gs_ch[i] = calloc((size_t)t->slices, sizeof *t->gs_ch[i])))
      return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
    size_t esize = t->ls[j].gbf16 ? 2 : 4; /* a contribution to a bf16 gradient is bf16 */
    if (t->ls[j].elems * esize > t->gs_elems[t->gs_buf[t->model->n + i]] * 4)
      return _tsr_error(TSR_ERR_RUNTIME, "layer '%s': %zu bytes per sample in a shared buffer of %zu", C->name,
                        t->ls[j].elems * esize, t->gs_elems[t->gs_buf[t->model->n + i]] * 4);
    for (int s = 0; s < t->slices; s++) {
      float *mem = _tsr_grad_share_mem(t, t->model->n + i, s);
      if (!mem) return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory", C->name);
      t->gs_ch[i][s] = _tsr_register_values(mem, (size_t)t->slice_n[s] * t->ls[j].elems, t->ls[j].gbf16);
    }
  }
  return TSR_OK;
}

starpu_data_handle_t *_tsr_grad_share_contribution(const tsr_trainer *t, int c, int k) {
  int i = t->gs_cidx ? t->gs_cidx[c * TSR_MAX_CONCAT + k] : -1;
  return i >= 0 && t->gs_ch ? t->gs_ch[i] : NULL;
}

void _tsr_grad_share_free(tsr_trainer *t) {
  for (int i = 0; t->gs_ch && i < t->gs_nc; i++) {
    for (int s = 0; t->gs_ch[i] && s < t->slices; s++)
      if (t->gs_ch[i][s]) starpu_data_unregister(t->gs_ch[i][s]);
    free(t->gs_ch[i]);
  }
  for (int b = 0; t->gs_mem && b < t->gs_n; b++) {
    for (int s = 0; t->gs_mem[b] && s < t->slices; s++) free(t->gs_mem[b][s]);
    free(t->gs_mem[b]);
  }
  free(t->gs_ch), free(t->gs_mem), free(t->gs_buf), free(t->gs_prev), free(t->gs_start), free(t->gs_elems);
  free(t->gs_cidx), free(t->gs_cl), free(t->gs_ck);
  t->gs_ch = NULL, t->gs_mem = NULL, t->gs_buf = NULL, t->gs_prev = NULL, t->gs_start = NULL, t->gs_elems = NULL;
  t->gs_cidx = NULL, t->gs_cl = NULL, t->gs_ck = NULL, t->gs_n = 0, t->gs_nc = 0;
}

static struct starpu_codelet gate_cl = {
    .where = STARPU_NOWHERE, .nbuffers = STARPU_VARIABLE_NBUFFERS, .name = "tsr_grad_share_gate"};

int _tsr_grad_share_gates(tsr_trainer *t, int at) {
  for (int id = 0; t->gs_buf && id < t->model->n + t->gs_nc; id++) {
    int prev = t->gs_prev[id];
    if (t->gs_start[id] != at || prev < 0) continue;
    for (int s = 0; s < t->slices; s++) {
      struct _tsr_buf b[2] = {{member(t, prev, s), STARPU_RW}, {member(t, id, s), STARPU_RW}};
      int ret = _tsr_submit(&gate_cl, NULL, 0, STARPU_DEFAULT_PRIO, "grad_share_gate", 2, b);
      if (ret) return ret;
    }
  }
  return 0;
}

/* Activation gradients whose lifetimes in a step do not overlap share memory (per slice).
 *
 * Positions in a step: the loss is -1, layer l's backward is m->n - 1 - l (step.c submits the
 * backward from the last layer). The gradient of layer j's output lives from its first writer (the
 * loss for the output layer, else its first consumer in backward order) to its reader (layer j's
 * backward, or that of the layer a fused relu j runs inside). A gradient is written and read only
 * there: a later consumer's contribution goes through the second buffer (tmp) and is added at the
 * consumer's own position, and a batch normalisation's last slice writes and reads every slice's
 * buffers at its own position. Two gradients share a buffer only where one's reader comes strictly
 * before the other's first writer, so no task touches two of them at once.
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
 * (as footprint.c counts them). */
static size_t grad_elems(const tsr_trainer *t, int l) {
  const struct _tsr_layer *L = &t->model->layers[l];
  return (size_t)_tsr_layer_elems(L) / (size_t)L->c * (size_t)_tsr_blk_channels(L->c, t->ls[l].blk);
}

static int by_start(const void *a, const void *b, void *arg) {
  const int *start = arg, x = *(const int *)a, y = *(const int *)b;
  return start[x] != start[y] ? (start[x] > start[y]) - (start[x] < start[y]) : (x < y) - (x > y);
}

/* Insertion sort of the layers by first write, later layers first on ties: a handful of hundreds. */
static void sort_layers(int *order, int n, int *start) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && by_start(&order[j - 1], &order[j], start) > 0; j--) {
      int x = order[j];
      order[j] = order[j - 1], order[j - 1] = x;
    }
}

tsr_status _tsr_grad_share_plan(tsr_trainer *t, const tsr_trainer_opts *o, int spatial) {
  const tsr_model *m = t->model;
  int n = m->n;
  t->gs_n = 0;
  t->gs_buf = malloc((size_t)n * sizeof *t->gs_buf), t->gs_prev = malloc((size_t)n * sizeof *t->gs_prev);
  t->gs_start = malloc((size_t)n * sizeof *t->gs_start);
  t->gs_elems = calloc((size_t)n, sizeof *t->gs_elems);
  int *end = calloc((size_t)n, sizeof *end), *last = calloc((size_t)n, sizeof *last);
  int *first = calloc((size_t)n, sizeof *first), *order = calloc((size_t)n, sizeof *order);
  if (!t->gs_buf || !t->gs_prev || !t->gs_start || !t->gs_elems || !end || !last || !first || !order) {
    free(end), free(last), free(first), free(order);
    return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  }
  int on = !(o && o->separate_grads) && !spatial && !t->async &&
           !(starpu_is_initialized() && starpu_cuda_worker_get_count() > 0);
  int count = 0;
  for (int l = 0; l < n; l++) {
    t->gs_buf[l] = -1, t->gs_prev[l] = -1, t->gs_start[l] = n;
    if (!on || !shareable(t, l)) continue;
    t->gs_start[l] = first_writer(t, l);
    order[count++] = l;
  }
  sort_layers(order, count, t->gs_start);
  /* Greedy over first writes: the free buffer (its last reader before this first writer) that is
   * already big enough and smallest, else the biggest free one (it grows), else a new one. */
  for (int i = 0; i < count; i++) {
    int l = order[i], pick = -1;
    size_t need = grad_elems(t, l);
    for (int b = 0; b < t->gs_n; b++) {
      if (end[b] >= t->gs_start[l]) continue;
      if (pick < 0) {
        pick = b;
        continue;
      }
      int fits = t->gs_elems[b] >= need, pfits = t->gs_elems[pick] >= need;
      if (fits && (!pfits || t->gs_elems[b] < t->gs_elems[pick])) pick = b;
      if (!fits && !pfits && t->gs_elems[b] > t->gs_elems[pick]) pick = b;
    }
    if (pick < 0) pick = t->gs_n++, first[pick] = l, last[pick] = -1;
    if (need > t->gs_elems[pick]) t->gs_elems[pick] = need;
    t->gs_buf[l] = pick, t->gs_prev[l] = last[pick], last[pick] = l, end[pick] = reader(t, l);
  }
  /* the cycle: a buffer's first member follows its last one of the step before */
  for (int b = 0; b < t->gs_n; b++)
    if (first[b] != last[b]) t->gs_prev[first[b]] = last[b];
  free(end), free(last), free(first), free(order);
  return TSR_OK;
}

void _tsr_grad_share_free(tsr_trainer *t) {
  for (int b = 0; t->gs_mem && b < t->gs_n; b++) {
    for (int s = 0; t->gs_mem[b] && s < t->slices; s++) free(t->gs_mem[b][s]);
    free(t->gs_mem[b]);
  }
  free(t->gs_mem), free(t->gs_buf), free(t->gs_prev), free(t->gs_start), free(t->gs_elems);
  t->gs_mem = NULL, t->gs_buf = NULL, t->gs_prev = NULL, t->gs_start = NULL, t->gs_elems = NULL, t->gs_n = 0;
}

float *_tsr_grad_share_mem(tsr_trainer *t, int l, int s) {
  int b = t->gs_buf[l];
  if (!t->gs_mem && !(t->gs_mem = calloc((size_t)t->gs_n, sizeof *t->gs_mem))) return NULL;
  if (!t->gs_mem[b] && !(t->gs_mem[b] = calloc((size_t)t->slices, sizeof *t->gs_mem[b]))) return NULL;
  if (!t->gs_mem[b][s]) {
    size_t bytes = ((size_t)t->slice_n[s] * t->gs_elems[b] * sizeof(float) + 63) & ~(size_t)63;
    if (!(t->gs_mem[b][s] = aligned_alloc(64, bytes))) return NULL;
    memset(t->gs_mem[b][s], 0, bytes);
  }
  return t->gs_mem[b][s];
}

static struct starpu_codelet gate_cl = {.where = STARPU_NOWHERE, .nbuffers = STARPU_VARIABLE_NBUFFERS,
                                        .name = "tsr_grad_share_gate"};

int _tsr_grad_share_gates(tsr_trainer *t, int at) {
  for (int l = 0; t->gs_buf && l < t->model->n; l++) {
    int prev = t->gs_prev[l];
    if (t->gs_start[l] != at || prev < 0) continue;
    for (int s = 0; s < t->slices; s++) {
      struct _tsr_buf b[2] = {{t->ls[prev].g[s], STARPU_RW}, {t->ls[l].g[s], STARPU_RW}};
      int ret = _tsr_submit(&gate_cl, NULL, 0, STARPU_DEFAULT_PRIO, "grad_share_gate", 2, b);
      if (ret) return ret;
    }
  }
  return 0;
}

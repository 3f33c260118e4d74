/* How a trainer stores its activations and which layers run fused, decided once at creation.
 * Activations stay in oneDNN's blocked layout (nChw16c or nChw8c: choose_block) wherever their
 * producer and every consumer handle it, so convolutions read and write it directly instead of
 * reordering on every call; the model's input and output stay plain NCHW (load, loss and predictions
 * read them).
 * A relu that is the only consumer of an entry with fuse_relu (batchnorm) runs inside its tasks,
 * except with asynchronous slices: the fused backward recomputes the relu's mask from the layer's
 * parameters, which another slice's update may change between a slice's forward and backward.
 * Where a convolution's kernels take another layout than its input's or output's (a blocked one
 * next to the model's input and output or a layer that takes only plain data; a plain one for some
 * shapes with few channels), the convolution reads and writes a copy in that layout, and reorder
 * tasks of their own convert between the two (the "edges"), so the convolution tasks reorder no
 * activation themselves where one layout serves all their passes.
 * With bf16 precision on CPUs, an activation is stored in bf16 where its producer and every
 * consumer read and write it so (the entries' bf16 capability; a fused relu counts as its input's
 * layer). Its gradient is stored in bf16 too where the producer's and every consumer's backward read
 * and write bf16 gradients (bf16_grad). A gradient summed from several consumers then sums bf16
 * contributions: each rounded to bf16, and each sum rounded (the accumulate task, or a batch norm
 * adding its contribution in its own task), as PyTorch's autocast sums bf16 gradients. The model's
 * input and output stay float32; a convolution next to a float32 activation or gradient converts it
 * inside its tasks. */
#include <stdlib.h>

#include "codelets.h"
#include "kernel_util.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/switches.h"
#include "train/trainer.h"

static int layout_of(const tsr_trainer *t, int l) { return t->model->layers[l].ops->layout; }

/* Can layer l's output stay blocked, given which layers are still candidates (ok)? A following
 * layer also needs its inputs blocked; every consumer must take a blocked input. */
static int keeps_blocked(const tsr_trainer *t, const char *ok, int l) {
  const tsr_model *m = t->model;
  const struct _tsr_layer *L = &m->layers[l];
  if (layout_of(t, l) == TSR_LAYOUT_FOLLOW)
    for (int k = 0; k < L->ninputs; k++)
      if (!ok[L->inputs[k]]) return 0;
  for (int c = l + 1; c < m->n; c++) {
    int takes = layout_of(t, c) == TSR_LAYOUT_PRODUCE || (layout_of(t, c) == TSR_LAYOUT_FOLLOW && ok[c]);
    for (int k = 0; t->ls[c].live && k < m->layers[c].ninputs; k++)
      if (m->layers[c].inputs[k] == l && !takes) return 0;
  }
  return 1;
}

/* The only live consumer of layer l (one edge), or -1. */
static int only_consumer(const tsr_trainer *t, int l) {
  const tsr_model *m = t->model;
  int found = -1;
  for (int c = l + 1; c < m->n; c++)
    for (int k = 0; t->ls[c].live && k < m->layers[c].ninputs; k++)
      if (m->layers[c].inputs[k] == l) {
        if (found >= 0) return -1;
        found = c;
      }
  return found;
}

/* Layer l's bf16 capability; a fused relu has that of the layer that runs it. */
static int bf16_cap(const tsr_trainer *t, int l) {
  const tsr_model *m = t->model;
  if (t->ls[l].fused) l = m->layers[l].inputs[0];
  return m->layers[l].ops->bf16;
}

/* Layer l's backward takes bf16 gradients; a fused relu's is that of the layer that runs it. */
static int bf16_grad_cap(const tsr_trainer *t, int l) {
  const tsr_model *m = t->model;
  if (t->ls[l].fused) l = m->layers[l].inputs[0];
  return m->layers[l].ops->bf16_grad;
}

/* Every live consumer of layer l (one at least) has bf16_grad. */
static int consumers_bf16_grad(const tsr_trainer *t, int l) {
  const tsr_model *m = t->model;
  int n = 0;
  for (int c = l + 1; c < m->n; c++)
    for (int k = 0; t->ls[c].live && k < m->layers[c].ninputs; k++)
      if (m->layers[c].inputs[k] == l) {
        if (!bf16_grad_cap(t, c)) return 0;
        n++;
      }
  return n > 0;
}

/* Which activations are stored in bf16 (ls[].bf16): those whose producer and live consumers all
 * have a bf16 capability, apart from the model's input and output; then, until nothing changes,
 * an entry that takes its inputs and output alike (TSR_BF16_SAME) with some of them float32 gets
 * them all float32 (they only drop out, so this ends). A fused batch norm's own output is not
 * stored (the relu's is). Then which of their gradients (ls[].gbf16): those of an activation in
 * bf16 whose producer and live consumers all have bf16_grad. */
static tsr_status plan_bf16(tsr_trainer *t) {
  const tsr_model *m = t->model;
  for (int l = 0; l < m->n; l++) {
    int ok = t->ls[l].live && l != t->input_layer && l != t->output_layer && t->ls[l].relu < 0 && bf16_cap(t, l);
    for (int c = l + 1; ok && c < m->n; c++)
      for (int k = 0; t->ls[c].live && k < m->layers[c].ninputs; k++)
        if (m->layers[c].inputs[k] == l && !bf16_cap(t, c)) ok = 0;
    t->ls[l].bf16 = ok;
  }
  for (int changed = 1; changed;) {
    changed = 0;
    for (int l = 0; l < m->n; l++) {
      const struct _tsr_layer *L = &m->layers[l];
      if (!t->ls[l].live || t->ls[l].fused || L->ops->bf16 != TSR_BF16_SAME) continue;
      int all = t->ls[l].bf16, any = t->ls[l].bf16;
      for (int k = 0; k < L->ninputs; k++) all &= t->ls[L->inputs[k]].bf16, any |= t->ls[L->inputs[k]].bf16;
      if (all || !any) continue;
      t->ls[l].bf16 = 0;
      for (int k = 0; k < L->ninputs; k++) t->ls[L->inputs[k]].bf16 = 0;
      changed = 1;
    }
  }
  int n = 0, ng = 0;
  for (int l = 0; l < m->n; l++) {
    t->ls[l].gbf16 = t->ls[l].bf16 && t->ls[l].needs_grad && bf16_grad_cap(t, l) && consumers_bf16_grad(t, l);
    n += t->ls[l].bf16, ng += t->ls[l].gbf16;
  }
  _tsr_log(2, "bf16: %d of %d activations stored in bf16, %d of their gradients", n, m->n, ng);
  return TSR_OK;
}

/* The sides of layer l that its tasks would reorder with the view v, over every slice size. */
static tsr_status reorders(const tsr_trainer *t, int l, const struct _tsr_layer_view *v, int *mask) {
  const struct _tsr_layer *L = &t->model->layers[l];
  int bwd_data = t->ls[L->inputs[0]].needs_grad;
  *mask = 0;
  for (int s = 0; s < t->slices; s++) {
    if (s > 0 && t->slice_n[s] == t->slice_n[s - 1]) continue;
    int r = L->ops->reorders(v, t->slice_n[s], bwd_data);
    if (r < 0) {
      char msg[512] = "";
      _tsr_kernel_error(msg, sizeof msg);
      _tsr_kernel_error_clear();
      return _tsr_error(TSR_ERR_RUNTIME, "layer '%s': no plan for its tasks of %d samples: %s", L->name,
                        t->slice_n[s], msg);
    }
    *mask |= r;
  }
  return TSR_OK;
}

static int bits(int mask) { return (mask & TSR_EDGE_IN ? 1 : 0) + (mask & TSR_EDGE_OUT ? 1 : 0); }

/* Layer l's edges. When its tasks would reorder a side themselves, each combination of layouts (the
 * activation's, or the other of plain and blocked) for the sides they reorder is tried: the one that
 * leaves the fewest reorders inside the tasks wins, with the fewest copies on a tie. A kernel that
 * takes plain data directly (a first convolution of one channel) keeps its plain input; one whose
 * kernels take blocked data gets a blocked copy of a plain input or output (the model's input and
 * output); one whose kernels want plain data for few channels gets a plain copy of a blocked one. */
static tsr_status plan_edges(tsr_trainer *t, int l, int blk) {
  const struct _tsr_layer *L = &t->model->layers[l];
  struct _tsr_lstate *st = &t->ls[l];
  st->edges = st->reorders_left = 0;
  if (!L->ops->reorders || !st->live || st->fused || !L->ops->forward) return TSR_OK;
  struct _tsr_layer_view v;
  _tsr_trainer_view(t, l, &v);
  int own[2] = {v.in_blk[0], v.out_blk}, best;
  TSR_TRY(reorders(t, l, &v, &best));
  int first = best, best_edges = 0;
  /* a bf16 activation gets no float32 copy: the tasks convert it themselves */
  int bf = (v.in_bf16[0] ? TSR_EDGE_IN : 0) | (v.out_bf16 ? TSR_EDGE_OUT : 0);
  for (int e = 1; e <= (TSR_EDGE_IN | TSR_EDGE_OUT); e++) {
    if ((e & first) != e || (e & bf)) continue; /* only sides the tasks reorder, in float32 */
    int left;
    v.in_blk[0] = e & TSR_EDGE_IN ? (own[0] ? 0 : blk) : own[0];
    v.out_blk = e & TSR_EDGE_OUT ? (own[1] ? 0 : blk) : own[1];
    TSR_TRY(reorders(t, l, &v, &left));
    if (bits(left) < bits(best) || (bits(left) == bits(best) && bits(e) < bits(best_edges)))
      best = left, best_edges = e;
  }
  st->edges = best_edges;
  st->reorders_left = best;
  st->copy_blk[0] = own[0] ? 0 : blk;
  st->copy_blk[1] = own[1] ? 0 : blk;
  if (st->edges)
    _tsr_log(2, "layer '%s': %s%s%s reordered in tasks of its own", L->name, st->edges & TSR_EDGE_IN ? "its input" : "",
             st->edges == (TSR_EDGE_IN | TSR_EDGE_OUT) ? " and " : "", st->edges & TSR_EDGE_OUT ? "its output" : "");
  if (best)
    _tsr_log(2, "layer '%s': its tasks still reorder %s%s%s themselves (bf16 conversions, or passes that "
                "take different layouts)", L->name, best & TSR_EDGE_IN ? "its input" : "",
             best == (TSR_EDGE_IN | TSR_EDGE_OUT) ? " and " : "", best & TSR_EDGE_OUT ? "its output" : "");
  return TSR_OK;
}

static double padded(int c, int blk) { return blk ? (double)_tsr_blk_channels(c, blk) / c : 1; }

/* The convolutions' work (forward FLOPs) with their blocked activations' channels padded to blocks
 * of blk (ok: the activations that are blocked). */
static double padded_work(const tsr_trainer *t, const char *ok, int blk) {
  const tsr_model *m = t->model;
  double w = 0;
  for (int l = 0; l < m->n; l++) {
    const struct _tsr_layer *L = &m->layers[l];
    if (!t->ls[l].live || (L->spec.kind != TSR_LAYER_CONV2D && L->spec.kind != TSR_LAYER_CONV_TRANSPOSE2D))
      continue;
    struct _tsr_layer_view v;
    _tsr_model_view(m, l, &v);
    w += L->ops->flops(&v) * padded(v.in[0].c, ok[L->inputs[0]] ? blk : 0) * padded(v.out.c, ok[l] ? blk : 0);
  }
  return w;
}

/* The block the user asked for (0: none): the option, else the environment; *by names it. */
static tsr_status requested_block(const tsr_trainer_opts *o, int *set, const char **by) {
  *set = o ? o->act_block : 0, *by = "act_block (tsr_trainer_opts, tessera-train's --act-block)";
  if (!*set) *set = _tsr_env_act_block(), *by = "TESSERA_ACT_BLOCK";
  return *set && *set != 8 && *set != 16 ? _tsr_error(TSR_ERR_ARG, "%s must be 8 or 16", *by) : TSR_OK;
}

/* The channel block of the blocked activations (cpu: the CPU's widest, 16 on AVX-512, 8 on AVX2).
 * `set` (requested_block, named by `by`) sets it. Otherwise bf16 takes 16 (its kernels need it), and
 * so does float32 on AVX-512, except on CPUs that run a 512-bit FMA as two 256-bit halves (AMD Zen 4,
 * _tsr_avx512_half_width): there oneDNN's AVX2 kernels, which take blocks of 8, compute as fast per
 * FLOP, and float32 takes 8 where blocks of 16 would pad the convolutions' channels into 5% more work
 * or more (a DenseNet's layers of 8 or 12 channels fill half or three quarters of a 16-lane vector).
 * Measured on the example (layers of 8 channels: twice the work at 16) and a variant (12 channels:
 * 1.11x): blocks of 8 1.28x and 1.04x faster on a Zen 4, blocks of 16 1.1x and 1.45x faster on a Zen
 * 5 (bench/README). */
static tsr_status choose_block(const tsr_trainer *t, const char *ok, int cpu, int set, const char *by, int *blk) {
  int bf16 = _tsr_get_precision() == TSR_PRECISION_BF16;
  if (set > cpu) return _tsr_error(TSR_ERR_ARG, "%s %d: this CPU's kernels take blocks of %d at most", by, set, cpu);
  if (set == 8 && bf16)
    return _tsr_error(TSR_ERR_ARG, "%s 8 with bf16 precision: bf16 kernels take blocks of 16", by);
  *blk = set ? set : cpu;
  if (set) {
    _tsr_log(2, "activations in blocks of %d channels (%s)", *blk, by);
  } else if (cpu == 16 && !bf16 && _tsr_avx512_half_width()) {
    double w16 = padded_work(t, ok, 16), w8 = padded_work(t, ok, 8);
    if (w16 >= 1.05 * w8) *blk = 8;
    _tsr_log(2, "activations in blocks of %d channels: this CPU runs 512-bit FMAs as two halves, and the "
                "convolutions' padded work is %.3gx at 16 what it is at 8 (--act-block, TESSERA_ACT_BLOCK set "
                "the block)", *blk, w8 > 0 ? w16 / w8 : 1.0);
  } else if (cpu == 16 && !bf16) {
    _tsr_log(2, "activations in blocks of 16 channels: this CPU runs 512-bit FMAs at full width (--act-block, "
                "TESSERA_ACT_BLOCK set the block)");
  }
  return TSR_OK;
}

tsr_status _tsr_trainer_plan(tsr_trainer *t, const tsr_trainer_opts *o, int spatial) {
  const tsr_model *m = t->model;
  /* CUDA kernels take plain NCHW, and the fused and blocked kernels are CPU ones; the halo exchanges
   * and gathers of spatially split samples (spatial.c) copy plain boxes. The switch turns both off
   * (tests compare). */
  int on = starpu_cuda_worker_get_count() == 0 && !spatial && _tsr_get_blocked_fused();
  int cpu = on ? _tsr_act_block() : 0, blk = 0, set;
  const char *by;
  TSR_TRY(requested_block(o, &set, &by));
  if (set && !cpu) /* said, not refused: the run is right in plain NCHW, only the setting does nothing */
    _tsr_log(1, "%s %d is not used: activations stay plain NCHW in this run (%s)", by, set,
             starpu_cuda_worker_get_count() ? "CUDA workers" : spatial ? "samples split in space"
             : !_tsr_get_blocked_fused() ? "blocked layouts switched off" : "this CPU has no AVX2 or AVX-512 kernels");
  char *ok = calloc(m->n, 1);
  if (!ok) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  for (int l = 0; l < m->n; l++)
    ok[l] = cpu && t->ls[l].live && l != t->input_layer && l != t->output_layer &&
            layout_of(t, l) != TSR_LAYOUT_PLAIN;
  /* Candidates only drop out, so this ends within n passes. */
  for (int changed = 1; changed;) {
    changed = 0;
    for (int l = 0; l < m->n; l++)
      if (ok[l] && !keeps_blocked(t, ok, l)) ok[l] = 0, changed = 1;
  }
  tsr_status st = cpu ? choose_block(t, ok, cpu, set, by, &blk) : TSR_OK;
  if (st != TSR_OK) {
    free(ok);
    return st;
  }
  t->act_blk = blk;
  for (int l = 0; l < m->n; l++) {
    t->ls[l].blk = ok[l] ? blk : 0;
    t->ls[l].relu = -1;
  }
  free(ok);
  for (int l = 0; on && !t->async && l < m->n; l++) {
    int r = m->layers[l].ops->fuse_relu && t->ls[l].live && l != t->output_layer ? only_consumer(t, l) : -1;
    if (r < 0 || m->layers[r].spec.kind != TSR_LAYER_RELU) continue;
    t->ls[l].relu = r;
    t->ls[r].fused = 1;
  }
  for (int l = 0; l < m->n; l++) t->ls[l].bf16 = t->ls[l].gbf16 = 0;
  /* oneDNN 2.6 has bf16 kernels (convolution, pooling) only on AVX-512 CPUs, where the block is 16:
   * elsewhere bf16 convolutions fall back to float32 (said once) and nothing is stored in bf16. */
  return on && blk == 16 && _tsr_get_precision() == TSR_PRECISION_BF16 ? plan_bf16(t) : TSR_OK;
}

tsr_status _tsr_trainer_plan_edges(tsr_trainer *t) {
  /* none without blocked kernels, with CUDA workers or spatial parts */
  for (int l = 0; t->act_blk && l < t->model->n; l++) TSR_TRY(plan_edges(t, l, t->act_blk));
  return TSR_OK;
}

void _tsr_trainer_view(const tsr_trainer *t, int l, struct _tsr_layer_view *v) {
  const struct _tsr_layer *L = &t->model->layers[l];
  _tsr_model_view(t->model, l, v);
  for (int k = 0; k < L->ninputs; k++) v->in_blk[k] = t->ls[L->inputs[k]].blk;
  v->out_blk = t->ls[l].blk;
  for (int k = 0; k < L->ninputs; k++)
    v->in_bf16[k] = t->ls[L->inputs[k]].bf16, v->din_bf16[k] = t->ls[L->inputs[k]].gbf16;
  /* a fused relu's output stands for this layer's own */
  const struct _tsr_lstate *out = &t->ls[t->ls[l].relu >= 0 ? t->ls[l].relu : l];
  v->out_bf16 = out->bf16, v->dout_bf16 = out->gbf16;
}

size_t _tsr_edge_elems(const tsr_trainer *t, int l, int side) {
  struct _tsr_layer_view v;
  _tsr_trainer_view(t, l, &v);
  const struct _tsr_chw *a = side == TSR_EDGE_IN ? &v.in[0] : &v.out;
  return (size_t)_tsr_blk_channels(a->c, t->ls[l].copy_blk[side == TSR_EDGE_OUT]) * a->h * a->w;
}

/* A reorder of layer l's side `side` for slice s, between the activation and its copy. */
static int reorder(tsr_trainer *t, int l, int s, int side, int to_copy, int grad, starpu_data_handle_t from,
                   starpu_data_handle_t to) {
  struct _tsr_layer_view v;
  _tsr_trainer_view(t, l, &v);
  const struct _tsr_chw *a = side == TSR_EDGE_IN ? &v.in[0] : &v.out;
  int own = side == TSR_EDGE_IN ? v.in_blk[0] : v.out_blk, copy = t->ls[l].copy_blk[side == TSR_EDGE_OUT];
  struct _tsr_reorder_desc d = {.n = t->slice_n[s], .c = a->c, .h = a->h, .w = a->w,
                                .from_blk = to_copy ? own : copy, .to_blk = to_copy ? copy : own};
  return _tsr_insert_reorder(&d, grad, from, to, t->model->layers[l].name);
}

int _tsr_edge_before_forward(tsr_trainer *t, int l, int s, starpu_data_handle_t x) {
  return t->ls[l].edges & TSR_EDGE_IN ? reorder(t, l, s, TSR_EDGE_IN, 1, 0, x, t->ls[l].ex[s]) : 0;
}

int _tsr_edge_after_forward(tsr_trainer *t, int l, int s) {
  const struct _tsr_lstate *st = &t->ls[l];
  return st->edges & TSR_EDGE_OUT ? reorder(t, l, s, TSR_EDGE_OUT, 0, 0, st->ey[s], st->y[s]) : 0;
}

int _tsr_edge_before_backward(tsr_trainer *t, int l, int s) {
  const struct _tsr_lstate *st = &t->ls[l];
  return st->edges & TSR_EDGE_OUT ? reorder(t, l, s, TSR_EDGE_OUT, 1, 1, st->g[s], st->ey[s]) : 0;
}

int _tsr_edge_dx(tsr_trainer *t, int l, int s, starpu_data_handle_t target) {
  return t->ls[l].edges & TSR_EDGE_IN ? reorder(t, l, s, TSR_EDGE_IN, 0, 1, t->ls[l].edx[s], target) : 0;
}

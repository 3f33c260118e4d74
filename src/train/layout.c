/* How a trainer stores its activations and which layers run fused, decided once at creation.
 * Activations stay in oneDNN's blocked layout (nChw16c on AVX-512) wherever their producer and
 * every consumer handle it, so convolutions read and write it directly instead of reordering on
 * every call; the model's input and output stay plain NCHW (load, loss and predictions read them).
 * A relu that is the only consumer of an entry with fuse_relu (batchnorm) runs inside its tasks. */
#include <stdlib.h>

#include "kernel_util.h"
#include "runtime/error.h"
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

tsr_status _tsr_trainer_plan(tsr_trainer *t, int spatial) {
  const tsr_model *m = t->model;
  /* CUDA kernels take plain NCHW, and the fused and blocked kernels are CPU ones; the halo exchanges
   * and gathers of spatially split samples (spatial.c) copy plain boxes. The switch turns both off
   * (tests compare). */
  int on = starpu_cuda_worker_get_count() == 0 && !spatial && _tsr_get_blocked_fused();
  int blk = on ? _tsr_act_block() : 0;
  char *ok = calloc(m->n, 1);
  if (!ok) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  for (int l = 0; l < m->n; l++)
    ok[l] = blk && t->ls[l].live && l != t->input_layer && l != t->output_layer &&
            layout_of(t, l) != TSR_LAYOUT_PLAIN;
  /* Candidates only drop out, so this ends within n passes. */
  for (int changed = 1; changed;) {
    changed = 0;
    for (int l = 0; l < m->n; l++)
      if (ok[l] && !keeps_blocked(t, ok, l)) ok[l] = 0, changed = 1;
  }
  for (int l = 0; l < m->n; l++) {
    t->ls[l].blk = ok[l] ? blk : 0;
    t->ls[l].relu = -1;
  }
  free(ok);
  for (int l = 0; on && l < m->n; l++) {
    int r = m->layers[l].ops->fuse_relu && t->ls[l].live && l != t->output_layer ? only_consumer(t, l) : -1;
    if (r < 0 || m->layers[r].spec.kind != TSR_LAYER_RELU) continue;
    t->ls[l].relu = r;
    t->ls[r].fused = 1;
  }
  return TSR_OK;
}

void _tsr_trainer_view(const tsr_trainer *t, int l, struct _tsr_layer_view *v) {
  const struct _tsr_layer *L = &t->model->layers[l];
  _tsr_model_view(t->model, l, v);
  for (int k = 0; k < L->ninputs; k++) v->in_blk[k] = t->ls[L->inputs[k]].blk;
  v->out_blk = t->ls[l].blk;
}

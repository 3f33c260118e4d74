/* The bytes a trainer will allocate on this process (its workers share them), layer by layer, added
 * up before anything large is allocated: a model that cannot fit is refused naming its largest layer
 * instead of zero-filling buffers until the machine swaps. Mirrors layout_tensors, alloc_layer and
 * alloc_io in trainer.c, the gradients' shared buffers of grad_share.c and the reduction buffers of
 * comm/ring.c. */
#include <stdio.h>
#include <stdlib.h>

#include "train/trainer.h"
#include "runtime/error.h"
#include "runtime/memory.h"

/* zalloc's rounding to 64 bytes */
static uint64_t floats(uint64_t n) { return _tsr_add_sat(_tsr_mul_sat(n, sizeof(float)), 63) & ~(uint64_t)63; }
static uint64_t halves(uint64_t n) { return _tsr_add_sat(_tsr_mul_sat(n, sizeof(uint16_t)), 63) & ~(uint64_t)63; }

struct part {
  uint64_t params, acts;
};

/* The kinds of batch buffers, for the log: outputs (kept for backward), their gradients in buffers
 * of their own, second gradients and scratch, workspaces, copies in another layout, spatial
 * copies and slabs, layer state, inputs and targets, the buffers gradients share. */
enum { K_OUT, K_GRAD, K_TMP, K_WS, K_LAYOUT, K_SPATIAL, K_STATE, K_IO, K_SHARED, NK };

struct bad {
  tsr_status s; /* the first StarPU vector that cannot hold its elements */
};

/* A StarPU vector's element count is a uint32_t. */
static void vector_fits(struct bad *b, uint64_t n, const char *what, const char *name) {
  if (b->s != TSR_OK || n <= UINT32_MAX) return;
  b->s = _tsr_error(TSR_ERR_SHAPE,
                    "%s '%s': %llu floats in one buffer; a StarPU vector holds at most %llu (use more "
                    "slices or a smaller batch for activations)",
                    what, name, (unsigned long long)n, (unsigned long long)UINT32_MAX);
}

/* Weights, and for trainable tensors gradients (staleness + 1 sets), the optimizer's state tensors,
 * with several ranks the reduction's receive (and wire) buffers of as many bytes per set, and with several slices the later
 * slices' own weight gradients of the convolutions (private_wgrad). */
static uint64_t param_bytes(const tsr_trainer *t, int l, struct bad *b) {
  const struct _tsr_layer *L = &t->model->layers[l];
  uint64_t sum = 0;
  for (int i = 0; i < _tsr_layer_num_tensors(L); i++) {
    tsr_shape sh;
    const char *suffix;
    int trainable;
    _tsr_layer_tensor(L, t->model, i, &sh, &suffix, &trainable);
    uint64_t n = (uint64_t)tsr_shape_numel(&sh); /* exact: tsr_model_add checked it */
    vector_fits(b, n, L->name, suffix);
    /* staleness: each extra gradient set has its own reduction buffers too */
    uint64_t copies = trainable ? 2 + (uint64_t)t->optim->nstate + (t->size > 1) +
                                      (uint64_t)t->staleness * (1 + (t->size > 1)) : 1;
    sum = _tsr_add_sat(sum, _tsr_mul_sat(copies, _tsr_mul_sat((n + 15) & ~(uint64_t)15, sizeof(float))));
    if (trainable && t->async && t->slices > 1) /* asynchronous slices: later slices' own gradients */
      sum = _tsr_add_sat(sum, _tsr_mul_sat((uint64_t)t->slices - 1, floats(n)));
    else if (trainable && L->ops->private_wgrad && t->slices > 1) /* later slices' own weight gradients */
      sum = _tsr_add_sat(sum, _tsr_mul_sat((uint64_t)t->slices - 1, floats(n)));
  }
  return sum;
}

/* Values per sample of layer l's output on this rank: its block when samples are split (`plan`). */
static uint64_t out_elems(const tsr_trainer *t, const struct _tsr_sp_layer *plan, int l) {
  const struct _tsr_layer *L = &t->model->layers[l];
  if (plan && plan[l].split) return (uint64_t)_tsr_spatial_block_elems(&plan[l].out);
  return (uint64_t)_tsr_layer_elems(L);
}

/* Per slice: output and its gradient (unless it lies in a shared buffer), a second gradient where
 * two contributions meet (or the entry's scratch, where an input needs no gradient), and the
 * layer's workspace if it keeps one (max pooling: oneDNN's indices, at most 4 bytes per output
 * element); with split samples the halo'd (or gathered) input and its gradient, or the edge slabs
 * and their gradients (spatial.c's alloc_layer), and the other members' blocks of a gathered one
 * (halo messages, a few planes, are not counted); per layer its
 * state buffers; the copies of a layer's input or output in another layout. */
static uint64_t act_bytes(const tsr_trainer *t, const struct _tsr_sp_layer *plan, int parts, int l, struct bad *b,
                          uint64_t *kind) {
  const struct _tsr_layer *L = &t->model->layers[l];
  uint64_t elems = out_elems(t, plan, l) / (uint64_t)L->c * (uint64_t)_tsr_blk_channels(L->c, t->ls[l].blk), sum = 0;
  /* a gradient in a shared buffer is counted with the buffer (shared_bytes) */
  int own_grad = !(t->gs_buf && t->gs_buf[l] >= 0), act = t->ls[l].relu < 0;
  const uint64_t per[] = {[K_OUT] = act, [K_GRAD] = act && own_grad, [K_TMP] = _tsr_layer_needs_tmp(t, l),
                          [K_WS] = L->ops->workspace != NULL};
  const struct _tsr_sp_layer *P = plan ? &plan[l] : NULL;
  /* a halo'd or whole input copy and its gradient; none for a window without halos (direct) or run
   * from edge slabs, which has the slabs and, where a neighbour is and the input needs a gradient,
   * their gradients */
  int copy = P && ((P->window && !P->direct && !P->edges) || P->gather);
  uint64_t in = copy ? (uint64_t)_tsr_spatial_block_elems(&P->in) : 0;
  uint64_t edge[2 * TSR_BOX_AXES] = {0}, dedge[2 * TSR_BOX_AXES] = {0};
  for (int i = 0; P && P->edges && i < 2 * TSR_BOX_AXES; i++)
    edge[i] = (uint64_t)P->edge_len[i / 2][i % 2], dedge[i] = (uint64_t)P->dedge_len[i / 2][i % 2];
  uint64_t others = P && P->gather ? (uint64_t)(parts - 1) * out_elems(t, plan, L->inputs[0]) : 0;
  /* copies of the input (and its gradient) or output (one for it and its gradient) in another layout: layout.c */
  uint64_t ein = t->ls[l].edges & TSR_EDGE_IN ? _tsr_edge_elems(t, l, TSR_EDGE_IN) : 0;
  uint64_t eout = t->ls[l].edges & TSR_EDGE_OUT ? _tsr_edge_elems(t, l, TSR_EDGE_OUT) : 0;
  uint64_t ein_copies = 1 + (uint64_t)(L->ninputs > 0 && t->ls[L->inputs[0]].needs_grad);
#define ADD(k, bytes)                                                                                                 \
  do {                                                                                                               \
    uint64_t add_ = (bytes);                                                                                         \
    sum = _tsr_add_sat(sum, add_), kind[k] = _tsr_add_sat(kind[k], add_);                                            \
  } while (0)
  for (int s = 0; s < t->slices; s++) {
    uint64_t n = _tsr_mul_sat((uint64_t)t->slice_n[s], elems), sn = (uint64_t)t->slice_n[s];
    vector_fits(b, n, "layer", L->name);
    /* an output stored in bf16 (layout.c) takes 2 bytes a value, and so does its gradient in bf16 */
    int half[] = {[K_OUT] = t->ls[l].bf16, [K_GRAD] = t->ls[l].gbf16, [K_TMP] = 0, [K_WS] = 0};
    for (int k = K_OUT; k <= K_WS; k++) ADD(k, _tsr_mul_sat(per[k], half[k] ? halves(n) : floats(n)));
    ADD(K_LAYOUT, _tsr_mul_sat(ein_copies, floats(_tsr_mul_sat(sn, ein))));
    ADD(K_LAYOUT, floats(_tsr_mul_sat(sn, eout)));
    ADD(K_SPATIAL, _tsr_mul_sat(2, floats(_tsr_mul_sat(sn, in))));
    for (int i = 0; i < 2 * TSR_BOX_AXES; i++) {
      if (edge[i]) ADD(K_SPATIAL, floats(_tsr_mul_sat(sn, edge[i])));
      if (dedge[i]) ADD(K_SPATIAL, floats(_tsr_mul_sat(sn, dedge[i])));
    }
    ADD(K_SPATIAL, floats(_tsr_mul_sat(sn, others)));
  }
  struct _tsr_layer_view v;
  _tsr_trainer_view(t, l, &v);
  for (int i = 0; L->ops->num_state && i < L->ops->num_state(&v); i++) {
    size_t count, size;
    L->ops->state(&v, i, &count, &size);
    ADD(K_STATE, _tsr_mul_sat(_tsr_mul_sat(count, size), (uint64_t)_tsr_state_sets(t)));
  }
#undef ADD
  return sum;
}

/* The buffers that activation gradients share (grad_share.c), per slice. */
static uint64_t shared_bytes(const tsr_trainer *t) {
  uint64_t sum = 0;
  for (int b = 0; b < t->gs_n; b++)
    for (int s = 0; s < t->slices; s++)
      sum = _tsr_add_sat(sum, floats(_tsr_mul_sat((uint64_t)t->slice_n[s], t->gs_elems[b])));
  return sum;
}

/* Inputs or targets, double-buffered by step parity: `elems` values per sample. */
static uint64_t io_bytes(const tsr_trainer *t, int l, uint64_t elems, const char *what, struct bad *b) {
  const struct _tsr_layer *L = &t->model->layers[l];
  uint64_t sum = 0;
  for (int s = 0; s < t->slices; s++) {
    uint64_t n = _tsr_mul_sat((uint64_t)t->slice_n[s], elems);
    vector_fits(b, n, what, L->name);
    sum = _tsr_add_sat(sum, _tsr_mul_sat(2, floats(n)));
  }
  return sum;
}

/* ", 2 optimizer moments": the optimizer's state tensors per trainable tensor ("" for none). */
static const char *state_str(const tsr_trainer *t, char *buf, size_t cap) {
  int n = t->optim->nstate;
  if (n)
    snprintf(buf, cap, ", %d optimizer moment%s", n, n > 1 ? "s" : "");
  else
    buf[0] = '\0';
  return buf;
}

tsr_status _tsr_trainer_footprint(const tsr_trainer *t, const tsr_trainer_opts *o) {
  const tsr_model *m = t->model;
  struct bad b = {TSR_OK};
  uint64_t total = 0, top_bytes = 0, acts = 0, kind[NK] = {0};
  struct part top = {0, 0};
  int top_layer = -1, parts;
  struct _tsr_sp_layer *plan;
  TSR_TRY(_tsr_spatial_blocks(t, o, &plan, &parts)); /* this rank's blocks when samples are split */
  for (int l = 0; l < m->n; l++) {
    if (!t->ls[l].live) continue;
    struct part p = {param_bytes(t, l, &b), 0};
    if (m->layers[l].spec.kind == TSR_LAYER_INPUT) {
      p.acts = io_bytes(t, l, out_elems(t, plan, l), "inputs of", &b);
      kind[K_IO] = _tsr_add_sat(kind[K_IO], p.acts);
    } else
      p.acts = act_bytes(t, plan, parts, l, &b, kind);
    if (l == t->output_layer) {
      uint64_t whole = (uint64_t)_tsr_layer_elems(&m->layers[l]), io = io_bytes(t, l, whole, "targets of", &b);
      p.acts = _tsr_add_sat(p.acts, io), kind[K_IO] = _tsr_add_sat(kind[K_IO], io);
      for (int s = 0; plan && plan[l].split && s < t->slices; s++) {
        /* gathered for the loss: whole output and its gradient, the others' blocks */
        uint64_t g = floats(
            _tsr_mul_sat((uint64_t)t->slice_n[s], 2 * whole + (uint64_t)(parts - 1) * out_elems(t, plan, l)));
        p.acts = _tsr_add_sat(p.acts, g), kind[K_SPATIAL] = _tsr_add_sat(kind[K_SPATIAL], g);
      }
    }
    uint64_t sum = _tsr_add_sat(p.params, p.acts);
    total = _tsr_add_sat(total, sum), acts = _tsr_add_sat(acts, p.acts);
    if (top_layer < 0 || sum > top_bytes) top_layer = l, top_bytes = sum, top = p;
  }
  free(plan);
  kind[K_SHARED] = shared_bytes(t);
  total = _tsr_add_sat(total, kind[K_SHARED]), acts = _tsr_add_sat(acts, kind[K_SHARED]);
  char ab[48], pb[48], kb[NK][48];
  _tsr_log(2,
           "trainer: rank %d holds %llu bytes (%s) of batch buffers (activations, their gradients, halo'd or "
           "gathered copies, edge slabs, inputs, targets) and %s in all",
           t->rank, (unsigned long long)acts, _tsr_bytes_str(acts, ab), _tsr_bytes_str(total, pb));
  for (int k = 0; k < NK; k++) _tsr_bytes_str(kind[k], kb[k]);
  _tsr_log(2,
           "trainer: rank %d's batch buffers: outputs %s, gradients in buffers of their own %s, %d buffers the "
           "other gradients share %s, second gradients and scratch %s, workspaces %s, copies in another layout "
           "%s, spatial copies and slabs %s, layer state %s, inputs and targets %s",
           t->rank, kb[K_OUT], kb[K_GRAD], t->gs_n, kb[K_SHARED], kb[K_TMP], kb[K_WS], kb[K_LAYOUT], kb[K_SPATIAL],
           kb[K_STATE], kb[K_IO]);
  char what[256], detail[512], a[48], c[48], d[48], state[64];
  snprintf(what, sizeof what, "model '%s': training on this process (batch %d in %d slices)", m->name, t->batch,
           t->slices);
  const struct _tsr_layer *L = &m->layers[top_layer];
  snprintf(detail, sizeof detail,
           "; the largest part is %s '%s' with %s: %s of parameters (weights, gradients%s%s) and "
           "%s of batch buffers (outputs and their gradients, inputs, targets)",
           tsr_layer_kind_name(L->spec.kind), L->name, _tsr_bytes_str(top_bytes, a), _tsr_bytes_str(top.params, c),
           state_str(t, state, sizeof state), t->size > 1 ? ", reduction buffers" : "", _tsr_bytes_str(top.acts, d));
  TSR_TRY(_tsr_memory_check(total, what, detail));
  return b.s;
}

/* Layer dispatch: forward and backward of one layer on one micro-batch slice through its registry
 * entry (src/layers), which submits the tasks; the trainer only fills the entry's call with
 * handles. Gradients of a layer's output that has several consumers are summed in a fixed order:
 * the first consumer in backward order writes the gradient buffer, later ones add into it in their
 * own tasks where the entry can (edge_add, trainer.c), or write a temporary (the input's tmp, or a
 * contribution buffer in memory that gradients share: grad_share.c) that is added when the entry
 * reports it written (grad_fold). With spatially split samples
 * (spatial.c) a layer's input is exchanged with halos or gathered before its forward, and its
 * gradient handed back to the blocks when the entry reports it written. A relu fused into its
 * input's tasks (layout.c) submits nothing; that layer's entry gets the relu's output and gradient
 * handles. A layer with a copy of its input or output in another layout (layout.c) gets the copy's
 * handles, and the reorder tasks between the two are submitted around its own. */
#include "runtime/rng.h"
#include "train/trainer.h"

/* Every slice's handle of layer l's output in step parity p. */
static starpu_data_handle_t *outputs(tsr_trainer *t, int l, int p) {
  return l == t->input_layer ? t->x[p] : t->ls[l].y;
}

static uint64_t dropout_seed(const tsr_trainer *t, int l, int s, int64_t step) {
  return _tsr_splitmix64(_tsr_splitmix64(_tsr_splitmix64(t->seed ^ 0xD50Full) + (uint64_t)step) +
                         (uint64_t)l * 1000003u + (uint64_t)s);
}

static int wants(const tsr_trainer *t, int l, int k) {
  return t->ls[t->model->layers[l].inputs[k]].needs_grad;
}

struct owner {
  tsr_trainer *t;
  int l;
  int64_t step;
};

/* After a task wrote input slot k's contribution: fold it into the gradient if it went to tmp. */
static int grad_fold(void *owner, int k, int s) {
  const struct owner *o = owner;
  tsr_trainer *t = o->t;
  int j = t->model->layers[o->l].inputs[k], first = t->edge_first[o->l * TSR_MAX_CONCAT + k];
  if (t->edge_add[o->l * TSR_MAX_CONCAT + k]) return 0; /* added into the gradient (no spatial parts, no copy) */
  starpu_data_handle_t *contrib = _tsr_grad_share_contribution(t, o->l, k);
  starpu_data_handle_t target = first ? t->ls[j].g[s] : contrib ? contrib[s] : t->ls[j].tmp[s];
  if (t->sp && k == 0 && ((t->sp->l[o->l].window && !t->sp->l[o->l].direct) || t->sp->l[o->l].gather)) {
    int ret = _tsr_spatial_dx(t, o->l, s, target, o->step);
    if (ret) return ret;
  }
  if (k == 0 && t->ls[o->l].edges & TSR_EDGE_IN) { /* the copy's gradient into the input's layout */
    int ret = _tsr_edge_dx(t, o->l, s, target);
    if (ret) return ret;
  }
  if (first) return 0;
  return _tsr_insert_accumulate(t->ls[j].g[s], target, t->model->layers[o->l].name);
}

static int group_sum(void *owner, starpu_data_handle_t acc, int kind) {
  const struct owner *o = owner;
  return _tsr_spatial_sum(o->t, o->l, acc, kind, o->step);
}

starpu_data_handle_t *_tsr_layer_out_handles(const tsr_trainer *t, int l, int grad) {
  const struct _tsr_lstate *st = &t->ls[l];
  if (st->edges & TSR_EDGE_OUT) return st->ey;
  const struct _tsr_lstate *out = st->relu >= 0 ? &t->ls[st->relu] : st;
  return grad ? out->g : out->y;
}

/* The entry's view of layer l and its handles for slice s. */
static void fill_call(tsr_trainer *t, int l, int s, int p, int train, int64_t step, struct _tsr_layer_view *v,
                      struct owner *o, struct _tsr_layer_call *c) {
  const struct _tsr_layer *L = &t->model->layers[l];
  struct _tsr_lstate *st = &t->ls[l];
  _tsr_trainer_view(t, l, v);
  _tsr_spatial_view(t, l, v);
  *o = (struct owner){t, l, step};
  const struct _tsr_sp_layer *P = t->sp ? &t->sp->l[l] : NULL;
  *c = (struct _tsr_layer_call){.v = v, .s = s, .slices = t->slices, .slice_n = t->slice_n, .batch = t->batch,
                                .train = train, .seed = dropout_seed(t, l, s, step),
                                .y = _tsr_layer_out_handles(t, l, 0), .dy = _tsr_layer_out_handles(t, l, 1),
                                .scratch = st->tmp, .ws = st->ws, .relu = st->relu >= 0, .dx_done = grad_fold,
                                .owner = o, .parts = P && P->split ? t->sp->parts : 1,
                                .group_sum = P && P->split ? group_sum : NULL};
  for (int k = 0; k < L->ninputs; k++) {
    int j = L->inputs[k];
    c->x[k] = outputs(t, j, p);
    starpu_data_handle_t *contrib = _tsr_grad_share_contribution(t, l, k); /* in a shared buffer */
    int add = t->edge_add[l * TSR_MAX_CONCAT + k];
    c->dx[k] = !wants(t, l, k)                                ? NULL
               : t->edge_first[l * TSR_MAX_CONCAT + k] || add ? t->ls[j].g
               : contrib                                      ? contrib
                                                              : t->ls[j].tmp;
    c->dx_add[k] = add && c->dx[k];
  }
  if (P && P->window && !P->direct) {
    c->block = c->x[0];
    for (int a = 0; a < t->sp->nd; a++) c->lo[3 - t->sp->nd + a] = P->lo[a], c->hi[3 - t->sp->nd + a] = P->hi[a];
  }
  if (P && P->edges) { /* x[0] and dx[0] stay the block's own */
    for (int a = 0; a < t->sp->nd; a++)
      for (int side = 0, ca = 3 - t->sp->nd + a; side < 2 && P->edge_len[a][0]; side++)
        c->edge[ca][side] = P->edge[a][side], c->dedge[ca][side] = P->dedge_len[a][side] ? P->dedge[a][side] : NULL,
        c->edge_nb[ca][side] = P->edge_nb[a][side];
  } else if (P && ((P->window && !P->direct) || P->gather))
    c->x[0] = P->x, c->dx[0] = c->dx[0] ? P->dx : NULL;
  /* copies in the layout the kernels take, reordered in tasks of their own (layout.c) */
  if (st->edges & TSR_EDGE_IN) v->in_blk[0] = st->copy_blk[0], c->x[0] = st->ex, c->dx[0] = c->dx[0] ? st->edx : NULL;
  if (st->edges & TSR_EDGE_OUT) v->out_blk = st->copy_blk[1]; /* c->y, c->dy: the copy (_tsr_layer_out_handles) */
  for (int i = 0; st->first_tensor >= 0 && i < _tsr_layer_num_tensors(L); i++) {
    const struct _tsr_ptensor *pt = &t->tensors[st->first_tensor + i];
    c->w[i] = pt->hw;
    c->dw[i] = !pt->trainable ? NULL : t->async ? _tsr_async_grad(t, st->first_tensor + i, s) : pt->hg;
    c->dwp[i] = st->wp[i] ? st->wp[i][s] : NULL;
  }
  c->dw_first = st->dw_first;
  c->dw_own = t->async;
  c->slice_stats = t->async;
  for (int i = 0; i < TSR_LAYER_MAX_STATE; i++) /* each slice's own set with asynchronous slices */
    c->state[i] = st->state[i] ? st->state[i][t->async ? s : 0] : NULL;
}

int _tsr_layer_forward(tsr_trainer *t, int l, int s, int p, int train, int64_t step) {
  const struct _tsr_layer_ops *ops = t->model->layers[l].ops;
  if (!ops->forward || t->ls[l].fused) return 0;
  struct _tsr_layer_view v;
  struct owner o;
  struct _tsr_layer_call c;
  if (t->sp) {
    int ret = _tsr_spatial_before(t, l, s, outputs(t, t->model->layers[l].inputs[0], p)[s], step);
    if (ret) return ret;
  }
  if (t->ls[l].edges & TSR_EDGE_IN) {
    int ret = _tsr_edge_before_forward(t, l, s, outputs(t, t->model->layers[l].inputs[0], p)[s]);
    if (ret) return ret;
  }
  fill_call(t, l, s, p, train, step, &v, &o, &c);
  int ret = ops->forward(&c);
  return ret ? ret : _tsr_edge_after_forward(t, l, s);
}

int _tsr_layer_dx_handles(tsr_trainer *t, int l, int s, starpu_data_handle_t *h) {
  struct _tsr_layer_view v;
  struct owner o;
  struct _tsr_layer_call c;
  fill_call(t, l, s, 0, 1, 0, &v, &o, &c);
  int n = 0;
  for (int k = 0; k < t->model->layers[l].ninputs; k++) {
    if (!c.dx[k]) continue;
    int seen = 0;
    for (int i = 0; i < n; i++) seen |= h[i] == c.dx[k][s];
    if (!seen) h[n++] = c.dx[k][s];
  }
  return n;
}

int _tsr_layer_backward(tsr_trainer *t, int l, int s, int p, int64_t step) {
  const struct _tsr_layer_ops *ops = t->model->layers[l].ops;
  if (!ops->backward || t->ls[l].fused) return 0;
  struct _tsr_layer_view v;
  struct owner o;
  struct _tsr_layer_call c;
  int ret = _tsr_edge_before_backward(t, l, s);
  if (ret) return ret;
  fill_call(t, l, s, p, 1, step, &v, &o, &c);
  return ops->backward(&c);
}

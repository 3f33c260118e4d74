/* Trainer construction: slices the batch, lays parameters out contiguously in backward order
 * (so a gradient group is a contiguous range), allocates every per-slice buffer once, registers
 * the StarPU handles and initialises parameters as PyTorch does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/collective.h"
#include "train/trainer.h"
#include "kernel_util.h"
#include "runtime/env.h"
#include "runtime/error.h"

void tsr_trainer_opts_default(tsr_trainer_opts *o) {
  memset(o, 0, sizeof *o);
  o->batch = 32;
  o->window = 2;
}

static void *zalloc(size_t bytes) {
  size_t sz = (bytes + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, sz ? sz : 64);
  if (p) memset(p, 0, sz ? sz : 64);
  return p;
}

static void init_tensor(struct _tsr_ptensor *p, const tsr_trainer *t, uint64_t seed) {
  struct _tsr_layer_view v;
  _tsr_model_view(t->model, p->layer, &v);
  _tsr_layer_init(t->model->layers[p->layer].ops, &v, p->index, p->w, p->n, seed);
}

static tsr_status layout_tensors(tsr_trainer *t) {
  tsr_model *m = t->model;
  int count = 0;
  for (int l = 0; l < m->n; l++) count += t->ls[l].live ? _tsr_layer_num_tensors(&m->layers[l]) : 0;
  t->tensors = calloc(count ? count : 1, sizeof *t->tensors);
  if (!t->tensors) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  /* Backward order: the last layer's parameters first, so gradients become final front to back. */
  size_t off_p = 0, off_s = 0;
  for (int l = m->n - 1; l >= 0; l--) {
    t->ls[l].first_tensor = -1;
    if (!t->ls[l].live) continue;
    for (int i = 0; i < _tsr_layer_num_tensors(&m->layers[l]); i++) {
      struct _tsr_ptensor *p = &t->tensors[t->ntensors];
      const char *suffix;
      if (i == 0) t->ls[l].first_tensor = t->ntensors;
      _tsr_layer_tensor(&m->layers[l], m, i, &p->shape, &suffix, &p->trainable);
      snprintf(p->name, sizeof p->name, "%s.%s", m->layers[l].name, suffix);
      p->n = (size_t)tsr_shape_numel(&p->shape);
      p->layer = l, p->index = i;
      /* offsets rounded to 16 floats keep every tensor 64-byte aligned */
      size_t *off = p->trainable ? &off_p : &off_s;
      p->w = (float *)(uintptr_t)*off;
      *off += (p->n + 15) & ~(size_t)15;
      t->ntensors++;
    }
  }
  t->nparams = off_p, t->nstate = off_s;
  /* the gradient buffer starts with the control word (tsr_trainer_set_flag), then the gradients */
  int nst = t->optim->nstate;
  t->params = zalloc(off_p * 4), t->grads = zalloc((off_p + TSR_CTL_FLOATS) * 4);
  t->opt_state = zalloc((TSR_CTL_FLOATS + nst * off_p) * 4); /* laid out as grads: momentum_sync_setup */
  t->state = zalloc(off_s * 4);
  if (!t->params || !t->grads || !t->opt_state || !t->state)
    return _tsr_error(TSR_ERR_NOMEM, "trainer: cannot allocate %zu parameters", off_p);
  for (int i = 0; i < t->ntensors; i++) {
    struct _tsr_ptensor *p = &t->tensors[i];
    size_t off = (size_t)(uintptr_t)p->w;
    p->w = (p->trainable ? t->params : t->state) + off;
    init_tensor(p, t, t->seed * 1000003u + (uint64_t)i);
    p->hw = _tsr_register_floats(p->w, p->n);
    if (!p->trainable) continue;
    p->g = t->grads + TSR_CTL_FLOATS + off; /* hg: a child of its gradient group */
    for (int k = 0; k < nst; k++) {
      p->st[k] = t->opt_state + TSR_CTL_FLOATS + k * off_p + off;
      p->hst[k] = _tsr_register_floats(p->st[k], p->n);
    }
  }
  return TSR_OK;
}

/* Marks live layers (ancestors of the output), layers whose gradient is needed, and the first
 * gradient contribution of each edge in backward order. */
static tsr_status analyse(tsr_trainer *t) {
  tsr_model *m = t->model;
  t->ls[t->output_layer].live = 1;
  for (int l = m->n - 1; l >= 0; l--)
    if (t->ls[l].live)
      for (int k = 0; k < m->layers[l].ninputs; k++) t->ls[m->layers[l].inputs[k]].live = 1;
  for (int l = 0; l < m->n; l++) {
    struct _tsr_layer *L = &m->layers[l];
    t->ls[l].needs_grad = t->ls[l].live && _tsr_layer_num_tensors(L) > 0 && L->spec.kind != TSR_LAYER_INPUT;
    for (int k = 0; k < L->ninputs; k++) t->ls[l].needs_grad |= t->ls[l].live && t->ls[L->inputs[k]].needs_grad;
    /* every training step submits this layer's backward, slice 0 first (step.c) */
    t->ls[l].dw_first = L->ops->wgrad_first && L->ops->backward && t->ls[l].needs_grad;
  }
  t->edge_first = calloc((size_t)m->n * TSR_MAX_CONCAT, 1);
  char *seen = calloc(m->n, 1);
  if (!t->edge_first || !seen) {
    free(seen);
    return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  }
  seen[t->output_layer] = 1; /* the loss writes the output's gradient first */
  for (int l = m->n - 1; l >= 0; l--) {
    if (!t->ls[l].live) continue;
    for (int k = 0; k < m->layers[l].ninputs; k++) {
      int j = m->layers[l].inputs[k];
      if (!seen[j]) t->edge_first[l * TSR_MAX_CONCAT + k] = 1;
      seen[j] = 1;
    }
  }
  free(seen);
  return TSR_OK;
}

/* Later contributions that the consumer's backward adds into the gradient itself (edge_add): entries
 * with dx_add (which have no `reorders`, so no copy of the input in another layout; a gradient in
 * bf16 gets the contribution rounded and the sum rounded, as the accumulate task's), whole samples
 * (spatial parts exchange gradients of halo'd or gathered copies), and not with separate_grads
 * (every contribution in a buffer of its own: tests compare). The sum is the accumulate task's one
 * addition, done in the consumer's kernel: the same values, one pass over the gradient less and no
 * contribution buffer. */
static tsr_status plan_grad_adds(tsr_trainer *t, const tsr_trainer_opts *o, int spatial) {
  const tsr_model *m = t->model;
  if (!(t->edge_add = calloc((size_t)m->n * TSR_MAX_CONCAT, 1)))
    return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  int adds = 0;
  for (int l = 0; !spatial && !(o && o->separate_grads) && l < m->n; l++) {
    const struct _tsr_layer *L = &m->layers[l];
    if (!t->ls[l].live || !L->ops->dx_add || L->ops->reorders || L->ninputs < 1) continue;
    int j = L->inputs[0];
    t->edge_add[l * TSR_MAX_CONCAT] = !t->edge_first[l * TSR_MAX_CONCAT] && t->ls[j].needs_grad;
    adds += t->edge_add[l * TSR_MAX_CONCAT];
  }
  if (adds) _tsr_log(2, "trainer: %d gradient contributions added into their gradient by their consumers' tasks", adds);
  return TSR_OK;
}

int _tsr_layer_needs_tmp(const tsr_trainer *t, int j) {
  const tsr_model *m = t->model;
  /* the entry's scratch takes the gradients of the inputs that need none (merge.c) */
  for (int k = 0; m->layers[j].ops->scratch && k < m->layers[j].ninputs; k++)
    if (!t->ls[m->layers[j].inputs[k]].needs_grad) return 1;
  for (int l = 0; l < m->n; l++)
    for (int k = 0; k < m->layers[l].ninputs; k++)
      if (t->ls[l].live && m->layers[l].inputs[k] == j && !t->edge_first[l * TSR_MAX_CONCAT + k] &&
          !t->edge_add[l * TSR_MAX_CONCAT + k] &&
          !(t->gs_cidx && t->gs_cidx[l * TSR_MAX_CONCAT + k] >= 0)) /* else in a shared buffer (grad_share.c) */
        return 1;
  return 0;
}

#define ALLOC_SLICES(ptr) ((ptr) = calloc(t->slices, sizeof *(ptr)))

/* n floats per slice (samples times `per`) into h[] and buf[] */
static tsr_status alloc_copies(tsr_trainer *t, int l, size_t per, starpu_data_handle_t **h, float ***buf) {
  if (!ALLOC_SLICES(*h) || !ALLOC_SLICES(*buf)) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  for (int s = 0; s < t->slices; s++) {
    size_t n = (size_t)t->slice_n[s] * per;
    if (!((*buf)[s] = zalloc(n * 4)))
      return _tsr_error(TSR_ERR_NOMEM, "layer '%s': cannot allocate copies of %zu floats",
                        t->model->layers[l].name, n);
    (*h)[s] = _tsr_register_floats((*buf)[s], n);
  }
  return TSR_OK;
}

/* The copies of the input (and its gradient, when needed) or output (one buffer for it and its
 * gradient) in the layout the layer's kernels take. */
static tsr_status alloc_edges(tsr_trainer *t, int l) {
  struct _tsr_lstate *st = &t->ls[l];
  if (st->edges & TSR_EDGE_IN) {
    size_t per = _tsr_edge_elems(t, l, TSR_EDGE_IN);
    TSR_TRY(alloc_copies(t, l, per, &st->ex, &st->exbuf));
    if (t->ls[t->model->layers[l].inputs[0]].needs_grad) TSR_TRY(alloc_copies(t, l, per, &st->edx, &st->edxbuf));
  }
  if (st->edges & TSR_EDGE_OUT) {
    size_t per = _tsr_edge_elems(t, l, TSR_EDGE_OUT);
    TSR_TRY(alloc_copies(t, l, per, &st->ey, &st->eybuf));
  }
  return TSR_OK;
}

static tsr_status alloc_layer(tsr_trainer *t, int l) {
  const struct _tsr_layer *L = &t->model->layers[l];
  struct _tsr_lstate *st = &t->ls[l];
  struct _tsr_layer_view v;
  _tsr_trainer_view(t, l, &v);
  _tsr_spatial_view(t, l, &v); /* this rank's block, in the activation's layout */
  st->elems = _tsr_view_out_elems(&v);
  if (!st->live || L->spec.kind == TSR_LAYER_INPUT) return TSR_OK;
  int tmp = _tsr_layer_needs_tmp(t, l);
  if (!ALLOC_SLICES(st->y) || !ALLOC_SLICES(st->g) || !ALLOC_SLICES(st->tmp) || !ALLOC_SLICES(st->ws) ||
      !ALLOC_SLICES(st->ybuf) || !ALLOC_SLICES(st->gbuf) || !ALLOC_SLICES(st->tmpbuf) || !ALLOC_SLICES(st->wsbuf))
    return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  for (int s = 0; s < t->slices; s++) {
    size_t n = (size_t)t->slice_n[s] * st->elems;
    /* with a fused relu, the relu's output and gradient are this layer's */
    /* a gradient that shares memory with others whose lifetimes do not overlap (grad_share.c) */
    int shared = t->gs_buf && t->gs_buf[l] >= 0;
    /* an output stored in bf16 (layout.c) takes 2 bytes a value, and so does its gradient in bf16 */
    size_t ysize = st->bf16 ? 2 : 4, gsize = st->gbf16 ? 2 : 4;
    if (shared && st->elems * gsize > t->gs_elems[t->gs_buf[l]] * 4)
      return _tsr_error(TSR_ERR_RUNTIME, "layer '%s': %zu bytes per sample in a shared gradient buffer of %zu",
                        L->name, st->elems * gsize, t->gs_elems[t->gs_buf[l]] * 4);
    if (st->relu < 0 && (!(st->ybuf[s] = zalloc(n * ysize)) ||
                         !(st->gbuf[s] = shared ? _tsr_grad_share_mem(t, l, s) : zalloc(n * gsize))))
      return _tsr_error(TSR_ERR_NOMEM, "layer '%s': cannot allocate activations of %zu values", L->name, n);
    if (st->relu < 0) {
      st->y[s] = _tsr_register_values(st->ybuf[s], n, st->bf16);
      st->g[s] = _tsr_register_values(st->gbuf[s], n, st->gbf16);
    }
    if (tmp) { /* float32 sized: also the scratch of a concatenation's float32 input gradients (merge.c) */
      if (!(st->tmpbuf[s] = zalloc(n * 4))) return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory", L->name);
      /* a contribution to a bf16 gradient is bf16 too (its handle's size for the sum) */
      st->tmp[s] = _tsr_register_values(st->tmpbuf[s], n, st->gbf16);
    }
    if (L->ops->workspace) {
      size_t bytes;
      TSR_TRY(L->ops->workspace(&v, t->slice_n[s], &bytes));
      if (!(st->wsbuf[s] = zalloc(bytes))) return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory", L->name);
      starpu_vector_data_register(&st->ws[s], STARPU_MAIN_RAM, (uintptr_t)st->wsbuf[s], (uint32_t)bytes, 1);
    }
  }
  TSR_TRY(alloc_edges(t, l));
  for (int i = 0; L->ops->private_wgrad && t->slices > 1 && !t->async && i < _tsr_layer_num_tensors(L); i++) {
    const struct _tsr_ptensor *pt = &t->tensors[st->first_tensor + i];
    if (!pt->trainable) continue;
    if (!ALLOC_SLICES(st->wp[i]) || !ALLOC_SLICES(st->wpbuf[i]))
      return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
    for (int s = 1; s < t->slices; s++) {
      if (!(st->wpbuf[i][s] = zalloc(pt->n * 4)))
        return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory", L->name);
      st->wp[i][s] = _tsr_register_floats(st->wpbuf[i][s], pt->n);
    }
  }
  for (int i = 0; L->ops->num_state && i < L->ops->num_state(&v); i++) {
    size_t count, size;
    L->ops->state(&v, i, &count, &size);
    if (!ALLOC_SLICES(st->state[i]) || !ALLOC_SLICES(st->statebuf[i]))
      return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
    for (int k = 0; k < _tsr_state_sets(t); k++) {
      if (!(st->statebuf[i][k] = zalloc(count * size)))
        return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory", L->name);
      starpu_vector_data_register(&st->state[i][k], STARPU_MAIN_RAM, (uintptr_t)st->statebuf[i][k], (uint32_t)count,
                                  size);
    }
  }
  return TSR_OK;
}

static tsr_status alloc_io(tsr_trainer *t) {
  const struct _tsr_layer *out = &t->model->layers[t->output_layer];
  size_t xe = t->ls[t->input_layer].elems, ye = _tsr_layer_elems(out);
  for (int p = 0; p < 2; p++) {
    if (!ALLOC_SLICES(t->x[p]) || !ALLOC_SLICES(t->t[p]) || !ALLOC_SLICES(t->xbuf[p]) || !ALLOC_SLICES(t->tbuf[p]))
      return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
    for (int s = 0; s < t->slices; s++) {
      if (!(t->xbuf[p][s] = zalloc(t->slice_n[s] * xe * 4)) || !(t->tbuf[p][s] = zalloc(t->slice_n[s] * ye * 4)))
        return _tsr_error(TSR_ERR_NOMEM, "trainer: cannot allocate input buffers");
      t->x[p][s] = _tsr_register_floats(t->xbuf[p][s], t->slice_n[s] * xe);
      t->t[p][s] = _tsr_register_floats(t->tbuf[p][s], t->slice_n[s] * ye);
    }
  }
  /* asynchronous slices: a set of loss buffers per step in flight, so that no slice's loss task waits
   * for an earlier step's loss sum (which reads every slice's loss) */
  t->nloss = t->async ? t->window + 1 : 1;
  size_t nl = (size_t)t->nloss * t->slices;
  if (!(t->loss = calloc(nl, sizeof *t->loss)) || !(t->lossbuf = zalloc(nl * sizeof(double))))
    return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  for (size_t s = 0; s < nl; s++)
    starpu_vector_data_register(&t->loss[s], STARPU_MAIN_RAM, (uintptr_t)&t->lossbuf[s], 1, sizeof(double));
  t->pending = calloc(t->window + 1, sizeof *t->pending);
  for (int i = 0; t->pending && i <= t->window; i++) t->pending[i].step = -1;
  return t->pending ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
}

/* The options of multi-rank runs that fall back to the environment (runtime/env.h). */
static void multirank_opts(tsr_trainer *t, const tsr_trainer_opts *o) {
  t->skip_reduce = o->skip_reduce ? o->skip_reduce > 0 : _tsr_env_skip_reduce();
  int block = o->skip_reduce_block, bad = !block && _tsr_env_skip_reduce_block(&block) < 0;
  t->skip_block = bad ? -1 : block > 0 ? block : 0;
  t->use_nccl = o->nccl ? o->nccl > 0 : !_tsr_env_no_nccl();
  double env;
  if (o->step_timeout) t->step_timeout = o->step_timeout;
  else if (_tsr_env_step_timeout(&env)) t->step_timeout = env > 0 ? env : -1; /* <= 0: no limit */
  else t->step_timeout = 0;                                                  /* adaptive */
}

/* Benchmarks: reductions on and off in alternate blocks of steps (tsr_trainer_opts.skip_reduce_block)
 * need steps that do not depend on earlier steps' reductions. */
static tsr_status check_skip_block(const tsr_trainer *t) {
  if (t->skip_block < 0)
    return _tsr_error(TSR_ERR_ARG, "TESSERA_SKIP_ALLREDUCE: 'alternate' takes a block of steps, as in alternate:8");
  if (!t->skip_block) return TSR_OK;
  const char *why = t->skip_reduce ? "skip_reduce (every step skips them)"
                    : t->staleness ? "staleness > 0 (--staleness: updates wait for earlier steps)"
                    : t->async     ? "asynchronous slices (--async-slices: updates without reductions)"
                    : t->groups.ops && t->groups.ops->signs ? "sign reductions (momentum kept in step across ranks)"
                                                            : NULL;
  if (why)
    return _tsr_error(TSR_ERR_ARG, "skip_reduce_block %d (reductions in alternate blocks of steps) cannot go with %s",
                      t->skip_block, why);
  if (t->size > 1 && t->rank == 0)
    _tsr_log(1, "skip_reduce_block %d: every other block of %d training steps does NOT reduce gradients across ranks "
             "(benchmark mode)", t->skip_block, t->skip_block);
  return TSR_OK;
}

/* Does the run split samples over ranks (tsr_trainer_opts.spatial)? */
static int spatial_split(const tsr_trainer_opts *o) {
  for (int a = 0; a < TSR_SPATIAL_MAX_AXES; a++)
    if (o->spatial[a] > 1) return 1;
  return 0;
}

static tsr_status find_io(tsr_trainer *t) {
  tsr_model *m = t->model;
  t->input_layer = -1;
  for (int l = 0; l < m->n; l++)
    if (m->layers[l].spec.kind == TSR_LAYER_INPUT) {
      if (t->input_layer >= 0)
        return _tsr_error(TSR_ERR_ARG, "model '%s': more than one input layer ('%s' and '%s')", m->name,
                          m->layers[t->input_layer].name, m->layers[l].name);
      t->input_layer = l;
    }
  if (t->input_layer < 0) return _tsr_error(TSR_ERR_ARG, "model '%s' has no input layer", m->name);
  t->output_layer = _tsr_model_output(m);
  if (m->layers[t->output_layer].spec.kind == TSR_LAYER_INPUT)
    return _tsr_error(TSR_ERR_ARG, "model '%s': the output is the input layer", m->name);
  return TSR_OK;
}

/* Static: a fixed multiplier. Dynamic: the scaler state in a handle that the step's tasks read and
 * write (src/optim/loss_scale.c). */
static tsr_status setup_loss_scale(tsr_trainer *t, const tsr_trainer_opts *o) {
  if (t->loss_scale == 0) return TSR_OK;
  if (t->loss_scale > 0 && t->loss_scale <= 0x1p127) return TSR_OK;
  if (t->loss_scale != TSR_LOSS_SCALE_DYNAMIC)
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_create: loss_scale = %g (0 off, a scale in (0, 2^127], or "
                      "TSR_LOSS_SCALE_DYNAMIC)", t->loss_scale);
  t->scaler_state = calloc(1, sizeof *t->scaler_state);
  if (!t->scaler_state) return _tsr_error(TSR_ERR_NOMEM, "tsr_trainer_create: out of memory");
  t->loss_scale_init = o->loss_scale_init ? o->loss_scale_init : 65536.0;
  TSR_TRY(_tsr_loss_scaler_init(&t->scaler, t->scaler_state, t->loss_scale_init,
                                o->loss_scale_interval ? o->loss_scale_interval : 2000));
  starpu_variable_data_register(&t->scaler_h, STARPU_MAIN_RAM, (uintptr_t)t->scaler_state, sizeof *t->scaler_state);
  return TSR_OK;
}

tsr_status tsr_trainer_loss_scale_get(tsr_trainer *t, tsr_loss_scale_state *out) {
  if (!t || !out) return _tsr_error(TSR_ERR_ARG, "tsr_trainer_loss_scale_get: trainer and state are required");
  if (!t->scaler_h) return _tsr_error(TSR_ERR_STATE, "tsr_trainer_loss_scale_get: no dynamic loss scaling");
  int ret = starpu_data_acquire(t->scaler_h, STARPU_R);
  if (ret) return _tsr_error(TSR_ERR_RUNTIME, "loss scaler: starpu_data_acquire failed (%d)", ret);
  const struct _tsr_scale_state *s = t->scaler_state;
  *out = (tsr_loss_scale_state){.scale = s->scale, .good_steps = s->good_steps, .steps = s->steps,
                                .skipped = s->skipped};
  starpu_data_release(t->scaler_h);
  return TSR_OK;
}

tsr_status tsr_trainer_loss_scale_set(tsr_trainer *t, const tsr_loss_scale_state *in) {
  if (!t || !in) return _tsr_error(TSR_ERR_ARG, "tsr_trainer_loss_scale_set: trainer and state are required");
  if (!t->scaler_h) return _tsr_error(TSR_ERR_STATE, "tsr_trainer_loss_scale_set: no dynamic loss scaling");
  if (!(in->scale > 0) || in->scale > 0x1p127 || in->good_steps < 0 || in->steps < 0 || in->skipped < 0 ||
      in->skipped > in->steps || in->good_steps > in->steps)
    return _tsr_error(TSR_ERR_ARG, "loss scaler state: scale %g, good steps %lld, steps %lld, skipped %lld", in->scale,
                      (long long)in->good_steps, (long long)in->steps, (long long)in->skipped);
  int ret = starpu_data_acquire(t->scaler_h, STARPU_W);
  if (ret) return _tsr_error(TSR_ERR_RUNTIME, "loss scaler: starpu_data_acquire failed (%d)", ret);
  struct _tsr_scale_state *s = t->scaler_state;
  *s = (struct _tsr_scale_state){.scale = in->scale, .unscale = 1.0f, .apply = 1, .good_steps = (int)in->good_steps,
                                 .steps = in->steps, .skipped = in->skipped};
  starpu_data_release(t->scaler_h);
  return TSR_OK;
}

tsr_status tsr_trainer_create(tsr_trainer **out, tsr_context *ctx, tsr_model *m, const tsr_optim_spec *opt,
                              const tsr_trainer_opts *o) {
  if (!out || !ctx || !m) return _tsr_error(TSR_ERR_ARG, "tsr_trainer_create: trainer, context and model are required");
  *out = NULL;
  tsr_trainer_opts def;
  tsr_trainer_opts_default(&def);
  if (!o) o = &def;
  if (o->batch <= 0) return _tsr_error(TSR_ERR_ARG, "tsr_trainer_create: batch = %d must be positive", o->batch);
  _tsr_kernel_error_clear(); /* an earlier trainer's kernel failure is not this one's */
  char names[256];
  if (!_tsr_collective_name(o->grad_reduce))
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_create: grad_reduce = %d (a tsr_reduce_precision: %s)", o->grad_reduce,
                      _tsr_collective_names(names, sizeof names));
  if (o->slices < 0 || o->window < 0)
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_create: slices %d and window %d must not be negative", o->slices, o->window);
  if (m->n == 0) return _tsr_error(TSR_ERR_ARG, "tsr_trainer_create: model '%s' has no layers", m->name);
  tsr_optim_spec dopt = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  if (!opt) opt = &dopt;
  const struct _tsr_optim_ops *optim = _tsr_optim_ops_of(opt->kind);
  if (!optim || !(opt->lr >= 0))
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_create: optimizer kind %d, lr %g", (int)opt->kind, opt->lr);
  TSR_TRY(_tsr_optim_check(opt));
  tsr_trainer *t = calloc(1, sizeof *t);
  if (!t) return _tsr_error(TSR_ERR_NOMEM, "tsr_trainer_create: out of memory");
  t->ctx = ctx, t->model = m, t->opt = *opt, t->optim = optim, t->lr = opt->lr, t->batch = o->batch;
  t->window = o->window ? o->window : 2;
  t->rank = tsr_context_rank(ctx), t->size = tsr_context_size(ctx);
  /* Benchmarks only: measure the step without its reductions (results are then wrong). */
  multirank_opts(t, o);
  if (t->skip_reduce && t->size > 1 && t->rank == 0)
    _tsr_log(1, "skip_reduce (TESSERA_SKIP_ALLREDUCE) is set: gradients are NOT reduced across ranks (benchmark mode)");
  t->seed = o->seed ? o->seed : tsr_context_seed(ctx);
  t->check_finite = o->check_finite;
  /* for the footprint and the fingerprint; checked by _tsr_staleness_check_opts (sign reductions: check_signs) */
  t->staleness = o->staleness > 0 && o->staleness <= TSR_MAX_STALENESS ? o->staleness : 0;
  t->loss_scale = o->loss_scale;
  t->async = o->async_slices != 0, t->last_train = -1;
  _tsr_finite_init(&t->nonfinite);
  int nw = (int)starpu_cpu_worker_get_count() + (int)starpu_cuda_worker_get_count();
  t->slices = o->slices ? o->slices : (nw > 0 ? nw : 1);
  if (t->slices > t->batch) t->slices = t->batch;
  /* Before any step is timed, the step deadline (step.c) assumes the rank's step (forward and
   * backward: 3x the forward's multiply-adds, 2 FLOPs each) runs at 1 GFLOP/s per worker, far below
   * any core's rate: a first step of a large model is not taken for a dead peer after 30 s. */
  t->first_step = 6.0 * tsr_model_forward_flops(m) * t->batch / (1e9 * (nw > 0 ? nw : 1));
  t->slice_n = calloc(t->slices, sizeof(int));
  t->slice_off = calloc(t->slices, sizeof(int));
  t->ls = calloc(m->n, sizeof *t->ls);
  t->history_cap = 1024;
  t->history = calloc(t->history_cap, sizeof(double));
  t->flag_history = calloc(t->history_cap, sizeof(double));
  tsr_status st = (!t->slice_n || !t->slice_off || !t->ls || !t->history || !t->flag_history)
                      ? _tsr_error(TSR_ERR_NOMEM, "tsr_trainer_create: out of memory")
                      : TSR_OK;
  for (int s = 0, off = 0; st == TSR_OK && s < t->slices; s++) {
    t->slice_n[s] = t->batch / t->slices + (s < t->batch % t->slices);
    t->slice_off[s] = off;
    off += t->slice_n[s];
  }
  if (st == TSR_OK) st = _tsr_staleness_check_opts(t, o);
  if (st == TSR_OK) st = _tsr_async_check_opts(t, o);
  if (st == TSR_OK) st = _tsr_slow_setup(t);
  if (st == TSR_OK) st = setup_loss_scale(t, o);
  if (st == TSR_OK) st = find_io(t);
  if (st == TSR_OK) st = analyse(t);
  if (st == TSR_OK) st = _tsr_trainer_plan(t, o, spatial_split(o));
  if (st == TSR_OK) st = plan_grad_adds(t, o, spatial_split(o));
  if (st == TSR_OK) st = _tsr_grad_share_plan(t, o, spatial_split(o));
  if (st == TSR_OK) st = _tsr_trainer_footprint(t, o);
  if (st == TSR_OK) st = _tsr_trainer_plan_edges(t);
  if (st == TSR_OK) st = _tsr_trainer_footprint(t, o); /* with the copies */
  if (st == TSR_OK) st = layout_tensors(t);
  if (st == TSR_OK) st = _tsr_reduce_setup(t, o);
  if (st == TSR_OK) st = check_skip_block(t);
  if (st == TSR_OK) st = _tsr_async_setup(t);
  for (int l = 0; st == TSR_OK && l < m->n; l++) st = alloc_layer(t, l);
  if (st == TSR_OK) st = _tsr_grad_share_alloc(t);
  if (st == TSR_OK) st = alloc_io(t);
  if (st != TSR_OK) {
    tsr_trainer_destroy(t);
    return st;
  }
  _tsr_log(2, "trainer: batch %d in %d slices, %d tensors, %zu parameters", t->batch, t->slices, t->ntensors,
           t->nparams);
  *out = t;
  return TSR_OK;
}

static void unreg_slices(starpu_data_handle_t *h, void **buf, int n) {
  for (int s = 0; s < n; s++) {
    if (h && h[s]) starpu_data_unregister(h[s]);
    if (buf) free(buf[s]);
  }
  free(h);
  free(buf);
}

void tsr_trainer_destroy(tsr_trainer *t) {
  if (!t) return;
  starpu_task_wait_for_all();
  for (int i = 0; t->pending && i <= t->window; i++)
    if (t->pending[i].task && starpu_task_wait(t->pending[i].task) != 0)
      _tsr_log(1, "trainer: waiting for the loss task of step %lld failed", (long long)t->pending[i].step);
  for (int l = 0; t->ls && l < t->model->n; l++) {
    struct _tsr_lstate *st = &t->ls[l];
    unreg_slices(st->y, (void **)st->ybuf, t->slices);
    if (t->gs_buf && t->gs_buf[l] >= 0) { /* the memory is the shared buffer's */
      unreg_slices(st->g, NULL, t->slices);
      free(st->gbuf);
    } else
      unreg_slices(st->g, (void **)st->gbuf, t->slices);
    unreg_slices(st->tmp, (void **)st->tmpbuf, t->slices);
    unreg_slices(st->ws, st->wsbuf, t->slices);
    unreg_slices(st->ex, (void **)st->exbuf, st->exbuf ? t->slices : 0);
    unreg_slices(st->edx, (void **)st->edxbuf, st->edxbuf ? t->slices : 0);
    unreg_slices(st->ey, (void **)st->eybuf, st->eybuf ? t->slices : 0);
    for (int i = 0; i < TSR_LAYER_MAX_TENSORS; i++)
      unreg_slices(st->wp[i], (void **)st->wpbuf[i], st->wpbuf[i] ? t->slices : 0);
    for (int i = 0; i < TSR_LAYER_MAX_STATE; i++)
      unreg_slices(st->state[i], st->statebuf[i], st->statebuf[i] ? _tsr_state_sets(t) : 0);
  }
  for (int p = 0; p < 2; p++) {
    unreg_slices(t->x[p], (void **)t->xbuf[p], t->slices);
    unreg_slices(t->t[p], (void **)t->tbuf[p], t->slices);
  }
  unreg_slices(t->loss, NULL, t->loss ? t->nloss * t->slices : 0);
  _tsr_async_teardown(t);
  _tsr_reduce_teardown(t);
  if (t->scaler_h) starpu_data_unregister(t->scaler_h);
  free(t->scaler_state);
  for (int i = 0; i < t->ntensors; i++) {
    struct _tsr_ptensor *p = &t->tensors[i];
    if (p->hw) starpu_data_unregister(p->hw);
    for (int k = 0; k < TSR_OPTIM_MAX_STATE; k++)
      if (p->hst[k]) starpu_data_unregister(p->hst[k]);
  }
  free(t->params), free(t->grads), free(t->opt_state), free(t->state);
  _tsr_grad_share_free(t);
  free(t->tensors), free(t->ls), free(t->edge_first), free(t->edge_add), free(t->slice_n), free(t->slice_off);
  free(t->lossbuf), free(t->pending), free(t->history), free(t->flag_history);
  free(t->norm_mean), free(t->norm_std), free(t->tnorm_mean), free(t->tnorm_std);
  pthread_mutex_destroy(&t->nonfinite.lock);
  free(t);
}

void tsr_trainer_set_lr(tsr_trainer *t, float lr) { if (t) t->lr = lr; }
void tsr_trainer_optim(const tsr_trainer *t, tsr_optim_spec *opt) { *opt = t->opt; }

void tsr_trainer_loss_scale_options(const tsr_trainer *t, double *loss_scale, double *init, int *interval) {
  if (loss_scale) *loss_scale = t->loss_scale;
  if (init) *init = t->scaler_h ? t->loss_scale_init : 0;
  if (interval) *interval = t->scaler_h ? t->scaler.growth_interval : 0;
}
void tsr_trainer_set_flag(tsr_trainer *t, float value) { if (t) t->flag = value; }
int tsr_trainer_batch(const tsr_trainer *t) { return t->batch; }

void tsr_trainer_input_shape(const tsr_trainer *t, int *c, int *h, int *w) {
  tsr_model_layer_shape(t->model, t->model->layers[t->input_layer].name, c, h, w);
}

void tsr_trainer_target_shape(const tsr_trainer *t, int *c, int *h, int *w) {
  tsr_model_layer_shape(t->model, t->model->layers[t->output_layer].name, c, h, w);
}

int tsr_trainer_num_tensors(const tsr_trainer *t) { return t ? t->ntensors : 0; }

tsr_status tsr_trainer_tensor_info(const tsr_trainer *t, int i, const char **name, tsr_shape *shape, int *trainable) {
  if (!t || i < 0 || i >= t->ntensors)
    return _tsr_error(TSR_ERR_ARG, "tensor index %d out of range [0, %d)", i, t ? t->ntensors : 0);
  if (name) *name = t->tensors[i].name;
  if (shape) *shape = t->tensors[i].shape;
  if (trainable) *trainable = t->tensors[i].trainable;
  return TSR_OK;
}

int tsr_trainer_tensor_find(const tsr_trainer *t, const char *name) {
  for (int i = 0; t && name && i < t->ntensors; i++)
    if (strcmp(t->tensors[i].name, name) == 0) return i;
  return -1;
}

/* Copies between user memory and one buffer of tensor i: which = -1 the tensor, else that state
 * tensor of the optimizer. */
static tsr_status tensor_io(tsr_trainer *t, int i, int which, float *dst, const float *src) {
  TSR_TRY(tsr_trainer_tensor_info(t, i, NULL, NULL, NULL));
  struct _tsr_ptensor *p = &t->tensors[i];
  if (!dst && !src) return _tsr_error(TSR_ERR_ARG, "tensor '%s': data pointer is NULL", p->name);
  if (which >= 0 && (!p->trainable || which >= t->optim->nstate))
    return _tsr_error(TSR_ERR_ARG, "tensor '%s' has no optimizer moment %d (%s keeps %d per trainable tensor)",
                      p->name, which, t->optim->name, t->optim->nstate);
  TSR_TRY(_tsr_flush_updates(t)); /* staleness: the tensors after every submitted step's update */
  starpu_data_handle_t h = which < 0 ? p->hw : p->hst[which];
  float *buf = which < 0 ? p->w : p->st[which];
  int ret = starpu_data_acquire(h, dst ? STARPU_R : STARPU_W);
  if (ret) return _tsr_error(TSR_ERR_RUNTIME, "tensor '%s': starpu_data_acquire failed (%d)", p->name, ret);
  if (dst)
    memcpy(dst, buf, p->n * sizeof(float));
  else
    memcpy(buf, src, p->n * sizeof(float));
  starpu_data_release(h);
  return TSR_OK;
}

tsr_status tsr_trainer_tensor_get(tsr_trainer *t, int i, float *out) { return tensor_io(t, i, -1, out, NULL); }
tsr_status tsr_trainer_tensor_set(tsr_trainer *t, int i, const float *in) { return tensor_io(t, i, -1, NULL, in); }
tsr_status tsr_trainer_moment_get(tsr_trainer *t, int i, int moment, float *out) {
  return tensor_io(t, i, moment < 0 ? TSR_OPTIM_MAX_STATE : moment, out, NULL);
}
tsr_status tsr_trainer_moment_set(tsr_trainer *t, int i, int moment, const float *in) {
  return tensor_io(t, i, moment < 0 ? TSR_OPTIM_MAX_STATE : moment, NULL, in);
}

void tsr_trainer_counters(const tsr_trainer *t, int64_t *steps, int64_t *updates) {
  if (steps) *steps = t->nsteps;
  if (updates) *updates = t->nupdates;
}

tsr_status tsr_trainer_set_counters(tsr_trainer *t, int64_t steps, int64_t updates) {
  if (!t || steps < 0 || updates < 0 || updates > steps)
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_set_counters: steps %lld, updates %lld", (long long)steps,
                      (long long)updates);
  TSR_TRY(tsr_trainer_sync(t));
  /* Earlier steps' losses are no longer addressable by id: the history restarts at `steps`. */
  TSR_TRY(_tsr_history_reserve(t, steps));
  for (int i = 0; i <= t->window; i++) t->pending[i].step = -1;
  t->nsteps = steps, t->nupdates = updates;
  _tsr_finite_reset(&t->nonfinite);
  return TSR_OK;
}

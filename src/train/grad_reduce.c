/* The trainer's side of the gradient reductions: the world communicator and the batch split over
 * it (or over the replicas of spatial parallelism: the reductions still sum over every rank, which
 * is the sum over each spatial group of its blocks' shares, then over the replicas), the
 * gradient-buffer view of the trainer's tensors that src/comm cuts into groups, the collective
 * picked by name (tsr_trainer_opts.grad_reduce; a sign reduction needs an optimizer that splits its
 * update, and may average the momenta every k steps), and the public queries about groups, bytes
 * and reduction names. */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/collective.h"
#include "sign_wire.h"
#include "train/fingerprint.h"
#include "train/trainer.h"
#include "runtime/env.h"
#include "runtime/error.h"

/* Group size: the API's, else TESSERA_GROUP_BYTES, else the model file's, else the default. */
static long long group_bytes(const tsr_trainer_opts *o, const tsr_model *m) {
  if (o->group_bytes) return o->group_bytes;
  long long env = _tsr_env_group_bytes();
  if (env) return env;
  if (m->group_bytes) return m->group_bytes;
  return TSR_DEFAULT_GROUP_BYTES;
}

/* The algorithm: the API's, else TESSERA_COLLECTIVE, else NULL (the registry's first that runs). */
static tsr_status collective(const tsr_trainer_opts *o, const char **algo) {
  *algo = o->collective ? o->collective : _tsr_env_collective();
  char names[128];
  if (*algo && !_tsr_collective_algo_known(*algo))
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_create: collective '%s'%s (%s)", *algo,
                      o->collective ? "" : " from TESSERA_COLLECTIVE", _tsr_collective_algos(names, sizeof names));
  return TSR_OK;
}

tsr_status _tsr_grad_groups_build(tsr_trainer *t, const tsr_trainer_opts *o, struct _tsr_groups *gs, float *buf) {
  TSR_TRY(collective(o, &gs->algo));
  struct _tsr_grad_tensor *gt = calloc(t->ntensors ? t->ntensors : 1, sizeof *gt);
  if (!gt) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  for (int i = 0; i < t->ntensors; i++) {
    const struct _tsr_ptensor *p = &t->tensors[i];
    gt[i] = (struct _tsr_grad_tensor){.name = p->name, .off = p->trainable ? (size_t)(p->g - t->grads) : 0,
                                      .n = p->n, .layer = p->layer, .trainable = p->trainable};
  }
  struct _tsr_grad_view v = {.buf = buf, .keep = TSR_CTL_FLOATS, .ntensors = t->ntensors, .tensors = gt};
  tsr_status st = _tsr_groups_build(gs, &v, &t->world, group_bytes(o, t->model),
                                    _tsr_collective_name(o->grad_reduce), t->use_nccl ? NULL : "nccl");
  free(gt);
  return st;
}

/* A reduction of update directions needs an optimizer with direction and apply halves, and whole
 * gradients: under spatial parallelism each rank's gradient is only its block's share, so the signs
 * it would send (and the vote over them) are not those of the sample's gradient. Checked from the
 * options alone, before the spatial set-up, so the refusal is the same at every number of ranks. */
static tsr_status check_signs(const tsr_trainer *t, const tsr_trainer_opts *o) {
  const char *name = _tsr_collective_name(o->grad_reduce);
  const struct _tsr_collective_ops *c = _tsr_collective_select(name, &t->world, NULL);
  if (!c || !c->signs) return TSR_OK;
  if (!t->optim->direction)
    return _tsr_error(TSR_ERR_ARG, "gradient reduction '%s' combines update directions: optimizer %s has none (lion has)",
                      name, t->optim->name);
  if (t->loss_scale < 0)
    return _tsr_error(TSR_ERR_ARG, "gradient reduction '%s' does not work with dynamic loss scaling (the reduction "
                      "carries no gradient to check for overflow)", name);
  int last = -1; /* the last split axis */
  for (int a = 0; a < TSR_SPATIAL_MAX_AXES; a++)
    if (o->spatial[a] > 1) last = a;
  char grid[48] = "";
  for (int a = 0; a <= last; a++)
    snprintf(grid + strlen(grid), sizeof grid - strlen(grid), "%s%d", a ? "x" : "", o->spatial[a] > 1 ? o->spatial[a] : 1);
  if (last >= 0)
    return _tsr_error(TSR_ERR_ARG, "gradient reduction '%s' (grad_reduce, --grad-reduce) does not work with spatial "
                      "parallelism (spatial %s, --spatial): each rank's gradient is only its block's share, so the "
                      "signs would be those of partial gradients; use f32, bf16 or fp16", name, grid);
  if (o->staleness > 0)
    return _tsr_error(TSR_ERR_ARG, "staleness %d (--staleness) does not work with gradient reduction '%s' "
                      "(--grad-reduce): sign reductions split each update around the reduction; use f32, bf16 or "
                      "fp16, or staleness 0", o->staleness, name);
  return TSR_OK;
}

/* Whether tensor p's momentum is averaged: every tensor's without momentum_sync_layers, else those
 * of a layer or tensor name one of its comma-separated shell patterns matches. */
static int msync_chosen(const tsr_trainer *t, const struct _tsr_ptensor *p) {
  const char *list = t->opt.momentum_sync_layers;
  if (!list[0]) return 1;
  char pat[TSR_OPTIM_NAMES];
  for (const char *s = list; *s; s += *s == ',') {
    size_t n = strcspn(s, ",");
    snprintf(pat, sizeof pat, "%.*s", (int)n, s);
    s += n;
    if (pat[0] && (fnmatch(pat, t->model->layers[p->layer].name, 0) == 0 || fnmatch(pat, p->name, 0) == 0)) return 1;
  }
  return 0;
}

/* The momentum_sync keys, checked at every number of ranks: layers need a period, and their patterns
 * must name at least one trainable tensor; Lion's period (extra[0]) needs a sign reduction, since only
 * there do the ranks' momenta drift apart (a float reduction hands every rank the same averaged
 * gradient, so the momenta are already equal and the averaging would only send bytes). */
static tsr_status check_msync(const tsr_trainer *t, const tsr_trainer_opts *o) {
  const char *list = t->opt.momentum_sync_layers;
  float every = t->opt.extra[TSR_HYPER_SYNC_EVERY];
  if (list[0] && every < 1)
    return _tsr_error(TSR_ERR_ARG, "optimizer: momentum_sync_layers '%s' needs momentum_sync_every >= 1 (the steps "
                      "between averagings), got %g", list, (double)every);
  int chosen = !list[0];
  for (int i = 0; !chosen && i < t->ntensors; i++) chosen = t->tensors[i].trainable && msync_chosen(t, &t->tensors[i]);
  if (!chosen)
    return _tsr_error(TSR_ERR_ARG, "optimizer: momentum_sync_layers '%s' matches no layer or tensor with parameters of "
                      "model '%s'", list, t->model->name);
  const char *name = _tsr_collective_name(o->grad_reduce);
  const struct _tsr_collective_ops *c = _tsr_collective_select(name, &t->world, NULL);
  if (t->opt.kind == TSR_OPTIM_LION && every >= 1 && !(c && c->signs))
    return _tsr_error(TSR_ERR_ARG, "optimizer: momentum_sync_every %g needs a sign reduction (grad_reduce, "
                      "--grad-reduce: sign1, signp or signp_mean), got gradient reduction '%s': it averages the "
                      "gradients, so every rank already holds the same momenta", (double)every, name ? name : "?");
  return TSR_OK;
}

/* Momentum synchronisation under a sign reduction: the first state tensor (the momentum) of every
 * chosen trainable tensor (msync_chosen), laid out like the gradients, cut into groups (contiguous
 * runs of chosen tensors) and averaged in float32 over its own communicator (a tag space apart from
 * the sign reduction's) every momentum_sync_every steps. The groups' children replace the chosen
 * tensors' state handles. */
static tsr_status momentum_sync_setup(tsr_trainer *t, const tsr_trainer_opts *o) {
  TSR_TRY(check_msync(t, o));
  t->msync_every = (int64_t)t->opt.extra[TSR_HYPER_SYNC_EVERY];
  if (!t->groups.ops || !t->groups.ops->signs || t->msync_every <= 0) return t->msync_every = 0, TSR_OK;
  struct _tsr_grad_tensor *gt = calloc(t->ntensors ? t->ntensors : 1, sizeof *gt);
  if (!gt) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  for (int i = 0; i < t->ntensors; i++) {
    const struct _tsr_ptensor *p = &t->tensors[i];
    int chosen = p->trainable && msync_chosen(t, p);
    gt[i] = (struct _tsr_grad_tensor){.name = p->name, .off = chosen ? (size_t)(p->st[0] - t->opt_state) : 0,
                                      .n = p->n, .layer = p->layer, .trainable = chosen};
  }
  struct _tsr_grad_view v = {.buf = t->opt_state, .keep = 0, .ntensors = t->ntensors, .tensors = gt};
  tsr_status st = _tsr_comm_split(&t->world, 0, t->rank, &t->msync_comm);
  if (st == TSR_OK) st = _tsr_groups_build(&t->msync, &v, &t->msync_comm, group_bytes(o, t->model), "f32", "nccl");
  free(gt);
  TSR_TRY(st);
  for (int i = 0; i < t->ntensors; i++)
    if (t->msync.grad[i]) {
      starpu_data_unregister(t->tensors[i].hst[0]);
      t->tensors[i].hst[0] = t->msync.grad[i];
    }
  return _tsr_groups_start(&t->msync);
}

/* After gradient group g's directions (which advance its momenta): the averaging of every momentum
 * group whose tensors are all final by then, at the steps of the period. */
int _tsr_momentum_sync(tsr_trainer *t, int g, int64_t step) {
  if (t->msync_every <= 0 || t->nupdates % t->msync_every != 0) return 0;
  if (g == 0) t->msync_next = 0;
  int ret = 0;
  for (; !ret && t->msync_next < t->msync.n && t->msync.g[t->msync_next].end <= t->groups.g[g].end; t->msync_next++) {
    const struct _tsr_group *gr = &t->msync.g[t->msync_next];
    ret = _tsr_group_allreduce(&t->msync, t->msync_next, step);
    for (int i = gr->first; !ret && i < gr->end; i++)
      if (t->msync.grad[i])
        ret = _tsr_insert_sign_finish(t->tensors[i].hst[0], TSR_SIGN_MEAN, t->msync_comm.size, "momentum_mean");
  }
  return ret;
}

tsr_status _tsr_reduce_setup(tsr_trainer *t, const tsr_trainer_opts *o) {
  TSR_TRY(_tsr_comm_world(&t->world, t->rank, t->size));
  TSR_TRY(check_signs(t, o)); /* t->staleness, set and checked at creation, is in the fingerprint */
  TSR_TRY(_tsr_spatial_setup(t, o)); /* the batch over every rank, or over the spatial groups */
  TSR_TRY(_tsr_grad_groups_build(t, o, &t->groups, t->grads));
  t->groups.algo = NULL; /* the caller's string: read by the choice only */
  for (int i = 0; i < t->ntensors; i++) t->tensors[i].hg = t->groups.grad[i];
  t->ctl = t->groups.head;
  if (t->size > 1) TSR_TRY(_tsr_fingerprint_check(t));
  TSR_TRY(_tsr_groups_start(&t->groups));
  TSR_TRY(momentum_sync_setup(t, o));
  return _tsr_staleness_setup(t, o);
}

void _tsr_reduce_teardown(tsr_trainer *t) {
  _tsr_staleness_teardown(t);
  _tsr_groups_destroy(&t->groups);
  if (t->msync_every > 0) { /* the chosen tensors' state handles were its children */
    for (int i = 0; i < t->ntensors; i++)
      if (t->msync.grad[i]) t->tensors[i].hst[0] = NULL;
    _tsr_groups_destroy(&t->msync);
    _tsr_comm_free(&t->msync_comm);
  }
  _tsr_spatial_teardown(t);
  _tsr_comm_free(&t->world);
  t->ctl = NULL;
}

int tsr_trainer_num_groups(const tsr_trainer *t) { return t ? t->groups.n : 0; }

tsr_status tsr_trainer_group_info(const tsr_trainer *t, int g, int *first, int *count, size_t *bytes) {
  if (!t || g < 0 || g >= t->groups.n)
    return _tsr_error(TSR_ERR_ARG, "gradient group %d out of range [0, %d)", g, t ? t->groups.n : 0);
  if (first) *first = t->groups.g[g].first;
  if (count) *count = t->groups.g[g].end - t->groups.g[g].first;
  if (bytes) *bytes = t->groups.g[g].n * sizeof(float);
  return TSR_OK;
}

int64_t tsr_trainer_reduce_bytes(const tsr_trainer *t) {
  if (!t) return 0;
  int64_t bytes = t->groups.bytes + t->msync.bytes;
  for (int k = 0; k < t->staleness && t->gsets; k++) bytes += t->gsets[k].bytes;
  return bytes;
}

const char *tsr_reduce_precision_name(int p) {
  const char *name = _tsr_collective_name(p);
  return name ? name : "unknown";
}

tsr_status tsr_reduce_precision_parse(const char *name, int *p) {
  int i = _tsr_collective_index(name);
  if (i >= 0 && p) return *p = i, TSR_OK;
  char names[256];
  return _tsr_error(TSR_ERR_ARG, "gradient reduction precision '%s' (%s)", name ? name : "(null)",
                    _tsr_collective_names(names, sizeof names));
}

const char *tsr_trainer_group_collective(const tsr_trainer *t, int g) {
  if (!t || g < 0 || g >= t->groups.n || !t->groups.g[g].ops) return "none";
  return t->groups.g[g].ops->impl;
}

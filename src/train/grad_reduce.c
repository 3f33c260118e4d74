/* The trainer's side of the gradient reductions: the world communicator and the batch split over
 * it, the gradient-buffer view of the trainer's tensors that src/comm cuts into groups, the
 * collective picked by name (tsr_trainer_opts.grad_reduce), and the public queries about groups,
 * bytes and reduction names. */
#include <stdlib.h>
#include <string.h>

#include "comm/collective.h"
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

static tsr_status build_groups(tsr_trainer *t, const tsr_trainer_opts *o) {
  TSR_TRY(collective(o, &t->groups.algo));
  struct _tsr_grad_tensor *gt = calloc(t->ntensors ? t->ntensors : 1, sizeof *gt);
  if (!gt) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  for (int i = 0; i < t->ntensors; i++) {
    const struct _tsr_ptensor *p = &t->tensors[i];
    gt[i] = (struct _tsr_grad_tensor){.name = p->name, .off = p->trainable ? (size_t)(p->g - t->grads) : 0,
                                      .n = p->n, .layer = p->layer, .trainable = p->trainable};
  }
  struct _tsr_grad_view v = {.buf = t->grads, .keep = TSR_CTL_FLOATS, .ntensors = t->ntensors, .tensors = gt};
  tsr_status st = _tsr_groups_build(&t->groups, &v, t->batch_dist.comm, group_bytes(o, t->model),
                                    _tsr_collective_name(o->grad_reduce), t->use_nccl ? NULL : "nccl");
  free(gt);
  return st;
}

tsr_status _tsr_reduce_setup(tsr_trainer *t, const tsr_trainer_opts *o) {
  TSR_TRY(_tsr_comm_world(&t->world, t->rank, t->size));
  TSR_TRY(_tsr_dist_batch(&t->batch_dist, &t->world, 0, 0)); /* data parallelism over every rank */
  TSR_TRY(build_groups(t, o));
  t->groups.algo = NULL; /* the caller's string: read by the choice only */
  for (int i = 0; i < t->ntensors; i++) t->tensors[i].hg = t->groups.grad[i];
  t->ctl = t->groups.head;
  if (t->size > 1) TSR_TRY(_tsr_fingerprint_check(t));
  return _tsr_groups_start(&t->groups);
}

void _tsr_reduce_teardown(tsr_trainer *t) {
  _tsr_groups_destroy(&t->groups);
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

int64_t tsr_trainer_reduce_bytes(const tsr_trainer *t) { return t ? t->groups.bytes : 0; }

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

/* Stale-synchronous parallel training (tsr_trainer_opts.staleness = s): the refusals of what it does
 * not support, and the s extra gradient sets. Each training step accumulates its gradients into set
 * ntrain % (s + 1), each set a gradient buffer with its own groups, reductions and collective state,
 * so step k + 1's backward does not wait for step k's reduction and update to have read the
 * gradients of step k. step.c submits step k's updates after step k + s's forward and backward
 * (_tsr_flush_updates submits the pending ones early). */
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"
#include "runtime/error.h"

/* The options staleness does not combine with, checked before anything is planned (a spatial plan
 * that does not fit the model would otherwise be refused first, for another reason). */
tsr_status _tsr_staleness_check_opts(const tsr_trainer *t, const tsr_trainer_opts *o) {
  int s = o->staleness;
  if (s < 0 || s > TSR_MAX_STALENESS)
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_create: staleness = %d (--staleness) must be in [0, %d]", s,
                      TSR_MAX_STALENESS);
  if (s == 0) return TSR_OK;
  if (tsr_context_deterministic(t->ctx))
    return _tsr_error(TSR_ERR_ARG, "staleness %d (--staleness) does not work with deterministic mode "
                      "(--deterministic): deterministic training stays synchronous; use staleness 0", s);
  if (t->loss_scale < 0)
    return _tsr_error(TSR_ERR_ARG, "staleness %d (--staleness) does not work with dynamic loss scaling (--loss-scale "
                      "dynamic): use a fixed scale or staleness 0", s);
  for (int a = 0; a < TSR_SPATIAL_MAX_AXES; a++)
    if (o->spatial[a] > 1)
      return _tsr_error(TSR_ERR_ARG, "staleness %d (--staleness) does not work with spatial parallelism (--spatial): "
                        "the halo exchanges tie the ranks to every step anyway; use staleness 0", s);
  return TSR_OK;
}

struct _tsr_groups *_tsr_grad_set(tsr_trainer *t, int set) { return set == 0 ? &t->groups : &t->gsets[set - 1]; }

void _tsr_grad_set_use(tsr_trainer *t, int set) {
  struct _tsr_groups *gs = _tsr_grad_set(t, set);
  for (int i = 0; i < t->ntensors; i++) t->tensors[i].hg = gs->grad[i];
  t->ctl = gs->head;
  t->cur_set = set;
}

tsr_status _tsr_staleness_setup(tsr_trainer *t, const tsr_trainer_opts *o) {
  int s = t->staleness;
  if (s == 0) return TSR_OK;
  if (t->window < s + 2) t->window = s + 2; /* so the host lets a rank run s steps ahead */
  t->gsets = calloc(s, sizeof *t->gsets);
  t->gbufs = calloc(s, sizeof *t->gbufs);
  t->delayed = calloc(s + 1, sizeof *t->delayed);
  if (!t->gsets || !t->gbufs || !t->delayed) return _tsr_error(TSR_ERR_NOMEM, "staleness %d: out of memory", s);
  size_t bytes = ((t->nparams + TSR_CTL_FLOATS) * sizeof(float) + 63) & ~(size_t)63;
  for (int k = 0; k < s; k++) {
    if (!(t->gbufs[k] = aligned_alloc(64, bytes)))
      return _tsr_error(TSR_ERR_NOMEM, "staleness %d: cannot allocate gradient set %d of %zu bytes", s, k + 1, bytes);
    memset(t->gbufs[k], 0, bytes);
    TSR_TRY(_tsr_grad_groups_build(t, o, &t->gsets[k], t->gbufs[k]));
    t->gsets[k].algo = NULL; /* the caller's string */
    TSR_TRY(_tsr_groups_start_as(&t->gsets[k], &t->groups));
  }
  return TSR_OK;
}

void _tsr_staleness_teardown(tsr_trainer *t) {
  for (int k = 0; t->gsets && k < t->staleness; k++) _tsr_groups_destroy(&t->gsets[k]);
  for (int k = 0; t->gbufs && k < t->staleness; k++) free(t->gbufs[k]);
  free(t->gsets), free(t->gbufs), free(t->delayed);
  t->gsets = NULL, t->gbufs = NULL, t->delayed = NULL;
}

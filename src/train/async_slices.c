/* Asynchronous slices (tsr_trainer_opts.async_slices): inside one rank, the micro-batch slices of a
 * step update the shared parameters without waiting for each other (Hogwild style, in StarPU terms).
 *
 * The rule, per trainable tensor W of layer l and slice s of step k:
 *  - slice s's backward writes its weight gradient g_s into a buffer of its own (slice 0 the
 *    trainer's gradient buffer, slice s >= 1 agbuf[s - 1]); no reduction;
 *  - right after it, slice s submits its own optimizer step on W: learning rate lr * n_s / B and
 *    gradient g_s * B / n_s (n_s the slice's samples, B the batch: the gradient of the slice's share
 *    of the loss, rescaled to estimate the batch's), optimizer step number (k - 1) S + s + 1 with S
 *    slices (k counts from 1), on the one optimizer state of W that every slice shares. With plain
 *    SGD the S updates of a step add up to lr g, the synchronous step's, when they all see the same W;
 *    with one slice the update is the synchronous one exactly;
 *  - W, its optimizer state and the layers' running statistics have StarPU's sequential
 *    consistency switched off, so no implicit dependency goes through them: a read of W (a
 *    forward or a data gradient of any slice) does not wait for the updates submitted before it,
 *    and the updates of different slices do not wait for each other. StarPU still never runs a
 *    task that writes a handle at the same time as another task that reads or writes it, so an
 *    update is applied whole and a forward reads W whole (no torn values); only the order is free;
 *  - slice s's updates of layer l in step k start after the tasks of its own backward of l that
 *    read W (the data gradients; without this, an update could overtake them, and one slice would
 *    not repeat the synchronous step): a task that runs nowhere reads the input gradients those
 *    tasks write and takes the slice's gradient buffers of l, which the updates read, in RW;
 *  - the one explicit ordering between steps: slice s's forward of layer l in step k + 1 starts
 *    after slice s's own update of l in step k. A task with no computation (STARPU_NOWHERE) right
 *    after that update takes the slice's gradient buffers of l in RW (so it follows the update,
 *    which reads them) and the handle layer l's forward writes for slice s (its output, or the copy in the
 *    kernels' layout that a reorder task turns into the output) in RW (so the forward, which writes
 *    it, follows the task). All these handles are slice s's own: nothing ties slice s to another
 *    slice.
 * So slice s computes step k + 1 of layer l with W after its own updates of steps <= k and after
 * whichever updates of the other slices have run by then. The host still bounds the steps in
 * flight (the window waits for the loss of step k - window, which sums every slice's loss).
 *
 * Batch normalisation: a join of the slices in synchronous training (statistics over the batch's
 * B samples); here each slice normalises with the statistics of its own n_s samples (the layer
 * call's slice_stats, each slice with its own state buffers: "ghost" batch norm, as data-parallel
 * replicas without synchronised batch norm), backpropagates through that, and updates gamma and
 * beta like any weight. The running mean and variance (evaluation's statistics) take the momentum
 * update of every slice's statistics, in whichever order the slices' forward tasks run (their
 * sequential consistency is off as W's: S updates per step, not bitwise reproducible). So
 * training normalises over n_s = B / S samples, a noisier estimate than the synchronous one's.
 *
 * Anything that must see every update first waits on the host (_tsr_async_quiesce): a sync, an
 * evaluation step, a read or write of tensors (checkpoints), and the first training step after an
 * evaluation (whose forward reads W without ordering either). */
#include <stdlib.h>
#include <string.h>

#include "comm/collective.h"
#include "train/trainer.h"
#include "runtime/error.h"

tsr_status _tsr_async_check_opts(const tsr_trainer *t, const tsr_trainer_opts *o) {
  if (!o->async_slices) return TSR_OK;
  const char *pre = "asynchronous slices (async_slices, --async-slices) do not work with";
  if (tsr_context_deterministic(t->ctx))
    return _tsr_error(TSR_ERR_ARG, "%s deterministic mode (--deterministic): deterministic training stays "
                      "synchronous", pre);
  if (t->size > 1)
    return _tsr_error(TSR_ERR_ARG, "%s %d ranks (mpirun -np %d): they update inside one rank only; use one rank, "
                      "or --staleness across ranks", pre, t->size, t->size);
  if (o->staleness > 0)
    return _tsr_error(TSR_ERR_ARG, "%s staleness %d (--staleness): use one or the other", pre, o->staleness);
  if (o->loss_scale != 0)
    return _tsr_error(TSR_ERR_ARG, "%s loss scaling (--loss-scale): use --loss-scale off", pre);
  for (int a = 0; a < TSR_SPATIAL_MAX_AXES; a++)
    if (o->spatial[a] > 1) return _tsr_error(TSR_ERR_ARG, "%s spatial parallelism (--spatial)", pre);
  return TSR_OK;
}

starpu_data_handle_t _tsr_async_grad(const tsr_trainer *t, int i, int s) {
  return s == 0 ? t->tensors[i].hg : t->agrad[s - 1][i];
}

tsr_status _tsr_async_setup(tsr_trainer *t) {
  if (!t->async) return TSR_OK;
  if (t->groups.ops && t->groups.ops->signs)
    return _tsr_error(TSR_ERR_ARG, "asynchronous slices (async_slices, --async-slices) do not work with gradient "
                      "reduction '%s' (--grad-reduce): use f32", t->groups.name);
  int extra = t->slices - 1;
  if (extra > 0) {
    t->agrad = calloc(extra, sizeof *t->agrad);
    t->agbuf = calloc(extra, sizeof *t->agbuf);
    if (!t->agrad || !t->agbuf) return _tsr_error(TSR_ERR_NOMEM, "asynchronous slices: out of memory");
  }
  const float *base = t->grads + TSR_CTL_FLOATS;
  for (int k = 0; k < extra; k++) {
    t->agrad[k] = calloc(t->ntensors, sizeof **t->agrad);
    t->agbuf[k] = calloc(t->nparams ? t->nparams : 1, sizeof(float));
    if (!t->agrad[k] || !t->agbuf[k])
      return _tsr_error(TSR_ERR_NOMEM, "asynchronous slices: cannot allocate slice %d's %zu gradients", k + 1,
                        t->nparams);
    for (int i = 0; i < t->ntensors; i++)
      if (t->tensors[i].trainable)
        t->agrad[k][i] = _tsr_register_floats(t->agbuf[k] + (t->tensors[i].g - base), t->tensors[i].n);
  }
  for (int i = 0; i < t->ntensors; i++) {
    struct _tsr_ptensor *p = &t->tensors[i];
    starpu_data_set_sequential_consistency_flag(p->hw, 0); /* running statistics too */
    if (!p->trainable) continue;
    for (int k = 0; k < t->optim->nstate; k++) starpu_data_set_sequential_consistency_flag(p->hst[k], 0);
  }
  return TSR_OK;
}

void _tsr_async_teardown(tsr_trainer *t) {
  for (int k = 0; t->agrad && k < t->slices - 1; k++) {
    for (int i = 0; t->agrad[k] && i < t->ntensors; i++)
      if (t->agrad[k][i]) starpu_data_unregister(t->agrad[k][i]);
    free(t->agrad[k]);
    if (t->agbuf) free(t->agbuf[k]);
  }
  free(t->agrad), free(t->agbuf);
  t->agrad = NULL, t->agbuf = NULL;
}

/* A task that computes nothing: it only orders (STARPU_NOWHERE: no worker runs it, no data moves). */
static struct starpu_codelet gate_cl = {.where = STARPU_NOWHERE, .nbuffers = STARPU_VARIABLE_NBUFFERS,
                                        .name = "tsr_async_gate"};

/* Slice s's updates of layer l wait for the tasks of slice s's backward of l that read the
 * parameters (the data gradients, which write the input gradients): a task that runs nowhere reads
 * those and takes the slice's gradient buffers, which the updates read, in RW. */
static int order_after_reads(tsr_trainer *t, int l, int s) {
  const struct _tsr_lstate *st = &t->ls[l];
  struct _tsr_buf b[TSR_MAX_INPUTS + TSR_LAYER_MAX_TENSORS];
  starpu_data_handle_t dx[TSR_MAX_INPUTS];
  int n = _tsr_layer_dx_handles(t, l, s, dx), nb = 0;
  if (!n) return 0;
  for (int k = 0; k < n; k++) b[nb++] = (struct _tsr_buf){dx[k], STARPU_R};
  for (int i = st->first_tensor; i < st->first_tensor + _tsr_layer_num_tensors(&t->model->layers[l]); i++)
    if (t->tensors[i].trainable) b[nb++] = (struct _tsr_buf){_tsr_async_grad(t, i, s), STARPU_RW};
  return nb > n ? _tsr_submit(&gate_cl, NULL, 0, STARPU_DEFAULT_PRIO, "async_order", nb, b) : 0;
}

int _tsr_async_update(tsr_trainer *t, int l, int s, int64_t step) {
  const struct _tsr_lstate *st = &t->ls[l];
  const struct _tsr_layer *L = &t->model->layers[l];
  if (st->first_tensor < 0) return 0;
  int ret = order_after_reads(t, l, s);
  if (ret) return ret;
  struct _tsr_buf b[TSR_LAYER_MAX_TENSORS + 1];
  int nb = 0;
  for (int i = st->first_tensor; i < st->first_tensor + _tsr_layer_num_tensors(L); i++) {
    const struct _tsr_ptensor *p = &t->tensors[i];
    if (!p->trainable) continue;
    starpu_data_handle_t g = _tsr_async_grad(t, i, s);
    if (t->check_finite && _tsr_insert_check_finite(g, p->name, i, &t->nonfinite, step)) return -1;
    struct _tsr_optim_args a = {.h = t->opt, .step = (t->nupdates - 1) * t->slices + s + 1};
    a.h.lr = t->lr * (float)t->slice_n[s] / (float)t->batch;
    a.grad_scale = (float)t->batch / (float)t->slice_n[s];
    if (_tsr_optim_submit(&a, p->hw, g, p->hst, NULL, p->name)) return -1;
    b[nb++] = (struct _tsr_buf){g, STARPU_RW};
  }
  if (!nb) return 0;
  /* the handle layer l's forward writes, the one fill_call gives its entry (a gate on the output
   * alone, where a reorder task of its own converts a copy into it, ordered only that reorder, and
   * the next step's forward read W before this update now and then) */
  b[nb++] = (struct _tsr_buf){_tsr_layer_out_handles(t, l, 0)[s], STARPU_RW};
  return _tsr_submit(&gate_cl, NULL, 0, STARPU_DEFAULT_PRIO, "async_gate", nb, b);
}

int _tsr_state_sets(const tsr_trainer *t) { return t->async ? t->slices : 1; }

tsr_status _tsr_async_quiesce(tsr_trainer *t) {
  if (!t->async) return TSR_OK;
  int ret = starpu_task_wait_for_all();
  if (ret) return _tsr_error(TSR_ERR_RUNTIME, "asynchronous slices: starpu_task_wait_for_all failed (%d)", ret);
  return TSR_OK;
}

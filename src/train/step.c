/* One step as a task graph: load tasks per slice (a fill callback, or a loader whose stream's pool
 * slots the load tasks read as StarPU data), forward per layer per slice, loss per slice,
 * backward in reverse order with each tensor's optimizer update submitted as soon as its layer's
 * backward is submitted (so it runs when that gradient is final; with dynamic loss scaling after
 * the step's overflow decision instead; with a sign reduction, each tensor's direction before its
 * group's reduction and the combined direction's application after), and a non-detached loss-sum
 * task the host waits on later (it also brings back the control word summed over ranks). The host
 * blocks only when `window` steps are in flight. With staleness s > 0 (staleness.c) a step's
 * gradients go to its own of s + 1 gradient sets and its updates are submitted after step + s's
 * tasks (or at a sync, an evaluation step or a tensor read, which submit every pending update).
 * With asynchronous slices (async_slices.c) each slice's backward of a layer is followed by the
 * slice's own updates of its tensors, and there is no reduction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/collective.h"
#include "comm/groups.h"
#include "data/loader_tasks.h"
#include "kernel_util.h"
#include "train/trainer.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/hang.h"
#include "trace/trace.h"

/* Where a step's samples come from: fill(user, ...), or samples idx[] of loader l; out: where an
 * evaluation step's outputs go (NULL: nowhere). */
struct batch_src {
  tsr_sample_fn fill;
  void *user;
  tsr_loader *l;
  const int64_t *idx;
  float *out;
};

struct load_arg {
  tsr_trainer *t;
  tsr_sample_fn fill;
  void *user;
  tsr_loader *loader;       /* read sample idx[i] from it instead of fill when not NULL */
  int ndeps;                /* buffers after the slice's two: input and target per sample of a stream */
  int64_t step;
  int first, n, nvalid;     /* batch index of the slice's first sample, samples, valid samples */
  size_t xe, ye;
  int channels;            /* input channels */
  const float *mean, *std; /* input normalisation, NULL: none (tsr_trainer_set_input_norm syncs before freeing) */
  int tchannels;             /* output channels */
  const float *tmean, *tstd; /* target standardisation, NULL: none (likewise) */
  size_t whole_xe;         /* spatial parts: values of a whole input sample, cropped to xe by `crop` */
  struct _tsr_box_desc crop;
  int box;                 /* spatial parts from a loader without a pool: read only the crop (a hyperslab) */
  int64_t idx[];           /* loader: the slice's sample indices */
};

/* Sample i of the slice from the task's source; nonzero on failure (tsr_last_error set). */
static int load_one(void *buffers[], const struct load_arg *a, int i, float *x, float *y) {
  if (!a->loader) return a->fill(a->user, a->step, a->first + i, x, y);
  if (a->box) {
    int64_t start[TSR_BOX_AXES], extent[TSR_BOX_AXES];
    for (int k = 0; k < a->crop.nd; k++) start[k] = a->crop.src_lo[k], extent[k] = a->crop.len[k];
    return tsr_loader_read_box(a->loader, a->idx[i], start, extent, x, y) != TSR_OK;
  }
  const float *bx = a->ndeps ? TSR_BUF(buffers, 2 + 2 * i) : NULL, *by = a->ndeps ? TSR_BUF(buffers, 3 + 2 * i) : NULL;
  return _tsr_loader_task_read(a->loader, a->idx[i], bx, by, x, y) != TSR_OK;
}

static void load_cpu(void *buffers[], void *cl_arg) {
  const struct load_arg *a = cl_arg;
  float *x = TSR_BUF(buffers, 0), *y = TSR_BUF(buffers, 1);
  size_t whole_xe = a->box ? 0 : a->whole_xe;
  float *whole = whole_xe ? malloc(whole_xe * sizeof(float)) : NULL; /* one sample at a time */
  for (int i = 0; i < a->n; i++) {
    float *xi = x + i * a->xe, *yi = y + i * a->ye;
    if (a->first + i >= a->nvalid) {
      memset(xi, 0, a->xe * sizeof(float));
      memset(yi, 0, a->ye * sizeof(float));
      continue;
    }
    if ((whole_xe && !whole) || load_one(buffers, a, i, whole_xe ? whole : xi, yi) != 0) {
      tsr_trainer *t = a->t;
      int expected = 0;
      if (atomic_compare_exchange_strong(&t->load_failed, &expected, 1))
        snprintf(t->load_error, sizeof t->load_error, "step %lld: loading sample %d of the batch failed: %s",
                 (long long)a->step, a->first + i, tsr_last_error());
      memset(xi, 0, a->xe * sizeof(float));
      memset(yi, 0, a->ye * sizeof(float));
      continue;
    }
    if (whole) _tsr_box_copy_cpu(&a->crop, whole, xi);
    size_t plane = a->xe / (size_t)a->channels;
    for (int c = 0; a->mean && c < a->channels; c++)
      for (size_t p = 0; p < plane; p++) xi[c * plane + p] = (xi[c * plane + p] - a->mean[c]) / a->std[c];
    size_t tplane = a->ye / (size_t)a->tchannels;
    for (int c = 0; a->tmean && c < a->tchannels; c++)
      for (size_t p = 0; p < tplane; p++) yi[c * tplane + p] = (yi[c * tplane + p] - a->tmean[c]) / a->tstd[c];
  }
  free(whole);
}

static struct starpu_perfmodel load_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_load"};
static struct starpu_codelet load_cl = {
    .cpu_funcs = {load_cpu}, .cpu_funcs_name = {"load_cpu"}, .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_load", .model = &load_model};

/* Does the step being submitted skip its reductions (benchmarks: skip_reduce, or every other block of
 * skip_block training steps)? */
static int skipped(const tsr_trainer *t) {
  return t->skip_reduce || (t->skip_block > 0 && t->ntrain / t->skip_block % 2);
}

/* The ranks whose gradients a step's reductions sum: the parts the batch is split into. */
static int ranks(const tsr_trainer *t) { return skipped(t) ? 1 : t->batch_dist.parts; }

/* The update's arguments; `summed`: the gradient is the sum over ranks(t) ranks; d: the delayed step
 * whose update this is (staleness > 0), NULL: the step being submitted. */
static struct _tsr_optim_args optim_args(const tsr_trainer *t, int summed, const struct _tsr_delayed *d) {
  float unscale = _tsr_loss_scaler_unscale(t->loss_scale > 0 ? t->loss_scale : 1.0, summed);
  struct _tsr_optim_args a = {.h = t->opt, .step = d ? d->nupdates : t->nupdates, .grad_scale = unscale};
  a.h.lr = d ? d->lr : t->lr; /* tsr_trainer_set_lr's when the step was submitted */
  return a;
}

static int submit_update(tsr_trainer *t, const struct _tsr_ptensor *p, const struct _tsr_delayed *d) {
  struct _tsr_optim_args a = optim_args(t, ranks(t), d);
  return _tsr_optim_submit(&a, p->hw, p->hg, p->hst, t->scaler_h, p->name);
}

/* Sign reductions: each rank's direction from its own gradient (not averaged over ranks) before the
 * group's reduction; the combined direction applied after it. */
static int signs(const tsr_trainer *t) { return !skipped(t) && t->groups.ops && t->groups.ops->signs; }

static int submit_direction(tsr_trainer *t, const struct _tsr_ptensor *p) {
  struct _tsr_optim_args a = optim_args(t, 1, NULL);
  return _tsr_optim_submit_direction(&a, p->hg, p->hst, p->name);
}

static int submit_apply(tsr_trainer *t, const struct _tsr_ptensor *p) {
  struct _tsr_optim_args a = optim_args(t, 1, NULL);
  return _tsr_optim_submit_apply(&a, p->hw, p->hg, p->name);
}

/* Dynamic loss scaling: every finite-check of the step, then the decision, then the updates that
 * read it (so they wait for the last group's reduction: a skipped step must skip every tensor). */
static int submit_check(tsr_trainer *t, const struct _tsr_group *gr) {
  starpu_data_handle_t h[gr->end - gr->first + 1];
  int n = 0;
  for (int i = gr->first; i < gr->end; i++)
    if (t->tensors[i].trainable) h[n++] = t->tensors[i].hg;
  return n ? _tsr_insert_scale_check(t->scaler_h, n, h, "loss_scale_check") : 0;
}

static struct _tsr_loss_desc loss_desc(const tsr_trainer *t, int s, int nvalid) {
  static const enum _tsr_loss kinds[] = {[TSR_LOSS_MSE] = TSR_L_MSE, [TSR_LOSS_L1] = TSR_L_L1,
                                        [TSR_LOSS_HUBER] = TSR_L_HUBER,
                                        [TSR_LOSS_SOFTMAX_CROSS_ENTROPY] = TSR_L_SOFTMAX_CE};
  const struct _tsr_layer *L = &t->model->layers[t->output_layer];
  int v = nvalid - t->slice_off[s];
  v = v < 0 ? 0 : v > t->slice_n[s] ? t->slice_n[s] : v;
  int rows = L->h * (L->d > 0 ? L->d : 1); /* [C, D, H, W] as [C, D*H, W]: the loss is per position */
  double per_sample = t->model->loss == TSR_LOSS_SOFTMAX_CROSS_ENTROPY ? (double)rows * L->w : (double)L->c * rows * L->w;
  struct _tsr_loss_desc d = {.kind = kinds[t->model->loss], .n = t->slice_n[s], .c = L->c, .h = rows, .w = L->w,
                            .nvalid = v, .scale = 1.0 / (per_sample * nvalid), .delta = t->model->huber_delta};
  return d;
}

/* Seconds a rank waits for a step of a multi-rank run before concluding that a peer is gone:
 * tsr_trainer_opts.step_timeout or TESSERA_STEP_TIMEOUT (<= 0: wait forever), else 30 s plus 20
 * times the longest step seen so far, or before any step is timed, 20 times first_step (trainer.c:
 * the step's FLOPs at 1 GFLOP/s per worker). Launchers usually kill the other ranks when one dies
 * (mpirun within a second); this catches the rest (a hung peer, srun without --kill-on-bad-exit). */
double _tsr_step_deadline(const tsr_trainer *t) {
  if (t->step_timeout != 0) return t->step_timeout;
  return 30.0 + 20.0 * (t->longest_step > 0 ? t->longest_step : t->first_step);
}

/* Polls done(arg) until it holds, or fails once the step deadline has passed (multi-rank runs wait
 * for peers this way instead of StarPU's waits, which last for ever): "rank R: WHAT has not finished
 * after N s: another rank has probably died or hung". */
static tsr_status wait_deadline(tsr_trainer *t, int (*done)(void *), void *arg, const char *what) {
  double limit = _tsr_step_deadline(t);
  if (limit <= 0) return TSR_OK;
  double start = starpu_timing_now(), pause = 50;
  while (!done(arg)) {
    double waited = (starpu_timing_now() - start) * 1e-6;
    if (waited > limit) {
      char dump[160];
      snprintf(dump, sizeof dump, "rank %d: %s past its deadline", t->rank, what);
      _tsr_hang_dump(dump);
      return _tsr_error(TSR_ERR_RUNTIME,
                        "rank %d: %s has not finished after %.0f s: another rank has probably died or hung "
                        "(tsr_trainer_opts.step_timeout or TESSERA_STEP_TIMEOUT sets this limit)",
                        t->rank, what, waited);
    }
    usleep((useconds_t)pause);
    if (pause < 2000) pause *= 1.5;
  }
  return TSR_OK;
}

/* The loss task of a step (not detached, so it stays valid until waited). */
static int task_done(void *task) { return ((struct starpu_task *)task)->status == STARPU_TASK_FINISHED; }

/* No task left: the last steps' reductions and updates, which wait for peers too. */
static int all_done(void *unused) { return starpu_task_nsubmitted() == 0; }

tsr_status _tsr_wait_step(tsr_trainer *t, int64_t step) {
  struct _tsr_pending *p = &t->pending[step % (t->window + 1)];
  if (p->step != step || !p->task) return TSR_OK;
  if (t->size > 1) {
    char what[64];
    snprintf(what, sizeof what, "step %lld", (long long)step);
    TSR_TRY(wait_deadline(t, task_done, p->task, what));
  }
  int ret = starpu_task_wait(p->task);
  double took = (starpu_timing_now() - p->submitted) * 1e-6;
  if (took > t->longest_step) t->longest_step = took;
  p->task = NULL;
  if (ret) return _tsr_error(TSR_ERR_RUNTIME, "step %lld: waiting for the loss task failed (%d)", (long long)step, ret);
  TSR_TRY(_tsr_history_reserve(t, step));
  t->history[step] = p->value;
  t->flag_history[step] = p->flag;
  return TSR_OK;
}

tsr_status _tsr_history_reserve(tsr_trainer *t, int64_t step) {
  if (step < t->history_cap) return TSR_OK;
  int64_t cap = t->history_cap;
  while (cap <= step) cap *= 2;
  double *h = realloc(t->history, cap * sizeof(double));
  if (h) t->history = h;
  double *f = h ? realloc(t->flag_history, cap * sizeof(double)) : NULL;
  if (!f) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory for the loss history");
  t->flag_history = f, t->history_cap = cap;
  return TSR_OK;
}

#define SUBMIT(expr)                                                                               \
  do {                                                                                             \
    if ((expr) != 0) return TSR_ERR_RUNTIME;                                                       \
  } while (0)

/* Do the loader's targets have its inputs' spatial shape (tsr_loader_read_box cuts them too)? */
static int spatial_targets(const tsr_loader *l) {
  tsr_shape x, y;
  tsr_loader_input_dims(l, &x), tsr_loader_target_dims(l, &y);
  return x.ndim == y.ndim && !memcmp(x.dims + 1, y.dims + 1, sizeof(int64_t) * (size_t)(x.ndim - 1));
}

/* The load task of slice s: its samples' indices and, for a stream, their pool slots as data. */
static tsr_status submit_load(tsr_trainer *t, const struct batch_src *src, int s, int p, int nvalid, int64_t id) {
  const tsr_model *m = t->model;
  const struct _tsr_layer *in = &m->layers[t->input_layer], *out = &m->layers[t->output_layer];
  int n = t->slice_n[s], first = t->slice_off[s], stream = src->l && _tsr_loader_stream_slots(src->l);
  size_t xe = t->ls[t->input_layer].elems, ye = _tsr_layer_elems(out);
  size_t size = sizeof(struct load_arg) + (src->l ? n * sizeof(int64_t) : 0);
  struct load_arg *a = malloc(size);
  struct _tsr_buf *b = malloc(sizeof *b * (2 + 2 * n));
  tsr_status st = a && b ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "step %lld: out of memory for a load task", (long long)id);
  if (st == TSR_OK) {
    *a = (struct load_arg){t, src->fill, src->user, src->l, stream ? 2 * n : 0, id, first, n, nvalid, xe, ye, in->c,
                           t->norm_mean, t->norm_std, out->c, t->tnorm_mean, t->tnorm_std, 0, {0}, 0};
    if (t->sp) a->whole_xe = (size_t)_tsr_layer_elems(in), a->crop = _tsr_spatial_input_box(t);
    /* a pool holds whole samples; targets of the inputs' spatial shape would come back cut */
    if (t->sp && src->l && !stream && !spatial_targets(src->l)) a->box = 1;
    b[0] = (struct _tsr_buf){t->x[p][s], STARPU_W}, b[1] = (struct _tsr_buf){t->t[p][s], STARPU_W};
  }
  for (int i = 0; st == TSR_OK && src->l && i < n; i++) {
    starpu_data_handle_t h[2];
    a->idx[i] = src->idx[first + i];
    st = _tsr_loader_task_deps(src->l, a->idx[i], h);
    if (stream) b[2 + 2 * i] = (struct _tsr_buf){h[0], STARPU_R}, b[3 + 2 * i] = (struct _tsr_buf){h[1], STARPU_R};
  }
  if (st == TSR_OK && _tsr_submit(&load_cl, a, size, STARPU_DEFAULT_PRIO, "load", 2 + a->ndeps, b) != 0)
    st = TSR_ERR_RUNTIME;
  for (int i = 0; st == TSR_OK && src->l && i < n; i++) st = _tsr_loader_task_submitted(src->l, a->idx[i]);
  free(a), free(b);
  return st;
}

/* An evaluation step's outputs of slice s (its valid samples) copied to user memory, in target
 * units (out * std + mean per channel) when the trainer standardises its targets. The task also
 * takes the slice's loss handle (unchanged) so that the step's loss sum, which the host waits
 * for, runs after it. */
struct out_arg {
  float *out;
  size_t bytes;
  size_t plane;              /* values per channel of one sample */
  int channels;
  const float *tmean, *tstd; /* target standardisation, NULL: none */
};

static void copy_out_cpu(void *buffers[], void *cl_arg) {
  const struct out_arg *a = cl_arg;
  const float *y = TSR_BUF(buffers, 0);
  if (!a->tmean) {
    memcpy(a->out, y, a->bytes);
    return;
  }
  size_t samples = a->bytes / sizeof(float) / (a->plane * (size_t)a->channels);
  for (size_t i = 0; i < samples; i++)
    for (int c = 0; c < a->channels; c++) {
      size_t o = (i * (size_t)a->channels + (size_t)c) * a->plane;
      for (size_t p = 0; p < a->plane; p++) a->out[o + p] = y[o + p] * a->tstd[c] + a->tmean[c];
    }
}

static struct starpu_codelet copy_out_cl = {
    .cpu_funcs = {copy_out_cpu}, .cpu_funcs_name = {"copy_out_cpu"}, .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_copy_out"};

static int submit_copy_out(tsr_trainer *t, float *out, int s, int nvalid, starpu_data_handle_t loss) {
  const struct _tsr_lstate *o = &t->ls[t->output_layer];
  int gathered = t->sp && t->sp->y; /* a split output: its whole copy */
  size_t elems = gathered ? (size_t)_tsr_layer_elems(&t->model->layers[t->output_layer]) : o->elems;
  int k = nvalid - t->slice_off[s] < t->slice_n[s] ? nvalid - t->slice_off[s] : t->slice_n[s];
  int c = t->model->layers[t->output_layer].c;
  struct out_arg a = {out + (size_t)t->slice_off[s] * elems, (size_t)k * elems * sizeof(float), elems / (size_t)c, c,
                      t->tnorm_mean, t->tnorm_std};
  struct _tsr_buf b[2] = {{gathered ? t->sp->y[s] : o->y[s], STARPU_R}, {loss, STARPU_RW}};
  return _tsr_submit(&copy_out_cl, &a, sizeof a, STARPU_DEFAULT_PRIO, "copy_out", 2, b);
}

/* The updates of the oldest delayed step, in its gradient set, traced as its step. */
static tsr_status submit_delayed(tsr_trainer *t) {
  const struct _tsr_delayed *d = &t->delayed[t->delayed_first];
  _tsr_trace_set_step(d->step);
  _tsr_grad_set_use(t, d->set);
  for (int i = 0; i < t->ntensors; i++)
    if (t->tensors[i].trainable) {
      if (t->check_finite)
        SUBMIT(_tsr_insert_check_finite(t->tensors[i].hg, t->tensors[i].name, i, &t->nonfinite, d->step));
      SUBMIT(submit_update(t, &t->tensors[i], d));
    }
  t->delayed_first = (t->delayed_first + 1) % (t->staleness + 1);
  t->delayed_n--;
  return TSR_OK;
}

tsr_status _tsr_flush_updates(tsr_trainer *t) {
  TSR_TRY(_tsr_async_quiesce(t)); /* asynchronous slices: every update applied */
  while (t->delayed_n > 0) TSR_TRY(submit_delayed(t));
  return TSR_OK;
}

static tsr_status submit_graph(tsr_trainer *t, const struct batch_src *src, int train, int nvalid, int64_t id) {
  int p = (int)(id & 1);
  _tsr_trace_set_step(id);
  const tsr_model *m = t->model;
  starpu_data_handle_t *loss = t->loss + (id % t->nloss) * t->slices;
  for (int s = 0; s < t->slices; s++) TSR_TRY(submit_load(t, src, s, p, nvalid, id));
  if (train && t->slow_ms > 0) SUBMIT(_tsr_slow_submit(t, p, id));
  if (train) {
    _tsr_grad_set_use(t, (int)(t->ntrain % (t->staleness + 1)));
    /* gradients no task of the step writes first (entries without wgrad_first, layers off the
     * path to the output) */
    for (int i = 0; i < t->ntensors; i++) {
      if (!t->tensors[i].trainable || t->ls[t->tensors[i].layer].dw_first) continue;
      for (int s = 0; s < (t->async ? t->slices : 1); s++) /* asynchronous slices: each slice's own */
        SUBMIT(_tsr_insert_zero(t->async ? _tsr_async_grad(t, i, s) : t->tensors[i].hg, t->tensors[i].name));
    }
    SUBMIT(_tsr_insert_fill(t->ctl, t->flag, "control_word")); /* summed over ranks with group 0 */
  }
  for (int l = 0; l < m->n; l++)
    for (int s = 0; t->ls[l].live && s < t->slices; s++) SUBMIT(_tsr_layer_forward(t, l, s, p, train, id));
  SUBMIT(_tsr_grad_share_gates(t, -1)); /* the loss writes the output's gradient (grad_share.c) */
  for (int s = 0; s < t->slices; s++) {
    struct _tsr_loss_desc d = loss_desc(t, s, nvalid);
    starpu_data_handle_t y = t->ls[t->output_layer].y[s], dy = t->ls[t->output_layer].g[s];
    SUBMIT(_tsr_spatial_output(t, s, id, &y, &dy)); /* a split output gathered whole */
    SUBMIT(_tsr_insert_loss(&d, y, t->t[p][s], dy, loss[s], "loss"));
    if (train) SUBMIT(_tsr_spatial_share(t, dy));
    if (train && t->loss_scale != 0) SUBMIT(_tsr_insert_scale_grad(dy, t->scaler_h, t->loss_scale, "loss_scale"));
    if (train) SUBMIT(_tsr_spatial_output_grad(t, s));
  }
  for (int s = 0; src->out && s < t->slices && t->slice_off[s] < nvalid; s++)
    SUBMIT(submit_copy_out(t, src->out, s, nvalid, loss[s]));
  struct _tsr_pending *pend = &t->pending[id % (t->window + 1)];
  pend->step = id;
  pend->submitted = starpu_timing_now();
  pend->flag = 0;
  if (!train) return _tsr_insert_loss_sum(t->slices, loss, &pend->value, "loss_sum", &pend->task) ? TSR_ERR_RUNTIME
                                                                                                      : TSR_OK;
  t->nupdates++;
  /* Groups are contiguous in backward order: group g is final once the backward of the layer of
   * its last tensor is submitted; its reduction and its updates go in right then. */
  int g = 0;
  for (int l = m->n - 1; l >= 0; l--) {
    if (!t->ls[l].live || !t->ls[l].needs_grad) continue;
    /* every slice's gates first: batch normalisation's last slice writes the others' gradients */
    SUBMIT(_tsr_grad_share_gates(t, m->n - 1 - l));
    for (int s = 0; s < t->slices; s++) {
      SUBMIT(_tsr_layer_backward(t, l, s, p, id));
      if (t->async) SUBMIT(_tsr_async_update(t, l, s, id)); /* its own update, no reduction (async_slices.c) */
    }
    if (t->async) continue;
    for (; g < t->groups.n && t->tensors[t->groups.g[g].end - 1].layer == l; g++) {
      const struct _tsr_group *gr = &t->groups.g[g];
      for (int i = gr->first; signs(t) && i < gr->end; i++)
        if (t->tensors[i].trainable) {
          if (t->check_finite) /* this rank's gradient: the reduction carries directions only */
            SUBMIT(_tsr_insert_check_finite(t->tensors[i].hg, t->tensors[i].name, i, &t->nonfinite, id));
          SUBMIT(submit_direction(t, &t->tensors[i]));
        }
      if (!skipped(t)) SUBMIT(_tsr_group_allreduce(_tsr_grad_set(t, t->cur_set), g, id));
      if (signs(t)) SUBMIT(_tsr_momentum_sync(t, g, id));
      if (t->scaler_h) SUBMIT(submit_check(t, gr));
      for (int i = gr->first; !t->staleness && i < gr->end; i++) /* else submitted s steps later */
        if (t->tensors[i].trainable) {
          if (t->check_finite && !t->scaler_h && !signs(t)) /* with dynamic scaling an overflow skips the step */
            SUBMIT(_tsr_insert_check_finite(t->tensors[i].hg, t->tensors[i].name, i, &t->nonfinite, id));
          if (!t->scaler_h) SUBMIT(signs(t) ? submit_apply(t, &t->tensors[i]) : submit_update(t, &t->tensors[i], NULL));
        }
    }
  }
  if (t->scaler_h) {
    SUBMIT(_tsr_insert_scale_decide(t->scaler_h, &t->scaler, ranks(t)));
    for (int i = 0; i < t->ntensors; i++)
      if (t->tensors[i].trainable) SUBMIT(submit_update(t, &t->tensors[i], NULL));
  }
  /* Last, so that it also reads the control word after group 0's reduction (host order only). */
  SUBMIT(_tsr_insert_loss_sum_ctl(t->slices, loss, t->ctl, &pend->flag, &pend->value, "loss_sum", &pend->task));
  if (!t->staleness) return TSR_OK;
  /* Stale-synchronous: this step's updates wait; those of step id - s go in now, after the forward
   * and backward tasks of steps id - s + 1 .. id that read the weights they change. */
  int n = t->staleness + 1;
  t->delayed[(t->delayed_first + t->delayed_n) % n] =
      (struct _tsr_delayed){.step = id, .nupdates = t->nupdates, .lr = t->lr, .set = (int)(t->ntrain % n)};
  t->delayed_n++;
  return t->delayed_n > t->staleness ? submit_delayed(t) : TSR_OK;
}

/* A failure inside a task (a sample that did not load, a kernel error) as the status of the next
 * call: the tasks themselves cannot return one. */
static tsr_status task_failure(tsr_trainer *t) {
  if (atomic_load(&t->load_failed)) return _tsr_error(TSR_ERR_IO, "%s", t->load_error);
  char msg[512];
  if (_tsr_kernel_error(msg, sizeof msg)) return _tsr_error(TSR_ERR_RUNTIME, "%s", msg);
  return TSR_OK;
}

static tsr_status submit_step(tsr_trainer *t, const struct batch_src *src, int train, int nvalid, int64_t *id_out) {
  if (nvalid <= 0 || nvalid > t->batch)
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_eval: nvalid = %d must be in [1, %d]", nvalid, t->batch);
  TSR_TRY(task_failure(t));
  int64_t id = t->nsteps;
  /* Bound the steps in flight: wait for the loss of step id - window (and free its ring slot). */
  if (id >= t->window) TSR_TRY(_tsr_wait_step(t, id - t->window));
  if (!train) TSR_TRY(_tsr_flush_updates(t)); /* evaluations see every update */
  /* asynchronous slices: the updates of this step must not overtake the evaluation's forward */
  if (train && t->last_train == 0) TSR_TRY(_tsr_async_quiesce(t));
  tsr_status st = submit_graph(t, src, train, nvalid, id);
  if (st != TSR_OK) return st; /* _tsr_submit set the message */
  t->nsteps++;
  t->ntrain += train;
  t->last_train = train;
  if (id_out) *id_out = id;
  return TSR_OK;
}

tsr_status _tsr_submit_step(tsr_trainer *t, tsr_sample_fn fill, void *user, int train, int nvalid, int64_t *id_out) {
  if (!t || !fill) return _tsr_error(TSR_ERR_ARG, "tsr_trainer_step: trainer and fill function are required");
  struct batch_src src = {.fill = fill, .user = user};
  return submit_step(t, &src, train, nvalid, id_out);
}

tsr_status tsr_trainer_step_loader(tsr_trainer *t, tsr_loader *l, const int64_t *idx, int64_t *step_id) {
  if (!t || !l || !idx) return _tsr_error(TSR_ERR_ARG, "tsr_trainer_step_loader: trainer, loader and indices are required");
  int slots = _tsr_loader_stream_slots(l);
  if (slots && slots < t->batch)
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_step_loader: the pool holds %d samples, fewer than the batch of %d", slots,
                      t->batch);
  struct batch_src src = {.l = l, .idx = idx};
  return submit_step(t, &src, 1, t->batch, step_id);
}

tsr_status tsr_trainer_step(tsr_trainer *t, tsr_sample_fn fill, void *user, int64_t *step_id) {
  return _tsr_submit_step(t, fill, user, 1, t ? t->batch : 0, step_id);
}

tsr_status tsr_trainer_eval(tsr_trainer *t, tsr_sample_fn fill, void *user, int nvalid, int64_t *step_id) {
  return _tsr_submit_step(t, fill, user, 0, nvalid, step_id);
}

tsr_status tsr_trainer_eval_out(tsr_trainer *t, tsr_sample_fn fill, void *user, int nvalid, float *out,
                                int64_t *step_id) {
  if (!t || !fill || !out)
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_eval_out: trainer, fill function and output are required");
  struct batch_src src = {.fill = fill, .user = user, .out = out};
  return submit_step(t, &src, 0, nvalid, step_id);
}

tsr_status tsr_trainer_loss(tsr_trainer *t, int64_t step, double *loss) {
  if (!t || !loss || step < 0 || step >= t->nsteps)
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_loss: step %lld was not submitted (%lld submitted)", (long long)step,
                      t ? (long long)t->nsteps : 0LL);
  TSR_TRY(_tsr_wait_step(t, step));
  TSR_TRY(task_failure(t));
  *loss = t->history[step];
  return TSR_OK;
}

tsr_status tsr_trainer_flag(tsr_trainer *t, int64_t step, double *sum) {
  if (!t || !sum || step < 0 || step >= t->nsteps)
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_flag: step %lld was not submitted (%lld submitted)", (long long)step,
                      t ? (long long)t->nsteps : 0LL);
  TSR_TRY(_tsr_wait_step(t, step));
  *sum = t->flag_history[step];
  return TSR_OK;
}

tsr_status tsr_trainer_sync(tsr_trainer *t) {
  if (!t) return _tsr_error(TSR_ERR_ARG, "tsr_trainer_sync: trainer is NULL");
  TSR_TRY(_tsr_flush_updates(t));
  for (int64_t s = t->nsteps - t->window - 1; s < t->nsteps; s++)
    if (s >= 0) TSR_TRY(_tsr_wait_step(t, s));
  if (t->size > 1) { /* not starpu_task_wait_for_all's for ever: a peer may hang mid-step */
    char what[96];
    snprintf(what, sizeof what, "the tasks after step %lld (reductions, updates)", (long long)t->nsteps - 1);
    TSR_TRY(wait_deadline(t, all_done, NULL, what));
  }
  int ret = starpu_task_wait_for_all();
  if (ret) return _tsr_error(TSR_ERR_RUNTIME, "starpu_task_wait_for_all failed (%d)", ret);
  TSR_TRY(task_failure(t));
  return TSR_OK;
}

struct predict_src {
  const float *x;
  size_t xe;
};

static int predict_fill(void *user, int64_t step, int index, float *x, float *y) {
  const struct predict_src *p = user;
  memcpy(x, p->x + (size_t)index * p->xe, p->xe * sizeof(float));
  return 0;
}

tsr_status tsr_trainer_predict(tsr_trainer *t, const float *x, int n, float *out) {
  if (!t || !x || !out || n <= 0 || n > t->batch)
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_predict: n = %d must be in [1, %d] and x, out non-NULL", n,
                      t ? t->batch : 0);
  const struct _tsr_layer *in = &t->model->layers[t->input_layer];
  struct predict_src src = {x, _tsr_layer_elems(in)};
  int64_t id;
  TSR_TRY(tsr_trainer_eval_out(t, predict_fill, &src, n, out, &id));
  return tsr_trainer_sync(t);
}

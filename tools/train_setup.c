/* tessera-train's set-up and per-epoch helpers (train_setup.h): the data's shapes against the
 * model's, the mean-target baseline, input standardisation in the trainer, the optimizer options of
 * the command line, the learning-rate schedule of the run. Errors end the run (run_fail.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "run_fail.h"
#include "train_setup.h"

enum { BASELINE_MEAN_SAMPLES = 4096 }; /* training samples averaged for the mean-target baseline */

void check_shapes(const char *path, const tsr_loader *d, const tsr_trainer *t, const tsr_model *m) {
  int dc, dh, dw, mc, mh, mw;
  tsr_loader_input_shape(d, &dc, &dh, &dw);
  tsr_trainer_input_shape(t, &mc, &mh, &mw);
  const char *what = "inputs", *verb = "takes";
  if (dc == mc && dh == mh && dw == mw) {
    tsr_loader_target_shape(d, &dc, &dh, &dw);
    tsr_trainer_target_shape(t, &mc, &mh, &mw);
    what = "targets", verb = "outputs";
    if (dc == mc && dh == mh && dw == mw) return;
  }
  fail("%s: %s have per-sample shape [%d, %d, %d] but model '%s' %s [%d, %d, %d]", path, what, dc, dh, dw,
       tsr_model_name(m), verb, mc, mh, mw);
}

/* ---- mean-target baseline ---- */

/* Loss (MSE) of predicting the mean training target (the per-pixel mean image, a stronger baseline
 * than one constant) for every validation sample. *mean_out is the image's average value. */
double baseline_mse(tsr_loader *train, int64_t ntrain, tsr_loader *val, int64_t vfirst, int64_t nval,
                           double *mean_out) {
  int c, h, w;
  tsr_loader_target_shape(train, &c, &h, &w);
  size_t ye = (size_t)c * h * w;
  float *y = malloc(ye * sizeof *y);
  double *mean = calloc(ye, sizeof *mean);
  if (!y || !mean) fail("out of memory");
  int64_t k = ntrain < BASELINE_MEAN_SAMPLES ? ntrain : BASELINE_MEAN_SAMPLES;
  for (int64_t i = 0; i < k; i++) {
    check(tsr_loader_read(train, i * ntrain / k, NULL, y));
    for (size_t j = 0; j < ye; j++) mean[j] += y[j];
  }
  double se = 0, avg = 0;
  for (size_t j = 0; j < ye; j++) mean[j] /= (double)k, avg += mean[j] / ye;
  for (int64_t i = 0; i < nval; i++) {
    check(tsr_loader_read(val, vfirst + i, NULL, y));
    for (size_t j = 0; j < ye; j++) se += (y[j] - mean[j]) * (y[j] - mean[j]);
  }
  free(y);
  free(mean);
  *mean_out = avg;
  return se / ((double)nval * ye);
}

/* The loader computed the training inputs' per-channel statistics; the trainer applies them (to
 * training, validation and prediction inputs alike), so checkpoints and exported parameters carry
 * them and an export applied to raw inputs predicts as this run does. With --simulate (`simulated`
 * samples gave them) the ranks are checked to agree and the log says so. */
void standardize_in_trainer(tsr_loader *train, int simulated, tsr_trainer *t, tsr_context *ctx, int talk) {
  const double *mean, *std;
  int c, h, w;
  tsr_loader_stats(train, &mean, &std);
  if (!mean) return;
  tsr_loader_input_shape(train, &c, &h, &w);
  float *m = malloc(sizeof(float) * c), *s = malloc(sizeof(float) * c);
  if (!m || !s) fail("out of memory");
  for (int i = 0; i < c; i++) m[i] = (float)mean[i], s[i] = (float)std[i];
  if (simulated > 0) { /* the pool's, from samples 0..simulated-1: alike on every rank (checked) */
    check(tsr_context_check_same(ctx, "the input statistics", m, sizeof(float) * c));
    check(tsr_context_check_same(ctx, "the input statistics", s, sizeof(float) * c));
    if (talk)
      printf("inputs standardised in the trainer: channel 0 mean %.9g, std %.9g (from %d simulated samples, indices "
             "0..%d)\n", m[0], s[0], simulated, simulated - 1);
  }
  check(tsr_trainer_set_input_norm(t, m, s, c));
  check(tsr_loader_set_stats(train, NULL, NULL, 0)); /* raw reads from now on */
  free(m), free(s);
}

/* Reads training target i of k into y ([c, h, w]). */
typedef void (*target_read_fn)(void *user, int64_t i, int64_t k, float *y);

/* The trainer standardises targets with m and sd ([c]) and turns its outputs back; the ranks must
 * have the same values (checked). `k` and `from` say where they came from, for the log. */
static void set_target_norm(const float *m, const float *sd, int c, int64_t k, const char *from, tsr_trainer *t,
                            tsr_context *ctx, int talk) {
  for (int ch = 0; ch < c; ch++)
    if (!(sd[ch] > 0)) fail("--standardize-targets: target channel %d is constant (%g) over %lld %s", ch, m[ch],
                            (long long)k, from);
  check(tsr_context_check_same(ctx, "the target statistics", m, sizeof(float) * c));
  check(tsr_trainer_set_target_norm(t, m, sd, c));
  if (talk)
    printf("targets standardised in the trainer: channel 0 mean %.6g, std %.6g (from %lld %s); "
           "predictions and metrics in target units\n", m[0], sd[0], (long long)k, from);
}

/* Per-channel mean and population std of k targets read by `read`, in double, two passes (each
 * target is read twice), into the trainer. */
static void target_norm(target_read_fn read, void *user, int64_t k, int c, int h, int w, const char *from,
                        tsr_trainer *t, tsr_context *ctx, int talk) {
  size_t plane = (size_t)h * w;
  float *y = malloc(plane * c * sizeof *y), *m = malloc(sizeof(float) * c), *sd = malloc(sizeof(float) * c);
  double *sum = calloc(c, sizeof *sum), *sq = calloc(c, sizeof *sq);
  if (!y || !m || !sd || !sum || !sq) fail("out of memory");
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t i = 0; i < k; i++) {
      read(user, i, k, y);
      for (int ch = 0; ch < c; ch++)
        for (size_t p = 0; p < plane; p++) {
          double v = y[ch * plane + p];
          if (pass == 0) sum[ch] += v;
          else sq[ch] += (v - sum[ch]) * (v - sum[ch]);
        }
    }
    for (int ch = 0; pass == 0 && ch < c; ch++) sum[ch] /= (double)k * plane;
  }
  for (int ch = 0; ch < c; ch++) m[ch] = (float)sum[ch], sd[ch] = (float)sqrt(sq[ch] / ((double)k * plane));
  set_target_norm(m, sd, c, k, from, t, ctx, talk);
  free(y), free(m), free(sd), free(sum), free(sq);
}

struct file_targets {
  tsr_loader *train;
  int64_t ntrain;
};

static void read_file_target(void *user, int64_t i, int64_t k, float *y) {
  struct file_targets *f = user;
  check(tsr_loader_read(f->train, i * f->ntrain / k, NULL, y));
}

/* The samples the mean-target baseline averages: all training samples, or BASELINE_MEAN_SAMPLES
 * spread over them. Every rank reads the whole training file. */
void standardize_targets(tsr_loader *train, int64_t ntrain, tsr_trainer *t, tsr_context *ctx, int talk) {
  int c, h, w;
  tsr_loader_target_shape(train, &c, &h, &w);
  struct file_targets f = {train, ntrain};
  int64_t k = ntrain < BASELINE_MEAN_SAMPLES ? ntrain : BASELINE_MEAN_SAMPLES;
  target_norm(read_file_target, &f, k, c, h, w, "training samples", t, ctx, talk);
}

/* The pool computed them from the simulator's samples 0..n-1 by index, not by a rank's stream
 * position: the same on every rank and for any number of ranks, so a run on N ranks standardises as
 * one on 1 rank does. */
void standardize_simulated_targets(const tsr_loader *train, int64_t n, tsr_trainer *t, tsr_context *ctx, int talk) {
  const double *mean, *std;
  int c, h, w;
  tsr_loader_target_stats(train, &mean, &std);
  tsr_loader_target_shape(train, &c, &h, &w);
  float *m = malloc(sizeof(float) * c), *sd = malloc(sizeof(float) * c);
  if (!mean || !m || !sd) fail(mean ? "out of memory" : "--standardize-targets: the pool has no target statistics");
  for (int ch = 0; ch < c; ch++) m[ch] = (float)mean[ch], sd[ch] = (float)std[ch];
  char from[64];
  snprintf(from, sizeof from, "simulated samples, indices 0..%lld", (long long)n - 1);
  set_target_norm(m, sd, c, n, from, t, ctx, talk);
  free(m), free(sd);
}

/* An epoch's validation loss goes to the schedule (plateau may lower the rate; ranks must agree). */
void epoch_end_schedule(tsr_context *ctx, tsr_schedule *sched, int ep, double val, int talk) {
  int reduced;
  check(tsr_schedule_observe(sched, val, &reduced));
  const tsr_schedule_state *st = &sched->state;
  double agree[3] = {st->lr, (double)st->bad_epochs, (double)st->cooldown_left};
  if (sched->spec.kind == TSR_SCHEDULE_PLATEAU)
    check(tsr_context_check_same(ctx, "the plateau schedule's learning rate", agree, sizeof agree));
  if (talk && reduced)
    printf("epoch %d: the validation loss has not improved for %lld epochs: learning rate %g\n", ep,
           (long long)sched->spec.patience + 1, st->lr);
}

/* The run's learning-rate schedule: the model file's (spec), or --lr-schedule's; --warmup-steps; the linear
 * scaling rule (Goyal et al., 2017: ranks x the rate, warmed up from the one-rank rate); cosine's
 * first period and one-cycle's length default to the whole run. */
void make_schedule(const struct train_opts *o, tsr_schedule_spec spec, float lr, int nranks, int64_t steps,
                          int has_val, tsr_schedule *sched) {
  if (o->have_schedule) spec = o->schedule;
  if (o->warmup >= 0) spec.warmup_steps = o->warmup;
  if (o->lr_linear) spec.scale = nranks, spec.warmup_start = 1;
  int64_t run = spec.per_step ? steps * o->epochs : o->epochs;
  if (spec.kind == TSR_SCHEDULE_COSINE && spec.t0 == 0) spec.t0 = run;
  if (spec.kind == TSR_SCHEDULE_ONE_CYCLE && spec.total == 0) spec.total = run;
  if (spec.kind == TSR_SCHEDULE_PLATEAU && !has_val)
    fail("the plateau schedule follows the validation loss: give --val or --val-fraction");
  check(tsr_schedule_init(sched, &spec, lr));
}

void apply_optim_opts(const struct train_opts *o, tsr_optim_spec *opt) {
  if (o->lr >= 0) opt->lr = o->lr;
  if (o->msync_every < 0 && !o->msync_layers) return;
  const char *flag = o->msync_every >= 0 ? "--momentum-sync-every" : "--momentum-sync-layers";
  if (opt->kind != TSR_OPTIM_LION)
    fail("%s: the optimizer of %s is %s; momentum synchronisation is Lion's (optimizer type \"lion\" with "
         "--grad-reduce sign1, signp or signp_mean)", flag, o->model, tsr_optim_kind_name(opt->kind));
  if (o->msync_every >= 0) opt->extra[0] = (float)o->msync_every;
  if (o->msync_every == 0 && !o->msync_layers) opt->momentum_sync_layers[0] = '\0'; /* no averaging: none chosen */
  if (!o->msync_layers) return;
  if (opt->extra[0] < 1)
    fail("--momentum-sync-layers '%s' needs a period: --momentum-sync-every K >= 1 (the model file %s sets %s)",
         o->msync_layers, o->model, o->msync_every >= 0 ? "it, but the flag overrides it" : "none");
  if (strlen(o->msync_layers) >= sizeof opt->momentum_sync_layers)
    fail("--momentum-sync-layers: '%s' is longer than %zu characters", o->msync_layers,
         sizeof opt->momentum_sync_layers - 1);
  snprintf(opt->momentum_sync_layers, sizeof opt->momentum_sync_layers, "%s", o->msync_layers);
}

void check_trainer_created(const struct train_opts *o, tsr_status s) {
  if (s != TSR_OK && (o->msync_every >= 0 || o->msync_layers) && strstr(tsr_last_error(), "momentum_sync"))
    fail("%s: %s (%s)", o->msync_layers ? "--momentum-sync-layers" : "--momentum-sync-every", tsr_last_error(),
         tsr_status_name(s));
  check(s);
}

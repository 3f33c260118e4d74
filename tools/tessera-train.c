/* tessera-train: trains a model file on an HDF5 data set, or on samples the CBED simulator makes in
 * the same task graph (--simulate), through the public API only. Steps are submitted ahead (the
 * trainer bounds the window) and losses are read a few steps late, so the host never stalls the
 * task graph; samples are read inside load tasks. */
#include <signal.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tessera.h>

#include "cli.h"
#include "data_meta.h"
#include "eval_metrics.h"
#include "predict_png.h"
#include "train_best.h"
#include "train_ckpt.h"
#include "run_fail.h"
#include "train_opts.h"
#include "train_setup.h"

enum { WINDOW = 2 };                /* steps in flight; losses are read WINDOW submissions late */

/* What one submitted step reads: kept alive until its loss has been read, since load tasks run later. */
struct slot {
  tsr_loader *d;
  int64_t *idx;    /* [batch] sample indices in d */
  int64_t step, gstep; /* trainer step id; training step of the run (from 1) */
  int pending, train, nvalid, epoch;
  float *out;      /* validation with metrics: the step's outputs [batch, C', H', W'] */
};

struct run {
  tsr_trainer *t;
  int batch, nslots, next;
  int64_t submitted;
  struct slot *slots;
  double train_sum, val_sum; /* this epoch */
  int64_t train_steps, val_samples;
  struct ckpt *ck;
  struct eval *ev;  /* validation metrics (NULL: none); this epoch's in val_m */
  tsr_metrics val_m;
  int64_t vfirst;
  size_t ye;
  double loss_factor; /* the trainer's losses times it: in target units (1: as they are) */
};


/* ---- steps ---- */

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  const struct slot *s = user;
  return tsr_loader_read(s->d, s->idx[index], x, y) != TSR_OK; /* the trainer reports the message */
}

static void harvest(struct run *r, struct slot *s) {
  if (!s->pending) return;
  double loss;
  check(tsr_trainer_loss(r->t, s->step, &loss));
  loss *= r->loss_factor;
  s->pending = 0;
  if (s->train) {
    ckpt_step_done(r->ck, r->t, s->step, s->gstep, s->epoch, loss);
    r->train_sum += loss;
    r->train_steps++;
  } else {
    r->val_sum += loss * s->nvalid;
    r->val_samples += s->nvalid;
    for (int i = 0; r->ev && i < s->nvalid; i++)
      eval_add(r->ev, &r->val_m, s->idx[i] - r->vfirst, s->out + r->ye * i);
  }
}

static struct slot *take_slot(struct run *r) {
  struct slot *s = &r->slots[r->next];
  r->next = (r->next + 1) % r->nslots;
  harvest(r, s);
  return s;
}

/* Reads the loss of the step submitted WINDOW submissions ago: the trainer has waited for it already. */
static void submitted(struct run *r, struct slot *s) {
  s->pending = 1;
  r->submitted++;
  if (r->submitted > WINDOW) harvest(r, &r->slots[(r->next + r->nslots - 1 - WINDOW) % r->nslots]);
}

static void harvest_all(struct run *r) {
  for (int i = 0; i < r->nslots; i++) harvest(r, &r->slots[(r->next + i) % r->nslots]);
}

/* ---- in-situ training (--simulate) ---- */

/* The training loader: a pool of samples simulated in the task graph, each rank its own; the input
 * (and with --standardize-targets the target) statistics from samples 0..N-1, alike on every rank. */
static void open_simulation(const struct train_opts *o, int rank, int nranks) {
  tsr_cbed_opts co;
  check(tsr_cbed_opts_load_json(o->simulate, &co));
  tsr_sample_producer prod;
  check(tsr_cbed_producer(&co, &prod));
  tsr_pool_opts po;
  tsr_pool_opts_default(&po);
  po.slots = o->pool, po.reuse = o->reuse, po.rank = rank, po.size = nranks;
  po.stats_samples = o->no_standardize ? 0 : o->input_stats; /* samples 0..N-1 simulated once for both */
  po.target_stats_samples = o->standardize_targets ? o->target_stats : 0;
  char *spill = o->spill && nranks > 1 ? cli_shard_name(o->spill, rank) : NULL;
  po.spill = spill ? spill : o->spill;
  tsr_status s = tsr_loader_open_pool(&live.train, &prod, &po);
  free(spill);
  if (s != TSR_OK) {
    prod.destroy(prod.user);
    fail("%s: %s", o->simulate, tsr_last_error());
  }
}

/* The simulator failed on this rank (seen before submitting a step): training stops. When every
 * step so far finished without reading a failed sample, a checkpoint after them is written (one
 * rank only: under mpirun the launcher stops the others, and --resume starts from the newest
 * checkpoint of all ranks). */
static void stop_on_sim_error(struct run *r, const char *error, int ep, int64_t st, int64_t gstep, int nranks, int batch) {
  char msg[1100], path[4096] = "";
  snprintf(msg, sizeof msg, "%s", error);
  tsr_status s = nranks == 1 && r->ck->dir ? tsr_trainer_sync(r->t) : TSR_ERR_STATE;
  if (s == TSR_OK) {
    harvest_all(r);
    s = ckpt_save(r->ck, r->t, ep, st, gstep, r->train_sum, nranks, batch, path, sizeof path);
  }
  if (s == TSR_OK) fail("simulator error: %s; checkpoint %s written after training step %lld", msg, path, (long long)gstep);
  fail("simulator error: %s", msg);
}

/* The effective configuration beside the log (train.csv: train.config.json) and in the checkpoint
 * folder (config.json), written by rank 0. */
static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) fail("%s: cannot write the effective configuration: %m", path);
}

static void write_config(const struct train_opts *o, const char *text) {
  char path[4200];
  if (o->log) {
    const char *slash = strrchr(o->log, '/'), *dot = strrchr(o->log, '.');
    int stem = dot && dot > (slash ? slash : o->log) ? (int)(dot - o->log) : (int)strlen(o->log);
    snprintf(path, sizeof path, "%.*s.config.json", stem, o->log);
    write_text(path, text);
  }
  if (o->ck.dir) {
    snprintf(path, sizeof path, "%s/config.json", o->ck.dir);
    write_text(path, text);
  }
}

/* End of an epoch for --patience and --keep-best: counts the epoch's loss, writes the best
 * checkpoint when it improved, and returns 1 when the run should stop early. Every rank must decide
 * alike (the validation loss is computed alike on every rank). */
static int epoch_end_best(const struct train_opts *o, struct best *b, int ep, double loss, int nranks, int64_t steps) {
  if (!o->patience && !o->keep_best) return 0;
  int improved = best_update(b, ep, loss, o->min_delta), stop = o->patience > 0 && b->stale >= o->patience;
  int d[2] = {improved, stop};
  if (nranks > 1) check(tsr_context_check_same(live.ctx, "the early-stopping decision (the epoch's loss)", d, sizeof d));
  if (!o->ck.dir) return stop;
  char path[4200], err[4400];
  best_path(o->ck.dir, path, sizeof path);
  if (improved && o->keep_best) check(ckpt_save_as(&o->ck, live.t, ep + 1, 0, ep * steps, 0, nranks, o->batch, path));
  if (tsr_context_rank(live.ctx) == 0 && best_save(b, o->ck.dir, err, sizeof err)) fail("%s", err);
  return stop;
}

static FILE *open_log(const char *path, const char *loss_unit) {
  FILE *f = fopen(path, "a");
  if (!f) {
    fail("%s: cannot open the log: %m", path);
  }
  fseek(f, 0, SEEK_END);
  if (ftell(f) == 0) {
    fprintf(f, "epoch,step,train_loss,val_loss,samples_per_s,elapsed_s,");
    eval_csv_header(f, "val_");
    if (loss_unit) fprintf(f, ",loss_unit");
    fprintf(f, "\n");
  }
  return f;
}

/* ---- checkpoints, signals, NaN/Inf (train_ckpt.c) ---- */

/* Every rank gets here after the same step (the control word): a rank that has not seen the signal
 * itself (yet) exits as for SIGTERM. */
static void stop_on_signal(int sig, const char *path, int64_t gstep) {
  if (sig != SIGUSR1 && sig != SIGINT) sig = SIGTERM;
  fprintf(stderr, "%s: %s received: checkpoint %s written after training step %lld; continue with --resume\n",
          cli_program(), ckpt_signal_name(sig), path, (long long)gstep);
  release();
  exit(sig == SIGUSR1 ? 0 : 128 + sig);
}

/* A non-finite loss or gradient was seen (and every step has finished): stop, or roll back to the
 * newest checkpoint and remember to skip that step's batch. */
static void on_nonfinite(struct ckpt *ck, int nranks, int batch, int64_t steps, int *ep0, int64_t *pos0, double *sum0) {
  if (!ck->skip_nan) {
    fail("%s; stopping (--on-nan skip rolls back and skips the batch instead)", ck->msg);
  }
  /* the batch skipped must be the same on every rank (a gradient is, a local loss may not be) */
  check(tsr_context_check_same(live.ctx, "the first training step with a non-finite value", &ck->bad, sizeof ck->bad));
  if (ck->nskipped == CKPT_MAX_SKIPS) {
    fail("%s; %d batches were skipped already, stopping", ck->msg, CKPT_MAX_SKIPS);
  }
  fprintf(stderr, "%s: %s; rolling back to the last checkpoint and skipping that batch\n", cli_program(), ck->msg);
  ck->skipped[ck->nskipped++] = ck->bad;
  ck->bad = -1;
  char path[4096];
  int found = 0;
  if (ckpt_load_latest(ck, live.t, nranks, batch, steps, &found, ep0, pos0, sum0, path, sizeof path) || !found) {
    fail("cannot roll back: %s", found ? ck->msg : "no valid checkpoint");
  }
  fprintf(stderr, "%s: rolled back to %s (epoch %d, step %lld of the epoch)\n", cli_program(), path, *ep0,
          (long long)*pos0);
}

int main(int argc, char **argv) {
  cli_set_program("tessera-train");
  struct train_opts o;
  train_opts_parse(argc, argv, &o);
  /* before the start-up work (data, StarPU, MPI): a signal then stops the run after its first steps */
  if (o.ck.dir) ckpt_signals_install();

  tsr_loader_opts lopts;
  tsr_loader_opts_default(&lopts);
  lopts.input_name = o.input_dataset, lopts.target_name = o.target_dataset;
  lopts.standardize = !o.no_standardize;
  const char *data_name = o.simulate ? o.simulate : o.data;
  if (!o.simulate) check(tsr_loader_open(&live.train, o.data, &lopts)); /* a pool needs StarPU: below */
  int64_t nfile = o.simulate ? 0 : tsr_loader_size(live.train), ntrain = nfile, nval = 0, vfirst = 0;
  const char *val_name = o.val;
  if (o.val) {
    lopts.standardize = 0; /* the trainer standardises with the training data's statistics */
    check(tsr_loader_open(&live.val, o.val, &lopts));
    nval = tsr_loader_size(live.val);
  } else if (o.val_fraction > 0) {
    live.val = live.train;
    nval = llround(o.val_fraction * nfile);
    nval = nval < 1 ? 1 : nval;
    ntrain = nfile - nval, vfirst = ntrain;
    val_name = o.data;
  }

  tsr_optim_spec opt;
  tsr_schedule_spec file_sched;
  int has_sched;
  check(tsr_model_load_json_schedule(&live.m, &opt, &file_sched, &has_sched, o.model));
  apply_optim_opts(&o, &opt);

  tsr_context_opts copts;
  tsr_context_opts_default(&copts);
  copts.ncpus = o.workers;
  copts.deterministic = o.deterministic;
  copts.gpu_only = o.gpu_only;
  copts.precision = o.precision;
  copts.seed = o.seed;
  copts.verbose = o.quiet ? 0 : o.verbose ? 2 : 1;
  check(tsr_context_create(&live.ctx, &copts, &argc, &argv));
  if (o.ck.dir) ckpt_signals_install(); /* again: StarPU installs its own SIGINT handler */
  int rank = tsr_context_rank(live.ctx), nranks = tsr_context_size(live.ctx);
  int talk = !o.quiet && rank == 0;
  /* The data is split over the replicas: with --spatial P, ranks [r P, r P + P) share replica r's
   * samples (the trainer checks that P divides the ranks). */
  int parts = train_spatial_parts(&o), replica = rank / parts, nrep = nranks / parts > 0 ? nranks / parts : 1;
  if (o.simulate) open_simulation(&o, replica, nrep);

  tsr_trainer_opts topts;
  tsr_trainer_opts_default(&topts);
  topts.batch = o.batch;
  topts.slices = o.slices;
  topts.window = WINDOW;
  topts.check_finite = 1; /* with dynamic loss scaling, overflowing steps are skipped instead */
  topts.grad_reduce = o.grad_reduce;
  topts.collective = o.collective;
  memcpy(topts.spatial, o.spatial, sizeof topts.spatial);
  topts.staleness = o.staleness;
  topts.async_slices = o.async_slices;
  topts.separate_grads = o.separate_grads;
  topts.act_block = (int[]){0, 8, 16}[o.act_block];
  topts.loss_scale = !isnan(o.loss_scale) ? o.loss_scale : o.precision == TSR_PRECISION_FP16 ? TSR_LOSS_SCALE_DYNAMIC : 0;
  check_trainer_created(&o, tsr_trainer_create(&live.t, live.ctx, live.m, &opt, &topts));
  if (o.trace) check(tsr_trace_start(live.ctx, o.trace, o.trace_first, o.trace_last));
  /* Every rank's shard must hold samples of the same shapes: checked together, before any rank can
   * stop alone on its own shapes. */
  int shapes[6];
  tsr_loader_input_shape(live.train, &shapes[0], &shapes[1], &shapes[2]);
  tsr_loader_target_shape(live.train, &shapes[3], &shapes[4], &shapes[5]);
  check(tsr_context_check_same(live.ctx, "the training data's sample shapes", shapes, sizeof shapes));
  check_shapes(data_name, live.train, live.t, live.m);
  if (o.val) check_shapes(o.val, live.val, live.t, live.m);
  standardize_in_trainer(live.train, o.simulate ? o.input_stats : 0, live.t, live.ctx, talk);
  if (o.standardize_targets && o.simulate) standardize_simulated_targets(live.train, o.target_stats, live.t, live.ctx, talk);
  else if (o.standardize_targets) standardize_targets(live.train, ntrain, live.t, live.ctx, talk);
  if (o.import_path) check(tsr_params_import(live.t, o.import_path)); /* with its normalisation, if it has one */

  if (nranks > 1 && nval == 0 && (o.patience || o.keep_best))
    fail("--patience and --keep-best on several ranks need validation data (each rank's training loss differs)");
  int64_t steps = o.simulate ? o.epoch_steps : ntrain / ((int64_t)o.batch * nrep);
  if (steps == 0) {
    fail("%s: %lld training samples make no full batch of %d x %d replica(s)", o.data, (long long)ntrain, o.batch,
            nrep);
  }
  /* in situ, the mean target comes from the validation data: training samples are simulated */
  double base_mean = 0, base = o.simulate ? (nval > 0 ? baseline_mse(live.val, nval, live.val, 0, nval, &base_mean) : NAN)
                           : nval > 0     ? baseline_mse(live.train, ntrain, live.val, vfirst, nval, &base_mean)
                                          : baseline_mse(live.train, ntrain, live.train, 0, ntrain, &base_mean);
  /* Rank 0 measures the validation predictions against two baselines. In situ the mean target is the
   * validation data's own and there is no nearest neighbour (no fixed training set). */
  struct eval ev;
  memset(&ev, 0, sizeof ev);
  int metrics = rank == 0 && nval > 0 && (talk || o.log);
  if (metrics)
    eval_init(&ev, &o.eval, live.val, vfirst, nval, o.simulate ? live.val : live.train, o.simulate ? vfirst : 0,
              o.simulate ? nval : ntrain, o.simulate ? NULL : live.train, 0, ntrain);
  /* the other ranks wait here, not inside their first step (whose time-out does not expect it) */
  if (nranks > 1) check(tsr_context_check_same(live.ctx, "the validation samples", &nval, sizeof nval));
  char units[256] = "";
  if (o.predict_png && rank == 0) data_target_units(nval > 0 ? live.val : live.train, units, sizeof units);
  if (talk) {
    printf("model '%s': %d layers, %lld parameters, %.3g GFLOP per sample (forward), %s lr %g\n",
           tsr_model_name(live.m), tsr_model_num_layers(live.m), (long long)tsr_model_num_params(live.m),
           2e-9 * tsr_model_forward_flops(live.m), tsr_optim_kind_name(opt.kind), opt.lr);
    if (o.simulate)
      printf("data: simulated in situ from %s (pool of %d samples per rank, each read %d times; %lld steps of %d per "
             "epoch", o.simulate, o.pool, o.reuse, (long long)steps, o.batch);
    else
      printf("data: %lld training samples (%lld steps of %d per epoch", (long long)ntrain, (long long)steps, o.batch);
    if (nrep > 1) printf(" on each of %d replicas", nrep);
    if (parts > 1) printf(", each sample split over %d ranks", parts);
    if (nval > 0)
      printf("), %lld validation samples from %s%s\n", (long long)nval, val_name, o.val ? "" : " (held out)");
    else
      printf("), no validation\n");
    if (metrics) {
      eval_describe(stdout, &ev);
      eval_print(stdout, o.simulate ? "baseline, mean validation target" : "baseline, mean training target", &ev.mean);
      if (o.simulate) printf("baseline, nearest neighbour on the inputs: none (no fixed training set in situ)\n");
      else eval_print(stdout, "baseline, nearest neighbour on the inputs", &ev.nn);
    }
  }

  tsr_schedule sched;
  make_schedule(&o, file_sched, opt.lr, nrep, steps, nval > 0, &sched);
  if (talk && sched.spec.kind != TSR_SCHEDULE_CONSTANT)
    printf("learning-rate schedule: %s per %s\n", tsr_schedule_kind_name(sched.spec.kind),
           sched.spec.per_step ? "step" : "epoch");
  /* with target standardisation (--standardize-targets, or imported parameters that carry it) the
   * losses go to the log in target units where one factor converts them exactly (MSE and L1 with
   * one std for all channels), else in standardised units, and the log says which */
  double loss_factor = tsr_trainer_target_loss_factor(live.t);
  const float *tmean, *tstd;
  tsr_trainer_target_norm(live.t, &tmean, &tstd);
  const char *loss_unit = !o.standardize_targets && !tmean ? NULL : isnan(loss_factor) ? "standardised" : "target";
  FILE *log = o.log && rank == 0 ? open_log(o.log, loss_unit) : NULL;
  struct run r = {.t = live.t, .batch = o.batch, .nslots = WINDOW + 2, .ev = metrics ? &ev : NULL, .vfirst = vfirst,
                  .loss_factor = isnan(loss_factor) ? 1.0 : loss_factor};
  r.slots = calloc(r.nslots, sizeof *r.slots);
  int64_t *perm = malloc(sizeof *perm * (tsr_loader_shard_size(ntrain, replica, nrep) + 1));
  int tc, th, tw;
  tsr_trainer_target_shape(live.t, &tc, &th, &tw);
  r.ye = (size_t)tc * th * tw;
  for (int i = 0; r.slots && i < r.nslots; i++) {
    r.slots[i].idx = malloc(sizeof(int64_t) * o.batch);
    r.slots[i].out = metrics ? malloc(sizeof(float) * r.ye * o.batch) : NULL;
    if (!r.slots[i].idx || (metrics && !r.slots[i].out)) fail("out of memory");
  }
  if (!r.slots || !perm) fail("out of memory");
  struct ckpt *ck = &o.ck;
  r.ck = ck;
  ck->sched = &sched;
  char *config = train_opts_json(&o);
  if (!config) fail("out of memory");
  ck->run_config = config;
  struct best best;
  best_init(&best);
  char err[4400];
  if (ck->dir && ck->resume && best_load(&best, ck->dir, err, sizeof err)) fail("cannot resume: %s", err);
  if (rank == 0 && ckpt_open_step_log(ck)) {
    fail("%s: cannot open the step log: %m", ck->step_log_path);
  }
  int ep0 = 1;
  int64_t pos0 = 0;
  double sum0 = 0;
  char ckpath[4096];
  if (ck->dir) {
    int found = 0;
    if (!ck->resume && tsr_checkpoint_find_latest(ck->dir, ckpath, sizeof ckpath, NULL) != TSR_ERR_IO)
      fail("%s already holds checkpoints: continue with --resume, or use another folder", ck->dir);
    if (ck->resume && ckpt_load_latest(ck, live.t, nranks, o.batch, steps, &found, &ep0, &pos0, &sum0, ckpath,
                                       sizeof ckpath))
      fail("cannot resume: %s", ck->msg);
    /* Every rank has looked into the folder before rank 0 writes into it (a slower rank once found the
     * fresh run's first checkpoint and stopped), and all ranks start from the same checkpoint. */
    char what[4200];
    snprintf(what, sizeof what, "the checkpoint to resume from (%s)", found ? ckpath : "none");
    check(tsr_context_check_same(live.ctx, what, found ? ckpath : "", found ? strlen(ckpath) : 0));
    if (found && talk) printf("resuming from %s: epoch %d, %lld of %lld steps done\n", ckpath, ep0, (long long)pos0, (long long)steps);
    if (found && talk && (ck->from_nranks != nranks || ck->from_batch != o.batch))
      printf("the checkpoint was written on %d rank(s) x batch %d: from epoch %d on, each epoch's order (drawn from the seed "
             "and the epoch) is split over %d rank(s) x batch %d\n", ck->from_nranks, ck->from_batch, ep0, nranks, o.batch);
    if (found && talk && ck->sched_diff[0])
      fprintf(stderr, "%s: learning-rate schedule: %s (this run's apply from now on)\n", ckpath, ck->sched_diff);
    if (!found) check(ckpt_save(ck, live.t, 1, 0, 0, 0, nranks, o.batch, ckpath, sizeof ckpath));
  }
  if (rank == 0) write_config(&o, config);
  loss_factor = tsr_trainer_target_loss_factor(live.t); /* a checkpoint's statistics replace the run's */
  r.loss_factor = isnan(loss_factor) ? 1.0 : loss_factor;
  if (talk && loss_unit)
    printf("losses (train, val, the log's train_loss and val_loss) in %s\n",
           isnan(loss_factor) ? "standardised units: no one factor turns this loss into target units"
                              : "target units: the standardised loss times std^2 (MSE) or std (L1)");

  cli_progress line;
  cli_progress_init(&line, !talk);
  double t0 = cli_now(), last_train = NAN, last_val = NAN;
  int64_t sim0; /* samples simulated before training (input statistics) */
  tsr_loader_pool_counts(live.train, &sim0, NULL, NULL);
  int64_t total_steps = steps * o.epochs, steps_run = 0; /* training steps this process completed */
restart:
  for (int ep = ep0; ep <= o.epochs; ep++) {
    r.train_sum = r.val_sum = 0;
    r.train_steps = r.val_samples = 0;
    tsr_metrics_init(&r.val_m);
    if (ep == ep0) r.train_sum = sum0, r.train_steps = pos0; /* resumed inside this epoch */
    if (!o.simulate) check(tsr_loader_epoch_indices(ntrain, o.seed, ep, replica, nrep, perm)); /* this rank's shard */
    double te = cli_now();
    for (int64_t st = ep == ep0 ? pos0 : 0; st < steps; st++) {
      int64_t gstep = ck->steps_before + (ep - 1) * steps + st + 1;
      if (ckpt_is_skipped(ck, gstep)) continue;
      const char *sim_error = "";
      tsr_loader_pool_counts(live.train, NULL, NULL, &sim_error);
      if (*sim_error) stop_on_sim_error(&r, sim_error, ep, st, gstep - 1, nranks, o.batch);
      struct slot *s = take_slot(&r);
      for (int i = 0; i < o.batch; i++) /* in situ: this rank's stream positions */
        s->idx[i] = o.simulate ? (gstep - 1) * o.batch + i : perm[st * o.batch + i];
      s->d = live.train, s->train = 1, s->nvalid = o.batch, s->gstep = gstep, s->epoch = ep;
      tsr_trainer_set_lr(live.t, tsr_schedule_lr(&sched, gstep - 1, ep - 1));
      tsr_trainer_set_flag(live.t, ckpt_flag_value(ck)); /* signals and NaN: acted on when all ranks know */
      check(tsr_trainer_step_loader(live.t, live.train, s->idx, &s->step));
      ckpt_submitted(ck, s->step, gstep);
      submitted(&r, s);
      if (ck->stop_nan || ckpt_due(ck, gstep) || (nranks == 1 && ck->bad >= 0)) {
        harvest_all(&r);
        check(tsr_trainer_sync(live.t));
        if (ckpt_nonfinite(ck, live.t)) {
          on_nonfinite(ck, nranks, o.batch, steps, &ep0, &pos0, &sum0);
          goto restart;
        }
        check(ckpt_save(ck, live.t, ep, st + 1, gstep, r.train_sum, nranks, o.batch, ckpath, sizeof ckpath));
        if (ck->stop) stop_on_signal(ckpt_signal(), ckpath, gstep);
      }
      double el = cli_now() - te, rate = r.train_steps / el;
      char eta[32], loss[32] = "-";
      if (r.train_steps) snprintf(loss, sizeof loss, "%.5g", r.train_sum / r.train_steps);
      double left = (double)(total_steps - ((ep - 1) * steps + st + 1));
      char sim[96] = "";
      if (o.simulate) { /* this rank's simulation against the training of all ranks */
        int64_t made;
        int filled;
        tsr_loader_pool_counts(live.train, &made, &filled, NULL);
        snprintf(sim, sizeof sim, "  simulated %.1f/s  pool %d/%d", (made - sim0) / (cli_now() - t0), filled, o.pool);
      }
      cli_progress_update(&line, 0, "epoch %d/%d  step %lld/%lld  loss %s  trained %.0f samples/s%s  ETA %s", ep,
                          o.epochs, (long long)st + 1, (long long)steps, loss, rate * o.batch * nrep, sim,
                          cli_duration(rate > 0 ? left / rate : -1, eta, sizeof eta));
    }
    harvest_all(&r);
    if (ck->bad >= 0 || ck->stop_nan || nranks > 1) {
      check(tsr_trainer_sync(live.t));
      int bad = ckpt_nonfinite(ck, live.t);
      /* a loss of the last steps is only known here: the ranks compare (once per epoch) */
      check(tsr_context_check_same(live.ctx, "whether this epoch saw a non-finite value", &bad, sizeof bad));
      if (bad) {
        on_nonfinite(ck, nranks, o.batch, steps, &ep0, &pos0, &sum0);
        goto restart;
      }
    }
    double train_time = cli_now() - te;
    int64_t ran = steps - (ep == ep0 ? pos0 : 0); /* training steps of this epoch run by this process */
    steps_run += ran;
    int64_t tsteps, tupdates, gend = ck->steps_before + ep * steps; /* training steps done */
    tsr_trainer_counters(live.t, &tsteps, &tupdates);
    for (int64_t b = 0; b < nval; b += o.batch) {
      /* A validation pass can take long: one rank stops inside it, and --resume repeats it from a
       * checkpoint taken after the epoch's last training step, with the step counter rewound to
       * it (dropout masks follow the counter). Ranks cannot agree inside a validation pass (no
       * control word), so several ranks act on a signal after it, as before. */
      if (nranks == 1 && ck->dir && ckpt_signal()) {
        harvest_all(&r);
        check(tsr_trainer_set_counters(live.t, tsteps, tupdates));
        check(ckpt_save(ck, live.t, ep, steps, gend, r.train_sum, nranks, o.batch, ckpath, sizeof ckpath));
        stop_on_signal(ckpt_signal(), ckpath, gend);
      }
      struct slot *s = take_slot(&r);
      s->nvalid = nval - b < o.batch ? (int)(nval - b) : o.batch;
      for (int i = 0; i < o.batch; i++) s->idx[i] = vfirst + b + (i < s->nvalid ? i : 0);
      s->d = live.val, s->train = 0;
      if (metrics) check(tsr_trainer_eval_out(live.t, fill, s, s->nvalid, s->out, &s->step));
      else check(tsr_trainer_eval(live.t, fill, s, s->nvalid, &s->step));
      submitted(&r, s);
    }
    harvest_all(&r);
    cli_progress_clear(&line);
    last_train = r.train_sum / r.train_steps;
    last_val = nval > 0 ? r.val_sum / r.val_samples : NAN;
    double sps = (double)ran * o.batch * nrep / train_time, elapsed = cli_now() - t0;
    char el[32];
    if (talk) {
      printf("epoch %d/%d: train loss %.6g", ep, o.epochs, last_train);
      if (nval > 0) printf(", val loss %.6g", last_val);
      printf(", %.0f samples/s, elapsed %s", sps, cli_duration(elapsed, el, sizeof el));
      if (o.simulate) {
        int64_t made;
        tsr_loader_pool_counts(live.train, &made, NULL, NULL);
        printf(", simulated %lld samples on rank 0 (%.1f/s)", (long long)made, (made - sim0) / elapsed);
      }
      printf("\n");
      if (metrics) eval_print(stdout, "  validation", &r.val_m);
      fflush(stdout);
    }
    if (log) {
      fprintf(log, "%d,%lld,%.9g,%.9g,%.6g,%.3f,", ep, (long long)gend, last_train, last_val, sps, elapsed);
      eval_csv_fields(log, &ev, &r.val_m);
      if (loss_unit) fprintf(log, ",%s", loss_unit);
      fprintf(log, "\n");
      fflush(log);
    }
    epoch_end_schedule(live.ctx, &sched, ep, last_val, talk);
    int stop_early = epoch_end_best(&o, &best, ep, nval > 0 ? last_val : last_train, nranks, steps);
    if (ck->dir) {
      check(ckpt_save(ck, live.t, ep + 1, 0, gend, 0, nranks, o.batch, ckpath, sizeof ckpath));
      if (ck->stop || (nranks == 1 && ckpt_signal())) stop_on_signal(ckpt_signal(), ckpath, gend);
    }
    if (!isfinite(last_train)) {
      fail("epoch %d: the training loss is %g; try a lower --lr", ep, last_train);
    }
    if (stop_early) {
      if (talk)
        printf("early stop after epoch %d: no improvement of the %s loss by more than %g for %d epochs; the best, "
               "%.6g, was epoch %d's%s\n", ep, nval > 0 ? "validation" : "training", o.min_delta, best.stale,
               best.loss, best.epoch, o.keep_best ? " (its checkpoint: best.h5 in the checkpoint folder)" : "");
      break;
    }
  }
  check(tsr_trainer_sync(live.t));
  tsr_loss_scale_state ls;
  if (talk && topts.loss_scale == TSR_LOSS_SCALE_DYNAMIC && tsr_trainer_loss_scale_get(live.t, &ls) == TSR_OK)
    printf("loss scale: %g after %lld steps, %lld skipped (gradient overflow)\n", ls.scale, (long long)ls.steps,
           (long long)ls.skipped);
  if (talk && nranks > 1 && steps_run > 0)
    printf("gradient reductions (%s): %.6g KB sent by rank 0 per training step\n",
           tsr_reduce_precision_name(o.grad_reduce), tsr_trainer_reduce_bytes(live.t) / 1e3 / steps_run);
  if (o.trace) {
    check(tsr_trace_stop(live.ctx));
    if (talk) printf("trace written to %s (tessera-trace %s; %s/trace.json opens in ui.perfetto.dev)\n", o.trace, o.trace, o.trace);
  }
  if (talk && !isnan(base) && !isnan(loss_factor)) { /* else the model's loss is in other units */
    const char *on = nval > 0 ? "validation" : "training";
    double model_loss = nval > 0 ? last_val : last_train;
    printf("baseline: predicting the mean %s target image (average value %.6g) gives %s MSE %.6g; the "
           "model's %s loss is %.6g, %.1f%% of it\n",
           o.simulate ? "validation" : "training", base_mean, on, base, on, model_loss, 100.0 * model_loss / base);
  }
  if (o.export_path && rank == 0) { /* the ranks hold the same parameters: one writer, no race on the file */
    check(tsr_params_export(live.t, o.export_path));
    if (talk) printf("parameters written to %s\n", o.export_path);
  }
  if (o.predict_png && rank == 0) {
    char err[1100];
    int count = o.predict_count ? o.predict_count : 4;
    tsr_loader *pl = nval > 0 ? live.val : live.train;
    if (predict_png(live.t, pl, nval > 0 ? vfirst : 0, count, units, o.predict_png, err, sizeof err) != 0) {
      fail("--predict-png: %s", err);
    }
    if (talk) printf("predicted against true potentials of %d %s samples written to %s/\n", count,
                     nval > 0 ? "validation" : "training", o.predict_png);
  }
  if (log && fclose(log) != 0) fail("%s: cannot write the log: %m", o.log);
  if (ck->step_log && fclose(ck->step_log) != 0) fail("%s: cannot write the step log: %m", ck->step_log_path);
  free(config);
  for (int i = 0; i < r.nslots; i++) free(r.slots[i].idx), free(r.slots[i].out);
  if (metrics) eval_free(&ev);
  free(r.slots);
  free(perm);
  release();
  return 0;
}

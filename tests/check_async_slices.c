/* Asynchronous slices (tsr_trainer_opts.async_slices) at one rank, on a tiny dense network:
 * switched off it is the default trainer bitwise; with one slice it is the synchronous trainer
 * bitwise (SGD and Adam) and float64 SGD within 1e-4; with 2 and 3 slices it trains (loss bound
 * below); an evaluation and a read of the tensors see every update; slice 0 runs three steps ahead
 * of a slice 1 that cannot load (no per-step join), also with a batch normalisation in the
 * network, where the synchronous trainer cannot; and the refused combinations name both options.
 * Batch normalisation's per-slice statistics: check_async_bn. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>
#include <time.h>

#include "testutil.h"
#include "tiny_mlp.h"

#define LR 0.5f
#define ADAM_LR 0.02f

static tsr_context *start(int deterministic, int ncpus) {
  /* StarPU 1.3 reads a codelet model's `benchmarking` flag again at a task's start, end and feedback,
   * and dmdas sets it while a task of that codelet runs ("not calibrated enough, forcing
   * calibration"): the feedback then took a stale end time (measured < 0, an assertion in
   * _starpu_driver_update_job_feedback, seen once in the sanitizer pass with the slices' concurrent
   * updates). Calibrating from the start keeps the flag set for the whole run. */
  setenv("STARPU_CALIBRATE", "1", 1);
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.ncpus = ncpus, o.use_mpi = 0, o.deterministic = deterministic, o.verbose = 0;
  tsr_context *ctx = NULL;
  ck_assert_msg(tsr_context_create(&ctx, &o, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  return ctx;
}

/* Mean loss over the batches of steps 1000 .. 1063 (never trained on). */
static double held_out(const struct params *p) {
  double sum = 0;
  for (int k = 0; k < 64; k++) sum += loss_grad(p, 1000 + k, NULL);
  return sum / 64;
}

static tsr_trainer *trainer(tsr_context *ctx, tsr_model *m, int slices, int async, int set_field, int adam) {
  tsr_optim_spec opt = tsr_optim_spec_default(adam ? TSR_OPTIM_ADAM : TSR_OPTIM_SGD);
  opt.lr = adam ? ADAM_LR : LR, opt.momentum = 0, opt.weight_decay = 0;
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = B, o.slices = slices, o.seed = 5;
  if (set_field) o.async_slices = async;
  tsr_trainer *t = NULL;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &opt, &o) == TSR_OK, "%s", tsr_last_error());
  return t;
}

static void get_params(tsr_trainer *t, struct params *p, float raw[4][NH * NI]) {
  for (int f = 0; f < 4; f++) {
    int i = tsr_trainer_tensor_find(t, names[f]);
    ck_assert_msg(i >= 0, "tensor %s", names[f]);
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, raw[f]), TSR_OK);
    for (int j = 0; j < sizes[f]; j++) field(p, f)[j] = raw[f][j];
  }
}

struct run {
  struct params p0, p;            /* before and after */
  float raw[4][NH * NI];          /* after, as the trainer holds them */
  double losses[400];
};

/* Trains `steps` steps (at most 400). */
static void run(int det, int slices, int async, int set_field, int adam, int steps, struct run *r) {
  tsr_context *ctx = start(det, 2);
  tsr_model *m = model(0);
  tsr_trainer *t = trainer(ctx, m, slices, async, set_field, adam);
  memset(r, 0, sizeof *r);
  get_params(t, &r->p0, r->raw);
  for (int k = 0; k < steps; k++) ck_assert_msg(tsr_trainer_step(t, fill, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  get_params(t, &r->p, r->raw);
  for (int k = 0; k < steps; k++) ck_assert_int_eq(tsr_trainer_loss(t, k, &r->losses[k]), TSR_OK);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}

static void assert_same(const struct run *a, const struct run *b, const char *what) {
  ck_assert_msg(memcmp(a->raw, b->raw, sizeof a->raw) == 0, "%s: parameters differ", what);
  ck_assert_msg(memcmp(a->losses, b->losses, sizeof a->losses) == 0, "%s: losses differ", what);
}

START_TEST(async_off_is_the_default_trainer_bitwise) {
  static struct run plain, off;
  run(1, 2, 0, 0, 0, 8, &plain); /* the field left at its default; deterministic: a fixed order of sums */
  run(1, 2, 0, 1, 0, 8, &off);
  assert_same(&plain, &off, "async_slices = 0 against the default");
}
END_TEST

/* One slice: the same optimizer steps as the synchronous trainer, bitwise; and float64 SGD. */
START_TEST(one_slice_is_the_synchronous_trainer_bitwise) {
  static struct run sync, async, ref;
  for (int adam = 0; adam < 2; adam++) {
    run(0, 1, 0, 1, adam, 8, &sync);
    run(0, 1, 1, 1, adam, 8, &async);
    assert_same(&sync, &async, adam ? "Adam, one slice, async against synchronous" : "SGD, one slice, async against synchronous");
  }
  /* SGD in float64 from the same start */
  ref.p = async.p0;
  run(0, 1, 1, 1, 0, 8, &async);
  ref.p = async.p0;
  for (int k = 0; k < 8; k++) {
    struct params g;
    double l = loss_grad(&ref.p, k, &g);
    ck_assert_msg(fabs(async.losses[k] - l) <= 1e-6 + 1e-4 * l, "step %d: loss %.9g, float64 SGD %.9g", k,
                  async.losses[k], l);
    for (int f = 0; f < 4; f++)
      for (int i = 0; i < sizes[f]; i++) field(&ref.p, f)[i] -= LR * field(&g, f)[i];
  }
  for (int f = 0; f < 4; f++) tt_assert_close(async.raw[f], field(&ref.p, f), sizes[f], 1e-6, 1e-4, names[f]);
}
END_TEST

/* Several slices: the updates of a step use parameters that the other slices may or may not have
 * updated yet, so the trajectory is not fixed; what is: 300 steps of it bring the held-out loss
 * below 40 % of the initial one, and within 1.5 times the synchronous trainer's with SGD (measured:
 * 0.11 of the initial loss for both, 2 and 3 slices), 3 times with Adam (measured: synchronous 0.051
 * of the initial loss, 2 slices 1.5x that, 3 slices 2.0x: each slice's gradient, scaled to the
 * batch, has a larger second moment, so Adam's steps are smaller). */
static void check_trains(int adam) {
  static struct run sync, async;
  run(0, 2, 0, 1, adam, 300, &sync);
  double l0 = held_out(&sync.p0), ls = held_out(&sync.p);
  for (int slices = 2; slices <= 3; slices++) {
    run(0, slices, 1, 1, adam, 300, &async);
    double la = held_out(&async.p);
    double within = adam ? 3 : 1.5; /* Adam: the per-slice gradients' larger second moment slows it */
    ck_assert_msg(la < 0.4 * l0 && la < within * ls, "%s, %d asynchronous slices: held-out loss %.4g from %.4g "
                  "(synchronous %.4g)", adam ? "Adam" : "SGD", slices, la, l0, ls);
    for (int k = 0; k < 300; k++) ck_assert_msg(isfinite(async.losses[k]), "step %d: loss %g", k, async.losses[k]);
  }
}

START_TEST(several_slices_train_sgd) { check_trains(0); }
END_TEST

START_TEST(several_slices_train_adam) { check_trains(1); }
END_TEST

/* An evaluation after training steps sees every update: its loss is that of the parameters read
 * back after it (no step in between), in float64 within 1e-4; training goes on after it. */
START_TEST(evaluation_and_reads_see_every_update) {
  tsr_context *ctx = start(0, 2);
  tsr_model *m = model(0);
  tsr_trainer *t = trainer(ctx, m, 2, 1, 1, 0);
  static struct run r;
  for (int round = 0; round < 3; round++) {
    for (int k = 0; k < 5; k++) ck_assert_msg(tsr_trainer_step(t, fill, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
    int64_t id;
    ck_assert_msg(tsr_trainer_eval(t, fill, NULL, B, &id) == TSR_OK, "%s", tsr_last_error());
    double got;
    ck_assert_int_eq(tsr_trainer_loss(t, id, &got), TSR_OK);
    get_params(t, &r.p, r.raw);
    double want = loss_grad(&r.p, id, NULL); /* the eval step's batch is sample(step id, .) */
    ck_assert_msg(fabs(got - want) <= 1e-7 + 1e-4 * want, "round %d: evaluation loss %.9g, float64 at the parameters "
                  "read after it %.9g", round, got, want);
  }
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* No per-step join: the load of slice 1 in step 1 (its samples 2 and 3) blocks until the load of
 * slice 0 in step 4 has run, or `limit` seconds. Slice 0's load of step 4 needs slice 0's backward
 * of step 2, hence its forward of step 2, hence (with a join) the updates of step 1 of every slice,
 * slice 1's included, which cannot start before its load: with a join it never comes and the wait
 * ends by the limit. Two CPU workers and the eager scheduler (one central queue), so a free worker
 * runs slice 0's tasks while the other one waits in the load. */
static atomic_int reached, outcome;

static int blocking_fill(void *user, int64_t step, int index, float *x, float *y) {
  const double *limit = user;
  if (step == 4 && index == 0) atomic_store(&reached, 1);
  if (step == 1 && index == 2) {
    struct timespec t0, now, pause = {0, 2000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
      nanosleep(&pause, NULL);
      clock_gettime(CLOCK_MONOTONIC, &now);
    } while (!atomic_load(&reached) && (now.tv_sec - t0.tv_sec) + 1e-9 * (now.tv_nsec - t0.tv_nsec) < *limit);
    atomic_store(&outcome, atomic_load(&reached) ? 1 : -1); /* -1: gave up */
  }
  sample(step, index, x, y);
  return 0;
}

/* Whether slice 0 reached step 4 while slice 1 was held in step 1. */
static int slice0_ran_ahead(int async, int bn, double limit) {
  setenv("STARPU_SCHED", "eager", 1);
  atomic_store(&reached, 0), atomic_store(&outcome, 0);
  tsr_context *ctx = start(0, 2);
  tsr_model *m = model(bn);
  tsr_optim_spec opt = tsr_optim_spec_default(TSR_OPTIM_SGD);
  opt.lr = LR, opt.momentum = 0;
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = B, o.slices = 2, o.window = 6, o.async_slices = async; /* steps 0 .. 6 go in without waiting */
  tsr_trainer *t = NULL;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &opt, &o) == TSR_OK, "%s", tsr_last_error());
  for (int k = 0; k < 8; k++)
    ck_assert_msg(tsr_trainer_step(t, blocking_fill, &limit, NULL) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_trainer_sync(t), TSR_OK);
  double l;
  ck_assert_int_eq(tsr_trainer_loss(t, 7, &l), TSR_OK);
  ck_assert_msg(isfinite(l), "loss of step 7: %g", l);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
  ck_assert_msg(atomic_load(&outcome) != 0, "the load of slice 1 in step 1 did not run");
  return atomic_load(&outcome) == 1;
}

START_TEST(no_join_between_slices) {
  ck_assert_msg(slice0_ran_ahead(1, 0, 100.0), "asynchronous slices: slice 0 did not reach step 4 while slice 1 was "
                "held in step 1 (100 s)");
}
END_TEST

/* The same with a batch normalisation: each slice's statistics and running-statistics updates are
 * its own (check_async_bn), so nothing joins the slices there either. */
START_TEST(no_join_between_slices_with_batchnorm) {
  ck_assert_msg(slice0_ran_ahead(1, 1, 100.0), "asynchronous slices, batch norm: slice 0 did not reach step 4 while "
                "slice 1 was held in step 1 (100 s)");
}
END_TEST

START_TEST(the_synchronous_trainer_joins) { /* the check of the check: a join holds slice 0 back */
  ck_assert_msg(!slice0_ran_ahead(0, 0, 3.0), "synchronous: slice 0 reached step 4 while slice 1 was held in step 1");
}
END_TEST

static void refused(int deterministic, void (*set)(tsr_trainer_opts *), const char *other) {
  tsr_context *ctx = start(deterministic, 2);
  tsr_model *m = model(0);
  tsr_optim_spec opt = tsr_optim_spec_default(TSR_OPTIM_SGD);
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = B, o.slices = 2, o.async_slices = 1;
  if (set) set(&o);
  tsr_trainer *t = NULL;
  tsr_status st = tsr_trainer_create(&t, ctx, m, &opt, &o);
  ck_assert_msg(st != TSR_OK, "async slices with %s were accepted", other);
  ck_assert_msg(strstr(tsr_last_error(), "--async-slices") && strstr(tsr_last_error(), other),
                "the refusal names --async-slices and %s: %s", other, tsr_last_error());
  ck_assert_ptr_null(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}

static void stale(tsr_trainer_opts *o) { o->staleness = 1; }
static void dynamic_scale(tsr_trainer_opts *o) { o->loss_scale = TSR_LOSS_SCALE_DYNAMIC; }
static void fixed_scale(tsr_trainer_opts *o) { o->loss_scale = 128; }
static void spatial(tsr_trainer_opts *o) { o->spatial[0] = 2; }
static void alternate(tsr_trainer_opts *o) { o->skip_reduce_block = 4; }

START_TEST(unsupported_combinations_are_refused) {
  refused(1, NULL, "--deterministic");
  refused(0, stale, "--staleness");
  refused(0, dynamic_scale, "--loss-scale");
  refused(0, fixed_scale, "--loss-scale");
  refused(0, spatial, "--spatial");
  refused(0, alternate, "skip_reduce_block 4");
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("async_slices");
  TCase *tc = tcase_create("hogwild");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, async_off_is_the_default_trainer_bitwise);
  tcase_add_test(tc, one_slice_is_the_synchronous_trainer_bitwise);
  tcase_add_test(tc, several_slices_train_sgd);
  tcase_add_test(tc, several_slices_train_adam);
  tcase_add_test(tc, evaluation_and_reads_see_every_update);
  tcase_add_test(tc, no_join_between_slices);
  tcase_add_test(tc, no_join_between_slices_with_batchnorm);
  tcase_add_test(tc, the_synchronous_trainer_joins);
  tcase_add_test(tc, unsupported_combinations_are_refused);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_suite)

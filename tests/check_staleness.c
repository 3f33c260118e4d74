/* Stale-synchronous training (tsr_trainer_opts.staleness) at one rank: the parameters and losses of
 * a tiny dense network trained with plain SGD (and Adam) against a float64 host loop of delayed-gradient SGD,
 * step k's gradient taken at the parameters after the updates of steps 0 .. k - s - 1 (or of every
 * step submitted before a tsr_trainer_sync, which applies the pending updates), i.e.
 * w_{k+1} = w_k - lr g_k(w_{a_k}), a_k = max(k - s, steps flushed before step k); staleness 0 is the
 * synchronous trainer bitwise; and the combinations that are refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>

#include "testutil.h"
#include "tiny_mlp.h"

#define STEPS 8
#define LR 0.5f

static tsr_context *start(int deterministic) {
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.ncpus = 2, o.use_mpi = 0, o.deterministic = deterministic, o.verbose = 0;
  tsr_context *ctx = NULL;
  ck_assert_msg(tsr_context_create(&ctx, &o, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  return ctx;
}

/* Delayed-gradient SGD (adam: Adam, PyTorch's, lr ADAM_LR) from p0 for STEPS steps with staleness s,
 * all pending updates applied after step `flush_after` (< 0: never); the final parameters and each
 * step's loss. */
#define ADAM_LR 0.02
static void reference(const struct params *p0, int s, int flush_after, int adam, struct params *out, double *losses) {
  struct params *w = malloc(sizeof *w * (STEPS + 1)); /* w[k]: after k updates */
  struct params m, v;
  memset(&m, 0, sizeof m), memset(&v, 0, sizeof v);
  w[0] = *p0;
  int flushed = 0;
  for (int k = 0; k < STEPS; k++) {
    int at = k - s > flushed ? k - s : flushed;
    if (at < 0) at = 0;
    struct params g;
    losses[k] = loss_grad(&w[at], k, &g);
    w[k + 1] = w[k];
    for (int f = 0; f < 4; f++)
      for (int i = 0; i < sizes[f]; i++) {
        double gi = field(&g, f)[i], *mi = &field(&m, f)[i], *vi = &field(&v, f)[i];
        if (!adam) {
          field(&w[k + 1], f)[i] -= LR * gi;
          continue;
        }
        *mi = 0.9 * *mi + 0.1 * gi, *vi = 0.999 * *vi + 0.001 * gi * gi;
        double t = k + 1, mh = *mi / (1 - pow(0.9, t)), vh = *vi / (1 - pow(0.999, t));
        field(&w[k + 1], f)[i] -= ADAM_LR * mh / (sqrt(vh) + 1e-8);
      }
    if (k == flush_after) flushed = k + 1;
  }
  *out = w[STEPS];
  free(w);
}

static tsr_trainer *trainer(tsr_context *ctx, tsr_model *m, int s, int set_field, int adam) {
  tsr_optim_spec sgd = tsr_optim_spec_default(adam ? TSR_OPTIM_ADAM : TSR_OPTIM_SGD);
  sgd.lr = adam ? ADAM_LR : LR, sgd.momentum = 0, sgd.weight_decay = 0;
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = B, o.slices = 2, o.seed = 5;
  if (set_field) o.staleness = s;
  tsr_trainer *t = NULL;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &sgd, &o) == TSR_OK, "%s", tsr_last_error());
  return t;
}

static void get_params(tsr_trainer *t, float *out[4]) {
  for (int f = 0; f < 4; f++) {
    int i = tsr_trainer_tensor_find(t, names[f]);
    ck_assert_msg(i >= 0, "tensor %s", names[f]);
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, out[f]), TSR_OK);
  }
}

/* Trains STEPS steps (tsr_trainer_sync after step flush_after when >= 0; det: a deterministic context);
 * the parameters before and after, and the losses. */
static void run(int s, int set_field, int det, int flush_after, int adam, struct params *p0,
                float after[4][NH * NI], double *losses) {
  tsr_context *ctx = start(det);
  tsr_model *m = model(0);
  tsr_trainer *t = trainer(ctx, m, s, set_field, adam);
  float before[4][NH * NI];
  float *b[4] = {before[0], before[1], before[2], before[3]}, *a[4] = {after[0], after[1], after[2], after[3]};
  get_params(t, b);
  for (int f = 0; f < 4; f++)
    for (int i = 0; i < sizes[f]; i++) field(p0, f)[i] = before[f][i];
  for (int k = 0; k < STEPS; k++) {
    ck_assert_msg(tsr_trainer_step(t, fill, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
    if (k == flush_after) ck_assert_int_eq(tsr_trainer_sync(t), TSR_OK);
  }
  get_params(t, a);
  for (int k = 0; k < STEPS; k++) ck_assert_int_eq(tsr_trainer_loss(t, k, &losses[k]), TSR_OK);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}

/* Largest |got - ref| / (atol + rtol |ref|) over the parameters. */
static double worst(float got[4][NH * NI], struct params *ref) {
  double w = 0;
  for (int f = 0; f < 4; f++) {
    double r = tt_err_ratio(got[f], field(ref, f), sizes[f], 1e-6, 1e-4, NULL);
    if (!(r <= w)) w = r;
  }
  return w;
}

static void check_against_reference(int s, int flush_after, int adam) {
  struct params p0, ref, sync_ref;
  float got[4][NH * NI];
  double losses[STEPS], ref_losses[STEPS], sync_losses[STEPS];
  run(s, 1, 0, flush_after, adam, &p0, got, losses);
  reference(&p0, s, flush_after, adam, &ref, ref_losses);
  double w = worst(got, &ref);
  ck_assert_msg(w <= 1, "staleness %d (flush after %d): parameters %.3g x tolerance (rtol 1e-4) from the delayed-SGD "
                "reference", s, flush_after, w);
  for (int k = 0; k < STEPS; k++)
    ck_assert_msg(fabs(losses[k] - ref_losses[k]) <= 1e-6 + 1e-4 * fabs(ref_losses[k]),
                  "staleness %d: loss of step %d is %.9g, reference %.9g", s, k, losses[k], ref_losses[k]);
  /* The check of the check: the synchronous trajectory is far outside the tolerance. */
  reference(&p0, 0, -1, adam, &sync_ref, sync_losses);
  ck_assert_msg(worst(got, &sync_ref) > 10, "staleness %d: indistinguishable from synchronous SGD", s);
}

START_TEST(staleness_1_is_delayed_gradient_sgd) { check_against_reference(1, -1, 0); }
END_TEST

START_TEST(staleness_2_is_delayed_gradient_sgd) { check_against_reference(2, -1, 0); }
END_TEST

START_TEST(staleness_2_is_delayed_gradient_adam) { check_against_reference(2, -1, 1); }
END_TEST

START_TEST(sync_applies_the_pending_updates) { check_against_reference(2, 3, 0); }
END_TEST

START_TEST(staleness_0_is_the_synchronous_trainer_bitwise) {
  struct params p0, ref;
  float plain[4][NH * NI] = {{0}}, zero[4][NH * NI] = {{0}};
  double lp[STEPS], lz[STEPS], lr[STEPS];
  run(0, 0, 1, -1, 0, &p0, plain, lp); /* the field left at its default; deterministic: a fixed order of sums */
  run(0, 1, 1, -1, 0, &p0, zero, lz);
  ck_assert_msg(memcmp(plain, zero, sizeof plain) == 0, "staleness 0: parameters differ from the default trainer's");
  ck_assert_msg(memcmp(lp, lz, sizeof lp) == 0, "staleness 0: losses differ from the default trainer's");
  reference(&p0, 0, -1, 0, &ref, lr);
  ck_assert_msg(worst(zero, &ref) <= 1, "staleness 0: not synchronous SGD");
}
END_TEST

static void refused(int deterministic, void (*set)(tsr_trainer_opts *, tsr_optim_spec *), const char *other) {
  tsr_context *ctx = start(deterministic);
  tsr_model *m = model(0);
  tsr_optim_spec opt = tsr_optim_spec_default(TSR_OPTIM_SGD);
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = B, o.staleness = 1;
  set(&o, &opt);
  tsr_trainer *t = NULL;
  tsr_status st = tsr_trainer_create(&t, ctx, m, &opt, &o);
  ck_assert_msg(st != TSR_OK, "staleness with %s was accepted", other);
  ck_assert_msg(strstr(tsr_last_error(), "staleness") && strstr(tsr_last_error(), other),
                "the refusal names staleness and %s: %s", other, tsr_last_error());
  ck_assert_ptr_null(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}

static void nothing(tsr_trainer_opts *o, tsr_optim_spec *p) { (void)o, (void)p; }
static void dynamic_scale(tsr_trainer_opts *o, tsr_optim_spec *p) { o->loss_scale = TSR_LOSS_SCALE_DYNAMIC; }
static void sign_vote(tsr_trainer_opts *o, tsr_optim_spec *p) {
  *p = tsr_optim_spec_default(TSR_OPTIM_LION);
  ck_assert_int_eq(tsr_reduce_precision_parse("sign1", &o->grad_reduce), TSR_OK);
}
static void spatial(tsr_trainer_opts *o, tsr_optim_spec *p) { o->spatial[0] = 2; }
static void too_stale(tsr_trainer_opts *o, tsr_optim_spec *p) { o->staleness = TSR_MAX_STALENESS + 1; }
static void negative(tsr_trainer_opts *o, tsr_optim_spec *p) { o->staleness = -1; }
static void alternate(tsr_trainer_opts *o, tsr_optim_spec *p) { o->skip_reduce_block = 4; }

START_TEST(unsupported_combinations_are_refused) {
  refused(1, nothing, "deterministic");
  refused(0, dynamic_scale, "dynamic loss scaling");
  refused(0, sign_vote, "sign1");
  refused(0, spatial, "spatial parallelism");
  refused(0, too_stale, "must be in [0, 16]");
  refused(0, negative, "must be in [0, 16]");
  refused(0, alternate, "skip_reduce_block 4");
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("staleness");
  TCase *tc = tcase_create("ssp");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, staleness_0_is_the_synchronous_trainer_bitwise);
  tcase_add_test(tc, staleness_1_is_delayed_gradient_sgd);
  tcase_add_test(tc, staleness_2_is_delayed_gradient_sgd);
  tcase_add_test(tc, staleness_2_is_delayed_gradient_adam);
  tcase_add_test(tc, sync_applies_the_pending_updates);
  tcase_add_test(tc, unsupported_combinations_are_refused);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_suite)

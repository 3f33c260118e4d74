/* Asynchronous slices (tsr_trainer_opts.async_slices) with batch normalisation, on the tiny network
 * with a batch norm between its hidden layer and tanh (tiny_mlp.h) and batches of 6: with one slice
 * it is the synchronous trainer bitwise (SGD and Adam: parameters, running statistics, losses); with
 * 2 slices of 3 samples and learning rate 0 (so no update changes what a slice reads) each step's
 * loss is that of a float64 forward that normalises each slice with its own statistics (within
 * 1e-5, and the whole batch's statistics give another loss), the running statistics after one step
 * are the two slices' momentum updates in one order or the other (within 1e-6), and prediction
 * normalises with the running statistics (float64 within 1e-5); with 2 and 3 slices it trains
 * on batches of 24 (held-out evaluation loss bound below). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>

#include "testutil.h"
#include "tiny_mlp.h"

enum { NB = 6 };                           /* the batch */
static const double EPS = 1e-5, MOM = 0.1; /* batchnorm's defaults */

/* Sample `index` of step `step` (or of step *user: held-out steps from 100000 on); batches of more
 * than NB samples share some with the next step. */
static int fill_step(void *user, int64_t step, int index, float *x, float *y) {
  const int64_t *base = user;
  sample(0, (base ? *base : step) * NB + index, x, y);
  return 0;
}

static tsr_context *start(void) {
  setenv("STARPU_CALIBRATE", "1", 1); /* see check_async_slices.c */
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.ncpus = 2, o.use_mpi = 0, o.verbose = 0;
  tsr_context *ctx = NULL;
  ck_assert_msg(tsr_context_create(&ctx, &o, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  return ctx;
}

static tsr_trainer *trainer(tsr_context *ctx, tsr_model *m, int batch, int slices, int async, int adam, float lr) {
  tsr_optim_spec opt = tsr_optim_spec_default(adam ? TSR_OPTIM_ADAM : TSR_OPTIM_SGD);
  opt.lr = lr, opt.momentum = 0, opt.weight_decay = 0;
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = batch, o.slices = slices, o.seed = 5, o.async_slices = async;
  tsr_trainer *t = NULL;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &opt, &o) == TSR_OK, "%s", tsr_last_error());
  return t;
}

/* Every tensor of the network, in the trainer's order, and its count of floats. */
enum { MAXF = 64 };
struct tensors {
  int n;
  float v[8][MAXF];
  char name[8][32];
};

static void get_all(tsr_trainer *t, struct tensors *w) {
  memset(w, 0, sizeof *w);
  w->n = tsr_trainer_num_tensors(t);
  ck_assert_int_eq(w->n, 8);
  for (int i = 0; i < w->n; i++) {
    const char *name;
    tsr_shape sh;
    ck_assert_int_eq(tsr_trainer_tensor_info(t, i, &name, &sh, NULL), TSR_OK);
    snprintf(w->name[i], sizeof w->name[i], "%s", name);
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, w->v[i]), TSR_OK);
  }
}

static const float *tensor(const struct tensors *w, const char *name) {
  for (int i = 0; i < w->n; i++)
    if (strcmp(w->name[i], name) == 0) return w->v[i];
  ck_abort_msg("no tensor %s", name);
  return NULL;
}

START_TEST(one_slice_is_the_synchronous_trainer_bitwise) {
  for (int adam = 0; adam < 2; adam++) {
    static struct tensors w[2];
    double losses[2][8];
    for (int async = 0; async < 2; async++) {
      tsr_context *ctx = start();
      tsr_model *m = model(1);
      tsr_trainer *t = trainer(ctx, m, NB, 1, async, adam, adam ? 0.02f : 0.5f);
      for (int k = 0; k < 8; k++)
        ck_assert_msg(tsr_trainer_step(t, fill_step, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
      for (int k = 0; k < 8; k++) ck_assert_int_eq(tsr_trainer_loss(t, k, &losses[async][k]), TSR_OK);
      get_all(t, &w[async]);
      tsr_trainer_destroy(t);
      tsr_model_destroy(m);
      tsr_context_destroy(ctx);
    }
    for (int i = 0; i < w[0].n; i++)
      ck_assert_msg(memcmp(w[0].v[i], w[1].v[i], sizeof w[0].v[i]) == 0,
                    "%s, one slice: %s differs from the "
                    "synchronous trainer's",
                    adam ? "Adam" : "SGD", w[0].name[i]);
    ck_assert_msg(memcmp(losses[0], losses[1], sizeof losses[0]) == 0, "%s, one slice: losses differ",
                  adam ? "Adam" : "SGD");
  }
}
END_TEST

/* ---- float64 forward of the network with batch norm ---- */

/* Hidden pre-activations of samples [first, first + n) of step k. */
static void hidden(const struct tensors *w, int64_t k, int first, int n, double h[][NH], float x[][NI], float y[][NO]) {
  const float *w1 = tensor(w, "h.weight"), *b1 = tensor(w, "h.bias");
  for (int i = 0; i < n; i++) {
    sample(0, k * NB + first + i, x[i], y[i]);
    for (int j = 0; j < NH; j++) {
      h[i][j] = b1[j];
      for (int c = 0; c < NI; c++) h[i][j] += (double)w1[j * NI + c] * x[i][c];
    }
  }
}

/* The rest of the network from normalised-by-(mean, var) hidden values: summed squared error / NO. */
static double head(const struct tensors *w, const double *h, const double *mean, const double *var, const float *y,
                   double *out) {
  const float *g = tensor(w, "bn.weight"), *be = tensor(w, "bn.bias");
  const float *w2 = tensor(w, "out.weight"), *b2 = tensor(w, "out.bias");
  double a[NH], sse = 0;
  for (int j = 0; j < NH; j++) a[j] = tanh(g[j] * (h[j] - mean[j]) / sqrt(var[j] + EPS) + be[j]);
  for (int o = 0; o < NO; o++) {
    double s = b2[o];
    for (int j = 0; j < NH; j++) s += (double)w2[o * NH + j] * a[j];
    if (out) out[o] = s;
    if (y) sse += (s - y[o]) * (s - y[o]) / NO;
  }
  return sse;
}

/* Mean loss of step k with statistics over groups of `group` samples (the slices, or the batch). */
static double ref_loss(const struct tensors *w, int64_t k, int group) {
  double loss = 0;
  for (int first = 0; first < NB; first += group) {
    double h[NB][NH], mean[NH] = {0}, var[NH] = {0};
    float x[NB][NI], y[NB][NO];
    hidden(w, k, first, group, h, x, y);
    for (int j = 0; j < NH; j++) {
      for (int i = 0; i < group; i++) mean[j] += h[i][j] / group;
      for (int i = 0; i < group; i++) var[j] += (h[i][j] - mean[j]) * (h[i][j] - mean[j]) / group;
    }
    for (int i = 0; i < group; i++) loss += head(w, h[i], mean, var, y[i], NULL) / NB;
  }
  return loss;
}

/* Running statistics after the momentum updates of slice a's statistics then slice b's (step 0,
 * slices of 3, from mean 0 and variance 1; unbiased variance). */
static void ref_running(const struct tensors *w, int a, double *rm, double *rv) {
  for (int j = 0; j < NH; j++) rm[j] = 0, rv[j] = 1;
  for (int k = 0; k < 2; k++) {
    int s = k == 0 ? a : 1 - a;
    double h[NB][NH];
    float x[NB][NI], y[NB][NO];
    hidden(w, 0, 3 * s, 3, h, x, y);
    for (int j = 0; j < NH; j++) {
      double mean = 0, var = 0;
      for (int i = 0; i < 3; i++) mean += h[i][j] / 3;
      for (int i = 0; i < 3; i++) var += (h[i][j] - mean) * (h[i][j] - mean) / 2;
      rm[j] = (1 - MOM) * rm[j] + MOM * mean, rv[j] = (1 - MOM) * rv[j] + MOM * var;
    }
  }
}

static int close_to(const float *a, const double *ref, int n, double tol) {
  for (int i = 0; i < n; i++)
    if (!(fabs(a[i] - ref[i]) <= tol * (1 + fabs(ref[i])))) return 0;
  return 1;
}

START_TEST(two_slices_normalise_each_slice_with_its_own_statistics) {
  tsr_context *ctx = start();
  tsr_model *m = model(1);
  tsr_trainer *t = trainer(ctx, m, NB, 2, 1, 0, 0.0f); /* rate 0: every slice reads the initial parameters */
  static struct tensors w;
  get_all(t, &w);
  ck_assert_msg(tsr_trainer_step(t, fill_step, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  static struct tensors after;
  get_all(t, &after);
  double rm[2][NH], rv[2][NH];
  for (int a = 0; a < 2; a++) ref_running(&w, a, rm[a], rv[a]);
  const float *grm = tensor(&after, "bn.running_mean"), *grv = tensor(&after, "bn.running_var");
  ck_assert_msg((close_to(grm, rm[0], NH, 1e-6) && close_to(grv, rv[0], NH, 1e-6)) ||
                    (close_to(grm, rm[1], NH, 1e-6) && close_to(grv, rv[1], NH, 1e-6)),
                "running mean %g %g .. / var %g %g .. after one step: neither slice 0's then slice 1's momentum "
                "update (%g %g .. / %g %g ..) nor the other order (%g %g .. / %g %g ..)",
                grm[0], grm[1], grv[0], grv[1], rm[0][0], rm[0][1], rv[0][0], rv[0][1], rm[1][0], rm[1][1], rv[1][0],
                rv[1][1]);
  for (int k = 1; k < 4; k++)
    ck_assert_msg(tsr_trainer_step(t, fill_step, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  for (int k = 0; k < 4; k++) {
    double got, want = ref_loss(&w, k, 3), whole = ref_loss(&w, k, NB);
    ck_assert_int_eq(tsr_trainer_loss(t, k, &got), TSR_OK);
    ck_assert_msg(fabs(got - want) <= 1e-5 * want,
                  "step %d: loss %.9g, float64 with per-slice statistics %.9g "
                  "(whole-batch statistics %.9g)",
                  k, got, want, whole);
    ck_assert_msg(fabs(whole - want) > 1e-3 * want,
                  "step %d: the whole batch's statistics give the same loss "
                  "(%.9g): the check cannot tell them apart",
                  k, whole);
  }
  /* prediction: the running statistics (read back), not the samples' own */
  get_all(t, &after);
  float x[NB][NI], y[NB][NO], out[NB * NO];
  double h[NB][NH], mean[NH], var[NH], batch_mean[NH] = {0}, batch_var[NH] = {0};
  hidden(&after, 50, 0, NB, h, x, y);
  ck_assert_msg(tsr_trainer_predict(t, &x[0][0], NB, out) == TSR_OK, "%s", tsr_last_error());
  for (int j = 0; j < NH; j++) {
    mean[j] = tensor(&after, "bn.running_mean")[j], var[j] = tensor(&after, "bn.running_var")[j];
    for (int i = 0; i < NB; i++) batch_mean[j] += h[i][j] / NB;
    for (int i = 0; i < NB; i++) batch_var[j] += (h[i][j] - batch_mean[j]) * (h[i][j] - batch_mean[j]) / NB;
  }
  double far = 0;
  for (int i = 0; i < NB; i++) {
    double want[NO], batch[NO];
    head(&after, h[i], mean, var, NULL, want);
    head(&after, h[i], batch_mean, batch_var, NULL, batch);
    tt_assert_close(out + i * NO, want, NO, 1e-5, 1e-5, "prediction with the running statistics");
    for (int o = 0; o < NO; o++) far = fmax(far, fabs(want[o] - batch[o]));
  }
  ck_assert_msg(far > 1e-3, "the batch's own statistics predict the same (%g): the check cannot tell them apart", far);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* Mean evaluation loss (running statistics) over 16 held-out batches. */
static double held_out(tsr_trainer *t) {
  double sum = 0;
  for (int64_t k = 0; k < 16; k++) {
    int64_t base = 100000 + k, id;
    ck_assert_msg(tsr_trainer_eval(t, fill_step, &base, tsr_trainer_batch(t), &id) == TSR_OK, "%s", tsr_last_error());
    double l;
    ck_assert_int_eq(tsr_trainer_loss(t, id, &l), TSR_OK); /* before `base` goes out of scope */
    sum += l;
  }
  return sum / 16;
}

/* 300 SGD steps on batches of TB: held-out loss in evaluation mode below BOUND of the initial one
 * and within WITHIN times the synchronous trainer's. Measured (3 runs each): 0.05 of the initial
 * loss for both, asynchronous 0.99-1.03x the synchronous loss with 2 slices of 12 samples,
 * 0.87-0.91x with 3 of 8. Smaller slices normalise with noisier statistics than the running ones
 * evaluation uses: batches of 12 gave 1.1-1.2x with 2 slices of 6 and 2.6-3.3x with 3 of 4,
 * batches of 6 2-4x (slices of 3 and 2). */
#define STEPS 300
#define TB 24
#define BOUND 0.4
#define WITHIN 1.5
static double train_held_out(int slices, int async, double *initial) {
  tsr_context *ctx = start();
  tsr_model *m = model(1);
  tsr_trainer *t = trainer(ctx, m, TB, slices, async, 0, 0.5f);
  double h0 = held_out(t); /* every run evaluates first, so all train on the same batches */
  if (initial) *initial = h0;
  for (int k = 0; k < STEPS; k++)
    ck_assert_msg(tsr_trainer_step(t, fill_step, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  for (int k = 0; k < STEPS; k++) {
    double l;
    ck_assert_int_eq(tsr_trainer_loss(t, k, &l), TSR_OK);
    ck_assert_msg(isfinite(l), "step %d: loss %g", k, l);
  }
  double h = held_out(t);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
  return h;
}

START_TEST(several_slices_train) {
  double l0, ls = train_held_out(2, 0, &l0);
  for (int slices = 2; slices <= 3; slices++) {
    double la = train_held_out(slices, 1, NULL);
    ck_assert_msg(la < BOUND * l0 && la < WITHIN * ls,
                  "%d asynchronous slices with batch norm: held-out loss %.4g "
                  "from %.4g (synchronous %.4g)",
                  slices, la, l0, ls);
  }
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("async_bn");
  TCase *tc = tcase_create("batchnorm");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, one_slice_is_the_synchronous_trainer_bitwise);
  tcase_add_test(tc, two_slices_normalise_each_slice_with_its_own_statistics);
  tcase_add_test(tc, several_slices_train);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_suite)

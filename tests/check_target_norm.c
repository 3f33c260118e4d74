/* Target standardisation in the trainer (tsr_trainer_set_target_norm): the loss is computed against
 * (y - mean) / std, outputs leave the trainer as out * std + mean, the factor that turns the loss
 * into target units, exports and checkpoints carry the statistics (predictions alike after an
 * import, bitwise resume), and the refusals name what is wrong. The network is one 3x3 convolution
 * (2 -> 2 channels, padding 1), computed here in float64 as the reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tessera.h>

#include "testutil.h"

enum { C = 2, H = 5, W = 7, PLANE = H * W, E = C * PLANE, B = 2 };
static const float tmean[C] = {120.0f, -3.0f}, tstd[C] = {40.0f, 0.5f};

static tsr_context *ctx;
static tsr_model *model;

static tsr_model *conv_model(tsr_loss_kind loss) {
  tsr_model *m = NULL;
  ck_assert(tsr_model_create(&m, "one_conv") == TSR_OK);
  ck_assert(tsr_model_add_input(m, "in", C, H, W) == TSR_OK);
  tsr_layer_spec c = tsr_layer_spec_default(TSR_LAYER_CONV2D);
  c.out_channels = C, c.kernel_h = c.kernel_w = 3, c.pad_h = c.pad_w = 1;
  const char *in = "in";
  ck_assert_msg(tsr_model_add(m, "out", &c, &in, 1) == TSR_OK, "%s", tsr_last_error());
  ck_assert(tsr_model_set_output(m, "out", loss, 1.0f) == TSR_OK);
  return m;
}

static void setup(void) {
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.ncpus = 2, o.use_mpi = 0, o.verbose = 0, o.deterministic = 1;
  ck_assert_msg(tsr_context_create(&ctx, &o, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  model = conv_model(TSR_LOSS_MSE);
}

static void teardown(void) {
  tsr_model_destroy(model);
  tsr_context_destroy(ctx);
}

static tsr_trainer *make_trainer(tsr_model *m, uint64_t seed) {
  tsr_optim_spec adam = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  adam.lr = 1e-2f;
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = B, to.seed = seed;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &adam, &to) == TSR_OK, "%s", tsr_last_error());
  return t;
}

/* Sample `index` of draw `draw`: inputs in [-1, 1]; raw targets around tmean[c] by about tstd[c]. */
static void sample(int64_t draw, int index, float *x, float *y) {
  uint64_t seed = 1000 + 17 * (uint64_t)draw + (uint64_t)index;
  tt_fill_uniform(x, E, seed, -1, 1);
  tt_fill_uniform(y, E, seed + 500, -2, 2);
  for (int i = 0; i < E; i++) y[i] = tmean[i / PLANE] + tstd[i / PLANE] * y[i];
}

/* The samples of step `step` (the trainer's step id: a restored trainer continues its numbering),
 * drawn when the load task runs. */
struct src {
  int standardise; /* targets written as (y - mean) / std in float32, as the load task computes them */
};

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  const struct src *s = user;
  sample(step, index, x, y);
  for (int i = 0; s->standardise && i < E; i++) y[i] = (y[i] - tmean[i / PLANE]) / tstd[i / PLANE];
  return 0;
}

/* `steps` training steps; their losses. */
static void train(tsr_trainer *t, struct src *s, int steps, double *loss) {
  int64_t id[16];
  for (int i = 0; i < steps; i++)
    ck_assert_msg(tsr_trainer_step(t, fill, s, &id[i]) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_trainer_sync(t) == TSR_OK, "%s", tsr_last_error());
  for (int i = 0; i < steps; i++) ck_assert_int_eq(tsr_trainer_loss(t, id[i], &loss[i]), TSR_OK);
}

/* The convolution in float64 from the trainer's weights: out[n][o][h][w]. */
static void conv_ref(tsr_trainer *t, const float *x, int n, double *out) {
  float wt[C * C * 9], b[C];
  ck_assert(tsr_trainer_tensor_get(t, tsr_trainer_tensor_find(t, "out.weight"), wt) == TSR_OK);
  ck_assert(tsr_trainer_tensor_get(t, tsr_trainer_tensor_find(t, "out.bias"), b) == TSR_OK);
  for (int s = 0; s < n; s++)
    for (int o = 0; o < C; o++)
      for (int i = 0; i < H; i++)
        for (int j = 0; j < W; j++) {
          double acc = b[o];
          for (int c = 0; c < C; c++)
            for (int u = 0; u < 3; u++)
              for (int v = 0; v < 3; v++) {
                int ii = i + u - 1, jj = j + v - 1;
                if (ii >= 0 && ii < H && jj >= 0 && jj < W)
                  acc += (double)wt[((o * C + c) * 3 + u) * 3 + v] * x[s * E + c * PLANE + ii * W + jj];
              }
          out[s * E + o * PLANE + i * W + j] = acc;
        }
}

/* Predictions leave the trainer in target units: the float64 network times std plus mean. The
 * tolerance is float32 rounding of values up to ~250 (outputs ~ std, plus the mean): 1e-4 absolute
 * + 1e-5 relative. */
START_TEST(predictions_are_in_target_units) {
  tsr_trainer *t = make_trainer(model, 3);
  struct src s = {0};
  double loss[4];
  ck_assert_int_eq(tsr_trainer_set_target_norm(t, tmean, tstd, C), TSR_OK);
  train(t, &s, 4, loss); /* weights away from their initial values */
  float x[B * E], y[B * E], got[B * E];
  sample(99, 0, x, y), sample(99, 1, x + E, y + E);
  ck_assert_msg(tsr_trainer_predict(t, x, B, got) == TSR_OK, "%s", tsr_last_error());
  double ref[B * E];
  conv_ref(t, x, B, ref);
  for (int i = 0; i < B * E; i++) ref[i] = ref[i] * tstd[i % E / PLANE] + tmean[i % E / PLANE];
  tt_assert_close(got, ref, B * E, 1e-4, 1e-5, "prediction with the target standardisation undone");
  const float *m, *sd;
  tsr_trainer_target_norm(t, &m, &sd);
  ck_assert(m && m[1] == tmean[1] && sd[1] == tstd[1]);
  /* removing it gives the network's own output */
  ck_assert_int_eq(tsr_trainer_set_target_norm(t, NULL, NULL, 0), TSR_OK);
  ck_assert_msg(tsr_trainer_predict(t, x, B, got) == TSR_OK, "%s", tsr_last_error());
  conv_ref(t, x, B, ref);
  tt_assert_close(got, ref, B * E, 1e-5, 1e-5, "prediction without target standardisation");
  tsr_trainer_destroy(t);
}
END_TEST

/* Training with the standardisation on raw targets is training on targets standardised beforehand
 * (the same float32 operation): the same losses, bitwise (deterministic mode, same seed). */
START_TEST(training_equals_training_on_standardised_targets) {
  tsr_trainer *a = make_trainer(model, 5), *b = make_trainer(model, 5);
  ck_assert_int_eq(tsr_trainer_set_target_norm(a, tmean, tstd, C), TSR_OK);
  struct src sa = {0}, sb = {1};
  double la[6], lb[6];
  train(a, &sa, 6, la), train(b, &sb, 6, lb);
  for (int i = 0; i < 6; i++) ck_assert_msg(la[i] == lb[i], "step %d: loss %.17g, on standardised targets %.17g", i, la[i], lb[i]);
  ck_assert_msg(la[5] < la[0], "the loss does not go down: %g -> %g", la[0], la[5]);
  tsr_trainer_destroy(a), tsr_trainer_destroy(b);
}
END_TEST

static int fill_eval(void *user, int64_t step, int index, float *x, float *y) {
  sample(77, index, x, y);
  return 0;
}

/* The reported loss is the standardised MSE (float64 reference from the host convolution); with one
 * std for both channels, tsr_trainer_target_loss_factor (std^2) turns it into the MSE in target
 * units of the denormalised outputs; with different stds there is no one factor (NAN). */
START_TEST(loss_in_standardised_and_target_units) {
  tsr_trainer *t = make_trainer(model, 7);
  ck_assert(tsr_trainer_target_loss_factor(t) == 1.0);
  const float same_std[C] = {40.0f, 40.0f};
  ck_assert_int_eq(tsr_trainer_set_target_norm(t, tmean, same_std, C), TSR_OK);
  float x[B * E], y[B * E], out[B * E];
  for (int i = 0; i < B; i++) sample(77, i, x + i * E, y + i * E);
  int64_t id;
  double loss;
  ck_assert_msg(tsr_trainer_eval_out(t, fill_eval, NULL, B, out, &id) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_trainer_loss(t, id, &loss), TSR_OK);
  double net[B * E], se_std = 0, se_raw = 0;
  conv_ref(t, x, B, net);
  for (int i = 0; i < B * E; i++) {
    int c = i % E / PLANE;
    double ys = ((double)y[i] - tmean[c]) / same_std[c], e = net[i] - ys;
    double raw = net[i] * same_std[c] + tmean[c];
    se_std += e * e, se_raw += (raw - y[i]) * (raw - y[i]);
  }
  double want_std = se_std / (B * E), want_raw = se_raw / (B * E), f = tsr_trainer_target_loss_factor(t);
  ck_assert_msg(fabs(loss - want_std) <= 1e-5 * want_std, "standardised loss %.9g, float64 %.9g", loss, want_std);
  ck_assert_msg(f == 1600.0, "factor %g, std^2 is 1600", f);
  ck_assert_msg(fabs(loss * f - want_raw) <= 1e-5 * want_raw, "loss in target units %.9g, float64 %.9g", loss * f,
                want_raw);
  /* the outputs copied out are in target units too */
  for (int i = 0; i < B * E; i++) net[i] = net[i] * same_std[i % E / PLANE] + tmean[i % E / PLANE];
  tt_assert_close(out, net, B * E, 1e-4, 1e-5, "tsr_trainer_eval_out's outputs");
  ck_assert_int_eq(tsr_trainer_set_target_norm(t, tmean, tstd, C), TSR_OK);
  ck_assert_msg(isnan(tsr_trainer_target_loss_factor(t)), "channels with different stds have no one factor");
  tsr_trainer_destroy(t);
  /* L1: std; Huber: none */
  tsr_model *l1 = conv_model(TSR_LOSS_L1), *hub = conv_model(TSR_LOSS_HUBER);
  tsr_trainer *a = make_trainer(l1, 1), *b = make_trainer(hub, 1);
  ck_assert_int_eq(tsr_trainer_set_target_norm(a, tmean, same_std, C), TSR_OK);
  ck_assert_int_eq(tsr_trainer_set_target_norm(b, tmean, same_std, C), TSR_OK);
  ck_assert(tsr_trainer_target_loss_factor(a) == 40.0);
  ck_assert(isnan(tsr_trainer_target_loss_factor(b)));
  tsr_trainer_destroy(a), tsr_trainer_destroy(b);
  tsr_model_destroy(l1), tsr_model_destroy(hub);
}
END_TEST

/* An export carries target_mean and target_std (.npy and HDF5); a fresh trainer that imports it
 * predicts as the exporting one did, in target units. An export of a trainer without one has
 * neither, and one of them alone is refused, naming it. */
START_TEST(export_import_keeps_the_statistics) {
  char dir[512], npy[600], h5[600], plain[600];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  snprintf(npy, sizeof npy, "%s/exp", dir), snprintf(h5, sizeof h5, "%s/exp.h5", dir);
  snprintf(plain, sizeof plain, "%s/plain", dir);
  tsr_trainer *t = make_trainer(model, 3);
  struct src s = {0};
  double loss[3];
  ck_assert_int_eq(tsr_trainer_set_target_norm(t, tmean, tstd, C), TSR_OK);
  train(t, &s, 3, loss);
  float x[B * E], y[B * E], pa[B * E], pb[B * E];
  sample(50, 0, x, y), sample(50, 1, x + E, y + E);
  ck_assert_msg(tsr_trainer_predict(t, x, B, pa) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_params_export(t, npy) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_params_export(t, h5) == TSR_OK, "%s", tsr_last_error());
  const char *paths[2] = {npy, h5};
  for (int k = 0; k < 2; k++) {
    tsr_trainer *b = make_trainer(model, 99);
    ck_assert_msg(tsr_params_import(b, paths[k]) == TSR_OK, "%s", tsr_last_error());
    const float *m, *sd;
    tsr_trainer_target_norm(b, &m, &sd);
    ck_assert_msg(m && m[0] == tmean[0] && m[1] == tmean[1] && sd[0] == tstd[0] && sd[1] == tstd[1],
                  "%s: target statistics not imported", paths[k]);
    ck_assert_msg(tsr_trainer_predict(b, x, B, pb) == TSR_OK, "%s", tsr_last_error());
    for (int i = 0; i < B * E; i++) ck_assert_msg(pa[i] == pb[i], "%s: value %d: %g, exporter %g", paths[k], i, pb[i], pa[i]);
    tsr_trainer_destroy(b);
  }
  /* one alone: refused, the importer unchanged */
  ck_assert(remove(tt_path_in(npy, "target_std.npy")) == 0);
  tsr_trainer *b = make_trainer(model, 99);
  ck_assert_int_eq(tsr_params_import(b, npy), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(tsr_last_error(), "target_std") && strstr(tsr_last_error(), npy), "%s", tsr_last_error());
  const float *m, *sd;
  tsr_trainer_target_norm(b, &m, &sd);
  ck_assert(!m && !sd);
  /* without one: no files, and the importer keeps its own */
  ck_assert_int_eq(tsr_trainer_set_target_norm(t, NULL, NULL, 0), TSR_OK);
  ck_assert_msg(tsr_params_export(t, plain) == TSR_OK, "%s", tsr_last_error());
  ck_assert(access(tt_path_in(plain, "target_mean.npy"), F_OK) != 0);
  ck_assert_int_eq(tsr_trainer_set_target_norm(b, tmean, tstd, C), TSR_OK);
  ck_assert_msg(tsr_params_import(b, plain) == TSR_OK, "%s", tsr_last_error());
  tsr_trainer_target_norm(b, &m, &sd);
  ck_assert(m && m[0] == tmean[0]);
  tsr_trainer_destroy(b), tsr_trainer_destroy(t);
}
END_TEST

/* A checkpoint carries the statistics: a fresh trainer without any restored from it continues the
 * training bitwise, and one without statistics removes a restored trainer's. */
START_TEST(checkpoint_resume_is_bitwise) {
  char path[600], plain[600];
  snprintf(path, sizeof path, "%s/ck.h5", tt_tmpdir());
  snprintf(plain, sizeof plain, "%s/plain.h5", tt_tmpdir());
  tsr_trainer *a = make_trainer(model, 11);
  ck_assert_int_eq(tsr_trainer_set_target_norm(a, tmean, tstd, C), TSR_OK);
  struct src s = {0};
  double la[8], lb[5];
  train(a, &s, 3, la);
  tsr_checkpoint_meta meta = {.step = 3, .epoch = 1, .position = 3, .nranks = 1, .batch = B};
  ck_assert_msg(tsr_checkpoint_save(a, path, &meta) == TSR_OK, "%s", tsr_last_error());
  train(a, &s, 5, la + 3);
  tsr_trainer *b = make_trainer(model, 11);
  ck_assert_msg(tsr_checkpoint_load(b, path, NULL) == TSR_OK, "%s", tsr_last_error());
  const float *m, *sd;
  tsr_trainer_target_norm(b, &m, &sd);
  ck_assert(m && m[1] == tmean[1] && sd[1] == tstd[1]);
  train(b, &s, 5, lb);
  for (int i = 0; i < 5; i++)
    ck_assert_msg(la[3 + i] == lb[i], "step %d: resumed loss %.17g, uninterrupted %.17g", 4 + i, lb[i], la[3 + i]);
  /* a checkpoint of a trainer without statistics: the restored trainer has none */
  tsr_trainer *c = make_trainer(model, 11);
  ck_assert_msg(tsr_checkpoint_save(c, plain, &meta) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_checkpoint_load(b, plain, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_trainer_target_norm(b, &m, &sd);
  ck_assert(!m && !sd);
  tsr_trainer_destroy(a), tsr_trainer_destroy(b), tsr_trainer_destroy(c);
}
END_TEST

/* Refusals name the loss, the layer, the channel. */
START_TEST(refusals_name_the_problem) {
  tsr_trainer *t = make_trainer(model, 1);
  ck_assert_int_eq(tsr_trainer_set_target_norm(t, tmean, tstd, 3), TSR_ERR_SHAPE);
  ck_assert_msg(strstr(tsr_last_error(), "'out'") && strstr(tsr_last_error(), "3 channels"), "%s", tsr_last_error());
  const float bad[C] = {1.0f, 0.0f};
  ck_assert_int_eq(tsr_trainer_set_target_norm(t, tmean, bad, C), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "channel 1"), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_trainer_set_target_norm(t, tmean, NULL, C), TSR_ERR_ARG);
  const float *m, *sd;
  tsr_trainer_target_norm(t, &m, &sd);
  ck_assert(!m && !sd);
  tsr_trainer_destroy(t);
  tsr_model *ce = conv_model(TSR_LOSS_SOFTMAX_CROSS_ENTROPY);
  tsr_trainer *c = make_trainer(ce, 1);
  ck_assert_int_eq(tsr_trainer_set_target_norm(c, tmean, tstd, C), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), tsr_loss_kind_name(TSR_LOSS_SOFTMAX_CROSS_ENTROPY)), "%s", tsr_last_error());
  ck_assert(tsr_trainer_set_target_norm(c, NULL, NULL, 0) == TSR_OK); /* none is fine */
  tsr_trainer_destroy(c);
  tsr_model_destroy(ce);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("target_norm");
  TCase *tc = tcase_create("trainer");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, predictions_are_in_target_units);
  tcase_add_test(tc, training_equals_training_on_standardised_targets);
  tcase_add_test(tc, loss_in_standardised_and_target_units);
  tcase_add_test(tc, export_import_keeps_the_statistics);
  tcase_add_test(tc, checkpoint_resume_is_bitwise);
  tcase_add_test(tc, refusals_name_the_problem);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_suite)

/* Suite "model3d": 3-D models through the model file and the trainer. Every new kind and its
 * fields read from JSON (kernel as an integer or a [d, h, w] array) with the shapes, parameters and
 * FLOPs PyTorch's formulas give; batch norm on [C, D, H, W] normalising over N, D, H and W (the
 * loss of one step against a float64 reference); a CosmoFlow-like regression net and a U-Net-like
 * segmentation net training on fixed random data with a decreasing loss; shapes that cannot work
 * refused with a message naming the layer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "testutil.h"

static const char *write_model(const char *name, const char *json) {
  char *path = tt_path_in(tt_tmpdir(), name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(json, f);
  fclose(f);
  return path;
}

static tsr_model *load(const char *name, const char *json) {
  tsr_model *m = NULL;
  tsr_status s = tsr_model_load_json(&m, NULL, write_model(name, json));
  ck_assert_msg(s == TSR_OK, "%s: %s", name, tsr_last_error());
  return m;
}

static void assert_shape(const tsr_model *m, const char *layer, int c, int d, int h, int w) {
  int gc, gd, gh, gw;
  ck_assert_int_eq(tsr_model_layer_shape(m, layer, &gc, &gh, &gw), TSR_OK);
  ck_assert_int_eq(tsr_model_layer_depth(m, layer, &gd), TSR_OK);
  ck_assert_msg(gc == c && gd == d && gh == h * (d ? d : 1) && gw == w,
                "layer '%s': [%d, depth %d, %d, %d], expected [%d, %d, %d, %d]", layer, gc, gd, gh, gw, c, d, h, w);
}

/* Expected sizes from PyTorch's formulas: out = (in + 2p - dil (k - 1) - 1) / s + 1, transposed
 * (in - 1) s - 2p + dil (k - 1) + op + 1. */
START_TEST(test_json_reads_every_3d_kind) {
  tsr_model *m = load("kinds.json",
                      "{\"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [2, 8, 10, 12]},\n"
                      " {\"name\": \"c1\", \"type\": \"conv3d\", \"out_channels\": 4, \"kernel\": 3, \"padding\": 1},\n"
                      " {\"name\": \"c2\", \"type\": \"conv3d\", \"out_channels\": 3, \"kernel\": [3, 1, 2],\n"
                      "  \"stride\": [2, 1, 2], \"padding\": [1, 0, 0], \"dilation\": [1, 2, 1], \"bias\": false},\n"
                      " {\"name\": \"bn\", \"type\": \"batchnorm\"},\n"
                      " {\"name\": \"a\", \"type\": \"leaky_relu\", \"alpha\": 0.2},\n"
                      " {\"name\": \"mp\", \"type\": \"maxpool3d\", \"kernel\": 2},\n"
                      " {\"name\": \"ap\", \"type\": \"avgpool3d\", \"input\": \"c1\", \"kernel\": [2, 3, 3],\n"
                      "  \"stride\": [2, 2, 2], \"padding\": [0, 1, 1]},\n"
                      " {\"name\": \"up\", \"type\": \"upsample3d\", \"input\": \"mp\", \"scale\": 2},\n"
                      " {\"name\": \"t\", \"type\": \"conv_transpose3d\", \"input\": \"ap\", \"out_channels\": 2,\n"
                      "  \"kernel\": 3, \"stride\": 2, \"padding\": 1, \"output_padding\": [1, 0, 1]},\n"
                      " {\"name\": \"g\", \"type\": \"tanh\", \"scale\": 1.2},\n"
                      " {\"name\": \"f\", \"type\": \"flatten\"},\n"
                      " {\"name\": \"o\", \"type\": \"dense\", \"out_features\": 2}]}\n");
  assert_shape(m, "in", 2, 8, 10, 12);
  assert_shape(m, "c1", 4, 8, 10, 12);
  assert_shape(m, "c2", 3, 4, 10, 6); /* d (8+2-2-1)/2+1, h 10 (a 1-wide kernel), w (12-1-1)/2+1 */
  assert_shape(m, "mp", 3, 2, 5, 3);
  assert_shape(m, "ap", 4, 4, 5, 6); /* d (8-2)/2+1, h (10+2-3)/2+1, w (12+2-3)/2+1 */
  assert_shape(m, "up", 3, 4, 10, 6);
  assert_shape(m, "t", 2, 8, 9, 12); /* d 3*2-2+2+1+1, h 4*2-2+2+1, w 5*2-2+2+1+1 */
  assert_shape(m, "f", 2 * 8 * 9 * 12, 0, 1, 1);
  const tsr_layer_spec *s = tsr_model_layer_spec(m, 2);
  ck_assert(s->kernel_d == 3 && s->kernel_h == 1 && s->kernel_w == 2 && s->stride_d == 2 && s->pad_d == 1 &&
            s->dilation_h == 2 && !s->bias);
  ck_assert(tsr_model_layer_spec(m, 9)->scale == 1.2f);
  /* trainable: c1 weight and bias, c2 weight (3x4x3x1x2), bn gamma and beta, t weight and bias, o */
  int64_t want = 4 * (2 * 27 + 1) + 3 * 4 * 6 + 2 * 3 + (4 * 2 * 27 + 2) + 2 * (2 * 8 * 9 * 12 + 1);
  ck_assert_int_eq(tsr_model_num_params(m), want);
  double flops = tsr_model_forward_flops(m); /* c1, c2, t (per input position), dense */
  double want_f = 4.0 * 8 * 10 * 12 * 2 * 27 + 3.0 * 4 * 10 * 6 * 4 * 6 + 4.0 * 4 * 5 * 6 * 2 * 27 + 2.0 * 1728;
  ck_assert_msg(fabs(flops - want_f) < 1e-6 * want_f, "flops %g, expected %g", flops, want_f);
  tsr_model_destroy(m);
}
END_TEST

/* ---- training ---- */

static tsr_context *ctx;
static void ctx_up(void) {
  tt_starpu_home();
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 2, co.use_mpi = 0, co.verbose = 0, co.deterministic = 1, co.seed = 7;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
}
static void ctx_down(void) { tsr_context_destroy(ctx); }

static tsr_trainer *trainer(tsr_model *m, int batch, float lr) {
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = batch, o.slices = 2;
  tsr_optim_spec opt = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  opt.lr = lr;
  tsr_trainer *t = NULL;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &opt, &o) == TSR_OK, "%s", tsr_last_error());
  return t;
}

/* Samples that depend on the index only: a fixed random batch. */
struct data {
  size_t xe, ye;
  int classes; /* > 0: one-hot targets of classes channels from the sign of x's channel 0 */
};

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  const struct data *d = user;
  tt_fill_uniform(x, d->xe, 1000 + index, -1, 1);
  if (!d->classes) {
    tt_fill_uniform(y, d->ye, 2000 + index, -0.9f, 0.9f);
    return 0;
  }
  size_t pos = d->ye / d->classes;
  for (size_t p = 0; p < pos; p++)
    for (int k = 0; k < d->classes; k++) y[k * pos + p] = (x[p] > 0) == (k == 1);
  return 0;
}

static void train(tsr_trainer *t, struct data *d, int steps, double *loss) {
  int64_t id;
  for (int i = 0; i < steps; i++) {
    ck_assert_int_eq(tsr_trainer_step(t, fill, d, &id), TSR_OK);
    ck_assert_int_eq(tsr_trainer_loss(t, id, &loss[i]), TSR_OK);
    ck_assert_msg(isfinite(loss[i]), "step %d: loss %g", i, loss[i]);
  }
}

/* With MSE against 0, gamma 1 and beta 0, the loss of a training step is the mean over channels of
 * var_c / (var_c + eps), var_c over N, D, H and W. Depth slices get different variances (x scaled
 * by d + 1), so statistics over any other set of positions give another loss. */
static int bn_fill(void *user, int64_t step, int index, float *x, float *y) {
  enum { C = 3, D = 4, HW = 6 };
  tt_fill_uniform(x, C * D * HW, 500 + index, -1, 1);
  for (int i = 0; i < C * D * HW; i++) x[i] *= (float)(i / HW % D + 1) * (1.0f + (float)(i / (D * HW)));
  memset(y, 0, C * D * HW * sizeof *y);
  return 0;
}

START_TEST(test_batchnorm_normalises_over_n_d_h_w) {
  tsr_model *m = load("bn.json", "{\"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [3, 4, 2, 3]},\n"
                                 " {\"name\": \"bn\", \"type\": \"batchnorm\", \"eps\": 0.5}]}\n");
  tsr_trainer *t = trainer(m, 5, 0.0f);
  int64_t id;
  double loss;
  ck_assert_int_eq(tsr_trainer_step(t, bn_fill, NULL, &id), TSR_OK);
  ck_assert_int_eq(tsr_trainer_loss(t, id, &loss), TSR_OK);
  float x[5][72], y[72];
  for (int n = 0; n < 5; n++) bn_fill(NULL, 0, n, x[n], y);
  double want = 0;
  for (int c = 0; c < 3; c++) {
    double s = 0, q = 0;
    for (int n = 0; n < 5; n++)
      for (int p = 0; p < 24; p++) s += x[n][c * 24 + p], q += (double)x[n][c * 24 + p] * x[n][c * 24 + p];
    double mean = s / 120, var = q / 120 - mean * mean;
    want += var / (var + 0.5) / 3;
  }
  ck_assert_msg(fabs(loss - want) <= 1e-5 * want, "loss %.8g, reference %.8g", loss, want);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
}
END_TEST

/* A checkpoint of a 3-D model (5-D weights) written after some steps and loaded into a fresh
 * trainer gives every tensor bitwise, and the next step the same loss. */
static void checkpoint_round_trip(tsr_model *m, tsr_trainer *t, struct data *d) {
  tsr_checkpoint_meta meta;
  memset(&meta, 0, sizeof meta);
  meta.step = 12, meta.epoch = 1, meta.position = 12, meta.seed = 7, meta.nranks = 1, meta.batch = 4;
  const char *path = tt_path_in(tt_tmpdir(), "cosmo.h5");
  ck_assert_msg(tsr_checkpoint_save(t, path, &meta) == TSR_OK, "%s", tsr_last_error());
  tsr_trainer *u = trainer(m, 4, 0.01f);
  ck_assert_msg(tsr_checkpoint_load(u, path, &meta) == TSR_OK, "%s", tsr_last_error());
  for (int i = 0; i < tsr_trainer_num_tensors(t); i++) {
    const char *name;
    tsr_shape sh;
    int trainable;
    ck_assert_int_eq(tsr_trainer_tensor_info(t, i, &name, &sh, &trainable), TSR_OK);
    size_t n = (size_t)tsr_shape_numel(&sh);
    float *a = malloc(n * 4), *b = malloc(n * 4);
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, a), TSR_OK);
    ck_assert_int_eq(tsr_trainer_tensor_get(u, i, b), TSR_OK);
    ck_assert_msg(memcmp(a, b, n * 4) == 0, "tensor '%s' differs after the checkpoint", name);
    free(a), free(b);
  }
  double lt, lu;
  train(t, d, 1, &lt);
  train(u, d, 1, &lu);
  ck_assert_msg(lt == lu, "next step: loss %.17g, after the checkpoint %.17g", lt, lu);
  tsr_trainer_destroy(u);
}

/* conv3d, batch norm, leaky ReLU and pooling blocks, a dense head, 1.2 tanh: the loss of 12 Adam
 * steps on one fixed batch must fall below 60% of the first; then a checkpoint round trip. */
START_TEST(test_cosmoflow_like_net_trains) {
  tsr_model *m = load("cosmo.json",
                      "{\"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [2, 8, 8, 8]},\n"
                      " {\"name\": \"c1\", \"type\": \"conv3d\", \"out_channels\": 4, \"kernel\": 3, \"padding\": 1},\n"
                      " {\"name\": \"b1\", \"type\": \"batchnorm\"},\n"
                      " {\"name\": \"a1\", \"type\": \"leaky_relu\", \"alpha\": 0.3},\n"
                      " {\"name\": \"p1\", \"type\": \"maxpool3d\", \"kernel\": 2},\n"
                      " {\"name\": \"c2\", \"type\": \"conv3d\", \"out_channels\": 6, \"kernel\": 3, \"padding\": 1},\n"
                      " {\"name\": \"a2\", \"type\": \"leaky_relu\", \"alpha\": 0.3},\n"
                      " {\"name\": \"p2\", \"type\": \"avgpool3d\", \"kernel\": 2},\n"
                      " {\"name\": \"f\", \"type\": \"flatten\"},\n"
                      " {\"name\": \"d1\", \"type\": \"dense\", \"out_features\": 16},\n"
                      " {\"name\": \"a3\", \"type\": \"leaky_relu\", \"alpha\": 0.3},\n"
                      " {\"name\": \"dr\", \"type\": \"dropout\", \"p\": 0.0},\n"
                      " {\"name\": \"d2\", \"type\": \"dense\", \"out_features\": 3},\n"
                      " {\"name\": \"out\", \"type\": \"tanh\", \"scale\": 1.2}]}\n");
  tsr_trainer *t = trainer(m, 4, 0.01f);
  struct data d = {2 * 512, 3, 0};
  double loss[12];
  train(t, &d, 12, loss);
  ck_assert_msg(loss[11] < 0.6 * loss[0], "loss %g after 12 steps, %g at the first", loss[11], loss[0]);
  checkpoint_round_trip(m, t, &d);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
}
END_TEST

/* Encoder (conv3d, maxpool3d), decoder (upsample3d and conv_transpose3d), a skip concatenation,
 * an add, softmax cross-entropy over 2 classes per voxel (the sign of the input): the loss of 20
 * Adam steps on one fixed batch must fall below 60% of the first. */
START_TEST(test_unet_like_net_trains) {
  tsr_model *m = load("unet.json",
                      "{\"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [1, 4, 4, 4]},\n"
                      " {\"name\": \"e1\", \"type\": \"conv3d\", \"out_channels\": 4, \"kernel\": 3, \"padding\": 1},\n"
                      " {\"name\": \"r1\", \"type\": \"relu\"},\n"
                      " {\"name\": \"p\", \"type\": \"maxpool3d\", \"kernel\": 2},\n"
                      " {\"name\": \"e2\", \"type\": \"conv3d\", \"out_channels\": 4, \"kernel\": 3, \"padding\": 1},\n"
                      " {\"name\": \"bn\", \"type\": \"batchnorm\"},\n"
                      " {\"name\": \"s\", \"type\": \"sigmoid\"},\n"
                      " {\"name\": \"u\", \"type\": \"upsample3d\", \"scale\": 2},\n"
                      " {\"name\": \"t\", \"type\": \"conv_transpose3d\", \"input\": \"s\", \"out_channels\": 4,\n"
                      "  \"kernel\": 2, \"stride\": 2},\n"
                      " {\"name\": \"sum\", \"type\": \"add\", \"inputs\": [\"u\", \"t\"]},\n"
                      " {\"name\": \"g\", \"type\": \"gelu\"},\n"
                      " {\"name\": \"cat\", \"type\": \"concat\", \"inputs\": [\"g\", \"r1\"]},\n"
                      " {\"name\": \"out\", \"type\": \"conv3d\", \"out_channels\": 2, \"kernel\": 1}],\n"
                      " \"loss\": {\"type\": \"softmax_cross_entropy\"}}\n");
  assert_shape(m, "cat", 8, 4, 4, 4);
  tsr_trainer *t = trainer(m, 4, 0.03f);
  struct data d = {64, 2 * 64, 2};
  double loss[20];
  train(t, &d, 20, loss);
  ck_assert_msg(loss[19] < 0.6 * loss[0], "loss %g after 20 steps, %g at the first", loss[19], loss[0]);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
}
END_TEST

/* ---- shapes that cannot work: the message names the layer ---- */

static void refused(const char *layers, const char *layer, const char *why) {
  char json[2048];
  snprintf(json, sizeof json, "{\"layers\": [%s]}\n", layers);
  tsr_model *m = NULL;
  tsr_status s = tsr_model_load_json(&m, NULL, write_model("bad.json", json));
  ck_assert_msg(s != TSR_OK, "accepted: %s", layers);
  const char *e = tsr_last_error();
  ck_assert_msg(strstr(e, layer) && strstr(e, why), "message '%s' should name '%s' and say '%s'", e, layer, why);
}

#define IN3 "{\"name\": \"in\", \"type\": \"input\", \"shape\": [2, 4, 6, 6]}, "
#define IN2 "{\"name\": \"in\", \"type\": \"input\", \"shape\": [2, 6, 6]}, "

START_TEST(test_bad_shapes_are_refused_naming_the_layer) {
  refused(IN2 "{\"name\": \"c\", \"type\": \"conv3d\", \"out_channels\": 2, \"kernel\": 3}", "'c'",
          "needs [C, D, H, W]");
  refused(IN3 "{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 2, \"kernel\": 3}", "'c'",
          "a 2-D layer needs [C, H, W]");
  refused(IN3 "{\"name\": \"p\", \"type\": \"maxpool2d\", \"kernel\": 2}", "'p'", "a 2-D layer");
  refused(IN2 "{\"name\": \"p\", \"type\": \"avgpool3d\", \"kernel\": 2}", "'p'", "needs [C, D, H, W]");
  refused(IN2 "{\"name\": \"u\", \"type\": \"upsample3d\", \"scale\": 2}", "'u'", "needs [C, D, H, W]");
  refused(IN3 "{\"name\": \"c\", \"type\": \"conv3d\", \"out_channels\": 2, \"kernel\": [5, 3, 3]}", "'c'",
          "smaller than the 5x3x3 kernel");
  refused(IN3 "{\"name\": \"p\", \"type\": \"maxpool3d\", \"kernel\": [8, 2, 2]}", "'p'", "smaller than the 8x2x2");
  refused(IN3 "{\"name\": \"c\", \"type\": \"conv3d\", \"out_channels\": 2, \"kernel\": 3, \"stride\": 2}, "
              "{\"name\": \"cat\", \"type\": \"concat\", \"inputs\": [\"in\", \"c\"]}",
          "'cat'", "depth");
  refused(IN3 "{\"name\": \"d\", \"type\": \"dense\", \"out_features\": 2}", "'d'", "add a flatten layer");
  refused(IN3 "{\"name\": \"t\", \"type\": \"conv_transpose3d\", \"out_channels\": 2, \"kernel\": 3, \"stride\": 2, "
              "\"output_padding\": [2, 0, 0]}",
          "'t'", "smaller than the stride");
  refused(IN3 "{\"name\": \"c\", \"type\": \"conv3d\", \"out_channels\": 2, \"kernel\": [3, 3]}", "'c'",
          "[d, h, w]");
  refused(IN3 "{\"name\": \"u\", \"type\": \"upsample3d\"}", "'u'", "missing");
  refused(IN3 "{\"name\": \"g\", \"type\": \"tanh\", \"scale\": 0}", "'g'", "positive");
  refused("{\"name\": \"in\", \"type\": \"input\", \"shape\": [2, 4, 6, 6, 1]}", "'in'", "[C, D, H, W]");
}
END_TEST

static Suite *make_model3d_suite(void) {
  Suite *s = suite_create("model3d");
  TCase *k = tcase_create("model");
  tcase_add_test(k, test_json_reads_every_3d_kind);
  tcase_add_test(k, test_bad_shapes_are_refused_naming_the_layer);
  suite_add_tcase(s, k);
  TCase *t = tcase_create("train");
  tcase_add_checked_fixture(t, ctx_up, ctx_down);
  tcase_set_timeout(t, 300);
  tcase_add_test(t, test_batchnorm_normalises_over_n_d_h_w);
  tcase_add_test(t, test_cosmoflow_like_net_trains);
  tcase_add_test(t, test_unet_like_net_trains);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_model3d_suite)

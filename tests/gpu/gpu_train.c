/* Suite "gpu_train": two SGD steps of a small model (conv, batch norm, ReLU, max pooling,
 * transposed conv, concat, conv, average pooling, flatten, dense) on CPU workers only (no CUDA
 * worker) against the same steps with every task that has a CUDA implementation restricted to
 * the CUDA worker (the rest: sample loading and loss collection, on one CPU worker). Compared:
 * both losses (1e-4 relative) and each parameter's change over the two steps (1e-6 + 1e-3
 * relative: the change, not the parameter, so a wrong gradient cannot hide under the weights).
 * And deterministic mode with both kinds of workers, twice: bitwise equal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>

#include "codelets.h"
#include "cuda_util.h" /* config.h: TSR_WITH_CUDA */
#include "gpu_test.h"

#if defined(STARPU_USE_CUDA) && defined(TSR_WITH_CUDA)
#define S 8 /* image side */
enum { STEPS = 2 };

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  for (int c = 0; c < 2; c++)
    for (int p = 0; p < S * S; p++) x[c * S * S + p] = sinf(0.37f * (p + 1) * (index + 1) + c + 0.5f * step) * 0.8f;
  for (int j = 0; j < 16; j++) y[j] = 0.5f * x[3 * j] * x[3 * j] - 0.3f * x[3 * j + 1];
  return 0;
}

static tsr_model *mixed_model(void) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "gpu_step"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 2, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "in", 4, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "bn", TSR_LAYER_BATCHNORM, "c1"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r", TSR_LAYER_RELU, "bn"), TSR_OK);
  tsr_layer_spec mp = tsr_layer_spec_default(TSR_LAYER_MAXPOOL2D);
  mp.kernel_h = mp.kernel_w = 2;
  const char *r = "r";
  ck_assert_int_eq(tsr_model_add(m, "mp", &mp, &r, 1), TSR_OK);
  tsr_layer_spec up = tsr_layer_spec_default(TSR_LAYER_CONV_TRANSPOSE2D);
  up.out_channels = 3, up.kernel_h = up.kernel_w = 2, up.stride_h = up.stride_w = 2;
  const char *mpn = "mp";
  ck_assert_int_eq(tsr_model_add(m, "up", &up, &mpn, 1), TSR_OK);
  const char *cat_in[] = {"up", "in"};
  tsr_layer_spec cat = tsr_layer_spec_default(TSR_LAYER_CONCAT);
  ck_assert_int_eq(tsr_model_add(m, "cat", &cat, cat_in, 2), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c2", "cat", 2, 3, 1, 1), TSR_OK);
  tsr_layer_spec ap = tsr_layer_spec_default(TSR_LAYER_AVGPOOL2D);
  ap.kernel_h = ap.kernel_w = 2;
  const char *c2 = "c2";
  ck_assert_int_eq(tsr_model_add(m, "ap", &ap, &c2, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "flat", TSR_LAYER_FLATTEN, "ap"), TSR_OK);
  tsr_layer_spec fc = tsr_layer_spec_default(TSR_LAYER_DENSE);
  fc.out_channels = 16;
  const char *flat = "flat";
  ck_assert_int_eq(tsr_model_add(m, "fc", &fc, &flat, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_set_output(m, "fc", TSR_LOSS_MSE, 0), TSR_OK);
  return m;
}

static float *all_params(tsr_trainer *t, size_t *n) {
  size_t total = 0;
  for (int i = 0; i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape s;
    ck_assert_int_eq(tsr_trainer_tensor_info(t, i, NULL, &s, NULL), TSR_OK);
    total += tsr_shape_numel(&s);
  }
  float *p = malloc(total * sizeof *p);
  size_t off = 0;
  for (int i = 0; i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape s;
    tsr_trainer_tensor_info(t, i, NULL, &s, NULL);
    ck_assert_msg(tsr_trainer_tensor_get(t, i, p + off) == TSR_OK, "%s", tsr_last_error());
    off += tsr_shape_numel(&s);
  }
  *n = total;
  return p;
}

enum { ON_CPU, ON_GPU, ON_BOTH };
/* ON_CPU: one CPU worker. ON_GPU: one CUDA worker takes every task it can run, one CPU worker the
 * others. ON_BOTH: both workers and no restriction but deterministic mode's. */
static void run(int where, double *loss, float **before, float **after, size_t *n) {
  setenv("STARPU_NCUDA", where == ON_CPU ? "0" : "1", 1);
  _tsr_set_where(where == ON_GPU ? STARPU_CUDA : 0);
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 1, co.use_mpi = 0, co.deterministic = 1, co.verbose = 0;
  tsr_context *ctx = NULL;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_model *m = mixed_model();
  tsr_optim_spec sgd = tsr_optim_spec_default(TSR_OPTIM_SGD);
  sgd.lr = 0.05f;
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 6, o.slices = 2, o.seed = 11;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &sgd, &o) == TSR_OK, "%s", tsr_last_error());
  size_t n0;
  *before = all_params(t, &n0);
  for (int i = 0; i < STEPS; i++) ck_assert_msg(tsr_trainer_step(t, fill, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  for (int i = 0; i < STEPS; i++) ck_assert_msg(tsr_trainer_loss(t, i, &loss[i]) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_trainer_sync(t) == TSR_OK, "%s", tsr_last_error());
  *after = all_params(t, n);
  ck_assert_uint_eq(n0, *n);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
  _tsr_set_where(0);
  unsetenv("STARPU_NCUDA");
}

START_TEST(test_training_steps_on_gpu_match_cpu) {
  double lc[STEPS], lg[STEPS];
  float *bc, *ac, *bg, *ag;
  size_t nc, ng;
  run(ON_CPU, lc, &bc, &ac, &nc);
  run(ON_GPU, lg, &bg, &ag, &ng);
  ck_assert_uint_eq(nc, ng);
  gt_same(bg, bc, nc * sizeof(float), "initial parameters (same seed)");
  for (int i = 0; i < STEPS; i++)
    ck_assert_msg(fabs(lg[i] - lc[i]) <= 1e-4 * fabs(lc[i]), "step %d loss: GPU %.9g, CPU %.9g", i, lg[i], lc[i]);
  float *dg = malloc(nc * sizeof *dg), *dc = malloc(nc * sizeof *dc);
  int moved = 0;
  for (size_t i = 0; i < nc; i++) dg[i] = ag[i] - bg[i], dc[i] = ac[i] - bc[i], moved += dc[i] != 0;
  ck_assert_msg(moved > (int)(nc / 2), "only %d of %zu parameters moved on the CPU", moved, nc);
  gt_close(dg, dc, nc, 1e-6, 1e-3, "parameter change over two SGD steps, GPU vs CPU");
  free(bc), free(ac), free(bg), free(ag), free(dg), free(dc);
}
END_TEST

/* Deterministic mode with CPU and CUDA workers: tasks with a CUDA twin always run on the GPU, so
 * two runs agree bitwise whatever the scheduler does with the rest. */
START_TEST(test_deterministic_mixed_workers_repeat_bitwise) {
  double l1[STEPS], l2[STEPS];
  float *b1, *a1, *b2, *a2;
  size_t n1, n2;
  run(ON_BOTH, l1, &b1, &a1, &n1);
  run(ON_BOTH, l2, &b2, &a2, &n2);
  ck_assert_uint_eq(n1, n2);
  for (int i = 0; i < STEPS; i++) ck_assert_msg(l1[i] == l2[i], "step %d loss: %.17g then %.17g", i, l1[i], l2[i]);
  gt_same(a2, a1, n1 * sizeof(float), "parameters after two deterministic runs with CPU and CUDA workers");
  free(b1), free(a1), free(b2), free(a2);
}
END_TEST

Suite *make_gpu_train_suite(void) {
  Suite *s = suite_create("gpu_train");
  TCase *t = tcase_create("step");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, test_training_steps_on_gpu_match_cpu);
  tcase_add_test(t, test_deterministic_mixed_workers_repeat_bitwise);
  suite_add_tcase(s, t);
  return s;
}
#endif

/* Suite "gpu": each CUDA codelet run as a StarPU task on a CUDA-only StarPU (no CPU workers) against
 * its CPU kernel called directly on the same random inputs, with stated tolerances. Exits 77 (SKIP
 * for automake) with the reason when Tessera has no CUDA codelets, StarPU was built without CUDA,
 * or no GPU is visible. Not covered yet: a whole training step on GPU against CPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "cuda_util.h"
#include "../testutil.h"

#if defined(STARPU_USE_CUDA) && defined(TSR_WITH_CUDA)
/* cuDNN/cuBLAS in float32 FMA math vs oneDNN/OpenBLAS: different summation orders only. */
#define ATOL 1e-4
#define RTOL 1e-4

static void gpu_up(void) {
  tt_starpu_home();
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = 0;
  conf.ncuda = 1;
  ck_assert_int_eq(starpu_init(&conf), 0);
}
static void gpu_down(void) { starpu_shutdown(); }

static float *rnd(size_t n, uint64_t seed) {
  float *x = malloc(n * sizeof *x);
  tt_fill_uniform(x, n, seed, -1, 1);
  return x;
}
static double *widen(const float *x, size_t n) {
  double *d = malloc(n * sizeof *d);
  for (size_t i = 0; i < n; i++) d[i] = x[i];
  return d;
}
#define REG(p, n) _tsr_register_floats((p), (n))
#define CLOSE(gpu, cpu, n, what)                                                                   \
  do {                                                                                             \
    double *_ref = widen((cpu), (n));                                                                \
    tt_assert_close((gpu), _ref, (n), ATOL, RTOL, what);                                             \
    free(_ref);                                                                                    \
  } while (0)

START_TEST(test_conv_passes_match_cpu) {
  struct tsr_conv_desc d = {.n = 2, .ci = 8, .h = 16, .w = 16, .co = 6, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                            .ph = 1, .pw = 1, .dh = 1, .dw = 1, .has_bias = 1};
  d.oh = _tsr_conv_out(16, 3, 1, 1, 1);
  d.ow = d.oh;
  size_t nx = 2 * 8 * 256, ny = 2 * 6 * (size_t)d.oh * d.ow, nw = 6 * 8 * 9;
  float *x = rnd(nx, 1), *w = rnd(nw, 2), *b = rnd(6, 3), *dy = rnd(ny, 4);
  float *y = calloc(ny, 4), *yc = calloc(ny, 4), *dx = calloc(nx, 4), *dxc = calloc(nx, 4);
  float *dw = calloc(nw, 4), *dwc = calloc(nw, 4), *db = calloc(6, 4), *dbc = calloc(6, 4);
  starpu_data_handle_t hx = REG(x, nx), hw = REG(w, nw), hb = REG(b, 6), hy = REG(y, ny), hdy = REG(dy, ny);
  starpu_data_handle_t hdx = REG(dx, nx), hdw = REG(dw, nw), hdb = REG(db, 6);
  ck_assert_int_eq(_tsr_insert_conv2d_fwd(&d, hx, hw, hb, hy, "conv fwd"), 0);
  ck_assert_int_eq(_tsr_insert_conv2d_bwd_data(&d, hdy, hw, hdx, "conv bwd data"), 0);
  ck_assert_int_eq(_tsr_insert_conv2d_bwd_weights(&d, hx, hdy, hdw, hdb, "conv bwd weights"), 0);
  starpu_task_wait_for_all();
  starpu_data_handle_t hs[] = {hx, hw, hb, hy, hdy, hdx, hdw, hdb};
  for (int i = 0; i < 8; i++) starpu_data_unregister(hs[i]);
  _tsr_conv2d_fwd_cpu(&d, x, w, b, yc);
  _tsr_conv2d_bwd_data_cpu(&d, dy, w, dxc);
  _tsr_conv2d_bwd_weights_cpu(&d, x, dy, dwc, dbc);
  CLOSE(y, yc, ny, "conv forward");
  CLOSE(dx, dxc, nx, "conv backward data");
  CLOSE(dw, dwc, nw, "conv backward weights");
  CLOSE(db, dbc, 6, "conv backward bias");
}
END_TEST

START_TEST(test_dense_dropout_loss_adam_match_cpu) {
  struct tsr_dense_desc dd = {.n = 4, .in = 33, .out = 7, .has_bias = 1};
  float *x = rnd(4 * 33, 5), *w = rnd(7 * 33, 6), *b = rnd(7, 7), *y = calloc(28, 4), *yc = calloc(28, 4);
  starpu_data_handle_t hx = REG(x, 132), hw = REG(w, 231), hb = REG(b, 7), hy = REG(y, 28);
  ck_assert_int_eq(_tsr_insert_dense_fwd(&dd, hx, hw, hb, hy, "dense fwd"), 0);
  /* dropout: the masks must agree bitwise */
  struct tsr_dropout_desc dr = {.n = 2, .c = 3, .h = 5, .w = 7, .p = 0.3f};
  float *dx = rnd(210, 8), *dyo = calloc(210, 4), *dyc = calloc(210, 4);
  starpu_data_handle_t hdx = REG(dx, 210), hdy = REG(dyo, 210);
  ck_assert_int_eq(_tsr_insert_dropout_fwd(&dr, 1234, hdx, hdy, "dropout"), 0);
  /* MSE loss and gradient */
  struct tsr_loss_desc ld = {.kind = TSR_L_MSE, .n = 2, .c = 1, .h = 4, .w = 4, .nvalid = 2, .scale = 1.0 / 32};
  float *yh = rnd(32, 9), *t = rnd(32, 10), *g = calloc(32, 4), *gc = calloc(32, 4);
  double loss = 0, lossc = 0;
  starpu_data_handle_t hyh = REG(yh, 32), ht = REG(t, 32), hg = REG(g, 32), hl;
  starpu_vector_data_register(&hl, STARPU_MAIN_RAM, (uintptr_t)&loss, 1, sizeof(double));
  ck_assert_int_eq(_tsr_insert_loss(&ld, hyh, ht, hg, hl, "loss"), 0);
  /* Adam step */
  struct tsr_opt_args oa = {.kind = TSR_OPT_ADAM, .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                            .weight_decay = 0.01f, .step = 3, .grad_scale = 1};
  float *pw = rnd(100, 11), *pg = rnd(100, 12), *pm = rnd(100, 13), *pv = rnd(100, 14);
  for (int i = 0; i < 100; i++) pv[i] = fabsf(pv[i]);
  float *cw = malloc(400), *cm = malloc(400), *cv = malloc(400);
  memcpy(cw, pw, 400), memcpy(cm, pm, 400), memcpy(cv, pv, 400);
  starpu_data_handle_t hpw = REG(pw, 100), hpg = REG(pg, 100), hpm = REG(pm, 100), hpv = REG(pv, 100);
  ck_assert_int_eq(_tsr_insert_opt_update(&oa, hpw, hpg, hpm, hpv, NULL, "adam"), 0);
  starpu_task_wait_for_all();
  starpu_data_handle_t hs[] = {hx, hw, hb, hy, hdx, hdy, hyh, ht, hg, hl, hpw, hpg, hpm, hpv};
  for (int i = 0; i < 14; i++) starpu_data_unregister(hs[i]);
  _tsr_dense_fwd_cpu(&dd, x, w, b, yc);
  CLOSE(y, yc, 28, "dense forward");
  _tsr_dropout_fwd_cpu(&dr, 1234, dx, dyc);
  for (int i = 0; i < 210; i++) ck_assert_msg((dyo[i] == 0) == (dyc[i] == 0), "dropout mask differs at %d", i);
  _tsr_loss_cpu(&ld, yh, t, gc, &lossc);
  ck_assert_msg(fabs(loss - lossc) <= 1e-12 * (1 + fabs(lossc)), "loss %.17g vs CPU %.17g", loss, lossc);
  CLOSE(g, gc, 32, "MSE gradient");
  _tsr_opt_update_cpu(&oa, 100, cw, pg, cm, cv);
  CLOSE(pw, cw, 100, "Adam weights");
  CLOSE(pv, cv, 100, "Adam second moment");
}
END_TEST

static Suite *make_gpu_suite(void) {
  Suite *s = suite_create("gpu");
  TCase *t = tcase_create("codelets");
  tcase_set_timeout(t, 120);
  tcase_add_checked_fixture(t, gpu_up, gpu_down);
  tcase_add_test(t, test_conv_passes_match_cpu);
  tcase_add_test(t, test_dense_dropout_loss_adam_match_cpu);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  /* a short-lived StarPU to count the GPUs it sees */
  tt_starpu_home();
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = 0;
  if (starpu_init(&conf) != 0) {
    printf("SKIP: StarPU with CUDA could not start (no usable GPU?)\n");
    return 77;
  }
  unsigned ngpu = starpu_cuda_worker_get_count();
  starpu_shutdown();
  if (ngpu == 0) {
    printf("SKIP: StarPU has CUDA but sees no GPU\n");
    return 77;
  }
  return tt_run_suite(make_gpu_suite());
}
#else
int main(void) {
#ifndef TSR_WITH_CUDA
  printf("SKIP: Tessera was configured without CUDA (./configure --with-cuda)\n");
#else
  printf("SKIP: the StarPU found was built without CUDA (STARPU_USE_CUDA undefined): build StarPU with "
         "--enable-cuda or spack install starpu+cuda+mpi\n");
#endif
  return 77;
}
#endif

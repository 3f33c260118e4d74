/* Suite "gpu_ops": each CUDA codelet run as a StarPU task on a CUDA-only StarPU (no CPU workers,
 * so nothing can fall back to the CPU) against its CPU kernel called directly on the same random
 * inputs. Tolerances: cuDNN/cuBLAS in float32 FMA math against oneDNN/OpenBLAS differ by summation
 * order only (1e-4); element-wise kernels match exactly or to float rounding; double reductions to
 * 1e-10 relative. The 3-D layers (conv3d, conv_transpose3d, 3-D pooling, upsampling) likewise.
 * Also: the conversions, reduced-precision convolutions against a float32 convolution of rounded
 * inputs, and bitwise repeatability of deterministic mode. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera/context.h>
#include "codelets.h"
#include "tensor/shape.h"
#include "cuda_util.h"
#ifdef TSR_WITH_CUDA
#define TSR_CUDA_STREAM_T cudaStream_t /* convert.h then declares the GPU conversions */
#endif
#include "convert.h"
#include "gpu_test.h"
#include "kernel_util.h"
#include "optim/loss_scale.h"
#include "optim/optim.h"

#if defined(STARPU_USE_CUDA) && defined(TSR_WITH_CUDA)

#define LIB_ATOL 1e-4 /* cuDNN / cuBLAS against oneDNN / OpenBLAS, float32 */
#define LIB_RTOL 1e-4
#define ELEM_ATOL 1e-6 /* element-wise float kernels: same formula, maybe contracted into FMAs */
#define ELEM_RTOL 1e-6

static void gpu_down(void) {
  _tsr_set_precision(TSR_PRECISION_F32);
  _tsr_set_deterministic(0);
  starpu_shutdown();
}

#define REG(p, n) _tsr_register_floats((p), (n))
static starpu_data_handle_t reg_doubles(double *p, size_t n) {
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)p, (uint32_t)n, sizeof(double));
  return h;
}
static float *copy_of(const float *x, size_t n) {
  float *y = malloc(n * sizeof *y);
  memcpy(y, x, n * sizeof *y);
  return y;
}

/* ---- convolution and transposed convolution ---- */

static void conv_case(struct _tsr_conv_desc d, int deconv, double atol, double rtol, const char *what) {
  size_t nx = (size_t)d.n * d.ci * d.h * d.w, ny = (size_t)d.n * d.co * d.oh * d.ow, nw = (size_t)d.co * d.ci * d.kh * d.kw;
  float *x = gt_rand(nx, 1), *w = gt_rand(nw, 2), *b = gt_rand(d.co, 3), *dy = gt_rand(ny, 4);
  float *y = calloc(ny, 4), *yc = calloc(ny, 4), *dx = calloc(nx, 4), *dxc = calloc(nx, 4);
  /* weight gradients accumulate: start from non-zero values */
  float *dw = gt_rand(nw, 5), *dwc = copy_of(dw, nw), *db = gt_rand(d.co, 6), *dbc = copy_of(db, d.co);
  starpu_data_handle_t hs[] = {REG(x, nx), REG(w, nw), REG(b, d.co), REG(y, ny), REG(dy, ny),
                               REG(dx, nx), REG(dw, nw), REG(db, d.co)};
  starpu_data_handle_t hb = d.has_bias ? hs[2] : NULL, hdb = d.has_bias ? hs[7] : NULL;
  if (!deconv) {
    ck_assert_int_eq(_tsr_insert_conv2d_fwd(&d, hs[0], hs[1], hb, hs[3], "fwd"), 0);
    ck_assert_int_eq(_tsr_insert_conv2d_bwd_data(&d, hs[4], hs[1], hs[5], "bwd data"), 0);
    ck_assert_int_eq(_tsr_insert_conv2d_bwd_weights(&d, hs[0], hs[4], hs[6], hdb, "bwd weights"), 0);
  } else {
    ck_assert_int_eq(_tsr_insert_deconv2d_fwd(&d, hs[0], hs[1], hb, hs[3], "fwd"), 0);
    ck_assert_int_eq(_tsr_insert_deconv2d_bwd_data(&d, hs[4], hs[1], hs[5], "bwd data"), 0);
    ck_assert_int_eq(_tsr_insert_deconv2d_bwd_weights(&d, hs[0], hs[4], hs[6], hdb, "bwd weights"), 0);
  }
  gt_done(hs, 8);
  _tsr_set_precision(TSR_PRECISION_F32); /* the CPU twin in float32: reduced-precision cases round x, w, dy first */
  if (!deconv) {
    _tsr_conv2d_fwd_cpu(&d, x, w, d.has_bias ? b : NULL, yc);
    _tsr_conv2d_bwd_data_cpu(&d, dy, w, dxc);
    _tsr_conv2d_bwd_weights_cpu(&d, x, dy, dwc, d.has_bias ? dbc : NULL);
  } else {
    _tsr_deconv2d_fwd_cpu(&d, x, w, d.has_bias ? b : NULL, yc);
    _tsr_deconv2d_bwd_data_cpu(&d, dy, w, dxc);
    _tsr_deconv2d_bwd_weights_cpu(&d, x, dy, dwc, d.has_bias ? dbc : NULL);
  }
  char m[160];
  snprintf(m, sizeof m, "%s forward", what), gt_close(y, yc, ny, atol, rtol, m);
  snprintf(m, sizeof m, "%s backward data", what), gt_close(dx, dxc, nx, atol, rtol, m);
  snprintf(m, sizeof m, "%s backward weights", what), gt_close(dw, dwc, nw, atol, rtol, m);
  if (d.has_bias) snprintf(m, sizeof m, "%s backward bias", what), gt_close(db, dbc, d.co, atol, rtol, m);
  free(x), free(w), free(b), free(dy), free(y), free(yc), free(dx), free(dxc), free(dw), free(dwc), free(db), free(dbc);
}

static struct _tsr_conv_desc conv_desc(int n, int ci, int h, int co, int k, int s, int p, int bias, int deconv, int op) {
  struct _tsr_conv_desc d = {.n = n, .ci = ci, .h = h, .w = h + 1, .co = co, .kh = k, .kw = k, .sh = s, .sw = s,
                            .ph = p, .pw = p, .dh = 1, .dw = 1, .oph = op, .opw = op, .has_bias = bias};
  d.oh = deconv ? _tsr_deconv_out(d.h, k, s, p, 1, op) : _tsr_conv_out(d.h, k, s, p, 1);
  d.ow = deconv ? _tsr_deconv_out(d.w, k, s, p, 1, op) : _tsr_conv_out(d.w, k, s, p, 1);
  return d;
}

START_TEST(test_conv_and_deconv_passes_match_cpu) {
  conv_case(conv_desc(2, 8, 16, 6, 3, 1, 1, 1, 0, 0), 0, LIB_ATOL, LIB_RTOL, "conv 3x3");
  conv_case(conv_desc(3, 5, 11, 7, 3, 2, 0, 0, 0, 0), 0, LIB_ATOL, LIB_RTOL, "conv 3x3 stride 2, no bias");
  conv_case(conv_desc(2, 6, 7, 4, 2, 2, 0, 1, 1, 0), 1, LIB_ATOL, LIB_RTOL, "transposed conv 2x2 stride 2");
  conv_case(conv_desc(2, 4, 6, 5, 3, 2, 1, 1, 1, 1), 1, LIB_ATOL, LIB_RTOL, "transposed conv 3x3 stride 2 pad 1 out-pad 1");
}
END_TEST

/* bf16 / fp16: the GPU rounds x, w (dy) to the format, accumulates in float32 and rounds the result
 * once more. The reference is the CPU's float32 conv of the same rounded inputs, so the difference
 * is that last rounding (2^-8 relative for bf16, 2^-11 for fp16) plus summation order; and the
 * result must differ from float32 on unrounded inputs, or no reduced precision ran. */
static void round_to(int precision, float *x, size_t n) {
  uint16_t *h = malloc(n * sizeof *h);
  if (precision == TSR_PRECISION_BF16) _tsr_f32_to_bf16_cpu(x, h, n), _tsr_bf16_to_f32_cpu(h, x, n);
  else _tsr_f32_to_f16_cpu(x, h, n), _tsr_f16_to_f32_cpu(h, x, n);
  free(h);
}

static void reduced_conv_case(int precision) {
  struct _tsr_conv_desc d = conv_desc(2, 16, 12, 8, 3, 1, 1, 0, 0, 0);
  size_t nx = (size_t)d.n * d.ci * d.h * d.w, ny = (size_t)d.n * d.co * d.oh * d.ow, nw = (size_t)d.co * d.ci * 9;
  float *x = gt_rand(nx, 11), *w = gt_rand(nw, 12), *y = calloc(ny, 4), *y32 = calloc(ny, 4), *yref = calloc(ny, 4);
  _tsr_set_precision(precision);
  starpu_data_handle_t hs[] = {REG(x, nx), REG(w, nw), REG(y, ny)};
  ck_assert_int_eq(_tsr_insert_conv2d_fwd(&d, hs[0], hs[1], NULL, hs[2], "reduced fwd"), 0);
  gt_done(hs, 3);
  _tsr_set_precision(TSR_PRECISION_F32);
  _tsr_conv2d_fwd_cpu(&d, x, w, NULL, y32);
  round_to(precision, x, nx), round_to(precision, w, nw);
  _tsr_conv2d_fwd_cpu(&d, x, w, NULL, yref);
  double ulp = precision == TSR_PRECISION_BF16 ? 1.0 / 256 : 1.0 / 2048;
  gt_close(y, yref, ny, 1e-4, ulp, precision == TSR_PRECISION_BF16 ? "bf16 conv vs float32 conv of bf16 inputs"
                                                                     : "fp16 conv vs float32 conv of fp16 inputs");
  double worst = 0;
  for (size_t i = 0; i < ny; i++) worst = fmax(worst, fabs((double)y[i] - y32[i]));
  ck_assert_msg(worst > 1e-5, "reduced-precision conv equals float32 to %g: did it run in float32?", worst);
  free(x), free(w), free(y), free(y32), free(yref);
}

START_TEST(test_reduced_precision_conv_rounds_as_stated) {
  reduced_conv_case(TSR_PRECISION_BF16);
  reduced_conv_case(TSR_PRECISION_FP16);
}
END_TEST

/* Deterministic mode: cuDNN algorithms without atomics; the same pass twice is bitwise equal. */
START_TEST(test_deterministic_conv_gradients_repeat_bitwise) {
  _tsr_set_deterministic(1);
  struct _tsr_conv_desc d = conv_desc(4, 16, 20, 16, 3, 1, 1, 1, 0, 0);
  size_t nx = (size_t)d.n * d.ci * d.h * d.w, ny = (size_t)d.n * d.co * d.oh * d.ow, nw = (size_t)d.co * d.ci * 9;
  float *x = gt_rand(nx, 21), *dy = gt_rand(ny, 22), *w = gt_rand(nw, 23);
  float *dw[2] = {calloc(nw, 4), calloc(nw, 4)}, *db[2] = {calloc(16, 4), calloc(16, 4)};
  float *dx[2] = {calloc(nx, 4), calloc(nx, 4)};
  for (int r = 0; r < 2; r++) {
    starpu_data_handle_t hs[] = {REG(x, nx), REG(dy, ny), REG(w, nw), REG(dw[r], nw), REG(db[r], 16), REG(dx[r], nx)};
    ck_assert_int_eq(_tsr_insert_conv2d_bwd_weights(&d, hs[0], hs[1], hs[3], hs[4], "det bwd weights"), 0);
    ck_assert_int_eq(_tsr_insert_conv2d_bwd_data(&d, hs[1], hs[2], hs[5], "det bwd data"), 0);
    gt_done(hs, 6);
  }
  gt_same(dw[0], dw[1], nw * 4, "deterministic conv weight gradient, run 2 vs run 1");
  gt_same(db[0], db[1], 16 * 4, "deterministic conv bias gradient, run 2 vs run 1");
  gt_same(dx[0], dx[1], nx * 4, "deterministic conv data gradient, run 2 vs run 1");
  free(x), free(dy), free(w);
  for (int r = 0; r < 2; r++) free(dw[r]), free(db[r]), free(dx[r]);
}
END_TEST

/* ---- dense ---- */

START_TEST(test_dense_passes_match_cpu) {
  struct _tsr_dense_desc d = {.n = 5, .in = 33, .out = 7, .has_bias = 1};
  size_t nx = 5 * 33, ny = 5 * 7, nw = 7 * 33;
  float *x = gt_rand(nx, 31), *w = gt_rand(nw, 32), *b = gt_rand(7, 33), *dy = gt_rand(ny, 34);
  float *y = calloc(ny, 4), *yc = calloc(ny, 4), *dx = calloc(nx, 4), *dxc = calloc(nx, 4);
  float *dw = gt_rand(nw, 35), *dwc = copy_of(dw, nw), *db = gt_rand(7, 36), *dbc = copy_of(db, 7);
  starpu_data_handle_t hs[] = {REG(x, nx), REG(w, nw), REG(b, 7), REG(y, ny), REG(dy, ny), REG(dx, nx), REG(dw, nw), REG(db, 7)};
  ck_assert_int_eq(_tsr_insert_dense_fwd(&d, hs[0], hs[1], hs[2], hs[3], "dense fwd"), 0);
  ck_assert_int_eq(_tsr_insert_dense_bwd_data(&d, hs[4], hs[1], hs[5], "dense bwd data"), 0);
  ck_assert_int_eq(_tsr_insert_dense_bwd_weights(&d, hs[0], hs[4], hs[6], hs[7], "dense bwd weights"), 0);
  gt_done(hs, 8);
  _tsr_dense_fwd_cpu(&d, x, w, b, yc);
  _tsr_dense_bwd_data_cpu(&d, dy, w, dxc);
  _tsr_dense_bwd_weights_cpu(&d, x, dy, dwc, dbc);
  gt_close(y, yc, ny, LIB_ATOL, LIB_RTOL, "dense forward");
  gt_close(dx, dxc, nx, LIB_ATOL, LIB_RTOL, "dense backward data");
  gt_close(dw, dwc, nw, LIB_ATOL, LIB_RTOL, "dense backward weights");
  gt_close(db, dbc, 7, LIB_ATOL, LIB_RTOL, "dense backward bias");
  free(x), free(w), free(b), free(dy), free(y), free(yc), free(dx), free(dxc), free(dw), free(dwc), free(db), free(dbc);
}
END_TEST

/* ---- activations ---- */

/* Every activation of eltwise.c's table. */
START_TEST(test_activations_match_cpu) {
  const size_t n = 1000;
  for (int k = 0; k < _tsr_act_count(); k++) {
    struct _tsr_act_desc d = {.op = k, .alpha = 0.1f, .len = n};
    float *x = gt_rand(n, 40 + k), *dy = gt_rand(n, 50 + k), *y = calloc(n, 4), *dx = calloc(n, 4);
    float *yc = calloc(n, 4), *dxc = calloc(n, 4);
    starpu_data_handle_t hs[] = {REG(x, n), REG(y, n), REG(dy, n), REG(dx, n)};
    ck_assert_int_eq(_tsr_insert_act_fwd(&d, hs[0], hs[1], "act fwd"), 0);
    ck_assert_int_eq(_tsr_insert_act_bwd(&d, hs[0], hs[1], hs[2], hs[3], "act bwd"), 0);
    gt_done(hs, 4);
    _tsr_act_fwd_cpu(&d, x, yc);
    _tsr_act_bwd_cpu(&d, x, yc, dy, dxc);
    char m[64];
    snprintf(m, sizeof m, "%s forward", _tsr_act_name(k)), gt_close(y, yc, n, ELEM_ATOL, ELEM_RTOL, m);
    snprintf(m, sizeof m, "%s backward", _tsr_act_name(k)), gt_close(dx, dxc, n, ELEM_ATOL, ELEM_RTOL, m);
    free(x), free(dy), free(y), free(dx), free(yc), free(dxc);
  }
}
END_TEST

/* ---- pooling: y and the saved argmax bitwise, dx to float rounding ---- */

static void pool_case(int is_max, int k, int s, int p, uint64_t seed) {
  struct _tsr_pool_desc d = {.n = 2, .c = 3, .h = 9, .w = 10, .kh = k, .kw = k, .sh = s, .sw = s, .ph = p, .pw = p,
                            .is_max = is_max};
  d.oh = (d.h + 2 * p - k) / s + 1, d.ow = (d.w + 2 * p - k) / s + 1;
  size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * d.oh * d.ow, wsb = _tsr_pool_ws_bytes(&d);
  float *x = gt_rand(nx, seed), *dy = gt_rand(ny, seed + 1);
  for (size_t i = 0; i < nx; i++) x[i] = x[i] > 0 ? x[i] : 0.0f; /* ReLU output: ties */
  float *y = calloc(ny, 4), *yc = calloc(ny, 4), *dx = calloc(nx, 4), *dxc = calloc(nx, 4);
  unsigned char *ws = calloc(wsb + 1, 1), *wsc = calloc(wsb + 1, 1);
  starpu_data_handle_t hs[4] = {REG(x, nx), REG(y, ny), REG(dy, ny), REG(dx, nx)},
                       hws = is_max ? gt_register_bytes(ws, wsb) : NULL;
  ck_assert_int_eq(_tsr_insert_pool_fwd(&d, hs[0], hs[1], hws, "pool fwd"), 0);
  ck_assert_int_eq(_tsr_insert_pool_bwd(&d, hs[2], hws, hs[3], "pool bwd"), 0);
  gt_done(hs, 4);
  if (hws) starpu_data_unregister(hws);
  _tsr_pool_fwd_cpu(&d, x, yc, is_max ? wsc : NULL);
  _tsr_pool_bwd_cpu(&d, dy, is_max ? wsc : NULL, dxc);
  if (is_max) {
    gt_same(y, yc, ny * 4, "max pooling forward");
    gt_same(ws, wsc, wsb, "max pooling workspace (argmax)");
  } else {
    gt_close(y, yc, ny, ELEM_ATOL, ELEM_RTOL, "average pooling forward (cuDNN)");
  }
  gt_close(dx, dxc, nx, ELEM_ATOL, 1e-5, is_max ? "max pooling backward" : "average pooling backward");
  free(x), free(dy), free(y), free(yc), free(dx), free(dxc), free(ws), free(wsc);
}

START_TEST(test_pooling_matches_cpu) {
  for (int is_max = 0; is_max <= 1; is_max++) {
    pool_case(is_max, 2, 2, 0, 60);
    pool_case(is_max, 3, 2, 1, 62);
    pool_case(is_max, 3, 1, 1, 64);
  }
}
END_TEST

/* ---- 3-D layers (issue 15): conv3d and conv_transpose3d on cuDNN's N-d descriptors, 3-D pooling
 * (max: y and the argmax bitwise; average: cuDNN), nearest upsampling; each against its CPU kernel,
 * at the tolerances of the 2-D tests. Shapes are not cubes, so a swapped axis shows. ---- */

static size_t vol3(const int *a) { return (size_t)a[0] * a[1] * a[2]; }

static struct _tsr_conv3d_desc conv3d_desc(int n, int ci, const int id[3], int co, const int k[3], const int s[3],
                                           const int p[3], const int dil[3], const int op[3], int bias, int deconv) {
  struct _tsr_conv3d_desc d = {.n = n, .ci = ci, .co = co, .has_bias = bias, .deconv = deconv};
  for (int a = 0; a < 3; a++) {
    d.id[a] = id[a], d.k[a] = k[a], d.s[a] = s[a], d.p[a] = p[a], d.dil[a] = dil[a], d.op[a] = op[a];
    d.od[a] = (int)(deconv ? _tsr_deconv_out(id[a], k[a], s[a], p[a], dil[a], op[a])
                           : _tsr_conv_out(id[a], k[a], s[a], p[a], dil[a]));
  }
  return d;
}

/* The three passes as tasks on the CUDA worker against _tsr_conv3d_run (the CPU codelets' kernel,
 * equal to the CPU tasks by tests/check_layers3d.c) on the same inputs; weight gradients accumulate
 * onto non-zero values. */
static void conv3d_case(struct _tsr_conv3d_desc d, uint64_t seed, const char *what) {
  size_t nx = (size_t)d.n * d.ci * vol3(d.id), ny = (size_t)d.n * d.co * vol3(d.od), nw = (size_t)d.co * d.ci * vol3(d.k);
  float *x = gt_rand(nx, seed), *w = gt_rand(nw, seed + 1), *b = gt_rand(d.co, seed + 2), *dy = gt_rand(ny, seed + 3);
  float *y = calloc(ny, 4), *yc = calloc(ny, 4), *dx = calloc(nx, 4), *dxc = calloc(nx, 4);
  float *dw = gt_rand(nw, seed + 4), *dwc = copy_of(dw, nw), *db = gt_rand(d.co, seed + 5), *dbc = copy_of(db, d.co);
  starpu_data_handle_t hs[] = {REG(x, nx), REG(w, nw), REG(b, d.co), REG(y, ny), REG(dy, ny),
                               REG(dx, nx), REG(dw, nw), REG(db, d.co)};
  starpu_data_handle_t hb = d.has_bias ? hs[2] : NULL, hdb = d.has_bias ? hs[7] : NULL;
  ck_assert_int_eq(_tsr_insert_conv3d(&d, TSR_CONV_FWD, hs[0], hs[1], hb, hs[3], "3d fwd"), 0);
  ck_assert_int_eq(_tsr_insert_conv3d(&d, TSR_CONV_BWD_DATA, hs[4], hs[1], hs[5], NULL, "3d bwd data"), 0);
  ck_assert_int_eq(_tsr_insert_conv3d(&d, TSR_CONV_BWD_WEIGHTS, hs[0], hs[4], hs[6], hdb, "3d bwd weights"), 0);
  gt_done(hs, 8);
  _tsr_conv3d_run(&d, TSR_CONV_FWD, x, w, d.has_bias ? b : NULL, yc, NULL);
  _tsr_conv3d_run(&d, TSR_CONV_BWD_DATA, dy, w, NULL, dxc, NULL);
  _tsr_conv3d_run(&d, TSR_CONV_BWD_WEIGHTS, x, dy, NULL, dwc, d.has_bias ? dbc : NULL);
  char m[200];
  ck_assert_msg(!_tsr_kernel_error(m, sizeof m), "%s on the CPU: %s", what, m);
  snprintf(m, sizeof m, "%s forward", what), gt_close(y, yc, ny, LIB_ATOL, LIB_RTOL, m);
  snprintf(m, sizeof m, "%s backward data", what), gt_close(dx, dxc, nx, LIB_ATOL, LIB_RTOL, m);
  snprintf(m, sizeof m, "%s backward weights", what), gt_close(dw, dwc, nw, LIB_ATOL, LIB_RTOL, m);
  if (d.has_bias) snprintf(m, sizeof m, "%s backward bias", what), gt_close(db, dbc, d.co, LIB_ATOL, LIB_RTOL, m);
  free(x), free(w), free(b), free(dy), free(y), free(yc), free(dx), free(dxc), free(dw), free(dwc), free(db), free(dbc);
}

/* The same window k, stride s and padding p on d, h and w. */
static struct _tsr_pool_desc pool3d_desc(int n, int c, int dd, int h, int w, int k, int s, int p, int is_max) {
  struct _tsr_pool_desc d = {.n = n, .c = c, .d = dd, .h = h, .w = w, .kd = k, .kh = k, .kw = k, .sd = s, .sh = s,
                            .sw = s, .pd = p, .ph = p, .pw = p, .is_max = is_max};
  d.od = (int)_tsr_conv_out(dd, k, s, p, 1), d.oh = (int)_tsr_conv_out(h, k, s, p, 1);
  d.ow = (int)_tsr_conv_out(w, k, s, p, 1);
  return d;
}

static void pool3d_case(struct _tsr_pool_desc d, uint64_t seed) {
  size_t nx = (size_t)d.n * d.c * d.d * d.h * d.w, ny = (size_t)d.n * d.c * d.od * d.oh * d.ow;
  size_t wsb = _tsr_pool_ws_bytes(&d);
  float *x = gt_rand(nx, seed), *dy = gt_rand(ny, seed + 1);
  for (size_t i = 0; i < nx; i++) x[i] = x[i] > 0 ? x[i] : 0.0f; /* ReLU output: ties */
  float *y = calloc(ny, 4), *yc = calloc(ny, 4), *dx = calloc(nx, 4), *dxc = calloc(nx, 4);
  unsigned char *ws = calloc(wsb + 1, 1), *wsc = calloc(wsb + 1, 1);
  starpu_data_handle_t hs[4] = {REG(x, nx), REG(y, ny), REG(dy, ny), REG(dx, nx)};
  starpu_data_handle_t hws = d.is_max ? gt_register_bytes(ws, wsb) : NULL;
  ck_assert_int_eq(_tsr_insert_pool_fwd(&d, hs[0], hs[1], hws, "pool3d fwd"), 0);
  ck_assert_int_eq(_tsr_insert_pool_bwd(&d, hs[2], hws, hs[3], "pool3d bwd"), 0);
  gt_done(hs, 4);
  if (hws) starpu_data_unregister(hws);
  _tsr_pool_fwd_cpu(&d, x, yc, d.is_max ? wsc : NULL);
  _tsr_pool_bwd_cpu(&d, dy, d.is_max ? wsc : NULL, dxc);
  char m[160];
  ck_assert_msg(!_tsr_kernel_error(m, sizeof m), "pool3d on the CPU: %s", m);
  const char *kind = d.is_max ? "max" : "average";
  int len = snprintf(m, sizeof m, "%s pool3d %dx%dx%d s%d p%d over %dx%dx%dx%dx%d", kind, d.kd, d.kh, d.kw, d.sd,
                     d.pd, d.n, d.c, d.d, d.h, d.w);
  char *tail = m + len;
  size_t cap = sizeof m - (size_t)len;
  if (d.is_max) {
    snprintf(tail, cap, " forward"), gt_same(y, yc, ny * 4, m);
    snprintf(tail, cap, " workspace (argmax)"), gt_same(ws, wsc, wsb, m);
  } else {
    snprintf(tail, cap, " forward (cuDNN)"), gt_close(y, yc, ny, ELEM_ATOL, ELEM_RTOL, m);
  }
  snprintf(tail, cap, " backward"), gt_close(dx, dxc, nx, ELEM_ATOL, 1e-5, m);
  free(x), free(dy), free(y), free(yc), free(dx), free(dxc), free(ws), free(wsc);
}

START_TEST(test_3d_passes_match_cpu) {
  const int one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
  { /* CosmoFlow-like: 3x3x3, pad 1, stride 1, bias */
    const int id[3] = {8, 8, 8}, k[3] = {3, 3, 3};
    conv3d_case(conv3d_desc(2, 4, id, 8, k, one, one, one, zero, 1, 0), 300, "conv3d 3x3x3 s1 p1 over 2x4x8x8x8");
  }
  { /* strided, non-cubic kernel and input, per-axis padding, no bias */
    const int id[3] = {7, 6, 5}, k[3] = {3, 2, 3}, s[3] = {2, 1, 2}, p[3] = {1, 0, 1};
    conv3d_case(conv3d_desc(2, 3, id, 5, k, s, p, one, zero, 0, 0), 310, "conv3d 3x2x3 s(2,1,2) p(1,0,1), no bias");
  }
  { /* transposed 2x2x2 stride 2 (the U-Net's upsampling) */
    const int id[3] = {4, 3, 5}, k[3] = {2, 2, 2}, s[3] = {2, 2, 2};
    conv3d_case(conv3d_desc(2, 8, id, 4, k, s, zero, one, zero, 1, 1), 330, "conv_transpose3d 2x2x2 s2");
  }
  { /* transposed 3x3x3 stride 2 pad 1 with output padding on d and w, no bias */
    const int id[3] = {3, 3, 4}, k[3] = {3, 3, 3}, s[3] = {2, 2, 2}, op[3] = {1, 0, 1};
    conv3d_case(conv3d_desc(1, 3, id, 2, k, s, one, one, op, 0, 1), 340,
                "conv_transpose3d 3x3x3 s2 p1 out-pad (1,0,1), no bias");
  }
  for (int is_max = 0; is_max <= 1; is_max++) {
    pool3d_case(pool3d_desc(2, 3, 4, 6, 8, 2, 2, 0, is_max), 350); /* CosmoFlow's 2x2x2 */
    pool3d_case(pool3d_desc(1, 2, 7, 5, 6, 3, 2, 1, is_max), 352); /* overlap and padding */
    pool3d_case(pool3d_desc(1, 2, 5, 4, 6, 3, 1, 1, is_max), 354); /* stride 1: up to 27 windows per input */
  }
  pool3d_case(pool3d_desc(1, 1, 9, 9, 9, 7, 2, 3, 1), 356); /* 343 window elements: int32 argmax */
  /* nearest upsampling: forward copies (bitwise); backward sums f^3 copies in the CPU's order */
  struct _tsr_upsample_desc u = {.n = 2, .c = 3, .d = 3, .h = 4, .w = 5, .f = 2};
  size_t nx = (size_t)u.n * u.c * u.d * u.h * u.w, ny = nx * 8;
  float *x = gt_rand(nx, 360), *dy = gt_rand(ny, 361), *y = calloc(ny, 4), *yc = calloc(ny, 4);
  float *dx = calloc(nx, 4), *dxc = calloc(nx, 4);
  starpu_data_handle_t hs[] = {REG(x, nx), REG(y, ny), REG(dy, ny), REG(dx, nx)};
  ck_assert_int_eq(_tsr_insert_upsample_fwd(&u, hs[0], hs[1], "upsample3d fwd"), 0);
  ck_assert_int_eq(_tsr_insert_upsample_bwd(&u, hs[2], hs[3], "upsample3d bwd"), 0);
  gt_done(hs, 4);
  _tsr_upsample_fwd_cpu(&u, x, yc);
  _tsr_upsample_bwd_cpu(&u, dy, dxc);
  gt_same(y, yc, ny * 4, "upsample3d x2 forward");
  gt_close(dx, dxc, nx, ELEM_ATOL, ELEM_RTOL, "upsample3d x2 backward");
  free(x), free(dy), free(y), free(yc), free(dx), free(dxc);
  { /* dilation (last: of the cases above, the one cuDNN is least likely to support) */
    const int id[3] = {7, 7, 6}, k[3] = {3, 3, 2}, p[3] = {2, 2, 1}, dil[3] = {2, 2, 1};
    conv3d_case(conv3d_desc(1, 2, id, 3, k, one, p, dil, zero, 1, 0), 320, "conv3d 3x3x2 dilation (2,2,1)");
  }
}
END_TEST

/* ---- batch normalisation: the whole chain of tasks ---- */

START_TEST(test_batchnorm_chain_matches_cpu) {
  struct _tsr_bn_desc d = {.n = 3, .c = 4, .h = 5, .w = 6, .total = 3, .eps = 1e-5f, .momentum = 0.1f};
  size_t n = 3 * 4 * 30;
  float *x = gt_rand(n, 70), *dy = gt_rand(n, 71), *gamma = gt_rand(4, 72), *beta = gt_rand(4, 73);
  for (size_t i = 0; i < n; i++) x[i] = 2 * x[i] + 0.5f;
  float rm[4] = {0.1f, -0.2f, 0.3f, 0}, rv[4] = {1, 2, 0.5f, 1}, rmc[4], rvc[4];
  memcpy(rmc, rm, sizeof rm), memcpy(rvc, rv, sizeof rv);
  double acc[8], acc2[8], accc[8] = {0}, acc2c[8] = {0};
  float stat[8], statc[8], dgamma[4] = {0.5f, 0, 0, 1}, dbeta[4] = {0, 1, 0, 0}, dgc[4], dbc[4];
  memcpy(dgc, dgamma, sizeof dgamma), memcpy(dbc, dbeta, sizeof dbeta);
  float *y = calloc(n, 4), *ye = calloc(n, 4), *dx = calloc(n, 4), *yc = calloc(n, 4), *yec = calloc(n, 4),
        *dxc = calloc(n, 4);
  starpu_data_handle_t hs[] = {REG(x, n),    REG(dy, n),       REG(gamma, 4),    REG(beta, 4),  REG(rm, 4),
                               REG(rv, 4),   reg_doubles(acc, 8), reg_doubles(acc2, 8), REG(stat, 8), REG(dgamma, 4),
                               REG(dbeta, 4), REG(y, n),        REG(ye, n),       REG(dx, n)};
  d.overwrite = 1; /* the stats tasks write acc and acc2 */
  ck_assert_int_eq(_tsr_insert_bn_stats(&d, hs[0], hs[6], "stats"), 0);
  ck_assert_int_eq(_tsr_insert_bn_finalize(&d, hs[6], hs[8], hs[4], hs[5], "finalize"), 0);
  ck_assert_int_eq(_tsr_insert_bn_fwd(&d, hs[0], hs[8], hs[2], hs[3], hs[11], "fwd"), 0);
  ck_assert_int_eq(_tsr_insert_bn_fwd_eval(&d, hs[0], hs[4], hs[5], hs[2], hs[3], hs[12], "fwd eval"), 0);
  ck_assert_int_eq(_tsr_insert_bn_bwd_stats(&d, hs[0], hs[8], hs[1], NULL, NULL, hs[7], "bwd stats"), 0);
  d.overwrite = 0; /* bwd params adds into dgamma, dbeta */
  ck_assert_int_eq(_tsr_insert_bn_bwd_params(&d, hs[7], hs[9], hs[10], "bwd params"), 0);
  ck_assert_int_eq(_tsr_insert_bn_bwd_data(&d, hs[0], hs[8], hs[2], NULL, hs[7], hs[1], hs[13], "bwd data"), 0);
  gt_done(hs, 14);
  _tsr_bn_stats_cpu(&d, x, accc);
  _tsr_bn_finalize_cpu(&d, accc, statc, rmc, rvc);
  _tsr_bn_fwd_cpu(&d, x, statc, gamma, beta, yc);
  _tsr_bn_fwd_eval_cpu(&d, x, rmc, rvc, gamma, beta, yec);
  /* from the GPU's mean and inverse std, so that only the sums' arithmetic differs (below) */
  _tsr_bn_bwd_stats_cpu(&d, x, stat, dy, NULL, NULL, acc2c);
  _tsr_bn_bwd_params_cpu(&d, acc2c, dgc, dbc);
  _tsr_bn_bwd_data_cpu(&d, x, statc, gamma, NULL, acc2c, dy, dxc);
  gt_close_d(acc, accc, 8, 1e-10, "batch-norm sums");
  gt_close(stat, statc, 8, ELEM_ATOL, ELEM_RTOL, "batch-norm mean and inverse std");
  gt_close(rm, rmc, 4, ELEM_ATOL, ELEM_RTOL, "batch-norm running mean");
  gt_close(rv, rvc, 4, ELEM_ATOL, ELEM_RTOL, "batch-norm running variance");
  gt_close(y, yc, n, ELEM_ATOL, 1e-5, "batch-norm forward");
  gt_close(ye, yec, n, ELEM_ATOL, 1e-5, "batch-norm forward (eval)");
  /* sum(dy) in double on both; sum(dy (x - mean)) invstd: the CPU rounds x - mean to float32 before its
   * double product (batchnorm_rows.c), the GPU does not, so each product may differ by 2^-24 of itself
   * (the H200 showed 3.7e-8 on a sum of 2.2) */
  for (int ch = 0; ch < 4; ch++) {
    double bound = 0;
    for (int i = 0; i < 3; i++)
      for (int k = 0; k < 30; k++) {
        size_t e = ((size_t)i * 4 + ch) * 30 + k;
        bound += fabs((double)dy[e] * ((double)x[e] - stat[ch]));
      }
    bound *= 0x1p-24 * stat[4 + ch];
    ck_assert_msg(fabs(acc2[ch] - acc2c[ch]) <= 1e-10 * (1 + fabs(acc2c[ch])),
                  "batch-norm backward sum of dy, channel %d: %.17g, CPU %.17g", ch, acc2[ch], acc2c[ch]);
    ck_assert_msg(fabs(acc2[4 + ch] - acc2c[4 + ch]) <= bound + 1e-10 * (1 + fabs(acc2c[4 + ch])),
                  "batch-norm backward sum of dy xhat, channel %d: %.17g, CPU %.17g (bound %.3g)", ch, acc2[4 + ch],
                  acc2c[4 + ch], bound);
  }
  gt_close(dgamma, dgc, 4, ELEM_ATOL, ELEM_RTOL, "batch-norm dgamma");
  gt_close(dbeta, dbc, 4, ELEM_ATOL, ELEM_RTOL, "batch-norm dbeta");
  gt_close(dx, dxc, n, 1e-5, 1e-5, "batch-norm backward data");
  free(x), free(dy), free(gamma), free(beta), free(y), free(ye), free(dx), free(yc), free(yec), free(dxc);
}
END_TEST

/* ---- dropout (masks bitwise), concat, add, tensor ops (zero, fill, accumulate, copy) ---- */

START_TEST(test_dropout_concat_add_tensor_ops_match_cpu) {
  struct _tsr_dropout_desc dr = {.n = 2, .c = 3, .h = 5, .w = 7, .p = 0.3f}, drs = dr;
  drs.spatial = 1;
  size_t nd = 210;
  float *dx = gt_rand(nd, 80), *d1 = calloc(nd, 4), *d2 = calloc(nd, 4), *d3 = calloc(nd, 4);
  struct _tsr_concat_desc cd = {.n = 2, .h = 3, .w = 4, .k = 3, .c = {1, 4, 2}};
  size_t np[3] = {2 * 12, 2 * 48, 2 * 24}, nw = 2 * 7 * 12;
  float *p[3] = {gt_rand(np[0], 81), gt_rand(np[1], 82), gt_rand(np[2], 83)}, *q[3] = {calloc(np[0], 4), calloc(np[1], 4), calloc(np[2], 4)};
  float *whole = calloc(nw, 4), *dwhole = gt_rand(nw, 84), *sum = calloc(np[0], 4);
  float *acc = gt_rand(100, 85), *inc = gt_rand(100, 86), *accc = copy_of(acc, 100), *cp = calloc(100, 4), *z = gt_rand(100, 87);
  float *r = gt_rand(np[0], 88), *fl = gt_rand(50, 89);
  starpu_data_handle_t hs[] = {REG(dx, nd), REG(d1, nd), REG(d2, nd), REG(d3, nd), REG(p[0], np[0]), REG(p[1], np[1]),
                               REG(p[2], np[2]), REG(q[0], np[0]), REG(q[1], np[1]), REG(q[2], np[2]), REG(whole, nw),
                               REG(dwhole, nw), REG(sum, np[0]), REG(acc, 100), REG(inc, 100), REG(cp, 100), REG(z, 100),
                               REG(r, np[0]), REG(fl, 50)};
  ck_assert_int_eq(_tsr_insert_dropout_fwd(&dr, 1234, hs[0], hs[1], "dropout fwd"), 0);
  ck_assert_int_eq(_tsr_insert_dropout_bwd(&dr, 1234, hs[0], hs[2], "dropout bwd"), 0);
  ck_assert_int_eq(_tsr_insert_dropout_fwd(&drs, 99, hs[0], hs[3], "spatial dropout fwd"), 0);
  ck_assert_int_eq(_tsr_insert_concat_fwd(&cd, hs + 4, hs[10], "concat fwd"), 0);
  ck_assert_int_eq(_tsr_insert_concat_bwd(&cd, hs[11], hs + 7, "concat bwd"), 0);
  starpu_data_handle_t terms[3] = {hs[4], hs[7], hs[17]}; /* three inputs of one shape */
  ck_assert_int_eq(_tsr_insert_add_fwd(np[0], 3, terms, hs[12], "add"), 0);
  ck_assert_int_eq(_tsr_insert_accumulate(hs[13], hs[14], "accumulate"), 0);
  ck_assert_int_eq(_tsr_insert_copy(hs[15], hs[14], "copy"), 0);
  ck_assert_int_eq(_tsr_insert_zero(hs[16], "zero"), 0);
  ck_assert_int_eq(_tsr_insert_fill(hs[18], 2.5f, "fill"), 0);
  gt_done(hs, 19);
  float *e = calloc(nd > nw ? nd : nw, 4);
  _tsr_dropout_fwd_cpu(&dr, 1234, dx, e);
  gt_same(d1, e, nd * 4, "dropout forward");
  _tsr_dropout_bwd_cpu(&dr, 1234, dx, e);
  gt_same(d2, e, nd * 4, "dropout backward");
  _tsr_dropout_fwd_cpu(&drs, 99, dx, e);
  gt_same(d3, e, nd * 4, "spatial dropout forward");
  _tsr_concat_fwd_cpu(&cd, (const float *const *)p, e);
  gt_same(whole, e, nw * 4, "concat forward");
  float *qc[3] = {calloc(np[0], 4), calloc(np[1], 4), calloc(np[2], 4)};
  _tsr_concat_bwd_cpu(&cd, dwhole, qc);
  for (int i = 0; i < 3; i++) gt_same(q[i], qc[i], np[i] * 4, "concat backward");
  const float *xs[3] = {p[0], qc[0], r};
  _tsr_add_fwd_cpu(np[0], 3, xs, e);
  gt_close(sum, e, np[0], ELEM_ATOL, ELEM_RTOL, "add");
  _tsr_axpy_cpu(accc, inc, 1.0f, 100);
  gt_close(acc, accc, 100, ELEM_ATOL, ELEM_RTOL, "accumulate");
  gt_same(cp, inc, 400, "copy");
  for (int i = 0; i < 100; i++) ck_assert_msg(z[i] == 0.0f, "zero: element %d is %g", i, z[i]);
  for (int i = 0; i < 50; i++) ck_assert_msg(fl[i] == (i ? 0.0f : 2.5f), "fill: element %d is %g", i, fl[i]);
  free(dx), free(d1), free(d2), free(d3), free(whole), free(dwhole), free(sum), free(acc), free(inc), free(accc);
  free(cp), free(z), free(e), free(r), free(fl);
  for (int i = 0; i < 3; i++) free(p[i]), free(q[i]), free(qc[i]);
}
END_TEST

/* ---- losses (double sums, so 1e-10 relative; CE's exp/log in float: 1e-5) and optimizers ---- */

START_TEST(test_losses_match_cpu) {
  const enum _tsr_loss kinds[] = {TSR_L_MSE, TSR_L_L1, TSR_L_HUBER, TSR_L_SOFTMAX_CE};
  const char *names[] = {"MSE", "L1", "Huber", "softmax cross-entropy"};
  for (int k = 0; k < 4; k++) {
    /* 3 samples of which 2 count (the third is padding: zero gradient) */
    struct _tsr_loss_desc d = {.kind = kinds[k], .n = 3, .c = 4, .h = 5, .w = 6, .nvalid = 2, .delta = 0.3f};
    size_t n = 3 * 4 * 30;
    d.scale = kinds[k] == TSR_L_SOFTMAX_CE ? 1.0 / (2 * 30) : 1.0 / (2 * 120.0);
    float *yh = gt_rand(n, 90 + k), *t = gt_rand(n, 95 + k), *g = calloc(n, 4), *gc = calloc(n, 4);
    if (kinds[k] == TSR_L_SOFTMAX_CE)
      for (size_t i = 0; i < n; i++) t[i] = 0.5f * (t[i] + 1) / 4; /* probabilities-like targets */
    double loss = -1, lossc = 0;
    starpu_data_handle_t hs[] = {REG(yh, n), REG(t, n), REG(g, n), reg_doubles(&loss, 1)};
    ck_assert_int_eq(_tsr_insert_loss(&d, hs[0], hs[1], hs[2], hs[3], "loss"), 0);
    gt_done(hs, 4);
    _tsr_loss_cpu(&d, yh, t, gc, &lossc);
    int ce = kinds[k] == TSR_L_SOFTMAX_CE;
    char m[64];
    snprintf(m, sizeof m, "%s loss", names[k]), gt_close_d(&loss, &lossc, 1, ce ? 1e-5 : 1e-10, m);
    snprintf(m, sizeof m, "%s gradient", names[k]), gt_close(g, gc, n, ELEM_ATOL, ce ? 1e-5 : ELEM_RTOL, m);
    free(yh), free(t), free(g), free(gc);
  }
}
END_TEST

START_TEST(test_optimizers_match_cpu) {
  struct _tsr_optim_args cases[] = {
      {.h.kind = TSR_OPTIM_SGD, .h.lr = 0.1f, .grad_scale = 1, .step = 1},
      {.h.kind = TSR_OPTIM_SGD, .h.lr = 0.1f, .h.momentum = 0.9f, .h.weight_decay = 0.01f, .grad_scale = 0.5f,
       .step = 1},
      {.h.kind = TSR_OPTIM_SGD, .h.lr = 0.1f, .h.momentum = 0.9f, .h.nesterov = 1, .grad_scale = 1, .step = 4},
      {.h.kind = TSR_OPTIM_ADAM, .h.lr = 1e-3f, .h.beta1 = 0.9f, .h.beta2 = 0.999f, .h.eps = 1e-8f,
       .h.weight_decay = 0.01f, .step = 3, .grad_scale = 1},
      {.h.kind = TSR_OPTIM_ADAMW, .h.lr = 1e-3f, .h.beta1 = 0.9f, .h.beta2 = 0.99f, .h.eps = 1e-8f,
       .h.weight_decay = 0.1f, .step = 1, .grad_scale = 0.25f},
      {.h.kind = TSR_OPTIM_LION, .h.lr = 1e-3f, .h.beta1 = 0.9f, .h.beta2 = 0.99f, .h.weight_decay = 0.1f, .step = 2,
       .grad_scale = 0.5f},
  };
  const char *names[] = {"SGD", "SGD momentum + weight decay", "SGD Nesterov", "Adam", "AdamW", "Lion"};
  const size_t n = 300;
  for (int c = 0; c < 6; c++) {
    float *w = gt_rand(n, 100 + c), *g = gt_rand(n, 110 + c), *m = gt_rand(n, 120 + c), *v = gt_rand(n, 130 + c);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *wc = copy_of(w, n), *mc = copy_of(m, n), *vc = copy_of(v, n);
    starpu_data_handle_t hs[] = {REG(w, n), REG(g, n), REG(m, n), REG(v, n)};
    ck_assert_int_eq(_tsr_optim_submit(&cases[c], hs[0], hs[1], &hs[2], NULL, "update"), 0);
    gt_done(hs, 4);
    _tsr_optim_update_cpu(&cases[c], n, wc, g, (float *[]){mc, vc});
    char msg[80];
    snprintf(msg, sizeof msg, "%s weights", names[c]), gt_close(w, wc, n, ELEM_ATOL, ELEM_RTOL, msg);
    snprintf(msg, sizeof msg, "%s first moment", names[c]), gt_close(m, mc, n, ELEM_ATOL, ELEM_RTOL, msg);
    snprintf(msg, sizeof msg, "%s second moment", names[c]), gt_close(v, vc, n, ELEM_ATOL, ELEM_RTOL, msg);
    free(w), free(g), free(m), free(v), free(wc), free(mc), free(vc);
  }
  /* gated by the loss scaler's state (read on the device): applied with its unscale and without
   * the skipped steps in the step count, or skipped altogether */
  struct _tsr_scale_state states[2] = {{.scale = 1024, .unscale = 1.0f / 1024, .apply = 1, .skipped = 2},
                                       {.scale = 512, .unscale = 1.0f / 512, .apply = 0, .skipped = 3}};
  for (int st = 0; st < 2; st++)
    for (int c = 2; c < 5; c++) {
      struct _tsr_optim_args a = cases[c];
      a.step = 5;
      float *w = gt_rand(n, 150 + c), *g = gt_rand(n, 160 + c), *m = gt_rand(n, 170 + c), *v = gt_rand(n, 180 + c);
      for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]), g[i] *= (float)states[st].scale;
      float *wc = copy_of(w, n), *mc = copy_of(m, n), *vc = copy_of(v, n);
      struct _tsr_scale_state state = states[st];
      starpu_data_handle_t hs[5] = {REG(w, n), REG(g, n), REG(m, n), REG(v, n)};
      starpu_variable_data_register(&hs[4], STARPU_MAIN_RAM, (uintptr_t)&state, sizeof state);
      ck_assert_int_eq(_tsr_optim_submit(&a, hs[0], hs[1], &hs[2], hs[4], "gated update"), 0);
      gt_done(hs, 5);
      if (state.apply) {
        a.grad_scale = state.unscale;
        a.step -= state.skipped;
        _tsr_optim_update_cpu(&a, n, wc, g, (float *[]){mc, vc});
      }
      char msg[96];
      snprintf(msg, sizeof msg, "%s gated (%s) weights", names[c], state.apply ? "applied" : "skipped");
      gt_close(w, wc, n, ELEM_ATOL, ELEM_RTOL, msg);
      snprintf(msg, sizeof msg, "%s gated (%s) first moment", names[c], state.apply ? "applied" : "skipped");
      gt_close(m, mc, n, ELEM_ATOL, ELEM_RTOL, msg);
      snprintf(msg, sizeof msg, "%s gated (%s) second moment", names[c], state.apply ? "applied" : "skipped");
      gt_close(v, vc, n, ELEM_ATOL, ELEM_RTOL, msg);
      free(w), free(g), free(m), free(v), free(wc), free(mc), free(vc);
    }
}
END_TEST

/* ---- loss scaling: the scale multiplies exactly; the overflow flag is set by a NaN or an Inf only ---- */

START_TEST(test_loss_scaling_matches_cpu) {
  const size_t n = 500;
  float *x = gt_rand(n, 190), *y = gt_rand(n, 191), *xc = copy_of(x, n), *yc = copy_of(y, n);
  float *ok1 = gt_rand(n, 192), *ok2 = gt_rand(n, 193), *bad = gt_rand(n, 194);
  bad[n - 3] = INFINITY;
  struct _tsr_scale_state st = {.scale = 1024, .unscale = 1, .apply = 1}, clean = st, dirty = st;
  starpu_data_handle_t hs[7] = {REG(x, n), REG(y, n), REG(ok1, n), REG(ok2, n), REG(bad, n)};
  starpu_variable_data_register(&hs[5], STARPU_MAIN_RAM, (uintptr_t)&clean, sizeof clean);
  starpu_variable_data_register(&hs[6], STARPU_MAIN_RAM, (uintptr_t)&dirty, sizeof dirty);
  starpu_data_handle_t hst;
  starpu_variable_data_register(&hst, STARPU_MAIN_RAM, (uintptr_t)&st, sizeof st);
  ck_assert_int_eq(_tsr_insert_scale_grad(hs[0], hst, 0, "scale by state"), 0);
  ck_assert_int_eq(_tsr_insert_scale_grad(hs[1], NULL, 0.125, "scale by a fixed factor"), 0);
  starpu_data_handle_t finite[2] = {hs[2], hs[3]}, mixed[3] = {hs[2], hs[4], hs[3]};
  ck_assert_int_eq(_tsr_insert_scale_check(hs[5], 2, finite, "check finite"), 0);
  ck_assert_int_eq(_tsr_insert_scale_check(hs[6], 3, mixed, "check with an inf"), 0);
  gt_done(hs, 7);
  starpu_data_unregister(hst);
  for (size_t i = 0; i < n; i++) xc[i] *= 1024.0f, yc[i] *= 0.125f;
  gt_same(x, xc, n * 4, "gradient scaled by the state's scale");
  gt_same(y, yc, n * 4, "gradient scaled by a fixed factor");
  ck_assert_msg(clean.overflow == 0, "finite gradients set the overflow flag");
  ck_assert_msg(dirty.overflow == 1, "an infinite gradient did not set the overflow flag");
  free(x), free(y), free(xc), free(yc), free(ok1), free(ok2), free(bad);
}
END_TEST

/* ---- conversions (launchers called directly on device buffers): bitwise as the CPU ---- */

#define CU(call) ck_assert_msg((call) == cudaSuccess, "%s failed", #call)

START_TEST(test_conversions_match_cpu) {
  const size_t n = 4096;
  float *x = gt_rand(n, 140), *back = calloc(n, 4), *backc = calloc(n, 4), *acc = gt_rand(n, 141), *accc = copy_of(acc, n);
  for (size_t i = 0; i < n; i++) x[i] *= i % 7 == 0 ? 1e5f : i % 5 == 0 ? 1e-6f : 3.0f; /* fp16 overflow and subnormals */
  x[3] = NAN, x[4] = INFINITY;
  uint16_t *h = calloc(n, 2), *hc = calloc(n, 2);
  float *dx, *dacc;
  uint16_t *dh;
  int *dflag, flag = -1;
  CU(cudaMalloc((void **)&dx, n * 4)), CU(cudaMalloc((void **)&dacc, n * 4)), CU(cudaMalloc((void **)&dh, n * 2));
  CU(cudaMalloc((void **)&dflag, sizeof(int)));
  CU(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
  for (int fmt = 0; fmt < 2; fmt++) {
    int prec = fmt ? TSR_PRECISION_FP16 : TSR_PRECISION_BF16;
    const char *name = fmt ? "fp16" : "bf16";
    ck_assert_int_eq(fmt ? _tsr_f32_to_f16_cuda(dx, dh, n, 0) : _tsr_f32_to_bf16_cuda(dx, dh, n, 0), 0);
    CU(cudaMemcpy(h, dh, n * 2, cudaMemcpyDeviceToHost));
    fmt ? _tsr_f32_to_f16_cpu(x, hc, n) : _tsr_f32_to_bf16_cpu(x, hc, n);
    gt_same(h, hc, n * 2, name);
    ck_assert_int_eq(fmt ? _tsr_f16_to_f32_cuda(dh, dacc, n, 0) : _tsr_bf16_to_f32_cuda(dh, dacc, n, 0), 0);
    CU(cudaMemcpy(back, dacc, n * 4, cudaMemcpyDeviceToHost));
    fmt ? _tsr_f16_to_f32_cpu(hc, backc, n) : _tsr_bf16_to_f32_cpu(hc, backc, n);
    gt_same(back, backc, n * 4, name);
    /* the reduced-precision conv's conversions */
    ck_assert_int_eq(_tsr_narrow_cuda(dx, dh, n, prec, 0), 0);
    CU(cudaMemcpy(h, dh, n * 2, cudaMemcpyDeviceToHost));
    gt_same(h, hc, n * 2, "narrow");
    CU(cudaMemcpy(dacc, acc, n * 4, cudaMemcpyHostToDevice));
    ck_assert_int_eq(_tsr_widen_cuda(dh, dacc, n, prec, 1, 0), 0);
    CU(cudaMemcpy(back, dacc, n * 4, cudaMemcpyDeviceToHost));
    memcpy(accc, acc, n * 4);
    fmt ? _tsr_f16_accumulate_cpu(accc, hc, n) : _tsr_bf16_accumulate_cpu(accc, hc, n);
    gt_same_f32(back, accc, n, "widen and accumulate"); /* acc + NaN: arithmetic */
  }
  ck_assert_int_eq(_tsr_all_finite_cuda(dx, n, dflag, 1, 0), 0);
  CU(cudaMemcpy(&flag, dflag, sizeof flag, cudaMemcpyDeviceToHost));
  ck_assert_int_eq(flag, _tsr_all_finite_cpu(x, n));
  ck_assert_int_eq(_tsr_all_finite_cuda(dacc + 8, 16, dflag, 1, 0), 0);
  CU(cudaMemcpy(&flag, dflag, sizeof flag, cudaMemcpyDeviceToHost));
  ck_assert_int_eq(flag, _tsr_all_finite_cpu(back + 8, 16));
  CU(cudaFree(dx)), CU(cudaFree(dacc)), CU(cudaFree(dh)), CU(cudaFree(dflag));
  free(x), free(back), free(backc), free(acc), free(accc), free(h), free(hc);
}
END_TEST

Suite *make_gpu_ops_suite(void) {
  Suite *s = suite_create("gpu_ops");
  TCase *t = tcase_create("codelets");
  tcase_set_timeout(t, 120);
  tcase_add_checked_fixture(t, gt_cuda_up, gpu_down);
  tcase_add_test(t, test_conv_and_deconv_passes_match_cpu);
  tcase_add_test(t, test_reduced_precision_conv_rounds_as_stated);
  tcase_add_test(t, test_deterministic_conv_gradients_repeat_bitwise);
  tcase_add_test(t, test_dense_passes_match_cpu);
  tcase_add_test(t, test_activations_match_cpu);
  tcase_add_test(t, test_pooling_matches_cpu);
  tcase_add_test(t, test_3d_passes_match_cpu);
  tcase_add_test(t, test_batchnorm_chain_matches_cpu);
  tcase_add_test(t, test_dropout_concat_add_tensor_ops_match_cpu);
  tcase_add_test(t, test_losses_match_cpu);
  tcase_add_test(t, test_optimizers_match_cpu);
  tcase_add_test(t, test_loss_scaling_matches_cpu);
  tcase_add_test(t, test_conversions_match_cpu);
  suite_add_tcase(s, t);
  return s;
}
#endif

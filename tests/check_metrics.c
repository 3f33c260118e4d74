/* Metrics and baselines (src/metrics): PSNR and SSIM against a float64 numpy reference on fixed
 * images (tests/metrics_ref.py; skipped without numpy), atom columns on images of Gaussian columns
 * at known positions, the sums over images, and the mean-target and nearest-neighbour baselines on
 * a tiny data set whose answers are known. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tessera.h>

#include "testutil.h"

#define PYTHON "/usr/bin/python3"

/* PSNR to 1e-9 dB and SSIM to 1e-12 of numpy's float64 values (the same float32 images, summed in
 * another order). */
START_TEST(test_psnr_and_ssim_equal_the_numpy_reference) {
  const char *src = getenv("TESSERA_SRCDIR");
  char cmd[4096];
  if (access(PYTHON, X_OK) != 0 || system(PYTHON " -c 'import numpy' >/dev/null 2>&1") != 0 || !src) {
    tt_skip("PSNR and SSIM not compared with numpy: no " PYTHON " with numpy (apt-get install python3-numpy) or no "
            "TESSERA_SRCDIR");
    return;
  }
  char dir[64];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  snprintf(cmd, sizeof cmd, PYTHON " %s/tests/metrics_ref.py %s", src, dir);
  ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
  tsr_shape st, sp;
  float *t = NULL, *p = NULL;
  ck_assert_msg(tsr_npy_read(tt_path_in(dir, "truth.npy"), &st, &t) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_npy_read(tt_path_in(dir, "pred.npy"), &sp, &p) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(st.ndim, 4);
  int n = (int)st.dims[0], h = (int)st.dims[2], w = (int)st.dims[3];
  ck_assert(h == 24 && w == 20 && n == 4);
  FILE *f = fopen(tt_path_in(dir, "ref.txt"), "r");
  ck_assert(f != NULL);
  for (int i = 0; i < n; i++) {
    double ref_psnr, ref_ssim, lo = INFINITY, hi = -INFINITY, ssim;
    ck_assert_int_eq(fscanf(f, "%lf %lf", &ref_psnr, &ref_ssim), 2);
    const float *a = t + (size_t)i * h * w, *b = p + (size_t)i * h * w;
    for (int k = 0; k < h * w; k++) lo = fmin(lo, a[k]), hi = fmax(hi, a[k]);
    double psnr = tsr_metric_psnr(a, b, (size_t)h * w, hi - lo);
    ck_assert_msg(tsr_metric_ssim(a, b, h, w, hi - lo, &ssim) == TSR_OK, "%s", tsr_last_error());
    ck_assert_msg(fabs(psnr - ref_psnr) < 1e-9, "pair %d: PSNR %.12g dB, numpy %.12g", i, psnr, ref_psnr);
    ck_assert_msg(fabs(ssim - ref_ssim) < 1e-12, "pair %d: SSIM %.15g, numpy %.15g", i, ssim, ref_ssim);
  }
  fclose(f);
  free(t), free(p);
}
END_TEST

START_TEST(test_ssim_is_one_for_equal_images_and_checks_its_arguments) {
  enum { H = 13, W = 17 };
  float a[H * W];
  double s = 0;
  tt_fill_uniform(a, H * W, 3, -1, 2);
  ck_assert_msg(tsr_metric_ssim(a, a, H, W, 3, &s) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(fabs(s - 1) < 1e-12, "SSIM of an image with itself: %.15g", s);
  ck_assert_int_eq(tsr_metric_ssim(a, a, 10, W, 3, &s), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "10 x 17"));
  ck_assert_int_eq(tsr_metric_ssim(a, a, H, W, 0, &s), TSR_ERR_ARG);
  ck_assert(isinf(tsr_metric_psnr(a, a, H * W, 3)));
}
END_TEST

/* ---- atom columns ---- */

enum { CH = 40, CW = 48 };
static const double PX = 0.25, PY = 0.3; /* A: a 12 x 12 A field of non-square pixels */

/* Adds a Gaussian column of rms 0.4 A and height a at (x, y) A from the centre of pixel (0, 0). */
static void column(float *img, double x, double y, double a) {
  for (int i = 0; i < CH; i++)
    for (int j = 0; j < CW; j++) {
      double dx = j * PX - x, dy = i * PY - y;
      img[i * CW + j] += (float)(a * exp(-(dx * dx + dy * dy) / (2 * 0.4 * 0.4)));
    }
}

static const double cols[4][2] = {{3.0, 3.1}, {8.05, 3.3}, {3.2, 8.4}, {8.6, 8.9}};

START_TEST(test_columns_are_found_at_their_positions) {
  float *img = calloc(CH * CW, sizeof *img);
  for (int k = 0; k < 4; k++) column(img, cols[k][0], cols[k][1], 1.0 - 0.1 * k);
  column(img, 6.0, 6.0, 0.2); /* below the threshold of 0.3 of the range */
  tsr_columns_opts o;
  tsr_columns_opts_default(&o);
  ck_assert(o.threshold == 0.3 && o.separation == 1.0 && o.radius == 0.2);
  double xy[16];
  int n;
  ck_assert_msg(tsr_columns_find(img, CH, CW, PX, PY, &o, xy, 8, &n) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(n, 4);
  for (int k = 0; k < 4; k++) /* highest first; parabola refinement within 0.02 A */
    ck_assert_msg(hypot(xy[2 * k] - cols[k][0], xy[2 * k + 1] - cols[k][1]) < 0.02,
                  "column %d at (%g, %g), found (%g, %g)", k, cols[k][0], cols[k][1], xy[2 * k], xy[2 * k + 1]);
  o.threshold = 0.1;
  ck_assert(tsr_columns_find(img, CH, CW, PX, PY, &o, xy, 8, &n) == TSR_OK && n == 5);
  /* two columns 1.6 A apart: both at a separation of 1 A, the higher alone at 2 A */
  memset(img, 0, CH * CW * sizeof *img);
  column(img, 5.0, 5.0, 0.9), column(img, 6.6, 5.0, 1.0);
  o.threshold = 0.3;
  ck_assert(tsr_columns_find(img, CH, CW, PX, PY, &o, xy, 8, &n) == TSR_OK && n == 2);
  o.separation = 2.0;
  ck_assert(tsr_columns_find(img, CH, CW, PX, PY, &o, xy, 8, &n) == TSR_OK && n == 1);
  ck_assert_msg(fabs(xy[0] - 6.6) < 0.05, "the higher column is kept: x = %g", xy[0]);
  ck_assert_int_eq(tsr_columns_find(img, CH, CW, 0, PY, &o, xy, 8, &n), TSR_ERR_ARG);
  free(img);
}
END_TEST

/* Prediction: column 0 moved 0.1 A along x (found), column 1 moved 0.35 A along y (missed), column
 * 2 missing, column 3 in place, and a column where there is none. */
static void predicted(float *img) {
  column(img, cols[0][0] + 0.1, cols[0][1], 1.0);
  column(img, cols[1][0], cols[1][1] + 0.35, 0.9);
  column(img, cols[3][0], cols[3][1], 0.7);
  column(img, 10.0, 5.0, 0.8);
}

START_TEST(test_columns_match_within_the_radius) {
  float *t = calloc(CH * CW, sizeof *t), *p = calloc(CH * CW, sizeof *p);
  for (int k = 0; k < 4; k++) column(t, cols[k][0], cols[k][1], 1.0 - 0.1 * k);
  predicted(p);
  tsr_columns_opts o;
  tsr_columns_opts_default(&o);
  tsr_columns_result r = {0};
  ck_assert_msg(tsr_columns_match(t, p, CH, CW, PX, PY, &o, NULL, 0, &r) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(r.ntrue, 4);
  ck_assert_int_eq(r.nfound, 4);
  ck_assert_int_eq(r.nmatched, 2);
  ck_assert_msg(fabs(r.err_sum - 0.1) < 0.02, "position errors sum to %g A, expected 0.1", r.err_sum);
  /* the true columns given instead of found: the same answer, added to the counts */
  ck_assert(tsr_columns_match(NULL, p, CH, CW, PX, PY, &o, &cols[0][0], 4, &r) == TSR_OK);
  ck_assert(r.ntrue == 8 && r.nmatched == 4);
  /* a radius of 0.5 A also finds the column 0.35 A away */
  o.radius = 0.5;
  memset(&r, 0, sizeof r);
  ck_assert(tsr_columns_match(t, p, CH, CW, PX, PY, &o, NULL, 0, &r) == TSR_OK && r.nmatched == 3);
  free(t), free(p);
}
END_TEST

START_TEST(test_metrics_sum_over_images_and_channels) {
  float *t = calloc(2 * CH * CW, sizeof *t), *p = calloc(2 * CH * CW, sizeof *p);
  for (int k = 0; k < 4; k++)
    column(t, cols[k][0], cols[k][1], 1.0 - 0.1 * k), column(t + CH * CW, cols[k][0], cols[k][1], 1);
  predicted(p);
  memcpy(p + CH * CW, t + CH * CW, CH * CW * sizeof *p); /* channel 1 exact */
  tsr_columns_opts o;
  tsr_columns_opts_default(&o);
  tsr_metrics m;
  tsr_metrics_init(&m);
  ck_assert_msg(tsr_metrics_add(&m, t, p, 2, CH, CW, PX, PY, &o) == TSR_OK, "%s", tsr_last_error());
  double lo = INFINITY, hi = -INFINITY, se = 0, ssim;
  for (int k = 0; k < CH * CW; k++) lo = fmin(lo, t[k]), hi = fmax(hi, t[k]), se += pow((double)p[k] - t[k], 2);
  ck_assert(tsr_metric_ssim(t, p, CH, CW, hi - lo, &ssim) == TSR_OK);
  ck_assert(m.images == 2 && m.psnr_inf == 1);
  ck_assert_msg(fabs(tsr_metrics_psnr(&m) - tsr_metric_psnr(t, p, CH * CW, hi - lo)) < 1e-12,
                "mean PSNR without the exact image");
  ck_assert_msg(fabs(tsr_metrics_ssim(&m) - (ssim + 1) / 2) < 1e-12, "SSIM %g", tsr_metrics_ssim(&m));
  ck_assert(fabs(tsr_metrics_mse(&m) - se / (2.0 * CH * CW)) < 1e-12);
  ck_assert_msg(fabs(tsr_metrics_detection(&m) - 6.0 / 8) < 1e-12, "detection %g", tsr_metrics_detection(&m));
  ck_assert(fabs(tsr_metrics_position_error(&m) - m.col.err_sum / 6) < 1e-15 && m.col.err_sum < 0.12);
  ck_assert_msg(tsr_metrics_add(&m, t, p, 1, CH, CW, 0, 0, &o) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(isnan(tsr_metrics_detection(&m)), "no columns once an image had no pixel size");
  free(t), free(p);
}
END_TEST

/* ---- baselines ---- */

START_TEST(test_baselines_on_a_tiny_data_set) {
  /* 5 training samples: inputs [1, 2, 2], targets [1, 1, 2]; samples 1 and 3 have the same input */
  const float x[5][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}, {4, 0, 0, 0}, {1, 1, 1, 1}, {0, 0, 3, 3}};
  const float y[5][2] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}, {-1, 0}};
  char dir[64];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  int64_t dx[4] = {5, 1, 2, 2}, dy[4] = {5, 1, 1, 2};
  tsr_shape sx = tsr_shape_make(4, dx), sy = tsr_shape_make(4, dy);
  char spec[256];
  snprintf(spec, sizeof spec, "%s:", tt_path_in(dir, "x.npy"));
  ck_assert(tsr_npy_write(tt_path_in(dir, "x.npy"), &sx, &x[0][0]) == TSR_OK);
  ck_assert(tsr_npy_write(tt_path_in(dir, "y.npy"), &sy, &y[0][0]) == TSR_OK);
  strcat(spec, tt_path_in(dir, "y.npy"));
  tsr_loader_opts lo;
  tsr_loader_opts_default(&lo);
  lo.standardize = 0;
  tsr_loader *l;
  ck_assert_msg(tsr_loader_open(&l, spec, &lo) == TSR_OK, "%s", tsr_last_error());
  float mean[2];
  ck_assert_msg(tsr_baseline_mean_target(l, 0, 5, mean) == TSR_OK, "%s", tsr_last_error());
  ck_assert(mean[0] == 3.0f && mean[1] == 4.0f);
  ck_assert(tsr_baseline_mean_target(l, 1, 2, mean) == TSR_OK && mean[0] == 4.0f && mean[1] == 5.0f);
  /* nearest: 0.9 everywhere -> sample 1 (tied with 3: the lower index); (3.5, 0, 0, 0.2) -> 2;
   * (0, 0, 2, 2) -> 4; searching samples 2..4 only, 0.9 everywhere -> 3 */
  const float q[3][4] = {{0.9f, 0.9f, 0.9f, 0.9f}, {3.5f, 0, 0, 0.2f}, {0, 0, 2, 2}};
  int64_t idx[3];
  double d2[3];
  ck_assert_msg(tsr_baseline_nearest(l, 0, 5, &q[0][0], 3, idx, d2) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(idx[0] == 1 && idx[1] == 2 && idx[2] == 4, "nearest: %lld %lld %lld", (long long)idx[0],
                (long long)idx[1], (long long)idx[2]);
  ck_assert(fabs(d2[0] - 4 * 0.01) < 1e-6 && fabs(d2[1] - 0.29) < 1e-6 && fabs(d2[2] - 2) < 1e-12);
  ck_assert(tsr_baseline_nearest(l, 2, 3, &q[0][0], 1, idx, NULL) == TSR_OK && idx[0] == 3);
  ck_assert_int_eq(tsr_baseline_nearest(l, 3, 3, &q[0][0], 1, idx, NULL), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "[3, 6)"));
  tsr_loader_close(l);
}
END_TEST

static Suite *make_metrics_suite(void) {
  Suite *s = suite_create("metrics");
  TCase *tc = tcase_create("metrics");
  tcase_add_test(tc, test_psnr_and_ssim_equal_the_numpy_reference);
  tcase_add_test(tc, test_ssim_is_one_for_equal_images_and_checks_its_arguments);
  tcase_add_test(tc, test_columns_are_found_at_their_positions);
  tcase_add_test(tc, test_columns_match_within_the_radius);
  tcase_add_test(tc, test_metrics_sum_over_images_and_channels);
  tcase_add_test(tc, test_baselines_on_a_tiny_data_set);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_metrics_suite)

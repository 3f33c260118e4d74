/* Suite "cosmo": the CosmoFlow-style generator. Its fields have the requested power spectrum
 * (measured here with an independent full-grid FFT, binned, averaged over samples, within a
 * statistical tolerance); the growth factor matches an ODE integration; channels follow the growth
 * and the transform; targets encode the parameters as documented; segmentation labels match the
 * spheres put into the field; samples depend on (seed, index) only; bad options are refused with
 * their value in the message. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fftw3.h>
#include <tessera/cosmo.h>
#include <tessera/data.h>
#include <tessera/loader.h>

#include "testutil.h"

/* P(k) = A (k / pivot)^n exp(-(k / kc)^2) written out here, and its A for a variance sigma^2 over
 * the full n^3 grid (every mode, both halves): the generator's normalisation, computed independently. */
static double power(double a, double idx, double pivot, double kc, double k) {
  return k > 0 ? a * pow(k / pivot, idx) * exp(-(k / kc) * (k / kc)) : 0;
}

static int fq(int i, int n) { return i < (n + 1) / 2 ? i : i - n; }

static double amplitude(int n, double cell, double sigma, double idx, double pivot, double kc) {
  double box = n * cell, kf = 2 * M_PI / box, sum = 0;
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      for (int c = 0; c < n; c++) {
        double q = sqrt((double)fq(a, n) * fq(a, n) + (double)fq(b, n) * fq(b, n) + (double)fq(c, n) * fq(c, n));
        sum += power(1, idx, pivot, kc, q * kf);
      }
  return sigma * sigma * box * box * box / sum;
}

/* Adds |delta_k|^2 / V (= cell^3 |FFT|^2 / n^3) and P(|k|) of every mode of `field` to bins of width kf. */
static void bin_spectrum(int n, double cell, const float *field, double a, double idx, double pivot, double kc,
                         int nbins, double *measured, double *expected, double *modes) {
  size_t n3 = (size_t)n * n * n;
  fftw_complex *f = fftw_alloc_complex(n3);
  fftw_plan p = fftw_plan_dft_3d(n, n, n, f, f, FFTW_FORWARD, FFTW_ESTIMATE);
  for (size_t i = 0; i < n3; i++) f[i][0] = field[i], f[i][1] = 0;
  fftw_execute(p);
  double kf = 2 * M_PI / (n * cell);
  for (int x = 0; x < n; x++)
    for (int y = 0; y < n; y++)
      for (int z = 0; z < n; z++) {
        double q = sqrt((double)fq(x, n) * fq(x, n) + (double)fq(y, n) * fq(y, n) + (double)fq(z, n) * fq(z, n));
        int b = (int)floor(q + 0.5);
        if (b < 1 || b > nbins) continue;
        const double *v = f[((size_t)x * n + y) * n + z];
        measured[b - 1] += cell * cell * cell * (v[0] * v[0] + v[1] * v[1]) / n3;
        expected[b - 1] += power(a, idx, pivot, kc, q * kf);
        modes[b - 1] += 1;
      }
  fftw_destroy_plan(p);
  fftw_free(f);
}

/* Fixed parameters, linear transform: channel z has spectrum D(z)^2 P(k). Each bin's measured mean
 * over M modes (M / 2 independent complex amplitudes, |delta_k|^2 exponential) must be within 4
 * standard errors, 4 sqrt(2 / M), of the requested mean. */
START_TEST(generated_fields_have_the_requested_power_spectrum) {
  enum { N = 32, SAMPLES = 12, NB = N / 2 - 1 };
  tsr_cosmo_opts o;
  tsr_cosmo_opts_default(&o);
  o.size = N, o.transform = TSR_COSMO_LINEAR, o.nz = 2, o.z[0] = 1, o.z[1] = 0;
  const double fixed[TSR_COSMO_PARAMS] = {0.3, 0.8, -1.5, 0.35};
  for (int i = 0; i < TSR_COSMO_PARAMS; i++) o.lo[i] = o.hi[i] = fixed[i];
  double a = amplitude(N, o.cell, 0.8, -1.5, o.pivot, 0.35);
  size_t n3 = (size_t)N * N * N;
  float *x = malloc(sizeof(float) * 2 * n3), y[TSR_COSMO_PARAMS];
  double par[TSR_COSMO_PARAMS], var = 0;
  double meas[2][NB] = {{0}}, expct[2][NB] = {{0}}, modes[2][NB] = {{0}};
  for (int s = 0; s < SAMPLES; s++) {
    ck_assert_msg(tsr_cosmo_sample(&o, s, x, y, par) == TSR_OK, "%s", tsr_last_error());
    for (int c = 0; c < 2; c++) {
      double g = tsr_cosmo_growth(0.3, o.z[c]);
      bin_spectrum(N, o.cell, x + c * n3, a * g * g, -1.5, o.pivot, 0.35, NB, meas[c], expct[c], modes[c]);
    }
    for (size_t i = 0; i < n3; i++) var += (double)x[n3 + i] * x[n3 + i] / n3;
    for (int i = 0; i < TSR_COSMO_PARAMS; i++) {
      ck_assert(par[i] == fixed[i]);
      ck_assert(y[i] == 0.0f); /* a fixed parameter's target is 0 */
    }
  }
  for (int c = 0; c < 2; c++)
    for (int b = 0; b < NB; b++) {
      double ratio = meas[c][b] / expct[c][b], tol = 4 * sqrt(2 / modes[c][b]);
      ck_assert_msg(fabs(ratio - 1) <= tol, "z = %g, bin %d (|k| = %d kf, %.0f modes): measured / requested P = %.4f, "
                    "tolerance %.4f", o.z[c], b + 1, b + 1, modes[c][b], ratio, tol);
    }
  /* sigma is the rms at z = 0: the mean of the sample variances is sigma^2 within 15% (cosmic variance
   * of the few largest modes) */
  var /= SAMPLES;
  ck_assert_msg(fabs(var / 0.64 - 1) < 0.15, "mean variance at z = 0 is %.4f, sigma^2 = 0.64", var);
  free(x);
}
END_TEST

/* D(a) from D'' + (3 / a + E' / E) D' = 3/2 omega_m D / (a^5 E^2) by RK4 from a = 1e-3 (D = a there:
 * matter domination), as a float64 reference for the generator's integral. */
static void deriv(double om, double a, const double *u, double *du) {
  double e2 = om / (a * a * a) + 1 - om, de_e = -1.5 * om / (a * a * a * a) / e2; /* E'/E */
  du[0] = u[1];
  du[1] = -(3 / a + de_e) * u[1] + 1.5 * om * u[0] / (a * a * a * a * a * e2);
}

static double growth_ode(double om, double a_end) {
  enum { STEPS = 200000 };
  double a = 1e-3, u[2] = {a, 1}, h = (a_end - a) / STEPS;
  for (int i = 0; i < STEPS; i++) {
    double k1[2], k2[2], k3[2], k4[2], t[2];
    deriv(om, a, u, k1);
    for (int j = 0; j < 2; j++) t[j] = u[j] + h / 2 * k1[j];
    deriv(om, a + h / 2, t, k2);
    for (int j = 0; j < 2; j++) t[j] = u[j] + h / 2 * k2[j];
    deriv(om, a + h / 2, t, k3);
    for (int j = 0; j < 2; j++) t[j] = u[j] + h * k3[j];
    deriv(om, a + h, t, k4);
    for (int j = 0; j < 2; j++) u[j] += h / 6 * (k1[j] + 2 * k2[j] + 2 * k3[j] + k4[j]);
    a += h;
  }
  return u[0];
}

START_TEST(growth_factor_matches_ode_integration) {
  const double oms[] = {0.2, 0.3, 0.4, 1.0}, zs[] = {0.5, 1, 2, 3};
  for (int i = 0; i < 4; i++) {
    double d1 = growth_ode(oms[i], 1);
    ck_assert(fabs(tsr_cosmo_growth(oms[i], 0) - 1) < 1e-12);
    for (int j = 0; j < 4; j++) {
      double ref = growth_ode(oms[i], 1 / (1 + zs[j])) / d1, got = tsr_cosmo_growth(oms[i], zs[j]);
      ck_assert_msg(fabs(got / ref - 1) < 1e-5, "omega_m %g, z %g: D = %.8f, ODE %.8f", oms[i], zs[j], got, ref);
    }
  }
  /* Einstein-de Sitter: D = a */
  ck_assert(fabs(tsr_cosmo_growth(1.0, 3) - 0.25) < 1e-9);
}
END_TEST

/* Lognormal channels: (log(1 + x_c) + D_c^2 sigma^2 / 2) / D_c is the same field delta for every c;
 * targets t give back the parameters through p = lo + (t + 1) (hi - lo) / 2. */
START_TEST(channels_follow_growth_and_targets_encode_parameters) {
  tsr_cosmo_opts o;
  tsr_cosmo_opts_default(&o);
  o.size = 16;
  size_t n3 = 16 * 16 * 16;
  float *x = malloc(sizeof(float) * o.nz * n3), y[TSR_COSMO_PARAMS];
  double p[TSR_COSMO_PARAMS];
  for (int s = 0; s < 4; s++) {
    ck_assert_int_eq(tsr_cosmo_sample(&o, s, x, y, p), TSR_OK);
    for (int i = 0; i < TSR_COSMO_PARAMS; i++) {
      ck_assert(p[i] >= o.lo[i] && p[i] <= o.hi[i]);
      double back = o.lo[i] + (y[i] + 1.0) * (o.hi[i] - o.lo[i]) / 2;
      ck_assert_msg(fabs(back - p[i]) < 1e-6 * (o.hi[i] - o.lo[i]), "%s: %g from the target, %g drawn",
                    tsr_cosmo_param_name(i), back, p[i]);
    }
    double sg = p[TSR_COSMO_SIGMA], g0 = tsr_cosmo_growth(p[0], o.z[o.nz - 1]);
    for (int c = 0; c < o.nz - 1; c++) {
      double g = tsr_cosmo_growth(p[0], o.z[c]);
      for (size_t i = 0; i < n3; i += 7) {
        double d = (log1p((double)x[c * n3 + i]) + g * g * sg * sg / 2) / g;
        double d0 = (log1p((double)x[(o.nz - 1) * n3 + i]) + g0 * g0 * sg * sg / 2) / g0;
        ck_assert_msg(fabs(d - d0) < 1e-4 * (1 + fabs(d0)), "sample %d channel %d element %zu: delta %g, at z = 0 %g",
                      s, c, i, d, d0);
      }
    }
  }
  free(x);
}
END_TEST

/* The same sample with contrast 0 and 1.5 differs by +1.5 sigma on halo voxels, -1.5 sigma on void
 * voxels, 0 on the background; labels are one-hot and both kinds of sphere occur. */
START_TEST(segmentation_labels_mark_the_spheres) {
  tsr_cosmo_opts o;
  tsr_cosmo_opts_default(&o);
  o.task = TSR_COSMO_SEGMENTATION, o.size = 24, o.blobs_min = 6, o.blobs_max = 6;
  size_t n3 = 24 * 24 * 24;
  float *x0 = malloc(sizeof(float) * n3), *x1 = malloc(sizeof(float) * n3);
  float *y0 = malloc(sizeof(float) * 3 * n3), *y1 = malloc(sizeof(float) * 3 * n3);
  double p[TSR_COSMO_PARAMS];
  size_t count[3] = {0};
  for (int s = 0; s < 3; s++) {
    o.contrast = 0;
    ck_assert_int_eq(tsr_cosmo_sample(&o, s, x0, y0, p), TSR_OK);
    o.contrast = 1.5;
    ck_assert_int_eq(tsr_cosmo_sample(&o, s, x1, y1, p), TSR_OK);
    ck_assert(memcmp(y0, y1, sizeof(float) * 3 * n3) == 0);
    for (size_t i = 0; i < n3; i++) {
      int cls = -1;
      for (int c = 0; c < 3; c++) {
        ck_assert(y1[c * n3 + i] == 0.0f || y1[c * n3 + i] == 1.0f);
        if (y1[c * n3 + i] == 1.0f) {
          ck_assert_int_eq(cls, -1);
          cls = c;
        }
      }
      ck_assert_int_ge(cls, 0);
      count[cls]++;
      double want = cls == 0 ? 0 : cls == 1 ? 1.5 * p[TSR_COSMO_SIGMA] : -1.5 * p[TSR_COSMO_SIGMA];
      ck_assert_msg(fabs((x1[i] - x0[i]) - want) < 1e-5, "sample %d voxel %zu class %d: shift %g, want %g", s, i, cls,
                    x1[i] - x0[i], want);
    }
  }
  ck_assert_msg(count[1] > 0 && count[2] > 0 && count[0] > count[1], "classes %zu %zu %zu", count[0], count[1], count[2]);
  free(x0), free(x1), free(y0), free(y1);
}
END_TEST

/* Samples are functions of (seed, index): the file (any first index, 1 or 2 threads) holds
 * tsr_cosmo_sample's values, read back through the loader as [C, D, H, W]. */
START_TEST(samples_depend_on_seed_and_index_only) {
  tsr_cosmo_opts o;
  tsr_cosmo_opts_default(&o);
  o.size = 8, o.first = 5;
  size_t xe = 4 * 8 * 8 * 8;
  float *a = malloc(sizeof(float) * xe), *b = malloc(sizeof(float) * xe), ya[4], yb[4];
  ck_assert_int_eq(tsr_cosmo_sample(&o, 6, a, ya, NULL), TSR_OK);
  ck_assert_int_eq(tsr_cosmo_sample(&o, 6, b, yb, NULL), TSR_OK);
  ck_assert(!memcmp(a, b, sizeof(float) * xe) && !memcmp(ya, yb, sizeof ya));
  ck_assert_int_eq(tsr_cosmo_sample(&o, 7, b, yb, NULL), TSR_OK);
  ck_assert_msg(memcmp(a, b, sizeof(float) * xe) != 0, "indices 6 and 7 give the same sample");
  o.seed = 2;
  ck_assert_int_eq(tsr_cosmo_sample(&o, 6, b, yb, NULL), TSR_OK);
  ck_assert_msg(memcmp(a, b, sizeof(float) * xe) != 0, "seeds 1 and 2 give the same sample");
  o.seed = 1;
  const char *dir = tt_tmpdir();
  for (int workers = 1; workers <= 2; workers++) {
    o.workers = workers;
    char *path = tt_path_in(dir, workers == 1 ? "w1.h5" : "w2.h5");
    ck_assert_msg(tsr_cosmo_write(&o, 3, path, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
    tsr_loader_opts lo;
    tsr_loader_opts_default(&lo);
    lo.standardize = 0;
    tsr_loader *l;
    ck_assert_msg(tsr_loader_open(&l, path, &lo) == TSR_OK, "%s", tsr_last_error());
    tsr_shape xs, ys;
    tsr_loader_input_dims(l, &xs);
    tsr_loader_target_dims(l, &ys);
    ck_assert(xs.ndim == 4 && xs.dims[0] == 4 && xs.dims[1] == 8 && xs.dims[3] == 8);
    ck_assert(ys.ndim == 3 && ys.dims[0] == 4 && ys.dims[1] == 1 && ys.dims[2] == 1);
    ck_assert_int_eq(tsr_loader_size(l), 3);
    ck_assert_int_eq(tsr_loader_read(l, 1, b, yb), TSR_OK); /* row 1 = index first + 1 = 6 */
    ck_assert_msg(!memcmp(a, b, sizeof(float) * xe) && !memcmp(ya, yb, sizeof ya),
                  "%d workers: row 1 of the file differs from sample 6", workers);
    tsr_loader_close(l);
  }
  free(a), free(b);
}
END_TEST

static void expect_refused(const tsr_cosmo_opts *o, const char *a, const char *b) {
  ck_assert_int_eq(tsr_cosmo_opts_check(o), TSR_ERR_ARG);
  const char *e = tsr_last_error();
  ck_assert_msg(strstr(e, a) && (!b || strstr(e, b)), "message '%s' lacks '%s' or '%s'", e, a, b ? b : "");
  float x[1], y[1];
  ck_assert_int_eq(tsr_cosmo_sample(o, 0, x, y, NULL), TSR_ERR_ARG); /* refused before writing anything */
}

START_TEST(bad_options_are_refused_naming_the_value) {
  tsr_cosmo_opts d, o;
  tsr_cosmo_opts_default(&d);
  ck_assert_int_eq(tsr_cosmo_opts_check(&d), TSR_OK);
  o = d, o.size = 3;
  expect_refused(&o, "size 3", NULL);
  o = d, o.lo[TSR_COSMO_K_C] = 0.5, o.hi[TSR_COSMO_K_C] = 0.2;
  expect_refused(&o, "k_c range 0.5:0.2", "low end");
  o = d, o.lo[TSR_COSMO_OMEGA_M] = 0.2, o.hi[TSR_COSMO_OMEGA_M] = 1.5;
  expect_refused(&o, "omega_m range 0.2:1.5", NULL);
  o = d, o.lo[TSR_COSMO_SIGMA] = NAN;
  expect_refused(&o, "sigma range nan", NULL);
  o = d, o.z[2] = -1;
  expect_refused(&o, "redshift -1", "channel 2");
  o = d, o.nz = 0;
  expect_refused(&o, "0 redshifts", NULL);
  o = d, o.chunk = 40;
  expect_refused(&o, "chunk 40", NULL);
  o = d, o.task = TSR_COSMO_SEGMENTATION, o.radius_max = 20;
  expect_refused(&o, "radius 3:20", NULL);
  o = d, o.task = TSR_COSMO_SEGMENTATION, o.blobs_min = 5, o.blobs_max = 2;
  expect_refused(&o, "blobs 5:2", NULL);
  o = d, o.cell = 0;
  expect_refused(&o, "cell 0", NULL);
  ck_assert_int_eq(tsr_cosmo_write(&d, 0, tt_path_in(tt_tmpdir(), "none.h5"), NULL, NULL), TSR_ERR_ARG);
  ck_assert(strstr(tsr_last_error(), "0 samples"));
}
END_TEST

static Suite *make_cosmo_suite(void) {
  Suite *s = suite_create("cosmo");
  TCase *t = tcase_create("generator");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, generated_fields_have_the_requested_power_spectrum);
  tcase_add_test(t, growth_factor_matches_ode_integration);
  tcase_add_test(t, channels_follow_growth_and_targets_encode_parameters);
  tcase_add_test(t, segmentation_labels_mark_the_spheres);
  tcase_add_test(t, samples_depend_on_seed_and_index_only);
  tcase_add_test(t, bad_options_are_refused_naming_the_value);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_cosmo_suite)

/* Suite "cbed": the multislice simulator's physics against float64 references (relativistic
 * wavelength and sigma, intensity conserved through propagation, the central disc radius
 * alpha / (lambda dk), Friedel symmetry of a thin centrosymmetric crystal), crystal builders,
 * determinism, and the StarPU + HDF5 writer (float32 and float16) read back through the loader. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera/cbed.h>
#include <tessera/loader.h>

#include "sim/cbed/cbed.h"
#include "testutil.h"

/* Kirkland, Advanced Computing in Electron Microscopy, table 5.1: 0.03701, 0.02508, 0.01969 A. */
START_TEST(wavelength_matches_table_to_four_digits) {
  const double kv[] = {100, 200, 300}, ref[] = {0.03701, 0.02508, 0.01969};
  for (int i = 0; i < 3; i++) {
    double l = tsr_cbed_wavelength(kv[i]);
    ck_assert_msg(fabs(l - ref[i]) <= 0.5e-5, "%g kV: lambda %.6f A, table %.5f A", kv[i], l, ref[i]);
  }
  /* sigma(200 kV) = 7.288e-4 rad/(V A) (same table) */
  ck_assert_msg(fabs(tsr_cbed_sigma(200) - 7.288e-4) < 0.5e-7, "sigma %.6g", tsr_cbed_sigma(200));
}
END_TEST

/* f_e(0) = sum a_i / b_i + sum c_i: the float64 sum of the tabulated Si parameters is 5.814284 A. */
START_TEST(scattering_factors_are_positive_and_decreasing) {
  const int zs[] = {8, 14, 22, 29, 38};
  for (int k = 0; k < 5; k++) {
    double prev = _tsr_cbed_fe(zs[k], 0);
    ck_assert_msg(prev > 0, "Z=%d f(0)=%g", zs[k], prev);
    for (double q = 0.1; q < 4; q += 0.1) {
      double f = _tsr_cbed_fe(zs[k], q);
      ck_assert_msg(f > 0 && f < prev, "Z=%d: f(%g)=%g after %g", zs[k], q, f, prev);
      prev = f;
    }
  }
  ck_assert_msg(fabs(_tsr_cbed_fe(14, 0) - 5.814284) < 1e-6, "Si f(0) = %.5f", _tsr_cbed_fe(14, 0));
  ck_assert(_tsr_cbed_fe(92, 0.5) < 0); /* not in the table */
}
END_TEST

static double atom_count(tsr_cbed_structure s, int zone) {
  struct cbed_atoms a;
  ck_assert_int_eq(_tsr_cbed_build_crystal(&a, s, zone, 1, 0, 0), 0);
  double n = a.n / (a.lx * a.ly * a.lz);
  _tsr_cbed_atoms_free(&a);
  return n;
}

/* Atoms per A^3 is the same along every zone axis: 8 / a^3 (Si), 5 / a^3 (SrTiO3), 4 / a^3 (Cu). */
START_TEST(crystal_density_is_independent_of_zone) {
  const double want[] = {8 / pow(5.431, 3), 5 / pow(3.905, 3), 4 / pow(3.615, 3)};
  for (int s = 0; s < 3; s++)
    for (int z = 1; z <= 4; z *= 2) {
      double d = atom_count((tsr_cbed_structure)s, z);
      ck_assert_msg(fabs(d - want[s]) < 1e-9, "%s zone %d: %.6f atoms/A^3, expected %.6f",
                    tsr_cbed_structure_name((tsr_cbed_structure)s), z, d, want[s]);
    }
}
END_TEST

static void vacuum(struct cbed_work *w, double side) {
  struct cbed_atoms a = {.lx = side, .ly = side, .lz = 2};
  ck_assert_int_eq(_tsr_cbed_work_init(w, 64), 0);
  ck_assert_int_eq(_tsr_cbed_prepare(w, &a, 200, 2), 0);
}

static double total(const double *i, int n) {
  double s = 0;
  for (int k = 0; k < n * n; k++) s += i[k];
  return s;
}

START_TEST(propagation_conserves_intensity) {
  struct cbed_atoms a;
  ck_assert_int_eq(_tsr_cbed_build_crystal(&a, TSR_CBED_SRTIO3, 2, 20, 0.3, 0.1), 0);
  struct cbed_work w;
  ck_assert_int_eq(_tsr_cbed_work_init(&w, 64), 0);
  ck_assert_int_eq(_tsr_cbed_prepare(&w, &a, 200, 2), 0);
  double *in = malloc(sizeof(double) * 64 * 64);
  _tsr_cbed_probe(&w, &(struct cbed_optics){.alpha_mrad = 10, .defocus = 50, .cs_mm = 1.2}, 7.0, 9.0);
  double e0 = 0;
  for (int k = 0; k < 64 * 64; k++) e0 += w.psi[k][0] * w.psi[k][0] + w.psi[k][1] * w.psi[k][1];
  ck_assert_msg(fabs(e0 - 1) < 1e-12, "probe intensity %.15f", e0);
  _tsr_cbed_propagate(&w, 10 * w.nslices); /* ~55 A */
  _tsr_cbed_intensity(&w, in);
  double t = total(in, 64);
  ck_assert_msg(fabs(t - 1) < 0.05, "total intensity after 10 periods: %.4f (expected 1 within 5%%)", t);
  ck_assert_msg(t <= 1 + 1e-9, "intensity grew: %.12f", t);
  free(in);
  _tsr_cbed_work_free(&w);
  _tsr_cbed_atoms_free(&a);
}
END_TEST

/* In vacuum the pattern is the aperture: a disc of radius alpha / lambda in 1/A, i.e.
 * alpha / (lambda dk) pixels with dk = 1 / L. Its area in pixels gives the radius. */
START_TEST(central_disc_radius_is_alpha_over_lambda_dk) {
  const double alphas[] = {8, 12, 16}, side = 25;
  struct cbed_work w;
  vacuum(&w, side);
  double *in = malloc(sizeof(double) * 64 * 64);
  for (int k = 0; k < 3; k++) {
    _tsr_cbed_probe(&w, &(struct cbed_optics){.alpha_mrad = alphas[k]}, 12.5, 12.5);
    _tsr_cbed_propagate(&w, w.nslices);
    _tsr_cbed_intensity(&w, in);
    double mx = 0;
    for (int p = 0; p < 64 * 64; p++) mx = fmax(mx, in[p]);
    int lit = 0;
    for (int p = 0; p < 64 * 64; p++) lit += in[p] > 0.5 * mx;
    double r = sqrt(lit / M_PI), want = alphas[k] * 1e-3 / (tsr_cbed_wavelength(200) * (1 / side));
    ck_assert_msg(fabs(r - want) < 0.6, "alpha %g mrad: disc radius %.2f px, expected %.2f", alphas[k], r, want);
    /* and its centre is the zero frequency, at (32, 32) after the shift */
    ck_assert_msg(in[32 * 64 + 32] > 0.5 * mx, "zero frequency is not lit");
  }
  free(in);
  _tsr_cbed_work_free(&w);
}
END_TEST

/* SrTiO3 [001], one cell thick, probe on a Sr column (an inversion centre of every slice's projected
 * potential): I(k) = I(-k). A probe off the centre breaks the symmetry (the test can tell). */
START_TEST(thin_centrosymmetric_crystal_gives_friedel_pattern) {
  struct cbed_atoms a;
  ck_assert_int_eq(_tsr_cbed_build_crystal(&a, TSR_CBED_SRTIO3, 1, 20, 0, 0), 0);
  struct cbed_work w;
  ck_assert_int_eq(_tsr_cbed_work_init(&w, 64), 0);
  ck_assert_int_eq(_tsr_cbed_prepare(&w, &a, 200, 2), 0);
  double *in = malloc(sizeof(double) * 64 * 64);
  double worst[2];
  const double pos[2][2] = {{0, 0}, {1.3, 0.7}};
  for (int c = 0; c < 2; c++) {
    _tsr_cbed_probe(&w, &(struct cbed_optics){.alpha_mrad = 15}, pos[c][0], pos[c][1]);
    _tsr_cbed_propagate(&w, w.nslices);
    _tsr_cbed_intensity(&w, in);
    double mx = 0, d = 0;
    for (int p = 0; p < 64 * 64; p++) mx = fmax(mx, in[p]);
    for (int j = 1; j < 64; j++)
      for (int i = 1; i < 64; i++) d = fmax(d, fabs(in[j * 64 + i] - in[(64 - j) * 64 + (64 - i)]));
    worst[c] = d / mx;
  }
  ck_assert_msg(worst[0] < 1e-9, "centrosymmetric: max |I(k) - I(-k)| / max I = %.3g", worst[0]);
  ck_assert_msg(worst[1] > 1e-3, "off-centre probe unexpectedly symmetric (%.3g)", worst[1]);
  free(in);
  _tsr_cbed_work_free(&w);
  _tsr_cbed_atoms_free(&a);
}
END_TEST

static tsr_cbed_opts small(void) {
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  o.grid = 32, o.pattern = 24, o.target = 16, o.probes = 2, o.fov = 10, o.thickness_min = 8, o.thickness_max = 16;
  o.structures = 0xF, o.zones = 7, o.seed = 99;
  return o;
}

START_TEST(samples_are_deterministic_and_standardised) {
  tsr_cbed_opts o = small();
  size_t xe = 4 * 24 * 24, ve = 16 * 16;
  float *x1 = malloc(4 * xe), *x2 = malloc(4 * xe), v1[256], v2[256];
  for (int64_t idx = 0; idx < 6; idx++) {
    ck_assert_msg(tsr_cbed_sample(&o, idx, x1, v1) == TSR_OK, "%s", tsr_last_error());
    ck_assert_int_eq(tsr_cbed_sample(&o, idx, x2, v2), TSR_OK);
    ck_assert(memcmp(x1, x2, 4 * xe) == 0 && memcmp(v1, v2, sizeof v1) == 0);
    double m = 0, s = 0;
    for (size_t k = 0; k < ve; k++) m += v1[k] / (double)ve;
    for (size_t k = 0; k < ve; k++) s += (v1[k] - m) * (v1[k] - m) / ve;
    ck_assert_msg(fabs(m) < 1e-5 && fabs(s - 1) < 1e-4, "sample %lld: target mean %g var %g", (long long)idx, m, s);
    for (size_t k = 0; k < xe; k++) ck_assert(isfinite(x1[k]) && x1[k] >= 0);
  }
  o.seed = 100;
  ck_assert_int_eq(tsr_cbed_sample(&o, 5, x2, v2), TSR_OK);
  ck_assert_msg(memcmp(x1, x2, 4 * xe) != 0, "seed 100 gives seed 99's sample");
  o.grid = 31;
  ck_assert_int_eq(tsr_cbed_sample(&o, 0, x1, v1), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "grid 31"), "%s", tsr_last_error());
  free(x1), free(x2);
}
END_TEST

/* The writer (StarPU tasks, two workers) stores exactly what tsr_cbed_sample computes; float16 within
 * half precision (relative 2^-11, plus the smallest normal). */
START_TEST(writer_round_trip_float32_and_float16) {
  tt_starpu_home();
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 2, co.use_mpi = 0, co.verbose = 0;
  tsr_context *ctx;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_cbed_opts o = small();
  const int n = 11, first = 5;
  size_t xe = 4 * 24 * 24, ve = 256;
  float *x = malloc(4 * xe), *xr = malloc(4 * xe), v[256], vr[256];
  for (int half = 0; half < 2; half++) {
    char *p;
    ck_assert(asprintf(&p, "%s/cbed%d.h5", tt_tmpdir(), half) > 0);
    ck_assert_msg(tsr_cbed_write(ctx, &o, first, n, half, p, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
    tsr_loader_opts lo;
    tsr_loader_opts_default(&lo);
    lo.standardize = 0;
    tsr_loader *l;
    ck_assert_msg(tsr_loader_open(&l, p, &lo) == TSR_OK, "%s", tsr_last_error());
    ck_assert_int_eq(tsr_loader_size(l), n);
    int c, h, w;
    tsr_loader_input_shape(l, &c, &h, &w);
    ck_assert(c == 4 && h == 24 && w == 24);
    for (int i = 0; i < n; i += 3) {
      ck_assert_int_eq(tsr_cbed_sample(&o, first + i, x, v), TSR_OK);
      ck_assert_msg(tsr_loader_read(l, i, xr, vr) == TSR_OK, "%s", tsr_last_error());
      double tol = half ? 1.0 / 2048 : 0;
      for (size_t k = 0; k < xe; k++)
        ck_assert_msg(fabs(xr[k] - x[k]) <= tol * fabs(x[k]) + (half ? 6.2e-5 : 0), "half %d sample %d elt %zu: %g vs %g",
                      half, i, k, xr[k], x[k]);
      for (size_t k = 0; k < ve; k++) ck_assert(fabs(vr[k] - v[k]) <= tol * fabs(v[k]) + (half ? 6.2e-5 : 0));
    }
    tsr_loader_close(l);
    free(p);
  }
  free(x), free(xr);
  tsr_context_destroy(ctx);
}
END_TEST

static Suite *make_cbed_suite(void) {
  Suite *s = suite_create("cbed");
  TCase *p = tcase_create("physics");
  tcase_add_test(p, wavelength_matches_table_to_four_digits);
  tcase_add_test(p, scattering_factors_are_positive_and_decreasing);
  tcase_add_test(p, crystal_density_is_independent_of_zone);
  tcase_add_test(p, propagation_conserves_intensity);
  tcase_add_test(p, central_disc_radius_is_alpha_over_lambda_dk);
  tcase_add_test(p, thin_centrosymmetric_crystal_gives_friedel_pattern);
  suite_add_tcase(s, p);
  TCase *d = tcase_create("data");
  tcase_add_test(d, samples_are_deterministic_and_standardised);
  tcase_add_test(d, writer_round_trip_float32_and_float16);
  suite_add_tcase(s, d);
  return s;
}

TT_MAIN(make_cbed_suite)

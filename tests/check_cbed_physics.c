/* Suite "cbed_physics": the simulator's sampling, optics, phonons, dose and detector against
 * references: the grid chosen for an angle (band limit reached, smallest fast size), a pattern at the
 * chosen sampling against a refined grid and slice (relative error below a stated bound, which an
 * under-sampled grid exceeds), the probe's phase equal to -chi(k) from Krivanek's polar formula, the
 * frozen-phonon mean potential equal to the Debye-Waller-damped one within its statistical error,
 * Poisson counts (mean, variance and probabilities), the detector's integration and point spread,
 * partial coherence, the target over a scan window, and the per-sample record of tsr_cbed_write. */
#define _GNU_SOURCE
/* cbed.h (fftw3.h) before complex.h: fftw_complex stays double[2] */
#include "sim/cbed/cbed.h"
#include "cbed_build.h"

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>
#include <tessera/cbed.h>

#include "runtime/rng.h"
#include "testutil.h"

static double uniform(void *r) { return _tsr_rng_uniform(r); }

START_TEST(grid_and_slice_follow_angle_and_wavelength) {
  const double kv[] = {100, 200, 300}, theta[] = {50, 100, 150}, cells[][2] = {{7.8, 7.8}, {20, 11}, {16.3, 23.0}};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++) {
      double l = tsr_cbed_wavelength(kv[a]), lx = cells[b][0], ly = cells[b][1], kmax = theta[a] * 1e-3 / l;
      int n = _tsr_cbed_grid_for(lx, ly, l, theta[a], 8);
      double band = n / (3 * fmax(lx, ly)); /* 2/3 of the Nyquist frequency n / 2L */
      ck_assert_msg(band >= kmax * (1 - 1e-12), "%g kV %g mrad: grid %d reaches %g 1/A < %g", kv[a], theta[a], n, band, kmax);
      int m = n;
      for (int f = 2; f <= 7; f++)
        while (m % f == 0) m /= f;
      ck_assert_msg(m == 1 && n % 2 == 0, "grid %d is not an even product of 2, 3, 5, 7", n);
      /* no smaller fast size would do */
      for (int k = n - 2; k >= 8; k -= 2) {
        int r = k;
        for (int f = 2; f <= 7; f++)
          while (r % f == 0) r /= f;
        ck_assert_msg(r != 1 || k / (3 * fmax(lx, ly)) < kmax, "grid %d would have done (chose %d)", k, n);
      }
      double dz = _tsr_cbed_slice_for(l, theta[a]);
      ck_assert_msg(dz <= 2 && M_PI * l * dz * kmax * kmax <= M_PI * (1 + 1e-12), "slice %g A at %g kV %g mrad", dz, kv[a],
                    theta[a]);
    }
  ck_assert_int_eq(_tsr_cbed_grid_for(20, 20, tsr_cbed_wavelength(200), 100, 8), 240);
  ck_assert_int_eq(_tsr_cbed_grid_for(5, 5, tsr_cbed_wavelength(200), 10, 64), 64); /* at least min_n */
}
END_TEST

/* One pattern of SrTiO3 [001] (probe on a Sr column, 31 A thick) as fractions of the beam. */
static double *pattern(double max_angle, double slice, int *side) {
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  o.structures = 1u << TSR_CBED_SRTIO3, o.zones = 1, o.shift = 0, o.fov = 8, o.thickness_min = o.thickness_max = 31;
  o.probes = 1, o.pattern = 24, o.target = 8, o.intensity = TSR_CBED_LINEAR, o.max_angle_mrad = max_angle;
  o.slice = slice;
  float *x = malloc(sizeof(float) * 24 * 24), v[64];
  ck_assert_msg(tsr_cbed_sample(&o, 0, x, v) == TSR_OK, "%s", tsr_last_error());
  double *d = malloc(sizeof(double) * 24 * 24);
  for (int k = 0; k < 24 * 24; k++) d[k] = x[k];
  free(x);
  *side = 24;
  return d;
}

static double rel_error(const double *a, const double *ref, int m) {
  double e = 0, r = 0;
  for (int k = 0; k < m; k++) e += (a[k] - ref[k]) * (a[k] - ref[k]), r += ref[k] * ref[k];
  return sqrt(e / r);
}

/* The default sampling (band limit 150 mrad, slice from it) against a grid of twice the band limit
 * and quarter-A slices: the patterns (the same cell, so the same pixels, +-38 mrad) agree within
 * CONVERGED (measured 0.032); a 25 mrad band limit (the old example's) does not. */
#define CONVERGED 0.05
START_TEST(default_sampling_converges_against_refined_grid) {
  int p;
  tsr_cbed_opts d;
  tsr_cbed_opts_default(&d);
  double *ref = pattern(2 * d.max_angle_mrad, 0.25, &p), *def = pattern(d.max_angle_mrad, 0, &p),
         *coarse = pattern(25, 0, &p);
  double e = rel_error(def, ref, p * p), ec = rel_error(coarse, ref, p * p);
  printf("cbed_physics: SrTiO3 [001] 31 A: error %.4f at %g mrad, %.4f at 25 mrad (against %g mrad, 0.25 A)\n", e,
         d.max_angle_mrad, ec, 2 * d.max_angle_mrad);
  fflush(stdout);
  ck_assert_msg(e < CONVERGED, "default sampling: relative error %.4f against the refined grid (bound %g)", e, CONVERGED);
  ck_assert_msg(ec > 3 * CONVERGED, "a 25 mrad band limit is as good as converged (%.4f): the test cannot tell", ec);
  free(ref), free(def), free(coarse);
}
END_TEST

/* Krivanek: chi = 2 pi / lambda [theta^2 (C1 + A1 cos 2(phi - phi_A1)) / 2 + theta^3 B2 cos(phi - phi_B2) / 3
 * + theta^4 C3 / 4], C1 = -defocus; the probe's Fourier transform is exp(-i chi) in the aperture. */
static double chi_polar(double l, double kx, double ky, double df, double cs_mm, double a1, double pa, double b2,
                        double pb) {
  double t = l * sqrt(kx * kx + ky * ky), phi = atan2(ky, kx), c3 = cs_mm * 1e7;
  return 2 * M_PI / l *
         (t * t * (-df + a1 * cos(2 * (phi - pa))) / 2 + t * t * t * b2 * cos(phi - pb) / 3 + t * t * t * t * c3 / 4);
}

START_TEST(probe_phase_is_minus_chi) {
  struct cbed_work w;
  struct cbed_atoms a = {.lx = 25, .ly = 25, .lz = 2};
  ck_assert_int_eq(_tsr_cbed_work_init(&w, 64), 0);
  ck_assert_int_eq(_tsr_cbed_prepare(&w, &a, 200, 2), 0);
  const struct cbed_optics ops[] = {{.alpha_mrad = 20, .defocus = 120},
                                    {.alpha_mrad = 20, .cs_mm = 1.5},
                                    {.alpha_mrad = 20, .a1 = 60, .a1_angle = 0.4},
                                    {.alpha_mrad = 20, .b2 = 900, .b2_angle = 2.2},
                                    {.alpha_mrad = 20, .defocus = -80, .cs_mm = 0.7, .a1 = 25, .a1_angle = 1.3,
                                     .b2 = 400, .b2_angle = -0.5}};
  for (size_t c = 0; c < sizeof ops / sizeof ops[0]; c++) {
    const struct cbed_optics *op = &ops[c];
    _tsr_cbed_probe(&w, op, 0, 0);
    fftw_execute(w.fwd); /* psi -> tmp: the aperture times exp(-i chi), up to one real scale */
    double worst = 0, amp = -1, worst_amp = 0;
    int inside = 0;
    for (int j = 0; j < 64; j++)
      for (int i = 0; i < 64; i++) {
        double complex t = w.tmp[j * 64 + i][0] + I * w.tmp[j * 64 + i][1];
        double kx = (i < 32 ? i : i - 64) / 25.0, ky = (j < 32 ? j : j - 64) / 25.0;
        if (cabs(t) < 1e-6) continue;
        inside++;
        double want = -chi_polar(w.lambda, kx, ky, op->defocus, op->cs_mm, op->a1, op->a1_angle, op->b2, op->b2_angle);
        worst = fmax(worst, cabs(t / cabs(t) - cexp(I * want)));
        if (amp < 0) amp = cabs(t);
        worst_amp = fmax(worst_amp, fabs(cabs(t) - amp) / amp);
      }
    ck_assert_msg(inside > 300, "optics %zu: only %d frequencies in the aperture", c, inside);
    ck_assert_msg(worst < 1e-9, "optics %zu: |exp(i arg) - exp(-i chi)| up to %.3g", c, worst);
    ck_assert_msg(worst_amp < 1e-9, "optics %zu: aperture amplitude varies by %.3g", c, worst_amp);
  }
  _tsr_cbed_work_free(&w);
}
END_TEST

/* Cu [001], 2 x 2 cells: the mean of the projected potential over N displaced configurations against
 * the static one times exp(-2 pi^2 u^2 k^2), at every frequency within 6 standard errors
 * f(k) sqrt(atoms (1 - DW^2) / N) (f: one atom's coefficient). Twice u^2 is over 10 errors off. */
START_TEST(frozen_phonon_mean_is_debye_waller_damped) {
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  ck_assert_int_eq(tsr_cbed_u2_parse("Cu:0.02", &o), TSR_OK);
  struct cbed_atoms a, d;
  ck_assert_int_eq(build_crystal(&a, TSR_CBED_CU, 1, 7, 0, 0), 0);
  const int n = 32, N = 400;
  const size_t nn = n * n;
  struct cbed_work w;
  ck_assert_int_eq(_tsr_cbed_work_init(&w, n), 0);
  ck_assert_int_eq(_tsr_cbed_prepare(&w, &a, 200, 2), 0);
  double complex *v0 = malloc(sizeof *v0 * nn), *mean = calloc(nn, sizeof *mean);
  double *f = malloc(sizeof(double) * nn);
  for (size_t p = 0; p < nn; p++) v0[p] = w.vq[p][0] + I * w.vq[p][1], f[p] = w.fe[p];
  struct _tsr_rng r = _tsr_rng_stream(5, 77);
  for (int c = 0; c < N; c++) {
    ck_assert_int_eq(_tsr_cbed_displaced(&d, &a, 1, &o, uniform, &r), 0);
    ck_assert_int_eq(_tsr_cbed_prepare(&w, &d, 200, 2), 0);
    _tsr_cbed_atoms_free(&d);
    for (size_t p = 0; p < nn; p++) mean[p] += (w.vq[p][0] + I * w.vq[p][1]) / N;
  }
  double worst = 0, worst_double = 1e30;
  int damped = 0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++) {
      size_t p = (size_t)j * n + i;
      if (f[p] == 0) continue;
      double kx = (i < n / 2 ? i : i - n) / a.lx, ky = (j < n / 2 ? j : j - n) / a.ly, k2 = kx * kx + ky * ky;
      double dw = exp(-2 * M_PI * M_PI * 0.02 * k2), se = f[p] * (sqrt(a.n * (1 - dw * dw) / N) + 1e-9 * a.n);
      worst = fmax(worst, cabs(mean[p] - dw * v0[p]) / se);
      if (cabs(v0[p]) > 0.5 * a.n * f[p] && dw < 0.9) { /* a Bragg beam that is damped */
        damped++;
        worst_double = fmin(worst_double, cabs(mean[p] - dw * dw * v0[p]) / se);
      }
    }
  ck_assert_msg(damped >= 4, "only %d damped Bragg beams in band", damped);
  ck_assert_msg(worst < 6, "mean potential is %.2f standard errors from the Debye-Waller-damped one", worst);
  ck_assert_msg(worst_double > 10, "twice u^2 is only %.2f standard errors off: the test cannot tell", worst_double);
  free(v0), free(mean), free(f);
  _tsr_cbed_atoms_free(&a);
  _tsr_cbed_work_free(&w);
}
END_TEST

/* Poisson draws: mean within 5 standard errors, variance within 5 of its standard errors
 * sqrt((lambda + 2 lambda^2) / M), and P(k) near the mode within 5 binomial errors. */
START_TEST(dose_counts_are_poisson) {
  const double means[] = {0.3, 3, 9.99, 10, 47.5, 1000};
  const int M = 40000;
  struct _tsr_rng r = _tsr_rng_stream(3, 11);
  int *k = malloc(sizeof(int) * M);
  for (int c = 0; c < 6; c++) {
    double lam = means[c], s = 0, s2 = 0;
    for (int i = 0; i < M; i++) {
      double x = _tsr_cbed_poisson(lam, uniform, &r);
      ck_assert(x >= 0 && x == floor(x));
      k[i] = (int)x, s += x;
    }
    double m = s / M;
    for (int i = 0; i < M; i++) s2 += (k[i] - m) * (k[i] - m) / (M - 1);
    ck_assert_msg(fabs(m - lam) < 5 * sqrt(lam / M), "lambda %g: mean %.4f", lam, m);
    ck_assert_msg(fabs(s2 - lam) < 5 * sqrt((lam + 2 * lam * lam) / M), "lambda %g: variance %.4f", lam, s2);
    for (int v = (int)fmax(0, lam - 2 * sqrt(lam)); v <= lam + 2 * sqrt(lam) && lam < 100; v++) {
      double pmf = exp(v * log(lam) - lam - lgamma(v + 1.0)), cnt = 0;
      for (int i = 0; i < M; i++) cnt += k[i] == v;
      ck_assert_msg(fabs(cnt / M - pmf) < 5 * sqrt(pmf * (1 - pmf) / M) + 1e-9, "lambda %g: P(%d) = %.5f, Poisson %.5f",
                    lam, v, cnt / M, pmf);
    }
  }
  /* an image: counts / dose over many patterns average to the intensity */
  double img[4] = {0.5, 0.3, 0.15, 0.05}, avg[4] = {0}, x[4];
  for (int t = 0; t < 4000; t++) {
    memcpy(x, img, sizeof x);
    _tsr_cbed_dose(x, 4, 200, uniform, &r);
    for (int q = 0; q < 4; q++) avg[q] += x[q] / 4000;
  }
  for (int q = 0; q < 4; q++)
    ck_assert_msg(fabs(avg[q] - img[q]) < 5 * sqrt(img[q] / 200 / 4000), "pixel %d: %.5f for %.5f", q, avg[q], img[q]);
  free(k);
}
END_TEST

/* A detector pixel of the simulation's pixel is the centre crop; of twice it (aligned), 2 x 2 sums;
 * a detector covering the plane keeps the total; the point spread keeps the total of a centred spot. */
START_TEST(detector_integrates_and_spreads) {
  const int n = 16;
  double img[16 * 16], out[16 * 16], crop[8 * 8] = {0}, scratch[16 * 16];
  tt_fill_uniform_d(img, n * n, 9, 0, 1);
  double l = 0.025, L = 10, s = l / L * 1e3; /* mrad per simulation pixel */
  _tsr_cbed_detect(img, n, L, L, l, 8, 0, 1.0, scratch, crop);
  memset(out, 0, sizeof out);
  _tsr_cbed_detect(img, n, L, L, l, 8, s, 1.0, scratch, out);
  for (int k = 0; k < 64; k++) ck_assert_msg(fabs(out[k] - crop[k]) < 1e-12, "pixel %d: %g vs crop %g", k, out[k], crop[k]);
  memset(out, 0, sizeof out);
  _tsr_cbed_detect(img, n, L, L, l, 9, 2 * s, 1.0, scratch, out); /* [-9 s, 9 s) covers [-8.5 s, 7.5 s) */
  double tot = 0, sum = 0;
  for (int k = 0; k < n * n; k++) tot += img[k];
  for (int k = 0; k < 81; k++) sum += out[k];
  ck_assert_msg(fabs(sum - tot) < 1e-9 * tot, "9 x 9 pixels of 2 s cover the plane: %.12g of %.12g", sum, tot);
  memset(out, 0, sizeof out);
  _tsr_cbed_detect(img, n, L, L, l, 3, 7 * s, 0.5, scratch, out);
  sum = 0;
  for (int k = 0; k < 9; k++) sum += out[k];
  ck_assert_msg(fabs(sum - 0.5 * tot) < 1e-9 * tot, "3 x 3 pixels of 7 s, weight 0.5: %.12g of %.12g", sum, 0.5 * tot);
  double spot[32 * 32] = {0}, sc[32 * 32];
  spot[16 * 32 + 16] = 1;
  _tsr_cbed_psf(spot, 32, 1.5, sc);
  double t = 0, m2 = 0;
  for (int j = 0; j < 32; j++)
    for (int i = 0; i < 32; i++) t += spot[j * 32 + i], m2 += spot[j * 32 + i] * (i - 16) * (i - 16);
  ck_assert_msg(fabs(t - 1) < 1e-12 && fabs(m2 - 1.5 * 1.5) < 1e-3, "spread spot: total %g, variance %g", t, m2);
}
END_TEST

/* Partial coherence averages patterns of displaced probes: in vacuum every probe position gives the
 * aperture's pattern, so the average is the coherent pattern (within rounding); in a crystal it is
 * not, and both keep the beam's intensity. */
START_TEST(partial_coherence_averages_displaced_probes) {
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  o.grid = 48, o.pattern = 48, o.target = 8, o.probes = 2, o.intensity = TSR_CBED_LINEAR;
  struct cbed_atoms vac = {.lx = 12, .ly = 12, .lz = 4}, sto;
  ck_assert_int_eq(build_crystal(&sto, TSR_CBED_SRTIO3, 1, 12, 0, 0), 0);
  struct cbed_work w = {0};
  const size_t xe = 4 * 48 * 48;
  float *coh = malloc(sizeof(float) * xe), *inc = malloc(sizeof(float) * xe), v[64];
  for (int c = 0; c < 2; c++) {
    const struct cbed_atoms *a = c ? &sto : &vac;
    o.source_A = 0;
    ck_assert_msg(_tsr_cbed_simulate(&o, &w, a, 4, 0, coh, v, NULL) == TSR_OK, "%s", tsr_last_error());
    o.source_A = 0.8, o.coherence_samples = 6;
    ck_assert_msg(_tsr_cbed_simulate(&o, &w, a, 4, 0, inc, v, NULL) == TSR_OK, "%s", tsr_last_error());
    double diff = 0, mx = 0, tc = 0, ti = 0;
    for (size_t k = 0; k < xe; k++)
      diff = fmax(diff, fabs(coh[k] - inc[k])), mx = fmax(mx, coh[k]), tc += coh[k] / 4, ti += inc[k] / 4;
    ck_assert_msg(fabs(tc - ti) < 1e-3 && ti > 0.99 && ti <= 1 + 1e-5, "%s: intensity %.6f coherent, %.6f partial",
                  c ? "SrTiO3" : "vacuum", tc, ti);
    if (c == 0) ck_assert_msg(diff < 1e-6 * mx, "vacuum: partial coherence changed the pattern by %.3g", diff / mx);
    else ck_assert_msg(diff > 1e-3 * mx, "SrTiO3: partial coherence changed nothing (%.3g)", diff / mx);
  }
  free(coh), free(inc);
  _tsr_cbed_work_free(&w);
  _tsr_cbed_atoms_free(&sto);
}
END_TEST

/* The target by direct summation of the Fourier series at the grid's own points equals the inverse
 * FFT of the blurred coefficients; a window starting at the middle of the cell equals it rolled by
 * half a cell (a periodic potential); non-square cell (SrTiO3 [110]). */
START_TEST(window_target_matches_inverse_fft) {
  struct cbed_atoms a;
  ck_assert_int_eq(build_crystal(&a, TSR_CBED_SRTIO3, 2, 8, 0.1, 0.3), 0);
  const int n = 48;
  struct cbed_work w;
  ck_assert_int_eq(_tsr_cbed_work_init(&w, n), 0);
  ck_assert_int_eq(_tsr_cbed_prepare(&w, &a, 200, 2), 0);
  double *fft = malloc(sizeof(double) * n * n), *win = malloc(sizeof(double) * n * n), mx = 0, e0 = 0, e1 = 0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++) {
      double kx = (i < n / 2 ? i : i - n) / a.lx, ky = (j < n / 2 ? j : j - n) / a.ly;
      double g = exp(-2 * M_PI * M_PI * 0.3 * 0.3 * (kx * kx + ky * ky));
      w.tmp[j * n + i][0] = g * w.vq[j * n + i][0], w.tmp[j * n + i][1] = g * w.vq[j * n + i][1];
    }
  fftw_execute(w.bwd);
  for (int k = 0; k < n * n; k++) fft[k] = w.psi[k][0], mx = fmax(mx, fabs(fft[k]));
  ck_assert_int_eq(_tsr_cbed_window_potential(&w, n, 0, 0, a.lx, a.ly, 0.3, win), 0);
  for (int k = 0; k < n * n; k++) e0 = fmax(e0, fabs(win[k] - fft[k]));
  ck_assert_int_eq(_tsr_cbed_window_potential(&w, n, a.lx / 2, a.ly / 2, a.lx, a.ly, 0.3, win), 0);
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++) e1 = fmax(e1, fabs(win[j * n + i] - fft[((j + n / 2) % n) * n + (i + n / 2) % n]));
  ck_assert_msg(a.lx != a.ly && mx > 1 && e0 < 1e-9 * mx && e1 < 1e-9 * mx,
                "window against inverse FFT: %.3g, shifted %.3g (max %.3g V A)", e0, e1, mx);
  free(fft), free(win);
  _tsr_cbed_work_free(&w);
  _tsr_cbed_atoms_free(&a);
}
END_TEST

/* A few members of the compound record `meta`, read by name (as h5py would). */
struct physics_view {
  char structure[64];
  double kv, a1_angle_deg, scan_A[4], supercell[3];
  int grid;
};

static hid_t physics_view_type(void) {
  hsize_t n3 = 3, n4 = 4;
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct physics_view)), s = H5Tcopy(H5T_C_S1);
  hid_t d3 = H5Tarray_create2(H5T_NATIVE_DOUBLE, 1, &n3), d4 = H5Tarray_create2(H5T_NATIVE_DOUBLE, 1, &n4);
  H5Tset_size(s, 64);
  ck_assert(H5Tinsert(t, "structure", HOFFSET(struct physics_view, structure), s) >= 0 &&
            H5Tinsert(t, "kv", HOFFSET(struct physics_view, kv), H5T_NATIVE_DOUBLE) >= 0 &&
            H5Tinsert(t, "a1_angle_deg", HOFFSET(struct physics_view, a1_angle_deg), H5T_NATIVE_DOUBLE) >= 0 &&
            H5Tinsert(t, "scan_A", HOFFSET(struct physics_view, scan_A), d4) >= 0 &&
            H5Tinsert(t, "supercell", HOFFSET(struct physics_view, supercell), d3) >= 0 &&
            H5Tinsert(t, "grid", HOFFSET(struct physics_view, grid), H5T_NATIVE_INT) >= 0);
  H5Tclose(s), H5Tclose(d3), H5Tclose(d4);
  return t;
}

/* tsr_cbed_write stores per sample what tsr_cbed's draws gave, beside the specimen's record: `meta`'s
 * kv within the range, equal to the sample's own record, and varying between samples; the scan
 * window centred in the recorded cell; the structure and the grid chosen for the sample. */
START_TEST(writer_stores_each_sample_record) {
  tt_starpu_home();
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 2, co.use_mpi = 0, co.verbose = 0;
  tsr_context *ctx;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  o.grid = 32, o.pattern = 16, o.target = 16, o.probes = 2, o.fov = 8, o.thickness_min = 8, o.thickness_max = 12;
  o.kv = 200, o.kv_spread = 50, o.a1 = 20, o.dose = 1e4, o.det_psf = 0.7, o.phonons = 2, o.source_A = 0.3;
  o.coherence_samples = 2, o.scan_A = 4;
  char *path;
  ck_assert(asprintf(&path, "%s/meta.h5", tt_tmpdir()) > 0);
  const int n = 5;
  ck_assert_msg(tsr_cbed_write(ctx, &o, 3, n, 0, path, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, "meta", H5P_DEFAULT), t = physics_view_type();
  struct physics_view mv[5];
  ck_assert(d >= 0 && H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, mv) >= 0);
  H5Tclose(t), H5Dclose(d), H5Fclose(f);
  struct cbed_work w = {0};
  float *x = malloc(sizeof(float) * 4 * 16 * 16), v[256];
  for (int i = 0; i < n; i++) {
    struct cbed_meta m;
    ck_assert_msg(_tsr_cbed_sample_with(&o, &w, 3 + i, x, v, &m) == TSR_OK, "%s", tsr_last_error());
    ck_assert_msg(mv[i].kv == m.kv && mv[i].a1_angle_deg == m.a1_angle_deg, "sample %d: stored kv %g angle %g, drawn %g %g",
                  i, mv[i].kv, mv[i].a1_angle_deg, m.kv, m.a1_angle_deg);
    ck_assert_msg(mv[i].kv >= 150 && mv[i].kv <= 250, "sample %d: kv %g", i, mv[i].kv);
    ck_assert_msg(fabs(mv[i].scan_A[0] - (mv[i].supercell[0] - 4) / 2) < 1e-12 && mv[i].scan_A[2] == 4,
                  "sample %d: scan window at %g in a %g A cell", i, mv[i].scan_A[0], mv[i].supercell[0]);
    ck_assert_msg(!strcmp(mv[i].structure, m.structure) && m.structure[0] && mv[i].grid == 32,
                  "sample %d: structure '%s' (drawn '%s'), grid %d", i, mv[i].structure, m.structure, mv[i].grid);
    ck_assert(i == 0 || mv[i].kv != mv[0].kv);
  }
  _tsr_cbed_work_free(&w);
  free(x), free(path);
  tsr_context_destroy(ctx);
}
END_TEST

static Suite *make_cbed_physics_suite(void) {
  Suite *s = suite_create("cbed_physics");
  TCase *t = tcase_create("physics");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, grid_and_slice_follow_angle_and_wavelength);
  tcase_add_test(t, default_sampling_converges_against_refined_grid);
  tcase_add_test(t, probe_phase_is_minus_chi);
  tcase_add_test(t, frozen_phonon_mean_is_debye_waller_damped);
  tcase_add_test(t, dose_counts_are_poisson);
  tcase_add_test(t, detector_integrates_and_spreads);
  tcase_add_test(t, partial_coherence_averages_displaced_probes);
  tcase_add_test(t, window_target_matches_inverse_fft);
  tcase_add_test(t, writer_stores_each_sample_record);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_cbed_physics_suite)

/* Suite "cbed": the multislice simulator's physics against float64 references (relativistic
 * wavelength and sigma, intensity conserved through propagation, the central disc radius
 * alpha / (lambda dk), Friedel symmetry of a thin centrosymmetric crystal), crystal builders,
 * determinism, the target in V A, and the StarPU + HDF5 writer (float32 and float16) read back
 * through the loader, with its per-sample record (the real cell, checked on Si's (220) spacing). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include <tessera/cbed.h>
#include <tessera/loader.h>

#include "sim/cbed/cbed.h"
#include "cbed_build.h"
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
  ck_assert(_tsr_cbed_fe(104, 0.5) < 0); /* not in the table */
}
END_TEST

static double atom_count(tsr_cbed_structure s, int zone) {
  struct cbed_atoms a;
  ck_assert_int_eq(build_crystal(&a, s, zone, 1, 0, 0), 0);
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
  ck_assert_int_eq(build_crystal(&a, TSR_CBED_SRTIO3, 2, 20, 0.3, 0.1), 0);
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
  ck_assert_int_eq(build_crystal(&a, TSR_CBED_SRTIO3, 1, 20, 0, 0), 0);
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

/* Pattern of probe (5, 5) A through one period of Si [001] whose slice s is moved by s * shift in x. */
static void sheared_pattern(double tilt, double shift, double *out) {
  struct cbed_atoms a;
  ck_assert_int_eq(build_crystal(&a, TSR_CBED_SI, 1, 10, 0, 0), 0);
  double dz = a.lz / lround(a.lz / 2);
  for (int k = 0; k < a.n; k++) a.x[k] = fmod(a.x[k] + (int)(a.z[k] / dz) * shift + 2 * a.lx, a.lx);
  a.tilt[0] = tilt;
  struct cbed_work w;
  ck_assert_int_eq(_tsr_cbed_work_init(&w, 32), 0);
  ck_assert_int_eq(_tsr_cbed_prepare(&w, &a, 200, 2), 0);
  _tsr_cbed_probe(&w, &(struct cbed_optics){.alpha_mrad = 15}, 5, 5);
  _tsr_cbed_propagate(&w, w.nslices);
  _tsr_cbed_intensity(&w, out);
  _tsr_cbed_work_free(&w);
  _tsr_cbed_atoms_free(&a);
}

/* A specimen tilted by theta (the propagator's tilt) is the untilted specimen whose slice s lies
 * s dz tan(theta) further along x: with that shift one grid pixel (so the potentials' samples move
 * exactly), both give the same pattern; shifting the other way does not. */
START_TEST(tilt_is_a_shear_of_the_slices) {
  const double lx = 2 * 5.431, dz = 5.431 / 3, pixel = lx / 32, theta = atan(pixel / dz);
  double *tilted = malloc(sizeof(double) * 32 * 32), *sheared = malloc(sizeof(double) * 32 * 32);
  sheared_pattern(theta, 0, tilted);
  double d[2];
  for (int sign = 0; sign < 2; sign++) {
    sheared_pattern(0, sign ? -pixel : pixel, sheared);
    double mx = 0, diff = 0;
    for (int k = 0; k < 32 * 32; k++) mx = fmax(mx, tilted[k]), diff = fmax(diff, fabs(tilted[k] - sheared[k]));
    d[sign] = diff / mx;
  }
  ck_assert_msg(d[0] < 1e-9, "tilt %.4f rad against the sheared specimen: max difference %.3g of the peak", theta, d[0]);
  ck_assert_msg(d[1] > 1e-3, "shearing the other way gives the same pattern (%.3g)", d[1]);
  free(tilted), free(sheared);
}
END_TEST

/* A context of two CPU workers, no MPI, quiet, in a fresh STARPU_HOME (the writer's tests). */
static tsr_context *two_worker_context(void) {
  tt_starpu_home();
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 2, co.use_mpi = 0, co.verbose = 0;
  tsr_context *ctx;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  return ctx;
}

static tsr_cbed_opts small(void) {
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  o.grid = 32, o.pattern = 24, o.target = 16, o.probes = 2, o.fov = 10, o.thickness_min = 8, o.thickness_max = 16;
  o.structures = 0xF, o.zones = 7, o.seed = 99;
  return o;
}

START_TEST(samples_are_deterministic) {
  tsr_cbed_opts o = small();
  size_t xe = 4 * 24 * 24, ve = 16 * 16;
  float *x1 = malloc(4 * xe), *x2 = malloc(4 * xe), v1[256], v2[256];
  for (int64_t idx = 0; idx < 6; idx++) {
    ck_assert_msg(tsr_cbed_sample(&o, idx, x1, v1) == TSR_OK, "%s", tsr_last_error());
    ck_assert_int_eq(tsr_cbed_sample(&o, idx, x2, v2), TSR_OK);
    ck_assert(memcmp(x1, x2, 4 * xe) == 0 && memcmp(v1, v2, sizeof v1) == 0);
    for (size_t k = 0; k < ve; k++) ck_assert(isfinite(v1[k]));
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

/* The target is the projected potential of one period along the beam in V A, not rescaled: over
 * the whole cell its mean is the k = 0 term, 2 pi a0 e sum_atoms f_e(0) / (lx ly) over the period's
 * atoms (a0 = 0.529177 A, e = 14.399645 V A), whatever the structure. */
START_TEST(target_is_the_potential_in_volt_angstrom) {
  tsr_cbed_opts o = small();
  o.target = o.grid, o.structures = 1u << TSR_CBED_SI | 1u << TSR_CBED_SRTIO3;
  struct cbed_work w;
  ck_assert_int_eq(_tsr_cbed_work_init(&w, o.grid), 0);
  float *x = malloc(sizeof(float) * 4 * 24 * 24), *v = malloc(sizeof(float) * o.grid * o.grid);
  for (int64_t idx = 0; idx < 4; idx++) {
    struct cbed_meta m;
    ck_assert_msg(_tsr_cbed_sample_with(&o, &w, idx, x, v, &m) == TSR_OK, "%s", tsr_last_error());
    double mean = 0, f0 = 0;
    for (int k = 0; k < o.grid * o.grid; k++) mean += v[k] / (double)(o.grid * o.grid);
    /* Si8 or SrTiO3 per unit cell: the formula and the atom count give the sum of f_e(0) */
    f0 = !strcmp(m.formula, "Si") ? m.atoms * _tsr_cbed_fe(14, 0)
                                  : m.atoms / 5.0 * (_tsr_cbed_fe(38, 0) + _tsr_cbed_fe(22, 0) + 3 * _tsr_cbed_fe(8, 0));
    double want = 2 * M_PI * 0.529177210903 * 14.399645 * f0 / (m.supercell[0] * m.supercell[1]);
    ck_assert_msg(fabs(mean / want - 1) < 1e-5, "sample %lld (%s): mean %.6g V A, expected %.6g", (long long)idx,
                  m.formula, mean, want);
  }
  free(x), free(v);
  _tsr_cbed_work_free(&w);
}
END_TEST

/* The writer (StarPU tasks, two workers) stores exactly what tsr_cbed_sample computes; float16 within
 * half precision (relative 2^-11, plus the smallest normal). */
START_TEST(writer_round_trip_float32_and_float16) {
  tsr_context *ctx = two_worker_context();
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

/* A few members of the `meta` record, read by name (as h5py would). */
struct meta_view {
  char structure[64];
  int zone[3], tiles[2];
  double supercell[3], thickness_A, origin_A[2];
};

static hid_t meta_view_type(void) {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct meta_view)), s = H5Tcopy(H5T_C_S1);
  hsize_t three = 3, two = 2;
  hid_t i3 = H5Tarray_create2(H5T_NATIVE_INT, 1, &three), i2 = H5Tarray_create2(H5T_NATIVE_INT, 1, &two);
  hid_t d3 = H5Tarray_create2(H5T_NATIVE_DOUBLE, 1, &three), d2 = H5Tarray_create2(H5T_NATIVE_DOUBLE, 1, &two);
  H5Tset_size(s, 64);
  ck_assert(H5Tinsert(t, "structure", HOFFSET(struct meta_view, structure), s) >= 0 &&
            H5Tinsert(t, "zone", HOFFSET(struct meta_view, zone), i3) >= 0 &&
            H5Tinsert(t, "tiles", HOFFSET(struct meta_view, tiles), i2) >= 0 &&
            H5Tinsert(t, "supercell", HOFFSET(struct meta_view, supercell), d3) >= 0 &&
            H5Tinsert(t, "thickness_A", HOFFSET(struct meta_view, thickness_A), H5T_NATIVE_DOUBLE) >= 0 &&
            H5Tinsert(t, "origin_A", HOFFSET(struct meta_view, origin_A), d2) >= 0);
  H5Tclose(s), H5Tclose(i3), H5Tclose(i2), H5Tclose(d3), H5Tclose(d2);
  return t;
}

/* |sum_p v(p) exp(-2 pi i (h x + k y) / n)| of an n x n image. */
static double fourier(const float *v, int n, int h, int k) {
  double re = 0, im = 0;
  for (int y = 0; y < n; y++)
    for (int x = 0; x < n; x++) {
      double ph = -2 * M_PI * (double)(h * x + k * y) / n;
      re += v[y * n + x] * cos(ph), im += v[y * n + x] * sin(ph);
    }
  return hypot(re, im);
}

/* The file's record of each sample is what the simulation used, and its cell is the real one: Si
 * [001] over a requested 10 A is 2 x 5.431 A, and the strongest reflection of the stored potential,
 * Si's (220), sits at frequency (2 lx / a, 2 ly / a) computed from the recorded cell (from the
 * requested field of view it would fall between pixels). */
START_TEST(writer_records_the_real_cell) {
  tsr_context *ctx = two_worker_context();
  tsr_cbed_opts o = small();
  o.structures = 1u << TSR_CBED_SI, o.zones = 1, o.target = o.grid;
  const int n = 3, g = o.grid;
  char *p;
  ck_assert(asprintf(&p, "%s/meta.h5", tt_tmpdir()) > 0);
  ck_assert_msg(tsr_cbed_write(ctx, &o, 0, n, 0, p, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_context_destroy(ctx);
  hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT), dm = H5Dopen2(f, "meta", H5P_DEFAULT),
        dv = H5Dopen2(f, "potential", H5P_DEFAULT), t = meta_view_type();
  struct meta_view mv[3];
  float *pot = malloc(sizeof(float) * n * g * g);
  ck_assert(H5Dread(dm, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, mv) >= 0);
  ck_assert(H5Dread(dv, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, pot) >= 0);
  struct cbed_work w;
  ck_assert_int_eq(_tsr_cbed_work_init(&w, g), 0);
  float *x = malloc(sizeof(float) * 4 * 24 * 24), *v = malloc(sizeof(float) * g * g);
  for (int i = 0; i < n; i++) {
    struct cbed_meta m;
    ck_assert_int_eq(_tsr_cbed_sample_with(&o, &w, i, x, v, &m), TSR_OK);
    ck_assert_str_eq(mv[i].structure, "Si");
    ck_assert(!memcmp(mv[i].zone, m.zone, sizeof m.zone) && !memcmp(mv[i].tiles, m.tiles, sizeof m.tiles));
    ck_assert(!memcmp(mv[i].supercell, m.supercell, sizeof m.supercell) && mv[i].thickness_A == m.thickness_A);
    ck_assert(!memcmp(mv[i].origin_A, m.origin_A, sizeof m.origin_A));
    ck_assert(mv[i].zone[0] == 0 && mv[i].zone[1] == 0 && mv[i].zone[2] == 1);
    double hx = 2 * mv[i].supercell[0] / 5.431, hy = 2 * mv[i].supercell[1] / 5.431;
    ck_assert_msg(fabs(hx - lround(hx)) < 1e-9 && fabs(hy - lround(hy)) < 1e-9 && mv[i].tiles[0] == 2,
                  "recorded cell %.4f x %.4f A is not whole Si cells", mv[i].supercell[0], mv[i].supercell[1]);
    const float *img = pot + (size_t)i * g * g;
    double f220 = fourier(img, g, (int)lround(hx), (int)lround(hy)), other = 0;
    for (int k = 0; k <= g / 2; k++)
      for (int h = 0; h <= g / 2; h++)
        if ((h || k) && !(h == lround(hx) && k == lround(hy))) other = fmax(other, fourier(img, g, h, k));
    ck_assert_msg(f220 > 1.2 * other, "sample %d: |V(220)| %g, the largest other %g", i, f220, other);
  }
  free(x), free(v), free(pot), free(p);
  _tsr_cbed_work_free(&w);
  H5Tclose(t), H5Dclose(dm), H5Dclose(dv), H5Fclose(f);
}
END_TEST

/* Random crystals at heldout.sh's small settings (a 10 A field of view, zones [001] and [110]):
 * about one in ten first draws has no orthogonal box along the zone within the size limit. Such a
 * sample is drawn again from its own redraw streams: every sample of the range simulates, some were
 * redrawn (the record says how often), a sample and its redraw count come out bitwise the same when
 * computed again and when written by StarPU tasks on two workers. */
static tsr_cbed_opts heldout_crystals(void) {
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  o.grid = 32, o.pattern = 32, o.target = 32, o.probes = 4, o.fov = 10, o.seed = 1;
  o.structures = 1u << TSR_CBED_CRYSTAL, o.zones = 3;
  return o;
}

static hid_t redraws_view_type(void) {
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(int));
  ck_assert(t >= 0 && H5Tinsert(t, "crystal_redraws", 0, H5T_NATIVE_INT) >= 0);
  return t;
}

START_TEST(random_crystals_without_a_box_are_redrawn) {
  tsr_cbed_opts o = heldout_crystals();
  enum { N = 16, XE = 16 * 32 * 32, VE = 32 * 32 };
  float *x = malloc(sizeof(float) * N * XE), *v = malloc(sizeof(float) * N * VE), *x2 = malloc(sizeof(float) * XE),
        v2[VE];
  int redraws[N], redrawn = 0;
  struct cbed_work w;
  ck_assert_int_eq(_tsr_cbed_work_init(&w, o.grid), 0);
  for (int i = 0; i < N; i++) {
    struct cbed_meta m;
    ck_assert_msg(_tsr_cbed_sample_with(&o, &w, i, x + (size_t)i * XE, v + (size_t)i * VE, &m) == TSR_OK,
                  "sample %d: %s", i, tsr_last_error());
    ck_assert(m.atoms > 0 && m.strain <= 0.02 && !strcmp(m.source, "generated") && m.crystal_redraws >= 0);
    redraws[i] = m.crystal_redraws, redrawn += m.crystal_redraws > 0;
  }
  ck_assert_msg(redrawn >= 1 && redrawn <= N / 2, "%d of %d samples redrawn", redrawn, N);
  for (int i = 0; i < N; i++) { /* again, in a fresh work space */
    struct cbed_work w2 = {0};
    struct cbed_meta m;
    ck_assert_int_eq(_tsr_cbed_sample_with(&o, &w2, i, x2, v2, &m), TSR_OK);
    ck_assert_msg(m.crystal_redraws == redraws[i] && !memcmp(x2, x + (size_t)i * XE, sizeof(float) * XE) &&
                  !memcmp(v2, v + (size_t)i * VE, sizeof v2), "sample %d differs when computed again", i);
    _tsr_cbed_work_free(&w2);
  }
  _tsr_cbed_work_free(&w);

  tsr_context *ctx = two_worker_context();
  char *p;
  ck_assert(asprintf(&p, "%s/redraws.h5", tt_tmpdir()) > 0);
  ck_assert_msg(tsr_cbed_write(ctx, &o, 0, N, 0, p, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_context_destroy(ctx);
  hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT), dm = H5Dopen2(f, "meta", H5P_DEFAULT),
        dx = H5Dopen2(f, "cbed", H5P_DEFAULT), dv = H5Dopen2(f, "potential", H5P_DEFAULT), t = redraws_view_type();
  int version = 0, stored[N];
  hid_t at = H5Aopen(f, "generator_version", H5P_DEFAULT);
  ck_assert(at >= 0 && H5Aread(at, H5T_NATIVE_INT, &version) >= 0 && version == 3);
  H5Aclose(at);
  float *xf = malloc(sizeof(float) * N * XE), *vf = malloc(sizeof(float) * N * VE);
  ck_assert(H5Dread(dm, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, stored) >= 0);
  ck_assert(H5Dread(dx, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, xf) >= 0);
  ck_assert(H5Dread(dv, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, vf) >= 0);
  for (int i = 0; i < N; i++)
    ck_assert_msg(stored[i] == redraws[i], "sample %d: file records %d redraws, computed %d", i, stored[i], redraws[i]);
  ck_assert_msg(!memcmp(xf, x, sizeof(float) * N * XE) && !memcmp(vf, v, sizeof(float) * N * VE),
                "the file written on two workers differs from the samples computed one by one");
  H5Tclose(t), H5Dclose(dm), H5Dclose(dx), H5Dclose(dv), H5Fclose(f);
  free(x), free(v), free(x2), free(xf), free(vf), free(p);
}
END_TEST

/* When no random crystal can be made (here: atoms 5 A apart cannot reach 0.2 atoms/A^3), the error
 * names the sample, the number of draws, the zone and the settings to change. */
START_TEST(impossible_random_crystals_name_sample_and_settings) {
  tsr_cbed_opts o = heldout_crystals();
  o.min_distance = 5, o.density_min = 0.2, o.density_max = 0.3;
  ck_assert_msg(tsr_cbed_opts_check(&o) == TSR_OK, "%s", tsr_last_error());
  float *x = malloc(sizeof(float) * 16 * 32 * 32), v[32 * 32];
  ck_assert_int_eq(tsr_cbed_sample(&o, 3, x, v), TSR_ERR_ARG);
  const char *e = tsr_last_error();
  ck_assert_msg(strstr(e, "sample 3:") && strstr(e, "none of 64 random crystals") && strstr(e, "--min-distance") &&
                strstr(e, "--density 0.2:0.3") && (strstr(e, "along [0 0 1]") || strstr(e, "along [1 1 0]")), "%s", e);
  free(x);
}
END_TEST

/* A sample that cannot be simulated (a scan window wider than Si's two 5.431 A cells along [001])
 * is named once, by the sampler, whether it is drawn alone or by the writer's tasks. */
START_TEST(failed_sample_is_named_once) {
  tsr_context *ctx = two_worker_context();
  tsr_cbed_opts o = small();
  o.structures = 1u << TSR_CBED_SI, o.zones = 1, o.scan_A = 50;
  const char *want = "cbed: sample 4: the scan window of 50 A is larger than its 10.86 x 10.86 A cell";
  float *x = malloc(sizeof(float) * 4 * 24 * 24), v[256];
  ck_assert_int_eq(tsr_cbed_sample(&o, 4, x, v), TSR_ERR_ARG);
  ck_assert_str_eq(tsr_last_error(), want);
  char *p;
  ck_assert(asprintf(&p, "%s/failed.h5", tt_tmpdir()) > 0);
  ck_assert_int_ne(tsr_cbed_write(ctx, &o, 4, 1, 0, p, NULL, NULL), TSR_OK);
  ck_assert_str_eq(tsr_last_error(), want);
  tsr_context_destroy(ctx);
  free(x), free(p);
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
  tcase_add_test(p, tilt_is_a_shear_of_the_slices);
  suite_add_tcase(s, p);
  TCase *d = tcase_create("data");
  tcase_add_test(d, samples_are_deterministic);
  tcase_add_test(d, target_is_the_potential_in_volt_angstrom);
  tcase_add_test(d, writer_records_the_real_cell);
  tcase_add_test(d, writer_round_trip_float32_and_float16);
  tcase_add_test(d, random_crystals_without_a_box_are_redrawn);
  tcase_add_test(d, impossible_random_crystals_name_sample_and_settings);
  tcase_add_test(d, failed_sample_is_named_once);
  suite_add_tcase(s, d);
  return s;
}

TT_MAIN(make_cbed_suite)

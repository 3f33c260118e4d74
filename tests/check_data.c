/* Suite "data": the phase-object generator (determinism, energy conservation, a float64 DFT
 * reference, the potential as target) and HDF5 datasets (round trip with the generator, concurrent
 * reads, and every malformed-file error naming the file and the problem). */
#define _GNU_SOURCE
#include <complex.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>
#include <tessera/data.h>

#include "testutil.h"

static tsr_phase_gen_opts small_opts(int size) {
  tsr_phase_gen_opts o;
  tsr_phase_gen_opts_default(&o);
  o.size = size;
  o.seed = 1234;
  return o;
}

static float *gen(const tsr_phase_gen_opts *o, int64_t index, float **v) {
  size_t n = (size_t)o->size * o->size;
  float *x = malloc(n * sizeof *x);
  *v = malloc(n * sizeof **v);
  ck_assert_int_eq(tsr_phase_gen_sample(o, index, x, *v), TSR_OK);
  return x;
}

START_TEST(gen_same_seed_and_index_give_identical_samples) {
  tsr_phase_gen_opts o = small_opts(32);
  float *v1, *v2, *v3;
  float *x1 = gen(&o, 7, &v1), *x2 = gen(&o, 7, &v2);
  size_t n = 32 * 32;
  ck_assert(memcmp(x1, x2, n * 4) == 0 && memcmp(v1, v2, n * 4) == 0);
  float *x3 = gen(&o, 8, &v3);
  ck_assert_msg(memcmp(x1, x3, n * 4) != 0 && memcmp(v1, v3, n * 4) != 0, "index 8 equals index 7");
  o.seed = 1235;
  free(x3);
  free(v3);
  x3 = gen(&o, 7, &v3);
  ck_assert_msg(memcmp(v1, v3, n * 4) != 0, "seed 1235 equals seed 1234");
  free(x1), free(x2), free(x3), free(v1), free(v2), free(v3);
}
END_TEST

/* Plane wave: |t| = 1, so sum_k |FFT(t)(k)|^2 = size^2 sum |t|^2 = size^4; the input stores
 * log(1 + |F|^2/size^2). */
START_TEST(gen_plane_wave_intensity_conserves_energy) {
  for (int size = 16; size <= 64; size *= 2) {
    tsr_phase_gen_opts o = small_opts(size);
    o.aperture = 0;
    for (int64_t idx = 0; idx < 4; idx++) {
      float *v, *x = gen(&o, idx, &v);
      double sum = 0, s2 = (double)size * size;
      for (int i = 0; i < size * size; i++) sum += expm1((double)x[i]) * s2;
      double want = s2 * s2;
      ck_assert_msg(fabs(sum - want) <= 1e-4 * want, "size %d sample %lld: sum |F|^2 = %.8g, expected %.8g", size,
                    (long long)idx, sum, want);
      free(x), free(v);
    }
  }
}
END_TEST

/* The input must equal a float64 naive DFT of exp(i sigma V) built from the target, shifted so
 * frequency 0 sits at (size/2, size/2); an odd size checks the shift's rounding. */
START_TEST(gen_plane_wave_input_matches_naive_dft_of_target) {
  int sizes[] = {16, 15};
  for (int si = 0; si < 2; si++) {
    int s = sizes[si];
    tsr_phase_gen_opts o = small_opts(s);
    o.aperture = 0;
    o.sigma = 1.7f;
    float *v, *x = gen(&o, 3, &v);
    double *ref = malloc(sizeof(double) * s * s);
    for (int ky = 0; ky < s; ky++)
      for (int kx = 0; kx < s; kx++) {
        double complex f = 0;
        for (int y = 0; y < s; y++)
          for (int xx = 0; xx < s; xx++)
            f += cexp(I * (double)o.sigma * v[y * s + xx]) * cexp(-2 * M_PI * I * ((double)ky * y + (double)kx * xx) / s);
        double inten = creal(f * conj(f)) / ((double)s * s);
        ref[((ky + s / 2) % s) * s + (kx + s / 2) % s] = log1p(inten);
      }
    tt_assert_close(x, ref, (size_t)s * s, 1e-5, 1e-5, s == 16 ? "input, size 16" : "input, size 15");
    free(ref), free(x), free(v);
  }
}
END_TEST

/* With a weak phase the pattern is a delta at the centre: checks fftshift direction and scaling. */
START_TEST(gen_plane_wave_weak_phase_peaks_at_centre) {
  tsr_phase_gen_opts o = small_opts(32);
  o.aperture = 0;
  o.sigma = 1e-4f;
  float *v, *x = gen(&o, 0, &v);
  int c = 16 * 32 + 16;
  ck_assert_msg(fabs(x[c] - log1p(1024.0)) < 1e-3, "centre is %g, expected %g", x[c], log1p(1024.0));
  for (int i = 0; i < 32 * 32; i++)
    if (i != c) ck_assert_msg(x[i] < 1e-3, "pixel %d is %g away from the centre", i, x[i]);
  free(x), free(v);
}
END_TEST

/* Under the probe the intensity is normalised to mean 1 over the aperture disc, and the exit wave
 * keeps the probe's energy (|exp(i sigma V)| = 1): sum over the pattern of (exp(x) - 1) = disc pixels. */
START_TEST(gen_probe_intensity_conserves_energy) {
  tsr_phase_gen_opts o = small_opts(64);
  double kap = o.aperture * 32.0;
  int disc = 0;
  for (int ky = -32; ky < 32; ky++)
    for (int kx = -32; kx < 32; kx++) disc += (double)kx * kx + (double)ky * ky <= kap * kap;
  for (int64_t idx = 0; idx < 3; idx++) {
    float *v, *x = gen(&o, idx, &v);
    double sum = 0;
    for (int i = 0; i < 64 * 64; i++) sum += expm1((double)x[i]);
    ck_assert_msg(fabs(sum - disc) <= 1e-4 * disc, "sample %lld: sum of intensities %.8g, expected %d", (long long)idx,
                  sum, disc);
    free(x), free(v);
  }
}
END_TEST

/* The defocused probe makes the disc a shadow image at magnification 1: the pixel that changes most
 * when one atom is switched on (sigma 0.8 against 1e-6, same atom) is where the atom is. */
START_TEST(gen_probe_shadow_shows_atom_where_it_is) {
  tsr_phase_gen_opts o = small_opts(64), weak;
  o.atoms_min = o.atoms_max = 1;
  weak = o;
  weak.sigma = 1e-6f;
  for (int64_t idx = 0; idx < 6; idx++) {
    float *v, *v0, *x = gen(&o, idx, &v), *x0 = gen(&weak, idx, &v0);
    int atom = 0, shadow = 0;
    for (int i = 0; i < 64 * 64; i++) {
      if (v[i] > v[atom]) atom = i;
      if (fabsf(x[i] - x0[i]) > fabsf(x[shadow] - x0[shadow])) shadow = i;
    }
    int dy = atom / 64 - shadow / 64, dx = atom % 64 - shadow % 64;
    ck_assert_msg(dy * dy + dx * dx <= 2, "sample %lld: atom at (%d, %d), its shadow at (%d, %d)", (long long)idx,
                  atom / 64, atom % 64, shadow / 64, shadow % 64);
    free(x), free(v), free(x0), free(v0);
  }
}
END_TEST

/* One atom of known width: V >= 0 and log V is a parabola of curvature -1/w^2 around its maximum. */
START_TEST(gen_target_is_gaussian_potential) {
  tsr_phase_gen_opts o = small_opts(48);
  o.atoms_min = o.atoms_max = 1;
  o.width_min = o.width_max = 2.5f;
  for (int64_t idx = 0; idx < 5; idx++) {
    float *v, *x = gen(&o, idx, &v);
    int best = 0;
    for (int i = 0; i < 48 * 48; i++) {
      ck_assert_msg(v[i] >= 0, "V[%d] = %g is negative", i, v[i]);
      if (v[i] > v[best]) best = i;
    }
    int by = best / 48, bx = best % 48;
    ck_assert_msg(v[best] >= 0.5 * 0.8 && v[best] <= 1.0, "peak height %g outside the amplitude range", v[best]);
    double l = log(v[by * 48 + (bx + 47) % 48]), m = log(v[best]), r = log(v[by * 48 + (bx + 1) % 48]);
    double u = log(v[((by + 47) % 48) * 48 + bx]), d = log(v[((by + 1) % 48) * 48 + bx]);
    double want = -1.0 / (2.5 * 2.5);
    ck_assert_msg(fabs((l - 2 * m + r) - want) < 1e-4 && fabs((u - 2 * m + d) - want) < 1e-4,
                  "sample %lld: curvature %g/%g, expected %g", (long long)idx, l - 2 * m + r, u - 2 * m + d, want);
    free(x), free(v);
  }
}
END_TEST

START_TEST(gen_rejects_bad_options) {
  tsr_phase_gen_opts o = small_opts(16);
  float x[256], v[256];
  o.atoms_max = 2;
  o.atoms_min = 3;
  ck_assert_int_eq(tsr_phase_gen_sample(&o, 0, x, v), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "atoms_max"), "message: %s", tsr_last_error());
  o = small_opts(16);
  o.width_min = 0;
  ck_assert_int_eq(tsr_phase_gen_sample(&o, 0, x, v), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "width_min"), "message: %s", tsr_last_error());
  o = small_opts(1);
  ck_assert_int_eq(tsr_phase_gen_sample(&o, 0, x, v), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "size"), "message: %s", tsr_last_error());
}
END_TEST

/* ---- datasets ---- */

static char *tmp_path(const char *name) {
  char *p;
  ck_assert(asprintf(&p, "%s/%s", tt_tmpdir(), name) > 0);
  return p;
}

static char *write_gen_file(const char *name, const tsr_phase_gen_opts *o, int64_t n) {
  char *p = tmp_path(name);
  ck_assert_msg(tsr_phase_gen_write(o, n, p, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  return p;
}

static void progress_count(void *user, int64_t done, int64_t total) {
  int64_t *last = user;
  ck_assert(done >= *last && done <= total);
  *last = done;
}

START_TEST(dataset_round_trip_matches_generator) {
  tsr_phase_gen_opts o = small_opts(16);
  char *p = tmp_path("gen.h5");
  int64_t last = -1;
  ck_assert_msg(tsr_phase_gen_write(&o, 70, p, progress_count, &last) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(last, 70);
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", p);
  ck_assert_msg(access(tmp, F_OK) != 0, "temporary file left behind");

  tsr_dataset *d;
  ck_assert_msg(tsr_dataset_open(&d, p) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_dataset_size(d), 70);
  int c, h, w;
  tsr_dataset_input_shape(d, &c, &h, &w);
  ck_assert(c == 1 && h == 16 && w == 16);
  tsr_dataset_target_shape(d, &c, &h, &w);
  ck_assert(c == 1 && h == 16 && w == 16);
  float x[256], y[256], xr[256], vr[256];
  int64_t idx[] = {0, 1, 63, 64, 69};
  for (int k = 0; k < 5; k++) {
    ck_assert_int_eq(tsr_dataset_read(d, idx[k], x, y), TSR_OK);
    ck_assert_int_eq(tsr_phase_gen_sample(&o, idx[k], xr, vr), TSR_OK);
    ck_assert_msg(memcmp(x, xr, sizeof x) == 0 && memcmp(y, vr, sizeof y) == 0, "sample %lld differs", (long long)idx[k]);
  }
  ck_assert_int_eq(tsr_dataset_read(d, 70, x, y), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "70"), "%s", tsr_last_error());
  tsr_dataset_close(d);

  /* the attributes record the options */
  hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
  float sigma = 0;
  int amax = 0;
  hid_t a = H5Aopen(f, "sigma", H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_FLOAT, &sigma);
  H5Aclose(a);
  a = H5Aopen(f, "atoms_max", H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_INT, &amax);
  H5Aclose(a);
  ck_assert(H5Aexists(f, "generator") > 0 && H5Aexists(f, "generator_version") > 0 && H5Aexists(f, "seed") > 0);
  H5Fclose(f);
  ck_assert(sigma == o.sigma && amax == o.atoms_max);
  free(p);
}
END_TEST

struct reader {
  tsr_dataset *d;
  const tsr_phase_gen_opts *o;
  int first, bad;
};

static void *read_many(void *arg) {
  struct reader *r = arg;
  float x[256], y[256], xr[256], vr[256];
  for (int k = 0; k < 200; k++) {
    int64_t i = (r->first + 7 * k) % 40;
    if (tsr_dataset_read(r->d, i, x, y) != TSR_OK || tsr_phase_gen_sample(r->o, i, xr, vr) != TSR_OK ||
        memcmp(x, xr, sizeof x) != 0 || memcmp(y, vr, sizeof y) != 0)
      r->bad++;
  }
  return NULL;
}

START_TEST(dataset_concurrent_reads_agree) {
  tsr_phase_gen_opts o = small_opts(16);
  char *p = write_gen_file("conc.h5", &o, 40);
  tsr_dataset *d;
  ck_assert_int_eq(tsr_dataset_open(&d, p), TSR_OK);
  pthread_t th[4];
  struct reader r[4];
  for (int i = 0; i < 4; i++) {
    r[i] = (struct reader){.d = d, .o = &o, .first = i * 3};
    pthread_create(&th[i], NULL, read_many, &r[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    ck_assert_msg(r[i].bad == 0, "thread %d: %d bad reads", i, r[i].bad);
  }
  tsr_dataset_close(d);
  free(p);
}
END_TEST

/* Writes a file with two datasets of the given names, ranks, dims and HDF5 types. */
static void write_h5(const char *path, const char *n1, int r1, const hsize_t *d1, hid_t t1, const char *n2, int r2,
                     const hsize_t *d2, hid_t t2) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ck_assert(f >= 0);
  const char *names[] = {n1, n2};
  int ranks[] = {r1, r2};
  const hsize_t *dims[] = {d1, d2};
  hid_t types[] = {t1, t2};
  for (int k = 0; k < 2; k++) {
    hid_t sp = H5Screate_simple(ranks[k], dims[k], NULL);
    hid_t ds = H5Dcreate2(f, names[k], types[k], sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 1;
    for (int i = 0; i < ranks[k]; i++) n *= dims[k][i];
    double *buf = malloc(n * sizeof *buf);
    for (hsize_t i = 0; i < n; i++) buf[i] = 0.25 * (double)(i % 17);
    H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    free(buf);
    H5Dclose(ds);
    H5Sclose(sp);
  }
  H5Fclose(f);
}

/* Opening must fail with `status`, and the message must name the file and contain each fragment. */
static void expect_open_error(const char *path, tsr_status status, const char *frag1, const char *frag2) {
  tsr_dataset *d = (tsr_dataset *)1;
  tsr_status s = tsr_dataset_open(&d, path);
  const char *msg = tsr_last_error();
  ck_assert_msg(s == status, "%s: status %d, expected %d (%s)", path, s, status, msg);
  ck_assert(d == NULL);
  const char *base = strrchr(path, '/') + 1;
  ck_assert_msg(strstr(msg, base), "message does not name the file: %s", msg);
  ck_assert_msg(strstr(msg, frag1), "message lacks '%s': %s", frag1, msg);
  if (frag2) ck_assert_msg(strstr(msg, frag2), "message lacks '%s': %s", frag2, msg);
}

static const hsize_t d4[] = {3, 1, 4, 4};

START_TEST(dataset_missing_file_is_reported) {
  char *p = tmp_path("absent.h5");
  expect_open_error(p, TSR_ERR_IO, "No such file", NULL);
  free(p);
}
END_TEST

START_TEST(dataset_wrong_names_are_reported) {
  char *p = tmp_path("names.h5");
  write_h5(p, "x", 4, d4, H5T_IEEE_F32LE, "y", 4, d4, H5T_IEEE_F32LE);
  expect_open_error(p, TSR_ERR_FORMAT, "'inputs'", "not found");
  write_h5(p, "inputs", 4, d4, H5T_IEEE_F32LE, "y", 4, d4, H5T_IEEE_F32LE);
  expect_open_error(p, TSR_ERR_FORMAT, "'targets'", "not found");
  free(p);
}
END_TEST

START_TEST(dataset_three_dimensional_target_is_reported) {
  char *p = tmp_path("rank3.h5");
  hsize_t d3[] = {3, 4, 4};
  write_h5(p, "inputs", 4, d4, H5T_IEEE_F32LE, "targets", 3, d3, H5T_IEEE_F32LE);
  expect_open_error(p, TSR_ERR_FORMAT, "dataset 'targets' has 3 dimensions, expected 4", NULL);
  free(p);
}
END_TEST

START_TEST(dataset_mismatched_sample_counts_are_reported) {
  char *p = tmp_path("count.h5");
  hsize_t d5[] = {5, 1, 4, 4};
  write_h5(p, "inputs", 4, d4, H5T_IEEE_F32LE, "targets", 4, d5, H5T_IEEE_F32LE);
  expect_open_error(p, TSR_ERR_FORMAT, "'inputs' has 3 samples", "'targets' has 5");
  free(p);
}
END_TEST

START_TEST(dataset_integer_values_are_reported) {
  char *p = tmp_path("int.h5");
  write_h5(p, "inputs", 4, d4, H5T_STD_I32LE, "targets", 4, d4, H5T_IEEE_F32LE);
  expect_open_error(p, TSR_ERR_FORMAT, "'inputs' has integer values", NULL);
  free(p);
}
END_TEST

START_TEST(dataset_float64_values_are_read_as_float) {
  char *p = tmp_path("f64.h5");
  write_h5(p, "inputs", 4, d4, H5T_IEEE_F64LE, "targets", 4, d4, H5T_IEEE_F64BE);
  tsr_dataset *d;
  ck_assert_msg(tsr_dataset_open(&d, p) == TSR_OK, "%s", tsr_last_error());
  float x[16], y[16];
  ck_assert_int_eq(tsr_dataset_read(d, 2, x, y), TSR_OK);
  for (int i = 0; i < 16; i++) {
    float want = 0.25f * (float)((32 + i) % 17);
    ck_assert_msg(x[i] == want && y[i] == want, "element %d: %g %g, expected %g", i, x[i], y[i], want);
  }
  tsr_dataset_close(d);
  free(p);
}
END_TEST

START_TEST(dataset_garbage_file_is_reported) {
  char *p = tmp_path("garbage.h5");
  FILE *f = fopen(p, "wb");
  for (int i = 0; i < 4096; i++) fwrite(&i, sizeof i, 1, f);
  fclose(f);
  expect_open_error(p, TSR_ERR_FORMAT, "not an HDF5 file", NULL);
  free(p);
}
END_TEST

START_TEST(dataset_truncated_file_is_reported) {
  tsr_phase_gen_opts o = small_opts(16);
  char *p = write_gen_file("full.h5", &o, 20);
  FILE *f = fopen(p, "rb");
  char *buf = malloc(1 << 20);
  size_t n = fread(buf, 1, 1 << 20, f);
  fclose(f);
  char *q = tmp_path("truncated.h5");
  size_t cuts[] = {n / 2, n - 100, 3000};
  for (int k = 0; k < 3; k++) {
    f = fopen(q, "wb");
    fwrite(buf, 1, cuts[k], f);
    fclose(f);
    expect_open_error(q, TSR_ERR_FORMAT, "truncated", NULL);
  }
  free(buf), free(p), free(q);
}
END_TEST

START_TEST(dataset_nan_in_sample_is_reported) {
  tsr_phase_gen_opts o = small_opts(16);
  char *p = write_gen_file("nan.h5", &o, 6);
  hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t ds = H5Dopen2(f, "targets", H5P_DEFAULT), fs = H5Dget_space(ds);
  hsize_t start[4] = {2, 0, 5, 7}, cnt[4] = {1, 1, 1, 1}, one = 1;
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
  hid_t ms = H5Screate_simple(1, &one, NULL);
  float nan = NAN;
  ck_assert(H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, &nan) >= 0);
  H5Sclose(ms), H5Sclose(fs), H5Dclose(ds), H5Fclose(f);

  tsr_dataset *d;
  ck_assert_int_eq(tsr_dataset_open(&d, p), TSR_OK);
  float x[256], y[256];
  ck_assert_int_eq(tsr_dataset_read(d, 1, x, y), TSR_OK);
  ck_assert_int_eq(tsr_dataset_read(d, 2, x, y), TSR_ERR_NUMERIC);
  const char *msg = tsr_last_error();
  ck_assert_msg(strstr(msg, "nan.h5") && strstr(msg, "'targets'") && strstr(msg, "sample 2") && strstr(msg, "NaN"),
                "message: %s", msg);
  tsr_dataset_close(d);
  free(p);
}
END_TEST

/* Valid files in the other storage layouts pass the storage checks: compact, and chunked with
 * shuffle and deflate filters (stored chunk sizes then vary). */
START_TEST(dataset_compact_and_compressed_layouts_are_read) {
  char *p = tmp_path("layouts.h5");
  hsize_t dims[4] = {3, 1, 4, 4}, chunk[4] = {1, 1, 2, 4};
  double buf[48];
  for (int i = 0; i < 48; i++) buf[i] = 0.25 * (double)(i % 17);
  hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t sp = H5Screate_simple(4, dims, NULL);
  hid_t compact = H5Pcreate(H5P_DATASET_CREATE), zipped = H5Pcreate(H5P_DATASET_CREATE);
  ck_assert(H5Pset_layout(compact, H5D_COMPACT) >= 0);
  ck_assert(H5Pset_chunk(zipped, 4, chunk) >= 0 && H5Pset_shuffle(zipped) >= 0 && H5Pset_deflate(zipped, 6) >= 0);
  hid_t a = H5Dcreate2(f, "inputs", H5T_IEEE_F32LE, sp, H5P_DEFAULT, compact, H5P_DEFAULT);
  hid_t b = H5Dcreate2(f, "targets", H5T_IEEE_F64LE, sp, H5P_DEFAULT, zipped, H5P_DEFAULT);
  ck_assert(H5Dwrite(a, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
  ck_assert(H5Dwrite(b, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
  H5Dclose(a), H5Dclose(b), H5Pclose(compact), H5Pclose(zipped), H5Sclose(sp), H5Fclose(f);
  tsr_dataset *d;
  ck_assert_msg(tsr_dataset_open(&d, p) == TSR_OK, "%s", tsr_last_error());
  float x[16], y[16];
  for (int64_t k = 0; k < 3; k++) {
    ck_assert_msg(tsr_dataset_read(d, k, x, y) == TSR_OK, "%s", tsr_last_error());
    for (int i = 0; i < 16; i++)
      ck_assert_msg(x[i] == (float)buf[16 * k + i] && y[i] == (float)buf[16 * k + i], "sample %lld element %d",
                    (long long)k, i);
  }
  tsr_dataset_close(d);
  free(p);
}
END_TEST

/* Rewrites the chunk index record (B-tree v1 key: size, filter mask, 5 offsets; then the chunk's
 * address) of chunk `i` of a 4-D dataset: its stored size and its address. Corruptions of this
 * kind, found by fuzzing, made H5Dread copy past its buffers. */
static void patch_chunk_record(const char *path, const char *name, int i, uint32_t size, uint64_t addr) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t ds = H5Dopen2(f, name, H5P_DEFAULT), sp = H5Dget_space(ds);
  hsize_t off[4], csize;
  unsigned mask;
  haddr_t caddr;
  ck_assert(H5Dget_chunk_info(ds, sp, i, off, &mask, &caddr, &csize) >= 0);
  H5Sclose(sp), H5Dclose(ds), H5Fclose(f);
  FILE *fp = fopen(path, "r+b");
  static unsigned char buf[4 << 20];
  size_t n = fread(buf, 1, sizeof buf, fp);
  int patched = 0;
  for (size_t p = 48; p + 8 <= n && !patched; p++) {
    uint64_t a, o0;
    uint32_t s;
    memcpy(&a, buf + p, 8), memcpy(&s, buf + p - 48, 4), memcpy(&o0, buf + p - 40, 8);
    if (a != caddr || s != csize || o0 != off[0]) continue;
    memcpy(buf + p - 48, &size, 4), memcpy(buf + p, &addr, 8);
    patched = 1;
  }
  ck_assert_msg(patched, "%s: no index record of chunk %d of '%s' found", path, i, name);
  rewind(fp);
  ck_assert(fwrite(buf, 1, n, fp) == n);
  fclose(fp);
}

/* Opening or reading every sample must fail with TSR_ERR_FORMAT, naming the file and `what`. */
static void expect_open_or_read_error(const char *path, const char *what) {
  tsr_dataset *d = NULL;
  tsr_status s = tsr_dataset_open(&d, path);
  float x[256], y[256];
  for (int64_t i = 0; s == TSR_OK && i < tsr_dataset_size(d); i++) s = tsr_dataset_read(d, i, x, y);
  const char *msg = tsr_last_error();
  ck_assert_msg(s == TSR_ERR_FORMAT, "%s: status %d, expected TSR_ERR_FORMAT (%s)", path, s, msg);
  ck_assert_msg(strstr(msg, strrchr(path, '/') + 1) && strstr(msg, what), "message lacks the file or '%s': %s", what,
                msg);
  tsr_dataset_close(d);
}

/* The generator's file of n samples (one chunk each, 1024 bytes) with chunk records rewritten. */
static char *corrupt_gen_file(int64_t n, int nbad, const int *which, const uint32_t *sizes, const int64_t *back) {
  tsr_phase_gen_opts o = small_opts(16);
  char *q = write_gen_file("chunks-bad.h5", &o, n);
  for (int k = 0; k < nbad; k++) {
    hid_t f = H5Fopen(q, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "inputs", H5P_DEFAULT), sp = H5Dget_space(ds);
    hsize_t off[4], csize, fsize;
    unsigned mask;
    haddr_t caddr;
    ck_assert(H5Dget_chunk_info(ds, sp, which[k], off, &mask, &caddr, &csize) >= 0 && H5Fget_filesize(f, &fsize) >= 0);
    H5Sclose(sp), H5Dclose(ds), H5Fclose(f);
    patch_chunk_record(q, "inputs", which[k], sizes[k], back[k] ? fsize - back[k] : caddr);
  }
  return q;
}

START_TEST(dataset_corrupt_chunk_index_is_reported) {
  /* small index (every record checked at open): chunk 1's stored size 8; its address 16 bytes
   * before the end of the file; its size 2 GiB */
  const uint32_t sizes[] = {8, 1024, 0x7fffff00u};
  const int64_t back[] = {0, 16, 0};
  const char *what[] = {"4 unfiltered chunks holding 3080 bytes", "chunk record 1 of the index is corrupt", "in all"};
  for (int k = 0; k < 3; k++) {
    int one = 1;
    char *q = corrupt_gen_file(4, 1, &one, &sizes[k], &back[k]);
    expect_open_or_read_error(q, "'inputs'");
    ck_assert_msg(strstr(tsr_last_error(), what[k]), "case %d: %s", k, tsr_last_error());
    free(q);
  }
  /* large index (records checked when read): sizes 8 and 2040 keep the sum of 1100 chunks right */
  int which[] = {1000, 1001};
  uint32_t big[] = {8, 2040};
  int64_t none[] = {0, 0};
  char *q = corrupt_gen_file(1100, 2, which, big, none);
  expect_open_or_read_error(q, "'inputs'");
  ck_assert_msg(strstr(tsr_last_error(), "chunk at [1000, 0, 0, 0] has stored size 8, expected 1024"), "%s",
                tsr_last_error());
  free(q);
}
END_TEST

static Suite *make_data_suite(void) {
  Suite *s = suite_create("data");
  TCase *g = tcase_create("generator");
  tcase_add_test(g, gen_same_seed_and_index_give_identical_samples);
  tcase_add_test(g, gen_plane_wave_intensity_conserves_energy);
  tcase_add_test(g, gen_plane_wave_input_matches_naive_dft_of_target);
  tcase_add_test(g, gen_plane_wave_weak_phase_peaks_at_centre);
  tcase_add_test(g, gen_probe_intensity_conserves_energy);
  tcase_add_test(g, gen_probe_shadow_shows_atom_where_it_is);
  tcase_add_test(g, gen_target_is_gaussian_potential);
  tcase_add_test(g, gen_rejects_bad_options);
  suite_add_tcase(s, g);
  TCase *d = tcase_create("dataset");
  tcase_add_test(d, dataset_round_trip_matches_generator);
  tcase_add_test(d, dataset_concurrent_reads_agree);
  tcase_add_test(d, dataset_missing_file_is_reported);
  tcase_add_test(d, dataset_wrong_names_are_reported);
  tcase_add_test(d, dataset_three_dimensional_target_is_reported);
  tcase_add_test(d, dataset_mismatched_sample_counts_are_reported);
  tcase_add_test(d, dataset_integer_values_are_reported);
  tcase_add_test(d, dataset_float64_values_are_read_as_float);
  tcase_add_test(d, dataset_garbage_file_is_reported);
  tcase_add_test(d, dataset_truncated_file_is_reported);
  tcase_add_test(d, dataset_nan_in_sample_is_reported);
  tcase_add_test(d, dataset_corrupt_chunk_index_is_reported);
  tcase_add_test(d, dataset_compact_and_compressed_layouts_are_read);
  suite_add_tcase(s, d);
  return s;
}

TT_MAIN(make_data_suite)

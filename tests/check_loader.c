/* Suite "loader": sharding (N ranks cover every sample exactly once per epoch, orders depend on
 * (seed, epoch) only), multi-file lists, globs and .npy pairs read like the files themselves,
 * standardisation to mean 0 / std 1 per channel, every kind of bad data reported with the file, and
 * declared shapes that cannot fit refused before allocating. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hdf5.h>
#include <tessera/data.h>
#include <tessera/loader.h>
#include <tessera/memory.h>
#include <tessera/params.h>

#include "testutil.h"

START_TEST(shards_of_n_ranks_cover_every_sample_once) {
  const int64_t ns[] = {1, 7, 103, 1000};
  for (int a = 0; a < 4; a++)
    for (int size = 1; size <= 5; size++)
      for (int epoch = 1; epoch <= 3; epoch++) {
        int64_t n = ns[a];
        int *seen = calloc(n, sizeof(int));
        int64_t total = 0;
        for (int r = 0; r < size; r++) {
          int64_t k = tsr_loader_shard_size(n, r, size);
          ck_assert(k == n / size || k == n / size + 1);
          int64_t *idx = malloc(sizeof(int64_t) * (k + 1));
          ck_assert_int_eq(tsr_loader_epoch_indices(n, 42, epoch, r, size, idx), TSR_OK);
          for (int64_t i = 0; i < k; i++) {
            ck_assert(idx[i] >= 0 && idx[i] < n);
            seen[idx[i]]++;
          }
          total += k;
          free(idx);
        }
        ck_assert_int_eq(total, n);
        for (int64_t i = 0; i < n; i++)
          ck_assert_msg(seen[i] == 1, "n %lld, %d ranks, epoch %d: sample %lld seen %d times", (long long)n, size, epoch,
                        (long long)i, seen[i]);
        free(seen);
      }
}
END_TEST

START_TEST(epoch_order_depends_on_seed_and_epoch_only) {
  int64_t a[100], b[100], c[100];
  ck_assert_int_eq(tsr_loader_epoch_indices(100, 1, 1, 0, 1, a), TSR_OK);
  ck_assert_int_eq(tsr_loader_epoch_indices(100, 1, 1, 0, 1, b), TSR_OK);
  ck_assert(memcmp(a, b, sizeof a) == 0);
  ck_assert_int_eq(tsr_loader_epoch_indices(100, 1, 2, 0, 1, c), TSR_OK);
  ck_assert_msg(memcmp(a, c, sizeof a) != 0, "epochs 1 and 2 have the same order");
  ck_assert_int_eq(tsr_loader_epoch_indices(100, 2, 1, 0, 1, c), TSR_OK);
  ck_assert_msg(memcmp(a, c, sizeof a) != 0, "seeds 1 and 2 have the same order");
  /* rank 1 of 2 takes positions 1, 3, 5, ... of the common order */
  int64_t r1[50];
  ck_assert_int_eq(tsr_loader_epoch_indices(100, 1, 1, 1, 2, r1), TSR_OK);
  for (int i = 0; i < 50; i++) ck_assert(r1[i] == a[2 * i + 1]);
  ck_assert_int_eq(tsr_loader_epoch_indices(100, 1, 1, 2, 2, r1), TSR_ERR_ARG);
}
END_TEST

/* tt_tmpdir makes a new folder at each call: one per test, kept here. */
static char dir[64];

static char *tmp(const char *name) {
  if (!*dir) snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  char *p;
  ck_assert(asprintf(&p, "%s/%s", dir, name) > 0);
  return p;
}

/* [n, c, 4, 4] inputs and [n, 1, 4, 4] targets whose values encode (file tag, sample, element). */
static void write_pair_h5(const char *path, const char *xn, const char *yn, int n, int c, float tag, hid_t type) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ck_assert(f >= 0);
  hsize_t dx[4] = {n, c, 4, 4}, dy[4] = {n, 1, 4, 4};
  const char *names[2] = {xn, yn};
  hsize_t *dims[2] = {dx, dy};
  for (int k = 0; k < 2; k++) {
    size_t m = dims[k][0] * dims[k][1] * 16;
    float *buf = malloc(sizeof(float) * m);
    for (size_t i = 0; i < m; i++) buf[i] = tag + (float)(i % 97) * (k ? -1 : 1) + (float)(i / 16 % 3);
    hid_t sp = H5Screate_simple(4, dims[k], NULL);
    hid_t ds = H5Dcreate2(f, names[k], type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    H5Dclose(ds), H5Sclose(sp);
    free(buf);
  }
  H5Fclose(f);
}

static tsr_loader *open_ok(const char *spec, int standardize) {
  tsr_loader_opts o;
  tsr_loader_opts_default(&o);
  o.standardize = standardize;
  tsr_loader *l;
  ck_assert_msg(tsr_loader_open(&l, spec, &o) == TSR_OK, "%s: %s", spec, tsr_last_error());
  return l;
}

START_TEST(many_files_globs_and_npy_read_like_the_files) {
  char *a = tmp("part.rank0.h5"), *b = tmp("part.rank1.h5"), *list, *glob;
  write_pair_h5(a, "cbed", "potential", 5, 2, 0, H5T_IEEE_F32LE);
  write_pair_h5(b, "cbed", "potential", 3, 2, 1000, H5T_IEEE_F32LE);
  ck_assert(asprintf(&list, "%s,%s", a, b) > 0 && asprintf(&glob, "%s/part.rank*.h5", dir) > 0);
  tsr_loader *l1 = open_ok(list, 0), *l2 = open_ok(glob, 0);
  ck_assert_int_eq(tsr_loader_size(l1), 8);
  ck_assert_int_eq(tsr_loader_size(l2), 8);
  ck_assert_int_eq(tsr_loader_num_files(l2), 2);
  tsr_dataset *d;
  ck_assert_int_eq(tsr_dataset_open(&d, b), TSR_OK); /* auto-detects cbed / potential */
  float x[32], y[16], xr[32], yr[16], x2[32];
  ck_assert_int_eq(tsr_dataset_read(d, 2, xr, yr), TSR_OK);
  ck_assert_int_eq(tsr_loader_read(l1, 7, x, y), TSR_OK);
  ck_assert_int_eq(tsr_loader_read(l2, 7, x2, NULL), TSR_OK);
  ck_assert(memcmp(x, xr, sizeof x) == 0 && memcmp(y, yr, sizeof y) == 0 && memcmp(x2, xr, sizeof x) == 0);
  tsr_dataset_close(d);

  /* the same data as a .npy pair and as a folder */
  float *all_x = malloc(sizeof(float) * 8 * 32), *all_y = malloc(sizeof(float) * 8 * 16);
  for (int i = 0; i < 8; i++) ck_assert_int_eq(tsr_loader_read(l1, i, all_x + 32 * i, all_y + 16 * i), TSR_OK);
  tsr_shape sx = {.ndim = 4, .dims = {8, 2, 4, 4}}, sy = {.ndim = 4, .dims = {8, 1, 4, 4}};
  char *xp = tmp("inputs.npy"), *yp = tmp("targets.npy"), *pair;
  ck_assert_int_eq(tsr_npy_write(xp, &sx, all_x), TSR_OK);
  ck_assert_int_eq(tsr_npy_write(yp, &sy, all_y), TSR_OK);
  ck_assert(asprintf(&pair, "%s:%s", xp, yp) > 0);
  tsr_loader *l3 = open_ok(pair, 0), *l4 = open_ok(dir, 0);
  for (int i = 0; i < 8; i++) {
    ck_assert_int_eq(tsr_loader_read(l3, i, x, y), TSR_OK);
    ck_assert(memcmp(x, all_x + 32 * i, sizeof x) == 0 && memcmp(y, all_y + 16 * i, sizeof y) == 0);
    ck_assert_int_eq(tsr_loader_read(l4, i, x, NULL), TSR_OK);
    ck_assert(memcmp(x, all_x + 32 * i, sizeof x) == 0);
  }
  ck_assert_int_eq(tsr_loader_read(l3, 8, x, y), TSR_ERR_ARG);
  tsr_loader_close(l1), tsr_loader_close(l2), tsr_loader_close(l3), tsr_loader_close(l4);
  free(a), free(b), free(list), free(glob), free(all_x), free(all_y), free(xp), free(yp), free(pair);
}
END_TEST

START_TEST(standardised_inputs_have_mean_zero_std_one_per_channel) {
  char *a = tmp("std.h5");
  write_pair_h5(a, "inputs", "targets", 40, 3, 5, H5T_IEEE_F32LE);
  tsr_loader *l = open_ok(a, 1), *raw = open_ok(a, 0);
  double s1[3] = {0}, s2[3] = {0};
  float x[48], y[16], yr[16];
  for (int i = 0; i < 40; i++) {
    ck_assert_int_eq(tsr_loader_read(l, i, x, y), TSR_OK);
    ck_assert_int_eq(tsr_loader_read(raw, i, NULL, yr), TSR_OK);
    ck_assert(memcmp(y, yr, sizeof y) == 0); /* targets are untouched */
    for (int c = 0; c < 3; c++)
      for (int p = 0; p < 16; p++) s1[c] += x[16 * c + p], s2[c] += (double)x[16 * c + p] * x[16 * c + p];
  }
  for (int c = 0; c < 3; c++) {
    double m = s1[c] / 640, v = s2[c] / 640 - m * m;
    ck_assert_msg(fabs(m) < 1e-5 && fabs(v - 1) < 1e-4, "channel %d: mean %g var %g", c, m, v);
  }
  /* NULL statistics turn standardisation off (tessera-train hands them to the trainer instead) */
  const double *mean, *sd;
  float xr[48];
  ck_assert_int_eq(tsr_loader_set_stats(l, NULL, NULL, 0), TSR_OK);
  tsr_loader_stats(l, &mean, &sd);
  ck_assert(!mean && !sd);
  ck_assert_int_eq(tsr_loader_read(l, 3, x, NULL), TSR_OK);
  ck_assert_int_eq(tsr_loader_read(raw, 3, xr, NULL), TSR_OK);
  ck_assert(memcmp(x, xr, sizeof x) == 0);
  tsr_loader_close(l), tsr_loader_close(raw);
  free(a);
}
END_TEST

/* Opening `spec` must fail with `st`; the message must contain both fragments. */
static void expect_error(const char *spec, const char *in_name, tsr_status st, const char *f1, const char *f2) {
  tsr_loader_opts o;
  tsr_loader_opts_default(&o);
  o.input_name = in_name;
  tsr_loader *l = (tsr_loader *)1;
  tsr_status s = tsr_loader_open(&l, spec, &o);
  const char *msg = tsr_last_error();
  ck_assert_msg(s == st, "%s: status %d, expected %d (%s)", spec, s, st, msg);
  ck_assert(l == NULL);
  ck_assert_msg(strstr(msg, f1), "message lacks '%s': %s", f1, msg);
  if (f2) ck_assert_msg(strstr(msg, f2), "message lacks '%s': %s", f2, msg);
}

START_TEST(bad_data_is_reported_with_the_file) {
  char *good = tmp("good.h5"), *other = tmp("other.h5"), *garbage = tmp("garbage.h5"), *spec;
  write_pair_h5(good, "inputs", "targets", 4, 2, 0, H5T_IEEE_F32LE);
  /* missing file, in a list */
  ck_assert(asprintf(&spec, "%s,%s/absent.h5", good, dir) > 0);
  expect_error(spec, NULL, TSR_ERR_IO, "absent.h5", "No such file");
  free(spec);
  /* wrong dataset name given */
  expect_error(good, "cbed", TSR_ERR_FORMAT, "good.h5", "'cbed' not found");
  /* a second file with other per-sample shapes */
  write_pair_h5(other, "inputs", "targets", 4, 3, 0, H5T_IEEE_F32LE);
  ck_assert(asprintf(&spec, "%s,%s", good, other) > 0);
  expect_error(spec, NULL, TSR_ERR_SHAPE, "other.h5", "differ from");
  free(spec);
  /* integer values */
  write_pair_h5(other, "inputs", "targets", 4, 2, 0, H5T_STD_I16LE);
  expect_error(other, NULL, TSR_ERR_FORMAT, "other.h5", "integer values");
  /* garbage bytes (corrupted) and a truncated copy */
  FILE *f = fopen(garbage, "wb");
  for (int i = 0; i < 2000; i++) fputc(i * 7 & 255, f);
  fclose(f);
  expect_error(garbage, NULL, TSR_ERR_FORMAT, "garbage.h5", "not an HDF5 file");
  f = fopen(good, "rb");
  char buf[8192];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  f = fopen(garbage, "wb");
  fwrite(buf, 1, n / 2, f);
  fclose(f);
  expect_error(garbage, NULL, TSR_ERR_FORMAT, "garbage.h5", "truncated");
  /* a glob with no match, a lone .npy */
  ck_assert(asprintf(&spec, "%s/nothing*.h5", dir) > 0);
  expect_error(spec, NULL, TSR_ERR_IO, "nothing*.h5", "no file matches");
  free(spec);
  expect_error("x.npy", NULL, TSR_ERR_ARG, "x.npy", "pair");
  /* NaN in a .npy pair: reported at open with the file and the element */
  float x[2 * 16 * 2], y[16 * 2];
  for (int i = 0; i < 64; i++) x[i] = (float)i;
  for (int i = 0; i < 32; i++) y[i] = (float)i;
  y[21] = NAN;
  tsr_shape sx = {.ndim = 4, .dims = {2, 2, 4, 4}}, sy = {.ndim = 4, .dims = {2, 1, 4, 4}}, s3 = {.ndim = 3, .dims = {2, 4, 4}};
  char *xp = tmp("nx.npy"), *yp = tmp("ny.npy");
  ck_assert_int_eq(tsr_npy_write(xp, &sx, x), TSR_OK);
  ck_assert_int_eq(tsr_npy_write(yp, &sy, y), TSR_OK);
  ck_assert(asprintf(&spec, "%s:%s", xp, yp) > 0);
  expect_error(spec, NULL, TSR_ERR_NUMERIC, "ny.npy", "NaN at element 21");
  ck_assert_int_eq(tsr_npy_write(yp, &s3, y), TSR_OK); /* wrong rank */
  expect_error(spec, NULL, TSR_ERR_SHAPE, "ny.npy", "3 dimensions");
  free(spec), free(xp), free(yp), free(good), free(other), free(garbage);
}
END_TEST

START_TEST(nan_in_hdf5_sample_is_reported_on_read) {
  char *p = tmp("nan.h5");
  write_pair_h5(p, "cbed", "potential", 4, 2, 0, H5T_IEEE_F32LE);
  hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT), ds = H5Dopen2(f, "cbed", H5P_DEFAULT), fs = H5Dget_space(ds);
  hsize_t start[4] = {3, 1, 2, 2}, cnt[4] = {1, 1, 1, 1}, one = 1;
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
  hid_t ms = H5Screate_simple(1, &one, NULL);
  float nan = NAN;
  ck_assert(H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, &nan) >= 0);
  H5Sclose(ms), H5Sclose(fs), H5Dclose(ds), H5Fclose(f);
  tsr_loader *l = open_ok(p, 0);
  float x[32], y[16];
  ck_assert_int_eq(tsr_loader_read(l, 2, x, y), TSR_OK);
  ck_assert_int_eq(tsr_loader_read(l, 3, x, y), TSR_ERR_NUMERIC);
  ck_assert_msg(strstr(tsr_last_error(), "nan.h5") && strstr(tsr_last_error(), "'cbed' sample 3"), "%s", tsr_last_error());
  tsr_loader_close(l);
  free(p);
}
END_TEST

/* Chunked datasets with no chunk written: a file of a few KiB can declare any shape. */
static void write_declared_h5(const char *path, const hsize_t *dx, const hsize_t *dy) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ck_assert(f >= 0);
  const char *names[2] = {"inputs", "targets"};
  const hsize_t *dims[2] = {dx, dy};
  for (int k = 0; k < 2; k++) {
    hsize_t chunk[4] = {dims[k][0] < 1024 ? dims[k][0] : 1024, 1, dims[k][2] < 1024 ? dims[k][2] : 1024,
                        dims[k][3] < 1024 ? dims[k][3] : 1024};
    hid_t sp = H5Screate_simple(4, dims[k], NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ck_assert(H5Pset_chunk(dcpl, 4, chunk) >= 0);
    hid_t ds = H5Dcreate2(f, names[k], H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ck_assert(ds >= 0);
    H5Dclose(ds), H5Pclose(dcpl), H5Sclose(sp);
  }
  H5Fclose(f);
}

/* Declared shapes that no memory holds, refused at open naming the file, before any buffer is
 * allocated for them (the address space is capped: an allocation would fail, not succeed lazily). */
START_TEST(absurd_declared_shapes_are_refused_before_allocating) {
  tt_cap_address_space();
  ck_assert_int_eq(tsr_memory_set_limit(1ll << 30), TSR_OK);
  /* one sample of 2^38 floats: 1 TiB */
  char *vast = tmp("vast.h5"), *many = tmp("many.h5"), *npy = tmp("huge.npy"), *ok = tmp("ok.npy"), *pair;
  hsize_t dx[4] = {2, 1, 1 << 20, 1 << 18}, dy[4] = {2, 1, 1, 1};
  write_declared_h5(vast, dx, dy);
  struct stat st;
  ck_assert(stat(vast, &st) == 0 && st.st_size < 65536);
  tsr_dataset *d = (tsr_dataset *)1;
  ck_assert_int_eq(tsr_dataset_open(&d, vast), TSR_ERR_NOMEM);
  ck_assert_ptr_null(d);
  const char *e = tsr_last_error();
  ck_assert_msg(strstr(e, "vast.h5") && strstr(e, "'inputs'") && strstr(e, "[2, 1, 1048576, 262144]") &&
                    strstr(e, "1099511627776 bytes") && strstr(e, "1073741824 bytes"),
                "%s", e);
  expect_error(vast, NULL, TSR_ERR_NOMEM, "vast.h5", "[2, 1, 1048576, 262144]");
  /* 2^40 samples of one float each: their epoch order takes 8 TiB */
  hsize_t dn[4] = {1ull << 40, 1, 1, 1};
  write_declared_h5(many, dn, dn);
  expect_error(many, NULL, TSR_ERR_NOMEM, "many.h5", "1099511627776 samples");
  int64_t idx[4];
  ck_assert_int_eq(tsr_loader_epoch_indices(1ll << 40, 1, 1, 0, 1, idx), TSR_ERR_NOMEM);
  /* a .npy header promising 2^40 floats, with none after it */
  FILE *f = fopen(npy, "wb");
  const char *head = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1, 1, 1), }";
  char hdr[128];
  memset(hdr, ' ', sizeof hdr);
  memcpy(hdr, head, strlen(head));
  hdr[sizeof hdr - 10 - 1] = '\n';
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, sizeof hdr - 10, 0};
  fwrite(pre, 1, 10, f), fwrite(hdr, 1, sizeof hdr - 10, f);
  fclose(f);
  tsr_shape s1 = {.ndim = 4, .dims = {1, 1, 1, 1}};
  float one = 1;
  ck_assert_int_eq(tsr_npy_write(ok, &s1, &one), TSR_OK);
  ck_assert(asprintf(&pair, "%s:%s", npy, ok) > 0);
  expect_error(pair, NULL, TSR_ERR_FORMAT, "huge.npy", "promises 4398046511104 data bytes");
  ck_assert_int_eq(tsr_memory_set_limit(0), TSR_OK);
  free(vast), free(many), free(npy), free(ok), free(pair);
}
END_TEST

static Suite *make_loader_suite(void) {
  Suite *s = suite_create("loader");
  TCase *t = tcase_create("order");
  tcase_add_test(t, shards_of_n_ranks_cover_every_sample_once);
  tcase_add_test(t, epoch_order_depends_on_seed_and_epoch_only);
  suite_add_tcase(s, t);
  TCase *f = tcase_create("files");
  tcase_add_test(f, many_files_globs_and_npy_read_like_the_files);
  tcase_add_test(f, standardised_inputs_have_mean_zero_std_one_per_channel);
  tcase_add_test(f, bad_data_is_reported_with_the_file);
  tcase_add_test(f, nan_in_hdf5_sample_is_reported_on_read);
  tcase_add_test(f, absurd_declared_shapes_are_refused_before_allocating);
  suite_add_tcase(s, f);
  return s;
}

TT_MAIN(make_loader_suite)

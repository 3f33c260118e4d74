/* .npy files: round trip, files written by numpy (skipped without it: exit status 77), version 2
 * and 3 headers, malformed headers and files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tessera.h>

#include "testutil.h"

#define PYTHON "/usr/bin/python3"

static int python_has(const char *module) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, PYTHON " -c 'import %s' >/dev/null 2>&1", module);
  return access(PYTHON, X_OK) == 0 && system(cmd) == 0;
}

START_TEST(test_npy_round_trip_keeps_shape_and_bits) {
  char dir[64];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  const int64_t shapes[][5] = {{1, 7}, {2, 3, 5}, {4, 2, 3, 4, 5}, {0}, {1, 0}};
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
    tsr_shape s = tsr_shape_make((int)shapes[c][0], &shapes[c][1]);
    size_t n = (size_t)tsr_shape_numel(&s);
    float *x = malloc((n ? n : 1) * sizeof *x);
    tt_fill_uniform(x, n, 10 + c, -3, 3);
    const char *p = tt_path_in(dir, "a.npy");
    ck_assert_msg(tsr_npy_write(p, &s, x) == TSR_OK, "%s", tsr_last_error());
    FILE *f = fopen(p, "rb");
    unsigned char head[10];
    ck_assert_int_eq(fread(head, 1, 10, f), 10);
    fclose(f);
    ck_assert_msg((10 + head[8] + 256 * head[9]) % 64 == 0, "data is not 64-byte aligned");
    tsr_shape r;
    float *y = NULL;
    ck_assert_msg(tsr_npy_read(p, &r, &y) == TSR_OK, "%s", tsr_last_error());
    ck_assert_int_eq(r.ndim, s.ndim);
    for (int d = 0; d < s.ndim; d++) ck_assert_int_eq(r.dims[d], s.dims[d]);
    ck_assert(n == 0 || memcmp(x, y, n * sizeof *x) == 0);
    ck_assert_int_eq(access(tt_path_in(dir, "a.npy.tmp"), F_OK), -1);
    free(x);
    free(y);
  }
}
END_TEST

/* numpy writes float64 [2, 3, 4] = arange / 7; we read it as float, then write a file numpy reads. */
START_TEST(test_npy_interoperates_with_numpy) {
  if (!python_has("numpy")) {
    tt_skip("numpy interoperability not checked: " PYTHON " with numpy not found (apt-get install python3-numpy)");
    return;
  }
  char dir[64];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           PYTHON " -c 'import numpy as np; np.save(\"%s/np.npy\", np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7)'",
           dir);
  ck_assert_int_eq(system(cmd), 0);
  tsr_shape s;
  float *x = NULL;
  ck_assert_msg(tsr_npy_read(tt_path_in(dir, "np.npy"), &s, &x) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(s.ndim, 3);
  ck_assert(s.dims[0] == 2 && s.dims[1] == 3 && s.dims[2] == 4);
  double ref[24];
  for (int i = 0; i < 24; i++) ref[i] = i / 7.0;
  tt_assert_close(x, ref, 24, 1e-7, 1e-7, "float64 read from numpy");

  for (int i = 0; i < 24; i++) x[i] = (float)(i * 0.25 - 1);
  s = tsr_shape_make(2, (int64_t[]){4, 6});
  ck_assert(tsr_npy_write(tt_path_in(dir, "ours.npy"), &s, x) == TSR_OK);
  snprintf(cmd, sizeof cmd,
           PYTHON " -c 'import numpy as np, sys; a = np.load(\"%s/ours.npy\"); "
                  "sys.exit(0 if a.dtype == np.float32 and a.shape == (4, 6) and a.flags.c_contiguous and "
                  "(a.ravel() == np.arange(24) * 0.25 - 1).all() else 1)'",
           dir);
  ck_assert_msg(system(cmd) == 0, "numpy does not read our file back as written");
  free(x);
}
END_TEST

/* A hand-made .npy: header dict padded to 64 bytes, then `nbytes` of data; the file is cut at
 * `cut` bytes when cut > 0. */
static const char *make_npy(const char *path, int major, const char *dict, const void *data, size_t nbytes, size_t cut) {
  size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
  size_t total = (pre + dl + 1 + 63) / 64 * 64, hlen = total - pre;
  unsigned char *b = calloc(1, total + nbytes);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)major;
  for (size_t i = 0; i < pre - 8; i++) b[8 + i] = (unsigned char)(hlen >> (8 * i));
  memcpy(b + pre, dict, dl);
  memset(b + pre + dl, ' ', hlen - dl - 1);
  b[total - 1] = '\n';
  if (nbytes) memcpy(b + total, data, nbytes);
  FILE *f = fopen(path, "wb");
  fwrite(b, 1, cut ? cut : total + nbytes, f);
  fclose(f);
  free(b);
  return path;
}

START_TEST(test_npy_reads_version_2_and_3_headers) {
  char dir[64];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  const double d[3] = {1.5, -2.25, 1e-3};
  for (int major = 2; major <= 3; major++) {
    const char *p = make_npy(tt_path_in(dir, "v.npy"), major, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
                             d, sizeof d, 0);
    tsr_shape s;
    float *x = NULL;
    ck_assert_msg(tsr_npy_read(p, &s, &x) == TSR_OK, "version %d: %s", major, tsr_last_error());
    ck_assert(s.ndim == 1 && s.dims[0] == 3);
    tt_assert_close(x, d, 3, 1e-9, 1e-7, "version 2/3 values");
    free(x);
  }
}
END_TEST

static const struct badnpy {
  const char *what, *dict;
  int major;
  size_t nbytes, cut;
  tsr_status status;
  const char *expect;
} bad_npy[] = {
    {"fortran order", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 1, 16, 0, TSR_ERR_FORMAT, "fortran_order"},
    {"integer dtype", "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", 1, 8, 0, TSR_ERR_FORMAT, "'<i4'"},
    {"big-endian dtype", "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 1, 8, 0, TSR_ERR_FORMAT, "'>f4'"},
    {"truncated data", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 1, 8, 0, TSR_ERR_FORMAT, "truncated"},
    {"truncated header", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 1, 16, 30, TSR_ERR_FORMAT,
     "truncated header"},
    {"trailing bytes", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 1, 8, 0, TSR_ERR_FORMAT, "longer"},
    {"six dimensions", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1), }", 1, 4, 0,
     TSR_ERR_FORMAT, "dimensions"},
    {"missing shape", "{'descr': '<f4', 'fortran_order': False, }", 1, 4, 0, TSR_ERR_FORMAT, "lacks 'shape'"},
    {"shape not a tuple", "{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", 1, 8, 0, TSR_ERR_FORMAT, "'shape'"},
    {"unknown version", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4, 4, 0, TSR_ERR_FORMAT, "version 4.0"},
};

START_TEST(test_npy_rejects_malformed_file) {
  const struct badnpy *b = &bad_npy[_i];
  char dir[64];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  float zeros[8] = {0};
  const char *p = make_npy(tt_path_in(dir, "bad.npy"), b->major, b->dict, zeros, b->nbytes, b->cut);
  tsr_shape s;
  float *x = (float *)zeros;
  tsr_status st = tsr_npy_read(p, &s, &x);
  ck_assert_msg(st == b->status, "%s: status %s (%s)", b->what, tsr_status_name(st), tsr_last_error());
  ck_assert_msg(x == zeros, "%s: *data changed on error", b->what);
  ck_assert_msg(strstr(tsr_last_error(), p) != NULL, "%s: message lacks the file: %s", b->what, tsr_last_error());
  ck_assert_msg(strstr(tsr_last_error(), b->expect) != NULL, "%s: message lacks \"%s\": %s", b->what, b->expect,
                tsr_last_error());
}
END_TEST

START_TEST(test_npy_rejects_bad_magic_and_missing_file) {
  char dir[64];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  const char *p = tt_path_in(dir, "text.npy");
  FILE *f = fopen(p, "w");
  fputs("this is not a numpy file at all\n", f);
  fclose(f);
  tsr_shape s;
  float *x = NULL;
  ck_assert_int_eq(tsr_npy_read(p, &s, &x), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(tsr_last_error(), "bad magic") && strstr(tsr_last_error(), p), "%s", tsr_last_error());
  p = tt_path_in(dir, "absent.npy");
  ck_assert_int_eq(tsr_npy_read(p, &s, &x), TSR_ERR_IO);
  ck_assert_msg(strstr(tsr_last_error(), p), "%s", tsr_last_error());
}
END_TEST

static Suite *make_npy_suite(void) {
  Suite *s = suite_create("npy");
  TCase *npy = tcase_create("npy");
  tcase_add_test(npy, test_npy_round_trip_keeps_shape_and_bits);
  tcase_add_test(npy, test_npy_interoperates_with_numpy);
  tcase_add_test(npy, test_npy_reads_version_2_and_3_headers);
  tcase_add_loop_test(npy, test_npy_rejects_malformed_file, 0, (int)(sizeof bad_npy / sizeof bad_npy[0]));
  tcase_add_test(npy, test_npy_rejects_bad_magic_and_missing_file);
  suite_add_tcase(s, npy);
  return s;
}

TT_MAIN(make_npy_suite)

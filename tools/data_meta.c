/* Metadata of HDF5 data sets read by the tools (data_meta.h). Called before any task runs: the
 * library's HDF5 calls (in load tasks) are then idle. HDF5's own error printing is off meanwhile,
 * since a missing dataset or attribute is an answer here, not an error. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_meta.h"

struct quiet {
  H5E_auto2_t fn;
  void *data;
};

static void quiet_on(struct quiet *q) {
  H5Eget_auto2(H5E_DEFAULT, &q->fn, &q->data);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void quiet_off(const struct quiet *q) { H5Eset_auto2(H5E_DEFAULT, q->fn, q->data); }

/* Rows of the first of the datasets named that exists, or -1. */
static int64_t rows(hid_t f, const char *const *names) {
  for (; *names; names++) {
    if (H5Lexists(f, *names, H5P_DEFAULT) <= 0) continue;
    hid_t d = H5Dopen2(f, *names, H5P_DEFAULT), s = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t dims[8];
    int nd = s >= 0 ? H5Sget_simple_extent_dims(s, dims, NULL) : -1;
    if (s >= 0) H5Sclose(s);
    if (d >= 0) H5Dclose(d);
    return nd >= 1 ? (int64_t)dims[0] : -1;
  }
  return -1;
}

/* Member pixel_A (double[2], A per target pixel in x and y) of each row of tessera-cbed's compound
 * dataset `meta` [N] into px, py from row `skip` on, at most `want` rows; the row count, -1 when the
 * file has no such member, -2 when it cannot be read. */
static int64_t meta_pixels(hid_t f, int64_t skip, int64_t want, double *px, double *py) {
  if (H5Lexists(f, "meta", H5P_DEFAULT) <= 0) return -1;
  hid_t d = H5Dopen2(f, "meta", H5P_DEFAULT), ft = d >= 0 ? H5Dget_type(d) : -1;
  int has = ft >= 0 && H5Tget_class(ft) == H5T_COMPOUND && H5Tget_member_index(ft, "pixel_A") >= 0;
  hid_t sp = has ? H5Dget_space(d) : -1;
  hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
  hsize_t two = 2;
  hid_t arr = has ? H5Tarray_create2(H5T_NATIVE_DOUBLE, 1, &two) : -1;
  hid_t mt = arr >= 0 ? H5Tcreate(H5T_COMPOUND, 2 * sizeof(double)) : -1;
  double *buf = mt >= 0 && n > 0 ? malloc(sizeof(double) * 2 * (size_t)n) : NULL;
  herr_t e = buf && H5Tinsert(mt, "pixel_A", 0, arr) >= 0 ? H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) : -1;
  for (int64_t i = skip; e >= 0 && i < n && i - skip < want; i++)
    px[i - skip] = buf[2 * i], py[i - skip] = buf[2 * i + 1];
  free(buf);
  if (mt >= 0) H5Tclose(mt);
  if (arr >= 0) H5Tclose(arr);
  if (sp >= 0) H5Sclose(sp);
  if (ft >= 0) H5Tclose(ft);
  if (d >= 0) H5Dclose(d);
  return !has ? -1 : n == 0 ? 0 : e < 0 ? -2 : (int64_t)n;
}

/* The file's pixel sizes into px, py from row `skip` on, at most `want` rows; returns the file's
 * sample count, or -1 with the reason in why. Looked for in this order: dataset pixel_size_A [N, 2],
 * member pixel_A of tessera-cbed's per-sample record `meta`, root attribute pixel_size_A. */
static int64_t file_pixels(hid_t f, const char *path, int64_t skip, int64_t want, double *px, double *py, char *why,
                           size_t cap) {
  static const char *const per_sample[] = {"pixel_size_A", NULL}, *const targets[] = {"targets", "potential", NULL};
  int64_t n = rows(f, per_sample);
  if (n >= 0) {
    hid_t d = H5Dopen2(f, "pixel_size_A", H5P_DEFAULT), sp = d >= 0 ? H5Dget_space(d) : -1;
    int two = sp >= 0 && H5Sget_simple_extent_npoints(sp) == 2 * n; /* [N, 2] */
    double *buf = n > 0 && two ? malloc(sizeof(double) * 2 * n) : NULL;
    herr_t e = buf ? H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) : -1;
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    for (int64_t i = skip; e >= 0 && i < n && i - skip < want; i++)
      px[i - skip] = buf[2 * i], py[i - skip] = buf[2 * i + 1];
    free(buf);
    if (e < 0) snprintf(why, cap, "%s: dataset pixel_size_A is not [N, 2] numbers", path);
    return e < 0 ? -1 : n;
  }
  n = meta_pixels(f, skip, want, px, py);
  if (n == -2) snprintf(why, cap, "%s: member pixel_A of dataset meta cannot be read as 2 numbers", path);
  if (n != -1) return n < 0 ? -1 : n;
  n = rows(f, targets);
  if (n < 0) {
    snprintf(why, cap, "%s: no dataset targets or potential to count its samples", path);
    return -1;
  }
  double v[2] = {0, 0};
  hid_t a = H5Aexists(f, "pixel_size_A") > 0 ? H5Aopen(f, "pixel_size_A", H5P_DEFAULT) : -1;
  hid_t s = a >= 0 ? H5Aget_space(a) : -1;
  hssize_t count = s >= 0 ? H5Sget_simple_extent_npoints(s) : 0;
  herr_t e = a >= 0 && (count == 1 || count == 2) ? H5Aread(a, H5T_NATIVE_DOUBLE, v) : -1;
  if (s >= 0) H5Sclose(s);
  if (a >= 0) H5Aclose(a);
  if (e < 0 || !(v[0] > 0) || (count == 2 && !(v[1] > 0))) {
    snprintf(why, cap,
             "%s holds no pixel size (dataset or attribute pixel_size_A, or member pixel_A of dataset meta; "
             "tessera-cbed's fov_requested_A is the field of view asked for, not the simulated cell)",
             path);
    return -1;
  }
  for (int64_t i = skip; i < n && i - skip < want; i++) px[i - skip] = v[0], py[i - skip] = count == 2 ? v[1] : v[0];
  return n;
}

int data_pixel_sizes(const tsr_loader *l, int64_t first, int64_t n, double *px, double *py, char *why, size_t cap) {
  struct quiet q;
  quiet_on(&q);
  int64_t base = 0, done = 0;
  int ok = 1;
  for (int i = 0; ok && i < tsr_loader_num_files(l) && done < n; i++) {
    const char *path = tsr_loader_file(l, i);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
      snprintf(why, cap, "%s is not an HDF5 file (no pixel size)", path);
      ok = 0;
      break;
    }
    int64_t skip = first + done - base; /* rows of this file before the next sample wanted */
    int64_t rows_here = file_pixels(f, path, skip, n - done, px + done, py + done, why, cap);
    H5Fclose(f);
    if (rows_here < 0)
      ok = 0;
    else if (rows_here > skip)
      done += rows_here - skip < n - done ? rows_here - skip : n - done;
    base += rows_here;
  }
  if (ok && done < n) snprintf(why, cap, "the data files hold fewer samples than the loader"), ok = 0;
  quiet_off(&q);
  return ok;
}

void data_target_units(const tsr_loader *l, char *buf, size_t cap) {
  struct quiet q;
  quiet_on(&q);
  snprintf(buf, cap, "units of the targets");
  hid_t f = tsr_loader_num_files(l) > 0 ? H5Fopen(tsr_loader_file(l, 0), H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
  if (f >= 0 && H5Aexists(f, "target_units") > 0) {
    hid_t a = H5Aopen(f, "target_units", H5P_DEFAULT), t = H5Aget_type(a), mem = H5Tcopy(H5T_C_S1);
    char text[256] = "";
    H5Tset_size(mem, sizeof text - 1);
    if (H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t) && H5Aread(a, mem, text) >= 0 && *text)
      snprintf(buf, cap, "%s", text);
    H5Tclose(mem), H5Tclose(t), H5Aclose(a);
  } else if (f >= 0 && H5Aexists(f, "standardize_target") > 0) {
    hid_t a = H5Aopen(f, "standardize_target", H5P_DEFAULT);
    int v = 1;
    if (H5Aread(a, H5T_NATIVE_INT, &v) >= 0)
      snprintf(buf, cap, "%s", v ? "standardised per sample: mean 0, std 1" : "V A");
    H5Aclose(a);
  }
  if (f >= 0) H5Fclose(f);
  quiet_off(&q);
}

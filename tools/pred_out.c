/* tessera-predict's HDF5 output and metrics (see pred_out.h). The dataset is contiguous (a rank's
 * part may hold no sample, and chunks cannot be larger than a fixed dataset); the metric sums travel
 * from the parts to the merged file as attributes, so no reduction across ranks is needed. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pred_out.h"

enum { MERGE_BLOCK = 64 }; /* samples copied at a time */

void pred_metrics_init(struct pred_metrics *m) { *m = (struct pred_metrics){.lo = INFINITY, .hi = -INFINITY}; }

void pred_metrics_add(struct pred_metrics *m, const float *y, const float *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double d = (double)p[i] - y[i];
    m->sse += d * d;
    m->lo = fmin(m->lo, y[i]), m->hi = fmax(m->hi, y[i]);
  }
  m->count += (int64_t)n;
}

double pred_metrics_mse(const struct pred_metrics *m) { return m->count ? m->sse / m->count : NAN; }

double pred_metrics_psnr(const struct pred_metrics *m) {
  double r = m->hi - m->lo;
  return 10 * log10(r * r / pred_metrics_mse(m));
}

int pred_out_create(struct pred_out *o, const char *path, int64_t n, int c, int h, int w, char *err, size_t cap) {
  *o = (struct pred_out){.file = -1, .dset = -1, .n = n, .c = c, .h = h, .w = w};
  snprintf(o->path, sizeof o->path, "%s", path);
  hsize_t dims[4] = {(hsize_t)n, (hsize_t)c, (hsize_t)h, (hsize_t)w};
  o->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t sp = H5Screate_simple(4, dims, NULL);
  if (o->file >= 0 && sp >= 0)
    o->dset = H5Dcreate2(o->file, "predictions", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (sp >= 0) H5Sclose(sp);
  if (o->dset >= 0) return 0;
  snprintf(err, cap, "%s: cannot create the output file", path);
  if (o->file >= 0) H5Fclose(o->file), remove(path);
  o->file = -1;
  return -1;
}

/* Rows [first, first + count) of dataset d: read into or written from buf. */
static int rows(hid_t d, int64_t first, int count, const int dims[3], float *buf, int write) {
  if (count == 0) return 1;
  hsize_t start[4] = {(hsize_t)first, 0, 0, 0}, cnt[4] = {(hsize_t)count, dims[0], dims[1], dims[2]};
  hid_t fs = H5Dget_space(d), ms = H5Screate_simple(4, cnt, NULL);
  int ok = fs >= 0 && ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL) >= 0 &&
           (write ? H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf)
                  : H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf)) >= 0;
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  return ok;
}

int pred_out_write(struct pred_out *o, int64_t first, int count, const float *p, char *err, size_t cap) {
  const int dims[3] = {o->c, o->h, o->w};
  if (rows(o->dset, first, count, dims, (float *)p, 1)) return 0;
  snprintf(err, cap, "%s: cannot write samples %lld to %lld", o->path, (long long)first, (long long)first + count - 1);
  return -1;
}

static int attr_double(hid_t obj, const char *name, double v, int write, double *out) {
  hid_t a = -1, sp = -1;
  int ok;
  if (write) {
    sp = H5Screate(H5S_SCALAR);
    a = sp >= 0 ? H5Acreate2(obj, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT) : -1;
    ok = a >= 0 && H5Awrite(a, H5T_NATIVE_DOUBLE, &v) >= 0;
  } else {
    a = H5Aexists(obj, name) > 0 ? H5Aopen(obj, name, H5P_DEFAULT) : -1;
    ok = a >= 0 && H5Aread(a, H5T_NATIVE_DOUBLE, out) >= 0;
  }
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  return ok;
}

int pred_out_close(struct pred_out *o, const struct pred_metrics *m, char *err, size_t cap) {
  int ok = 1;
  if (m) {
    double mse = pred_metrics_mse(m), psnr = pred_metrics_psnr(m);
    ok = attr_double(o->dset, "sse", m->sse, 1, NULL) && attr_double(o->dset, "count", (double)m->count, 1, NULL) &&
         attr_double(o->dset, "target_min", m->lo, 1, NULL) && attr_double(o->dset, "target_max", m->hi, 1, NULL) &&
         attr_double(o->dset, "mse", mse, 1, NULL) && attr_double(o->dset, "psnr", psnr, 1, NULL);
  }
  if (H5Dclose(o->dset) < 0) ok = 0;
  if (H5Fclose(o->file) < 0) ok = 0;
  o->dset = o->file = -1;
  if (!ok) snprintf(err, cap, "%s: cannot write or close the output file", o->path);
  return ok ? 0 : -1;
}

int pred_out_merge(const char *out, int nparts, int64_t n, int c, int h, int w, struct pred_metrics *m, char *err,
                   size_t cap) {
  char tmp[4300], part[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp", out);
  struct pred_out o;
  if (pred_out_create(&o, tmp, n, c, h, w, err, cap)) return -1;
  if (m) pred_metrics_init(m);
  const int dims[3] = {c, h, w};
  float *buf = malloc(sizeof(float) * MERGE_BLOCK * c * h * w);
  int ok = buf != NULL;
  int64_t row = 0;
  for (int r = 0; ok && r < nparts; r++) {
    snprintf(part, sizeof part, "%s.part-%d", out, r);
    hid_t f = H5Fopen(part, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f >= 0 ? H5Dopen2(f, "predictions", H5P_DEFAULT) : -1;
    hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t pd[4] = {0};
    ok = sp >= 0 && H5Sget_simple_extent_ndims(sp) == 4 && H5Sget_simple_extent_dims(sp, pd, NULL) == 4 &&
         pd[1] == (hsize_t)c && pd[2] == (hsize_t)h && pd[3] == (hsize_t)w && row + (int64_t)pd[0] <= n;
    for (int64_t b = 0; ok && b < (int64_t)pd[0]; b += MERGE_BLOCK) {
      int k = (int64_t)pd[0] - b < MERGE_BLOCK ? (int)((int64_t)pd[0] - b) : MERGE_BLOCK;
      ok = rows(d, b, k, dims, buf, 0) && rows(o.dset, row + b, k, dims, buf, 1);
    }
    double part_m[5];
    if (ok && m) {
      ok = attr_double(d, "sse", 0, 0, &part_m[0]) && attr_double(d, "count", 0, 0, &part_m[1]) &&
           attr_double(d, "target_min", 0, 0, &part_m[2]) && attr_double(d, "target_max", 0, 0, &part_m[3]);
      if (ok) m->sse += part_m[0], m->count += (int64_t)part_m[1], m->lo = fmin(m->lo, part_m[2]), m->hi = fmax(m->hi, part_m[3]);
    }
    row += (int64_t)pd[0];
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    if (!ok) snprintf(err, cap, "%s: missing, unreadable or of another shape than [.., %d, %d, %d]", part, c, h, w);
  }
  free(buf);
  if (ok && row != n) ok = 0, snprintf(err, cap, "%s: the parts hold %lld samples, not %lld", out, (long long)row, (long long)n);
  char cerr[4400];
  if (pred_out_close(&o, ok ? m : NULL, cerr, sizeof cerr) && ok) ok = 0, snprintf(err, cap, "%s", cerr);
  for (int r = 0; ok && r < nparts; r++) snprintf(part, sizeof part, "%s.part-%d", out, r), remove(part);
  if (ok && rename(tmp, out) != 0) ok = 0, snprintf(err, cap, "%s: cannot rename %s to it", out, tmp);
  if (!ok) remove(tmp);
  return ok ? 0 : -1;
}

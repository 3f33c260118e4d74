/* The CosmoFlow-style generator's HDF5 writer: blocks of samples generated on o->workers threads
 * (one work area each; a sample depends on (seed, index) only), then written under the process-wide
 * HDF5 lock. Inputs (and segmentation targets) are 5-D and chunked per channel and box of `chunk`
 * cells, so a reader of one box of each sample (spatial partitioning) touches only its chunks. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hdf5.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "runtime/error.h"
#include "runtime/files.h"
#include "runtime/hdf5_lock.h"
#include "sim/cosmo.h"

#define GEN_NAME "tessera cosmo"
#define GEN_VERSION 1

static const char *const target_transform =
    "targets = 2 (p - param_min) / (param_max - param_min) - 1 per parameter p (0 where param_max = param_min), so "
    "each lies in [-1, 1]; p = param_min + (targets + 1) (param_max - param_min) / 2";

/* A 1-D array attribute of doubles. */
static int attr_doubles(hid_t obj, const char *name, int n, const double *v) {
  hsize_t dim = (hsize_t)n;
  hid_t sp = H5Screate_simple(1, &dim, NULL);
  hid_t a = sp < 0 ? -1 : H5Acreate2(obj, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  int ok = a >= 0 && H5Awrite(a, H5T_NATIVE_DOUBLE, v) >= 0;
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  return ok;
}

/* "a,b,c" of the parameters' names or units. */
static void join(const char *(*get)(int), char *buf, size_t cap) {
  size_t at = 0;
  for (int i = 0; i < TSR_COSMO_PARAMS && at < cap; i++) at += snprintf(buf + at, cap - at, "%s%s", i ? "," : "", get(i));
}

/* The parameters' description, on the file and on the datasets that hold them. */
static int param_attrs(hid_t obj, const tsr_cosmo_opts *o) {
  char names[128], units[128];
  join(tsr_cosmo_param_name, names, sizeof names);
  join(tsr_cosmo_param_unit, units, sizeof units);
  return _tsr_h5_attr_str(obj, "param_names", names) && _tsr_h5_attr_str(obj, "param_units", units) &&
         attr_doubles(obj, "param_min", TSR_COSMO_PARAMS, o->lo) && attr_doubles(obj, "param_max", TSR_COSMO_PARAMS, o->hi);
}

static int write_attrs(hid_t file, const tsr_cosmo_opts *o, int64_t n) {
  int version = GEN_VERSION, seg = o->task == TSR_COSMO_SEGMENTATION;
  long long samples = n, first = o->first;
  double box = o->size * o->cell;
  int ok = _tsr_h5_attr_str(file, "generator", GEN_NAME) &&
           _tsr_h5_attr(file, "generator_version", H5T_NATIVE_INT, &version) &&
           _tsr_h5_attr_str(file, "task", seg ? "segmentation" : "regression") &&
           _tsr_h5_attr(file, "samples", H5T_NATIVE_LLONG, &samples) &&
           _tsr_h5_attr(file, "first_index", H5T_NATIVE_LLONG, &first) &&
           _tsr_h5_attr(file, "seed", H5T_NATIVE_UINT64, &o->seed) &&
           _tsr_h5_attr(file, "size", H5T_NATIVE_INT, &o->size) &&
           _tsr_h5_attr(file, "cell_Mpc_h", H5T_NATIVE_DOUBLE, &o->cell) &&
           _tsr_h5_attr(file, "box_Mpc_h", H5T_NATIVE_DOUBLE, &box) &&
           _tsr_h5_attr(file, "pivot_h_Mpc", H5T_NATIVE_DOUBLE, &o->pivot) &&
           _tsr_h5_attr_str(file, "spectrum",
                            "P(k) = A (k / pivot)^n_s exp(-(k / k_c)^2), A such that sigma^2 = sum over the box's "
                            "modes k != 0 of P(k) / V") &&
           param_attrs(file, o);
  if (ok && seg)
    ok = _tsr_h5_attr_str(file, "class_names", "background,halo,void") &&
         _tsr_h5_attr(file, "blobs_min", H5T_NATIVE_INT, &o->blobs_min) &&
         _tsr_h5_attr(file, "blobs_max", H5T_NATIVE_INT, &o->blobs_max) &&
         _tsr_h5_attr(file, "radius_min_cells", H5T_NATIVE_DOUBLE, &o->radius_min) &&
         _tsr_h5_attr(file, "radius_max_cells", H5T_NATIVE_DOUBLE, &o->radius_max) &&
         _tsr_h5_attr(file, "contrast_sigma", H5T_NATIVE_DOUBLE, &o->contrast);
  else if (ok)
    ok = attr_doubles(file, "redshifts", o->nz, o->z) &&
         _tsr_h5_attr_str(file, "transform",
                          o->transform == TSR_COSMO_LINEAR ? "linear: D(z) delta"
                                                           : "lognormal: exp(D(z) delta - D(z)^2 sigma^2 / 2) - 1") &&
         _tsr_h5_attr_str(file, "target_transform", target_transform);
  return ok;
}

/* A float32 dataset [n, dims...] (nd - 1 per-sample dims), chunked as `chunk` (NULL: contiguous). */
static hid_t create_dset(hid_t file, const char *name, hid_t type, int nd, const hsize_t *dims, const hsize_t *chunk) {
  hid_t sp = H5Screate_simple(nd, dims, NULL);
  hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
  if (chunk) H5Pset_chunk(pl, nd, chunk);
  hid_t d = H5Dcreate2(file, name, type, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
  H5Pclose(pl);
  H5Sclose(sp);
  return d;
}

/* Rows [first, first + count) of dataset d (per-sample dims dims[1..nd)) from buf. */
static int write_block(hid_t d, hid_t memtype, int nd, const hsize_t *dims, int64_t first, int64_t count,
                       const void *buf) {
  hsize_t start[5] = {(hsize_t)first}, cnt[5] = {(hsize_t)count};
  for (int i = 1; i < nd; i++) cnt[i] = dims[i];
  hid_t fs = H5Dget_space(d);
  hid_t ms = H5Screate_simple(nd, cnt, NULL);
  int ok = fs >= 0 && ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL) >= 0 &&
           H5Dwrite(d, memtype, ms, fs, H5P_DEFAULT, buf) >= 0;
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  return ok;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

struct out {
  hid_t in, tg, par, amp;
  hsize_t xd[5], yd[5], pd[2];
  int ynd;
};

static void close_out(struct out *f) {
  hid_t all[4] = {f->in, f->tg, f->par, f->amp};
  for (int i = 0; i < 4; i++)
    if (all[i] >= 0) H5Dclose(all[i]);
}

static tsr_status create_out(const tsr_cosmo_opts *o, int64_t n, const char *tmp, hid_t file, struct out *f) {
  int c, s, tc, th, seg = o->task == TSR_COSMO_SEGMENTATION;
  tsr_cosmo_shapes(o, &c, &s, &tc, &th);
  hsize_t k = (hsize_t)(o->chunk ? o->chunk : s);
  *f = (struct out){.in = -1, .tg = -1, .par = -1, .amp = -1,
                    .xd = {(hsize_t)n, (hsize_t)c, (hsize_t)s, (hsize_t)s, (hsize_t)s},
                    .yd = {(hsize_t)n, (hsize_t)tc, (hsize_t)th, (hsize_t)th, (hsize_t)th},
                    .pd = {(hsize_t)n, TSR_COSMO_PARAMS}, .ynd = seg ? 5 : 4};
  hsize_t chunk[5] = {1, 1, k, k, k};
  char why[256];
  f->in = create_dset(file, "inputs", H5T_IEEE_F32LE, 5, f->xd, chunk);
  f->tg = create_dset(file, "targets", H5T_IEEE_F32LE, f->ynd, f->yd, seg ? chunk : NULL);
  int ok = f->in >= 0 && f->tg >= 0 && write_attrs(file, o, n);
  if (ok && !seg) {
    f->par = create_dset(file, "params", H5T_IEEE_F64LE, 2, f->pd, NULL);
    f->amp = create_dset(file, "amplitude", H5T_IEEE_F64LE, 1, f->pd, NULL);
    ok = f->par >= 0 && f->amp >= 0 && param_attrs(f->par, o) && param_attrs(f->tg, o) &&
         _tsr_h5_attr_str(f->tg, "transform", target_transform) &&
         _tsr_h5_attr_str(f->amp, "unit", "(Mpc/h)^3");
  }
  return ok ? TSR_OK : _tsr_error(TSR_ERR_IO, "%s: cannot create datasets (%s)", tmp, _tsr_hdf5_reason(why));
}

/* Creates the datasets, then generates and writes every sample in blocks. */
static tsr_status fill_file(const tsr_cosmo_opts *o, int64_t n, const char *tmp, hid_t file,
                            struct _tsr_cosmo_work *w, int nw, void (*progress)(void *, int64_t, int64_t),
                            void *user) {
  struct out f;
  _tsr_hdf5_lock();
  tsr_status st = create_out(o, n, tmp, file, &f);
  _tsr_hdf5_unlock();
  size_t xe = f.xd[1] * f.xd[2] * f.xd[3] * f.xd[4], ye = f.yd[1] * f.yd[2] * f.yd[3] * (f.ynd == 5 ? f.yd[4] : 1);
  size_t per = sizeof(float) * (xe + ye);
  int64_t block = (int64_t)((64u << 20) / per); /* samples per write: about 64 MiB */
  block = block < 1 ? 1 : block > 256 ? 256 : block;
  float *xb = malloc(sizeof(float) * xe * block), *yb = malloc(sizeof(float) * ye * block);
  double *pb = malloc(sizeof(double) * TSR_COSMO_PARAMS * block), *ab = malloc(sizeof(double) * block);
  if (st == TSR_OK && (!xb || !yb || !pb || !ab)) st = _tsr_error(TSR_ERR_NOMEM, "cosmo: out of memory for %lld samples", (long long)block);
  double last = now_s();
  if (progress && st == TSR_OK) progress(user, 0, n);
  for (int64_t at = 0; at < n && st == TSR_OK; at += block) {
    int64_t count = n - at < block ? n - at : block;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nw) schedule(static, 1)
#endif
    for (int64_t i = 0; i < count; i++) {
#ifdef _OPENMP
      struct _tsr_cosmo_work *tw = &w[omp_get_thread_num()];
#else
      struct _tsr_cosmo_work *tw = w;
#endif
      _tsr_cosmo_generate(o, tw, o->first + at + i, xb + xe * i, yb + ye * i, pb + TSR_COSMO_PARAMS * i, ab + i);
    }
    char why[256];
    _tsr_hdf5_lock();
    int ok = write_block(f.in, H5T_NATIVE_FLOAT, 5, f.xd, at, count, xb) &&
             write_block(f.tg, H5T_NATIVE_FLOAT, f.ynd, f.yd, at, count, yb) &&
             (f.par < 0 || write_block(f.par, H5T_NATIVE_DOUBLE, 2, f.pd, at, count, pb)) &&
             (f.amp < 0 || write_block(f.amp, H5T_NATIVE_DOUBLE, 1, f.pd, at, count, ab));
    if (!ok)
      st = _tsr_error(TSR_ERR_IO, "%s: cannot write samples %lld..%lld (%s)", tmp, (long long)(o->first + at),
                      (long long)(o->first + at + count - 1), _tsr_hdf5_reason(why));
    _tsr_hdf5_unlock();
    double t = now_s();
    if (progress && st == TSR_OK && (t - last >= 0.1 || at + count == n)) {
      progress(user, at + count, n);
      last = t;
    }
  }
  _tsr_hdf5_lock();
  close_out(&f);
  _tsr_hdf5_unlock();
  free(xb), free(yb), free(pb), free(ab);
  return st;
}

tsr_status tsr_cosmo_write(const tsr_cosmo_opts *o, int64_t n, const char *path,
                           void (*progress)(void *user, int64_t done, int64_t total), void *user) {
  TSR_TRY(tsr_cosmo_opts_check(o));
  if (!path) return _tsr_error(TSR_ERR_ARG, "tsr_cosmo_write: path is NULL");
  if (n < 1) return _tsr_error(TSR_ERR_ARG, "tsr_cosmo_write: %lld samples requested, need at least 1", (long long)n);
  if (o->first > INT64_MAX - n)
    return _tsr_error(TSR_ERR_ARG, "tsr_cosmo_write: first index %lld + %lld samples overflows", (long long)o->first,
                      (long long)n);
  char *tmp = _tsr_tmp_path(path);
  if (!tmp) return _tsr_error(TSR_ERR_NOMEM, "cosmo: out of memory");
#ifdef _OPENMP
  int nw = o->workers > 1 ? o->workers : 1;
#else
  int nw = 1;
#endif
  struct _tsr_cosmo_work *w = calloc(nw, sizeof *w);
  tsr_status st = w ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "cosmo: out of memory");
  int ready = 0;
  for (; st == TSR_OK && ready < nw; ready++) st = _tsr_cosmo_work_init(&w[ready], o);
  char why[256];
  hid_t file = -1;
  if (st == TSR_OK) {
    _tsr_hdf5_lock();
    file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) st = _tsr_error(TSR_ERR_IO, "%s: cannot create (%s)", tmp, _tsr_hdf5_reason(why));
    _tsr_hdf5_unlock();
  }
  if (st == TSR_OK) st = fill_file(o, n, tmp, file, w, nw, progress, user);
  if (file >= 0) {
    _tsr_hdf5_lock();
    if (H5Fclose(file) < 0 && st == TSR_OK) st = _tsr_error(TSR_ERR_IO, "%s: cannot close (%s)", tmp, _tsr_hdf5_reason(why));
    _tsr_hdf5_unlock();
  }
  for (int i = 0; i < ready; i++) _tsr_cosmo_work_free(&w[i]);
  free(w);
  if (st == TSR_OK && rename(tmp, path) != 0)
    st = _tsr_error(TSR_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
  if (st != TSR_OK && file >= 0) remove(tmp);
  free(tmp);
  return st;
}

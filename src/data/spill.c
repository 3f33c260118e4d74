/* Spill of a pool's produced samples to HDF5, in the format the data generators write and the
 * loader reads: `inputs` [N, C, H, W], `targets` [N, C', H', W'] (float32) plus `index` [N], the
 * producer's index of each row. Datasets are chunked one sample per chunk and grow as rows come
 * (production tasks finish in any order). Written to path.tmp, renamed at close. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

#include "data/pool.h"
#include "runtime/error.h"
#include "runtime/hdf5_lock.h"

struct _tsr_spill {
  char *path, *tmp;
  hid_t file, d[3]; /* inputs, targets, index */
  int dims[3][4];   /* per-row shapes; index rows are scalars */
  int rank[3];
  int64_t rows;     /* current extent */
};

static hid_t create(hid_t f, const char *name, hid_t type, int rank, const int *shape) {
  hsize_t dims[4] = {0}, maxd[4] = {H5S_UNLIMITED}, chunk[4] = {1};
  for (int i = 1; i < rank; i++) dims[i] = maxd[i] = chunk[i] = (hsize_t)shape[i - 1];
  hid_t sp = H5Screate_simple(rank, dims, maxd), pl = H5Pcreate(H5P_DATASET_CREATE);
  hid_t d = sp < 0 || pl < 0 || H5Pset_chunk(pl, rank, chunk) < 0
                ? -1
                : H5Dcreate2(f, name, type, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
  if (pl >= 0) H5Pclose(pl);
  if (sp >= 0) H5Sclose(sp);
  return d;
}

tsr_status _tsr_spill_open(struct _tsr_spill **out, const char *path, const char *generator, const int shape[6]) {
  struct _tsr_spill *s = calloc(1, sizeof *s);
  size_t len = strlen(path);
  if (s) s->path = strdup(path), s->tmp = malloc(len + 5);
  if (!s || !s->path || !s->tmp) {
    if (s) free(s->path), free(s->tmp);
    free(s);
    return _tsr_error(TSR_ERR_NOMEM, "spill: out of memory");
  }
  snprintf(s->tmp, len + 5, "%s.tmp", path);
  s->rank[0] = s->rank[1] = 4, s->rank[2] = 1;
  char why[256];
  tsr_status st = TSR_OK;
  _tsr_hdf5_lock();
  s->file = H5Fcreate(s->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  s->d[0] = s->d[1] = s->d[2] = -1;
  if (s->file < 0) st = _tsr_error(TSR_ERR_IO, "%s: cannot create the spill file (%s)", s->tmp, _tsr_hdf5_reason(why));
  if (st == TSR_OK) {
    s->d[0] = create(s->file, "inputs", H5T_IEEE_F32LE, 4, shape);
    s->d[1] = create(s->file, "targets", H5T_IEEE_F32LE, 4, shape + 3);
    s->d[2] = create(s->file, "index", H5T_STD_I64LE, 1, NULL);
    if (s->d[0] < 0 || s->d[1] < 0 || s->d[2] < 0 || !_tsr_h5_attr_str(s->file, "generator", generator))
      st = _tsr_error(TSR_ERR_IO, "%s: cannot create the spill datasets (%s)", s->tmp, _tsr_hdf5_reason(why));
  }
  _tsr_hdf5_unlock();
  memcpy(s->dims[0], shape, 3 * sizeof(int));
  memcpy(s->dims[1], shape + 3, 3 * sizeof(int));
  if (st != TSR_OK) {
    _tsr_spill_close(s, 0);
    return st;
  }
  *out = s;
  return TSR_OK;
}

/* Writes one row of dataset k (lock held). */
static int write_row(struct _tsr_spill *s, int k, int64_t row, hid_t memtype, const void *buf) {
  hsize_t start[4] = {(hsize_t)row}, count[4] = {1}, ext[4] = {(hsize_t)s->rows};
  for (int i = 1; i < s->rank[k]; i++) count[i] = ext[i] = (hsize_t)s->dims[k][i - 1];
  if (H5Dset_extent(s->d[k], ext) < 0) return 0;
  hid_t fs = H5Dget_space(s->d[k]), ms = H5Screate_simple(s->rank[k], count, NULL);
  int ok = fs >= 0 && ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
           H5Dwrite(s->d[k], memtype, ms, fs, H5P_DEFAULT, buf) >= 0;
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  return ok;
}

tsr_status _tsr_spill_write(struct _tsr_spill *s, int64_t row, int64_t index, const float *x, const float *y) {
  char why[256];
  tsr_status st = TSR_OK;
  _tsr_hdf5_lock();
  if (row >= s->rows) s->rows = row + 1;
  if (!write_row(s, 0, row, H5T_NATIVE_FLOAT, x) || !write_row(s, 1, row, H5T_NATIVE_FLOAT, y) ||
      !write_row(s, 2, row, H5T_NATIVE_INT64, &index))
    st = _tsr_error(TSR_ERR_IO, "%s: cannot write spilled sample %lld (%s)", s->tmp, (long long)row,
                    _tsr_hdf5_reason(why));
  _tsr_hdf5_unlock();
  return st;
}

tsr_status _tsr_spill_close(struct _tsr_spill *s, int keep) {
  if (!s) return TSR_OK;
  char why[256];
  tsr_status st = TSR_OK;
  _tsr_hdf5_lock();
  for (int k = 0; k < 3; k++)
    if (s->d[k] >= 0) H5Dclose(s->d[k]);
  if (s->file >= 0 && H5Fclose(s->file) < 0 && keep)
    st = _tsr_error(TSR_ERR_IO, "%s: cannot close the spill file (%s)", s->tmp, _tsr_hdf5_reason(why));
  _tsr_hdf5_unlock();
  if (st == TSR_OK && keep && s->rows > 0 && rename(s->tmp, s->path) != 0)
    st = _tsr_error(TSR_ERR_IO, "%s: cannot rename to %s: %s", s->tmp, s->path, strerror(errno));
  if (st != TSR_OK || !keep || s->rows == 0) remove(s->tmp);
  free(s->path), free(s->tmp), free(s);
  return st;
}

/* Parameter import/export by PyTorch state_dict name through the trainer's public tensor API: a
 * folder of <name>.npy files, or one HDF5 file with a float32 dataset per tensor (written to
 * <path>.tmp and renamed), plus the input normalisation as `input_mean` and `input_std` (no tensor
 * name lacks a dot) and, when the trainer standardises its targets, `target_mean` and `target_std`,
 * so an export applied to raw inputs predicts, in target units, as its trainer did. Import reads and
 * checks everything before setting any, so a failed import leaves the trainer unchanged; tensors the
 * trainer does not have are ignored. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include <tessera/params.h>

#include "runtime/error.h"

static int is_hdf5_path(const char *path) {
  size_t n = strlen(path);
  return (n > 3 && strcasecmp(path + n - 3, ".h5") == 0) || (n > 5 && strcasecmp(path + n - 5, ".hdf5") == 0);
}

static int same_shape(const tsr_shape *a, const tsr_shape *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

static tsr_status shape_mismatch(const char *file, const char *name, const tsr_shape *got, const tsr_shape *want) {
  char g[96], w[96];
  return _tsr_error(TSR_ERR_SHAPE, "%s: tensor '%s' has shape %s in the file, the model expects %s", file, name,
                    tsr_shape_str(got, g, sizeof g), tsr_shape_str(want, w, sizeof w));
}

/* mkdir -p */
static tsr_status make_dirs(const char *path) {
  if (!*path) return _tsr_error(TSR_ERR_ARG, "tsr_params_export: empty path");
  char *p = strdup(path);
  if (!p) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
  tsr_status s = TSR_OK;
  for (char *q = p + 1;; q++) {
    if (*q != '/' && *q != '\0') continue;
    char keep = *q;
    *q = '\0';
    struct stat st;
    if (mkdir(p, 0777) != 0 && !(errno == EEXIST && stat(p, &st) == 0 && S_ISDIR(st.st_mode))) {
      s = _tsr_error(TSR_ERR_IO, "%s: cannot create folder: %s", p, strerror(errno == EEXIST ? ENOTDIR : errno));
      break;
    }
    *q = keep;
    if (!keep) break;
  }
  free(p);
  return s;
}

static char *join(const char *dir, const char *name, const char *ext) {
  size_t n = strlen(dir) + strlen(name) + strlen(ext) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s%s", dir, name, ext);
  return s;
}

/* From src/data/dataset.c: the process-wide HDF5 lock (Debian's HDF5 is not thread-safe and load
 * tasks read datasets concurrently; the lock also silences HDF5's error printing) and the innermost
 * HDF5 error message. Never wait for StarPU while holding it: a load task may be waiting for it. */
#include "runtime/hdf5_lock.h"

static tsr_status h5_write(hid_t f, const char *file, const char *name, const tsr_shape *shape, const float *data) {
  hsize_t dims[TSR_MAX_DIMS];
  for (int i = 0; i < shape->ndim; i++) dims[i] = (hsize_t)shape->dims[i];
  hid_t space = shape->ndim ? H5Screate_simple(shape->ndim, dims, NULL) : H5Screate(H5S_SCALAR);
  hid_t d = space < 0 ? -1 : H5Dcreate2(f, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = d < 0 ? -1 : H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  if (d >= 0 && H5Dclose(d) < 0) e = -1;
  if (space >= 0) H5Sclose(space);
  if (d < 0 || e < 0) return _tsr_error(TSR_ERR_IO, "%s: cannot write dataset '%s'", file, name);
  return TSR_OK;
}

/* The input normalisation as two extra arrays after the tensors: [C] each, mean 0 and std 1 when
 * the trainer has none (an export always says how its inputs were prepared). */
enum { NORM_MEAN, NORM_STD };
static const char *const norm_names[2] = {"input_mean", "input_std"};
static const char *const target_names[2] = {"target_mean", "target_std"};

static tsr_status get_norm(const tsr_trainer *t, const char *path, float **vals, tsr_shape *shape) {
  int c, h, w;
  const float *mean, *std;
  tsr_trainer_input_shape(t, &c, &h, &w);
  tsr_trainer_input_norm(t, &mean, &std);
  *shape = (tsr_shape){.ndim = 1, .dims = {c}};
  vals[NORM_MEAN] = malloc(sizeof(float) * c), vals[NORM_STD] = malloc(sizeof(float) * c);
  if (!vals[NORM_MEAN] || !vals[NORM_STD]) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
  for (int i = 0; i < c; i++) vals[NORM_MEAN][i] = mean ? mean[i] : 0.0f, vals[NORM_STD][i] = mean ? std[i] : 1.0f;
  return TSR_OK;
}

/* Copies every tensor out of the trainer (before any HDF5 call: see the lock above). */
static tsr_status get_all(tsr_trainer *t, const char *path, float **vals) {
  for (int i = 0; i < tsr_trainer_num_tensors(t); i++) {
    const char *name;
    tsr_shape shape;
    TSR_TRY(tsr_trainer_tensor_info(t, i, &name, &shape, NULL));
    int64_t n = tsr_shape_numel(&shape);
    vals[i] = malloc(n > 0 ? (size_t)n * sizeof **vals : 1);
    if (!vals[i]) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory for tensor '%s'", path, name);
    TSR_TRY(tsr_trainer_tensor_get(t, i, vals[i]));
  }
  return TSR_OK;
}

static tsr_status h5_export(const tsr_trainer *t, const char *path, float *const *vals, float *const *norm,
                            const tsr_shape *norm_shape, const float *const *tnorm, const tsr_shape *tnorm_shape) {
  char *tmp = malloc(strlen(path) + 5), why[256];
  if (!tmp) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
  sprintf(tmp, "%s.tmp", path);
  _tsr_hdf5_lock();
  hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  tsr_status s = f < 0 ? _tsr_error(TSR_ERR_IO, "%s: cannot create HDF5 file (%s)", tmp, _tsr_hdf5_reason(why)) : TSR_OK;
  for (int i = 0; s == TSR_OK && i < tsr_trainer_num_tensors(t); i++) {
    const char *name;
    tsr_shape shape;
    s = tsr_trainer_tensor_info(t, i, &name, &shape, NULL);
    if (s == TSR_OK) s = h5_write(f, tmp, name, &shape, vals[i]);
  }
  for (int k = 0; s == TSR_OK && k < 2; k++) s = h5_write(f, tmp, norm_names[k], norm_shape, norm[k]);
  for (int k = 0; s == TSR_OK && tnorm[0] && k < 2; k++) s = h5_write(f, tmp, target_names[k], tnorm_shape, tnorm[k]);
  if (f >= 0 && H5Fclose(f) < 0 && s == TSR_OK) s = _tsr_error(TSR_ERR_IO, "%s: cannot close HDF5 file", tmp);
  _tsr_hdf5_unlock();
  if (s == TSR_OK && rename(tmp, path) != 0)
    s = _tsr_error(TSR_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
  if (s != TSR_OK) remove(tmp);
  free(tmp);
  return s;
}

static tsr_status npy_export(const tsr_trainer *t, const char *path, float *const *vals, float *const *norm,
                             const tsr_shape *norm_shape, const float *const *tnorm, const tsr_shape *tnorm_shape) {
  TSR_TRY(make_dirs(path));
  int n = tsr_trainer_num_tensors(t);
  for (int i = 0; i < n + (tnorm[0] ? 4 : 2); i++) {
    const char *name = i >= n + 2 ? target_names[i - n - 2] : i >= n ? norm_names[i - n] : NULL;
    tsr_shape shape = i >= n + 2 ? *tnorm_shape : *norm_shape;
    if (i < n) TSR_TRY(tsr_trainer_tensor_info(t, i, &name, &shape, NULL));
    char *file = join(path, name, ".npy");
    const float *data = i < n ? vals[i] : i < n + 2 ? norm[i - n] : tnorm[i - n - 2];
    tsr_status s = file ? tsr_npy_write(file, &shape, data) : _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
    free(file);
    TSR_TRY(s);
  }
  return TSR_OK;
}

tsr_status tsr_params_export(tsr_trainer *t, const char *path) {
  if (!t || !path) return _tsr_error(TSR_ERR_ARG, "tsr_params_export: trainer and path are required");
  int n = tsr_trainer_num_tensors(t);
  float **vals = calloc(n > 0 ? (size_t)n : 1, sizeof *vals), *norm[2] = {NULL, NULL};
  tsr_shape norm_shape, tnorm_shape;
  tsr_status s = vals ? get_all(t, path, vals) : _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
  if (s == TSR_OK) s = get_norm(t, path, norm, &norm_shape);
  const float *tnorm[2];
  int c, h, w;
  tsr_trainer_target_norm(t, &tnorm[0], &tnorm[1]);
  tsr_trainer_target_shape(t, &c, &h, &w);
  tnorm_shape = (tsr_shape){.ndim = 1, .dims = {c}};
  if (s == TSR_OK)
    s = is_hdf5_path(path) ? h5_export(t, path, vals, norm, &norm_shape, tnorm, &tnorm_shape)
                           : npy_export(t, path, vals, norm, &norm_shape, tnorm, &tnorm_shape);
  for (int i = 0; vals && i < n; i++) free(vals[i]);
  free(vals), free(norm[0]), free(norm[1]);
  return s;
}

/* Reads one tensor of an HDF5 file, checking its shape. */
static tsr_status h5_read(hid_t f, const char *file, const char *name, const tsr_shape *want, float *out) {
  if (H5Lexists(f, name, H5P_DEFAULT) <= 0)
    return _tsr_error(TSR_ERR_FORMAT, "%s: tensor '%s' is missing (no dataset of that name)", file, name);
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  hid_t space = d < 0 ? -1 : H5Dget_space(d);
  hid_t type = d < 0 ? -1 : H5Dget_type(d);
  tsr_status s = TSR_OK;
  int nd = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
  if (d < 0 || space < 0 || type < 0 || nd < 0) {
    s = _tsr_error(TSR_ERR_FORMAT, "%s: '%s' is not a readable dataset", file, name);
  } else if (H5Tget_class(type) != H5T_FLOAT) {
    s = _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' is not floating point", file, name);
  } else if (nd > TSR_MAX_DIMS) {
    s = _tsr_error(TSR_ERR_SHAPE, "%s: tensor '%s' has %d dimensions in the file, the model expects %d", file, name,
                   nd, want->ndim);
  } else {
    hsize_t dims[TSR_MAX_DIMS];
    H5Sget_simple_extent_dims(space, dims, NULL);
    tsr_shape got = {.ndim = nd};
    for (int i = 0; i < nd; i++) got.dims[i] = (int64_t)dims[i];
    if (!same_shape(&got, want))
      s = shape_mismatch(file, name, &got, want);
    else if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
      s = _tsr_error(TSR_ERR_IO, "%s: cannot read dataset '%s'", file, name);
  }
  if (type >= 0) H5Tclose(type);
  if (space >= 0) H5Sclose(space);
  if (d >= 0) H5Dclose(d);
  return s;
}

/* Reads <dir>/<name>.npy, checking its shape. */
static tsr_status npy_read(const char *dir, const char *name, const tsr_shape *want, float *out) {
  char *file = join(dir, name, ".npy");
  if (!file) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", dir);
  tsr_status s = TSR_OK;
  tsr_shape got;
  float *data = NULL;
  if (access(file, F_OK) != 0)
    s = _tsr_error(TSR_ERR_FORMAT, "%s: tensor '%s' is missing (no file %s)", dir, name, file);
  else
    s = tsr_npy_read(file, &got, &data);
  if (s == TSR_OK && !same_shape(&got, want)) s = shape_mismatch(file, name, &got, want);
  if (s == TSR_OK) memcpy(out, data, (size_t)tsr_shape_numel(want) * sizeof *out);
  free(data);
  free(file);
  return s;
}

/* names[0] and names[1] (input_mean and input_std, or target_mean and target_std) when the file has
 * them (both or neither), [c] each; `what` names them in messages. */
static tsr_status read_norm(const char *const *names, const char *what, int c, const char *path, hid_t f, float **norm,
                            int *found) {
  int have[2];
  tsr_shape shape = {.ndim = 1, .dims = {c}};
  for (int k = 0; k < 2; k++) {
    char *file = f >= 0 ? NULL : join(path, names[k], ".npy");
    if (f < 0 && !file) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
    have[k] = f >= 0 ? H5Lexists(f, names[k], H5P_DEFAULT) > 0 : access(file, F_OK) == 0;
    free(file);
  }
  if (have[0] != have[1])
    return _tsr_error(TSR_ERR_FORMAT, "%s: %s without %s (the %s needs both)", path, names[have[0] ? 0 : 1],
                      names[have[0] ? 1 : 0], what);
  *found = have[0];
  for (int k = 0; *found && k < 2; k++) {
    if (!(norm[k] = malloc(sizeof(float) * c))) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
    TSR_TRY(f >= 0 ? h5_read(f, path, names[k], &shape, norm[k]) : npy_read(path, names[k], &shape, norm[k]));
  }
  return TSR_OK;
}

tsr_status tsr_params_import(tsr_trainer *t, const char *path) {
  if (!t || !path) return _tsr_error(TSR_ERR_ARG, "tsr_params_import: trainer and path are required");
  struct stat st;
  if (stat(path, &st) != 0) return _tsr_error(TSR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  int h5 = is_hdf5_path(path);
  if (!h5 && !S_ISDIR(st.st_mode))
    return _tsr_error(TSR_ERR_ARG, "%s: expected a folder of .npy files or a .h5/.hdf5 file", path);
  hid_t f = -1;
  if (h5) {
    char why[256];
    _tsr_hdf5_lock();
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
      tsr_status s = _tsr_error(TSR_ERR_FORMAT, "%s: not a readable HDF5 file (%s)", path, _tsr_hdf5_reason(why));
      _tsr_hdf5_unlock();
      return s;
    }
  }
  int n = tsr_trainer_num_tensors(t);
  float **vals = calloc(n > 0 ? (size_t)n : 1, sizeof *vals);
  tsr_status s = vals ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
  for (int i = 0; s == TSR_OK && i < n; i++) {
    const char *name;
    tsr_shape shape;
    s = tsr_trainer_tensor_info(t, i, &name, &shape, NULL);
    if (s != TSR_OK) break;
    int64_t numel = tsr_shape_numel(&shape);
    vals[i] = malloc(numel > 0 ? (size_t)numel * sizeof **vals : 1);
    if (!vals[i]) s = _tsr_error(TSR_ERR_NOMEM, "%s: out of memory for tensor '%s'", path, name);
    else s = h5 ? h5_read(f, path, name, &shape, vals[i]) : npy_read(path, name, &shape, vals[i]);
  }
  float *norm[2] = {NULL, NULL}, *tnorm[2] = {NULL, NULL};
  int has_norm = 0, has_tnorm = 0, c, h, w, tc;
  tsr_trainer_input_shape(t, &c, &h, &w);
  tsr_trainer_target_shape(t, &tc, &h, &w);
  if (s == TSR_OK) s = read_norm(norm_names, "input normalisation", c, path, f, norm, &has_norm);
  if (s == TSR_OK) s = read_norm(target_names, "target standardisation", tc, path, f, tnorm, &has_tnorm);
  if (h5) {
    H5Fclose(f);
    _tsr_hdf5_unlock();
  }
  /* first: they validate the values (a trainer whose loss refuses target standardisation refuses
   * the file); a file without them leaves the trainer's as they are */
  int read_ok = s == TSR_OK;
  float *old[2] = {NULL, NULL}; /* the trainer's target standardisation, put back if the input's fails */
  const float *cur[2];
  tsr_trainer_target_norm(t, &cur[0], &cur[1]);
  for (int k = 0; s == TSR_OK && has_tnorm && cur[0] && k < 2; k++)
    if ((old[k] = malloc(sizeof(float) * tc))) memcpy(old[k], cur[k], sizeof(float) * tc);
    else s = _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path), read_ok = 0;
  if (s == TSR_OK && has_tnorm) s = tsr_trainer_set_target_norm(t, tnorm[NORM_MEAN], tnorm[NORM_STD], tc);
  if (s == TSR_OK && has_norm) {
    s = tsr_trainer_set_input_norm(t, norm[NORM_MEAN], norm[NORM_STD], c);
    if (s != TSR_OK && has_tnorm) {
      char why[1024];
      snprintf(why, sizeof why, "%s", tsr_last_error());
      tsr_trainer_set_target_norm(t, old[0], old[1], tc); /* valid: it was the trainer's */
      s = _tsr_error(s, "%s", why);
    }
  }
  free(old[0]), free(old[1]);
  if (read_ok && s != TSR_OK) {
    char why[1024];
    snprintf(why, sizeof why, "%s", tsr_last_error()), s = _tsr_error(TSR_ERR_FORMAT, "%s: %s", path, why);
  }
  for (int i = 0; s == TSR_OK && i < n; i++) s = tsr_trainer_tensor_set(t, i, vals[i]);
  for (int i = 0; vals && i < n; i++) free(vals[i]);
  free(vals), free(norm[0]), free(norm[1]), free(tnorm[0]), free(tnorm[1]);
  return s;
}

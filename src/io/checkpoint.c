/* Checkpoint files: one HDF5 file with the run's metadata as root attributes, the optimizer as
 * attributes of /optimizer (kind, the fields of tsr_optim_spec, the names of its state tensors), the
 * input normalisation (/input_norm/mean, std), the target standardisation when the run has one
 * (/target_norm/mean, std), the tensor layout (/layout/names, /layout/shapes,
 * /layout/trainable, in the trainer's order) and one float32 dataset per tensor under /params and,
 * for trainable ones, under one group per optimizer state tensor (/moment0 and /moment1 for Adam),
 * and the learning-rate schedule when the run has one (/schedule, checkpoint_schedule.c). A 64-bit checksum over all of it is stored as the root attribute "checksum"; the reader recomputes
 * it, so a truncated or corrupted file is rejected before anything of it is used. Folder handling is
 * in checkpoint_dir.c, the digest file beside each checkpoint in checkpoint_digest.c, attribute
 * helpers in checkpoint_attr.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include <tessera/checkpoint.h>

#include "runtime/hdf5_lock.h"
#include "io/checkpoint_h5.h"
#include "runtime/error.h"

enum { CK_MAX_TENSORS = 1 << 20, CK_MAX_CHANNELS = 1 << 20, CK_KIND_MAX = 32 };
/* The state tensors of files that do not list them. */
static const char *const legacy_state[2] = {"moment0", "moment1"};

void _tsr_ck_free(struct _tsr_ck *ck) {
  for (int i = 0; ck->t && i < ck->n; i++) {
    free(ck->t[i].w);
    for (int k = 0; k < TSR_CK_MAX_STATE; k++) free(ck->t[i].state[k]);
  }
  free(ck->t), free(ck->norm_mean), free(ck->norm_std), free(ck->tnorm_mean), free(ck->tnorm_std);
  ck->t = NULL, ck->n = 0, ck->norm_mean = ck->norm_std = NULL, ck->norm_c = 0;
  ck->tnorm_mean = ck->tnorm_std = NULL, ck->tnorm_c = 0;
}

static uint64_t hash_i64(uint64_t h, int64_t v) { return _tsr_ck_hash(h, &v, sizeof v); }

static int is_legacy_state(const struct _tsr_ck *ck) {
  return ck->nstate == 2 && !strcmp(ck->state[0], legacy_state[0]) && !strcmp(ck->state[1], legacy_state[1]);
}

static int has_extra(const tsr_optim_spec *o) {
  int any = 0;
  for (int i = 0; i < TSR_OPTIM_EXTRA; i++) any |= o->extra[i] != 0;
  return any;
}

uint64_t _tsr_ck_checksum(const struct _tsr_ck *ck) {
  const tsr_checkpoint_meta *m = &ck->meta;
  uint64_t h = 0xCBF29CE484222325ull;
  h = hash_i64(h, ck->version);
  h = hash_i64(h, m->step), h = hash_i64(h, m->epoch), h = hash_i64(h, m->position);
  h = hash_i64(h, (int64_t)m->seed), h = hash_i64(h, m->nranks), h = hash_i64(h, m->batch);
  h = _tsr_ck_hash(h, &m->loss_sum, sizeof m->loss_sum);
  h = hash_i64(h, m->trainer_steps), h = hash_i64(h, m->trainer_updates);
  if (m->loss_scale != 0) { /* absent from files without loss scaling (and older ones) */
    h = _tsr_ck_hash(h, &m->loss_scale, sizeof m->loss_scale);
    h = hash_i64(h, m->loss_scale_good_steps), h = hash_i64(h, m->loss_scale_steps);
    h = hash_i64(h, m->loss_scale_skipped);
  }
  if (ck->version >= 2) {
    const tsr_optim_spec *o = &m->optim;
    const float f[] = {o->lr, o->momentum, o->weight_decay, o->beta1, o->beta2, o->eps};
    h = hash_i64(h, o->kind), h = hash_i64(h, o->nesterov), h = _tsr_ck_hash(h, f, sizeof f);
    h = _tsr_ck_hash(h, &m->loss_scale_option, sizeof m->loss_scale_option);
    h = _tsr_ck_hash(h, &m->loss_scale_init, sizeof m->loss_scale_init), h = hash_i64(h, m->loss_scale_interval);
    h = hash_i64(h, ck->norm_c);
    h = _tsr_ck_hash(h, ck->norm_mean, sizeof(float) * ck->norm_c);
    h = _tsr_ck_hash(h, ck->norm_std, sizeof(float) * ck->norm_c);
    /* absent from files written before there were registry optimizers */
    if (has_extra(o)) h = _tsr_ck_hash(h, o->extra, sizeof o->extra);
    if (!is_legacy_state(ck)) {
      h = hash_i64(h, ck->nstate);
      for (int k = 0; k < ck->nstate; k++) h = _tsr_ck_hash(h, ck->state[k], strlen(ck->state[k]) + 1);
    }
    if (m->has_schedule) h = _tsr_ck_schedule_hash(h, m); /* absent from files of runs without one */
    if (ck->tnorm_c > 0) { /* likewise */
      h = hash_i64(h, ck->tnorm_c);
      h = _tsr_ck_hash(h, ck->tnorm_mean, sizeof(float) * ck->tnorm_c);
      h = _tsr_ck_hash(h, ck->tnorm_std, sizeof(float) * ck->tnorm_c);
    }
  }
  h = hash_i64(h, ck->n);
  for (int i = 0; i < ck->n; i++) {
    const struct _tsr_ck_tensor *t = &ck->t[i];
    size_t bytes = (size_t)tsr_shape_numel(&t->shape) * sizeof(float);
    h = _tsr_ck_hash(h, t->name, strlen(t->name) + 1);
    h = hash_i64(h, t->shape.ndim);
    for (int d = 0; d < t->shape.ndim; d++) h = hash_i64(h, t->shape.dims[d]);
    h = hash_i64(h, t->trainable);
    h = _tsr_ck_hash(h, t->w, bytes);
    for (int k = 0; t->trainable && k < ck->nstate; k++) h = _tsr_ck_hash(h, t->state[k], bytes);
  }
  return h ^ (h >> 29);
}

/* ---- writing ---- */

static herr_t dset_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int nd, const hsize_t *dims,
                         const void *data) {
  hid_t sp = H5Screate_simple(nd, dims, NULL);
  hid_t d = sp < 0 ? -1 : H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = d < 0 ? -1 : H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  if (d >= 0 && H5Dclose(d) < 0) e = -1;
  if (sp >= 0) H5Sclose(sp);
  return d < 0 ? -1 : e;
}

static hid_t name_type(void) {
  hid_t s = H5Tcopy(H5T_C_S1);
  if (s >= 0 && (H5Tset_size(s, TSR_CK_NAME_MAX) < 0 || H5Tset_strpad(s, H5T_STR_NULLTERM) < 0)) {
    H5Tclose(s);
    return -1;
  }
  return s;
}

/* /optimizer: its kind by name, every hyperparameter of tsr_optim_spec (extra0.. only when one is
 * set, larc, larc_clip and larc_eta only with LARC on, momentum_sync_layers only when set) and the
 * names of its state tensors ("moment0,moment1"), as attributes. */
static herr_t write_optim(hid_t f, const struct _tsr_ck *ck) {
  const tsr_optim_spec *o = &ck->meta.optim;
  char names[TSR_CK_MAX_STATE * TSR_CK_STATE_NAME] = "";
  for (int k = 0, len = 0; k < ck->nstate; k++)
    len += snprintf(names + len, sizeof names - len, "%s%s", k ? "," : "", ck->state[k]);
  hid_t g = H5Gcreate2(f, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = g < 0 ? -1 : _tsr_ck_attr_write_str(g, "kind", tsr_optim_kind_name(o->kind));
  if (e >= 0) e = _tsr_ck_attr_write_str(g, "state_tensors", names);
  if (e >= 0 && o->momentum_sync_layers[0]) e = _tsr_ck_attr_write_str(g, "momentum_sync_layers", o->momentum_sync_layers);
  for (int i = 0; e >= 0 && has_extra(o) && i < TSR_OPTIM_EXTRA; i++) {
    char name[16];
    snprintf(name, sizeof name, "extra%d", i);
    e = _tsr_ck_attr_write(g, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &o->extra[i]);
  }
  struct {
    const char *name;
    const float *v;
  } f32[] = {{"lr", &o->lr},       {"momentum", &o->momentum}, {"weight_decay", &o->weight_decay},
             {"beta1", &o->beta1}, {"beta2", &o->beta2},       {"eps", &o->eps}};
  for (size_t i = 0; e >= 0 && i < sizeof f32 / sizeof *f32; i++)
    e = _tsr_ck_attr_write(g, f32[i].name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, f32[i].v);
  int32_t nesterov = o->nesterov, larc[2] = {o->larc, o->larc_clip};
  if (e >= 0) e = _tsr_ck_attr_write(g, "nesterov", H5T_STD_I32LE, H5T_NATIVE_INT32, &nesterov);
  if (e >= 0 && o->larc) e = _tsr_ck_attr_write(g, "larc", H5T_STD_I32LE, H5T_NATIVE_INT32, &larc[0]);
  if (e >= 0 && o->larc) e = _tsr_ck_attr_write(g, "larc_clip", H5T_STD_I32LE, H5T_NATIVE_INT32, &larc[1]);
  if (e >= 0 && o->larc) e = _tsr_ck_attr_write(g, "larc_eta", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &o->larc_eta);
  if (g >= 0 && H5Gclose(g) < 0) e = -1;
  return e;
}

/* /input_norm or /target_norm: mean and std, [channels] each. */
static herr_t write_norm(hid_t f, const char *group, int channels, const float *mean, const float *std) {
  hid_t g = H5Gcreate2(f, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t c[1] = {(hsize_t)channels};
  herr_t e = g < 0 ? -1 : dset_write(g, "mean", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, c, mean);
  if (e >= 0) e = dset_write(g, "std", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, c, std);
  if (g >= 0 && H5Gclose(g) < 0) e = -1;
  return e;
}

static herr_t write_meta(hid_t f, const struct _tsr_ck *ck) {
  const tsr_checkpoint_meta *m = &ck->meta;
  int32_t version = ck->version;
  herr_t e = _tsr_ck_attr_write_str(f, "format", "tessera checkpoint");
  struct { const char *name; const int64_t *v; } i64[] = {
      {"step", &m->step}, {"epoch", &m->epoch}, {"position", &m->position},
      {"trainer_steps", &m->trainer_steps}, {"trainer_updates", &m->trainer_updates}};
  for (size_t i = 0; e >= 0 && i < sizeof i64 / sizeof *i64; i++)
    e = _tsr_ck_attr_write(f, i64[i].name, H5T_STD_I64LE, H5T_NATIVE_INT64, i64[i].v);
  if (e >= 0) e = _tsr_ck_attr_write(f, "version", H5T_STD_I32LE, H5T_NATIVE_INT32, &version);
  if (e >= 0) e = _tsr_ck_attr_write(f, "nranks", H5T_STD_I32LE, H5T_NATIVE_INT32, &m->nranks);
  if (e >= 0) e = _tsr_ck_attr_write(f, "batch", H5T_STD_I32LE, H5T_NATIVE_INT32, &m->batch);
  if (e >= 0) e = _tsr_ck_attr_write(f, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &m->seed);
  if (e >= 0) e = _tsr_ck_attr_write(f, "loss_sum", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &m->loss_sum);
  struct { const char *name; const int64_t *v; } ls[] = {{"loss_scale_good_steps", &m->loss_scale_good_steps},
      {"loss_scale_steps", &m->loss_scale_steps}, {"loss_scale_skipped", &m->loss_scale_skipped}};
  if (e >= 0 && m->loss_scale != 0) e = _tsr_ck_attr_write(f, "loss_scale", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &m->loss_scale);
  for (size_t i = 0; e >= 0 && m->loss_scale != 0 && i < sizeof ls / sizeof *ls; i++)
    e = _tsr_ck_attr_write(f, ls[i].name, H5T_STD_I64LE, H5T_NATIVE_INT64, ls[i].v);
  if (ck->version >= 2) { /* tests write version 1 to check that it is still read */
    if (e >= 0) e = _tsr_ck_attr_write(f, "loss_scale_option", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &m->loss_scale_option);
    if (e >= 0) e = _tsr_ck_attr_write(f, "loss_scale_init", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &m->loss_scale_init);
    if (e >= 0) e = _tsr_ck_attr_write(f, "loss_scale_interval", H5T_STD_I32LE, H5T_NATIVE_INT32, &m->loss_scale_interval);
    if (e >= 0) e = write_optim(f, ck);
    if (e >= 0) e = write_norm(f, "input_norm", ck->norm_c, ck->norm_mean, ck->norm_std);
    if (e >= 0 && ck->tnorm_c > 0) e = write_norm(f, "target_norm", ck->tnorm_c, ck->tnorm_mean, ck->tnorm_std);
    if (e >= 0 && m->has_schedule) e = _tsr_ck_schedule_write(f, m);
  }
  if (e >= 0 && m->run_config) e = _tsr_ck_attr_write_str(f, "run_config", m->run_config);
  if (e >= 0) e = _tsr_ck_attr_write(f, "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, &ck->checksum);
  return e;
}

/* Rows of layout/shapes: ndim, then the dims; 5 wide (4 dims) unless a tensor has more (conv3d's
 * weights), so files of models without one are as they were before 5-D tensors. */
enum { LAYOUT_MIN_WIDTH = 5 };

static herr_t write_layout(hid_t f, const struct _tsr_ck *ck) {
  size_t n = (size_t)ck->n, width = LAYOUT_MIN_WIDTH;
  for (size_t i = 0; i < n; i++)
    if ((size_t)ck->t[i].shape.ndim + 1 > width) width = (size_t)ck->t[i].shape.ndim + 1;
  char *names = calloc(n ? n : 1, TSR_CK_NAME_MAX);
  int64_t *shapes = calloc(n ? n : 1, sizeof(int64_t) * width);
  int32_t *trainable = calloc(n ? n : 1, sizeof(int32_t));
  hid_t g = H5Gcreate2(f, "layout", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), str = name_type();
  herr_t e = (!names || !shapes || !trainable || g < 0 || str < 0) ? -1 : 0;
  for (size_t i = 0; e >= 0 && i < n; i++) {
    snprintf(names + i * TSR_CK_NAME_MAX, TSR_CK_NAME_MAX, "%s", ck->t[i].name);
    shapes[i * width] = ck->t[i].shape.ndim;
    for (int d = 0; d < ck->t[i].shape.ndim; d++) shapes[i * width + 1 + d] = ck->t[i].shape.dims[d];
    trainable[i] = ck->t[i].trainable;
  }
  hsize_t d1[1] = {n}, d2[2] = {n, width};
  if (e >= 0) e = dset_write(g, "names", str, str, 1, d1, names);
  if (e >= 0) e = dset_write(g, "shapes", H5T_STD_I64LE, H5T_NATIVE_INT64, 2, d2, shapes);
  if (e >= 0) e = dset_write(g, "trainable", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, trainable);
  if (str >= 0) H5Tclose(str);
  if (g >= 0 && H5Gclose(g) < 0) e = -1;
  free(names), free(shapes), free(trainable);
  return e;
}

static herr_t write_values(hid_t f, const struct _tsr_ck *ck, const char *group, int which) {
  hid_t g = H5Gcreate2(f, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = g < 0 ? -1 : 0;
  for (int i = 0; e >= 0 && i < ck->n; i++) {
    const struct _tsr_ck_tensor *t = &ck->t[i];
    if (which >= 0 && !t->trainable) continue;
    hsize_t dims[TSR_MAX_DIMS];
    for (int d = 0; d < t->shape.ndim; d++) dims[d] = (hsize_t)t->shape.dims[d];
    const float *v = which < 0 ? t->w : t->state[which];
    e = dset_write(g, t->name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, t->shape.ndim, dims, v);
  }
  if (g >= 0 && H5Gclose(g) < 0) e = -1;
  return e;
}

/* Writes ck to path through path.tmp, fsync and rename, then syncs the folder so the rename lasts. */
tsr_status _tsr_ck_write(const struct _tsr_ck *ck, const char *path) {
  size_t len = strlen(path);
  char *tmp = malloc(len + 5), *dir = malloc(len + 2), why[256];
  if (!tmp || !dir) {
    free(tmp), free(dir);
    return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
  }
  snprintf(tmp, len + 5, "%s.tmp", path);
  _tsr_hdf5_lock();
  hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  tsr_status s = TSR_OK;
  if (f < 0) s = _tsr_error(TSR_ERR_IO, "%s: cannot create checkpoint file (%s)", tmp, _tsr_hdf5_reason(why));
  herr_t e = f < 0 ? -1 : write_meta(f, ck);
  if (e >= 0) e = write_layout(f, ck);
  if (e >= 0) e = write_values(f, ck, "params", -1);
  for (int k = 0; e >= 0 && k < ck->nstate; k++) e = write_values(f, ck, ck->state[k], k);
  if (f >= 0 && e < 0) s = _tsr_error(TSR_ERR_IO, "%s: cannot write the checkpoint (%s)", tmp, _tsr_hdf5_reason(why));
  if (f >= 0 && H5Fclose(f) < 0 && s == TSR_OK) s = _tsr_error(TSR_ERR_IO, "%s: cannot close the checkpoint", tmp);
  _tsr_hdf5_unlock();
  if (s == TSR_OK) s = _tsr_ck_fsync(tmp, 0);
  if (s == TSR_OK) s = _tsr_ck_write_sum_of(path, tmp); /* before the rename: a final name always has its digest */
  if (s == TSR_OK && rename(tmp, path) != 0)
    s = _tsr_error(TSR_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
  if (s != TSR_OK) remove(tmp);
  if (s == TSR_OK) {
    strcpy(dir, path);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    s = _tsr_ck_fsync(dir, 1);
  }
  free(tmp), free(dir);
  return s;
}

/* ---- reading ---- */

/* ck->state from "a,b": names of 1 to TSR_CK_STATE_NAME - 1 bytes without '/'. */
static tsr_status parse_state_names(struct _tsr_ck *ck, const char *file, const char *list) {
  ck->nstate = 0;
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (ck->nstate == TSR_CK_MAX_STATE || len == 0 || len >= TSR_CK_STATE_NAME || memchr(p, '/', len) ||
        (len == 1 && *p == '.'))
      return _tsr_error(TSR_ERR_FORMAT, "%s: optimizer state tensors '%s': at most %d names of 1 to %d bytes", file,
                        list, TSR_CK_MAX_STATE, TSR_CK_STATE_NAME - 1);
    memcpy(ck->state[ck->nstate], p, len);
    ck->state[ck->nstate++][len] = '\0';
    p += len + (p[len] == ',');
  }
  return TSR_OK;
}

static tsr_status read_optim(hid_t f, const char *file, struct _tsr_ck *ck) {
  tsr_optim_spec *o = &ck->meta.optim;
  if (H5Lexists(f, "optimizer", H5P_DEFAULT) <= 0)
    return _tsr_error(TSR_ERR_FORMAT, "%s: group 'optimizer' is missing", file);
  hid_t g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
  if (g < 0) return _tsr_error(TSR_ERR_FORMAT, "%s: 'optimizer' is not a group", file);
  char kind[CK_KIND_MAX];
  int32_t nesterov = 0;
  tsr_status s = _tsr_ck_attr_read_str(g, file, "kind", kind, sizeof kind);
  char why[512];
  if (s == TSR_OK && tsr_optim_kind_parse(kind, &o->kind) != TSR_OK)
    snprintf(why, sizeof why, "%s", tsr_last_error()), s = _tsr_error(TSR_ERR_FORMAT, "%s: %s", file, why);
  struct {
    const char *name;
    float *v;
  } f32[] = {{"lr", &o->lr},       {"momentum", &o->momentum}, {"weight_decay", &o->weight_decay},
             {"beta1", &o->beta1}, {"beta2", &o->beta2},       {"eps", &o->eps}};
  for (size_t i = 0; s == TSR_OK && i < sizeof f32 / sizeof *f32; i++)
    s = _tsr_ck_attr_read(g, file, f32[i].name, H5T_NATIVE_FLOAT, f32[i].v);
  if (s == TSR_OK) s = _tsr_ck_attr_read(g, file, "nesterov", H5T_NATIVE_INT32, &nesterov);
  o->nesterov = nesterov;
  /* LARC: written only when on; otherwise the kind's defaults (off) */
  tsr_optim_spec d = tsr_optim_spec_default(o->kind);
  int32_t larc = 0, larc_clip = d.larc_clip;
  o->larc_eta = d.larc_eta;
  if (s == TSR_OK && H5Aexists(g, "larc") > 0) {
    s = _tsr_ck_attr_read(g, file, "larc", H5T_NATIVE_INT32, &larc);
    if (s == TSR_OK) s = _tsr_ck_attr_read(g, file, "larc_clip", H5T_NATIVE_INT32, &larc_clip);
    if (s == TSR_OK) s = _tsr_ck_attr_read(g, file, "larc_eta", H5T_NATIVE_FLOAT, &o->larc_eta);
  }
  o->larc = larc, o->larc_clip = larc_clip;
  for (int i = 0; s == TSR_OK && H5Aexists(g, "extra0") > 0 && i < TSR_OPTIM_EXTRA; i++) {
    char name[16];
    snprintf(name, sizeof name, "extra%d", i);
    s = _tsr_ck_attr_read(g, file, name, H5T_NATIVE_FLOAT, &o->extra[i]);
  }
  o->momentum_sync_layers[0] = '\0';
  if (s == TSR_OK && H5Aexists(g, "momentum_sync_layers") > 0)
    s = _tsr_ck_attr_read_str(g, file, "momentum_sync_layers", o->momentum_sync_layers, sizeof o->momentum_sync_layers);
  char names[TSR_CK_MAX_STATE * TSR_CK_STATE_NAME];
  if (s == TSR_OK && H5Aexists(g, "state_tensors") > 0) {
    s = _tsr_ck_attr_read_str(g, file, "state_tensors", names, sizeof names);
    if (s == TSR_OK) s = parse_state_names(ck, file, names);
  }
  H5Gclose(g);
  return s;
}

static tsr_status read_meta(hid_t f, const char *file, struct _tsr_ck *ck) {
  tsr_checkpoint_meta *m = &ck->meta;
  int32_t version = 0;
  TSR_TRY(_tsr_ck_attr_read(f, file, "version", H5T_NATIVE_INT32, &version));
  if (version < 1 || version > TSR_CK_VERSION)
    return _tsr_error(TSR_ERR_FORMAT, "%s: checkpoint version %d, this build reads versions 1 to %d", file, version,
                      TSR_CK_VERSION);
  ck->version = version;
  TSR_TRY(_tsr_ck_attr_read(f, file, "step", H5T_NATIVE_INT64, &m->step));
  TSR_TRY(_tsr_ck_attr_read(f, file, "epoch", H5T_NATIVE_INT64, &m->epoch));
  TSR_TRY(_tsr_ck_attr_read(f, file, "position", H5T_NATIVE_INT64, &m->position));
  TSR_TRY(_tsr_ck_attr_read(f, file, "trainer_steps", H5T_NATIVE_INT64, &m->trainer_steps));
  TSR_TRY(_tsr_ck_attr_read(f, file, "trainer_updates", H5T_NATIVE_INT64, &m->trainer_updates));
  TSR_TRY(_tsr_ck_attr_read(f, file, "nranks", H5T_NATIVE_INT32, &m->nranks));
  TSR_TRY(_tsr_ck_attr_read(f, file, "batch", H5T_NATIVE_INT32, &m->batch));
  TSR_TRY(_tsr_ck_attr_read(f, file, "seed", H5T_NATIVE_UINT64, &m->seed));
  TSR_TRY(_tsr_ck_attr_read(f, file, "loss_sum", H5T_NATIVE_DOUBLE, &m->loss_sum));
  if (H5Aexists(f, "loss_scale") > 0) { /* only runs with dynamic loss scaling write these */
    TSR_TRY(_tsr_ck_attr_read(f, file, "loss_scale", H5T_NATIVE_DOUBLE, &m->loss_scale));
    TSR_TRY(_tsr_ck_attr_read(f, file, "loss_scale_good_steps", H5T_NATIVE_INT64, &m->loss_scale_good_steps));
    TSR_TRY(_tsr_ck_attr_read(f, file, "loss_scale_steps", H5T_NATIVE_INT64, &m->loss_scale_steps));
    TSR_TRY(_tsr_ck_attr_read(f, file, "loss_scale_skipped", H5T_NATIVE_INT64, &m->loss_scale_skipped));
  }
  if (version >= 2) {
    m->recorded = 1;
    TSR_TRY(_tsr_ck_attr_read(f, file, "loss_scale_option", H5T_NATIVE_DOUBLE, &m->loss_scale_option));
    TSR_TRY(_tsr_ck_attr_read(f, file, "loss_scale_init", H5T_NATIVE_DOUBLE, &m->loss_scale_init));
    TSR_TRY(_tsr_ck_attr_read(f, file, "loss_scale_interval", H5T_NATIVE_INT32, &m->loss_scale_interval));
    TSR_TRY(read_optim(f, file, ck));
    TSR_TRY(_tsr_ck_schedule_read(f, file, m));
  }
  return _tsr_ck_attr_read(f, file, "checksum", H5T_NATIVE_UINT64, &ck->checksum);
}

/* Opens dataset `name` under `loc` and checks it has `nd` dimensions equal to `want` (if not NULL; else
 * writes them to `got`). */
static tsr_status dset_open(hid_t loc, const char *file, const char *name, int nd, const hsize_t *want, hsize_t *got,
                            hid_t *out) {
  *out = -1;
  if (H5Lexists(loc, name, H5P_DEFAULT) <= 0)
    return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' is missing", file, name);
  hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
  hid_t sp = d < 0 ? -1 : H5Dget_space(d);
  int rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
  hsize_t dims[TSR_MAX_DIMS + 1] = {0};
  tsr_status s = TSR_OK;
  if (rank < 0) s = _tsr_error(TSR_ERR_FORMAT, "%s: '%s' is not a readable dataset", file, name);
  else if (rank != nd) s = _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' has %d dimensions, expected %d", file, name, rank, nd);
  if (s == TSR_OK) H5Sget_simple_extent_dims(sp, dims, NULL);
  for (int i = 0; s == TSR_OK && want && i < nd; i++)
    if (dims[i] != want[i])
      s = _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' has extent %llu in dimension %d, the layout says %llu", file,
                     name, (unsigned long long)dims[i], i, (unsigned long long)want[i]);
  for (int i = 0; s == TSR_OK && got && i < nd; i++) got[i] = dims[i];
  if (sp >= 0) H5Sclose(sp);
  if (s != TSR_OK) {
    if (d >= 0) H5Dclose(d);
    return s;
  }
  *out = d;
  return TSR_OK;
}

/* The file's values must be of the memory type's class and at most 8 bytes wide (names: fixed-size
 * strings of at most TSR_CK_NAME_MAX): H5Dread sizes its conversion buffer by the file's type, and
 * a fuzzed checkpoint (without a .sum) had it allocate 4 GiB. */
static tsr_status check_file_type(hid_t d, const char *file, const char *name, hid_t mtype) {
  hid_t ft = H5Dget_type(d);
  H5T_class_t fc = ft < 0 ? H5T_NO_CLASS : H5Tget_class(ft), mc = H5Tget_class(mtype);
  size_t fs = ft < 0 ? 0 : H5Tget_size(ft), limit = mc == H5T_STRING ? H5Tget_size(mtype) : 8;
  int vlen = ft >= 0 && fc == H5T_STRING && H5Tis_variable_str(ft) > 0;
  if (ft >= 0) H5Tclose(ft);
  if (fc != mc || fs == 0 || fs > limit || vlen)
    return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' holds %zu-byte values of type class %d, expected class %d of "
                      "at most %zu bytes", file, name, fs, (int)fc, (int)mc, limit);
  return TSR_OK;
}

static tsr_status dset_read(hid_t d, const char *file, const char *name, hid_t mtype, void *buf) {
  tsr_status s = check_file_type(d, file, name, mtype);
  herr_t e = s == TSR_OK ? H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) : 0;
  H5Dclose(d);
  char why[256];
  if (s != TSR_OK) return s;
  return e < 0 ? _tsr_error(TSR_ERR_FORMAT, "%s: cannot read dataset '%s' (%s)", file, name, _tsr_hdf5_reason(why))
               : TSR_OK;
}

/* Validates one layout row: a name usable as a dataset name and a shape of at most 2^31 values. */
static tsr_status check_row(const char *file, int i, struct _tsr_ck_tensor *t, const int64_t *row, int32_t trainable) {
  if (!memchr(t->name, '\0', TSR_CK_NAME_MAX) || !t->name[0] || strchr(t->name, '/') || strcmp(t->name, ".") == 0)
    return _tsr_error(TSR_ERR_FORMAT, "%s: layout name %d is empty or invalid", file, i);
  if (row[0] < 0 || row[0] > TSR_MAX_DIMS)
    return _tsr_error(TSR_ERR_FORMAT, "%s: tensor '%s' has %lld dimensions in the layout", file, t->name,
                      (long long)row[0]);
  t->shape.ndim = (int)row[0];
  int64_t numel = 1;
  for (int d = 0; d < t->shape.ndim; d++) {
    t->shape.dims[d] = row[1 + d];
    if (row[1 + d] < 0 || row[1 + d] > ((int64_t)1 << 31) || (numel *= row[1 + d]) > ((int64_t)1 << 31))
      return _tsr_error(TSR_ERR_FORMAT, "%s: tensor '%s' has an invalid shape in the layout", file, t->name);
  }
  if (trainable != 0 && trainable != 1)
    return _tsr_error(TSR_ERR_FORMAT, "%s: tensor '%s': trainable flag %d", file, t->name, (int)trainable);
  t->trainable = trainable;
  return TSR_OK;
}

static tsr_status read_layout(hid_t f, const char *file, struct _tsr_ck *ck) {
  if (H5Lexists(f, "layout", H5P_DEFAULT) <= 0) return _tsr_error(TSR_ERR_FORMAT, "%s: group 'layout' is missing", file);
  hid_t g = H5Gopen2(f, "layout", H5P_DEFAULT);
  if (g < 0) return _tsr_error(TSR_ERR_FORMAT, "%s: 'layout' is not a group", file);
  hsize_t n = 0;
  hid_t d = -1, str = name_type();
  tsr_status s = str < 0 ? _tsr_error(TSR_ERR_RUNTIME, "HDF5: cannot make a string type") : TSR_OK;
  if (s == TSR_OK) s = dset_open(g, file, "names", 1, NULL, &n, &d);
  if (s == TSR_OK && n > CK_MAX_TENSORS) {
    H5Dclose(d);
    s = _tsr_error(TSR_ERR_FORMAT, "%s: layout lists %llu tensors", file, (unsigned long long)n);
  }
  char *names = NULL;
  int64_t *shapes = NULL;
  int32_t *trainable = NULL;
  if (s == TSR_OK) {
    names = calloc(n ? n : 1, TSR_CK_NAME_MAX);
    shapes = calloc(n ? n : 1, sizeof(int64_t) * (TSR_MAX_DIMS + 1));
    trainable = calloc(n ? n : 1, sizeof(int32_t));
    ck->t = calloc(n ? n : 1, sizeof *ck->t);
    if (!names || !shapes || !trainable || !ck->t) {
      H5Dclose(d);
      s = _tsr_error(TSR_ERR_NOMEM, "%s: out of memory for a layout of %llu tensors", file, (unsigned long long)n);
    }
  }
  if (s == TSR_OK) s = dset_read(d, file, "layout/names", str, names);
  hsize_t d2[2] = {0, 0}, width = TSR_MAX_DIMS + 1;
  if (s == TSR_OK) s = dset_open(g, file, "shapes", 2, NULL, d2, &d);
  if (s == TSR_OK && (d2[0] != n || d2[1] < LAYOUT_MIN_WIDTH || d2[1] > TSR_MAX_DIMS + 1)) {
    H5Dclose(d);
    s = _tsr_error(TSR_ERR_FORMAT, "%s: layout/shapes is %llu x %llu, expected %llu rows of %d to %d", file,
                   (unsigned long long)d2[0], (unsigned long long)d2[1], (unsigned long long)n, LAYOUT_MIN_WIDTH,
                   TSR_MAX_DIMS + 1);
  }
  int64_t *rows = s == TSR_OK ? calloc(n ? n : 1, sizeof(int64_t) * d2[1]) : NULL;
  if (s == TSR_OK && !rows) {
    H5Dclose(d);
    s = _tsr_error(TSR_ERR_NOMEM, "%s: out of memory for a layout of %llu tensors", file, (unsigned long long)n);
  }
  if (s == TSR_OK) s = dset_read(d, file, "layout/shapes", H5T_NATIVE_INT64, rows);
  for (hsize_t i = 0; s == TSR_OK && i < n; i++) memcpy(shapes + i * width, rows + i * d2[1], sizeof(int64_t) * d2[1]);
  free(rows);
  if (s == TSR_OK) s = dset_open(g, file, "trainable", 1, &n, NULL, &d);
  if (s == TSR_OK) s = dset_read(d, file, "layout/trainable", H5T_NATIVE_INT32, trainable);
  for (hsize_t i = 0; s == TSR_OK && i < n; i++) {
    memcpy(ck->t[i].name, names + i * TSR_CK_NAME_MAX, TSR_CK_NAME_MAX);
    ck->n = (int)i + 1;
    s = check_row(file, (int)i, &ck->t[i], shapes + i * width, trainable[i]);
  }
  if (str >= 0) H5Tclose(str);
  H5Gclose(g);
  free(names), free(shapes), free(trainable);
  return s;
}

static tsr_status read_values(hid_t f, const char *file, struct _tsr_ck *ck, const char *group, int which) {
  if (H5Lexists(f, group, H5P_DEFAULT) <= 0) return _tsr_error(TSR_ERR_FORMAT, "%s: group '%s' is missing", file, group);
  hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
  if (g < 0) return _tsr_error(TSR_ERR_FORMAT, "%s: '%s' is not a group", file, group);
  tsr_status s = TSR_OK;
  for (int i = 0; s == TSR_OK && i < ck->n; i++) {
    struct _tsr_ck_tensor *t = &ck->t[i];
    if (which >= 0 && !t->trainable) continue;
    int64_t numel = tsr_shape_numel(&t->shape);
    float *buf = malloc(numel > 0 ? (size_t)numel * sizeof(float) : 1);
    if (!buf) {
      s = _tsr_error(TSR_ERR_NOMEM, "%s: out of memory for tensor '%s'", file, t->name);
      break;
    }
    if (which < 0) t->w = buf;
    else t->state[which] = buf;
    hsize_t dims[TSR_MAX_DIMS];
    for (int d = 0; d < t->shape.ndim; d++) dims[d] = (hsize_t)t->shape.dims[d];
    hid_t d;
    char what[TSR_CK_NAME_MAX + 16];
    snprintf(what, sizeof what, "%s/%s", group, t->name);
    s = dset_open(g, file, t->name, t->shape.ndim, dims, NULL, &d);
    if (s == TSR_OK) s = dset_read(d, file, what, H5T_NATIVE_FLOAT, buf);
  }
  H5Gclose(g);
  return s;
}

/* /input_norm or /target_norm (`group`)/mean and std: float32 [C] each, C >= 1, into *channels,
 * *mean and *std. */
static tsr_status read_norm(hid_t f, const char *file, const char *group, int *channels, float **mean, float **std) {
  if (H5Lexists(f, group, H5P_DEFAULT) <= 0) return _tsr_error(TSR_ERR_FORMAT, "%s: group '%s' is missing", file, group);
  hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
  if (g < 0) return _tsr_error(TSR_ERR_FORMAT, "%s: '%s' is not a group", file, group);
  hsize_t c = 0;
  hid_t d;
  char what[64];
  tsr_status s = dset_open(g, file, "mean", 1, NULL, &c, &d);
  if (s == TSR_OK && (c < 1 || c > CK_MAX_CHANNELS)) {
    H5Dclose(d);
    s = _tsr_error(TSR_ERR_FORMAT, "%s: %s of %llu channels", file, group, (unsigned long long)c);
  }
  if (s == TSR_OK) {
    *mean = malloc(sizeof(float) * c), *std = malloc(sizeof(float) * c);
    *channels = (int)c;
    if (!*mean || !*std) {
      H5Dclose(d);
      s = _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", file);
    }
  }
  snprintf(what, sizeof what, "%s/mean", group);
  if (s == TSR_OK) s = dset_read(d, file, what, H5T_NATIVE_FLOAT, *mean);
  if (s == TSR_OK) s = dset_open(g, file, "std", 1, &c, NULL, &d);
  snprintf(what, sizeof what, "%s/std", group);
  if (s == TSR_OK) s = dset_read(d, file, what, H5T_NATIVE_FLOAT, *std);
  H5Gclose(g);
  return s;
}

tsr_status _tsr_ck_read(struct _tsr_ck *ck, const char *path) {
  memset(ck, 0, sizeof *ck);
  ck->nstate = 2; /* unless the file lists them */
  strcpy(ck->state[0], legacy_state[0]), strcpy(ck->state[1], legacy_state[1]);
  if (access(path, R_OK) != 0) return _tsr_error(TSR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  TSR_TRY(_tsr_ck_check_sum(path));
  char why[256];
  _tsr_hdf5_lock();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  tsr_status s = TSR_OK;
  if (f < 0) s = _tsr_error(TSR_ERR_FORMAT, "%s: not a readable HDF5 file, truncated or corrupted (%s)", path, _tsr_hdf5_reason(why));
  if (s == TSR_OK) s = read_meta(f, path, ck);
  if (s == TSR_OK && ck->version >= 2) s = read_norm(f, path, "input_norm", &ck->norm_c, &ck->norm_mean, &ck->norm_std);
  if (s == TSR_OK && ck->version >= 2 && H5Lexists(f, "target_norm", H5P_DEFAULT) > 0)
    s = read_norm(f, path, "target_norm", &ck->tnorm_c, &ck->tnorm_mean, &ck->tnorm_std);
  if (s == TSR_OK) s = read_layout(f, path, ck);
  if (s == TSR_OK) s = read_values(f, path, ck, "params", -1);
  for (int k = 0; s == TSR_OK && k < ck->nstate; k++) s = read_values(f, path, ck, ck->state[k], k);
  if (f >= 0) H5Fclose(f);
  _tsr_hdf5_unlock();
  if (s == TSR_OK) {
    uint64_t h = _tsr_ck_checksum(ck);
    if (h != ck->checksum)
      s = _tsr_error(TSR_ERR_FORMAT, "%s: checksum mismatch (stored %016llx, computed %016llx): the file is corrupted",
                     path, (unsigned long long)ck->checksum, (unsigned long long)h);
  }
  if (s == TSR_OK && (ck->meta.step < 0 || ck->meta.epoch < 1 || ck->meta.position < 0 || ck->meta.trainer_steps < 0 ||
                      ck->meta.trainer_updates < 0 || ck->meta.trainer_updates > ck->meta.trainer_steps))
    s = _tsr_error(TSR_ERR_FORMAT, "%s: inconsistent counters (step %lld, epoch %lld, position %lld)", path,
                   (long long)ck->meta.step, (long long)ck->meta.epoch, (long long)ck->meta.position);
  if (s != TSR_OK) _tsr_ck_free(ck);
  return s;
}

/* Checkpoints of a trainer (through its public tensor, moment and counter calls) and folders of them:
 * dir/ckpt-<step>.h5, newest K kept, the newest valid one found on resume (invalid ones are reported
 * and skipped). Under MPI only rank 0 writes; every rank reads. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train/trainer.h"
#include "io/checkpoint_int.h"
#include "runtime/error.h"

static tsr_status gather(tsr_trainer *t, struct _tsr_ck *ck) {
  int n = tsr_trainer_num_tensors(t);
  ck->t = calloc(n ? (size_t)n : 1, sizeof *ck->t);
  if (!ck->t) return _tsr_error(TSR_ERR_NOMEM, "checkpoint: out of memory for %d tensors", n);
  for (int i = 0; i < n; i++) {
    struct _tsr_ck_tensor *c = &ck->t[i];
    const char *name;
    ck->n = i + 1;
    TSR_TRY(tsr_trainer_tensor_info(t, i, &name, &c->shape, &c->trainable));
    if (strlen(name) >= TSR_CK_NAME_MAX)
      return _tsr_error(TSR_ERR_ARG, "checkpoint: tensor name '%s' is longer than %d bytes", name, TSR_CK_NAME_MAX - 1);
    strcpy(c->name, name);
    size_t bytes = (size_t)tsr_shape_numel(&c->shape) * sizeof(float);
    if (!(c->w = malloc(bytes ? bytes : 1))) return _tsr_error(TSR_ERR_NOMEM, "checkpoint: out of memory for '%s'", name);
    TSR_TRY(tsr_trainer_tensor_get(t, i, c->w));
    for (int k = 0; c->trainable && k < 2; k++) {
      if (!(c->m[k] = malloc(bytes ? bytes : 1))) return _tsr_error(TSR_ERR_NOMEM, "checkpoint: out of memory for '%s'", name);
      TSR_TRY(tsr_trainer_moment_get(t, i, k, c->m[k]));
    }
  }
  return TSR_OK;
}

tsr_status tsr_checkpoint_save(tsr_trainer *t, const char *path, const tsr_checkpoint_meta *meta) {
  if (!t || !path || !meta) return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_save: trainer, path and meta are required");
  if (meta->epoch < 1 || meta->position < 0 || meta->step < 0)
    return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_save: %s: epoch %lld (from 1), position %lld, step %lld", path,
                      (long long)meta->epoch, (long long)meta->position, (long long)meta->step);
  TSR_TRY(tsr_trainer_sync(t));
  if (tsr_context_rank(t->ctx) != 0) return TSR_OK;
  struct _tsr_ck ck = {.meta = *meta};
  ck.meta.seed = t->seed;
  tsr_trainer_counters(t, &ck.meta.trainer_steps, &ck.meta.trainer_updates);
  tsr_loss_scale_state ls = {0};
  ck.meta.loss_scale = 0;
  if (t->scaler_h) {
    TSR_TRY(tsr_trainer_loss_scale_get(t, &ls));
    ck.meta.loss_scale = ls.scale, ck.meta.loss_scale_good_steps = ls.good_steps;
    ck.meta.loss_scale_steps = ls.steps, ck.meta.loss_scale_skipped = ls.skipped;
  }
  tsr_status s = gather(t, &ck);
  if (s == TSR_OK) {
    ck.checksum = _tsr_ck_checksum(&ck);
    s = _tsr_ck_write(&ck, path);
  }
  _tsr_ck_free(&ck);
  return s;
}

static tsr_status match_layout(tsr_trainer *t, const struct _tsr_ck *ck, const char *path) {
  int n = tsr_trainer_num_tensors(t);
  if (ck->n != n)
    return _tsr_error(TSR_ERR_MISMATCH, "%s: the checkpoint has %d tensors, the model has %d", path, ck->n, n);
  for (int i = 0; i < n; i++) {
    const char *name;
    tsr_shape shape;
    int trainable;
    TSR_TRY(tsr_trainer_tensor_info(t, i, &name, &shape, &trainable));
    const struct _tsr_ck_tensor *c = &ck->t[i];
    if (strcmp(name, c->name) != 0)
      return _tsr_error(TSR_ERR_MISMATCH, "%s: tensor %d is '%s' in the checkpoint, '%s' in the model", path, i,
                        c->name, name);
    int same = shape.ndim == c->shape.ndim && trainable == c->trainable;
    for (int d = 0; same && d < shape.ndim; d++) same = shape.dims[d] == c->shape.dims[d];
    if (!same) {
      char a[96], b[96];
      return _tsr_error(TSR_ERR_MISMATCH, "%s: tensor '%s' has shape %s%s in the checkpoint, %s%s in the model", path,
                        name, tsr_shape_str(&c->shape, a, sizeof a), c->trainable ? "" : " (not trainable)",
                        tsr_shape_str(&shape, b, sizeof b), trainable ? "" : " (not trainable)");
    }
  }
  return TSR_OK;
}

tsr_status tsr_checkpoint_load(tsr_trainer *t, const char *path, tsr_checkpoint_meta *meta) {
  if (!t || !path) return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_load: trainer and path are required");
  struct _tsr_ck ck;
  TSR_TRY(_tsr_ck_read(&ck, path));
  tsr_status s = match_layout(t, &ck, path);
  if (s == TSR_OK && ck.meta.seed != t->seed)
    s = _tsr_error(TSR_ERR_MISMATCH, "%s: the checkpoint was written with seed %llu, this run uses seed %llu", path,
                   (unsigned long long)ck.meta.seed, (unsigned long long)t->seed);
  if (s == TSR_OK) s = tsr_trainer_sync(t);
  for (int i = 0; s == TSR_OK && i < ck.n; i++) {
    s = tsr_trainer_tensor_set(t, i, ck.t[i].w);
    for (int k = 0; s == TSR_OK && ck.t[i].trainable && k < 2; k++) s = tsr_trainer_moment_set(t, i, k, ck.t[i].m[k]);
  }
  if (s == TSR_OK) s = tsr_trainer_set_counters(t, ck.meta.trainer_steps, ck.meta.trainer_updates);
  if (s == TSR_OK && t->scaler_h && ck.meta.loss_scale != 0) {
    tsr_loss_scale_state ls = {.scale = ck.meta.loss_scale, .good_steps = ck.meta.loss_scale_good_steps,
                               .steps = ck.meta.loss_scale_steps, .skipped = ck.meta.loss_scale_skipped};
    s = tsr_trainer_loss_scale_set(t, &ls);
    if (s != TSR_OK) s = _tsr_error(TSR_ERR_FORMAT, "%s: loss scaler state: %s", path, tsr_last_error());
  }
  if (s == TSR_OK && meta) *meta = ck.meta;
  _tsr_ck_free(&ck);
  return s;
}

tsr_status tsr_checkpoint_verify(const char *path, tsr_checkpoint_meta *meta, int *ntensors) {
  if (!path) return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_verify: path is NULL");
  struct _tsr_ck ck;
  TSR_TRY(_tsr_ck_read(&ck, path));
  if (meta) *meta = ck.meta;
  if (ntensors) *ntensors = ck.n;
  _tsr_ck_free(&ck);
  return TSR_OK;
}

/* ---- folders ---- */

/* Step of a file named ckpt-<digits>.h5, -1 for any other name. */
static int64_t ckpt_step(const char *name) {
  if (strncmp(name, "ckpt-", 5) != 0) return -1;
  const char *p = name + 5;
  int64_t v = 0;
  int nd = 0;
  for (; *p >= '0' && *p <= '9'; p++, nd++) {
    if (nd >= 18) return -1;
    v = v * 10 + (*p - '0');
  }
  return nd > 0 && strcmp(p, ".h5") == 0 ? v : -1;
}

static int by_step_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps of the checkpoints in dir, newest first (*steps malloc'ed). */
static tsr_status list_steps(const char *dir, int64_t **steps, int *count) {
  *steps = NULL, *count = 0;
  DIR *d = opendir(dir);
  if (!d) return _tsr_error(TSR_ERR_IO, "%s: cannot open the checkpoint folder: %s", dir, strerror(errno));
  int cap = 0;
  tsr_status s = TSR_OK;
  for (struct dirent *e; (e = readdir(d));) {
    int64_t st = ckpt_step(e->d_name);
    if (st < 0) continue;
    if (*count == cap) {
      cap = cap ? 2 * cap : 16;
      int64_t *p = realloc(*steps, cap * sizeof **steps);
      if (!p) {
        s = _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", dir);
        break;
      }
      *steps = p;
    }
    (*steps)[(*count)++] = st;
  }
  closedir(d);
  if (*count) qsort(*steps, *count, sizeof **steps, by_step_desc);
  return s;
}

static void ckpt_path(char *out, size_t cap, const char *dir, int64_t step) {
  snprintf(out, cap, "%s/ckpt-%012lld.h5", dir, (long long)step);
}

tsr_status tsr_checkpoint_find_latest(const char *dir, char *path_out, size_t cap, tsr_checkpoint_meta *meta) {
  if (!dir || !path_out || cap == 0) return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_find_latest: dir and path_out are required");
  int64_t *steps;
  int n;
  TSR_TRY(list_steps(dir, &steps, &n));
  int rejected = 0;
  for (int i = 0; i < n; i++) {
    ckpt_path(path_out, cap, dir, steps[i]);
    if (tsr_checkpoint_verify(path_out, meta, NULL) == TSR_OK) {
      free(steps);
      if (rejected) _tsr_log(0, "checkpoint: using %s", path_out);
      return TSR_OK;
    }
    _tsr_log(0, "checkpoint rejected: %s", tsr_last_error());
    rejected++;
  }
  free(steps);
  path_out[0] = '\0';
  if (rejected) return _tsr_error(TSR_ERR_FORMAT, "%s: none of its %d checkpoints is valid", dir, rejected);
  return _tsr_error(TSR_ERR_IO, "%s: no checkpoint (ckpt-<step>.h5) in this folder", dir);
}

static tsr_status make_dir(const char *dir) {
  struct stat st;
  if (stat(dir, &st) == 0) return S_ISDIR(st.st_mode) ? TSR_OK : _tsr_error(TSR_ERR_IO, "%s: not a folder", dir);
  char *p = strdup(dir);
  if (!p) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", dir);
  for (char *q = p + 1; *q; q++) {
    if (*q != '/') continue;
    *q = '\0';
    mkdir(p, 0777);
    *q = '/';
  }
  int r = mkdir(p, 0777), err = errno;
  free(p);
  if (r != 0 && err != EEXIST) return _tsr_error(TSR_ERR_IO, "%s: cannot create the folder: %s", dir, strerror(err));
  return TSR_OK;
}

tsr_status tsr_checkpoint_save_rotating(tsr_trainer *t, const char *dir, int keep, const tsr_checkpoint_meta *meta,
                                        char *path_out, size_t cap) {
  if (!t || !dir || !meta) return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_save_rotating: trainer, dir and meta are required");
  char path[4096];
  ckpt_path(path, sizeof path, dir, meta->step);
  if (path_out && cap) snprintf(path_out, cap, "%s", path);
  if (tsr_context_rank(t->ctx) != 0) return tsr_checkpoint_save(t, path, meta); /* syncs only */
  TSR_TRY(make_dir(dir));
  TSR_TRY(tsr_checkpoint_save(t, path, meta));
  int64_t *steps;
  int n;
  TSR_TRY(list_steps(dir, &steps, &n));
  for (int i = keep > 0 ? keep : n; i < n; i++) {
    ckpt_path(path, sizeof path, dir, steps[i]);
    if (remove(path) != 0) _tsr_log(1, "checkpoint: cannot remove %s: %s", path, strerror(errno));
    char sum[4200];
    snprintf(sum, sizeof sum, "%s.sum", path);
    remove(sum); /* its digest (absent for checkpoints written by hand) */
  }
  free(steps);
  return TSR_OK;
}

/* Checkpoints of a trainer (through its public tensor, moment and counter calls) and folders of them:
 * dir/ckpt-<step>.h5, newest K kept, the newest valid one found on resume (invalid ones are reported
 * and skipped). Loading refuses another optimizer kind and reports changed hyperparameters and
 * loss-scaling options. Under MPI only rank 0 writes; every rank reads. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train/trainer.h"
#include "io/checkpoint_int.h"
#include "runtime/error.h"

/* The trainer's input normalisation, or the identity (mean 0, std 1) when it has none. */
static tsr_status gather_norm(tsr_trainer *t, struct _tsr_ck *ck) {
  int c, h, w;
  const float *mean, *std;
  tsr_trainer_input_shape(t, &c, &h, &w);
  tsr_trainer_input_norm(t, &mean, &std);
  ck->norm_mean = malloc(sizeof(float) * c), ck->norm_std = malloc(sizeof(float) * c);
  if (!ck->norm_mean || !ck->norm_std) return _tsr_error(TSR_ERR_NOMEM, "checkpoint: out of memory");
  ck->norm_c = c;
  for (int i = 0; i < c; i++) ck->norm_mean[i] = mean ? mean[i] : 0.0f, ck->norm_std[i] = mean ? std[i] : 1.0f;
  return TSR_OK;
}

static tsr_status gather(tsr_trainer *t, struct _tsr_ck *ck) {
  TSR_TRY(gather_norm(t, ck));
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
  struct _tsr_ck ck = {.meta = *meta, .version = TSR_CK_VERSION};
  ck.meta.seed = t->seed;
  ck.meta.recorded = 1;
  tsr_trainer_optim(t, &ck.meta.optim);
  int interval;
  tsr_trainer_loss_scale_options(t, &ck.meta.loss_scale_option, &ck.meta.loss_scale_init, &interval);
  ck.meta.loss_scale_interval = interval;
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

/* "off", "static 1024" or "dynamic (initial scale 65536, growth interval 2000)". */
static const char *scaling_str(double option, double init, int interval, char *buf, size_t cap) {
  if (option == 0)
    snprintf(buf, cap, "off");
  else if (option > 0)
    snprintf(buf, cap, "static %g", option);
  else
    snprintf(buf, cap, "dynamic (initial scale %g, growth interval %d)", init, interval);
  return buf;
}

static const char *norm_str(const float *mean, const float *std, int c, char *buf, size_t cap) {
  if (!mean)
    snprintf(buf, cap, "none");
  else
    snprintf(buf, cap, "channel 0 of %d: mean %.7g, std %.7g", c, mean[0], std[0]);
  return buf;
}

/* The optimizer of the checkpoint must be the run's kind (its moments mean something else for
 * another); changed hyperparameters, loss-scaling options and input normalisation are reported (the
 * run's own hyperparameters and options apply from now on, the checkpoint's normalisation replaces
 * the run's). Returns nonzero (error set) on refusal. */
static tsr_status compare_record(tsr_trainer *t, const struct _tsr_ck *ck, const char *path) {
  const tsr_checkpoint_meta *m = &ck->meta;
  int talk = tsr_context_rank(t->ctx) == 0;
  tsr_optim_spec opt;
  tsr_trainer_optim(t, &opt);
  if (!m->recorded) {
    if (talk)
      _tsr_log(0,
               "%s: written before checkpoints recorded the optimizer (format version %d): its kind and "
               "hyperparameters cannot be checked against this run's (%s); the run's input normalisation is kept",
               path, ck->version, tsr_optim_kind_name(opt.kind));
    return TSR_OK;
  }
  if (m->optim.kind != opt.kind)
    return _tsr_error(TSR_ERR_MISMATCH,
                      "%s: the checkpoint was written by %s; this run uses %s (the optimizer's "
                      "moments would be misread: resume with %s, or start a new run)",
                      path, tsr_optim_kind_name(m->optim.kind), tsr_optim_kind_name(opt.kind),
                      tsr_optim_kind_name(m->optim.kind));
  int c, h, w;
  tsr_trainer_input_shape(t, &c, &h, &w);
  if (ck->norm_c != c)
    return _tsr_error(TSR_ERR_MISMATCH, "%s: input normalisation of %d channels, the model's input has %d", path,
                      ck->norm_c, c);
  char what[512], a[128], b[128];
  if (talk && tsr_optim_spec_diff(&m->optim, &opt, what, sizeof what))
    _tsr_log(0, "%s: optimizer %s: %s (this run's values apply from now on)", path, tsr_optim_kind_name(opt.kind),
             what);
  double option, init;
  int interval;
  tsr_trainer_loss_scale_options(t, &option, &init, &interval);
  if (talk && (m->loss_scale_option != option || m->loss_scale_init != init || m->loss_scale_interval != interval))
    _tsr_log(0, "%s: loss scaling %s -> %s (this run's options apply%s)", path,
             scaling_str(m->loss_scale_option, m->loss_scale_init, m->loss_scale_interval, a, sizeof a),
             scaling_str(option, init, interval, b, sizeof b),
             option == TSR_LOSS_SCALE_DYNAMIC && m->loss_scale != 0 ? "; the saved scaler state is restored" : "");
  const float *mean, *std;
  tsr_trainer_input_norm(t, &mean, &std);
  int same = 1;
  for (int i = 0; i < c; i++)
    same &= (mean ? mean[i] : 0.0f) == ck->norm_mean[i] && (mean ? std[i] : 1.0f) == ck->norm_std[i];
  if (talk && !same) {
    int identity = 1;
    for (int i = 0; i < c; i++) identity &= ck->norm_mean[i] == 0 && ck->norm_std[i] == 1;
    _tsr_log(0, "%s: input normalisation: the checkpoint's (%s) replaces this run's (%s)", path,
             norm_str(identity ? NULL : ck->norm_mean, ck->norm_std, c, a, sizeof a),
             norm_str(mean, std, c, b, sizeof b));
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
  if (s == TSR_OK) s = compare_record(t, &ck, path);
  if (s == TSR_OK && ck.meta.recorded) { /* first: it validates the values (and syncs) */
    s = tsr_trainer_set_input_norm(t, ck.norm_mean, ck.norm_std, ck.norm_c);
    char why[1024];
    if (s != TSR_OK)
      snprintf(why, sizeof why, "%s", tsr_last_error()), s = _tsr_error(TSR_ERR_FORMAT, "%s: %s", path, why);
  }
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
    char why[1024]; /* _tsr_error formats into the buffer tsr_last_error returns */
    if (s != TSR_OK)
      snprintf(why, sizeof why, "%s", tsr_last_error()),
          s = _tsr_error(TSR_ERR_FORMAT, "%s: loss scaler state: %s", path, why);
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

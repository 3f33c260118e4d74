/* Checkpoints of a trainer: its state gathered into the in-memory checkpoint that src/io writes
 * (file format, digest, folders), and a checkpoint read by src/io matched against the trainer and
 * restored. The optimizer's state tensors go by the names its registry entry gives them, so this
 * file does not know the optimizers. Loading refuses another optimizer kind and reports changed
 * hyperparameters and loss-scaling options. Under MPI only rank 0 writes; every rank reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint_int.h"
#include "runtime/error.h"
#include "train/trainer.h"

_Static_assert(TSR_OPTIM_MAX_STATE <= TSR_CK_MAX_STATE, "checkpoints hold every optimizer state tensor");

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

/* The trainer's target standardisation, when it has one (else the file has none). */
static tsr_status gather_target_norm(tsr_trainer *t, struct _tsr_ck *ck) {
  int c, h, w;
  const float *mean, *std;
  tsr_trainer_target_shape(t, &c, &h, &w);
  tsr_trainer_target_norm(t, &mean, &std);
  if (!mean) return TSR_OK;
  ck->tnorm_mean = malloc(sizeof(float) * c), ck->tnorm_std = malloc(sizeof(float) * c);
  if (!ck->tnorm_mean || !ck->tnorm_std) return _tsr_error(TSR_ERR_NOMEM, "checkpoint: out of memory");
  ck->tnorm_c = c;
  memcpy(ck->tnorm_mean, mean, sizeof(float) * c), memcpy(ck->tnorm_std, std, sizeof(float) * c);
  return TSR_OK;
}

static tsr_status gather(tsr_trainer *t, struct _tsr_ck *ck) {
  TSR_TRY(gather_norm(t, ck));
  TSR_TRY(gather_target_norm(t, ck));
  ck->nstate = t->optim->nstate;
  for (int k = 0; k < ck->nstate; k++) snprintf(ck->state[k], sizeof ck->state[k], "%s", t->optim->state[k]);
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
    if (!(c->w = malloc(bytes ? bytes : 1)))
      return _tsr_error(TSR_ERR_NOMEM, "checkpoint: out of memory for '%s'", name);
    TSR_TRY(tsr_trainer_tensor_get(t, i, c->w));
    for (int k = 0; c->trainable && k < ck->nstate; k++) {
      if (!(c->state[k] = malloc(bytes ? bytes : 1)))
        return _tsr_error(TSR_ERR_NOMEM, "checkpoint: out of memory for '%s'", name);
      TSR_TRY(tsr_trainer_moment_get(t, i, k, c->state[k]));
    }
  }
  return TSR_OK;
}

tsr_status tsr_checkpoint_save(tsr_trainer *t, const char *path, const tsr_checkpoint_meta *meta) {
  if (!t || !path || !meta) return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_save: trainer, path and meta are required");
  if (meta->epoch < 1 || meta->position < 0 || meta->step < 0)
    return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_save: %s: epoch %lld (from 1), position %lld, step %lld", path,
                      (long long)meta->epoch, (long long)meta->position, (long long)meta->step);
  if (meta->has_schedule && strcmp(tsr_schedule_kind_name(meta->schedule.spec.kind), "?") == 0)
    return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_save: %s: learning-rate schedule of unknown kind %d", path,
                      (int)meta->schedule.spec.kind);
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

/* from[k]: the checkpoint's state tensor that is the optimizer's state tensor k (by name; a file may
 * hold more, e.g. one written for SGD before optimizers were entries also holds "moment1"). */
static tsr_status match_state(const tsr_trainer *t, const struct _tsr_ck *ck, const char *path, int *from) {
  for (int k = 0; k < t->optim->nstate; k++) {
    from[k] = -1;
    for (int j = 0; j < ck->nstate; j++)
      if (strcmp(ck->state[j], t->optim->state[k]) == 0) from[k] = j;
    if (from[k] < 0)
      return _tsr_error(TSR_ERR_MISMATCH, "%s: the checkpoint holds no optimizer state '%s' (%s needs it)", path,
                        t->optim->state[k], t->optim->name);
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
  tsr_trainer_target_shape(t, &c, &h, &w);
  if (ck->tnorm_c && ck->tnorm_c != c)
    return _tsr_error(TSR_ERR_MISMATCH, "%s: target standardisation of %d channels, the model's output has %d", path,
                      ck->tnorm_c, c);
  tsr_trainer_target_norm(t, &mean, &std);
  same = !mean == !ck->tnorm_c;
  for (int i = 0; same && mean && i < c; i++) same = mean[i] == ck->tnorm_mean[i] && std[i] == ck->tnorm_std[i];
  if (talk && !same)
    _tsr_log(0, "%s: target standardisation: the checkpoint's (%s) replaces this run's (%s)", path,
             norm_str(ck->tnorm_c ? ck->tnorm_mean : NULL, ck->tnorm_std, c, a, sizeof a),
             norm_str(mean, std, c, b, sizeof b));
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
  int from[TSR_OPTIM_MAX_STATE];
  if (s == TSR_OK) s = match_state(t, &ck, path, from);
  if (s == TSR_OK && ck.meta.recorded) { /* first: it validates the values (and syncs) */
    s = tsr_trainer_set_input_norm(t, ck.norm_mean, ck.norm_std, ck.norm_c);
    if (s == TSR_OK) /* none when the file has none */
      s = tsr_trainer_set_target_norm(t, ck.tnorm_c ? ck.tnorm_mean : NULL, ck.tnorm_c ? ck.tnorm_std : NULL, ck.tnorm_c);
    char why[1024];
    if (s != TSR_OK)
      snprintf(why, sizeof why, "%s", tsr_last_error()), s = _tsr_error(TSR_ERR_FORMAT, "%s: %s", path, why);
  }
  if (s == TSR_OK) s = tsr_trainer_sync(t);
  for (int i = 0; s == TSR_OK && i < ck.n; i++) {
    s = tsr_trainer_tensor_set(t, i, ck.t[i].w);
    for (int k = 0; s == TSR_OK && ck.t[i].trainable && k < t->optim->nstate; k++)
      s = tsr_trainer_moment_set(t, i, k, ck.t[i].state[from[k]]);
  }
  if (s == TSR_OK) s = tsr_trainer_set_counters(t, ck.meta.trainer_steps, ck.meta.trainer_updates);
  if (s == TSR_OK && t->scaler_h && ck.meta.loss_scale != 0) {
    tsr_loss_scale_state ls = {.scale = ck.meta.loss_scale,
                               .good_steps = ck.meta.loss_scale_good_steps,
                               .steps = ck.meta.loss_scale_steps,
                               .skipped = ck.meta.loss_scale_skipped};
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

tsr_status tsr_checkpoint_save_rotating(tsr_trainer *t, const char *dir, int keep, const tsr_checkpoint_meta *meta,
                                        char *path_out, size_t cap) {
  if (!t || !dir || !meta)
    return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_save_rotating: trainer, dir and meta are required");
  char path[4096];
  _tsr_ck_dir_path(path, sizeof path, dir, meta->step);
  if (path_out && cap) snprintf(path_out, cap, "%s", path);
  if (tsr_context_rank(t->ctx) != 0) return tsr_checkpoint_save(t, path, meta); /* syncs only */
  TSR_TRY(_tsr_ck_dir_make(dir));
  TSR_TRY(tsr_checkpoint_save(t, path, meta));
  return _tsr_ck_dir_prune(dir, keep);
}

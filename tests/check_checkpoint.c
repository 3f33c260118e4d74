/* Checkpoints: a save/load round trip restores parameters, running statistics, moments and counters
 * so that training continues bitwise as if uninterrupted; rotation keeps the newest K; truncated and
 * corrupted files are rejected (checksum) and the previous valid checkpoint is found instead; a
 * checkpoint of another model, seed or optimizer kind is refused without touching the trainer, while
 * changed hyperparameters and loss-scaling options load and are reported on stderr; the loss scaler
 * and the input normalisation travel in checkpoints; version-1 files still load; a failed allocation
 * (address-space limit) is an error, not a crash. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <tessera.h>

#include "testutil.h"
#include "io/checkpoint_int.h"

#define S 8

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  for (int p = 0; p < S * S; p++) x[p] = sinf(0.37f * (p + 1) * (index + 1) + 0.1f * (float)(step % 5)) * 0.8f;
  for (int p = 0; p < S * S; p++) y[p] = 0.5f * x[p] * x[p] - 0.3f * x[(p + 1) % (S * S)];
  return 0;
}

static tsr_context *start(void) {
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.ncpus = 2, o.use_mpi = 0, o.deterministic = 1, o.verbose = 0;
  tsr_context *ctx = NULL;
  ck_assert_msg(tsr_context_create(&ctx, &o, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  return ctx;
}

/* conv, batchnorm (running statistics), dropout (depends on the step counter), conv. */
static tsr_model *model(int width) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "ck"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "in", width, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "bn1", TSR_LAYER_BATCHNORM, "c1"), TSR_OK);
  tsr_layer_spec dp = tsr_layer_spec_default(TSR_LAYER_DROPOUT);
  dp.p = 0.2f;
  const char *bn = "bn1";
  ck_assert_int_eq(tsr_model_add(m, "drop", &dp, &bn, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r1", TSR_LAYER_TANH, "drop"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out", "r1", 1, 3, 1, 1), TSR_OK);
  return m;
}

static tsr_trainer *trainer_with(tsr_context *ctx, tsr_model *m, uint64_t seed, const tsr_optim_spec *opt,
                                 const tsr_trainer_opts *opts) {
  tsr_trainer_opts o;
  if (opts)
    o = *opts;
  else
    tsr_trainer_opts_default(&o);
  o.batch = 6, o.slices = 2, o.seed = seed;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, opt, &o) == TSR_OK, "%s", tsr_last_error());
  return t;
}

static tsr_trainer *trainer(tsr_context *ctx, tsr_model *m, uint64_t seed) {
  tsr_optim_spec adam = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  adam.lr = 1e-2f;
  return trainer_with(ctx, m, seed, &adam, NULL);
}

static void train(tsr_trainer *t, int steps, double *loss) {
  int64_t first = -1, id;
  for (int i = 0; i < steps; i++) {
    ck_assert_int_eq(tsr_trainer_step(t, fill, NULL, &id), TSR_OK);
    if (i == 0) first = id;
  }
  for (int i = 0; i < steps; i++) ck_assert_int_eq(tsr_trainer_loss(t, first + i, &loss[i]), TSR_OK);
}

static tsr_checkpoint_meta meta_at(int64_t step) {
  tsr_checkpoint_meta m = {.step = step, .epoch = 2, .position = step % 7, .nranks = 1, .batch = 6, .loss_sum = 0.25};
  return m;
}

START_TEST(resumed_training_continues_bitwise) {
  tsr_context *ctx = start();
  tsr_model *m = model(4);
  tsr_trainer *a = trainer(ctx, m, 11);
  double la[8], lb[5];
  train(a, 3, la);
  char path[256];
  snprintf(path, sizeof path, "%s/one.h5", tt_tmpdir());
  tsr_checkpoint_meta meta = meta_at(3);
  ck_assert_msg(tsr_checkpoint_save(a, path, &meta) == TSR_OK, "%s", tsr_last_error());
  train(a, 5, la + 3);
  /* a fresh trainer (same seed) restored from the checkpoint must produce steps 4..8 bitwise */
  tsr_trainer *b = trainer(ctx, m, 11);
  tsr_checkpoint_meta got;
  ck_assert_msg(tsr_checkpoint_load(b, path, &got) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(got.step, 3);
  ck_assert_int_eq(got.position, 3);
  ck_assert_int_eq(got.epoch, 2);
  ck_assert_int_eq(got.seed, 11);
  ck_assert_int_eq(got.trainer_steps, 3);
  ck_assert_int_eq(got.trainer_updates, 3);
  ck_assert(got.loss_sum == 0.25);
  train(b, 5, lb);
  for (int i = 0; i < 5; i++)
    ck_assert_msg(memcmp(&la[3 + i], &lb[i], sizeof(double)) == 0, "step %d: uninterrupted loss %.17g, resumed %.17g",
                  4 + i, la[3 + i], lb[i]);
  tsr_trainer_destroy(a);
  tsr_trainer_destroy(b);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

static int count_files(const char *dir, int64_t *steps, int cap) {
  int n = 0;
  for (int64_t s = 0; s < 100; s++) {
    char p[512];
    snprintf(p, sizeof p, "%s/ckpt-%012lld.h5", dir, (long long)s);
    if (access(p, F_OK) == 0 && n < cap) steps[n++] = s;
  }
  return n;
}

START_TEST(rotation_keeps_the_newest_k) {
  tsr_context *ctx = start();
  tsr_model *m = model(2);
  tsr_trainer *t = trainer(ctx, m, 3);
  char dir[256], path[512];
  snprintf(dir, sizeof dir, "%s/sub/ckpts", tt_tmpdir());
  for (int64_t s = 10; s <= 50; s += 10) {
    tsr_checkpoint_meta meta = meta_at(s);
    ck_assert_msg(tsr_checkpoint_save_rotating(t, dir, 2, &meta, path, sizeof path) == TSR_OK, "%s", tsr_last_error());
  }
  int64_t steps[8];
  int n = count_files(dir, steps, 8);
  ck_assert_msg(n == 2 && steps[0] == 40 && steps[1] == 50, "kept %d files (first step %lld)", n,
                (long long)(n ? steps[0] : -1));
  tsr_checkpoint_meta meta;
  ck_assert_int_eq(tsr_checkpoint_find_latest(dir, path, sizeof path, &meta), TSR_OK);
  ck_assert_int_eq(meta.step, 50);
  ck_assert_msg(strstr(path, "ckpt-000000000050.h5") != NULL, "found %s", path);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

static long file_size(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

/* Flips one bit inside the stored values of tensor `vals` (found by content). */
static void flip_value_bit(const char *path, const float *vals, size_t n) {
  FILE *f = fopen(path, "r+b");
  ck_assert_ptr_nonnull(f);
  long size = file_size(path);
  unsigned char *buf = malloc(size);
  ck_assert_int_eq(fread(buf, 1, size, f), size);
  size_t bytes = n * sizeof(float) < 64 ? n * sizeof(float) : 64;
  unsigned char *hit = memmem(buf, size, vals, bytes);
  ck_assert_msg(hit != NULL, "%s: the tensor's bytes are not stored contiguously", path);
  long off = (long)(hit - buf) + 5;
  free(buf);
  fseek(f, off, SEEK_SET);
  int c = fgetc(f);
  fseek(f, off, SEEK_SET);
  fputc(c ^ 0x10, f);
  fclose(f);
}

START_TEST(truncated_and_corrupted_checkpoints_are_rejected) {
  tsr_context *ctx = start();
  tsr_model *m = model(4);
  tsr_trainer *t = trainer(ctx, m, 5);
  double loss[2];
  char dir[256], path[512], p20[512], p30[512];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  int i = tsr_trainer_tensor_find(t, "c1.weight");
  float w20[4 * 9];
  for (int64_t s = 10; s <= 30; s += 10) {
    train(t, 2, loss);
    tsr_checkpoint_meta meta = meta_at(s);
    ck_assert_msg(tsr_checkpoint_save_rotating(t, dir, 0, &meta, path, sizeof path) == TSR_OK, "%s", tsr_last_error());
    if (s == 20) ck_assert_int_eq(tsr_trainer_tensor_get(t, i, w20), TSR_OK);
  }
  snprintf(p20, sizeof p20, "%s/ckpt-%012d.h5", dir, 20);
  snprintf(p30, sizeof p30, "%s/ckpt-%012d.h5", dir, 30);
  /* newest: truncated to 60 % of its size */
  ck_assert_int_eq(truncate(p30, file_size(p30) * 6 / 10), 0);
  tsr_checkpoint_meta meta;
  ck_assert_int_ne(tsr_checkpoint_verify(p30, &meta, NULL), TSR_OK);
  ck_assert_msg(strstr(tsr_last_error(), "ckpt-000000000030.h5") != NULL, "error does not name the file: %s",
                tsr_last_error());
  /* second newest: one bit of c1.weight flipped, so only a checksum can tell: first the file's digest
   * (checked before HDF5 reads the file), then its absence, then (with a digest of the damaged bytes)
   * the datasets' checksum */
  flip_value_bit(p20, w20, 36);
  tsr_status s = tsr_checkpoint_verify(p20, &meta, NULL);
  ck_assert_int_eq(s, TSR_ERR_FORMAT);
  ck_assert_msg(strstr(tsr_last_error(), "digest") != NULL, "expected a digest error: %s", tsr_last_error());
  char sum[600];
  snprintf(sum, sizeof sum, "%s.sum", p20);
  ck_assert_int_eq(remove(sum), 0);
  s = tsr_checkpoint_verify(p20, &meta, NULL);
  ck_assert_int_eq(s, TSR_ERR_FORMAT);
  ck_assert_msg(strstr(tsr_last_error(), "no digest file") != NULL, "expected a missing-digest error: %s",
                tsr_last_error());
  ck_assert_int_eq(_tsr_ck_write_sum(p20), TSR_OK); /* a digest of the damaged bytes: the datasets' checksum */
  s = tsr_checkpoint_verify(p20, &meta, NULL);
  ck_assert_int_eq(s, TSR_ERR_FORMAT);
  ck_assert_msg(strstr(tsr_last_error(), "checksum") != NULL, "expected a checksum error: %s", tsr_last_error());
  /* loading a rejected file leaves the trainer unchanged */
  float before[36], after[36];
  ck_assert_int_eq(tsr_trainer_tensor_get(t, i, before), TSR_OK);
  ck_assert_int_ne(tsr_checkpoint_load(t, p20, NULL), TSR_OK);
  ck_assert_int_eq(tsr_trainer_tensor_get(t, i, after), TSR_OK);
  ck_assert(memcmp(before, after, sizeof before) == 0);
  /* the newest valid one is the oldest */
  ck_assert_int_eq(tsr_checkpoint_find_latest(dir, path, sizeof path, &meta), TSR_OK);
  ck_assert_int_eq(meta.step, 10);
  /* garbage with the right name is rejected too */
  FILE *f = fopen(p30, "wb");
  fputs("not hdf5", f);
  fclose(f);
  ck_assert_int_eq(tsr_checkpoint_find_latest(dir, path, sizeof path, &meta), TSR_OK);
  ck_assert_int_eq(meta.step, 10);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

START_TEST(other_model_or_seed_is_refused) {
  tsr_context *ctx = start();
  tsr_model *m4 = model(4), *m3 = model(3);
  tsr_trainer *a = trainer(ctx, m4, 9), *b = trainer(ctx, m3, 9), *c = trainer(ctx, m4, 10);
  char path[256];
  snprintf(path, sizeof path, "%s/x.h5", tt_tmpdir());
  tsr_checkpoint_meta meta = meta_at(1);
  ck_assert_int_eq(tsr_checkpoint_save(a, path, &meta), TSR_OK);
  ck_assert_int_eq(tsr_checkpoint_load(b, path, NULL), TSR_ERR_MISMATCH);
  ck_assert_msg(strstr(tsr_last_error(), "out.weight") != NULL, "error does not name the tensor: %s", tsr_last_error());
  ck_assert_int_eq(tsr_checkpoint_load(c, path, NULL), TSR_ERR_MISMATCH);
  ck_assert_msg(strstr(tsr_last_error(), "seed") != NULL, "error does not name the seed: %s", tsr_last_error());
  char dir[256];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  ck_assert_int_eq(tsr_checkpoint_find_latest(dir, path, sizeof path, NULL), TSR_ERR_IO);
  tsr_trainer_destroy(a);
  tsr_trainer_destroy(b);
  tsr_trainer_destroy(c);
  tsr_model_destroy(m4);
  tsr_model_destroy(m3);
  tsr_context_destroy(ctx);
}
END_TEST

/* Runs tsr_checkpoint_load with stderr sent to a file and returns its status; *log gets what was
 * written there (the report of changed settings). */
static tsr_status load_logged(tsr_trainer *t, const char *path, tsr_checkpoint_meta *meta, char *log, size_t cap) {
  char file[600];
  snprintf(file, sizeof file, "%s/stderr.txt", tt_tmpdir());
  FILE *f = fopen(file, "w+");
  ck_assert_ptr_nonnull(f);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  ck_assert(saved >= 0 && dup2(fileno(f), STDERR_FILENO) >= 0);
  tsr_status s = tsr_checkpoint_load(t, path, meta);
  fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  rewind(f);
  size_t n = fread(log, 1, cap - 1, f);
  log[n] = '\0';
  fclose(f);
  return s;
}

static void tensor_of(tsr_trainer *t, const char *name, float *out) {
  int i = tsr_trainer_tensor_find(t, name);
  ck_assert_int_ge(i, 0);
  ck_assert_int_eq(tsr_trainer_tensor_get(t, i, out), TSR_OK);
}

static void save_at(tsr_trainer *t, const char *path, int64_t step) {
  tsr_checkpoint_meta meta = meta_at(step);
  ck_assert_msg(tsr_checkpoint_save(t, path, &meta) == TSR_OK, "%s", tsr_last_error());
}

/* Adam's moments taken for SGD's momentum buffer would corrupt the run silently. */
START_TEST(other_optimizer_kind_is_refused_naming_both) {
  tsr_context *ctx = start();
  tsr_model *m = model(4);
  tsr_trainer *a = trainer(ctx, m, 9);
  double loss[2];
  train(a, 2, loss);
  char path[512];
  snprintf(path, sizeof path, "%s/adam.h5", tt_tmpdir());
  save_at(a, path, 2);
  tsr_optim_spec sgd = tsr_optim_spec_default(TSR_OPTIM_SGD);
  tsr_trainer *b = trainer_with(ctx, m, 9, &sgd, NULL);
  float before[4 * 9], after[4 * 9];
  tensor_of(b, "c1.weight", before);
  ck_assert_int_eq(tsr_checkpoint_load(b, path, NULL), TSR_ERR_MISMATCH);
  const char *e = tsr_last_error();
  ck_assert_msg(strstr(e, path) && strstr(e, "written by adam") && strstr(e, "this run uses sgd"), "%s", e);
  tensor_of(b, "c1.weight", after);
  ck_assert(memcmp(before, after, sizeof before) == 0);
  tsr_trainer_destroy(a);
  tsr_trainer_destroy(b);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

START_TEST(changed_hyperparameters_load_and_are_reported) {
  tsr_context *ctx = start();
  tsr_model *m = model(4);
  tsr_trainer *a = trainer(ctx, m, 9);
  double loss[2];
  train(a, 2, loss);
  char path[512], log[4096];
  snprintf(path, sizeof path, "%s/adam.h5", tt_tmpdir());
  save_at(a, path, 2);
  tsr_checkpoint_meta got;
  ck_assert_int_eq(tsr_checkpoint_verify(path, &got, NULL), TSR_OK);
  ck_assert(got.recorded == 1 && got.optim.kind == TSR_OPTIM_ADAM && got.optim.lr == 1e-2f);
  ck_assert(got.optim.beta1 == 0.9f && got.optim.beta2 == 0.999f && got.optim.eps == 1e-8f &&
            got.optim.weight_decay == 0);
  /* the same settings: nothing to report */
  tsr_trainer *same = trainer(ctx, m, 9);
  ck_assert_msg(load_logged(same, path, NULL, log, sizeof log) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(!strstr(log, "optimizer") && !strstr(log, "loss scaling"), "reported without a change: %s", log);
  /* a deliberate change of learning rate (and of beta2) */
  tsr_optim_spec adam = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  adam.lr = 2e-3f, adam.beta2 = 0.99f;
  tsr_trainer *b = trainer_with(ctx, m, 9, &adam, NULL);
  ck_assert_msg(load_logged(b, path, &got, log, sizeof log) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(strstr(log, path) && strstr(log, "optimizer adam: lr 0.01 -> 0.002, beta2 0.999 -> 0.99"), "stderr: %s",
                log);
  ck_assert_int_eq(got.trainer_updates, 2);
  tsr_trainer_destroy(a);
  tsr_trainer_destroy(same);
  tsr_trainer_destroy(b);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* Lion's momentum_sync_layers (a string among the numbers) is saved, read back and, when a run gives
 * other layers, reported by name (under sign1, which momentum averaging needs). */
START_TEST(momentum_sync_layers_round_trip_and_are_reported) {
  tsr_context *ctx = start();
  tsr_model *m = model(4);
  tsr_optim_spec lion = tsr_optim_spec_default(TSR_OPTIM_LION);
  lion.extra[0] = 2;
  snprintf(lion.momentum_sync_layers, sizeof lion.momentum_sync_layers, "c*,out.bias");
  tsr_trainer_opts sign1;
  tsr_trainer_opts_default(&sign1);
  ck_assert_int_eq(tsr_reduce_precision_parse("sign1", &sign1.grad_reduce), TSR_OK);
  tsr_trainer *a = trainer_with(ctx, m, 9, &lion, &sign1);
  double loss[2];
  train(a, 2, loss);
  char path[512], log[4096];
  snprintf(path, sizeof path, "%s/lion.h5", tt_tmpdir());
  save_at(a, path, 2);
  tsr_checkpoint_meta got;
  ck_assert_int_eq(tsr_checkpoint_verify(path, &got, NULL), TSR_OK);
  ck_assert_str_eq(got.optim.momentum_sync_layers, "c*,out.bias");
  ck_assert(got.optim.extra[0] == 2.0f);
  snprintf(lion.momentum_sync_layers, sizeof lion.momentum_sync_layers, "out");
  tsr_trainer *b = trainer_with(ctx, m, 9, &lion, &sign1);
  ck_assert_msg(load_logged(b, path, NULL, log, sizeof log) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(strstr(log, "momentum_sync_layers 'c*,out.bias' -> 'out'"), "stderr: %s", log);
  tsr_trainer_destroy(a);
  tsr_trainer_destroy(b);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* Settings and state of dynamic loss scaling are saved; a run with other settings keeps its own
 * settings, takes the saved state and says what changed. */
START_TEST(loss_scaler_options_and_state_round_trip) {
  tsr_context *ctx = start();
  tsr_model *m = model(4);
  tsr_optim_spec adam = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.loss_scale = TSR_LOSS_SCALE_DYNAMIC, o.loss_scale_init = 1024, o.loss_scale_interval = 3;
  tsr_trainer *a = trainer_with(ctx, m, 7, &adam, &o);
  double loss[4];
  train(a, 4, loss);
  tsr_loss_scale_state s1, s2;
  ck_assert_int_eq(tsr_trainer_loss_scale_get(a, &s1), TSR_OK);
  ck_assert_msg(s1.scale == 2048 && s1.good_steps == 1 && s1.steps == 4 && s1.skipped == 0,
                "scale %g after 4 finite steps (growth every 3)", s1.scale);
  char path[512], log[4096];
  snprintf(path, sizeof path, "%s/scaled.h5", tt_tmpdir());
  save_at(a, path, 4);
  tsr_checkpoint_meta got;
  ck_assert_int_eq(tsr_checkpoint_verify(path, &got, NULL), TSR_OK);
  ck_assert(got.loss_scale_option == TSR_LOSS_SCALE_DYNAMIC && got.loss_scale_init == 1024 &&
            got.loss_scale_interval == 3);
  ck_assert(got.loss_scale == 2048 && got.loss_scale_good_steps == 1 && got.loss_scale_steps == 4 &&
            got.loss_scale_skipped == 0);
  tsr_trainer_opts o2 = o;
  o2.loss_scale_init = 4, o2.loss_scale_interval = 5;
  tsr_trainer *b = trainer_with(ctx, m, 7, &adam, &o2);
  ck_assert_msg(load_logged(b, path, NULL, log, sizeof log) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_trainer_loss_scale_get(b, &s2), TSR_OK);
  ck_assert(memcmp(&s1, &s2, sizeof s1) == 0);
  ck_assert_msg(strstr(log, "loss scaling dynamic (initial scale 1024, growth interval 3) -> dynamic (initial scale "
                            "4, growth interval 5)"),
                "stderr: %s", log);
  tsr_trainer *c = trainer_with(ctx, m, 7, &adam, NULL);
  ck_assert_msg(load_logged(c, path, NULL, log, sizeof log) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(strstr(log, "loss scaling dynamic (initial scale 1024, growth interval 3) -> off"), "stderr: %s", log);
  tsr_trainer_destroy(a);
  tsr_trainer_destroy(b);
  tsr_trainer_destroy(c);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* A restored model takes the same raw inputs as the run that saved it. */
START_TEST(checkpoint_carries_input_normalisation) {
  tsr_context *ctx = start();
  tsr_model *m = model(4);
  tsr_trainer *a = trainer(ctx, m, 4), *b = trainer(ctx, m, 4), *plain = trainer(ctx, m, 4);
  const float mean[1] = {0.25f}, sd[1] = {1.5f};
  ck_assert_int_eq(tsr_trainer_set_input_norm(a, mean, sd, 1), TSR_OK);
  double loss[2];
  train(a, 2, loss);
  char p1[512], p2[512], log[4096];
  snprintf(p1, sizeof p1, "%s/norm.h5", tt_tmpdir());
  snprintf(p2, sizeof p2, "%s/plain.h5", tt_tmpdir());
  save_at(a, p1, 2);
  save_at(plain, p2, 0);
  static float x[6 * S * S], y[6 * S * S], pa[6 * S * S], pb[6 * S * S];
  for (int i = 0; i < 6; i++) fill(NULL, 0, i, x + i * S * S, y + i * S * S);
  for (int i = 0; i < 6 * S * S; i++) x[i] = 3 * x[i] + 1; /* raw inputs: not centred */
  ck_assert_int_eq(tsr_trainer_predict(a, x, 6, pa), TSR_OK);
  ck_assert_msg(load_logged(b, p1, NULL, log, sizeof log) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(strstr(log, "input normalisation: the checkpoint's (channel 0 of 1: mean 0.25, std 1.5) replaces "
                            "this run's (none)"),
                "stderr: %s", log);
  const float *gm, *gs;
  tsr_trainer_input_norm(b, &gm, &gs);
  ck_assert(gm && gs && gm[0] == 0.25f && gs[0] == 1.5f);
  /* same parameters, normalisation and kernels on the same inputs: equal bitwise */
  ck_assert_int_eq(tsr_trainer_predict(b, x, 6, pb), TSR_OK);
  ck_assert_msg(memcmp(pa, pb, sizeof pa) == 0, "predictions of the restored model differ from the saved one's");
  /* the checkpoint of a run without normalisation takes it away */
  ck_assert_msg(tsr_checkpoint_load(b, p2, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_trainer_input_norm(b, &gm, &gs);
  ck_assert(!gm && !gs);
  tsr_trainer_destroy(a);
  tsr_trainer_destroy(b);
  tsr_trainer_destroy(plain);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* Files written before the optimizer was recorded (format version 1) load with a warning that the
 * optimizer cannot be checked, and the run keeps its own input normalisation. */
START_TEST(version_1_checkpoint_loads_with_a_warning) {
  tsr_context *ctx = start();
  tsr_model *m = model(4);
  tsr_trainer *a = trainer(ctx, m, 9);
  double loss[2];
  train(a, 2, loss);
  char p2[512], p1[512], log[4096];
  snprintf(p2, sizeof p2, "%s/v2.h5", tt_tmpdir());
  snprintf(p1, sizeof p1, "%s/v1.h5", tt_tmpdir());
  save_at(a, p2, 2);
  struct _tsr_ck ck;
  ck_assert_msg(_tsr_ck_read(&ck, p2) == TSR_OK, "%s", tsr_last_error());
  ck.version = 1;
  ck.checksum = _tsr_ck_checksum(&ck);
  ck_assert_msg(_tsr_ck_write(&ck, p1) == TSR_OK, "%s", tsr_last_error());
  _tsr_ck_free(&ck);
  tsr_checkpoint_meta got;
  ck_assert_msg(tsr_checkpoint_verify(p1, &got, NULL) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(got.recorded, 0);
  tsr_optim_spec sgd = tsr_optim_spec_default(TSR_OPTIM_SGD);
  tsr_trainer *b = trainer_with(ctx, m, 9, &sgd, NULL);
  const float mean[1] = {0.5f}, sd[1] = {2.0f};
  ck_assert_int_eq(tsr_trainer_set_input_norm(b, mean, sd, 1), TSR_OK);
  ck_assert_msg(load_logged(b, p1, NULL, log, sizeof log) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(strstr(log, "written before checkpoints recorded the optimizer (format version 1)"), "stderr: %s", log);
  const float *gm, *gs;
  tsr_trainer_input_norm(b, &gm, &gs);
  ck_assert(gm && gm[0] == 0.5f && gs[0] == 2.0f);
  float wa[4 * 9], wb[4 * 9];
  tensor_of(a, "c1.weight", wa);
  tensor_of(b, "c1.weight", wb);
  ck_assert(memcmp(wa, wb, sizeof wa) == 0);
  tsr_trainer_destroy(a);
  tsr_trainer_destroy(b);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* Virtual memory of this process in bytes (/proc/self/statm, first field in pages). */
static long long vm_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long long pages = 0;
  if (f && fscanf(f, "%lld", &pages) != 1) pages = 0;
  if (f) fclose(f);
  return pages * sysconf(_SC_PAGESIZE);
}

START_TEST(failed_allocation_is_an_error_not_a_crash) {
#if defined(__SANITIZE_ADDRESS__)
  /* ASan reserves terabytes of shadow memory: an address-space limit cannot be set under it */
  tt_skip("failed allocations not checked: built with AddressSanitizer, which needs an unlimited address space");
  return;
#endif
  tsr_context *ctx = start();
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "huge"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, 1024, 1024), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "wide", "in", 64, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out", "wide", 1, 3, 1, 1), TSR_OK);
  /* 64 channels x 1M pixels x 64 samples = 16 GiB of activations; allow 512 MiB more than now.
   * Check runs this test in its own process, so the limit ends with it. */
  struct rlimit lim = {.rlim_cur = (rlim_t)(vm_bytes() + (512ll << 20)), .rlim_max = RLIM_INFINITY};
  ck_assert_int_eq(setrlimit(RLIMIT_AS, &lim), 0);
  /* past the memory check, whatever this machine's memory: the allocation itself must fail */
  ck_assert_int_eq(tsr_memory_set_limit(1ll << 50), TSR_OK);
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 64, o.slices = 2;
  tsr_trainer *t = NULL;
  tsr_status s = tsr_trainer_create(&t, ctx, m, NULL, &o);
  ck_assert_msg(s == TSR_ERR_NOMEM, "expected TSR_ERR_NOMEM, got %s: %s", tsr_status_name(s), tsr_last_error());
  ck_assert_ptr_null(t);
  ck_assert_msg(strstr(tsr_last_error(), "wide") != NULL || strstr(tsr_last_error(), "allocate") != NULL,
                "the message says what failed: %s", tsr_last_error());
  ck_assert_int_eq(tsr_memory_set_limit(0), TSR_OK);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

static Suite *make_checkpoint_suite(void) {
  Suite *s = suite_create("checkpoint");
  TCase *tc = tcase_create("checkpoint");
  tcase_add_test(tc, resumed_training_continues_bitwise);
  tcase_add_test(tc, rotation_keeps_the_newest_k);
  tcase_add_test(tc, truncated_and_corrupted_checkpoints_are_rejected);
  tcase_add_test(tc, other_model_or_seed_is_refused);
  tcase_add_test(tc, other_optimizer_kind_is_refused_naming_both);
  tcase_add_test(tc, changed_hyperparameters_load_and_are_reported);
  tcase_add_test(tc, momentum_sync_layers_round_trip_and_are_reported);
  tcase_add_test(tc, loss_scaler_options_and_state_round_trip);
  tcase_add_test(tc, checkpoint_carries_input_normalisation);
  tcase_add_test(tc, version_1_checkpoint_loads_with_a_warning);
  tcase_add_test(tc, failed_allocation_is_an_error_not_a_crash);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_checkpoint_suite)

/* Activations kept in oneDNN's blocked layout between layers, and batchnorm + relu fused, inside a
 * training step: the trainer chooses them where every layer around handles them (and never for the
 * model's input and output), the whole-graph gradient of a DenseNet-like model (unaligned concat,
 * pooling, transposed conv, add) matches finite differences of the training loss (smooth
 * activations) and the plain graph's gradient (relu fused), and training with them follows training
 * with plain layouts and separate relu tasks to float rounding. Convolutions' weight-gradient tasks
 * write their gradients instead of adding into zeroed ones (no zero-fill task in a step). Where a
 * convolution's kernels take another layout than its input or output has, reorder tasks of their own
 * convert a copy (counted by the submit hook), the convolution tasks reorder no activation
 * themselves (counted by conv2d.c), and the gradient is the plain graph's. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>

#include "codelets.h"
#include "kernel_util.h"
#include "runtime/submit.h"
#include "testutil.h"
#include "train/trainer.h"

#define S 8 /* image side */

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  for (int c = 0; c < 2; c++)
    for (int p = 0; p < S * S; p++) x[c * S * S + p] = sinf(0.37f * (p + 1) * (index + 1) + c) * 0.8f + 0.3f * c;
  for (int p = 0; p < S * S; p++) y[p] = 0.5f * x[p] * x[p] - 0.3f * x[(p + 1) % (S * S)];
  return 0;
}

static tsr_context *start_with(int precision, int deterministic) {
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.ncpus = 2, o.use_mpi = 0, o.deterministic = deterministic, o.verbose = 0, o.precision = precision;
  tsr_context *ctx = NULL;
  ck_assert_msg(tsr_context_create(&ctx, &o, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  return ctx;
}

static tsr_context *start_at(int precision) { return start_with(precision, 1); }
static tsr_context *start(void) { return start_at(TSR_PRECISION_F32); }

static void add(tsr_model *m, const char *name, tsr_layer_spec *s, const char **in, int nin) {
  ck_assert_msg(tsr_model_add(m, name, s, in, nin) == TSR_OK, "%s", tsr_last_error());
}

/* in -> c0 -> bn0 -> r0 (relu, or `act`) -> c1; cat(c0, c1) has 3 + 5 channels (neither block-aligned); bn1 -> r1
 * -> avgpool -> transposed conv 'up'; 1x1 conv 'c2' of r1; add(up, c2) -> tanh -> out. */
static tsr_model *dense_model(tsr_layer_kind act) { return tt_dense_model(S, 3, 5, 4, act, TSR_LAYER_AVGPOOL2D); }

static tsr_trainer *trainer(tsr_context *ctx, tsr_model *m, const tsr_optim_spec *opt) {
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 5, o.slices = 2, o.seed = 11; /* unequal slices: 3 + 2 */
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, opt, &o) == TSR_OK, "%s", tsr_last_error());
  return t;
}

/* Loop tests run with blocks of 8 (_i 0) and of 16 (_i 1, AVX-512 CPUs only: 0 returned elsewhere),
 * set by TESSERA_ACT_BLOCK (each test runs in a process of its own). */
static int use_block(int i) {
  static const int blocks[] = {8, 16};
  if (blocks[i] > _tsr_act_block()) {
    fprintf(stderr, "blocks of %d: not on this CPU (its kernels take %d at most)\n", blocks[i], _tsr_act_block());
    return 0;
  }
  char v[4];
  snprintf(v, sizeof v, "%d", blocks[i]);
  setenv("TESSERA_ACT_BLOCK", v, 1);
  return blocks[i];
}

static double step_loss(tsr_trainer *t) {
  int64_t id;
  double l;
  ck_assert_int_eq(tsr_trainer_step(t, fill, NULL, &id), TSR_OK);
  ck_assert_int_eq(tsr_trainer_loss(t, id, &l), TSR_OK);
  return l;
}

START_TEST(blocked_layouts_and_fusions_are_chosen_where_every_layer_handles_them) {
  tsr_context *ctx = start();
  tsr_model *m = dense_model(TSR_LAYER_RELU);
  tsr_trainer *t = trainer(ctx, m, NULL);
  int blk = t->act_blk;
  ck_assert_int_eq(!!blk, !!_tsr_act_block());
  /* the input, and the output the loss reads, stay plain; the rest is blocked when the CPU has a block */
  static const char *const blocked[] = {"c0", "bn0", "r0", "c1", "cat", "bn1", "r1", "pool", "up", "c2", "sum", "t"};
  ck_assert_int_eq(t->ls[_tsr_model_find(m, "in")].blk, 0);
  ck_assert_int_eq(t->ls[_tsr_model_find(m, "out")].blk, 0);
  for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++)
    ck_assert_msg(t->ls[_tsr_model_find(m, blocked[i])].blk == blk, "%s: block %d, expected %d", blocked[i],
                  t->ls[_tsr_model_find(m, blocked[i])].blk, blk);
  ck_assert_int_eq(t->ls[_tsr_model_find(m, "bn0")].relu, _tsr_model_find(m, "r0"));
  ck_assert_int_eq(t->ls[_tsr_model_find(m, "bn1")].relu, _tsr_model_find(m, "r1"));
  ck_assert(t->ls[_tsr_model_find(m, "r0")].fused && t->ls[_tsr_model_find(m, "r1")].fused);
  tsr_trainer_destroy(t);
  /* a plain-only consumer (dropout) keeps its producer chain plain */
  tsr_layer_spec dp = tsr_layer_spec_default(TSR_LAYER_DROPOUT);
  dp.p = 0.1f;
  add(m, "drop", &dp, (const char *[]){"t"}, 1);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out2", "drop", 1, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_set_output(m, "out2", TSR_LOSS_MSE, 1), TSR_OK);
  t = trainer(ctx, m, NULL);
  ck_assert_int_eq(t->ls[_tsr_model_find(m, "t")].blk, 0);
  ck_assert_int_eq(t->ls[_tsr_model_find(m, "sum")].blk, 0);
  ck_assert_int_eq(t->ls[_tsr_model_find(m, "c1")].blk, blk);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* Asynchronous slices fuse no relu: the fused backward recomputes the relu's mask from gamma and
 * beta, which another slice's update may change between a slice's forward and backward. The same
 * model in the same (non-deterministic) context fuses both relus without them. */
START_TEST(asynchronous_slices_fuse_no_relu) {
  tsr_context *ctx = start_with(TSR_PRECISION_F32, 0);
  tsr_model *m = dense_model(TSR_LAYER_RELU);
  for (int async = 0; async < 2; async++) {
    tsr_trainer_opts o;
    tsr_trainer_opts_default(&o);
    o.batch = 5, o.slices = 2, o.seed = 11, o.async_slices = async;
    tsr_trainer *t;
    ck_assert_msg(tsr_trainer_create(&t, ctx, m, NULL, &o) == TSR_OK, "%s", tsr_last_error());
    int fused = !!t->act_blk && !async; /* fusion comes with the blocked layouts */
    ck_assert_int_eq(t->ls[_tsr_model_find(m, "bn0")].relu, fused ? _tsr_model_find(m, "r0") : -1);
    ck_assert_int_eq(t->ls[_tsr_model_find(m, "bn1")].relu, fused ? _tsr_model_find(m, "r1") : -1);
    ck_assert_int_eq(t->ls[_tsr_model_find(m, "r0")].fused, fused);
    ck_assert_int_eq(t->ls[_tsr_model_find(m, "r1")].fused, fused);
    tsr_trainer_destroy(t);
  }
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* A trainer for m with tsr_trainer_opts.act_block = opt (TESSERA_ACT_BLOCK as set). */
static tsr_status create_at(tsr_context *ctx, tsr_model *m, int opt, tsr_trainer **t) {
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 5, o.slices = 2, o.act_block = opt;
  *t = NULL;
  return tsr_trainer_create(t, ctx, m, NULL, &o);
}

/* The trainer's block for m with tsr_trainer_opts.act_block = opt (TESSERA_ACT_BLOCK as set). */
static int block_at(tsr_context *ctx, tsr_model *m, int opt) {
  tsr_trainer *t;
  ck_assert_msg(create_at(ctx, m, opt, &t) == TSR_OK, "%s", tsr_last_error());
  int blk = t->act_blk;
  tsr_trainer_destroy(t);
  return blk;
}

static int block_of(tsr_context *ctx, tsr_model *m) { return block_at(ctx, m, 0); }

/* The block refused for m: TESSERA_ACT_BLOCK=env (NULL: unset) and tsr_trainer_opts.act_block = opt;
 * the message names the setting (`by`) and says `why`. */
static void assert_refused(tsr_context *ctx, tsr_model *m, const char *env, int opt, const char *by, const char *why) {
  if (env) setenv("TESSERA_ACT_BLOCK", env, 1);
  tsr_trainer *t;
  ck_assert_int_eq(create_at(ctx, m, opt, &t), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), by) && strstr(tsr_last_error(), why), "%s", tsr_last_error());
  unsetenv("TESSERA_ACT_BLOCK");
}

/* The block: float32 on an AVX-512 CPU that runs 512-bit FMAs as two halves takes 8 where blocks of
 * 16 would pad the convolutions' channels into 5% more work or more (the dense model's 3, 5 and 4
 * channels), 16 where they pad no more (16 channels throughout) and in bf16 (its kernels take 16);
 * on one that runs them at full width 16 (both answers forced, whatever this CPU is); a CPU with
 * blocks of 8 at most takes 8. tsr_trainer_opts.act_block, else TESSERA_ACT_BLOCK, sets it; a value other than 8 or 16,
 * one above the CPU's and 8 with bf16 are refused, naming the setting; with plain activations a
 * block is not used, a bad one still refused. */
START_TEST(the_block_is_the_one_that_pads_the_convolutions_least) {
  int cpu = _tsr_act_block();
  if (!cpu) {
    fprintf(stderr, "no blocked kernels on this CPU\n");
    return;
  }
  unsetenv("TESSERA_ACT_BLOCK");
  tsr_context *ctx = start();
  tsr_model *narrow = dense_model(TSR_LAYER_RELU);
  tsr_model *wide = tt_dense_model(S, 16, 16, 16, TSR_LAYER_RELU, TSR_LAYER_AVGPOOL2D);
  _tsr_set_avx512_half_width(1);
  ck_assert_int_eq(block_of(ctx, narrow), 8);
  ck_assert_int_eq(block_of(ctx, wide), cpu);
  _tsr_set_avx512_half_width(0);
  ck_assert_int_eq(block_of(ctx, narrow), cpu);
  ck_assert_int_eq(block_of(ctx, wide), cpu);
  _tsr_set_avx512_half_width(1);
  ck_assert_int_eq(block_at(ctx, wide, 8), 8);
  setenv("TESSERA_ACT_BLOCK", "8", 1);
  ck_assert_int_eq(block_of(ctx, wide), 8);
  if (cpu == 16) {
    ck_assert_int_eq(block_at(ctx, narrow, 16), 16); /* the option over the variable */
    setenv("TESSERA_ACT_BLOCK", "16", 1);
    ck_assert_int_eq(block_of(ctx, narrow), 16);
  } else {
    assert_refused(ctx, narrow, "16", 0, "TESSERA_ACT_BLOCK 16", "blocks of 8 at most");
    assert_refused(ctx, narrow, NULL, 16, "--act-block) 16", "blocks of 8 at most");
  }
  assert_refused(ctx, narrow, "12", 0, "TESSERA_ACT_BLOCK", "must be 8 or 16");
  assert_refused(ctx, narrow, NULL, 12, "--act-block", "must be 8 or 16");
  /* where activations stay plain (here: blocked layouts switched off), a block asked for is not used
   * (the run says so) and a bad one is still refused */
  _tsr_set_blocked_fused(0);
  ck_assert_int_eq(block_at(ctx, narrow, 8), 0);
  assert_refused(ctx, narrow, NULL, 12, "--act-block", "must be 8 or 16");
  _tsr_set_blocked_fused(1);
  tsr_context_destroy(ctx);
  if (cpu == 16) {
    ctx = start_at(TSR_PRECISION_BF16);
    ck_assert_int_eq(block_of(ctx, narrow), 16);
    _tsr_set_avx512_half_width(-1);
    assert_refused(ctx, narrow, "8", 0, "TESSERA_ACT_BLOCK 8", "bf16 kernels take blocks of 16");
    assert_refused(ctx, narrow, NULL, 8, "--act-block) 8", "bf16 kernels take blocks of 16");
    tsr_context_destroy(ctx);
  }
  _tsr_set_avx512_half_width(-1);
  tsr_model_destroy(narrow);
  tsr_model_destroy(wide);
}
END_TEST

/* Which CPUs run a 512-bit FMA as two 256-bit halves: AMD's family 0x19 (Zen 4) only; Zen 5 (0x1a)
 * and Intel's AVX-512 cores at full width. The answer for this CPU is one of the two. */
START_TEST(only_zen4_runs_512_bit_fmas_as_two_halves) {
  ck_assert_int_eq(_tsr_avx512_half_width_of("AuthenticAMD", 0x19), 1);
  ck_assert_int_eq(_tsr_avx512_half_width_of("AuthenticAMD", 0x1a), 0);
  ck_assert_int_eq(_tsr_avx512_half_width_of("AuthenticAMD", 0x17), 0);
  ck_assert_int_eq(_tsr_avx512_half_width_of("GenuineIntel", 0x19), 0);
  ck_assert_int_eq(_tsr_avx512_half_width_of("GenuineIntel", 6), 0);
  int here = _tsr_avx512_half_width();
  ck_assert(here == 0 || here == 1);
  _tsr_set_avx512_half_width(1);
  ck_assert_int_eq(_tsr_avx512_half_width(), 1);
  _tsr_set_avx512_half_width(-1);
  ck_assert_int_eq(_tsr_avx512_half_width(), here);
}
END_TEST

/* One SGD step (lr 1, no momentum) from the same start: its loss and, as before - after, the
 * gradient of every trainable tensor (flattened into g, which it returns; *n its length). */
static float *gradient_of(tsr_model *m, int blocked, tsr_sample_fn fill_fn, double *loss, size_t *n) {
  _tsr_set_blocked_fused(blocked);
  tsr_context *ctx = start();
  tsr_optim_spec sgd = tsr_optim_spec_default(TSR_OPTIM_SGD);
  sgd.lr = 1.0f, sgd.momentum = 0, sgd.weight_decay = 0;
  tsr_trainer *t = trainer(ctx, m, &sgd);
  size_t total = 0;
  for (int i = 0; i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape shp;
    ck_assert_int_eq(tsr_trainer_tensor_info(t, i, NULL, &shp, NULL), TSR_OK);
    total += tsr_shape_numel(&shp);
  }
  float *before = malloc(total * sizeof(float)), *g = malloc(total * sizeof(float));
  for (int i = 0, off = 0; i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape shp;
    tsr_trainer_tensor_info(t, i, NULL, &shp, NULL);
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, before + off), TSR_OK);
    off += tsr_shape_numel(&shp);
  }
  int64_t id;
  ck_assert_int_eq(tsr_trainer_step(t, fill_fn, NULL, &id), TSR_OK);
  ck_assert_int_eq(tsr_trainer_loss(t, id, loss), TSR_OK);
  for (int i = 0, off = 0; i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape shp;
    int trainable;
    tsr_trainer_tensor_info(t, i, NULL, &shp, &trainable);
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, g + off), TSR_OK);
    for (int64_t j = 0; j < tsr_shape_numel(&shp); j++) g[off + j] = trainable ? before[off + j] - g[off + j] : 0;
    off += tsr_shape_numel(&shp);
  }
  free(before);
  tsr_trainer_destroy(t);
  tsr_context_destroy(ctx);
  _tsr_set_blocked_fused(1);
  *n = total;
  return g;
}

/* The loss (relative 1e-6) and every gradient entry (1e-5 relative to the largest) of m's step with
 * blocked layouts against the plain step's; m is destroyed. */
static void assert_blocked_matches_plain(tsr_model *m, tsr_sample_fn fill_fn) {
  double lp, lb;
  size_t np, nb;
  float *gp = gradient_of(m, 0, fill_fn, &lp, &np), *gb = gradient_of(m, 1, fill_fn, &lb, &nb);
  ck_assert_int_eq(np, nb);
  ck_assert_msg(fabs(lb - lp) <= 1e-6 * fabs(lp), "loss: blocked %.9g, plain %.9g", lb, lp);
  float big = 0;
  for (size_t i = 0; i < np; i++) big = fmaxf(big, fabsf(gp[i]));
  ck_assert(big > 0);
  for (size_t i = 0; i < np; i++)
    ck_assert_msg(fabsf(gb[i] - gp[i]) <= 1e-5f * big, "gradient entry %zu: blocked %.8g, plain %.8g", i, gb[i], gp[i]);
  free(gp), free(gb);
  tsr_model_destroy(m);
}

/* With relu (fused into batchnorm), finite differences would cross its kinks: the blocked, fused
 * step's gradient is compared with the plain step's of separate tasks (which check_train and
 * check_bn_dropout compare with finite differences), every entry, to float rounding (1e-5 relative
 * to the tensor's largest entry). */
START_TEST(blocked_fused_gradient_matches_the_plain_one) {
  if (!use_block(_i)) return;
  assert_blocked_matches_plain(dense_model(TSR_LAYER_RELU), fill);
}
END_TEST

/* A smooth model (tanh for relu, average pooling) with blocked layouts: SGD with lr 1 and no
 * momentum gives the gradient as before - after; finite differences of the training loss (batch
 * statistics) come from steps at lr 0, which change no parameter. Float32 forward, h = 1e-2:
 * tolerance 2e-2 relative + 5e-5. */
START_TEST(blocked_graph_gradient_matches_finite_differences) {
  int blk = use_block(_i);
  if (!blk) return;
  tsr_context *ctx = start();
  tsr_model *m = dense_model(TSR_LAYER_TANH);
  tsr_optim_spec sgd = tsr_optim_spec_default(TSR_OPTIM_SGD);
  sgd.lr = 1.0f, sgd.momentum = 0, sgd.weight_decay = 0;
  tsr_trainer *t = trainer(ctx, m, &sgd);
  ck_assert_int_eq(t->ls[_tsr_model_find(m, "r1")].blk, blk);
  int n = tsr_trainer_num_tensors(t), checked = 0;
  float *before[32], *after[32];
  ck_assert_int_le(n, 32);
  for (int i = 0; i < n; i++) {
    tsr_shape shp;
    ck_assert_int_eq(tsr_trainer_tensor_info(t, i, NULL, &shp, NULL), TSR_OK);
    before[i] = malloc(tsr_shape_numel(&shp) * sizeof(float));
    after[i] = malloc(tsr_shape_numel(&shp) * sizeof(float));
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, before[i]), TSR_OK);
  }
  step_loss(t);
  for (int i = 0; i < n; i++) ck_assert_int_eq(tsr_trainer_tensor_get(t, i, after[i]), TSR_OK);
  for (int i = 0; i < n; i++) ck_assert_int_eq(tsr_trainer_tensor_set(t, i, before[i]), TSR_OK);
  tsr_trainer_set_lr(t, 0.0f);
  for (int i = 0; i < n; i++) {
    const char *name;
    tsr_shape shp;
    int trainable;
    ck_assert_int_eq(tsr_trainer_tensor_info(t, i, &name, &shp, &trainable), TSR_OK);
    int64_t len = tsr_shape_numel(&shp);
    float *w = malloc(len * sizeof(float));
    for (int k = 0; trainable && k < 4 && k < len; k++) {
      int64_t j = (k * 7919) % len;
      const double h = 1e-2;
      memcpy(w, before[i], len * sizeof(float));
      w[j] = before[i][j] + (float)h;
      ck_assert_int_eq(tsr_trainer_tensor_set(t, i, w), TSR_OK);
      double lp = step_loss(t);
      w[j] = before[i][j] - (float)h;
      ck_assert_int_eq(tsr_trainer_tensor_set(t, i, w), TSR_OK);
      double lm = step_loss(t);
      ck_assert_int_eq(tsr_trainer_tensor_set(t, i, before[i]), TSR_OK);
      double fd = (lp - lm) / (2 * h), g = (double)before[i][j] - after[i][j];
      ck_assert_msg(fabs(fd - g) <= 5e-5 + 2e-2 * fabs(fd), "%s[%lld]: gradient %.6g, finite differences %.6g", name,
                    (long long)j, g, fd);
      checked++;
    }
    free(w), free(before[i]), free(after[i]);
  }
  ck_assert_int_ge(checked, 20);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

static void train(int blocked, int steps, double *loss) {
  _tsr_set_blocked_fused(blocked);
  tsr_context *ctx = start();
  tsr_model *m = dense_model(TSR_LAYER_RELU);
  tsr_optim_spec adam = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  adam.lr = 1e-2f;
  tsr_trainer *t = trainer(ctx, m, &adam);
  ck_assert_int_eq(t->ls[_tsr_model_find(m, "bn0")].relu >= 0, blocked); /* the switch also fuses */
  for (int i = 0; i < steps; i++) loss[i] = step_loss(t);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
  _tsr_set_blocked_fused(1);
}

/* The same kernels reordered (convolutions) or the same sums in another order (batchnorm's per-lane
 * partial sums): losses agree to 1e-5 relative over 10 Adam steps. */
START_TEST(blocked_and_fused_training_follows_plain_training) {
  double plain[10], blocked[10];
  train(0, 10, plain);
  train(1, 10, blocked);
  for (int i = 0; i < 10; i++)
    ck_assert_msg(fabs(blocked[i] - plain[i]) <= 1e-5 * fabs(plain[i]), "step %d: blocked %.9g, plain %.9g", i,
                  blocked[i], plain[i]);
  ck_assert_msg(plain[9] < plain[0], "the loss did not fall: %g -> %g", plain[0], plain[9]);
}
END_TEST

/* What one step submits, seen by the submit hook: zero-fill tasks, and the weight-gradient tasks of
 * convolutions, batchnorm and dense layers that write (STARPU_W, desc overwrite) or add into their
 * gradients. */
enum { CONV, BN, DENSE, NKIND };
static atomic_int n_zero, n_write[NKIND], n_add[NKIND];

static void count_task(struct starpu_task *task) {
  const char *cl = task->cl ? task->cl->name : NULL;
  int kind = -1, overwrite = 0, w = 0;
  if (!cl) return;
  if (strncmp(cl, "tsr_zero", 8) == 0) { /* tsr_zero, and batchnorm's tsr_zero_doubles before */
    atomic_fetch_add(&n_zero, 1);
    return;
  }
  if (strcmp(cl, "tsr_bn_bwd_params") == 0) {
    kind = BN, overwrite = ((const struct _tsr_bn_desc *)task->cl_arg)->overwrite;
    w = STARPU_TASK_GET_MODE(task, 1) == STARPU_W && STARPU_TASK_GET_MODE(task, 2) == STARPU_W;
  } else if (strcmp(cl, "tsr_conv2d_bwd_weights") == 0 || strcmp(cl, "tsr_deconv2d_bwd_weights") == 0) {
    kind = CONV, overwrite = ((const struct _tsr_conv_desc *)task->cl_arg)->overwrite;
    w = STARPU_TASK_GET_MODE(task, 2) == STARPU_W;
  } else if (strcmp(cl, "tsr_dense_bwd_weights") == 0) {
    kind = DENSE, overwrite = ((const struct _tsr_dense_desc *)task->cl_arg)->overwrite;
    w = STARPU_TASK_GET_MODE(task, 2) == STARPU_W;
  }
  if (kind < 0) return;
  ck_assert_int_eq(w, overwrite);
  atomic_fetch_add(w ? &n_write[kind] : &n_add[kind], 1);
}

/* One SGD step (lr 1) of model m under the hook: no zero-fill task, and the weight-gradient tasks
 * that write and add per kind as expected (want[kind][0] write, want[kind][1] add). A second step
 * from the same parameters and data gives the first step's update bitwise (deterministic mode): a
 * gradient that kept the first step's values and were added into would double. */
static void check_gradients_written(tsr_model *m, tsr_sample_fn fill_fn, const int want[NKIND][2]) {
  tsr_context *ctx = start();
  tsr_optim_spec sgd = tsr_optim_spec_default(TSR_OPTIM_SGD);
  sgd.lr = 1.0f, sgd.momentum = 0, sgd.weight_decay = 0;
  tsr_trainer *t = trainer(ctx, m, &sgd);
  int n = tsr_trainer_num_tensors(t);
  float *w0[32], *w1[32];
  ck_assert_int_le(n, 32);
  for (int i = 0; i < n; i++) {
    tsr_shape shp;
    ck_assert_int_eq(tsr_trainer_tensor_info(t, i, NULL, &shp, NULL), TSR_OK);
    w0[i] = malloc(tsr_shape_numel(&shp) * sizeof(float));
    w1[i] = malloc(tsr_shape_numel(&shp) * sizeof(float));
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, w0[i]), TSR_OK);
  }
  atomic_store(&n_zero, 0);
  for (int k = 0; k < NKIND; k++) atomic_store(&n_write[k], 0), atomic_store(&n_add[k], 0);
  int64_t id;
  double l1, l2;
  _tsr_submit_set_hook(count_task);
  ck_assert_int_eq(tsr_trainer_step(t, fill_fn, NULL, &id), TSR_OK);
  _tsr_submit_set_hook(NULL);
  ck_assert_int_eq(tsr_trainer_loss(t, id, &l1), TSR_OK);
  ck_assert_msg(atomic_load(&n_zero) == 0, "%d zero-fill tasks", atomic_load(&n_zero));
  static const char *const kinds[NKIND] = {"conv", "batchnorm", "dense"};
  for (int k = 0; k < NKIND; k++)
    ck_assert_msg(atomic_load(&n_write[k]) == want[k][0] && atomic_load(&n_add[k]) == want[k][1],
                  "%s weight-gradient tasks: %d write, %d add; expected %d, %d", kinds[k], atomic_load(&n_write[k]),
                  atomic_load(&n_add[k]), want[k][0], want[k][1]);
  for (int i = 0; i < n; i++) ck_assert_int_eq(tsr_trainer_tensor_get(t, i, w1[i]), TSR_OK);
  for (int i = 0; i < n; i++) ck_assert_int_eq(tsr_trainer_tensor_set(t, i, w0[i]), TSR_OK);
  ck_assert_int_eq(tsr_trainer_step(t, fill_fn, NULL, &id), TSR_OK);
  ck_assert_int_eq(tsr_trainer_loss(t, id, &l2), TSR_OK);
  ck_assert_msg(l1 == l2, "loss of the repeated step %.9g, first %.9g", l2, l1);
  for (int i = 0; i < n; i++) {
    const char *name;
    tsr_shape shp;
    ck_assert_int_eq(tsr_trainer_tensor_info(t, i, &name, &shp, NULL), TSR_OK);
    float *w2 = malloc(tsr_shape_numel(&shp) * sizeof(float));
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, w2), TSR_OK);
    if (strstr(name, "running") == NULL)
      ck_assert_msg(memcmp(w1[i], w2, tsr_shape_numel(&shp) * sizeof(float)) == 0,
                    "%s: the repeated step's update differs", name);
    free(w2), free(w0[i]), free(w1[i]);
  }
  tsr_trainer_destroy(t);
  tsr_context_destroy(ctx);
}

/* In the DenseNet-like model, slice 0's weight-gradient task of each convolution (c0, c1, up, c2,
 * out) writes the layer's gradients and slice 1's writes its own buffer; batchnorm's one
 * parameter-gradient task per layer (bn0, bn1) writes its gradients; and slice 0's statistics tasks
 * write batchnorm's sums: no zero-fill task is left in a step. */
START_TEST(convolution_and_batchnorm_gradients_are_written_without_zero_fill) {
  tsr_model *m = dense_model(TSR_LAYER_RELU);
  const int want[NKIND][2] = {{5 * 2, 0}, {2, 0}, {0, 0}};
  check_gradients_written(m, fill, want);
  tsr_model_destroy(m);
}
END_TEST

/* 4 targets per sample for the dense head below */
static int fill4(void *user, int64_t step, int index, float *x, float *y) {
  float big[S * S];
  fill(user, step, index, x, big);
  for (int k = 0; k < 4; k++) y[k] = big[k * 7];
  return 0;
}

/* A dense head (in -> conv -> flatten -> dense): slice 0's dense weight-gradient task writes the
 * gradients, slice 1's adds into them. */
START_TEST(dense_gradients_are_written_by_the_first_slice) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "head"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 2, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c0", "in", 3, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "t", TSR_LAYER_TANH, "c0"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "flat", TSR_LAYER_FLATTEN, "t"), TSR_OK);
  tsr_layer_spec d = tsr_layer_spec_default(TSR_LAYER_DENSE);
  d.out_channels = 4;
  add(m, "fc", &d, (const char *[]){"flat"}, 1);
  ck_assert_int_eq(tsr_model_set_output(m, "fc", TSR_LOSS_MSE, 1), TSR_OK);
  const int want[NKIND][2] = {{2, 0}, {0, 0}, {1, 1}};
  check_gradients_written(m, fill4, want);
  tsr_model_destroy(m);
}
END_TEST

/* Plain activations next to convolutions: in (CE channels: a kernel that takes the blocked layout)
 * -> c0 -> bn0 -> r0 -> c1 -> drop (p 0: a copy, plain only) -> c2 -> t (tanh) -> out. c0's input,
 * c1's output, c2's input (and its gradient: drop's is needed) and out's output are plain while
 * the convolution kernels take blocked data: the trainer gives each a blocked copy and reorder
 * tasks of their own. */
#define CE 20
static int fill_edge(void *user, int64_t step, int index, float *x, float *y) {
  for (int p = 0; p < CE * S * S; p++) x[p] = sinf(0.37f * (p + 1) * (index + 1)) * 0.8f;
  for (int p = 0; p < S * S; p++) y[p] = 0.5f * x[p] * x[p] - 0.3f * x[S * S + p];
  return 0;
}

static tsr_model *edge_model(void) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "edges"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", CE, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c0", "in", 16, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "bn0", TSR_LAYER_BATCHNORM, "c0"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r0", TSR_LAYER_RELU, "bn0"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "r0", 16, 3, 1, 1), TSR_OK);
  tsr_layer_spec dp = tsr_layer_spec_default(TSR_LAYER_DROPOUT);
  dp.p = 0;
  add(m, "drop", &dp, (const char *[]){"c1"}, 1);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c2", "drop", 16, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "t", TSR_LAYER_TANH, "c2"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out", "t", 1, 1, 1, 0), TSR_OK);
  ck_assert_int_eq(tsr_model_set_output(m, "out", TSR_LOSS_MSE, 1), TSR_OK);
  return m;
}

/* The reorder tasks a step submits, per codelet (forward, backward) and per layer they serve. */
static atomic_int n_reorder[2], n_reorder_bad_name;
static const tsr_model *hooked_model;

static void count_reorder(struct starpu_task *task) {
  const char *cl = task->cl ? task->cl->name : NULL;
  if (!cl || strncmp(cl, "tsr_reorder_", 12) != 0) return;
  atomic_fetch_add(&n_reorder[strcmp(cl, "tsr_reorder_bwd") == 0], 1);
  if (!task->name || _tsr_model_find(hooked_model, task->name) < 0) atomic_fetch_add(&n_reorder_bad_name, 1);
}

/* One step under the hook: the reorder tasks submitted (fwd, bwd), and the activation reorders the
 * convolution tasks ran inside themselves. */
static void one_step(tsr_trainer *t, const tsr_model *m, int nreorder[2], long *conv_act) {
  hooked_model = m;
  atomic_store(&n_reorder[0], 0), atomic_store(&n_reorder[1], 0), atomic_store(&n_reorder_bad_name, 0);
  long before = _tsr_conv_reorders(0);
  int64_t id;
  _tsr_submit_set_hook(count_reorder);
  ck_assert_int_eq(tsr_trainer_step(t, fill_edge, NULL, &id), TSR_OK);
  _tsr_submit_set_hook(NULL);
  ck_assert_int_eq(tsr_trainer_sync(t), TSR_OK);
  *conv_act = _tsr_conv_reorders(0) - before;
  nreorder[0] = atomic_load(&n_reorder[0]), nreorder[1] = atomic_load(&n_reorder[1]);
  ck_assert_int_eq(atomic_load(&n_reorder_bad_name), 0);
}

/* With blocked layouts the convolution tasks reorder no activation (the counter of reorders they run
 * stays put over a step), and a step submits one reorder task per slice and plain side the plan gave
 * a blocked copy (forward: inputs and outputs; backward: the outputs' gradients and the inputs'
 * gradients that are needed), named after the convolution. The switch that turns blocked layouts
 * off submits none. */
START_TEST(plain_activations_are_reordered_in_tasks_of_their_own) {
  tsr_context *ctx = start();
  tsr_model *m = edge_model();
  tsr_trainer *t = trainer(ctx, m, NULL);
  int blk = t->act_blk, fwd = 0, bwd = 0, nr[2];
  long conv_act;
  int left = 0;
  for (int l = 0; l < m->n; l++) {
    const struct _tsr_lstate *st = &t->ls[l];
    int own_in = m->layers[l].ninputs ? t->ls[m->layers[l].inputs[0]].blk : 0;
    ck_assert_msg(!(st->edges & TSR_EDGE_IN) || st->copy_blk[0] != own_in, "%s: a copy of the input in its layout",
                  m->layers[l].name);
    ck_assert_msg(!(st->edges & TSR_EDGE_OUT) || st->copy_blk[1] != st->blk, "%s: a copy of the output in its layout",
                  m->layers[l].name);
    fwd += !!(st->edges & TSR_EDGE_IN) + !!(st->edges & TSR_EDGE_OUT);
    bwd += (st->edges & TSR_EDGE_IN && t->ls[m->layers[l].inputs[0]].needs_grad) + !!(st->edges & TSR_EDGE_OUT);
    left |= st->reorders_left;
  }
  one_step(t, m, nr, &conv_act); /* the first step plans the kernels */
  one_step(t, m, nr, &conv_act);
  ck_assert_msg(nr[0] == fwd * t->slices && nr[1] == bwd * t->slices,
                "reorder tasks: %d forward, %d backward; the plan's copies ask for %d, %d", nr[0], nr[1],
                fwd * t->slices, bwd * t->slices);
  if (blk) {
    /* CPUs differ in which layout each pass's kernel takes: the plan says where one layout serves all */
    ck_assert_msg((conv_act == 0) == (left == 0), "the convolution tasks of a step ran %ld activation reorders; "
                  "the plan leaves %s", conv_act, left ? "some" : "none");
    ck_assert_msg(fwd > 0, "no plain side of a convolution got a blocked copy");
    ck_assert_int_eq(t->ls[_tsr_model_find(m, "in")].blk, 0);
    ck_assert_int_eq(t->ls[_tsr_model_find(m, "drop")].blk, 0);
  }
  tsr_trainer_destroy(t);
  _tsr_set_blocked_fused(0);
  t = trainer(ctx, m, NULL);
  one_step(t, m, nr, &conv_act);
  ck_assert_msg(nr[0] == 0 && nr[1] == 0, "%d + %d reorder tasks with plain layouts", nr[0], nr[1]);
  tsr_trainer_destroy(t);
  _tsr_set_blocked_fused(1);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* The model whose plain sides are reordered in tasks of their own: the step's loss and gradient with
 * blocked layouts and copies match the plain step's (every entry, 1e-5 relative to the largest). */
START_TEST(reordered_edges_give_the_plain_gradient) {
  if (!use_block(_i)) return;
  assert_blocked_matches_plain(edge_model(), fill_edge);
}
END_TEST

static Suite *make_layout_suite(void) {
  Suite *s = suite_create("layout");
  TCase *tc = tcase_create("layout");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, blocked_layouts_and_fusions_are_chosen_where_every_layer_handles_them);
  tcase_add_test(tc, asynchronous_slices_fuse_no_relu);
  tcase_add_test(tc, the_block_is_the_one_that_pads_the_convolutions_least);
  tcase_add_test(tc, only_zen4_runs_512_bit_fmas_as_two_halves);
  tcase_add_loop_test(tc, blocked_graph_gradient_matches_finite_differences, 0, 2);
  tcase_add_loop_test(tc, blocked_fused_gradient_matches_the_plain_one, 0, 2);
  tcase_add_test(tc, blocked_and_fused_training_follows_plain_training);
  tcase_add_test(tc, convolution_and_batchnorm_gradients_are_written_without_zero_fill);
  tcase_add_test(tc, dense_gradients_are_written_by_the_first_slice);
  tcase_add_test(tc, plain_activations_are_reordered_in_tasks_of_their_own);
  tcase_add_loop_test(tc, reordered_edges_give_the_plain_gradient, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_layout_suite)

/* Training as a task graph: the whole-graph gradient (DAG with skip connections, several
 * consumers per layer, slices) against finite differences, overfitting a small batch, bitwise
 * reproducibility in deterministic mode (also between sleeping and polling idle workers), a kernel
 * failure returned as a status, and models too large for the memory (or for 64-bit sizes) refused
 * before anything is allocated. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <tessera.h>

#include "codelets.h"
#include "testutil.h"
#include "train/trainer.h"

#define S 8 /* image side */

/* Sample i: a smooth random-ish input and a target that depends on it non-trivially. */
static int fill(void *user, int64_t step, int index, float *x, float *y) {
  int cin = *(int *)user;
  for (int c = 0; c < cin; c++)
    for (int p = 0; p < S * S; p++) x[c * S * S + p] = sinf(0.37f * (p + 1) * (index + 1) + c) * 0.8f;
  for (int p = 0; p < S * S; p++) y[p] = 0.5f * x[p] * x[p] - 0.3f * x[(p + 1) % (S * S)];
  return 0;
}

static tsr_context *start_idle(int deterministic, int ncpus, int idle) {
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.ncpus = ncpus;
  o.idle = idle;
  o.use_mpi = 0;
  o.deterministic = deterministic;
  o.verbose = 0;
  tsr_context *ctx = NULL;
  ck_assert_msg(tsr_context_create(&ctx, &o, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  return ctx;
}

static tsr_context *start(int deterministic, int ncpus) { return start_idle(deterministic, ncpus, 0); }

/* A DAG: two consumers of 'a' and of the input, concat, pooling, transposed conv, add, dense-free. */
static tsr_model *dag_model(void) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "dag"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 2, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "a", "in", 3, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "ra", TSR_LAYER_TANH, "a"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "b", "ra", 3, 3, 1, 1), TSR_OK);
  const char *cat_in[] = {"ra", "b", "in"};
  tsr_layer_spec cat = tsr_layer_spec_default(TSR_LAYER_CONCAT);
  ck_assert_int_eq(tsr_model_add(m, "cat", &cat, cat_in, 3), TSR_OK);
  tsr_layer_spec pool = tsr_layer_spec_default(TSR_LAYER_AVGPOOL2D);
  pool.kernel_h = pool.kernel_w = 2;
  const char *c = "cat";
  ck_assert_int_eq(tsr_model_add(m, "pool", &pool, &c, 1), TSR_OK);
  tsr_layer_spec up = tsr_layer_spec_default(TSR_LAYER_CONV_TRANSPOSE2D);
  up.out_channels = 3, up.kernel_h = up.kernel_w = 2, up.stride_h = up.stride_w = 2;
  const char *p = "pool";
  ck_assert_int_eq(tsr_model_add(m, "up", &up, &p, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "skip", "in", 3, 1, 1, 0), TSR_OK);
  const char *add_in[] = {"up", "skip", "ra"};
  tsr_layer_spec add = tsr_layer_spec_default(TSR_LAYER_ADD);
  ck_assert_int_eq(tsr_model_add(m, "sum", &add, add_in, 3), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "act", TSR_LAYER_SIGMOID, "sum"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out", "act", 1, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_set_output(m, "out", TSR_LOSS_MSE, 1), TSR_OK);
  return m;
}

static double eval_loss(tsr_trainer *t, int *cin) {
  int64_t id;
  double l;
  ck_assert_int_eq(tsr_trainer_eval(t, fill, cin, tsr_trainer_batch(t), &id), TSR_OK);
  ck_assert_int_eq(tsr_trainer_loss(t, id, &l), TSR_OK);
  return l;
}

START_TEST(whole_graph_gradient_matches_finite_differences) {
  tsr_context *ctx = start(1, 2);
  tsr_model *m = dag_model();
  tsr_optim_spec sgd = tsr_optim_spec_default(TSR_OPTIM_SGD);
  sgd.lr = 1.0f, sgd.momentum = 0, sgd.weight_decay = 0;
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 5, o.slices = 2; /* unequal slices: 3 + 2 */
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &sgd, &o) == TSR_OK, "%s", tsr_last_error());
  int cin = 2, n = tsr_trainer_num_tensors(t);
  ck_assert_int_eq(n, 10);
  float *before[10], *after[10];
  tsr_shape shp[10];
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(tsr_trainer_tensor_info(t, i, NULL, &shp[i], NULL), TSR_OK);
    before[i] = malloc(tsr_shape_numel(&shp[i]) * sizeof(float));
    after[i] = malloc(tsr_shape_numel(&shp[i]) * sizeof(float));
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, before[i]), TSR_OK);
  }
  double l0 = eval_loss(t, &cin);
  int64_t id;
  double ltrain;
  ck_assert_int_eq(tsr_trainer_step(t, fill, &cin, &id), TSR_OK);
  ck_assert_int_eq(tsr_trainer_loss(t, id, &ltrain), TSR_OK);
  ck_assert_msg(fabs(ltrain - l0) <= 1e-6 * fabs(l0), "train-mode loss %.9g differs from eval loss %.9g", ltrain, l0);
  for (int i = 0; i < n; i++) ck_assert_int_eq(tsr_trainer_tensor_get(t, i, after[i]), TSR_OK);
  for (int i = 0; i < n; i++) ck_assert_int_eq(tsr_trainer_tensor_set(t, i, before[i]), TSR_OK);
  /* SGD with lr 1 and no momentum: gradient = before - after. Check up to 6 entries per tensor by
   * central differences of the eval loss (float32 forward, h = 1e-2: tolerance 2e-2 relative + 2e-5). */
  for (int i = 0; i < n; i++) {
    const char *name;
    ck_assert_int_eq(tsr_trainer_tensor_info(t, i, &name, NULL, NULL), TSR_OK);
    int64_t len = tsr_shape_numel(&shp[i]);
    for (int k = 0; k < 6 && k < len; k++) {
      int64_t j = (k * 7919) % len;
      float *w = malloc(len * sizeof(float));
      memcpy(w, before[i], len * sizeof(float));
      const double h = 1e-2;
      w[j] = before[i][j] + (float)h;
      ck_assert_int_eq(tsr_trainer_tensor_set(t, i, w), TSR_OK);
      double lp = eval_loss(t, &cin);
      w[j] = before[i][j] - (float)h;
      ck_assert_int_eq(tsr_trainer_tensor_set(t, i, w), TSR_OK);
      double lm = eval_loss(t, &cin);
      ck_assert_int_eq(tsr_trainer_tensor_set(t, i, before[i]), TSR_OK);
      double fd = (lp - lm) / (2 * h), g = (double)before[i][j] - after[i][j];
      ck_assert_msg(fabs(fd - g) <= 2e-5 + 2e-2 * fabs(fd), "%s[%lld]: gradient %.6g, finite differences %.6g", name,
                    (long long)j, g, fd);
      free(w);
    }
    free(before[i]);
    free(after[i]);
  }
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

static tsr_model *small_bn_model(void) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "small"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "in", 8, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "bn1", TSR_LAYER_BATCHNORM, "c1"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r1", TSR_LAYER_RELU, "bn1"), TSR_OK);
  tsr_layer_spec dp = tsr_layer_spec_default(TSR_LAYER_DROPOUT);
  dp.p = 0.1f;
  const char *r1 = "r1";
  ck_assert_int_eq(tsr_model_add(m, "drop", &dp, &r1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c2", "drop", 8, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r2", TSR_LAYER_LEAKY_RELU, "c2"), TSR_OK);
  const char *cat_in[] = {"r2", "in"};
  tsr_layer_spec cat = tsr_layer_spec_default(TSR_LAYER_CONCAT);
  ck_assert_int_eq(tsr_model_add(m, "cat", &cat, cat_in, 2), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out", "cat", 1, 3, 1, 1), TSR_OK);
  return m;
}

/* Trains `steps` steps; returns the losses (caller frees) and the flattened final parameters. */
static double *train_run_idle(int deterministic, int idle, int steps, float **params_out, size_t *nparams) {
  tsr_context *ctx = start_idle(deterministic, 2, idle);
  tsr_model *m = small_bn_model();
  tsr_optim_spec adam = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  adam.lr = 1e-2f;
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 8, o.slices = 2, o.seed = 7;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &adam, &o) == TSR_OK, "%s", tsr_last_error());
  int cin = 1;
  double *loss = calloc(steps, sizeof(double));
  for (int i = 0; i < steps; i++) ck_assert_int_eq(tsr_trainer_step(t, fill, &cin, NULL), TSR_OK);
  for (int i = 0; i < steps; i++) ck_assert_int_eq(tsr_trainer_loss(t, i, &loss[i]), TSR_OK);
  ck_assert_int_eq(tsr_trainer_sync(t), TSR_OK);
  size_t total = 0;
  for (int i = 0; i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape s;
    tsr_trainer_tensor_info(t, i, NULL, &s, NULL);
    total += tsr_shape_numel(&s);
  }
  float *p = malloc(total * sizeof(float));
  for (int i = 0, off = 0; i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape s;
    tsr_trainer_tensor_info(t, i, NULL, &s, NULL);
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, p + off), TSR_OK);
    off += tsr_shape_numel(&s);
  }
  *params_out = p, *nparams = total;
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
  return loss;
}

static double *train_run(int deterministic, int steps, float **params_out, size_t *nparams) {
  return train_run_idle(deterministic, 0, steps, params_out, nparams);
}

START_TEST(small_model_overfits_a_small_batch) {
  float *p;
  size_t n;
  double *loss = train_run(0, 200, &p, &n);
  ck_assert_msg(isfinite(loss[199]) && loss[199] < 0.05 * loss[0], "loss went from %g to %g in 200 steps", loss[0],
                loss[199]);
  free(loss);
  free(p);
}
END_TEST

START_TEST(deterministic_mode_reproduces_bitwise) {
  float *p1, *p2;
  size_t n1, n2;
  double *l1 = train_run(1, 12, &p1, &n1), *l2 = train_run(1, 12, &p2, &n2);
  ck_assert_int_eq(n1, n2);
  for (int i = 0; i < 12; i++) ck_assert_msg(memcmp(&l1[i], &l2[i], sizeof(double)) == 0, "step %d: %.17g vs %.17g", i, l1[i], l2[i]);
  ck_assert_msg(memcmp(p1, p2, n1 * sizeof(float)) == 0, "final parameters differ");
  free(l1), free(l2), free(p1), free(p2);
}
END_TEST

/* Idle workers that sleep (yield, the default of a process without MPI) or poll run the same graph: same losses and parameters,
 * bitwise, in deterministic mode; a value that is neither is refused, naming where it came from (so
 * is a bad MPI progress mode). */
START_TEST(idle_workers_sleeping_or_polling_train_identically) {
  float *p1, *p2;
  size_t n1, n2;
  double *l1 = train_run_idle(1, TSR_IDLE_YIELD, 12, &p1, &n1), *l2 = train_run_idle(1, TSR_IDLE_SPIN, 12, &p2, &n2);
  ck_assert_int_eq(n1, n2);
  for (int i = 0; i < 12; i++) ck_assert_msg(memcmp(&l1[i], &l2[i], sizeof(double)) == 0, "step %d: %.17g vs %.17g", i, l1[i], l2[i]);
  ck_assert_msg(memcmp(p1, p2, n1 * sizeof(float)) == 0, "final parameters differ");
  free(l1), free(l2), free(p1), free(p2);
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.use_mpi = 0, o.verbose = 0, o.idle = 9;
  tsr_context *ctx = NULL;
  ck_assert_int_eq(tsr_context_create(&ctx, &o, NULL, NULL), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "idle = 9"));
  o.idle = 0;
  setenv("TESSERA_IDLE", "nap", 1);
  ck_assert_int_eq(tsr_context_create(&ctx, &o, NULL, NULL), TSR_ERR_ARG);
  unsetenv("TESSERA_IDLE");
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "TESSERA_IDLE is neither"));
  ck_assert_ptr_null(ctx);
  o.mpi_progress = 9; /* the MPI progress modes are compared under mpirun (tests/mpi_train.sh) */
  ck_assert_int_eq(tsr_context_create(&ctx, &o, NULL, NULL), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "mpi_progress = 9"));
  o.mpi_progress = 0;
  setenv("TESSERA_MPI_PROGRESS", "poll", 1);
  ck_assert_int_eq(tsr_context_create(&ctx, &o, NULL, NULL), TSR_ERR_ARG);
  unsetenv("TESSERA_MPI_PROGRESS");
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "TESSERA_MPI_PROGRESS is neither"));
  ck_assert_ptr_null(ctx);
}
END_TEST

static double process_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* In yield mode (asked for, and the default without MPI) two workers with nothing to run leave the
 * cores alone: a polling pair takes up to 0.6 s of CPU in 0.3 s. Until the context cleared
 * conf.sched_policy_name, StarPU 1.3 ran the named policy instead of the copy whose workers sleep. */
START_TEST(idle_workers_sleep_when_yielding) {
  const int modes[] = {TSR_IDLE_YIELD, TSR_IDLE_DEFAULT};
  for (int i = 0; i < 2; i++) {
    tsr_context *ctx = start_idle(0, 2, modes[i]);
    struct timespec settle = {0, 100000000}, idle = {0, 300000000};
    nanosleep(&settle, NULL);
    double c0 = process_cpu_s();
    nanosleep(&idle, NULL);
    double used = process_cpu_s() - c0;
    tsr_context_destroy(ctx);
    ck_assert_msg(used < 0.1, "idle mode %d: 2 idle workers used %.3f s of CPU in 0.3 s", modes[i], used);
  }
}
END_TEST

/* The scheduler of a process without MPI: eager where STARPU_SCHED is unset (dmdas on a StarPU with
 * CUDA), the named one where it is set; in idle yield mode Tessera's copy keeps the policy's name. */
START_TEST(a_single_process_schedules_with_eager_unless_told) {
  char *was = getenv("STARPU_SCHED") ? strdup(getenv("STARPU_SCHED")) : NULL;
  const char *set[] = {NULL, "lws"};
#ifdef STARPU_USE_CUDA
  const char *want[] = {"dmdas", "lws"};
#else
  const char *want[] = {"eager", "lws"};
#endif
  for (int i = 0; i < 2; i++)
    for (int idle = TSR_IDLE_YIELD; idle <= TSR_IDLE_SPIN; idle++) {
      if (set[i]) setenv("STARPU_SCHED", set[i], 1);
      else unsetenv("STARPU_SCHED");
      tsr_context *ctx = start_idle(0, 2, idle);
      struct starpu_sched_policy *p = starpu_sched_ctx_get_sched_policy(0);
      ck_assert_msg(p && p->policy_name && !strcmp(p->policy_name, want[i]),
                    "STARPU_SCHED %s, idle mode %d: policy '%s', want '%s'", set[i] ? set[i] : "unset", idle,
                    p && p->policy_name ? p->policy_name : "(none)", want[i]);
      tsr_context_destroy(ctx);
    }
  if (was) setenv("STARPU_SCHED", was, 1);
  else unsetenv("STARPU_SCHED");
  free(was);
}
END_TEST

/* StarPU's background write-backs of GPU buffers are off unless the user sets them (context.c). */
START_TEST(gpu_write_backs_are_off_unless_the_user_sets_them) {
  const char *names[] = {"STARPU_MINIMUM_CLEAN_BUFFERS", "STARPU_TARGET_CLEAN_BUFFERS"};
  for (int user = 0; user < 2; user++) {
    for (int i = 0; i < 2; i++) user ? setenv(names[i], "7", 1) : unsetenv(names[i]);
    tsr_context *ctx = start(0, 1);
    for (int i = 0; i < 2; i++) {
      const char *v = getenv(names[i]);
      ck_assert_msg(v && !strcmp(v, user ? "7" : "0"), "%s is %s with the user's %s", names[i], v ? v : "unset",
                    user ? "7" : "unset");
    }
    tsr_context_destroy(ctx);
  }
  for (int i = 0; i < 2; i++) unsetenv(names[i]);
}
END_TEST

START_TEST(eval_counts_only_valid_samples) {
  tsr_context *ctx = start(1, 2);
  tsr_model *m = dag_model();
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 4, o.slices = 2, o.seed = 3;
  tsr_trainer *t4, *t3;
  ck_assert_int_eq(tsr_trainer_create(&t4, ctx, m, NULL, &o), TSR_OK);
  o.batch = 3;
  ck_assert_int_eq(tsr_trainer_create(&t3, ctx, m, NULL, &o), TSR_OK);
  int cin = 2;
  int64_t a, b;
  double la, lb;
  ck_assert_int_eq(tsr_trainer_eval(t4, fill, &cin, 3, &a), TSR_OK);
  ck_assert_int_eq(tsr_trainer_eval(t3, fill, &cin, 3, &b), TSR_OK);
  ck_assert_int_eq(tsr_trainer_loss(t4, a, &la), TSR_OK);
  ck_assert_int_eq(tsr_trainer_loss(t3, b, &lb), TSR_OK);
  ck_assert_msg(fabs(la - lb) <= 1e-6 * fabs(lb), "padded batch loss %.9g, exact batch loss %.9g", la, lb);
  ck_assert_int_eq(tsr_trainer_eval(t4, fill, &cin, 5, &a), TSR_ERR_ARG);
  tsr_trainer_destroy(t4);
  tsr_trainer_destroy(t3);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* Groups tile the trainable tensors in backward order, never split a layer, and follow the size. */
START_TEST(gradient_groups_follow_the_layout_setting) {
  tsr_context *ctx = start(1, 2);
  tsr_model *m = dag_model();
  long long settings[] = {-1, 1 << 30, 512};
  int expect_min[] = {5, 1, 2}, expect_max[] = {5, 1, 4};
  for (int k = 0; k < 3; k++) {
    tsr_trainer_opts o;
    tsr_trainer_opts_default(&o);
    o.batch = 2, o.group_bytes = settings[k];
    tsr_trainer *t;
    ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_OK);
    int ng = tsr_trainer_num_groups(t), next = 0;
    ck_assert_msg(ng >= expect_min[k] && ng <= expect_max[k], "setting %lld: %d groups", settings[k], ng);
    for (int g = 0; g < ng; g++) {
      int first, count;
      size_t bytes;
      ck_assert_int_eq(tsr_trainer_group_info(t, g, &first, &count, &bytes), TSR_OK);
      ck_assert_int_eq(first, next);
      next = first + count;
      const char *a;
      tsr_trainer_tensor_info(t, first, &a, NULL, NULL);
      /* a layer's weight and bias stay together: a group never starts with a bias */
      ck_assert_msg(strstr(a, ".bias") == NULL, "group %d starts with %s", g, a);
    }
    ck_assert_int_eq(next, tsr_trainer_num_tensors(t));
    ck_assert_int_eq(tsr_trainer_group_info(t, ng, NULL, NULL, NULL), TSR_ERR_ARG);
    tsr_trainer_destroy(t);
  }
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* TESSERA_GROUP_BYTES is the fallback of tsr_trainer_opts.group_bytes: used when the option is 0,
 * ignored when it is set. */
START_TEST(group_size_falls_back_to_the_environment) {
  tsr_context *ctx = start(1, 2);
  tsr_model *m = dag_model();
  ck_assert_int_eq(setenv("TESSERA_GROUP_BYTES", "layer", 1), 0);
  long long settings[] = {0, 1 << 30};
  int expect[] = {5, 1}; /* one group per layer with parameters; everything in one group */
  for (int k = 0; k < 2; k++) {
    tsr_trainer_opts o;
    tsr_trainer_opts_default(&o);
    o.batch = 2, o.group_bytes = settings[k];
    tsr_trainer *t;
    ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_OK);
    ck_assert_msg(tsr_trainer_num_groups(t) == expect[k], "option %lld, TESSERA_GROUP_BYTES=layer: %d groups",
                  settings[k], tsr_trainer_num_groups(t));
    tsr_trainer_destroy(t);
  }
  unsetenv("TESSERA_GROUP_BYTES");
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

static tsr_model *tiny_conv_relu(void) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "tiny"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, 4, 4), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c", "in", 2, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r", TSR_LAYER_RELU, "c"), TSR_OK);
  return m;
}

/* The step deadline of a multi-rank run before any step is timed: 30 s plus 20 times the step's
 * FLOPs at 1 GFLOP/s per worker. tiny_conv_relu's conv: 2 x 4 x 4 outputs x 9 multiply-adds = 288 per
 * sample; batch 4, 2 workers: 6 x 288 x 4 / 2e9 = 3.456e-6 s, so 30 + 6.912e-5 s. Set, the option
 * wins; TESSERA_STEP_TIMEOUT=0 means no limit (-1). */
START_TEST(the_first_step_deadline_follows_the_models_flops) {
  tsr_context *ctx = start(1, 2);
  tsr_model *m = tiny_conv_relu();
  ck_assert_double_eq(tsr_model_forward_flops(m), 288.0);
  unsetenv("TESSERA_STEP_TIMEOUT");
  double opt[] = {0, 7, 0}, expect[] = {30 + 20 * 6 * 288.0 * 4 / 2e9, 7, -1};
  for (int k = 0; k < 3; k++) {
    if (k == 2) ck_assert_int_eq(setenv("TESSERA_STEP_TIMEOUT", "0", 1), 0);
    tsr_trainer_opts o;
    tsr_trainer_opts_default(&o);
    o.batch = 4, o.step_timeout = opt[k];
    tsr_trainer *t;
    ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_OK);
    double d = _tsr_step_deadline(t);
    ck_assert_msg(fabs(d - expect[k]) <= 1e-12, "case %d: deadline %.12g s, expected %.12g", k, d, expect[k]);
    tsr_trainer_destroy(t);
  }
  unsetenv("TESSERA_STEP_TIMEOUT");
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* The control word on one rank: each training step reports the value set before its submission
 * (0 before any set), evaluation steps report 0, and unsubmitted steps are refused. */
START_TEST(control_word_reports_the_value_of_each_step) {
  tsr_context *ctx = start(0, 2);
  tsr_model *m = dag_model();
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 2, o.group_bytes = 512; /* several groups: the word rides in group 0 */
  tsr_trainer *t;
  ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_OK);
  int cin = 2;
  const float set[] = {0, 0, 3, 3, -1, 0.5f}; /* -1: an evaluation step */
  const double expect[] = {0, 0, 3, 3, 0, 0.5};
  for (int i = 0; i < 6; i++) {
    int64_t id;
    if (set[i] >= 0 && i > 0) tsr_trainer_set_flag(t, set[i]);
    if (set[i] < 0)
      ck_assert_int_eq(tsr_trainer_eval(t, fill, &cin, 2, &id), TSR_OK);
    else
      ck_assert_int_eq(tsr_trainer_step(t, fill, &cin, &id), TSR_OK);
    ck_assert_int_eq(id, i);
  }
  double sum, loss;
  ck_assert_int_eq(tsr_trainer_flag(t, 6, &sum), TSR_ERR_ARG);
  for (int i = 0; i < 6; i++) {
    ck_assert_int_eq(tsr_trainer_flag(t, i, &sum), TSR_OK);
    ck_assert_msg(sum == expect[i], "step %d: flag %g, expected %g", i, sum, expect[i]);
    ck_assert_int_eq(tsr_trainer_loss(t, i, &loss), TSR_OK);
    ck_assert(isfinite(loss));
  }
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* One SGD step must move every trainable tensor, whatever the grouping: batch norm's running
 * statistics sit between trainable tensors in the layout and must not cut a group short. Every
 * gradient here is non-zero in exact arithmetic (a bias right before a batch norm would have a zero
 * one, and whether rounding makes it non-zero depends on the CPU's kernels): conv, ReLU, batch
 * norm, conv. */
START_TEST(every_trainable_tensor_is_updated_by_a_step) {
  tsr_context *ctx = start(1, 2);
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "bn_between"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "in", 8, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r1", TSR_LAYER_RELU, "c1"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "bn1", TSR_LAYER_BATCHNORM, "r1"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out", "bn1", 1, 3, 1, 1), TSR_OK);
  long long settings[] = {-1, 0, 1 << 30, 300};
  for (int k = 0; k < 4; k++) {
    tsr_optim_spec sgd = tsr_optim_spec_default(TSR_OPTIM_SGD);
    sgd.lr = 0.1f;
    tsr_trainer_opts o;
    tsr_trainer_opts_default(&o);
    o.batch = 4, o.group_bytes = settings[k];
    tsr_trainer *t;
    ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, &sgd, &o), TSR_OK);
    int n = tsr_trainer_num_tensors(t), cin = 1;
    float *before[16];
    for (int i = 0; i < n; i++) {
      tsr_shape s;
      tsr_trainer_tensor_info(t, i, NULL, &s, NULL);
      before[i] = malloc(tsr_shape_numel(&s) * sizeof(float));
      tsr_trainer_tensor_get(t, i, before[i]);
    }
    ck_assert_int_eq(tsr_trainer_step(t, fill, &cin, NULL), TSR_OK);
    ck_assert_int_eq(tsr_trainer_sync(t), TSR_OK);
    for (int i = 0; i < n; i++) {
      const char *name;
      tsr_shape s;
      int trainable;
      tsr_trainer_tensor_info(t, i, &name, &s, &trainable);
      float *after = malloc(tsr_shape_numel(&s) * sizeof(float));
      tsr_trainer_tensor_get(t, i, after);
      int moved = memcmp(after, before[i], tsr_shape_numel(&s) * sizeof(float)) != 0;
      ck_assert_msg(moved, "group setting %lld: tensor %s did not change in a training step", settings[k], name);
      free(after);
      free(before[i]);
    }
    tsr_trainer_destroy(t);
  }
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* A kernel that fails inside a task (oneDNN rejecting a call) records the failure; the trainer
 * returns it from its next call as TSR_ERR_RUNTIME naming the kernel, and a new trainer starts
 * clean. The failure is provoked by running the conv kernel on a descriptor oneDNN rejects (the
 * graph never submits one) in this process, as a worker would. */
START_TEST(kernel_failure_is_returned_by_the_trainer) {
  tsr_context *ctx = start(0, 2);
  tsr_model *m = dag_model();
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 2;
  tsr_trainer *t;
  ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_OK);
  int cin = 2;
  int64_t id;
  double loss;
  ck_assert_int_eq(tsr_trainer_step(t, fill, &cin, &id), TSR_OK);
  ck_assert_int_eq(tsr_trainer_sync(t), TSR_OK);
  struct _tsr_conv_desc d = {.n = 1, .ci = 1, .h = 4, .w = 4, .co = 1, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                            .dh = 1, .dw = 1, .oh = 9, .ow = 2}; /* 4x4 input, 3x3 kernel: not 9x2 */
  float x[16] = {0}, w[9] = {0}, y[18];
  _tsr_conv2d_fwd_cpu(&d, x, w, NULL, y);
  ck_assert_int_eq(tsr_trainer_sync(t), TSR_ERR_RUNTIME);
  ck_assert_msg(strstr(tsr_last_error(), "kernel 'conv2d_fwd'"), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_trainer_loss(t, 0, &loss), TSR_ERR_RUNTIME);
  ck_assert_int_eq(tsr_trainer_step(t, fill, &cin, &id), TSR_ERR_RUNTIME);
  tsr_trainer_destroy(t);
  ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_OK);
  ck_assert_int_eq(tsr_trainer_step(t, fill, &cin, &id), TSR_OK);
  ck_assert_int_eq(tsr_trainer_sync(t), TSR_OK);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* ---- sizes that cannot fit ---- */

static tsr_status create(tsr_context *ctx, tsr_model *m, int batch, int slices) {
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = batch, o.slices = slices;
  tsr_trainer *t = NULL;
  tsr_status s = tsr_trainer_create(&t, ctx, m, NULL, &o);
  ck_assert(s == TSR_OK || t == NULL);
  tsr_trainer_destroy(t);
  return s;
}

/* The model: 1e9 output channels (weights, gradients and Adam's moments of 36 GB each, and
 * 256 GB per sample for each of its output and output gradient) against a limit of 1 GiB. */
START_TEST(a_model_that_cannot_fit_is_refused_naming_its_largest_layer) {
  tt_cap_address_space();
  char path[512];
  snprintf(path, sizeof path, "%s/huge.json", tt_tmpdir());
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("{\"name\": \"huge\", \"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [1, 8, 8]},"
        " {\"name\": \"wide\", \"type\": \"conv2d\", \"out_channels\": 1000000000, \"kernel\": 3, \"padding\": 1},"
        " {\"name\": \"out\", \"type\": \"conv2d\", \"out_channels\": 1, \"kernel\": 1}], \"loss\": {\"type\": \"mse\"}}",
        f);
  fclose(f);
  tsr_context *ctx = start(0, 2);
  tsr_model *m;
  ck_assert_msg(tsr_model_load_json(&m, NULL, path) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_memory_set_limit(1ll << 30), TSR_OK);
  tsr_status s = create(ctx, m, 32, 2);
  const char *e = tsr_last_error();
  ck_assert_msg(s == TSR_ERR_NOMEM, "%s: %s", tsr_status_name(s), e);
  unsigned long long need = 0;
  const char *at = strstr(e, "needs ");
  ck_assert_msg(at && sscanf(at, "needs %llu bytes", &need) == 1, "%s", e);
  /* at least the four weight-sized buffers and the batch's outputs and gradients of 'wide' */
  ck_assert_msg(need >= 4 * 9e9 * 4 + 2 * 32 * 1e9 * 64 * 4, "needs %llu bytes: %s", need, e);
  ck_assert_msg(strstr(e, "conv2d 'wide'") && strstr(e, "1073741824 bytes") && strstr(e, "tsr_memory_set_limit"),
                "%s", e);
  ck_assert_int_eq(tsr_memory_set_limit(0), TSR_OK);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* The footprint tests' model: input 'in' [1, 4, 4] -> conv2d 'c' (2 outputs, 3x3, padding 1) -> relu 'r'. */

/* Input [1, 4, 4] -> conv 'c' [2, 4, 4] -> relu 'r' (the output), batch 4 in 2 slices of 2, in
 * bytes. Parameters (padded to 16 floats; weights, gradients, 2 moments): weight 18 -> 32 floats,
 * bias 2 -> 16: (128 + 64) x 4 = 768. Inputs: 2 parities x 2 slices x 32 floats = 512. 'c' output
 * and gradient: 2 x 2 slices x 64 floats = 1024; 'r' the same 1024; targets 2 parities x 2 slices x
 * 64 floats = 1024; the second slice's own weight gradients of 'c' (private_wgrad), each rounded to
 * 64 bytes: 72 -> 128 and 8 -> 64 = 192. Sum 4544. Where the CPU's convolution kernels write a
 * blocked layout, 'c' also writes a blocked copy of its output (src/train/layout.c), one per slice of
 * 2 samples x 16 pixels x the channels padded to the block (16: 512 floats, 2048 bytes): 8640 then.
 * Activation gradients that share memory (grad_share.c) change nothing here: 'r''s gradient lives
 * from the loss to r's backward and 'c''s from r's backward to c's, so they overlap and take two
 * buffers of their own sizes (one, 'r''s, where c runs the relu fused). Accepted at a limit of the
 * sum, refused one byte below. */
START_TEST(the_footprint_counts_every_buffer_once) {
  tsr_context *ctx = start(0, 2);
  tsr_model *m = tiny_conv_relu();
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 4, o.slices = 2;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, NULL, &o) == TSR_OK, "%s", tsr_last_error());
  const struct _tsr_lstate *c = &t->ls[_tsr_model_find(m, "c")];
  ck_assert_int_eq(c->edges & TSR_EDGE_IN, 0); /* one input channel: no blocked kernel wants it */
  long long per_slice = (2 * _tsr_blk_channels(2, c->copy_blk[1]) * 16 * 4 + 63) / 64 * 64; /* zalloc's rounding */
  long long copy = c->edges & TSR_EDGE_OUT ? 2 * per_slice : 0;
  tsr_trainer_destroy(t);
  long long need = 4544 + copy;
  char want[64];
  snprintf(want, sizeof want, "needs %lld bytes", need);
  ck_assert_int_eq(tsr_memory_set_limit(need), TSR_OK);
  ck_assert_msg(create(ctx, m, 4, 2) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_memory_set_limit(need - 1), TSR_OK);
  ck_assert_int_eq(create(ctx, m, 4, 2), TSR_ERR_NOMEM);
  ck_assert_msg(strstr(tsr_last_error(), want), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_memory_set_limit(0), TSR_OK);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* The same model with samples split in 2 along H, counted for rank 0 before the spatial group exists
 * (so one process sees the count, then the refusal of 2 parts over 1 rank). Parameters 768 and the
 * private weight gradients 192 as above. Inputs: blocks [1, 2, 4], 2 x 2 x 16 floats = 256. 'c':
 * output and gradient of [2, 2, 4] blocks, 2 x 2 slices x 32 floats = 512, and its halo'd input
 * [1, 4, 4] (one row above and below) and its gradient, 2 x 2 x 32 floats = 512. 'r' 512. Targets
 * whole, 1024. The output gathered for the loss: per slice whole output and gradient (2 x 64 floats)
 * and the other block (32): 2 x 160 floats = 1280. Sum 5056. */
START_TEST(the_footprint_of_split_samples_counts_blocks_and_halos) {
  tsr_context *ctx = start(0, 2);
  tsr_model *m = tiny_conv_relu();
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 4, o.slices = 2, o.spatial[0] = 2;
  tsr_trainer *t = NULL;
  ck_assert_int_eq(tsr_memory_set_limit(5055), TSR_OK);
  ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_ERR_NOMEM);
  ck_assert_msg(strstr(tsr_last_error(), "needs 5056 bytes"), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_memory_set_limit(5056), TSR_OK);
  ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_ERR_ARG); /* past the footprint */
  ck_assert_msg(strstr(tsr_last_error(), "2 spatial parts do not divide the 1 ranks"), "%s", tsr_last_error());
  ck_assert_ptr_null(t);
  ck_assert_int_eq(tsr_memory_set_limit(0), TSR_OK);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* A 3-D model split in 2 along D, counted for rank 0 as above: input 'in' [1, 8, 4, 4] -> conv3d 'c'
 * (2 outputs, 3x3x3, padding 1, bias) -> relu 'r', batch 4 in 2 slices. Parameters (Adam): weight 54
 * -> 64 floats, bias 2 -> 16: (64 + 16) x 4 x 4 = 1280; the second slice's own weight gradients 216
 * -> 256 and 8 -> 64 bytes: 320. Inputs: blocks [1, 4, 4, 4], 2 x 2 x 128 floats = 2048. 'c': output
 * and gradient of [2, 4, 4, 4] blocks, 2 x 2 x 256 floats = 4096; no halo'd copy of its input but
 * the edge slabs ([1, 3, 4, 4] each, 96 floats a slice): both slabs, and no slab gradient towards the
 * one neighbour above since 'in' needs no gradient, 2 slices x 2 x 96 floats = 1536 (a halo'd copy
 * [1, 6, 4, 4] and its gradient would be 3072). 'r' 4096. Targets whole, 2 x 2 x 512 floats = 8192.
 * The output gathered for the loss: per slice whole output and gradient (2 x 512) and the other block
 * (256): 2 x 1280 floats = 10240. Sum 31808. Where CUDA workers exist the convolution takes the
 * halo'd copy: 33344.
 * Then split 2x2 along D and H, input [1, 16, 16, 2]: parameters 1600 as above. Inputs: blocks
 * [1, 8, 8, 2], 2 x 2 x 256 floats = 4096. 'c': output and gradient of [2, 8, 8, 2] blocks, 2 x 2 x
 * 512 floats = 8192; the edge slabs along D ([1, 3, 8, 2], 96 floats a slice: 384 bytes) and along H
 * spanning D's halos ([1, 10, 3, 2], 120 floats: 480 -> 512 bytes), both sides, no gradients: 2
 * slices x 2 x (384 + 512) = 3584 (a halo'd copy [1, 10, 10, 2] and its gradient would be 6400). 'r'
 * 8192. Targets whole, 2 x 2 x 2048 floats = 32768. The output gathered: per slice whole output and
 * gradient (2 x 2048) and the other 3 blocks (3 x 512): 2 x 5632 floats = 45056. Sum 103488; with
 * CUDA workers 106304. */
START_TEST(the_footprint_of_split_samples_counts_edge_slabs) {
  tsr_context *ctx = start(0, 2);
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "tiny3d"), TSR_OK);
  tsr_layer_spec in = tsr_layer_spec_default(TSR_LAYER_INPUT), c;
  in.channels = 1, in.depth = 8, in.height = in.width = 4;
  if (_i) in.depth = in.height = 16, in.width = 2;
  tsr_layer_kind conv3d;
  ck_assert_int_eq(tsr_layer_kind_parse("conv3d", &conv3d), TSR_OK);
  c = tsr_layer_spec_default(conv3d);
  c.out_channels = 2, c.kernel_d = c.kernel_h = c.kernel_w = 3, c.pad_d = c.pad_h = c.pad_w = 1, c.bias = 1;
  const char *from = "in";
  ck_assert_int_eq(tsr_model_add(m, "in", &in, NULL, 0), TSR_OK);
  ck_assert_msg(tsr_model_add(m, "c", &c, &from, 1) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_model_add_simple(m, "r", TSR_LAYER_RELU, "c"), TSR_OK);
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 4, o.slices = 2, o.spatial[0] = 2, o.spatial[1] = _i ? 2 : 0;
  tsr_trainer *t = NULL;
  long long need = starpu_cuda_worker_get_count() ? (_i ? 106304 : 33344) : (_i ? 103488 : 31808);
  char want[64];
  snprintf(want, sizeof want, "needs %lld bytes", need);
  ck_assert_int_eq(tsr_memory_set_limit(need - 1), TSR_OK);
  ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_ERR_NOMEM);
  ck_assert_msg(strstr(tsr_last_error(), want), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_memory_set_limit(need), TSR_OK);
  ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_ERR_ARG); /* past the footprint */
  ck_assert_ptr_null(t);
  ck_assert_int_eq(tsr_memory_set_limit(0), TSR_OK);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* Per sample 2^60 floats (2^62 bytes, which the builder accepts); a batch of 32 needs 2^69 bytes: the
 * count must not wrap around to a small number. And a buffer of 2^32 floats is past the 2^32 - 1
 * that a StarPU vector's length holds, however much memory there is. */
START_TEST(byte_counts_past_64_bits_or_a_starpu_vector_are_refused) {
  tt_cap_address_space();
  tsr_context *ctx = start(0, 2);
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "vast"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1 << 30, 1 << 30, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r", TSR_LAYER_RELU, "in"), TSR_OK);
  tsr_status s = create(ctx, m, 32, 2);
  ck_assert_msg(s == TSR_ERR_NOMEM && strstr(tsr_last_error(), "model 'vast'") &&
                    strstr(tsr_last_error(), "needs more than 2^64 bytes"),
                "%s: %s", tsr_status_name(s), tsr_last_error());
  tsr_model_destroy(m);
  ck_assert_int_eq(tsr_model_create(&m, "long"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, 65536, 65536), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r", TSR_LAYER_RELU, "in"), TSR_OK);
  ck_assert_int_eq(tsr_memory_set_limit(1ll << 50), TSR_OK);
  s = create(ctx, m, 2, 2);
  ck_assert_msg(s == TSR_ERR_SHAPE && strstr(tsr_last_error(), "4294967296 floats") &&
                    strstr(tsr_last_error(), "StarPU vector"),
                "%s: %s", tsr_status_name(s), tsr_last_error());
  ck_assert_int_eq(tsr_memory_set_limit(0), TSR_OK);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

static Suite *make_train_suite(void) {
  Suite *s = suite_create("train");
  TCase *tc = tcase_create("graph");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, whole_graph_gradient_matches_finite_differences);
  tcase_add_test(tc, small_model_overfits_a_small_batch);
  tcase_add_test(tc, deterministic_mode_reproduces_bitwise);
  tcase_add_test(tc, idle_workers_sleeping_or_polling_train_identically);
  tcase_add_test(tc, idle_workers_sleep_when_yielding);
  tcase_add_test(tc, a_single_process_schedules_with_eager_unless_told);
  tcase_add_test(tc, gpu_write_backs_are_off_unless_the_user_sets_them);
  tcase_add_test(tc, eval_counts_only_valid_samples);
  tcase_add_test(tc, gradient_groups_follow_the_layout_setting);
  tcase_add_test(tc, group_size_falls_back_to_the_environment);
  tcase_add_test(tc, the_first_step_deadline_follows_the_models_flops);
  tcase_add_test(tc, every_trainable_tensor_is_updated_by_a_step);
  tcase_add_test(tc, control_word_reports_the_value_of_each_step);
  tcase_add_test(tc, kernel_failure_is_returned_by_the_trainer);
  suite_add_tcase(s, tc);
  TCase *big = tcase_create("sizes");
  tcase_add_test(big, a_model_that_cannot_fit_is_refused_naming_its_largest_layer);
  tcase_add_test(big, the_footprint_counts_every_buffer_once);
  tcase_add_test(big, the_footprint_of_split_samples_counts_blocks_and_halos);
  tcase_add_loop_test(big, the_footprint_of_split_samples_counts_edge_slabs, 0, 2);
  tcase_add_test(big, byte_counts_past_64_bits_or_a_starpu_vector_are_refused);
  suite_add_tcase(s, big);
  return s;
}

TT_MAIN(make_train_suite)

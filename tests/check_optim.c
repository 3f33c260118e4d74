/* Optimizer updates: several steps of SGD (plain, momentum, Nesterov, weight decay, gradient
 * scaling), Adam and AdamW against a float64 implementation of PyTorch's update rules written here,
 * a cross-check against values produced once by PyTorch 1.13, and one update through StarPU. The
 * interface: registry entries and their state tensors, the trainer keeping exactly those, and an
 * SGD checkpoint in the layout written before optimizers were entries (a zero second moment, no
 * list of state tensors) that loads and continues bitwise. The sign reductions' refusals of other
 * optimizers and of spatial splits at trainer creation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>
#include <tessera.h>

#include "codelets.h"
#include "io/checkpoint_int.h"
#include "optim/optim.h"
#include "testutil.h"

/* float64 state of the reference optimizer */
struct ref {
  double *w, *m, *v;
};

/* torch.optim.SGD / Adam / AdamW step (PyTorch 1.13 single-tensor code paths, dampening 0,
 * amsgrad off), with the gradient multiplied by grad_scale first. */
static void ref_step(const struct _tsr_optim_args *a, size_t n, struct ref *r, const float *g32) {
  double lr = a->h.lr, wd = a->h.weight_decay, mu = a->h.momentum, b1 = a->h.beta1, b2 = a->h.beta2;
  for (size_t i = 0; i < n; i++) {
    double g = (double)g32[i] * a->grad_scale;
    if (a->h.kind == TSR_OPTIM_SGD) {
      g += wd * r->w[i];
      if (mu != 0) {
        r->m[i] = a->step == 1 ? g : mu * r->m[i] + g;
        g = a->h.nesterov ? g + mu * r->m[i] : r->m[i];
      }
      r->w[i] -= lr * g;
      continue;
    }
    if (a->h.kind == TSR_OPTIM_ADAMW)
      r->w[i] *= 1 - lr * wd;
    else
      g += wd * r->w[i];
    r->m[i] = b1 * r->m[i] + (1 - b1) * g;
    r->v[i] = b2 * r->v[i] + (1 - b2) * g * g;
    double bc1 = 1 - pow(b1, (double)a->step), bc2 = 1 - pow(b2, (double)a->step);
    double denom = sqrt(r->v[i]) / sqrt(bc2) + a->h.eps;
    r->w[i] -= lr / bc1 * r->m[i] / denom;
  }
}

/* Runs `steps` steps of the kernel and of the reference from the same start and compares the
 * weights and the state after every step. m starts as NaN for SGD: PyTorch's momentum buffer has
 * no prior value, so whatever it held must not leak into the first step. */
static void compare_steps(struct _tsr_optim_args a, int steps, const char *what) {
  enum { N = 257 }; /* odd, so vector loops run their scalar tails */
  float w[N], g[N], m[N], v[N];
  double rw[N], rm[N], rv[N];
  struct ref r = {rw, rm, rv};
  tt_fill_uniform(w, N, 1, -1, 1);
  for (int i = 0; i < N; i++) {
    rw[i] = w[i];
    rm[i] = rv[i] = 0;
    m[i] = a.h.kind == TSR_OPTIM_SGD ? NAN : 0.0f;
    v[i] = 0;
  }
  for (int t = 1; t <= steps; t++) {
    a.step = t;
    tt_fill_uniform(g, N, 100 + t, -1, 1);
    _tsr_optim_update_cpu(&a, N, w, g, (float *[]){m, v});
    ref_step(&a, N, &r, g);
    tt_assert_close(w, rw, N, 1e-6, 1e-5, what);
    if (a.h.kind != TSR_OPTIM_SGD || a.h.momentum != 0) tt_assert_close(m, rm, N, 1e-6, 1e-5, what);
    if (a.h.kind != TSR_OPTIM_SGD) tt_assert_close(v, rv, N, 1e-7, 1e-5, what);
  }
}

static const struct _tsr_optim_args sgd = {.h.kind = TSR_OPTIM_SGD, .h.lr = 0.1f, .grad_scale = 1};

START_TEST(sgd_plain_matches_float64) { compare_steps(sgd, 5, "sgd"); }
END_TEST

START_TEST(sgd_weight_decay_and_grad_scale_match_float64) {
  struct _tsr_optim_args a = sgd;
  a.h.weight_decay = 0.05f;
  a.grad_scale = 0.5f;
  compare_steps(a, 5, "sgd weight decay");
}
END_TEST

START_TEST(sgd_momentum_matches_float64) {
  struct _tsr_optim_args a = sgd;
  a.h.momentum = 0.9f;
  compare_steps(a, 6, "sgd momentum");
}
END_TEST

START_TEST(sgd_nesterov_weight_decay_and_grad_scale_match_float64) {
  struct _tsr_optim_args a = sgd;
  a.h.momentum = 0.8f;
  a.h.nesterov = 1;
  a.h.weight_decay = 0.01f;
  a.grad_scale = 0.5f;
  compare_steps(a, 6, "sgd nesterov");
}
END_TEST

static const struct _tsr_optim_args adam = {.h.kind = TSR_OPTIM_ADAM, .h.lr = 1e-2f, .h.beta1 = 0.9f,
                                            .h.beta2 = 0.999f, .h.eps = 1e-8f, .grad_scale = 1};

START_TEST(adam_matches_float64) { compare_steps(adam, 8, "adam"); }
END_TEST

START_TEST(adam_l2_weight_decay_and_grad_scale_match_float64) {
  struct _tsr_optim_args a = adam;
  a.h.weight_decay = 0.1f;
  a.grad_scale = 0.25f;
  a.h.beta2 = 0.99f;
  compare_steps(a, 8, "adam weight decay");
}
END_TEST

START_TEST(adamw_decoupled_weight_decay_matches_float64) {
  struct _tsr_optim_args a = adam;
  a.h.kind = TSR_OPTIM_ADAMW;
  a.h.weight_decay = 0.1f;
  compare_steps(a, 8, "adamw");
}
END_TEST

/* Adam's L2 and AdamW's decoupled decay must differ: guards against one path serving both */
START_TEST(adam_and_adamw_weight_decay_differ) {
  float w1[4] = {1, -2, 3, 0.5f}, w2[4], g[4] = {0.1f, 0.1f, -0.1f, 0.2f}, m1[4] = {0}, v1[4] = {0}, m2[4] = {0},
        v2[4] = {0};
  memcpy(w2, w1, sizeof(w1));
  struct _tsr_optim_args a = adam;
  a.h.weight_decay = 0.5f;
  a.step = 1;
  _tsr_optim_update_cpu(&a, 4, w1, g, (float *[]){m1, v1});
  a.h.kind = TSR_OPTIM_ADAMW;
  _tsr_optim_update_cpu(&a, 4, w2, g, (float *[]){m2, v2});
  ck_assert_msg(fabsf(w1[0] - w2[0]) > 1e-4f, "Adam %g and AdamW %g", w1[0], w2[0]);
}
END_TEST

/* Expected weights after three steps, produced once with PyTorch 1.13 on float32 parameters by
 *   /usr/bin/python3 gen.py
 * where gen.py builds p = Parameter(tensor(W0)), the optimizer below, and for each row G of GRADS
 * sets p.grad = tensor(G) and calls opt.step():
 *   SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
 *   Adam(lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
 *   AdamW(lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1) */
static const float W0[4] = {0.5f, -1.25f, 2.0f, 0.0f};
static const float GRADS[3][4] = {{0.1f, -0.2f, 0.3f, -0.4f}, {0.05f, 0.5f, -0.25f, 1.0f}, {-0.3f, 0.0f, 0.7f, 0.2f}};
static const double TORCH_SGD_NESTEROV[4] = {5.051634312e-01, -1.306701422e+00, 1.815728307e+00, -1.714906245e-01};
static const double TORCH_ADAM[4] = {4.811518788e-01, -1.240637898e+00, 1.976289630e+00, 1.047810074e-03};
static const double TORCH_ADAMW[4] = {4.826563895e-01, -1.244104743e+00, 1.977938056e+00, 1.039623749e-03};

static void torch_case(struct _tsr_optim_args a, const double *expect, const char *what) {
  float w[4], m[4] = {0}, v[4] = {0};
  memcpy(w, W0, sizeof(w));
  for (int t = 1; t <= 3; t++) {
    a.step = t;
    _tsr_optim_update_cpu(&a, 4, w, GRADS[t - 1], (float *[]){m, v});
  }
  tt_assert_close(w, expect, 4, 1e-6, 1e-6, what);
}

START_TEST(three_steps_match_values_from_pytorch) {
  struct _tsr_optim_args s = {.h.kind = TSR_OPTIM_SGD, .h.lr = 0.1f, .h.momentum = 0.9f, .h.nesterov = 1,
                              .h.weight_decay = 0.01f, .grad_scale = 1};
  torch_case(s, TORCH_SGD_NESTEROV, "torch SGD nesterov");
  struct _tsr_optim_args a = {.h.kind = TSR_OPTIM_ADAM, .h.lr = 0.01f, .h.beta1 = 0.9f, .h.beta2 = 0.99f,
                              .h.eps = 1e-8f, .h.weight_decay = 0.1f, .grad_scale = 1};
  torch_case(a, TORCH_ADAM, "torch Adam");
  a.h.kind = TSR_OPTIM_ADAMW;
  torch_case(a, TORCH_ADAMW, "torch AdamW");
}
END_TEST

static void starpu_up(void) { tt_starpu_start(2); }
static void starpu_down(void) { tt_starpu_stop(); }

/* Two dependent Adam steps as tasks: the second must see the first's weights and moments. */
START_TEST(adam_update_runs_through_starpu) {
  enum { N = 1000 };
  static float w[N], g[N], m[N], v[N], w0[N], m0[N], v0[N];
  tt_fill_uniform(w, N, 7, -1, 1);
  tt_fill_uniform(g, N, 8, -1, 1);
  memcpy(w0, w, sizeof(w));
  struct _tsr_optim_args a = adam;
  a.h.weight_decay = 0.01f;
  for (int t = 1; t <= 2; t++) {
    a.step = t;
    _tsr_optim_update_cpu(&a, N, w0, g, (float *[]){m0, v0});
  }
  starpu_data_handle_t hw = _tsr_register_floats(w, N), hg = _tsr_register_floats(g, N),
                       hm = _tsr_register_floats(m, N), hv = _tsr_register_floats(v, N);
  for (int t = 1; t <= 2; t++) {
    a.step = t; /* the task keeps its own copy of the arguments */
    ck_assert_int_eq(_tsr_optim_submit(&a, hw, hg, (starpu_data_handle_t[]){hm, hv}, NULL, "adam"), 0);
  }
  starpu_task_wait_for_all();
  starpu_data_unregister(hw);
  starpu_data_unregister(hg);
  starpu_data_unregister(hm);
  starpu_data_unregister(hv);
  ck_assert_mem_eq(w, w0, sizeof(w));
  ck_assert_mem_eq(m, m0, sizeof(m));
  ck_assert_mem_eq(v, v0, sizeof(v));
}
END_TEST

/* ---- the interface ---- */

/* Lion (PyTorch reference semantics): found by name, its defaults and model-file keys from its entry,
 * 6 steps against a float64 implementation of the rule written here, with zero gradients (sign 0 at
 * the first step, where the momentum is 0 too) and a gradient scale; after every step each weight
 * moved by 0 or lr from its decayed value (within float32 rounding of the weight); the direction and
 * apply halves of the sign reductions give the fused kernel's weights and momentum bitwise. */
START_TEST(lion_matches_float64_and_its_halves_match_it_bitwise) {
  tsr_optim_kind kind;
  ck_assert_int_eq(tsr_optim_kind_parse("lion", &kind), TSR_OK);
  ck_assert_int_eq(kind, TSR_OPTIM_LION);
  ck_assert_str_eq(tsr_optim_kind_name(kind), "lion");
  struct _tsr_optim_args a = {.h = tsr_optim_spec_default(kind), .grad_scale = 0.5f};
  ck_assert(a.h.lr == 1e-4f && a.h.beta1 == 0.9f && a.h.beta2 == 0.99f && a.h.weight_decay == 0.0f);
  ck_assert(a.h.extra[TSR_HYPER_SYNC_EVERY] == 0.0f);
  a.h.lr = 0.01f, a.h.weight_decay = 0.1f;
  enum { N = 101 };
  float w[N], g[N], m[N] = {0}, w2[N], m2[N] = {0}, prev[N];
  double rw[N], rm[N] = {0};
  tt_fill_uniform(w, N, 3, -1, 1);
  memcpy(w2, w, sizeof w);
  for (int i = 0; i < N; i++) rw[i] = w[i];
  int zeros = 0;
  for (int t = 1; t <= 6; t++) {
    a.step = t;
    tt_fill_uniform(g, N, 40 + t, -1, 1);
    for (int i = 0; i < N; i += 7) g[i] = 0; /* the same elements every step: sign 0 at step 1 */
    memcpy(prev, w, sizeof w);
    _tsr_optim_update_cpu(&a, N, w, g, (float *[]){m});
    const struct _tsr_optim_ops *ops = _tsr_optim_ops_of(kind);
    ops->direction(&a, N, g, (float *[]){m2}); /* g becomes the direction */
    ops->apply(&a, N, w2, g);
    ck_assert_msg(memcmp(w, w2, sizeof w) == 0 && memcmp(m, m2, sizeof m) == 0, "halves differ at step %d", t);
    tt_fill_uniform(g, N, 40 + t, -1, 1); /* the gradient again (the halves overwrote it) */
    for (int i = 0; i < N; i += 7) g[i] = 0;
    for (int i = 0; i < N; i++) {
      double gi = 0.5 * g[i], c = 0.9 * rm[i] + 0.1 * gi, s = (c > 0) - (c < 0);
      zeros += s == 0;
      rw[i] = rw[i] * (1 - 0.01 * 0.1) - 0.01 * s;
      rm[i] = 0.99 * rm[i] + 0.01 * gi;
      double moved = fabs((double)w[i] - (double)prev[i] * (1 - 0.01f * 0.1f)), tol = 4e-7;
      ck_assert_msg(moved <= tol || fabs(moved - 0.01) <= tol, "step %d, weight %d moved by %g", t, i, moved);
    }
    tt_assert_close(w, rw, N, 1e-6, 1e-5, "lion weights");
    tt_assert_close(m, rm, N, 1e-7, 1e-5, "lion momentum");
  }
  ck_assert_int_eq(zeros, 6 * ((N + 6) / 7)); /* zero gradient and momentum: sign 0, decay alone */
}
END_TEST

/* The model file's optimizer section selects Lion and sets its keys; an unknown key is refused. */
START_TEST(lion_takes_its_model_file_keys) {
  const char *path = tt_path_in(tt_tmpdir(), "lion.json");
  const char *fmt = "{\"name\": \"m\", \"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [1, 4, 4]},"
                    " {\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 1, \"kernel\": 3, \"padding\": 1}],"
                    " \"loss\": {\"type\": \"mse\"}, \"optimizer\": {\"type\": \"lion\", \"lr\": 0.0003,"
                    " \"betas\": [0.95, 0.98], \"weight_decay\": 0.5, \"%s\": 4}}";
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, fmt, "momentum_sync_every");
  fclose(f);
  tsr_model *m = NULL;
  tsr_optim_spec o;
  ck_assert_msg(tsr_model_load_json(&m, &o, path) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(o.kind, TSR_OPTIM_LION);
  ck_assert(o.lr == 0.0003f && o.beta1 == 0.95f && o.beta2 == 0.98f && o.weight_decay == 0.5f);
  ck_assert(o.extra[TSR_HYPER_SYNC_EVERY] == 4.0f);
  tsr_model_destroy(m);
  f = fopen(path, "w");
  fprintf(f, fmt, "eps");
  fclose(f);
  m = NULL;
  ck_assert_int_ne(tsr_model_load_json(&m, &o, path), TSR_OK);
  ck_assert_msg(strstr(tsr_last_error(), "eps"), "%s", tsr_last_error());
  /* momentum_sync_layers: a string or an array of strings, joined by commas; a number is refused */
  const char *layers[][2] = {{"[\"c\", \"d*\"]", "c,d*"}, {"\"c.weight\"", "c.weight"}, {"3", NULL}, {"[]", NULL}};
  for (int i = 0; i < 4; i++) {
    f = fopen(path, "w");
    fprintf(f, "{\"name\": \"m\", \"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [1, 4, 4]}],"
               " \"optimizer\": {\"type\": \"lion\", \"momentum_sync_every\": 2, \"momentum_sync_layers\": %s}}",
            layers[i][0]);
    fclose(f);
    m = NULL;
    tsr_status st = tsr_model_load_json(&m, &o, path);
    if (layers[i][1]) {
      ck_assert_msg(st == TSR_OK, "%s: %s", layers[i][0], tsr_last_error());
      ck_assert_str_eq(o.momentum_sync_layers, layers[i][1]);
      tsr_model_destroy(m);
    } else {
      ck_assert_int_ne(st, TSR_OK);
      ck_assert_msg(strstr(tsr_last_error(), "momentum_sync_layers"), "%s", tsr_last_error());
    }
  }
}
END_TEST

START_TEST(registry_entries_name_their_kinds_and_state_tensors) {
  static const int nstate[TSR_OPTIM_KIND_COUNT] = {1, 2, 2, 1};
  for (int k = 0; k < TSR_OPTIM_KIND_COUNT; k++) {
    const struct _tsr_optim_ops *e = _tsr_optim_ops_of(k);
    ck_assert_ptr_nonnull(e);
    tsr_optim_kind got;
    ck_assert_int_eq(tsr_optim_kind_parse(e->name, &got), TSR_OK);
    ck_assert_int_eq(got, k);
    ck_assert_int_eq(e->nstate, nstate[k]);
    ck_assert_str_eq(e->state[0], "moment0"); /* the checkpoint groups of before */
    if (e->nstate > 1) ck_assert_str_eq(e->state[1], "moment1");
  }
  char names[256]; /* the built-in ones first; entries past the public enum follow */
  ck_assert_msg(strncmp(_tsr_optim_names(names, sizeof names), "sgd, adam, adamw, lion", 22) == 0, "%s", names);
  tsr_optim_kind got;
  ck_assert_int_eq(tsr_optim_kind_parse("rmsprop", &got), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "expected sgd, adam, adamw, lion"), "%s", tsr_last_error());
}
END_TEST


static tsr_trainer *sgd_trainer(tsr_context *ctx, tsr_model *m) {
  tsr_optim_spec o = tsr_optim_spec_default(TSR_OPTIM_SGD);
  o.lr = 0.05f, o.nesterov = 1;
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = 4, to.slices = 2, to.seed = 7;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &o, &to) == TSR_OK, "%s", tsr_last_error());
  return t;
}


/* ck (read from an SGD checkpoint) as files were before: moment0 and a zero moment1, no list. */
static void write_old_layout(struct _tsr_ck *ck, const char *path) {
  ck->nstate = 2;
  strcpy(ck->state[1], "moment1");
  for (int i = 0; i < ck->n; i++)
    if (ck->t[i].trainable) ck->t[i].state[1] = calloc((size_t)tsr_shape_numel(&ck->t[i].shape), sizeof(float));
  ck->meta.optim.extra[2] = 0.5f; /* extra hyperparameters travel too */
  ck->checksum = _tsr_ck_checksum(ck);
  ck_assert_msg(_tsr_ck_write(ck, path) == TSR_OK, "%s", tsr_last_error());
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
  ck_assert(f >= 0 && g >= 0 && H5Adelete(g, "state_tensors") >= 0);
  H5Gclose(g), H5Fclose(f);
  ck_assert_int_eq(_tsr_ck_write_sum(path), TSR_OK);
}

START_TEST(trainer_keeps_the_entrys_state_and_old_sgd_checkpoints_load) {
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 2, co.use_mpi = 0, co.deterministic = 1, co.verbose = 0;
  tsr_context *ctx;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_model *m = tt_small_model("opt");
  tsr_trainer *a = sgd_trainer(ctx, m), *b = sgd_trainer(ctx, m);
  double la[6], lb[3];
  tt_train_steps(a, 3, la);
  float buf[27];
  int w = tsr_trainer_tensor_find(a, "c1.weight");
  ck_assert_int_eq(tsr_trainer_moment_get(a, w, 0, buf), TSR_OK);
  ck_assert_int_eq(tsr_trainer_moment_get(a, w, 1, buf), TSR_ERR_ARG); /* SGD keeps one state tensor */
  char path[512], old[512];
  snprintf(path, sizeof path, "%s/sgd.h5", tt_tmpdir());
  snprintf(old, sizeof old, "%s/sgd-old.h5", tt_tmpdir());
  tsr_checkpoint_meta meta = {.step = 3, .epoch = 1, .nranks = 1, .batch = 4};
  ck_assert_msg(tsr_checkpoint_save(a, path, &meta) == TSR_OK, "%s", tsr_last_error());
  struct _tsr_ck ck;
  ck_assert_msg(_tsr_ck_read(&ck, path) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(ck.nstate, 1);
  write_old_layout(&ck, old);
  _tsr_ck_free(&ck);
  ck_assert_msg(_tsr_ck_read(&ck, old) == TSR_OK, "%s", tsr_last_error());
  ck_assert(ck.nstate == 2 && ck.meta.optim.extra[2] == 0.5f);
  _tsr_ck_free(&ck);
  ck_assert_msg(tsr_checkpoint_load(b, old, NULL) == TSR_OK, "%s", tsr_last_error());
  tt_train_steps(a, 3, la + 3);
  tt_train_steps(b, 3, lb);
  for (int i = 0; i < 3; i++)
    ck_assert_msg(la[3 + i] == lb[i], "step %d: %.17g, resumed %.17g", 4 + i, la[3 + i], lb[i]);
  tsr_trainer_destroy(a);
  tsr_trainer_destroy(b);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* The sign reductions are refused at trainer creation, naming both options, with an optimizer that
 * has no direction and with spatial parallelism (a rank's gradient is its block's share there); the
 * options' check runs at one rank too. Without a split, Lion with sign1 is accepted, and f32 with a
 * split meets the spatial set-up's own refusal, not this one. */
static tsr_status sign_trainer(tsr_context *ctx, tsr_model *m, tsr_optim_kind kind, const char *reduce,
                               const int *spatial) {
  tsr_optim_spec o = tsr_optim_spec_default(kind);
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = 4, to.slices = 1;
  ck_assert_int_eq(tsr_reduce_precision_parse(reduce, &to.grad_reduce), TSR_OK);
  for (int a = 0; a < TSR_SPATIAL_MAX_AXES; a++) to.spatial[a] = spatial[a];
  tsr_trainer *t = NULL;
  tsr_status st = tsr_trainer_create(&t, ctx, m, &o, &to);
  if (t) tsr_trainer_destroy(t);
  return st;
}

static void expect_words(const char *what, const char *const *words) {
  for (; *words; words++)
    ck_assert_msg(strstr(tsr_last_error(), *words), "%s: '%s' does not name '%s'", what, tsr_last_error(), *words);
}

START_TEST(sign_reductions_refuse_other_optimizers_and_spatial_splits) {
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 1, co.use_mpi = 0, co.verbose = 0;
  tsr_context *ctx;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_model *m = tt_small_model("signs");
  ck_assert_int_eq(sign_trainer(ctx, m, TSR_OPTIM_ADAM, "sign1", (int[]){0, 0, 0}), TSR_ERR_ARG);
  expect_words("adam with sign1", (const char *[]){"'sign1'", "optimizer adam has none", NULL});
  ck_assert_int_eq(sign_trainer(ctx, m, TSR_OPTIM_LION, "sign1", (int[]){2, 0, 0}), TSR_ERR_ARG);
  expect_words("sign1 with spatial 2", (const char *[]){"'sign1'", "--grad-reduce", "spatial 2,", "--spatial", NULL});
  ck_assert_int_eq(sign_trainer(ctx, m, TSR_OPTIM_LION, "signp", (int[]){1, 2, 0}), TSR_ERR_ARG);
  expect_words("signp with spatial 1x2", (const char *[]){"'signp'", "spatial 1x2,", NULL});
  ck_assert_int_eq(sign_trainer(ctx, m, TSR_OPTIM_LION, "signp_mean", (int[]){2, 2, 0}), TSR_ERR_ARG);
  expect_words("signp_mean with spatial 2x2", (const char *[]){"'signp_mean'", "spatial 2x2,", NULL});
  ck_assert_msg(sign_trainer(ctx, m, TSR_OPTIM_LION, "sign1", (int[]){1, 1, 0}) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(sign_trainer(ctx, m, TSR_OPTIM_LION, "f32", (int[]){2, 0, 0}), TSR_ERR_ARG);
  ck_assert_msg(!strstr(tsr_last_error(), "gradient reduction"), "f32 with a split: %s", tsr_last_error());
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

static Suite *make_optim_suite(void) {
  Suite *s = suite_create("optim");
  TCase *raw = tcase_create("raw");
  tcase_add_test(raw, sgd_plain_matches_float64);
  tcase_add_test(raw, sgd_weight_decay_and_grad_scale_match_float64);
  tcase_add_test(raw, sgd_momentum_matches_float64);
  tcase_add_test(raw, sgd_nesterov_weight_decay_and_grad_scale_match_float64);
  tcase_add_test(raw, adam_matches_float64);
  tcase_add_test(raw, adam_l2_weight_decay_and_grad_scale_match_float64);
  tcase_add_test(raw, adamw_decoupled_weight_decay_matches_float64);
  tcase_add_test(raw, adam_and_adamw_weight_decay_differ);
  tcase_add_test(raw, three_steps_match_values_from_pytorch);
  suite_add_tcase(s, raw);
  TCase *sp = tcase_create("starpu");
  tcase_add_checked_fixture(sp, starpu_up, starpu_down);
  tcase_set_timeout(sp, 20);
  tcase_add_test(sp, adam_update_runs_through_starpu);
  suite_add_tcase(s, sp);
  TCase *itf = tcase_create("interface");
  tcase_set_timeout(itf, 60);
  tcase_add_test(itf, registry_entries_name_their_kinds_and_state_tensors);
  tcase_add_test(itf, lion_matches_float64_and_its_halves_match_it_bitwise);
  tcase_add_test(itf, lion_takes_its_model_file_keys);
  tcase_add_test(itf, trainer_keeps_the_entrys_state_and_old_sgd_checkpoints_load);
  tcase_add_test(itf, sign_reductions_refuse_other_optimizers_and_spatial_splits);
  suite_add_tcase(s, itf);
  return s;
}

TT_MAIN(make_optim_suite)

/* Large-batch optimizers: LARC around SGD, Adam and AdamW (clip and scale modes) and LAMB, several
 * steps each against a float64 implementation written here from apex's LARC and the LAMB paper,
 * including zero gradients and an all-zero tensor (trust ratio left out); LARC refused around
 * LAMB; the model-file keys; LARC's settings in checkpoints; a trainer with SGD+LARC and one with
 * LAMB resumed from a checkpoint continue bitwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "io/checkpoint_int.h"
#include "optim/optim.h"
#include "testutil.h"

enum { N = 203 }; /* odd: vector loops run their scalar tails */

struct ref {
  double w[N], m[N], v[N];
};

/* PyTorch's SGD (dampening 0) and Adam (L2) on gradient g with decay wd, for the LARC reference. */
static void ref_inner(const struct _tsr_optim_args *a, struct ref *r, const double *g, double wd) {
  double lr = a->h.lr, mu = a->h.momentum, b1 = a->h.beta1, b2 = a->h.beta2, t = (double)a->step;
  for (int i = 0; i < N; i++) {
    double gi = g[i] + wd * r->w[i];
    if (a->h.kind == TSR_OPTIM_SGD) {
      r->m[i] = a->step == 1 ? gi : mu * r->m[i] + gi;
      r->w[i] -= lr * r->m[i];
      continue;
    }
    r->m[i] = b1 * r->m[i] + (1 - b1) * gi;
    r->v[i] = b2 * r->v[i] + (1 - b2) * gi * gi;
    r->w[i] -= lr / (1 - pow(b1, t)) * r->m[i] / (sqrt(r->v[i]) / sqrt(1 - pow(b2, t)) + a->h.eps);
  }
}

/* apex's LARC.step: g += wd w; g *= adaptive_lr when both norms are nonzero; the inner optimizer
 * runs with weight decay 0 (AdamW therefore as Adam). */
static void ref_larc(const struct _tsr_optim_args *a, struct ref *r, const float *g32) {
  double g[N], pn = 0, gn = 0, wd = a->h.weight_decay;
  for (int i = 0; i < N; i++) {
    g[i] = (double)g32[i] * a->grad_scale;
    pn += r->w[i] * r->w[i], gn += g[i] * g[i];
  }
  pn = sqrt(pn), gn = sqrt(gn);
  if (pn != 0 && gn != 0) {
    double f = a->h.larc_eta * pn / (gn + pn * wd + 1e-8);
    if (a->h.larc_clip) f = fmin(f / a->h.lr, 1.0);
    for (int i = 0; i < N; i++) g[i] = (g[i] + wd * r->w[i]) * f;
  }
  ref_inner(a, r, g, 0.0);
}

/* LAMB, Algorithm 2 of You et al. with bias correction, phi = identity, trust 1 for a zero norm. */
static void ref_lamb(const struct _tsr_optim_args *a, struct ref *r, const float *g32) {
  double b1 = a->h.beta1, b2 = a->h.beta2, t = (double)a->step, rv[N], pn = 0, rn = 0;
  for (int i = 0; i < N; i++) {
    double g = (double)g32[i] * a->grad_scale;
    r->m[i] = b1 * r->m[i] + (1 - b1) * g;
    r->v[i] = b2 * r->v[i] + (1 - b2) * g * g;
    rv[i] = r->m[i] / (1 - pow(b1, t)) / (sqrt(r->v[i] / (1 - pow(b2, t))) + a->h.eps) + a->h.weight_decay * r->w[i];
    pn += r->w[i] * r->w[i], rn += rv[i] * rv[i];
  }
  double trust = pn > 0 && rn > 0 ? sqrt(pn) / sqrt(rn) : 1.0;
  for (int i = 0; i < N; i++) r->w[i] -= a->h.lr * trust * rv[i];
}

/* `steps` steps of the kernel and the reference; the gradient of step zero_step is all zero, and
 * with zero_w the weights start at zero (both norms of LARC / LAMB's |w| are then 0). */
static void compare(struct _tsr_optim_args a, int steps, int zero_step, int zero_w, const char *what) {
  float w[N], g[N], m[N] = {0}, v[N] = {0};
  struct ref r;
  memset(&r, 0, sizeof r);
  tt_fill_uniform(w, N, 3, -1, 1);
  for (int i = 0; i < N; i++) r.w[i] = w[i] = zero_w ? 0.0f : w[i];
  int lamb = strcmp(_tsr_optim_ops_of(a.h.kind)->name, "lamb") == 0;
  for (int t = 1; t <= steps; t++) {
    a.step = t;
    tt_fill_uniform(g, N, 50 + t, -0.5f, 0.5f);
    if (t == zero_step) memset(g, 0, sizeof g);
    _tsr_optim_update_cpu(&a, N, w, g, (float *[]){m, v});
    (lamb ? ref_lamb : ref_larc)(&a, &r, g);
    char msg[96];
    snprintf(msg, sizeof msg, "%s, step %d", what, t);
    tt_assert_close(w, r.w, N, 1e-6, 1e-5, msg);
    tt_assert_close(m, r.m, N, 1e-6, 1e-5, msg);
  }
}

static struct _tsr_optim_args spec(const char *name) {
  tsr_optim_kind k;
  ck_assert_int_eq(tsr_optim_kind_parse(name, &k), TSR_OK);
  struct _tsr_optim_args a = {.h = tsr_optim_spec_default(k), .grad_scale = 1};
  a.h.larc = strcmp(name, "lamb") != 0;
  return a;
}

START_TEST(larc_sgd_clip_matches_float64) {
  struct _tsr_optim_args a = spec("sgd");
  a.h.lr = 0.1f, a.h.weight_decay = 5e-4f, a.h.larc_eta = 0.02f;
  compare(a, 6, 3, 0, "sgd+larc clip");
  a.h.lr = 1e-4f; /* clip: min(trust / lr, 1) is now 1 for most steps */
  compare(a, 4, 0, 0, "sgd+larc clip, small lr");
}
END_TEST

START_TEST(larc_scale_mode_and_grad_scale_match_float64) {
  struct _tsr_optim_args a = spec("sgd");
  a.h.larc_clip = 0, a.h.weight_decay = 1e-3f, a.grad_scale = 0.25f, a.h.larc_eta = 0.05f;
  compare(a, 5, 2, 0, "sgd+larc scale");
}
END_TEST

START_TEST(larc_adam_and_adamw_match_float64) {
  struct _tsr_optim_args a = spec("adam");
  a.h.lr = 1e-2f, a.h.weight_decay = 1e-2f;
  compare(a, 6, 4, 0, "adam+larc");
  a = spec("adamw");
  a.h.lr = 1e-2f, a.h.larc_clip = 0;
  compare(a, 6, 2, 0, "adamw+larc (decay as a gradient term, as apex)");
}
END_TEST

START_TEST(larc_zero_weights_leave_the_gradient_and_skip_decay) {
  struct _tsr_optim_args a = spec("sgd");
  a.h.weight_decay = 0.1f;
  compare(a, 3, 0, 1, "sgd+larc, zero weights");
}
END_TEST

START_TEST(lamb_matches_float64) {
  struct _tsr_optim_args a = spec("lamb");
  a.h.lr = 1e-2f;
  compare(a, 8, 3, 0, "lamb");
  a.h.weight_decay = 0.0f, a.grad_scale = 2.0f;
  compare(a, 4, 0, 1, "lamb, zero weights, no decay, grad_scale 2");
}
END_TEST

START_TEST(larc_is_refused_around_lamb_and_bad_eta_named) {
  struct _tsr_optim_args a = spec("lamb");
  a.h.larc = 1;
  ck_assert_int_eq(_tsr_optim_check(&a.h), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "'lamb'") && strstr(tsr_last_error(), "LARC"), "%s", tsr_last_error());
  a = spec("sgd");
  a.h.larc_eta = 0;
  ck_assert_int_eq(_tsr_optim_check(&a.h), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "larc_eta"), "%s", tsr_last_error());
  a.h.larc = 0;
  ck_assert_int_eq(_tsr_optim_check(&a.h), TSR_OK);
}
END_TEST

static tsr_status load_model(const char *optimizer, tsr_model **m, tsr_optim_spec *o) {
  char *path = tt_path_in(tt_tmpdir(), "model.json");
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "{\"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [1, 6, 6]},"
             " {\"name\": \"c1\", \"type\": \"conv2d\", \"input\": \"in\", \"out_channels\": 2, \"kernel\": 3, \"padding\": 1},"
             " {\"name\": \"out\", \"type\": \"conv2d\", \"input\": \"c1\", \"out_channels\": 1, \"kernel\": 3, \"padding\": 1}],"
             " \"output\": \"out\", \"loss\": {\"type\": \"mse\"}, \"optimizer\": %s}",
          optimizer);
  fclose(f);
  tsr_status s = tsr_model_load_json(m, o, path);
  return s;
}

START_TEST(model_files_set_larc_and_lamb) {
  tsr_model *m;
  tsr_optim_spec o;
  ck_assert_msg(load_model("{\"type\": \"sgd\", \"larc\": true, \"larc_eta\": 0.01, \"larc_clip\": false}", &m, &o) ==
                    TSR_OK, "%s", tsr_last_error());
  ck_assert(o.larc == 1 && o.larc_eta == 0.01f && o.larc_clip == 0);
  tsr_model_destroy(m);
  ck_assert_int_eq(load_model("{\"type\": \"adamw\"}", &m, &o), TSR_OK);
  ck_assert(o.larc == 0 && o.larc_eta == 0.02f && o.larc_clip == 1); /* apex's defaults, off */
  tsr_model_destroy(m);
  ck_assert_int_eq(load_model("{\"type\": \"lamb\", \"betas\": [0.8, 0.99]}", &m, &o), TSR_OK);
  ck_assert_str_eq(tsr_optim_kind_name(o.kind), "lamb");
  ck_assert(o.beta1 == 0.8f && o.eps == 1e-6f && o.weight_decay == 0.01f && o.larc == 0);
  tsr_model_destroy(m);
  ck_assert_int_eq(load_model("{\"type\": \"lamb\", \"larc\": true}", &m, &o), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(tsr_last_error(), "larc") && strstr(tsr_last_error(), "lamb"), "%s", tsr_last_error());
  ck_assert_int_eq(load_model("{\"type\": \"sgd\", \"larc_eta\": -1}", &m, &o), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(tsr_last_error(), "larc_eta"), "%s", tsr_last_error());
}
END_TEST



static tsr_trainer *trainer(tsr_context *ctx, tsr_model *m, const tsr_optim_spec *o) {
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = 4, to.slices = 2, to.seed = 7;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, o, &to) == TSR_OK, "%s", tsr_last_error());
  return t;
}


/* 3 steps, a checkpoint, 3 more; a second trainer loads the checkpoint and must give the same 3. */
static void resume_case(tsr_context *ctx, tsr_model *m, const tsr_optim_spec *o, const char *name) {
  tsr_trainer *a = trainer(ctx, m, o), *b = trainer(ctx, m, o);
  double la[6], lb[3];
  tt_train_steps(a, 3, la);
  char *path = tt_path_in(tt_tmpdir(), name);
  tsr_checkpoint_meta meta = {.step = 3, .epoch = 1, .nranks = 1, .batch = 4};
  ck_assert_msg(tsr_checkpoint_save(a, path, &meta) == TSR_OK, "%s", tsr_last_error());
  struct _tsr_ck ck;
  ck_assert_msg(_tsr_ck_read(&ck, path) == TSR_OK, "%s", tsr_last_error());
  ck_assert(ck.meta.optim.larc == o->larc && ck.meta.optim.larc_clip == o->larc_clip &&
            ck.meta.optim.larc_eta == o->larc_eta && ck.meta.optim.kind == o->kind);
  _tsr_ck_free(&ck);
  ck_assert_msg(tsr_checkpoint_load(b, path, NULL) == TSR_OK, "%s", tsr_last_error());
  tt_train_steps(a, 3, la + 3);
  tt_train_steps(b, 3, lb);
  for (int i = 0; i < 3; i++)
    ck_assert_msg(la[3 + i] == lb[i], "%s step %d: %.17g, resumed %.17g", name, 4 + i, la[3 + i], lb[i]);
  ck_assert_msg(la[5] < la[0], "%s: loss %g -> %g did not fall", name, la[0], la[5]);
  tsr_trainer_destroy(a);
  tsr_trainer_destroy(b);
}

START_TEST(trainers_with_larc_and_lamb_resume_bitwise) {
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 2, co.use_mpi = 0, co.deterministic = 1, co.verbose = 0;
  tsr_context *ctx;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_model *m = tt_small_model("lb");
  tsr_optim_spec o = tsr_optim_spec_default(TSR_OPTIM_SGD);
  o.lr = 0.5f, o.larc = 1, o.larc_eta = 0.05f, o.weight_decay = 1e-4f;
  resume_case(ctx, m, &o, "sgd-larc.h5");
  ck_assert_int_eq(tsr_optim_kind_parse("lamb", &o.kind), TSR_OK);
  o = tsr_optim_spec_default(o.kind);
  o.lr = 0.01f;
  resume_case(ctx, m, &o, "lamb.h5");
  o.larc = 1;
  tsr_trainer *t;
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = 4;
  ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, &o, &to), TSR_ERR_ARG);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("large_batch");
  TCase *k = tcase_create("kernels");
  tcase_add_test(k, larc_sgd_clip_matches_float64);
  tcase_add_test(k, larc_scale_mode_and_grad_scale_match_float64);
  tcase_add_test(k, larc_adam_and_adamw_match_float64);
  tcase_add_test(k, larc_zero_weights_leave_the_gradient_and_skip_decay);
  tcase_add_test(k, lamb_matches_float64);
  tcase_add_test(k, larc_is_refused_around_lamb_and_bad_eta_named);
  tcase_add_test(k, model_files_set_larc_and_lamb);
  suite_add_tcase(s, k);
  TCase *t = tcase_create("trainer");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, trainers_with_larc_and_lamb_resume_bitwise);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_suite)

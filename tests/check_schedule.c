/* Learning-rate schedules: each kind's rates against a float64 reference written here from
 * torch.optim.lr_scheduler's step-by-step (chainable) code, values produced once by PyTorch 1.13,
 * warm-up composed with a schedule, the linear scaling rule bitwise equal to the float formula
 * tessera-train used before schedules existed, reduce-on-plateau on a hand-made metric sequence,
 * errors that name the field, model files, and a checkpoint taken mid-schedule that continues
 * bitwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>
#include <tessera.h>

#include "io/checkpoint_int.h"
#include "testutil.h"

static tsr_schedule make(const char *text, float base) {
  tsr_schedule_spec spec;
  tsr_schedule s;
  ck_assert_msg(tsr_schedule_spec_parse(&spec, text) == TSR_OK, "%s: %s", text, tsr_last_error());
  ck_assert_msg(tsr_schedule_init(&s, &spec, base) == TSR_OK, "%s: %s", text, tsr_last_error());
  return s;
}

/* Rates of clock times 0..n-1 (steps for per_step schedules, else epochs, with step = epoch). */
static void rates(const tsr_schedule *s, int n, float *out) {
  for (int t = 0; t < n; t++) out[t] = tsr_schedule_lr(s, t, t);
}

enum { N = 40 };

/* tessera-train's rule before schedules: tools/tessera-train.c scaled_lr(), verbatim. */
static float old_scaled_lr(float base, int ranks, int64_t step, int64_t warmup) {
  if (step >= warmup) return base * ranks;
  return base * (1.0f + (ranks - 1) * (float)step / (float)warmup);
}

START_TEST(linear_scaling_with_warmup_is_bitwise_the_old_rule) {
  const float bases[] = {1e-3f, 0.1f, 3e-4f, 0.0123f, 1.0f};
  const int ranks[] = {1, 2, 3, 4, 7, 16};
  const int64_t warmups[] = {0, 1, 3, 7, 100};
  for (size_t b = 0; b < sizeof bases / sizeof *bases; b++)
    for (size_t r = 0; r < sizeof ranks / sizeof *ranks; r++)
      for (size_t w = 0; w < sizeof warmups / sizeof *warmups; w++) {
        tsr_schedule_spec spec = tsr_schedule_spec_default(TSR_SCHEDULE_CONSTANT);
        spec.scale = ranks[r], spec.warmup_start = 1, spec.warmup_steps = warmups[w];
        tsr_schedule s;
        ck_assert_int_eq(tsr_schedule_init(&s, &spec, bases[b]), TSR_OK);
        for (int64_t step = 0; step < warmups[w] + 5; step++) {
          float got = tsr_schedule_lr(&s, step, step / 3), want = old_scaled_lr(bases[b], ranks[r], step, warmups[w]);
          ck_assert_msg(memcmp(&got, &want, sizeof got) == 0, "base %g, %d ranks, warm-up %lld, step %lld: %.9g, was %.9g",
                        bases[b], ranks[r], (long long)warmups[w], (long long)step, got, want);
        }
      }
  /* no schedule at all: the optimizer's rate itself */
  tsr_schedule s = make("constant", 1e-3f);
  float lr = tsr_schedule_lr(&s, 12345, 7), base = 1e-3f;
  ck_assert(memcmp(&lr, &base, sizeof lr) == 0);
}
END_TEST

START_TEST(step_and_multistep_match_float64) {
  float got[N];
  double ref[N], lr = 0.5;
  tsr_schedule s = make("step,step_size=3,gamma=0.5", 0.5f);
  rates(&s, N, got);
  for (int t = 0; t < N; t++) { /* StepLR.get_lr: lr x gamma when t is a positive multiple of step_size */
    if (t > 0 && t % 3 == 0) lr *= 0.5;
    ref[t] = lr;
  }
  tt_assert_close(got, ref, N, 0, 1e-6, "StepLR");
  s = make("step,milestones=2:5:11,gamma=0.1", 0.5f);
  rates(&s, N, got);
  lr = 0.5;
  for (int t = 0; t < N; t++) {
    if (t == 2 || t == 5 || t == 11) lr *= 0.1;
    ref[t] = lr;
  }
  tt_assert_close(got, ref, N, 0, 1e-6, "MultiStepLR");
}
END_TEST

START_TEST(exponential_matches_float64) {
  float got[N];
  double ref[N], lr = 0.02;
  tsr_schedule s = make("exponential,gamma=0.9,per_step=1", 0.02f);
  rates(&s, N, got);
  for (int t = 0; t < N; t++) ref[t] = lr, lr *= 0.9;
  tt_assert_close(got, ref, N, 0, 1e-6, "ExponentialLR");
}
END_TEST

/* CosineAnnealingWarmRestarts.step() without an epoch: t_cur += 1, a restart when it reaches t_i. */
static void ref_cosine(double base, int t0, int t_mult, double eta_min, int n, double *ref) {
  double t_cur = 0, t_i = t0;
  for (int t = 0; t < n; t++) {
    ref[t] = eta_min + (base - eta_min) * (1 + cos(M_PI * t_cur / t_i)) / 2;
    t_cur += 1;
    if (t_cur >= t_i) t_cur -= t_i, t_i *= t_mult;
  }
}

START_TEST(cosine_warm_restarts_match_float64) {
  float got[N];
  double ref[N];
  tsr_schedule s = make("cosine,t0=3,t_mult=2,eta_min=1e-4", 0.1f);
  rates(&s, N, got);
  ref_cosine(0.1f, 3, 2, 1e-4, N, ref);
  tt_assert_close(got, ref, N, 0, 1e-6, "T_0 3, T_mult 2");
  s = make("cosine,t0=7", 0.1f);
  rates(&s, N, got);
  ref_cosine(0.1f, 7, 1, 0, N, ref);
  tt_assert_close(got, ref, N, 1e-12, 1e-6, "T_0 7, T_mult 1");
}
END_TEST

/* OneCycleLR.get_lr, anneal_strategy "cos", three_phase False. */
static void ref_one_cycle(double max_lr, int total, double pct, double div, double fdiv, int n, double *ref) {
  double initial = max_lr / div, min_lr = initial / fdiv;
  double end[2] = {pct * total - 1, total - 1}, from[2] = {initial, max_lr}, to[2] = {max_lr, min_lr};
  for (int t = 0; t < n; t++) {
    double start = 0, step = t < total ? t : total - 1; /* PyTorch refuses steps past total */
    for (int i = 0; i < 2; i++) {
      if (step <= end[i] || i == 1) {
        double p = (step - start) / (end[i] - start);
        ref[t] = to[i] + (from[i] - to[i]) / 2.0 * (cos(M_PI * p) + 1);
        break;
      }
      start = end[i];
    }
  }
}

START_TEST(one_cycle_matches_float64) {
  float got[N];
  double ref[N];
  tsr_schedule s = make("one_cycle,total=30", 0.01f);
  ck_assert_int_eq(s.spec.per_step, 1);
  rates(&s, N, got);
  ref_one_cycle(0.01f, 30, 0.3, 25, 1e4, N, ref);
  tt_assert_close(got, ref, N, 1e-12, 1e-6, "OneCycleLR defaults");
  s = make("one_cycle,total=17,pct_start=0.45,div_factor=10,final_div_factor=100", 0.2f);
  rates(&s, N, got);
  ref_one_cycle(0.2f, 17, 0.45, 10, 100, N, ref);
  tt_assert_close(got, ref, N, 1e-12, 1e-6, "OneCycleLR");
}
END_TEST

/* Printed by PyTorch 1.13 (torch.optim.SGD([p], lr), one scheduler.step() per value):
 * CosineAnnealingWarmRestarts(T_0=2, T_mult=2, eta_min=0.001), lr 0.1, and
 * OneCycleLR(max_lr=0.1, total_steps=10, cycle_momentum=False), both over 10 steps. */
START_TEST(values_match_pytorch) {
  static const double cosine[10] = {0.1, 0.0505, 0.1, 0.0855017856687341, 0.0505, 0.0154982143312659,
                                    0.1, 0.0962320368593087, 0.0855017856687341, 0.06944282990207196};
  static const double one_cycle[10] = {0.0040000000000000036, 0.052000000000000005, 0.1, 0.09504846320134738,
                                       0.0811745653949763, 0.06112620219362893, 0.03887419780637107,
                                       0.0188258346050237, 0.004951936798652629, 4e-07};
  float got[10];
  tsr_schedule s = make("cosine,t0=2,t_mult=2,eta_min=0.001", 0.1f);
  rates(&s, 10, got);
  tt_assert_close(got, cosine, 10, 0, 1e-6, "CosineAnnealingWarmRestarts");
  s = make("one_cycle,total=10", 0.1f);
  rates(&s, 10, got);
  tt_assert_close(got, one_cycle, 10, 0, 1e-6, "OneCycleLR");
}
END_TEST

START_TEST(warmup_ramps_to_the_schedules_rate) {
  float got[N];
  double ref[N];
  tsr_schedule s = make("cosine,t0=20,per_step=1,warmup_steps=8,warmup_start=0.1", 0.05f);
  rates(&s, N, got);
  ref_cosine(0.05f, 20, 1, 0, N, ref);
  for (int t = 0; t < 8; t++) ref[t] = 0.05f * (0.1 + (ref[t] / 0.05f - 0.1) * t / 8);
  tt_assert_close(got, ref, N, 1e-12, 1e-6, "cosine with warm-up");
  /* the default start: a third of the rate (LinearLR's start_factor) */
  s = make("constant,warmup_steps=4", 0.3f);
  ck_assert_float_eq_tol(tsr_schedule_lr(&s, 0, 0), 0.1f, 1e-7);
  ck_assert_float_eq_tol(tsr_schedule_lr(&s, 2, 0), 0.2f, 1e-7);
  ck_assert_float_eq(tsr_schedule_lr(&s, 4, 0), 0.3f);
}
END_TEST

/* factor 0.5, patience 1, threshold 0.1 (relative), cooldown 1, min_lr 0.3, worked by hand through
 * ReduceLROnPlateau.step (PyTorch 1.13 gives the same rates). */
START_TEST(plateau_follows_a_hand_made_metric_sequence) {
  static const double metric[] = {10, 9.5, 9.2, 8, 8, 8, 8, 8, 8, 1, NAN, NAN, NAN};
  static const double want[] = {1, 1, 0.5, 0.5, 0.5, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3};
  static const int reduced_at[] = {0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
  tsr_schedule s = make("plateau,factor=0.5,patience=1,threshold=0.1,cooldown=1,min_lr=0.3", 1.0f);
  for (size_t e = 0; e < sizeof metric / sizeof *metric; e++) {
    int reduced;
    ck_assert_int_eq(tsr_schedule_observe(&s, metric[e], &reduced), TSR_OK);
    ck_assert_msg(tsr_schedule_lr(&s, 100 * (int64_t)e, (int64_t)e + 1) == (float)want[e] && reduced == reduced_at[e],
                  "after epoch %zu (metric %g): lr %g (want %g), reduced %d", e + 1, metric[e],
                  tsr_schedule_lr(&s, 0, 0), want[e], reduced);
  }
  ck_assert(s.state.best == 1 && s.state.epochs == 13);
}
END_TEST

START_TEST(errors_name_the_field) {
  tsr_schedule_spec spec;
  tsr_schedule s;
  ck_assert_int_eq(tsr_schedule_spec_parse(&spec, "cosine,foo=1"), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "'foo'") && strstr(tsr_last_error(), "t_mult"), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_schedule_spec_parse(&spec, "linear"), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "one_cycle"), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_schedule_spec_parse(&spec, "step,milestones=5:3"), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "milestones"), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_schedule_spec_parse(&spec, "plateau,factor=1"), TSR_ERR_ARG);
  ck_assert_int_eq(tsr_schedule_spec_parse(&spec, "cosine,t0=2.5"), TSR_ERR_ARG);
  ck_assert_int_eq(tsr_schedule_spec_parse(&spec, "exponential"), TSR_OK);
  ck_assert_int_eq(tsr_schedule_init(&s, &spec, 0.1f), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "'gamma'") && strstr(tsr_last_error(), "required"), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_schedule_spec_parse(&spec, "cosine"), TSR_OK);
  ck_assert_int_eq(tsr_schedule_init(&s, &spec, 0.1f), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "'t0'"), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_schedule_spec_parse(&spec, "step"), TSR_OK);
  ck_assert_int_eq(tsr_schedule_init(&s, &spec, 0.1f), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "step_size"), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_schedule_spec_parse(&spec, "one_cycle,total=2,pct_start=0.3"), TSR_OK);
  ck_assert_int_eq(tsr_schedule_init(&s, &spec, 0.1f), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "pct_start"), "%s", tsr_last_error());
  tsr_schedule_spec a = tsr_schedule_spec_default(TSR_SCHEDULE_COSINE), b = a;
  char diff[256];
  b.t0 = 20, b.eta_min = 1e-5;
  ck_assert_int_eq(tsr_schedule_spec_diff(&a, &b, diff, sizeof diff), 2);
  ck_assert_msg(strstr(diff, "t0 0 -> 20") && strstr(diff, "eta_min 0 -> 1e-05"), "%s", diff);
}
END_TEST

START_TEST(model_file_schedule) {
  const char *dir = tt_tmpdir();
  char *good = tt_path_in(dir, "good.json"), *bad = tt_path_in(dir, "bad.json");
  const char *fmt = "{\"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [1, 4, 4]},\n"
                    " {\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 1, \"kernel\": 3, \"padding\": 1}],\n"
                    " \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1,\n  \"schedule\": %s}}\n";
  FILE *f = fopen(good, "w");
  fprintf(f, fmt, "{\"type\": \"step\", \"milestones\": [3, 9], \"gamma\": 0.5, \"per_step\": true}");
  fclose(f);
  f = fopen(bad, "w");
  fprintf(f, fmt, "{\"type\": \"cosine\", \"t0\": -2}");
  fclose(f);
  tsr_model *m;
  tsr_optim_spec o;
  ck_assert_msg(tsr_model_load_json(&m, &o, good) == TSR_OK, "%s", tsr_last_error());
  tsr_model_destroy(m);
  tsr_schedule_spec spec;
  int found;
  ck_assert_msg(tsr_model_load_json_schedule(&m, &o, &spec, &found, good) == TSR_OK, "%s", tsr_last_error());
  tsr_model_destroy(m);
  ck_assert(found && spec.kind == TSR_SCHEDULE_STEP && spec.per_step == 1 && spec.gamma == 0.5);
  ck_assert(spec.nmilestones == 2 && spec.milestones[0] == 3 && spec.milestones[1] == 9);
  ck_assert_int_eq(tsr_model_load_json(&m, &o, bad), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(tsr_last_error(), "bad.json:4") && strstr(tsr_last_error(), "schedule") &&
                    strstr(tsr_last_error(), "'t0'"),
                "%s", tsr_last_error());
  ck_assert_int_eq(tsr_model_load_json_schedule(&m, &o, &spec, &found, bad), TSR_ERR_FORMAT);
  ck_assert(m == NULL);
  /* a file without one: a constant schedule */
  char *none = tt_path_in(dir, "none.json");
  f = fopen(none, "w");
  fprintf(f, "{\"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [1, 4, 4]}]}\n");
  fclose(f);
  ck_assert_msg(tsr_model_load_json_schedule(&m, &o, &spec, &found, none) == TSR_OK, "%s", tsr_last_error());
  tsr_model_destroy(m);
  ck_assert(!found && spec.kind == TSR_SCHEDULE_CONSTANT && spec.scale == 1);
}
END_TEST

/* A checkpoint of one small tensor whose meta carries `s`. */
static void write_checkpoint(const char *path, const tsr_schedule *s) {
  struct _tsr_ck ck;
  memset(&ck, 0, sizeof ck);
  float w[2] = {1, 2}, mean = 0, std = 1;
  ck.version = TSR_CK_VERSION;
  ck.meta.epoch = 1, ck.meta.nranks = 1, ck.meta.batch = 1, ck.meta.recorded = 1;
  ck.meta.optim = tsr_optim_spec_default(TSR_OPTIM_SGD);
  ck.meta.has_schedule = 1, ck.meta.schedule = *s;
  ck.n = 1, ck.t = calloc(1, sizeof *ck.t);
  strcpy(ck.t[0].name, "w");
  ck.t[0].shape.ndim = 1, ck.t[0].shape.dims[0] = 2, ck.t[0].w = w;
  ck.norm_c = 1, ck.norm_mean = &mean, ck.norm_std = &std;
  ck.checksum = _tsr_ck_checksum(&ck);
  ck_assert_msg(_tsr_ck_write(&ck, path) == TSR_OK, "%s", tsr_last_error());
  free(ck.t);
}

START_TEST(checkpoint_mid_schedule_continues_bitwise) {
  static const double metric[] = {5, 4, 4.1, 4.2, 4.3, 3, 3.5, 3.6, 3.7, 3.8};
  const char *texts[] = {"plateau,factor=0.3,patience=2,cooldown=1,warmup_steps=5",
                         "cosine,t0=4,t_mult=2,per_step=1,warmup_steps=3,eta_min=0.001",
                         "step,milestones=2:4:8,gamma=0.5"};
  for (int k = 0; k < 3; k++) {
    tsr_schedule run = make(texts[k], 0.02f), resumed;
    float whole[10], after[10];
    for (int e = 0; e < 10; e++) {
      if (e == 4) { /* the run is checkpointed after its fourth epoch and resumed */
        const char *path = tt_path_in(tt_tmpdir(), "ckpt.h5");
        write_checkpoint(path, &run);
        tsr_checkpoint_meta meta;
        ck_assert_msg(tsr_checkpoint_verify(path, &meta, NULL) == TSR_OK, "%s", tsr_last_error());
        ck_assert(meta.has_schedule);
        resumed = meta.schedule;
        ck_assert(memcmp(&resumed.state, &run.state, sizeof run.state) == 0);
      }
      whole[e] = tsr_schedule_lr(&run, 3 * e, e);
      ck_assert_int_eq(tsr_schedule_observe(&run, metric[e], NULL), TSR_OK);
      if (e < 4) continue;
      after[e] = tsr_schedule_lr(&resumed, 3 * e, e);
      ck_assert_int_eq(tsr_schedule_observe(&resumed, metric[e], NULL), TSR_OK);
      ck_assert_msg(memcmp(&whole[e], &after[e], sizeof(float)) == 0, "%s, epoch %d: %.9g resumed, %.9g", texts[k], e,
                    after[e], whole[e]);
    }
  }
}
END_TEST

/* The schedule is inside the checksum: a changed value is a corrupted file. */
START_TEST(changed_schedule_record_is_rejected) {
  const char *path = tt_path_in(tt_tmpdir(), "ckpt.h5");
  tsr_schedule s = make("plateau", 0.01f);
  write_checkpoint(path, &s);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5Gopen2(f, "schedule", H5P_DEFAULT);
  ck_assert(H5Adelete(g, "state_lr") >= 0);
  hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(g, "state_lr", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  double lr = 0.5;
  ck_assert(a >= 0 && H5Awrite(a, H5T_NATIVE_DOUBLE, &lr) >= 0);
  H5Aclose(a), H5Sclose(sp), H5Gclose(g), H5Fclose(f);
  ck_assert_int_eq(_tsr_ck_write_sum(path), TSR_OK); /* a digest of the changed bytes: the checksum must catch it */
  tsr_checkpoint_meta meta;
  ck_assert_int_eq(tsr_checkpoint_verify(path, &meta, NULL), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(tsr_last_error(), "checksum"), "%s", tsr_last_error());
}
END_TEST

static Suite *make_schedule_suite(void) {
  Suite *s = suite_create("schedule");
  TCase *k = tcase_create("schedule");
  tcase_add_test(k, linear_scaling_with_warmup_is_bitwise_the_old_rule);
  tcase_add_test(k, step_and_multistep_match_float64);
  tcase_add_test(k, exponential_matches_float64);
  tcase_add_test(k, cosine_warm_restarts_match_float64);
  tcase_add_test(k, one_cycle_matches_float64);
  tcase_add_test(k, values_match_pytorch);
  tcase_add_test(k, warmup_ramps_to_the_schedules_rate);
  tcase_add_test(k, plateau_follows_a_hand_made_metric_sequence);
  tcase_add_test(k, errors_name_the_field);
  tcase_add_test(k, model_file_schedule);
  tcase_add_test(k, checkpoint_mid_schedule_continues_bitwise);
  tcase_add_test(k, changed_schedule_record_is_rejected);
  suite_add_tcase(s, k);
  return s;
}

TT_MAIN(make_schedule_suite)

/* Suite "insitu": training on a pool of produced samples (tsr_loader_open_pool). The pool's
 * schedule (which sample a stream position reads, each read `reuse` times); training from the pool
 * equal bitwise to training from a fill callback that computes the scheduled samples itself, also
 * with a producer slowed down (a half-written sample would change the losses) and across runs;
 * producer failures reported with the producer's message, naming rank, producer and sample once;
 * the input and target statistics from the producer's samples 0..n-1, alike on every rank; the spill file holding exactly the
 * produced samples; bad settings named; cbed.json fields and the CBED producer. */
#define _GNU_SOURCE
#include <hdf5.h>
#include <starpu.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "runtime/error.h"
#include "testutil.h"

#define S 8     /* image side */
#define BATCH 4
#define STEPS 12

/* Sample `index`: a smooth input and a target depending on it (deterministic for the index). */
static void sample(int64_t index, float *x, float *y) {
  for (int p = 0; p < S * S; p++) x[p] = sinf(0.37f * (p + 1) * (float)(index + 1)) * 0.8f;
  for (int p = 0; p < S * S; p++) y[p] = 0.5f * x[p] * x[p] - 0.3f * x[(p + 1) % (S * S)];
}

/* user: NULL, or the index (int64_t) at which the producer fails with its own message, which names
 * the sample as the CBED simulator's do. */
static tsr_status produce(void *user, int64_t index, float *x, float *y) {
  if (user && index == *(const int64_t *)user)
    return _tsr_error(TSR_ERR_RUNTIME, "test: sample %lld: the specimen is empty", (long long)index);
  sample(index, x, y);
  return TSR_OK;
}

static tsr_sample_producer producer(void) {
  return (tsr_sample_producer){.name = "test_sample", .c = 1, .h = S, .w = S, .tc = 1, .th = S, .tw = S,
                               .produce = produce};
}

/* The producer index of stream position pos, as tsr_loader_open_pool documents it. */
static int64_t scheduled(int64_t pos, int slots, int reuse, int rank, int size) {
  int64_t s = pos % slots, q = pos / slots, g = (q + s % reuse) / reuse;
  return (g * slots + s) * size + rank;
}

static tsr_context *start(void) {
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.ncpus = 2, o.use_mpi = 0, o.deterministic = 1, o.verbose = 0;
  tsr_context *ctx = NULL;
  ck_assert_msg(tsr_context_create(&ctx, &o, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  return ctx;
}

static tsr_trainer *trainer(tsr_context *ctx, tsr_model **m) {
  ck_assert_int_eq(tsr_model_create(m, "insitu"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(*m, "in", 1, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(*m, "c1", "in", 4, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(*m, "r1", TSR_LAYER_TANH, "c1"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(*m, "out", "r1", 1, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_set_output(*m, "out", TSR_LOSS_MSE, 1), TSR_OK);
  tsr_optim_spec adam = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  adam.lr = 0.01f;
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = BATCH, o.slices = 2, o.seed = 5;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, *m, &adam, &o) == TSR_OK, "%s", tsr_last_error());
  return t;
}

struct ref_src {
  int64_t step0; /* trainer step id of the first training step */
  int slots, reuse;
};

static int ref_fill(void *user, int64_t step, int index, float *x, float *y) {
  const struct ref_src *r = user;
  sample(scheduled((step - r->step0) * BATCH + index, r->slots, r->reuse, 0, 1), x, y);
  return 0;
}

/* STEPS training steps from a pool (delay_ms per sample), or (slots = 0) from ref_fill. */
static void train(int slots, int reuse, int delay_ms, double *loss) {
  tsr_context *ctx = start();
  tsr_model *m;
  tsr_trainer *t = trainer(ctx, &m);
  tsr_loader *l = NULL;
  if (slots) {
    tsr_sample_producer p = producer();
    tsr_pool_opts o;
    tsr_pool_opts_default(&o);
    o.slots = slots, o.reuse = reuse, o.delay_ms = delay_ms, o.stats_samples = 0;
    ck_assert_msg(tsr_loader_open_pool(&l, &p, &o) == TSR_OK, "%s", tsr_last_error());
  }
  struct ref_src ref = {0, 8, reuse};
  int64_t ids[STEPS], idx[BATCH];
  for (int s = 0; s < STEPS; s++) {
    for (int i = 0; i < BATCH; i++) idx[i] = (int64_t)s * BATCH + i;
    tsr_status st = l ? tsr_trainer_step_loader(t, l, idx, &ids[s]) : tsr_trainer_step(t, ref_fill, &ref, &ids[s]);
    ck_assert_msg(st == TSR_OK, "%s", tsr_last_error());
  }
  for (int s = 0; s < STEPS; s++) ck_assert_msg(tsr_trainer_loss(t, ids[s], &loss[s]) == TSR_OK, "%s", tsr_last_error());
  tsr_trainer_destroy(t);
  tsr_loader_close(l);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}

static void assert_same(const double *a, const double *b, const char *what) {
  for (int s = 0; s < STEPS; s++)
    ck_assert_msg(memcmp(&a[s], &b[s], sizeof(double)) == 0, "%s: step %d loss %.17g, reference %.17g", what, s, a[s],
                  b[s]);
}

START_TEST(pool_positions_read_the_scheduled_samples_reuse_times) {
  tsr_context *ctx = start();
  const int slots = 6, reuse = 3;
  tsr_sample_producer p = producer();
  tsr_pool_opts o;
  tsr_pool_opts_default(&o);
  o.slots = slots, o.reuse = reuse, o.rank = 1, o.size = 2, o.stats_samples = 0;
  tsr_loader *l;
  ck_assert_msg(tsr_loader_open_pool(&l, &p, &o) == TSR_OK, "%s", tsr_last_error());
  ck_assert(tsr_loader_is_stream(l));
  float x[S * S], y[S * S], rx[S * S], ry[S * S];
  enum { N = 6 * 3 * 5 };
  int reads[2 * 6 * 7] = {0};
  for (int64_t pos = 0; pos < N; pos++) {
    int64_t k = scheduled(pos, slots, reuse, 1, 2);
    ck_assert_int_eq(k % 2, 1); /* rank 1 of 2: odd indices only */
    ck_assert(k < (int64_t)(sizeof reads / sizeof *reads));
    reads[k]++;
    ck_assert_int_eq(tsr_loader_read(l, pos, x, y), TSR_OK);
    sample(k, rx, ry);
    ck_assert_msg(!memcmp(x, rx, sizeof x) && !memcmp(y, ry, sizeof y), "position %lld is not sample %lld", (long long)pos,
                  (long long)k);
  }
  /* every sample of a generation after the first is read `reuse` times within whole generations */
  for (int s = 0; s < slots; s++)
    for (int g = 1; g < 4; g++) {
      int64_t k = (g * slots + s) * 2 + 1;
      ck_assert_msg(reads[k] == reuse, "slot %d generation %d (sample %lld): read %d times", s, g, (long long)k, reads[k]);
    }
  tsr_loader_close(l);
  tsr_context_destroy(ctx);
}
END_TEST

START_TEST(training_from_a_pool_equals_training_on_the_scheduled_samples) {
  double ref[STEPS], a[STEPS], b[STEPS];
  train(0, 2, 0, ref);
  train(8, 2, 0, a);
  assert_same(a, ref, "pool of 8, reuse 2");
  train(8, 2, 0, b);
  assert_same(b, a, "second run with the same seed");
}
END_TEST

/* Every production sleeps 40 ms (half before, half after writing): a load task that read a slot
 * before its production ended would see the previous sample or zeros, and the losses would differ. */
START_TEST(a_slow_producer_never_hands_out_a_half_written_sample) {
  double ref[STEPS], slow[STEPS];
  train(0, 1, 0, ref);
  train(8, 1, 40, slow);
  assert_same(slow, ref, "producer slowed by 40 ms per sample");
}
END_TEST

/* The number of times `what` occurs in msg. */
static int occurrences(const char *msg, const char *what) {
  int n = 0;
  for (const char *at = strstr(msg, what); at; at = strstr(at + 1, what)) n++;
  return n;
}

/* Trains from a pool of 8 slots whose producer fails at index 13 (read at position 13, step 3):
 * injected (fail_at) or with the producer's own message (own); the pool's and the trainer's
 * messages name the rank, the producer and the sample once, and keep the producer's text. */
static void failing_run(int own, const char *want) {
  tsr_context *ctx = start();
  tsr_model *m;
  tsr_trainer *t = trainer(ctx, &m);
  tsr_sample_producer p = producer();
  int64_t bad = 13;
  if (own) p.user = &bad;
  tsr_pool_opts o;
  tsr_pool_opts_default(&o);
  o.slots = 8, o.stats_samples = 0, o.fail_at = own ? -1 : bad;
  tsr_loader *l;
  ck_assert_msg(tsr_loader_open_pool(&l, &p, &o) == TSR_OK, "%s", tsr_last_error());
  int64_t idx[BATCH], id;
  tsr_status st = TSR_OK;
  for (int s = 0; s < STEPS && st == TSR_OK; s++) {
    for (int i = 0; i < BATCH; i++) idx[i] = (int64_t)s * BATCH + i;
    st = tsr_trainer_step_loader(t, l, idx, &id);
  }
  if (st == TSR_OK) st = tsr_trainer_sync(t);
  ck_assert_int_ne(st, TSR_OK);
  ck_assert_msg(strstr(tsr_last_error(), want), "message: %s", tsr_last_error());
  ck_assert_msg(occurrences(tsr_last_error(), "sample 13") == 1, "the sample named more than once: %s", tsr_last_error());
  ck_assert_msg(occurrences(tsr_last_error(), "test_sample") == 1, "the producer named more than once: %s",
                tsr_last_error());
  const char *err;
  tsr_loader_pool_counts(l, NULL, NULL, &err);
  ck_assert_msg(!strcmp(err, want), "pool error: %s", err);
  tsr_trainer_destroy(t);
  tsr_loader_close(l);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}

START_TEST(a_producer_failure_stops_training_with_its_message) {
  failing_run(0, "rank 0, producer test_sample: sample 13: injected failure (tsr_pool_opts.fail_at or "
                 "TESSERA_SIM_FAIL_AT)");
  failing_run(1, "rank 0, producer test_sample: test: sample 13: the specimen is empty");
}
END_TEST

/* The input statistics of a pool come from the producer's samples 0..stats_samples-1 and the target
 * statistics from samples 0..target_stats_samples-1, by index: they equal a float64 two-pass
 * computation over those samples (relative 1e-12: the inputs' one-pass formula rounds otherwise),
 * and every rank of 1, 2 or 3 gets bitwise the same (the same samples, summed in the same order),
 * though the ranks' streams hold other samples. */
START_TEST(pool_statistics_come_from_samples_0_to_n_on_every_rank) {
  tsr_context *ctx = start();
  enum { NIN = 5, NT = 7 };
  double ref[4] = {0}; /* input mean, std, target mean, std */
  float x[S * S], y[S * S];
  for (int v = 0; v < 2; v++) {
    int n = v ? NT : NIN;
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) {
      sample(i, x, y);
      for (int p = 0; p < S * S; p++) s += v ? y[p] : x[p];
    }
    double mean = s / (n * S * S);
    for (int i = 0; i < n; i++) {
      sample(i, x, y);
      for (int p = 0; p < S * S; p++) q += ((v ? y[p] : x[p]) - mean) * ((v ? y[p] : x[p]) - mean);
    }
    ref[2 * v] = mean, ref[2 * v + 1] = sqrt(q / (n * S * S));
  }
  double first[4];
  const int ranks[][2] = {{0, 1}, {0, 2}, {1, 2}, {2, 3}};
  for (int r = 0; r < 4; r++) {
    tsr_sample_producer p = producer();
    tsr_pool_opts o;
    tsr_pool_opts_default(&o);
    o.slots = 4, o.reuse = 2, o.rank = ranks[r][0], o.size = ranks[r][1];
    o.stats_samples = NIN, o.target_stats_samples = NT;
    tsr_loader *l;
    ck_assert_msg(tsr_loader_open_pool(&l, &p, &o) == TSR_OK, "%s", tsr_last_error());
    const double *im, *is, *tm, *ts;
    tsr_loader_stats(l, &im, &is);
    tsr_loader_target_stats(l, &tm, &ts);
    ck_assert(im && is && tm && ts);
    double got[4] = {im[0], is[0], tm[0], ts[0]};
    for (int i = 0; i < 4; i++) {
      ck_assert_msg(fabs(got[i] - ref[i]) <= 1e-12 * fabs(ref[i]), "rank %d of %d: statistic %d is %.17g, float64 %.17g",
                    ranks[r][0], ranks[r][1], i, got[i], ref[i]);
      if (r == 0) first[i] = got[i];
      else ck_assert_msg(!memcmp(&got[i], &first[i], sizeof(double)), "rank %d of %d: statistic %d is %.17g, 1 rank's "
                         "%.17g", ranks[r][0], ranks[r][1], i, got[i], first[i]);
    }
    tsr_loader_close(l);
  }
  /* without target_stats_samples, none */
  tsr_sample_producer p = producer();
  tsr_pool_opts o;
  tsr_pool_opts_default(&o);
  o.slots = 4;
  tsr_loader *l;
  ck_assert_msg(tsr_loader_open_pool(&l, &p, &o) == TSR_OK, "%s", tsr_last_error());
  const double *tm, *ts;
  tsr_loader_target_stats(l, &tm, &ts);
  ck_assert(!tm && !ts);
  tsr_loader_close(l);
  tsr_context_destroy(ctx);
}
END_TEST

/* The `index` dataset of a spill file (malloc'd). */
static int64_t *read_index(const char *path, hsize_t *n) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  ck_assert_msg(f >= 0, "%s was not written", path);
  hid_t d = H5Dopen2(f, "index", H5P_DEFAULT), sp = H5Dget_space(d);
  H5Sget_simple_extent_dims(sp, n, NULL);
  int64_t *index = malloc(sizeof *index * (*n + 1));
  ck_assert_int_ge(H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, index), 0);
  H5Sclose(sp), H5Dclose(d), H5Fclose(f);
  return index;
}

START_TEST(spill_file_holds_every_produced_sample) {
  tsr_context *ctx = start();
  tsr_model *m;
  tsr_trainer *t = trainer(ctx, &m);
  tsr_sample_producer p = producer();
  tsr_pool_opts o;
  tsr_pool_opts_default(&o);
  char *path = tt_path_in(tt_tmpdir(), "spill.h5");
  o.slots = 4, o.reuse = 2, o.stats_samples = 0, o.spill = path;
  tsr_loader *l;
  ck_assert_msg(tsr_loader_open_pool(&l, &p, &o) == TSR_OK, "%s", tsr_last_error());
  int64_t idx[BATCH], id, produced;
  for (int s = 0; s < 6; s++) {
    for (int i = 0; i < BATCH; i++) idx[i] = (int64_t)s * BATCH + i;
    ck_assert_msg(tsr_trainer_step_loader(t, l, idx, &id) == TSR_OK, "%s", tsr_last_error());
  }
  ck_assert_int_eq(tsr_trainer_sync(t), TSR_OK);
  tsr_trainer_destroy(t);
  starpu_task_wait_for_all();
  tsr_loader_pool_counts(l, &produced, NULL, NULL);
  tsr_loader_close(l); /* waits for the productions submitted ahead, renames the file */
  hsize_t n;
  int64_t *index = read_index(path, &n);
  /* 6 steps of 4 from 4 slots read twice: generations 0..3 of every slot submitted (the last ahead) */
  ck_assert_int_eq((int)n, 16);
  ck_assert_int_eq(produced, 16);
  tsr_loader *back;
  ck_assert_msg(tsr_loader_open(&back, path, NULL) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_loader_set_stats(back, NULL, NULL, 0) == TSR_OK, "%s", tsr_last_error());
  float x[S * S], y[S * S], rx[S * S], ry[S * S];
  for (hsize_t r = 0; r < n; r++) {
    ck_assert_int_eq(tsr_loader_read(back, (int64_t)r, x, y), TSR_OK);
    sample(index[r], rx, ry);
    ck_assert_msg(!memcmp(x, rx, sizeof x) && !memcmp(y, ry, sizeof y), "row %d is not sample %lld", (int)r,
                  (long long)index[r]);
    for (hsize_t q = 0; q < r; q++) ck_assert_msg(index[q] != index[r], "sample %lld spilled twice", (long long)index[r]);
  }
  tsr_loader_close(back);
  free(index);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

START_TEST(bad_pool_settings_are_named) {
  tsr_context *ctx = start();
  tsr_sample_producer p = producer();
  tsr_pool_opts o;
  tsr_loader *l = NULL;
  struct {
    int slots, reuse, rank, size;
    const char *want;
  } bad[] = {{0, 1, 0, 1, "slots 0"}, {4, 0, 0, 1, "reuse 0"}, {4, 1, 2, 2, "rank 2 of 2"}};
  for (int i = 0; i < 3; i++) {
    tsr_pool_opts_default(&o);
    o.slots = bad[i].slots, o.reuse = bad[i].reuse, o.rank = bad[i].rank, o.size = bad[i].size;
    ck_assert_int_eq(tsr_loader_open_pool(&l, &p, &o), TSR_ERR_ARG);
    ck_assert_msg(strstr(tsr_last_error(), bad[i].want), "%s: %s", bad[i].want, tsr_last_error());
  }
  p.h = 0;
  tsr_pool_opts_default(&o);
  ck_assert_int_eq(tsr_loader_open_pool(&l, &p, &o), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "'test_sample' has shape [1, 0, 8]"), "%s", tsr_last_error());
  /* a pool smaller than the batch */
  p = producer();
  o.slots = BATCH - 1, o.stats_samples = 0;
  ck_assert_msg(tsr_loader_open_pool(&l, &p, &o) == TSR_OK, "%s", tsr_last_error());
  tsr_model *m;
  tsr_trainer *t = trainer(ctx, &m);
  int64_t idx[BATCH] = {0, 1, 2, 3}, id;
  ck_assert_int_eq(tsr_trainer_step_loader(t, l, idx, &id), TSR_ERR_ARG);
  ck_assert_msg(strstr(tsr_last_error(), "the pool holds 3 samples, fewer than the batch of 4"), "%s", tsr_last_error());
  tsr_trainer_destroy(t);
  tsr_loader_close(l);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

static const char *write_json(const char *name, const char *text) {
  char *path = tt_path_in(tt_tmpdir(), name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
  return path;
}

START_TEST(cbed_json_sets_fields_and_names_bad_ones) {
  tsr_cbed_opts o, d;
  tsr_cbed_opts_default(&d);
  const char *ok = write_json("ok.json", "{\"kv\": 300, \"grid\": 32, \"pattern\": 24, \"target\": 16, \"probes\": 2,"
                                         " \"thickness\": [10, 30], \"structures\": [\"si\", \"cu\"], \"zones\": [\"111\"],"
                                         " \"shift\": false, \"intensity\": \"sqrt\", \"seed\": 9,"
                                         " \"cif\": [\"a.cif\", \"b.cif\"], \"zone_index\": 2, \"tilt\": 4,"
                                         " \"rotation\": 90, \"elements\": [3, 83], \"density\": [0.04, 0.06]}");
  ck_assert_msg(tsr_cbed_opts_load_json(ok, &o) == TSR_OK, "%s", tsr_last_error());
  ck_assert(o.kv == 300 && o.grid == 32 && o.pattern == 24 && o.target == 16 && o.probes == 2);
  ck_assert(o.thickness_min == 10 && o.thickness_max == 30 && o.structures == (1u << TSR_CBED_SI | 1u << TSR_CBED_CU));
  ck_assert(o.zones == 4 && o.shift == 0 && o.intensity == TSR_CBED_SQRT && o.seed == 9);
  ck_assert_str_eq(o.cif, "a.cif,b.cif");
  ck_assert(o.zone_index == 2 && o.tilt_mrad == 4 && o.rotation_deg == 90 && o.zmin == 3 && o.zmax == 83);
  ck_assert(o.density_min == 0.04 && o.density_max == 0.06 && o.sites == d.sites);
  ck_assert(o.alpha_mrad == d.alpha_mrad && o.slice == d.slice && o.fov == d.fov); /* left out: defaults */
  struct {
    const char *json, *want;
  } bad[] = {{"{\"kvv\": 200}", "unknown field 'kvv'"},
             {"{\"kv\": \"high\"}", "field 'kv' must be a number"},
             {"{\"grid\": 7}", "grid 7 is not an even number"},
             {"{\"zones\": [\"100\", \"123\"]}", "field 'zones' must be"},
             {"{\"thickness\": [80, 20]}", "thickness range 80..20"},
             {"{\"elements\": [0, 200]}", "field 'elements' must be"},
             {"{\"raw_target\": true}", "the target is always the potential in V A"},
             {"[1, 2]", "not a JSON object"}};
  for (int i = 0; i < 8; i++) {
    char name[32];
    snprintf(name, sizeof name, "bad%d.json", i);
    const char *path = write_json(name, bad[i].json);
    ck_assert_int_ne(tsr_cbed_opts_load_json(path, &o), TSR_OK);
    ck_assert_msg(strstr(tsr_last_error(), bad[i].want) && strstr(tsr_last_error(), path), "%s: %s", bad[i].json,
                  tsr_last_error());
  }
}
END_TEST

/* The CBED producer inside pool tasks gives tsr_cbed_sample's samples bitwise. */
START_TEST(cbed_producer_in_tasks_matches_the_simulator) {
  tsr_context *ctx = start();
  tsr_cbed_opts co;
  tsr_cbed_opts_default(&co);
  co.grid = 16, co.pattern = 8, co.target = 8, co.probes = 1, co.thickness_min = 4, co.thickness_max = 8, co.seed = 3;
  tsr_sample_producer p;
  ck_assert_msg(tsr_cbed_producer(&co, &p) == TSR_OK, "%s", tsr_last_error());
  tsr_pool_opts o;
  tsr_pool_opts_default(&o);
  o.slots = 4, o.stats_samples = 0;
  char *path = tt_path_in(tt_tmpdir(), "cbed_spill.h5");
  o.spill = path;
  tsr_loader *l;
  ck_assert_msg(tsr_loader_open_pool(&l, &p, &o) == TSR_OK, "%s", tsr_last_error());
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "cbed"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, 8, 8), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out", "in", 1, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_set_output(m, "out", TSR_LOSS_MSE, 1), TSR_OK);
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = 4;
  tsr_optim_spec sgd = tsr_optim_spec_default(TSR_OPTIM_SGD);
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &sgd, &to) == TSR_OK, "%s", tsr_last_error());
  int64_t idx[4] = {0, 1, 2, 3}, id;
  ck_assert_msg(tsr_trainer_step_loader(t, l, idx, &id) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_trainer_sync(t) == TSR_OK, "%s", tsr_last_error());
  tsr_trainer_destroy(t);
  tsr_loader_close(l);
  tsr_loader *back;
  ck_assert_msg(tsr_loader_open(&back, path, NULL) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_loader_set_stats(back, NULL, NULL, 0) == TSR_OK, "%s", tsr_last_error());
  hsize_t n;
  int64_t *index = read_index(path, &n);
  ck_assert_int_eq((int)n, 8); /* generations 0 and 1 (submitted ahead) of 4 slots */
  ck_assert_int_eq(tsr_loader_size(back), 8);
  float x[64], y[64], rx[64], ry[64];
  for (hsize_t r = 0; r < n; r++) {
    ck_assert_int_eq(tsr_loader_read(back, (int64_t)r, x, y), TSR_OK);
    ck_assert_msg(tsr_cbed_sample(&co, index[r], rx, ry) == TSR_OK, "%s", tsr_last_error());
    ck_assert_msg(!memcmp(x, rx, sizeof x) && !memcmp(y, ry, sizeof y), "sample %lld differs from tsr_cbed_sample's",
                  (long long)index[r]);
  }
  free(index);
  tsr_loader_close(back);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

static Suite *make_insitu_suite(void) {
  Suite *s = suite_create("insitu");
  TCase *t = tcase_create("pool");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, pool_positions_read_the_scheduled_samples_reuse_times);
  tcase_add_test(t, training_from_a_pool_equals_training_on_the_scheduled_samples);
  tcase_add_test(t, a_slow_producer_never_hands_out_a_half_written_sample);
  tcase_add_test(t, a_producer_failure_stops_training_with_its_message);
  tcase_add_test(t, pool_statistics_come_from_samples_0_to_n_on_every_rank);
  tcase_add_test(t, spill_file_holds_every_produced_sample);
  tcase_add_test(t, bad_pool_settings_are_named);
  tcase_add_test(t, cbed_json_sets_fields_and_names_bad_ones);
  tcase_add_test(t, cbed_producer_in_tasks_matches_the_simulator);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_insitu_suite)

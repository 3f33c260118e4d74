/* Helpers shared by the Check suites. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <starpu.h>
#include <tessera.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "testutil.h"

/* xorshift64, not the library's SplitMix64 (src/runtime/rng.h): the tests' inputs and tolerances
 * were chosen with these values, and the tests must not depend on the generator under test. */
static uint64_t next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

void tt_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)((next(&s) >> 11) * (1.0 / 9007199254740992.0));
}

void tt_fill_uniform_d(double *x, size_t n, uint64_t seed, double lo, double hi) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * ((next(&s) >> 11) * (1.0 / 9007199254740992.0));
}

double tt_err_ratio(const float *a, const double *ref, size_t n, double atol, double rtol, size_t *where) {
  double worst = 0;
  size_t wi = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - ref[i]) / (atol + rtol * fabs(ref[i]));
    if (!(e <= worst)) { /* NaN counts as worst */
      worst = isnan(e) ? INFINITY : e;
      wi = i;
      if (isnan(e)) break;
    }
  }
  if (where) *where = wi;
  return worst;
}

void tt_fd_grad(float *x, size_t n, double (*loss)(void *user), void *user, double h, double *grad) {
  for (size_t i = 0; i < n; i++) {
    float keep = x[i];
    x[i] = (float)(keep + h);
    double hi = (double)x[i] - keep;
    double lp = loss(user);
    x[i] = (float)(keep - h);
    double lo = keep - (double)x[i];
    double lm = loss(user);
    x[i] = keep;
    grad[i] = (lp - lm) / (hi + lo);
  }
}

void tt_starpu_home(void) {
  static int done;
  if (done) return;
  done = 1;
  if (getenv("TSR_TEST_KEEP_STARPU_HOME")) return;
  char tmpl[] = "/tmp/tessera-starpu-XXXXXX";
  char *d = mkdtemp(tmpl);
  if (d) setenv("STARPU_HOME", d, 1);
  setenv("STARPU_SILENT", "1", 0);
}

void tt_starpu_start(int ncpus) {
  tt_starpu_home();
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = ncpus;
  conf.ncuda = 0;
  conf.nopencl = 0;
  int ret = starpu_init(&conf);
  ck_assert_msg(ret == 0, "starpu_init failed: %d", ret);
}

void tt_starpu_stop(void) {
  starpu_task_wait_for_all();
  starpu_shutdown();
}

/* Folders live under one root per suite run (TT_TMP_ROOT, inherited by Check's forked tests),
 * removed when the suite ends. */
const char *tt_tmpdir(void) {
  static char path[512];
  const char *root = getenv("TT_TMP_ROOT");
  snprintf(path, sizeof path, "%s/t-XXXXXX", root ? root : "/tmp");
  if (!mkdtemp(path)) return "/tmp";
  return path;
}

char *tt_path_in(const char *dir, const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ % 4];
  ck_assert(snprintf(p, 512, "%s/%s", dir, name) < 512);
  return p;
}

void tt_cap_address_space(void) {
#if !defined(__SANITIZE_ADDRESS__)
  FILE *f = fopen("/proc/self/statm", "r");
  long long pages = 0;
  if (f && fscanf(f, "%lld", &pages) != 1) pages = 0;
  if (f) fclose(f);
  struct rlimit lim = {.rlim_cur = (rlim_t)(pages * sysconf(_SC_PAGESIZE) + (1ll << 30)), .rlim_max = RLIM_INFINITY};
  ck_assert_int_eq(setrlimit(RLIMIT_AS, &lim), 0);
#endif
}

/* Skips go to a file under TT_TMP_ROOT: Check runs each test in a child process. */
void tt_skip(const char *fmt, ...) {
  char reason[1024], path[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  const char *root = getenv("TT_TMP_ROOT");
  FILE *f = NULL;
  if (root) {
    snprintf(path, sizeof path, "%s/skipped", root);
    f = fopen(path, "a");
  }
  ck_assert_msg(f != NULL, "cannot record the skip (%s)", reason);
  fprintf(f, "%s\n", reason);
  fclose(f);
}

/* Prints the recorded skips; returns their number. */
static int report_skips(const char *root) {
  char path[600], line[1024];
  snprintf(path, sizeof path, "%s/skipped", root);
  FILE *f = fopen(path, "r");
  int n = 0;
  while (f && fgets(line, sizeof line, f)) {
    printf("SKIP: %s", line);
    n++;
  }
  if (f) fclose(f);
  return n;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) { return remove(p); }

int tt_run_suite(Suite *s) {
  tt_starpu_home();
#ifdef _OPENMP
  /* Raw kernels called from the test thread run single-threaded, as in a StarPU worker. */
  omp_set_num_threads(1);
#endif
  char root[] = "/tmp/tessera-test-XXXXXX";
  int have_root = mkdtemp(root) != NULL;
  if (have_root) setenv("TT_TMP_ROOT", root, 1);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  int skipped = have_root ? report_skips(root) : 0;
  if (have_root && !getenv("TT_KEEP_TMP")) nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return failed ? 1 : skipped ? 77 : 0;
}

enum { SMALL_S = 6 }; /* tt_small_model's input side */

struct tsr_model *tt_small_model(const char *name) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, name), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, SMALL_S, SMALL_S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "in", 3, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r1", TSR_LAYER_TANH, "c1"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out", "r1", 1, 3, 1, 1), TSR_OK);
  return m;
}

static void add_layer(tsr_model *m, const char *name, tsr_layer_spec *s, const char **in, int nin) {
  ck_assert_msg(tsr_model_add(m, name, s, in, nin) == TSR_OK, "%s", tsr_last_error());
}

struct tsr_model *tt_dense_model(int side, int c0, int c1, int up, int act, int pool) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "dense"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 2, side, side), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c0", "in", c0, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "bn0", TSR_LAYER_BATCHNORM, "c0"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r0", (tsr_layer_kind)act, "bn0"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "r0", c1, 3, 1, 1), TSR_OK);
  tsr_layer_spec cat = tsr_layer_spec_default(TSR_LAYER_CONCAT);
  add_layer(m, "cat", &cat, (const char *[]){"c0", "c1"}, 2);
  ck_assert_int_eq(tsr_model_add_simple(m, "bn1", TSR_LAYER_BATCHNORM, "cat"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r1", (tsr_layer_kind)act, "bn1"), TSR_OK);
  tsr_layer_spec pl = tsr_layer_spec_default((tsr_layer_kind)pool);
  pl.kernel_h = pl.kernel_w = 2;
  add_layer(m, "pool", &pl, (const char *[]){"r1"}, 1);
  tsr_layer_spec tc = tsr_layer_spec_default(TSR_LAYER_CONV_TRANSPOSE2D);
  tc.out_channels = up, tc.kernel_h = tc.kernel_w = 2, tc.stride_h = tc.stride_w = 2;
  add_layer(m, "up", &tc, (const char *[]){"pool"}, 1);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c2", "r1", up, 1, 1, 0), TSR_OK);
  tsr_layer_spec sum = tsr_layer_spec_default(TSR_LAYER_ADD);
  add_layer(m, "sum", &sum, (const char *[]){"up", "c2"}, 2);
  ck_assert_int_eq(tsr_model_add_simple(m, "t", TSR_LAYER_TANH, "sum"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out", "t", 1, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_set_output(m, "out", TSR_LOSS_MSE, 1), TSR_OK);
  return m;
}

int tt_fill_small(void *user, int64_t step, int index, float *x, float *y) {
  (void)user;
  const int n = SMALL_S * SMALL_S;
  for (int p = 0; p < n; p++) x[p] = sinf(0.3f * (p + 1) * (index + 1) + 0.2f * (float)(step % 4));
  for (int p = 0; p < n; p++) y[p] = 0.5f * x[p] - 0.25f * x[(p + 3) % n];
  return 0;
}

void tt_train_steps(struct tsr_trainer *t, int steps, double *loss) {
  int64_t id[64];
  ck_assert_int_le(steps, 64);
  for (int i = 0; i < steps; i++) ck_assert_int_eq(tsr_trainer_step(t, tt_fill_small, NULL, &id[i]), TSR_OK);
  for (int i = 0; i < steps; i++) ck_assert_int_eq(tsr_trainer_loss(t, id[i], &loss[i]), TSR_OK);
}

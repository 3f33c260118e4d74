/* Pooling and activation kernels: forward against naive float64 references, backward against
 * finite differences of sum(y * r), and each codelet run through StarPU against the raw kernel.
 * Max-pooling inputs hold distinct values 0.01 apart, so every window's argmax stays put under
 * the finite-difference step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>
#include <tessera.h>

#include "codelets.h"
#include "testutil.h"

/* ---- pooling ---- */

#define NPOOL_CASES 3

/* PyTorch's floor-mode output size. */
static int out_size(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

/* 0: kernel 2 stride 2; 1: kernel 3 stride 2 pad 1 on odd sizes; 2: non-square everything. */
static struct _tsr_pool_desc pool_case(int i, int is_max) {
  static const int c[NPOOL_CASES][10] = {
      /* n c h  w  kh kw sh sw ph pw */
      {2, 3, 8, 8, 2, 2, 2, 2, 0, 0},
      {2, 3, 9, 7, 3, 3, 2, 2, 1, 1},
      {1, 2, 7, 10, 3, 2, 2, 1, 1, 0},
  };
  const int *v = c[i];
  return (struct _tsr_pool_desc){.n = v[0], .c = v[1], .h = v[2], .w = v[3],
                                .oh = out_size(v[2], v[4], v[6], v[8]), .ow = out_size(v[3], v[5], v[7], v[9]),
                                .kh = v[4], .kw = v[5], .sh = v[6], .sw = v[7], .ph = v[8], .pw = v[9],
                                .is_max = is_max};
}

static size_t in_len(const struct _tsr_pool_desc *d) { return (size_t)d->n * d->c * d->h * d->w; }
static size_t out_len(const struct _tsr_pool_desc *d) { return (size_t)d->n * d->c * d->oh * d->ow; }

/* Average divides by kh * kw wherever the window lies (padding counted). */
static void pool_ref(const struct _tsr_pool_desc *d, const float *x, double *y) {
  for (int nc = 0; nc < d->n * d->c; nc++)
    for (int oy = 0; oy < d->oh; oy++)
      for (int ox = 0; ox < d->ow; ox++) {
        double acc = d->is_max ? -INFINITY : 0;
        for (int ky = 0; ky < d->kh; ky++)
          for (int kx = 0; kx < d->kw; kx++) {
            int iy = oy * d->sh - d->ph + ky, ix = ox * d->sw - d->pw + kx;
            if (iy < 0 || iy >= d->h || ix < 0 || ix >= d->w) continue;
            double v = x[((size_t)nc * d->h + iy) * d->w + ix];
            acc = d->is_max ? fmax(acc, v) : acc + v;
          }
        y[((size_t)nc * d->oh + oy) * d->ow + ox] = d->is_max ? acc : acc / (d->kh * d->kw);
      }
}

/* Distinct values 0.01 apart in random order (each value's rank among random keys). */
static void fill_distinct(float *x, size_t n, uint64_t seed) {
  float *key = malloc(n * sizeof *key);
  tt_fill_uniform(key, n, seed, 0, 1);
  for (size_t i = 0; i < n; i++) {
    size_t rank = 0;
    for (size_t j = 0; j < n; j++) rank += key[j] < key[i] || (key[j] == key[i] && j < i);
    x[i] = 0.01f * (float)rank - 0.005f * (float)n;
  }
  free(key);
}

static void fill_pool_input(const struct _tsr_pool_desc *d, float *x, uint64_t seed) {
  if (d->is_max)
    fill_distinct(x, in_len(d), seed);
  else
    tt_fill_uniform(x, in_len(d), seed, -1, 1);
}

static void *alloc_ws(const struct _tsr_pool_desc *d) {
  size_t bytes = _tsr_pool_ws_bytes(d);
  return bytes ? malloc(bytes) : NULL;
}

static void pool_fwd_case(int is_max, double atol, double rtol) {
  for (int i = 0; i < NPOOL_CASES; i++) {
    struct _tsr_pool_desc d = pool_case(i, is_max);
    float *x = malloc(in_len(&d) * sizeof *x), *y = malloc(out_len(&d) * sizeof *y);
    double *ref = malloc(out_len(&d) * sizeof *ref);
    void *ws = alloc_ws(&d);
    fill_pool_input(&d, x, 10 + i);
    _tsr_pool_fwd_cpu(&d, x, y, ws);
    pool_ref(&d, x, ref);
    char what[64];
    snprintf(what, sizeof what, "%s pool case %d", is_max ? "max" : "avg", i);
    tt_assert_close(y, ref, out_len(&d), atol, rtol, what);
    free(x), free(y), free(ref), free(ws);
  }
}

START_TEST(pool_max_forward_matches_reference) { pool_fwd_case(1, 1e-7, 0); }
END_TEST

START_TEST(pool_avg_forward_counts_padding_like_reference) { pool_fwd_case(0, 1e-6, 1e-5); }
END_TEST

START_TEST(pool_ws_bytes_nonzero_for_max_only) {
  struct _tsr_pool_desc d = pool_case(1, 1);
  ck_assert_uint_ge(_tsr_pool_ws_bytes(&d), out_len(&d));
  d.is_max = 0;
  ck_assert_uint_eq(_tsr_pool_ws_bytes(&d), 0);
}
END_TEST

struct pool_fd {
  const struct _tsr_pool_desc *d;
  float *x, *y;
  void *ws;
  const float *r;
};

static double pool_loss(void *user) {
  struct pool_fd *p = user;
  _tsr_pool_fwd_cpu(p->d, p->x, p->y, p->ws);
  double s = 0;
  for (size_t i = 0; i < out_len(p->d); i++) s += (double)p->y[i] * p->r[i];
  return s;
}

static void pool_bwd_case(int is_max, double h, double atol, double rtol) {
  for (int i = 0; i < NPOOL_CASES; i++) {
    struct _tsr_pool_desc d = pool_case(i, is_max);
    size_t ni = in_len(&d), no = out_len(&d);
    float *x = malloc(ni * sizeof *x), *y = malloc(no * sizeof *y), *r = malloc(no * sizeof *r);
    float *dx = malloc(ni * sizeof *dx);
    double *fd = malloc(ni * sizeof *fd);
    void *ws = alloc_ws(&d);
    fill_pool_input(&d, x, 20 + i);
    tt_fill_uniform(r, no, 30 + i, -1, 1);
    struct pool_fd p = {&d, x, y, ws, r};
    tt_fd_grad(x, ni, pool_loss, &p, h, fd);
    _tsr_pool_fwd_cpu(&d, x, y, ws);
    for (size_t j = 0; j < ni; j++) dx[j] = NAN; /* the backward must overwrite every element */
    _tsr_pool_bwd_cpu(&d, r, ws, dx);
    char what[64];
    snprintf(what, sizeof what, "%s pool backward case %d", is_max ? "max" : "avg", i);
    tt_assert_close(dx, fd, ni, atol, rtol, what);
    free(x), free(y), free(r), free(dx), free(fd), free(ws);
  }
}

START_TEST(pool_max_backward_matches_finite_differences) { pool_bwd_case(1, 1e-3, 1e-4, 1e-4); }
END_TEST

START_TEST(pool_avg_backward_matches_finite_differences) { pool_bwd_case(0, 1e-2, 1e-3, 1e-3); }
END_TEST

/* ---- activations ---- */

#define ACT_LEN 1003 /* not a multiple of any vector width */
#define LEAKY_ALPHA 0.2f

static const char *const act_names[] = {"relu", "leaky_relu", "tanh", "sigmoid", "gelu"};
#define NACT ((int)(sizeof act_names / sizeof act_names[0]))

static struct _tsr_act_desc act_desc(int i) {
  int op = _tsr_act_find(act_names[i]);
  ck_assert_msg(op >= 0, "eltwise.c has no activation '%s'", act_names[i]);
  return (struct _tsr_act_desc){.op = op, .alpha = LEAKY_ALPHA, .len = ACT_LEN};
}

static double act_ref(int i, double x) {
  const char *k = act_names[i];
  if (strcmp(k, "relu") == 0) return x > 0 ? x : 0;
  if (strcmp(k, "leaky_relu") == 0) return x > 0 ? x : LEAKY_ALPHA * x;
  if (strcmp(k, "tanh") == 0) return tanh(x);
  if (strcmp(k, "sigmoid") == 0) return 1 / (1 + exp(-x));
  if (strcmp(k, "gelu") == 0) return 0.5 * x * (1 + erf(x / sqrt(2.0)));
  ck_abort_msg("no float64 reference for '%s'", k);
  return NAN;
}

/* Keeps |x| >= 0.1 so finite differences never straddle relu's kink. */
static void fill_act_input(float *x, size_t n, uint64_t seed) {
  tt_fill_uniform(x, n, seed, -4, 4);
  for (size_t i = 0; i < n; i++)
    if (fabsf(x[i]) < 0.1f) x[i] = x[i] < 0 ? x[i] - 0.1f : x[i] + 0.1f;
}

START_TEST(act_forward_matches_reference) {
  for (int i = 0; i < NACT; i++) {
    struct _tsr_act_desc d = act_desc(i);
    float x[ACT_LEN], y[ACT_LEN];
    double ref[ACT_LEN];
    tt_fill_uniform(x, ACT_LEN, 40 + i, -6, 6);
    x[0] = 0, x[1] = -0.f;
    _tsr_act_fwd_cpu(&d, x, y);
    for (int j = 0; j < ACT_LEN; j++) ref[j] = act_ref(i, x[j]);
    tt_assert_close(y, ref, ACT_LEN, 1e-6, 1e-5, act_names[i]);
  }
}
END_TEST

struct act_fd {
  const struct _tsr_act_desc *d;
  float *x, *y;
  const float *r;
};

static double act_loss(void *user) {
  struct act_fd *p = user;
  _tsr_act_fwd_cpu(p->d, p->x, p->y);
  double s = 0;
  for (size_t i = 0; i < p->d->len; i++) s += (double)p->y[i] * p->r[i];
  return s;
}

START_TEST(act_backward_matches_finite_differences) {
  for (int i = 0; i < NACT; i++) {
    struct _tsr_act_desc d = act_desc(i);
    float x[ACT_LEN], y[ACT_LEN], r[ACT_LEN], dx[ACT_LEN];
    double fd[ACT_LEN];
    fill_act_input(x, ACT_LEN, 50 + i);
    tt_fill_uniform(r, ACT_LEN, 60 + i, -1, 1);
    struct act_fd p = {&d, x, y, r};
    tt_fd_grad(x, ACT_LEN, act_loss, &p, 1e-3, fd);
    _tsr_act_fwd_cpu(&d, x, y);
    for (int j = 0; j < ACT_LEN; j++) dx[j] = NAN;
    _tsr_act_bwd_cpu(&d, x, y, r, dx);
    tt_assert_close(dx, fd, ACT_LEN, 5e-4, 1e-3, act_names[i]);
  }
}
END_TEST

/* ---- through StarPU: tasks on both workers give the raw kernel's results ---- */

#define NSLICES 4

/* One oneDNN thread in the test's own thread too, as in a worker: two spinning OpenMP threads on
 * a loaded 2-core machine slow the finite differences ten-fold. */
static void one_thread(void) { _tsr_worker_enter(); }

static void starpu_setup(void) {
  _tsr_worker_enter();
  tt_starpu_start(2);
}
static void starpu_teardown(void) { tt_starpu_stop(); }

static starpu_data_handle_t register_bytes(void *ptr, size_t n) {
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)ptr, (uint32_t)n, 1);
  return h;
}

static void assert_same(const float *a, const float *b, size_t n, const char *what) {
  double *ref = malloc(n * sizeof *ref);
  for (size_t i = 0; i < n; i++) ref[i] = b[i];
  tt_assert_close(a, ref, n, 1e-7, 1e-6, what);
  free(ref);
}

/* Runs slices through the forward (bwd = 0) or backward task of case 1 pooling and compares. */
static void pool_task_case(int is_max, int bwd) {
  struct _tsr_pool_desc d = pool_case(1, is_max);
  size_t ni = in_len(&d), no = out_len(&d), wsb = _tsr_pool_ws_bytes(&d);
  float *x[NSLICES], *y[NSLICES], *dx[NSLICES], *want[NSLICES];
  unsigned char *ws[NSLICES];
  starpu_data_handle_t hin[NSLICES], hout[NSLICES], hws[NSLICES];
  for (int s = 0; s < NSLICES; s++) {
    x[s] = malloc(ni * sizeof(float)), y[s] = malloc(no * sizeof(float)), dx[s] = malloc(ni * sizeof(float));
    want[s] = malloc((bwd ? ni : no) * sizeof(float));
    ws[s] = malloc(wsb ? wsb : 1);
    fill_pool_input(&d, x[s], 70 + s);
    _tsr_pool_fwd_cpu(&d, x[s], bwd ? y[s] : want[s], ws[s]);
    if (bwd) {
      tt_fill_uniform(y[s], no, 80 + s, -1, 1); /* y now holds dy */
      _tsr_pool_bwd_cpu(&d, y[s], ws[s], want[s]);
      hin[s] = _tsr_register_floats(y[s], no);
      hout[s] = _tsr_register_floats(dx[s], ni);
    } else {
      hin[s] = _tsr_register_floats(x[s], ni);
      hout[s] = _tsr_register_floats(y[s], no);
      memset(ws[s], 0xff, wsb);
    }
    hws[s] = is_max ? register_bytes(ws[s], wsb) : NULL;
    int ret = bwd ? _tsr_insert_pool_bwd(&d, hin[s], hws[s], hout[s], "pool_bwd")
                  : _tsr_insert_pool_fwd(&d, hin[s], hout[s], hws[s], "pool_fwd");
    ck_assert_int_eq(ret, 0);
  }
  starpu_task_wait_for_all();
  for (int s = 0; s < NSLICES; s++) {
    starpu_data_unregister(hin[s]);
    starpu_data_unregister(hout[s]);
    if (hws[s]) starpu_data_unregister(hws[s]);
    assert_same(bwd ? dx[s] : y[s], want[s], bwd ? ni : no, bwd ? "pool_bwd task" : "pool_fwd task");
    if (!bwd && is_max) { /* the saved workspace must drive the raw backward to the same dx */
      float *dy = y[s], *a = malloc(ni * sizeof *a), *b = malloc(ni * sizeof *b);
      void *ws_raw = malloc(wsb);
      _tsr_pool_fwd_cpu(&d, x[s], want[s], ws_raw);
      _tsr_pool_bwd_cpu(&d, dy, ws[s], a);
      _tsr_pool_bwd_cpu(&d, dy, ws_raw, b);
      assert_same(a, b, ni, "pool_fwd task workspace");
      free(a), free(b), free(ws_raw);
    }
    free(x[s]), free(y[s]), free(dx[s]), free(want[s]), free(ws[s]);
  }
}

START_TEST(pool_fwd_task_matches_kernel) {
  pool_task_case(1, 0);
  pool_task_case(0, 0);
}
END_TEST

START_TEST(pool_bwd_task_matches_kernel) {
  pool_task_case(1, 1);
  pool_task_case(0, 1);
}
END_TEST

START_TEST(act_fwd_task_matches_kernel) {
  static float x[NACT][ACT_LEN], y[NACT][ACT_LEN], want[NACT][ACT_LEN];
  struct _tsr_act_desc d[NACT];
  starpu_data_handle_t hx[NACT], hy[NACT];
  for (int i = 0; i < NACT; i++) {
    d[i] = act_desc(i);
    tt_fill_uniform(x[i], ACT_LEN, 90 + i, -4, 4);
    _tsr_act_fwd_cpu(&d[i], x[i], want[i]);
    hx[i] = _tsr_register_floats(x[i], ACT_LEN);
    hy[i] = _tsr_register_floats(y[i], ACT_LEN);
    ck_assert_int_eq(_tsr_insert_act_fwd(&d[i], hx[i], hy[i], "act_fwd"), 0);
  }
  starpu_task_wait_for_all();
  for (int i = 0; i < NACT; i++) {
    starpu_data_unregister(hx[i]);
    starpu_data_unregister(hy[i]);
    assert_same(y[i], want[i], ACT_LEN, act_names[i]);
  }
}
END_TEST

START_TEST(act_bwd_task_matches_kernel) {
  static float x[NACT][ACT_LEN], y[NACT][ACT_LEN], dy[NACT][ACT_LEN], dx[NACT][ACT_LEN], want[NACT][ACT_LEN];
  struct _tsr_act_desc d[NACT];
  starpu_data_handle_t h[NACT][4];
  for (int i = 0; i < NACT; i++) {
    d[i] = act_desc(i);
    fill_act_input(x[i], ACT_LEN, 100 + i);
    tt_fill_uniform(dy[i], ACT_LEN, 110 + i, -1, 1);
    _tsr_act_fwd_cpu(&d[i], x[i], y[i]);
    _tsr_act_bwd_cpu(&d[i], x[i], y[i], dy[i], want[i]);
    float *bufs[4] = {x[i], y[i], dy[i], dx[i]};
    for (int b = 0; b < 4; b++) h[i][b] = _tsr_register_floats(bufs[b], ACT_LEN);
    ck_assert_int_eq(_tsr_insert_act_bwd(&d[i], h[i][0], h[i][1], h[i][2], h[i][3], "act_bwd"), 0);
  }
  starpu_task_wait_for_all();
  for (int i = 0; i < NACT; i++) {
    for (int b = 0; b < 4; b++) starpu_data_unregister(h[i][b]);
    assert_same(dx[i], want[i], ACT_LEN, act_names[i]);
  }
}
END_TEST

/* ---- the gelu layer kind: a model file names it, and a step runs its tasks ---- */

static int gelu_fill(void *user, int64_t step, int index, float *x, float *y) {
  for (int i = 0; i < 16; i++) x[i] = sinf(0.7f * i + index), y[i] = 0.1f * x[i];
  return 0;
}

START_TEST(gelu_model_file_loads_and_trains) {
  char path[512];
  snprintf(path, sizeof path, "%s/gelu.json", tt_tmpdir());
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("{\"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [1, 4, 4]},\n"
        "  {\"name\": \"c1\", \"type\": \"conv2d\", \"out_channels\": 2, \"kernel\": 3, \"padding\": 1},\n"
        "  {\"name\": \"g\", \"type\": \"gelu\"},\n"
        "  {\"name\": \"c2\", \"type\": \"conv2d\", \"out_channels\": 1, \"kernel\": 1}]}\n", f);
  fclose(f);
  tsr_model *m = NULL;
  ck_assert_msg(tsr_model_load_json(&m, NULL, path) == TSR_OK, "%s", tsr_last_error());
  tsr_layer_kind gelu;
  ck_assert_int_eq(tsr_layer_kind_parse("gelu", &gelu), TSR_OK);
  ck_assert_int_eq(tsr_model_layer_kind(m, 2), gelu);
  ck_assert_str_eq(tsr_layer_kind_name(gelu), "gelu");
  int c, h, w;
  ck_assert_int_eq(tsr_model_layer_shape(m, "g", &c, &h, &w), TSR_OK);
  ck_assert(c == 2 && h == 4 && w == 4);

  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 1, co.use_mpi = 0, co.verbose = 0;
  tsr_context *ctx = NULL;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 2;
  tsr_trainer *t = NULL;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, NULL, &o) == TSR_OK, "%s", tsr_last_error());
  int64_t id;
  double loss;
  ck_assert_int_eq(tsr_trainer_step(t, gelu_fill, NULL, &id), TSR_OK);
  ck_assert_msg(tsr_trainer_loss(t, id, &loss) == TSR_OK && isfinite(loss) && loss > 0, "loss %g", loss);
  tsr_trainer_destroy(t);
  tsr_context_destroy(ctx);
  tsr_model_destroy(m);
}
END_TEST

static Suite *make_pool_act_suite(void) {
  Suite *s = suite_create("pool_act");
  TCase *k = tcase_create("kernels");
  tcase_add_checked_fixture(k, one_thread, NULL);
  tcase_add_test(k, pool_max_forward_matches_reference);
  tcase_add_test(k, pool_avg_forward_counts_padding_like_reference);
  tcase_add_test(k, pool_ws_bytes_nonzero_for_max_only);
  tcase_add_test(k, pool_max_backward_matches_finite_differences);
  tcase_add_test(k, pool_avg_backward_matches_finite_differences);
  tcase_add_test(k, act_forward_matches_reference);
  tcase_add_test(k, act_backward_matches_finite_differences);
  suite_add_tcase(s, k);
  TCase *t = tcase_create("tasks");
  tcase_add_checked_fixture(t, starpu_setup, starpu_teardown);
  tcase_set_timeout(t, 20);
  tcase_add_test(t, pool_fwd_task_matches_kernel);
  tcase_add_test(t, pool_bwd_task_matches_kernel);
  tcase_add_test(t, act_fwd_task_matches_kernel);
  tcase_add_test(t, act_bwd_task_matches_kernel);
  suite_add_tcase(s, t);
  TCase *g = tcase_create("gelu_layer");
  tcase_set_timeout(g, 60);
  tcase_add_test(g, gelu_model_file_loads_and_trains);
  suite_add_tcase(s, g);
  return s;
}

TT_MAIN(make_pool_act_suite)

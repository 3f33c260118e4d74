/* Batch normalisation with per-slice statistics (the layer call's slice_stats, which asynchronous
 * slices set): the registry's batchnorm entry, called as the trainer calls it for two slices of 3
 * and 2 samples, each with its own state and its own gamma/beta gradient buffers, against a float64
 * reference that treats each slice as a batch of its own: outputs within 1e-5, running statistics
 * after both slices' momentum updates (in either order) within 1e-6, the input gradient and each
 * slice's gamma and beta gradients against finite differences of that slice's objective (plain), or
 * against the float64 per-slice backward (with the fused relu, whose kink finite differences would
 * straddle). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "layers/layer.h"
#include "testutil.h"

enum { N = 5, C = 3, H = 4, W = 5, HW = H * W, LEN = N * C * HW, S = 2 };
static const int SIZES[S] = {3, 2};
static const float EPS = 1e-5f, MOM = 0.1f;

static size_t off_of(int s) { return s == 0 ? 0 : (size_t)SIZES[0] * C * HW; }

/* Slice s's biased mean and variance per channel. */
static void ref_stats(const float *x, int s, double *mean, double *var) {
  const float *xs = x + off_of(s);
  const int n = SIZES[s];
  for (int c = 0; c < C; c++) {
    double sum = 0, ss = 0;
    for (int i = 0; i < n; i++)
      for (int k = 0; k < HW; k++) sum += xs[(i * C + c) * HW + k];
    mean[c] = sum / (n * HW);
    for (int i = 0; i < n; i++)
      for (int k = 0; k < HW; k++) {
        double e = xs[(i * C + c) * HW + k] - mean[c];
        ss += e * e;
      }
    var[c] = ss / (n * HW);
  }
}

/* Every slice normalised with its own statistics; relu after it when `relu`. */
static void ref_fwd(const float *x, const float *gamma, const float *beta, int relu, double *y) {
  for (int s = 0; s < S; s++) {
    double mean[C], var[C];
    ref_stats(x, s, mean, var);
    for (int i = 0; i < SIZES[s]; i++)
      for (int c = 0; c < C; c++)
        for (int k = 0; k < HW; k++) {
          size_t j = off_of(s) + (size_t)(i * C + c) * HW + k;
          double v = gamma[c] * (x[j] - mean[c]) / sqrt(var[c] + EPS) + beta[c];
          y[j] = relu && v < 0 ? 0 : v;
        }
  }
}

/* The per-slice backward in float64: g = dy (masked by the relu), per channel of slice s
 * dbeta = sum g, dgamma = sum g xhat, dx = gamma / sigma (g - dbeta / m - xhat dgamma / m). */
static void ref_bwd(const float *x, const float *gamma, const float *beta, int relu, const float *dy, double *dx,
                    double dgamma[S][C], double dbeta[S][C]) {
  double y[LEN];
  ref_fwd(x, gamma, beta, relu, y);
  for (int s = 0; s < S; s++) {
    double mean[C], var[C];
    ref_stats(x, s, mean, var);
    const int n = SIZES[s];
    for (int c = 0; c < C; c++) {
      double sg = 0, sgx = 0, sigma = sqrt(var[c] + EPS);
      for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
          for (int k = 0; k < HW; k++) {
            size_t j = off_of(s) + (size_t)(i * C + c) * HW + k;
            double g = relu && !(y[j] > 0) ? 0 : dy[j], xhat = (x[j] - mean[c]) / sigma;
            if (pass == 0)
              sg += g, sgx += g * xhat;
            else
              dx[j] = gamma[c] / sigma * (g - sg / (n * HW) - xhat * sgx / (n * HW));
          }
      dgamma[s][c] = sgx, dbeta[s][c] = sg;
    }
  }
}

/* ---- the entry through StarPU ---- */

struct bn_run {
  float x[LEN], gamma[C], beta[C], dy[LEN];
  float rm[C], rv[C], y[LEN], dx[LEN], dgamma[S][C], dbeta[S][C];
};

static int no_fold(void *owner, int k, int s) { return 0; }

static starpu_data_handle_t reg(void *p, size_t n, size_t size) {
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)p, (uint32_t)n, size);
  return h;
}

/* Forward and backward of both slices, as the trainer submits them with asynchronous slices
 * (dw_first: the gradient buffers hold NaN and must be written). */
static void run_entry(struct bn_run *r, int relu) {
  const struct _tsr_layer_ops *ops = _tsr_layer_ops_of(TSR_LAYER_BATCHNORM);
  ck_assert_ptr_nonnull(ops);
  tsr_layer_spec spec = tsr_layer_spec_default(TSR_LAYER_BATCHNORM);
  spec.eps = EPS, spec.momentum = MOM;
  struct _tsr_layer_view v = {.name = "bn", .spec = &spec, .ninputs = 1};
  v.in[0] = v.out = (struct _tsr_chw){C, H, W, 0};
  ck_assert_int_eq(ops->num_state(&v), 3);
  for (int c = 0; c < C; c++) r->rm[c] = 0, r->rv[c] = 1;
  for (int s = 0; s < S; s++)
    for (int c = 0; c < C; c++) r->dgamma[s][c] = r->dbeta[s][c] = NAN;
  starpu_data_handle_t hx[S], hy[S], hdy[S], hdx[S], hdg[S], hdb[S], hst[S][3];
  void *state[S][3];
  for (int s = 0; s < S; s++) {
    size_t n = (size_t)SIZES[s] * C * HW;
    hx[s] = reg(r->x + off_of(s), n, 4), hy[s] = reg(r->y + off_of(s), n, 4);
    hdy[s] = reg(r->dy + off_of(s), n, 4), hdx[s] = reg(r->dx + off_of(s), n, 4);
    hdg[s] = reg(r->dgamma[s], C, 4), hdb[s] = reg(r->dbeta[s], C, 4);
    for (int i = 0; i < 3; i++) {
      size_t count, size;
      ops->state(&v, i, &count, &size);
      state[s][i] = malloc(count * size);
      ck_assert_ptr_nonnull(state[s][i]);
      memset(state[s][i], 0xff, count * size); /* NaN: every sum must be written before it is read */
      hst[s][i] = reg(state[s][i], count, size);
    }
  }
  starpu_data_handle_t hw[4] = {reg(r->gamma, C, 4), reg(r->beta, C, 4), reg(r->rm, C, 4), reg(r->rv, C, 4)};
  const int slice_n[S] = {SIZES[0], SIZES[1]};
  for (int pass = 0; pass < 2; pass++)
    for (int s = 0; s < S; s++) {
      struct _tsr_layer_call c = {.v = &v,
                                  .s = s,
                                  .slices = S,
                                  .slice_n = slice_n,
                                  .batch = N,
                                  .train = 1,
                                  .parts = 1,
                                  .y = hy,
                                  .dy = hdy,
                                  .relu = relu,
                                  .dx_done = no_fold,
                                  .dw_first = 1,
                                  .dw_own = 1,
                                  .slice_stats = 1};
      c.x[0] = hx, c.dx[0] = hdx;
      for (int i = 0; i < 4; i++) c.w[i] = hw[i];
      c.dw[0] = hdg[s], c.dw[1] = hdb[s];
      for (int i = 0; i < 3; i++) c.state[i] = hst[s][i];
      ck_assert_int_eq(pass == 0 ? ops->forward(&c) : ops->backward(&c), 0);
    }
  ck_assert_int_eq(starpu_task_wait_for_all(), 0);
  for (int s = 0; s < S; s++) {
    starpu_data_handle_t h[] = {hx[s], hy[s], hdy[s], hdx[s], hdg[s], hdb[s], hst[s][0], hst[s][1], hst[s][2]};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) starpu_data_unregister(h[i]);
    for (int i = 0; i < 3; i++) free(state[s][i]);
  }
  for (int i = 0; i < 4; i++) starpu_data_unregister(hw[i]);
}

static void inputs(struct bn_run *r, uint64_t seed) {
  tt_fill_uniform(r->x, LEN, seed, 0.5f, 2.5f); /* a mean far from 0: a kernel that forgot to centre shows */
  for (size_t j = off_of(1); j < LEN; j++) r->x[j] = 3 * r->x[j] - 4; /* slice 1 another mean and spread */
  tt_fill_uniform(r->gamma, C, seed + 1, 0.5f, 1.5f);
  tt_fill_uniform(r->beta, C, seed + 2, -0.5f, 0.5f);
  tt_fill_uniform(r->dy, LEN, seed + 3, -1, 1);
}

/* The running statistics after the momentum updates of slice a, then of slice b (unbiased
 * variance over the slice's n HW values). */
static void ref_running(const float *x, int a, int b, double *rm, double *rv) {
  for (int c = 0; c < C; c++) rm[c] = 0, rv[c] = 1;
  for (int k = 0; k < 2; k++) {
    int s = k == 0 ? a : b;
    double mean[C], var[C], m = (double)SIZES[s] * HW;
    ref_stats(x, s, mean, var);
    for (int c = 0; c < C; c++)
      rm[c] = (1 - MOM) * rm[c] + MOM * mean[c], rv[c] = (1 - MOM) * rv[c] + MOM * var[c] * m / (m - 1);
  }
}

static int close_to(const float *a, const double *ref, int n, double tol) {
  for (int i = 0; i < n; i++)
    if (!(fabs(a[i] - ref[i]) <= tol * (1 + fabs(ref[i])))) return 0;
  return 1;
}

static void check_forward_and_running(const struct bn_run *r, int relu) {
  double y[LEN];
  ref_fwd(r->x, r->gamma, r->beta, relu, y);
  tt_assert_close(r->y, y, LEN, 1e-6, 1e-5, relu ? "y (relu)" : "y");
  double rm01[C], rv01[C], rm10[C], rv10[C];
  ref_running(r->x, 0, 1, rm01, rv01);
  ref_running(r->x, 1, 0, rm10, rv10);
  ck_assert_msg((close_to(r->rm, rm01, C, 1e-6) && close_to(r->rv, rv01, C, 1e-6)) ||
                    (close_to(r->rm, rm10, C, 1e-6) && close_to(r->rv, rv10, C, 1e-6)),
                "running statistics (mean %g %g %g, var %g %g %g) are neither slice 0's then slice 1's momentum "
                "update (mean %g .., var %g ..) nor the other order (mean %g .., var %g ..)",
                r->rm[0], r->rm[1], r->rm[2], r->rv[0], r->rv[1], r->rv[2], rm01[0], rv01[0], rm10[0], rv10[0]);
}

/* sum over slice `s` (or both: s < 0) of r . y, in float64 */
struct objective {
  const float *x, *gamma, *beta;
  const double *r;
  int s;
};

static double objective_fn(void *user) {
  const struct objective *o = user;
  double y[LEN], sum = 0;
  ref_fwd(o->x, o->gamma, o->beta, 0, y);
  size_t lo = o->s == 1 ? off_of(1) : 0, hi = o->s == 0 ? off_of(1) : LEN;
  for (size_t j = lo; j < hi; j++) sum += y[j] * o->r[j];
  return sum;
}

START_TEST(per_slice_statistics_match_float64_and_finite_differences) {
  static struct bn_run r;
  inputs(&r, 11);
  run_entry(&r, 0);
  check_forward_and_running(&r, 0);
  double rr[LEN], gx[LEN];
  for (int j = 0; j < LEN; j++) rr[j] = r.dy[j];
  struct objective o = {r.x, r.gamma, r.beta, rr, -1};
  tt_fd_grad(r.x, LEN, objective_fn, &o, 1e-3, gx); /* slices independent: the sum's gradient is each slice's */
  tt_assert_close(r.dx, gx, LEN, 2e-4, 1e-3, "dx against finite differences of the per-slice objective");
  for (int s = 0; s < S; s++) {
    double gg[C], gb[C];
    o.s = s;
    tt_fd_grad(r.gamma, C, objective_fn, &o, 1e-3, gg);
    tt_fd_grad(r.beta, C, objective_fn, &o, 1e-3, gb);
    tt_assert_close(r.dgamma[s], gg, C, 2e-4, 1e-4, s ? "slice 1's dgamma" : "slice 0's dgamma");
    tt_assert_close(r.dbeta[s], gb, C, 2e-4, 1e-4, s ? "slice 1's dbeta" : "slice 0's dbeta");
  }
}
END_TEST

START_TEST(per_slice_statistics_with_fused_relu_match_float64) {
  static struct bn_run r;
  inputs(&r, 23);
  run_entry(&r, 1);
  check_forward_and_running(&r, 1);
  double dx[LEN], dg[S][C], db[S][C];
  ref_bwd(r.x, r.gamma, r.beta, 1, r.dy, dx, dg, db);
  tt_assert_close(r.dx, dx, LEN, 1e-6, 1e-4, "dx (relu)");
  for (int s = 0; s < S; s++) {
    tt_assert_close(r.dgamma[s], dg[s], C, 1e-6, 1e-5, s ? "slice 1's dgamma (relu)" : "slice 0's dgamma (relu)");
    tt_assert_close(r.dbeta[s], db[s], C, 1e-6, 1e-5, s ? "slice 1's dbeta (relu)" : "slice 0's dbeta (relu)");
  }
}
END_TEST

static void starpu_up(void) { tt_starpu_start(2); }
static void starpu_down(void) { tt_starpu_stop(); }

static Suite *make_suite(void) {
  Suite *s = suite_create("bn_slice_stats");
  TCase *tc = tcase_create("per_slice");
  tcase_add_checked_fixture(tc, starpu_up, starpu_down);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, per_slice_statistics_match_float64_and_finite_differences);
  tcase_add_test(tc, per_slice_statistics_with_fused_relu_match_float64);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_suite)

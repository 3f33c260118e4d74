/* Batch normalisation across micro-batch slices against a float64 whole-batch reference (forward,
 * running statistics, eval, finite-difference gradients, fused relu on blocked layouts), dropout's
 * mask properties, and both operations run as StarPU tasks against the raw kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tessera/status.h>

#include "codelets.h"
#include "testutil.h"

/* ---- batch norm: whole-batch float64 reference ---- */

enum { N = 5, C = 3, H = 4, W = 5, HW = H * W, LEN = N * C * HW };
static const float EPS = 1e-5f, MOM = 0.1f;

/* Biased mean and variance per channel over the whole batch. */
static void ref_stats(const float *x, double *mean, double *var) {
  for (int c = 0; c < C; c++) {
    double s = 0, ss = 0;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < HW; k++) s += x[(n * C + c) * HW + k];
    mean[c] = s / (N * HW);
    for (int n = 0; n < N; n++)
      for (int k = 0; k < HW; k++) {
        double e = x[(n * C + c) * HW + k] - mean[c];
        ss += e * e;
      }
    var[c] = ss / (N * HW);
  }
}

static void ref_fwd(const float *x, const float *gamma, const float *beta, double *y) {
  double mean[C], var[C];
  ref_stats(x, mean, var);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int k = 0; k < HW; k++) {
        int i = (n * C + c) * HW + k;
        y[i] = gamma[c] * (x[i] - mean[c]) / sqrt(var[c] + EPS) + beta[c];
      }
}

/* Slices of the batch: `ns` slices whose sample counts are given in `sizes`. */
struct split {
  int ns, sizes[3];
};
static const struct split SPLITS[] = {{2, {3, 2}}, {3, {2, 2, 1}}};

static struct _tsr_bn_desc slice_desc(int n) {
  return (struct _tsr_bn_desc){.n = n, .c = C, .h = H, .w = W, .total = N, .eps = EPS, .momentum = MOM};
}

/* Training forward with the raw kernels, slice by slice, as the graph schedules it. */
static void slices_fwd(const struct split *sp, const float *x, const float *gamma, const float *beta, float *stat,
                       float *rmean, float *rvar, float *y) {
  double acc[2 * C] = {0};
  size_t off = 0;
  for (int s = 0; s < sp->ns; s++) {
    struct _tsr_bn_desc d = slice_desc(sp->sizes[s]);
    _tsr_bn_stats_cpu(&d, x + off, acc);
    off += (size_t)sp->sizes[s] * C * HW;
  }
  struct _tsr_bn_desc whole = slice_desc(sp->sizes[0]);
  _tsr_bn_finalize_cpu(&whole, acc, stat, rmean, rvar);
  off = 0;
  for (int s = 0; s < sp->ns; s++) {
    struct _tsr_bn_desc d = slice_desc(sp->sizes[s]);
    _tsr_bn_fwd_cpu(&d, x + off, stat, gamma, beta, y + off);
    off += (size_t)sp->sizes[s] * C * HW;
  }
}

static void slices_bwd(const struct split *sp, const float *x, const float *stat, const float *gamma,
                       const float *dy, float *dx, float *dgamma, float *dbeta) {
  double acc[2 * C] = {0};
  size_t off = 0;
  for (int s = 0; s < sp->ns; s++) {
    struct _tsr_bn_desc d = slice_desc(sp->sizes[s]);
    _tsr_bn_bwd_stats_cpu(&d, x + off, stat, dy + off, NULL, NULL, acc);
    off += (size_t)sp->sizes[s] * C * HW;
  }
  struct _tsr_bn_desc whole = slice_desc(sp->sizes[0]);
  _tsr_bn_bwd_params_cpu(&whole, acc, dgamma, dbeta);
  /* overwrite writes into buffers of NaN what adding into zeros gives, bitwise */
  float zg[C] = {0}, zb[C] = {0}, og[C], ob[C];
  for (int c = 0; c < C; c++) og[c] = ob[c] = NAN;
  _tsr_bn_bwd_params_cpu(&whole, acc, zg, zb);
  whole.overwrite = 1;
  _tsr_bn_bwd_params_cpu(&whole, acc, og, ob);
  ck_assert_msg(memcmp(og, zg, sizeof og) == 0 && memcmp(ob, zb, sizeof ob) == 0, "bwd_params with overwrite");
  off = 0;
  for (int s = 0; s < sp->ns; s++) {
    struct _tsr_bn_desc d = slice_desc(sp->sizes[s]);
    _tsr_bn_bwd_data_cpu(&d, x + off, stat, gamma, NULL, acc, dy + off, dx + off);
    off += (size_t)sp->sizes[s] * C * HW;
  }
}

/* Inputs with a mean far from 0, so a kernel that forgot to centre would show. */
static void bn_inputs(float *x, float *gamma, float *beta, uint64_t seed) {
  tt_fill_uniform(x, LEN, seed, 0.5f, 2.5f);
  tt_fill_uniform(gamma, C, seed + 1, 0.5f, 1.5f);
  tt_fill_uniform(beta, C, seed + 2, -0.5f, 0.5f);
}

START_TEST(bn_forward_over_slices_matches_whole_batch_reference) {
  for (size_t t = 0; t < sizeof(SPLITS) / sizeof(SPLITS[0]); t++) {
    float x[LEN], gamma[C], beta[C], stat[2 * C], rmean[C] = {0}, rvar[C] = {1, 1, 1}, y[LEN];
    double ref[LEN], mean[C], var[C], rstat[2 * C];
    bn_inputs(x, gamma, beta, 10 + t);
    /* the 3-slice case sits at a mean of ~100: centring must happen before scaling */
    if (t == 1)
      for (int i = 0; i < LEN; i++) x[i] += 100;
    slices_fwd(&SPLITS[t], x, gamma, beta, stat, rmean, rvar, y);
    ref_fwd(x, gamma, beta, ref);
    ref_stats(x, mean, var);
    for (int c = 0; c < C; c++) {
      rstat[c] = mean[c];
      rstat[C + c] = 1 / sqrt(var[c] + EPS);
    }
    tt_assert_close(stat, rstat, 2 * C, 1e-6, 1e-5, SPLITS[t].ns == 2 ? "stat (2 slices)" : "stat (3 slices)");
    tt_assert_close(y, ref, LEN, 1e-5, 1e-5, SPLITS[t].ns == 2 ? "y (2 slices)" : "y (3 slices)");
  }
}
END_TEST

START_TEST(bn_running_stats_follow_pytorch_formula) {
  float x[LEN], gamma[C], beta[C], stat[2 * C], rmean[C], rvar[C], y[LEN];
  double mean[C], var[C], want[2 * C];
  bn_inputs(x, gamma, beta, 20);
  tt_fill_uniform(rmean, C, 21, -1, 1);
  tt_fill_uniform(rvar, C, 22, 0.5f, 2);
  const double m = N * HW;
  ref_stats(x, mean, var);
  for (int c = 0; c < C; c++) {
    want[c] = (1 - MOM) * rmean[c] + MOM * mean[c];
    want[C + c] = (1 - MOM) * rvar[c] + MOM * var[c] * m / (m - 1); /* unbiased variance */
  }
  slices_fwd(&SPLITS[1], x, gamma, beta, stat, rmean, rvar, y);
  tt_assert_close(rmean, want, C, 1e-6, 1e-5, "running_mean");
  tt_assert_close(rvar, want + C, C, 1e-6, 1e-5, "running_var");
}
END_TEST

START_TEST(bn_eval_normalises_with_running_stats) {
  float x[LEN], gamma[C], beta[C], rmean[C], rvar[C], y[LEN];
  double ref[LEN];
  bn_inputs(x, gamma, beta, 30);
  tt_fill_uniform(rmean, C, 31, 0.5f, 2);
  tt_fill_uniform(rvar, C, 32, 0.2f, 2);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int k = 0; k < HW; k++) {
        int i = (n * C + c) * HW + k;
        ref[i] = gamma[c] * (x[i] - rmean[c]) / sqrt(rvar[c] + (double)EPS) + beta[c];
      }
  /* two slices, to check the offsets are the caller's business only */
  struct _tsr_bn_desc a = slice_desc(2), b = slice_desc(N - 2);
  _tsr_bn_fwd_eval_cpu(&a, x, rmean, rvar, gamma, beta, y);
  _tsr_bn_fwd_eval_cpu(&b, x + 2 * C * HW, rmean, rvar, gamma, beta, y + 2 * C * HW);
  tt_assert_close(y, ref, LEN, 1e-5, 1e-5, "eval y");
}
END_TEST

/* L = sum(y * r) over the whole batch, in float64 */
struct bn_loss {
  float *x, *gamma, *beta;
  const double *r;
};

static double bn_loss_fn(void *user) {
  struct bn_loss *l = user;
  double y[LEN], s = 0;
  ref_fwd(l->x, l->gamma, l->beta, y);
  for (int i = 0; i < LEN; i++) s += y[i] * l->r[i];
  return s;
}

START_TEST(bn_backward_over_slices_matches_finite_differences) {
  for (size_t t = 0; t < sizeof(SPLITS) / sizeof(SPLITS[0]); t++) {
    float x[LEN], gamma[C], beta[C], stat[2 * C], rmean[C] = {0}, rvar[C] = {1, 1, 1}, y[LEN];
    float dy[LEN], dx[LEN], dgamma[C], dbeta[C];
    double r[LEN], gx[LEN], gg[C], gb[C];
    bn_inputs(x, gamma, beta, 40 + t);
    tt_fill_uniform_d(r, LEN, 50 + t, -1, 1);
    for (int i = 0; i < LEN; i++) dy[i] = (float)r[i];
    slices_fwd(&SPLITS[t], x, gamma, beta, stat, rmean, rvar, y);
    /* the gradients accumulate: start from 0.25 and expect 0.25 + dL/dp */
    for (int c = 0; c < C; c++) dgamma[c] = dbeta[c] = 0.25f;
    slices_bwd(&SPLITS[t], x, stat, gamma, dy, dx, dgamma, dbeta);

    struct bn_loss l = {x, gamma, beta, r};
    tt_fd_grad(x, LEN, bn_loss_fn, &l, 1e-3, gx);
    tt_fd_grad(gamma, C, bn_loss_fn, &l, 1e-3, gg);
    tt_fd_grad(beta, C, bn_loss_fn, &l, 1e-3, gb);
    for (int c = 0; c < C; c++) {
      gg[c] += 0.25;
      gb[c] += 0.25;
    }
    int two = SPLITS[t].ns == 2;
    tt_assert_close(dx, gx, LEN, 2e-4, 1e-3, two ? "dx (2 slices)" : "dx (3 slices)");
    tt_assert_close(dgamma, gg, C, 2e-4, 1e-4, two ? "dgamma (2 slices)" : "dgamma (3 slices)");
    tt_assert_close(dbeta, gb, C, 2e-4, 1e-4, two ? "dbeta (2 slices)" : "dbeta (3 slices)");
  }
}
END_TEST

/* ---- batch norm + relu on blocked layouts (nChw{B}c, B = 8 and 16), against a float64 reference
 * computed on the plain layout: 19 channels leave padding lanes, which must stay 0. ---- */

enum { BN_ = 3, BC = 19, BHW = 7 };

static size_t blk_index(int blk, int n, int c, int k) {
  int nb = (BC + blk - 1) / blk;
  return (((size_t)n * nb + c / blk) * BHW + k) * blk + c % blk;
}

START_TEST(bn_relu_on_blocked_layouts_matches_float64_reference) {
  static const int blks[] = {8, 16}, sizes[] = {2, 1};
  enum { PLEN = BN_ * BC * BHW };
  float x[PLEN], dy[PLEN], gamma[BC], beta[BC];
  tt_fill_uniform(x, PLEN, 70, 0.5f, 3.5f);
  tt_fill_uniform(dy, PLEN, 71, -1, 1);
  tt_fill_uniform(gamma, BC, 72, 0.5f, 1.5f);
  tt_fill_uniform(beta, BC, 73, -0.5f, 0.5f);
  /* reference: z = bn(x), y = relu(z); g = dy (z > 0); dx = k (g - mean g - xhat mean(g xhat)) */
  double ry[PLEN], rdx[PLEN], rdg[BC], rdb[BC];
  for (int c = 0; c < BC; c++) {
    double s = 0, ss = 0, m = BN_ * BHW;
    for (int n = 0; n < BN_; n++)
      for (int k = 0; k < BHW; k++) s += x[(n * BC + c) * BHW + k];
    double mean = s / m;
    for (int n = 0; n < BN_; n++)
      for (int k = 0; k < BHW; k++) ss += pow(x[(n * BC + c) * BHW + k] - mean, 2);
    double invstd = 1 / sqrt(ss / m + EPS), sg = 0, sgx = 0;
    for (int n = 0; n < BN_; n++)
      for (int k = 0; k < BHW; k++) {
        int i = (n * BC + c) * BHW + k;
        double xh = (x[i] - mean) * invstd, z = gamma[c] * xh + beta[c], g = z > 0 ? dy[i] : 0;
        ry[i] = z > 0 ? z : 0;
        sg += g, sgx += g * xh;
      }
    rdg[c] = sgx, rdb[c] = sg;
    for (int n = 0; n < BN_; n++)
      for (int k = 0; k < BHW; k++) {
        int i = (n * BC + c) * BHW + k;
        double xh = (x[i] - mean) * invstd, g = ry[i] > 0 ? dy[i] : 0;
        rdx[i] = gamma[c] * invstd * (g - sg / m - xh * sgx / m);
      }
  }
  for (size_t b = 0; b < sizeof blks / sizeof blks[0]; b++) {
    int blk = blks[b];
    size_t blen = (size_t)BN_ * ((BC + blk - 1) / blk * blk) * BHW;
    float *bx = calloc(blen, 4), *bdy = calloc(blen, 4), *by = calloc(blen, 4), *bdx = calloc(blen, 4);
    for (int n = 0; n < BN_; n++)
      for (int c = 0; c < BC; c++)
        for (int k = 0; k < BHW; k++) {
          bx[blk_index(blk, n, c, k)] = x[(n * BC + c) * BHW + k];
          bdy[blk_index(blk, n, c, k)] = dy[(n * BC + c) * BHW + k];
        }
    float stat[2 * BC], rmean[BC] = {0}, rvar[BC] = {0}, dg[BC] = {0}, db[BC] = {0};
    double acc[2 * BC] = {0}, bacc[2 * BC] = {0};
    struct _tsr_bn_desc d[2];
    size_t off[2] = {0, (size_t)sizes[0] * blen / BN_};
    for (int s = 0; s < 2; s++) {
      d[s] = (struct _tsr_bn_desc){.n = sizes[s], .c = BC, .h = 1, .w = BHW, .total = BN_, .eps = EPS,
                                   .momentum = MOM, .blk = blk, .relu = 1};
      _tsr_bn_stats_cpu(&d[s], bx + off[s], acc);
    }
    _tsr_bn_finalize_cpu(&d[0], acc, stat, rmean, rvar);
    for (int s = 0; s < 2; s++) _tsr_bn_fwd_cpu(&d[s], bx + off[s], stat, gamma, beta, by + off[s]);
    for (int s = 0; s < 2; s++) _tsr_bn_bwd_stats_cpu(&d[s], bx + off[s], stat, bdy + off[s], gamma, beta, bacc);
    _tsr_bn_bwd_params_cpu(&d[0], bacc, dg, db);
    for (int s = 0; s < 2; s++)
      _tsr_bn_bwd_data_cpu(&d[s], bx + off[s], stat, gamma, beta, bacc, bdy + off[s], bdx + off[s]);
    float y[PLEN], dx[PLEN];
    for (int n = 0; n < BN_; n++)
      for (int c = 0; c < (BC + blk - 1) / blk * blk; c++)
        for (int k = 0; k < BHW; k++) {
          size_t e = blk_index(blk, n, c, k);
          if (c >= BC) {
            ck_assert_msg(by[e] == 0 && bdx[e] == 0, "blk %d: padding channel %d is not 0", blk, c);
            continue;
          }
          y[(n * BC + c) * BHW + k] = by[e], dx[(n * BC + c) * BHW + k] = bdx[e];
        }
    tt_assert_close(y, ry, PLEN, 1e-5, 1e-5, blk == 8 ? "y (nChw8c)" : "y (nChw16c)");
    tt_assert_close(dx, rdx, PLEN, 1e-5, 1e-4, blk == 8 ? "dx (nChw8c)" : "dx (nChw16c)");
    tt_assert_close(dg, rdg, BC, 1e-5, 1e-4, "dgamma");
    tt_assert_close(db, rdb, BC, 1e-5, 1e-4, "dbeta");
    free(bx), free(bdy), free(by), free(bdx);
  }
}
END_TEST

/* ---- dropout ---- */

enum { DN = 16, DC = 64, DH = 32, DW = 32, DLEN = DN * DC * DH * DW };

static struct _tsr_dropout_desc drop_desc(float p, int spatial) {
  return (struct _tsr_dropout_desc){.n = DN, .c = DC, .h = DH, .w = DW, .p = p, .spatial = spatial};
}

static float *drop_input(void) {
  float *x = malloc(DLEN * sizeof(float));
  ck_assert_ptr_nonnull(x);
  tt_fill_uniform(x, DLEN, 60, 0.5f, 1.5f); /* never 0, so y == 0 means dropped */
  return x;
}

START_TEST(dropout_keeps_fraction_1_minus_p_and_scales_kept) {
  const float p = 0.3f;
  float *x = drop_input(), *y = malloc(DLEN * sizeof(float));
  struct _tsr_dropout_desc d = drop_desc(p, 0);
  _tsr_dropout_fwd_cpu(&d, 1234, x, y);
  /* per-element ck_assert would cost a pipe write each (Check's mark_point): count, assert once */
  size_t kept = 0, bad = 0, first_bad = 0;
  for (size_t i = 0; i < DLEN; i++) {
    if (y[i] == 0) continue;
    kept++;
    double want = x[i] / (1.0 - p);
    if (!(fabs(y[i] - want) <= 1e-6 * want) && !bad++) first_bad = i;
  }
  ck_assert_msg(bad == 0, "%zu kept elements not x/(1-p), first %zu: %g for x = %g", bad, first_bad,
                y[first_bad], x[first_bad]);
  /* sd of the kept fraction is sqrt(p(1-p)/DLEN) ~ 4.5e-4 here; 2e-3 is over 4 sd */
  double frac = (double)kept / DLEN;
  ck_assert_msg(fabs(frac - (1 - p)) < 2e-3, "kept fraction %.5f, expected %.5f +- 2e-3", frac, 1 - p);
  free(x);
  free(y);
}
END_TEST

START_TEST(dropout_p0_is_identity) {
  float *x = drop_input(), *y = malloc(DLEN * sizeof(float));
  struct _tsr_dropout_desc d = drop_desc(0, 0);
  _tsr_dropout_fwd_cpu(&d, 7, x, y);
  ck_assert_msg(memcmp(x, y, DLEN * sizeof(float)) == 0, "p = 0 changed the input");
  free(x);
  free(y);
}
END_TEST

/* Fraction of elements whose kept/dropped state differs between two outputs. */
static double mask_difference(const float *a, const float *b) {
  size_t diff = 0;
  for (size_t i = 0; i < DLEN; i++) diff += (a[i] == 0) != (b[i] == 0);
  return (double)diff / DLEN;
}

START_TEST(dropout_mask_depends_on_seed_only) {
  const float p = 0.5f;
  float *x = drop_input(), *a = malloc(DLEN * sizeof(float)), *b = malloc(DLEN * sizeof(float));
  struct _tsr_dropout_desc d = drop_desc(p, 0);
  _tsr_dropout_fwd_cpu(&d, 99, x, a);
  _tsr_dropout_fwd_cpu(&d, 99, x, b);
  ck_assert_msg(memcmp(a, b, DLEN * sizeof(float)) == 0, "same seed gave different outputs");
  /* independent masks disagree on 2p(1-p) = 1/2 of the elements (sd 5e-4): the lowest and the
   * highest seed bit must each matter */
  const uint64_t others[] = {98, 99 | 1ull << 63};
  for (int k = 0; k < 2; k++) {
    _tsr_dropout_fwd_cpu(&d, others[k], x, b);
    double diff = mask_difference(a, b);
    ck_assert_msg(fabs(diff - 0.5) < 5e-3, "seeds 99 and %#llx: masks differ on %.4f, expected 0.5",
                  (unsigned long long)others[k], diff);
  }
  free(x);
  free(a);
  free(b);
}
END_TEST

START_TEST(dropout_backward_uses_forward_mask) {
  const float p = 0.2f;
  float *x = drop_input(), *y = malloc(DLEN * sizeof(float)), *dy = malloc(DLEN * sizeof(float));
  float *dx = malloc(DLEN * sizeof(float));
  tt_fill_uniform(dy, DLEN, 61, 0.5f, 1.5f);
  memset(dx, 0xff, DLEN * sizeof(float)); /* NaN: backward must overwrite */
  for (int spatial = 0; spatial < 2; spatial++) {
    struct _tsr_dropout_desc d = drop_desc(p, spatial);
    _tsr_dropout_fwd_cpu(&d, 555, x, y);
    _tsr_dropout_bwd_cpu(&d, 555, dy, dx);
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < DLEN; i++) {
      double want = y[i] == 0 ? 0 : dy[i] / (1.0 - p);
      if (!(fabs(dx[i] - want) <= 1e-6 * fabs(want)) && !bad++) first_bad = i;
    }
    ck_assert_msg(bad == 0, "spatial %d: %zu of dx disagree with the forward mask, first dx[%zu] = %g (y = %g)",
                  spatial, bad, first_bad, dx[first_bad], y[first_bad]);
  }
  free(x);
  free(y);
  free(dy);
  free(dx);
}
END_TEST

START_TEST(spatial_dropout_drops_whole_channels) {
  const float p = 0.4f;
  float *x = drop_input(), *y = malloc(DLEN * sizeof(float));
  struct _tsr_dropout_desc d = drop_desc(p, 1);
  _tsr_dropout_fwd_cpu(&d, 77, x, y);
  const size_t hw = DH * DW, planes = DN * DC;
  size_t dropped = 0, mixed = 0;
  for (size_t pl = 0; pl < planes; pl++) {
    size_t zeros = 0;
    for (size_t k = 0; k < hw; k++) zeros += y[pl * hw + k] == 0;
    mixed += zeros != 0 && zeros != hw;
    dropped += zeros == hw;
  }
  ck_assert_msg(mixed == 0, "%zu of %zu planes are partly dropped", mixed, planes);
  /* sd of the dropped fraction over 1024 planes ~ 0.015; 0.06 is 4 sd */
  double frac = (double)dropped / planes;
  ck_assert_msg(fabs(frac - p) < 0.06, "dropped plane fraction %.4f, expected %.2f +- 0.06", frac, p);
  free(x);
  free(y);
}
END_TEST

START_TEST(dropout_rejects_p_of_one) {
  struct _tsr_dropout_desc d = drop_desc(1.0f, 0);
  ck_assert_int_eq(_tsr_insert_dropout_fwd(&d, 1, NULL, NULL, "drop"), TSR_ERR_ARG);
  d.p = -0.1f;
  ck_assert_int_eq(_tsr_insert_dropout_bwd(&d, 1, NULL, NULL, "drop"), TSR_ERR_ARG);
}
END_TEST

/* ---- through StarPU ---- */

static void starpu_up(void) { tt_starpu_start(2); }
static void starpu_down(void) { tt_starpu_stop(); }

static starpu_data_handle_t register_doubles(double *p, size_t n) {
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)p, (uint32_t)n, sizeof(double));
  return h;
}

static void assert_same(const float *a, const float *b, size_t n, double rtol, const char *what) {
  double ref[LEN];
  ck_assert(n <= LEN);
  for (size_t i = 0; i < n; i++) ref[i] = b[i];
  tt_assert_close(a, ref, n, 1e-7, rtol, what);
}

START_TEST(bn_phases_as_tasks_over_two_slices_match_raw_kernels) {
  const struct split *sp = &SPLITS[0];
  float x[LEN], gamma[C], beta[C], dy[LEN];
  bn_inputs(x, gamma, beta, 70);
  tt_fill_uniform(dy, LEN, 71, -1, 1);

  float want_stat[2 * C], want_rm[C] = {0}, want_rv[C] = {1, 1, 1}, want_y[LEN], want_dx[LEN];
  float want_dg[C] = {0}, want_db[C] = {0};
  slices_fwd(sp, x, gamma, beta, want_stat, want_rm, want_rv, want_y);
  slices_bwd(sp, x, want_stat, gamma, dy, want_dx, want_dg, want_db);

  float stat[2 * C], rm[C] = {0}, rv[C] = {1, 1, 1}, y[LEN], dx[LEN], dg[C] = {0}, db[C] = {0};
  double acc[2 * C], bacc[2 * C];
  for (int c = 0; c < 2 * C; c++) acc[c] = bacc[c] = NAN;
  const size_t n0 = (size_t)sp->sizes[0] * C * HW, n1 = (size_t)sp->sizes[1] * C * HW;
  starpu_data_handle_t hx[2] = {_tsr_register_floats(x, n0), _tsr_register_floats(x + n0, n1)};
  starpu_data_handle_t hdy[2] = {_tsr_register_floats(dy, n0), _tsr_register_floats(dy + n0, n1)};
  starpu_data_handle_t hy[2] = {_tsr_register_floats(y, n0), _tsr_register_floats(y + n0, n1)};
  starpu_data_handle_t hdx[2] = {_tsr_register_floats(dx, n0), _tsr_register_floats(dx + n0, n1)};
  starpu_data_handle_t hg = _tsr_register_floats(gamma, C), hb = _tsr_register_floats(beta, C);
  starpu_data_handle_t hstat = _tsr_register_floats(stat, 2 * C);
  starpu_data_handle_t hrm = _tsr_register_floats(rm, C), hrv = _tsr_register_floats(rv, C);
  starpu_data_handle_t hdg = _tsr_register_floats(dg, C), hdb = _tsr_register_floats(db, C);
  starpu_data_handle_t hacc = register_doubles(acc, 2 * C), hbacc = register_doubles(bacc, 2 * C);

  struct _tsr_bn_desc d[2] = {slice_desc(sp->sizes[0]), slice_desc(sp->sizes[1])};
  /* slice 0's stats tasks write the accumulators (NaN before, registered above), slice 1's add */
  d[0].overwrite = 1;
  for (int s = 0; s < 2; s++) ck_assert_int_eq(_tsr_insert_bn_stats(&d[s], hx[s], hacc, "bn.stats"), 0);
  ck_assert_int_eq(_tsr_insert_bn_finalize(&d[0], hacc, hstat, hrm, hrv, "bn.finalize"), 0);
  for (int s = 0; s < 2; s++) ck_assert_int_eq(_tsr_insert_bn_fwd(&d[s], hx[s], hstat, hg, hb, hy[s], "bn.fwd"), 0);
  for (int s = 0; s < 2; s++)
    ck_assert_int_eq(_tsr_insert_bn_bwd_stats(&d[s], hx[s], hstat, hdy[s], NULL, NULL, hbacc, "bn.bwd_stats"), 0);
  d[0].overwrite = 0; /* bwd_params adds into dg, db */
  ck_assert_int_eq(_tsr_insert_bn_bwd_params(&d[0], hbacc, hdg, hdb, "bn.bwd_params"), 0);
  for (int s = 0; s < 2; s++)
    ck_assert_int_eq(_tsr_insert_bn_bwd_data(&d[s], hx[s], hstat, hg, NULL, hbacc, hdy[s], hdx[s], "bn.bwd_data"), 0);
  starpu_task_wait_for_all();
  starpu_data_handle_t all[] = {hx[0], hx[1], hdy[0], hdy[1], hy[0], hy[1], hdx[0], hdx[1], hg,
                                hb, hstat, hrm, hrv, hdg, hdb, hacc, hbacc};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) starpu_data_unregister(all[i]);

  /* the slices may be summed in the other order: allow rounding */
  assert_same(stat, want_stat, 2 * C, 1e-6, "stat");
  assert_same(rm, want_rm, C, 1e-6, "running_mean");
  assert_same(rv, want_rv, C, 1e-6, "running_var");
  assert_same(y, want_y, LEN, 1e-5, "y");
  assert_same(dx, want_dx, LEN, 1e-5, "dx");
  assert_same(dg, want_dg, C, 1e-5, "dgamma");
  assert_same(db, want_db, C, 1e-5, "dbeta");
}
END_TEST

START_TEST(bn_eval_as_task_matches_raw_kernel) {
  float x[LEN], gamma[C], beta[C], rm[C], rv[C], y[LEN], want[LEN];
  bn_inputs(x, gamma, beta, 80);
  tt_fill_uniform(rm, C, 81, 0.5f, 2);
  tt_fill_uniform(rv, C, 82, 0.2f, 2);
  struct _tsr_bn_desc d = slice_desc(N);
  _tsr_bn_fwd_eval_cpu(&d, x, rm, rv, gamma, beta, want);
  starpu_data_handle_t h[] = {_tsr_register_floats(x, LEN), _tsr_register_floats(rm, C), _tsr_register_floats(rv, C),
                              _tsr_register_floats(gamma, C), _tsr_register_floats(beta, C),
                              _tsr_register_floats(y, LEN)};
  ck_assert_int_eq(_tsr_insert_bn_fwd_eval(&d, h[0], h[1], h[2], h[3], h[4], h[5], "bn.eval"), 0);
  starpu_task_wait_for_all();
  for (int i = 0; i < 6; i++) starpu_data_unregister(h[i]);
  ck_assert_msg(memcmp(y, want, sizeof(y)) == 0, "eval task differs from the raw kernel");
}
END_TEST

START_TEST(dropout_as_tasks_matches_raw_kernels) {
  float *x = drop_input(), *y = malloc(DLEN * sizeof(float)), *dx = malloc(DLEN * sizeof(float));
  float *want_y = malloc(DLEN * sizeof(float)), *want_dx = malloc(DLEN * sizeof(float));
  for (int spatial = 0; spatial < 2; spatial++) {
    struct _tsr_dropout_desc d = drop_desc(0.25f, spatial);
    _tsr_dropout_fwd_cpu(&d, 4242, x, want_y);
    _tsr_dropout_bwd_cpu(&d, 4242, x, want_dx);
    starpu_data_handle_t hx = _tsr_register_floats(x, DLEN), hy = _tsr_register_floats(y, DLEN);
    starpu_data_handle_t hdx = _tsr_register_floats(dx, DLEN);
    ck_assert_int_eq(_tsr_insert_dropout_fwd(&d, 4242, hx, hy, "drop.fwd"), 0);
    ck_assert_int_eq(_tsr_insert_dropout_bwd(&d, 4242, hx, hdx, "drop.bwd"), 0);
    starpu_task_wait_for_all();
    starpu_data_unregister(hx);
    starpu_data_unregister(hy);
    starpu_data_unregister(hdx);
    ck_assert_msg(memcmp(y, want_y, DLEN * sizeof(float)) == 0, "spatial %d: forward task differs", spatial);
    ck_assert_msg(memcmp(dx, want_dx, DLEN * sizeof(float)) == 0, "spatial %d: backward task differs", spatial);
  }
  free(x);
  free(y);
  free(dx);
  free(want_y);
  free(want_dx);
}
END_TEST

static Suite *make_bn_dropout_suite(void) {
  Suite *s = suite_create("bn_dropout");
  TCase *bn = tcase_create("batchnorm");
  tcase_add_test(bn, bn_forward_over_slices_matches_whole_batch_reference);
  tcase_add_test(bn, bn_running_stats_follow_pytorch_formula);
  tcase_add_test(bn, bn_eval_normalises_with_running_stats);
  tcase_add_test(bn, bn_backward_over_slices_matches_finite_differences);
  tcase_add_test(bn, bn_relu_on_blocked_layouts_matches_float64_reference);
  suite_add_tcase(s, bn);
  TCase *dr = tcase_create("dropout");
  tcase_add_test(dr, dropout_keeps_fraction_1_minus_p_and_scales_kept);
  tcase_add_test(dr, dropout_p0_is_identity);
  tcase_add_test(dr, dropout_mask_depends_on_seed_only);
  tcase_add_test(dr, dropout_backward_uses_forward_mask);
  tcase_add_test(dr, spatial_dropout_drops_whole_channels);
  tcase_add_test(dr, dropout_rejects_p_of_one);
  suite_add_tcase(s, dr);
  TCase *sp = tcase_create("starpu");
  tcase_add_checked_fixture(sp, starpu_up, starpu_down);
  tcase_set_timeout(sp, 20);
  tcase_add_test(sp, bn_phases_as_tasks_over_two_slices_match_raw_kernels);
  tcase_add_test(sp, bn_eval_as_task_matches_raw_kernel);
  tcase_add_test(sp, dropout_as_tasks_matches_raw_kernels);
  suite_add_tcase(s, sp);
  return s;
}

TT_MAIN(make_bn_dropout_suite)

/* Suite "bn_rows": batch normalisation's kernels (codelets/batchnorm.c over batchnorm_rows.c) on
 * both sets of loops, the AVX-512F one (where the CPU has it) and the portable one, for plain NCHW
 * and the blocked layouts nChw8c and nChw16c, x and y in float32 or bf16, with and without the fused
 * relu, the gradients dy and dx in float32 or (with bf16 x and y) bf16, on shapes whose rows end in
 * a partial vector and whose last channel block is padded:
 *  - every output (statistics, running statistics, y, the gradient sums, dgamma, dbeta, dx) is
 *    bitwise the same on both sets;
 *  - each against a float64 reference on the stored x and dy (bf16 x, dy are exactly their bf16
 *    values);
 *  - y's bf16 rounding is convert.c's (nearest even, subnormals, overflow, NaN) on both sets;
 *  - with bf16 gradients, the sums are bitwise those of float32 dy holding the same values, and each
 *    bf16 dx is the float32 dx of that run rounded by convert.c, bitwise;
 *  - a dx added into (dx_add: a gradient holding other consumers' contributions) is the written dx
 *    plus those contents, bitwise (the accumulate task's one addition; in bf16 the sum of the rounded
 *    dx rounded), on both sets;
 *  - the relu's mask, which the backward recomputes from x, gamma and beta, is the stored y's also
 *    where the forward's value is a float32 subnormal that rounds to 0 in bf16, or +0 from -0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "batchnorm_rows.h"
#include "codelets.h"
#include "convert.h"
#include "testutil.h"

enum { S = 2, NS = 2, C = 20, H = 5, W = 5, HW = H * W, NALL = S * NS * C * HW };
static const float EPS = 1e-5f;

struct cfg {
  int blk, bf16, relu, grad; /* grad: dy and dx stored in bf16 */
};

/* index of (sample n, channel c, pixel k) in a slice stored in layout blk (0: plain) */
static size_t idx(int blk, int n, int c, int k) {
  if (!blk) return ((size_t)n * C + c) * HW + k;
  int nb = (C + blk - 1) / blk;
  return (((size_t)n * nb + c / blk) * HW + k) * blk + c % blk;
}

static size_t slice_len(int blk) { return (size_t)NS * (blk ? (C + blk - 1) / blk * blk : C) * HW; }

/* value of plain element (sample n of the whole batch, channel c, pixel k) */
static size_t at(int n, int c, int k) { return ((size_t)n * C + c) * HW + k; }

struct run {
  float stat[2 * C], rmean[C], rvar[C], dgamma[C], dbeta[C];
  double acc[2 * C], bacc[2 * C];
  void *x[S], *y[S]; /* stored (float32 or bf16, layout blk) */
  void *dy[S], *dx[S]; /* float32, or bf16 with cfg.grad */
};

/* The trainer's sequence over S slices: stats, finalize, fwd, bwd stats, bwd params, bwd data. With
 * `pre` (in dx's format), each slice's dx starts as pre's first slice_len values and the data
 * gradient is added into it (dx_add). */
static void run_bn_into(const struct cfg *g, const float *x, const float *dy, const float *gamma, const float *beta,
                        const float *pre, struct run *r) {
  const size_t len = slice_len(g->blk), es = g->bf16 ? 2 : 4, eg = g->grad ? 2 : 4;
  for (int s = 0; s < S; s++) {
    r->x[s] = calloc(len, es), r->y[s] = calloc(len, es);
    r->dy[s] = calloc(len, eg), r->dx[s] = calloc(len, eg);
    if (pre) memcpy(r->dx[s], pre, len * eg);
    for (int n = 0; n < NS; n++)
      for (int c = 0; c < C; c++)
        for (int k = 0; k < HW; k++) {
          size_t e = idx(g->blk, n, c, k);
          float v = x[at(s * NS + n, c, k)];
          if (g->bf16) ((uint16_t *)r->x[s])[e] = _tsr_f32_to_bf16(v);
          else ((float *)r->x[s])[e] = v;
          if (g->grad) ((uint16_t *)r->dy[s])[e] = _tsr_f32_to_bf16(dy[at(s * NS + n, c, k)]);
          else ((float *)r->dy[s])[e] = dy[at(s * NS + n, c, k)];
        }
  }
  for (int c = 0; c < C; c++) r->rmean[c] = 0.5f, r->rvar[c] = 2.0f;
  struct _tsr_bn_desc d = {.n = NS, .c = C, .h = H, .w = W, .total = S * NS, .eps = EPS, .momentum = 0.1f,
                           .blk = g->blk, .relu = g->relu, .x_bf16 = g->bf16, .y_bf16 = g->bf16,
                           .dy_bf16 = g->grad, .dx_bf16 = g->grad};
  for (int s = 0; s < S; s++) {
    d.overwrite = s == 0;
    _tsr_bn_stats_cpu(&d, r->x[s], r->acc);
  }
  _tsr_bn_finalize_cpu(&d, r->acc, r->stat, r->rmean, r->rvar);
  for (int s = 0; s < S; s++) _tsr_bn_fwd_cpu(&d, r->x[s], r->stat, gamma, beta, r->y[s]);
  for (int s = 0; s < S; s++) {
    d.overwrite = s == 0;
    _tsr_bn_bwd_stats_cpu(&d, r->x[s], r->stat, r->dy[s], gamma, beta, r->bacc);
  }
  d.overwrite = 1;
  _tsr_bn_bwd_params_cpu(&d, r->bacc, r->dgamma, r->dbeta);
  d.dx_add = pre != NULL;
  for (int s = 0; s < S; s++)
    _tsr_bn_bwd_data_cpu(&d, r->x[s], r->stat, gamma, beta, r->bacc, r->dy[s], r->dx[s]);
}

static void run_bn(const struct cfg *g, const float *x, const float *dy, const float *gamma, const float *beta,
                   struct run *r) {
  run_bn_into(g, x, dy, gamma, beta, NULL, r);
}

static void free_run(struct run *r) {
  for (int s = 0; s < S; s++) free(r->x[s]), free(r->y[s]), free(r->dy[s]), free(r->dx[s]);
}

/* element e of slice s's stored buffer (bf16 or float32) as float32 */
static float stored_as(int bf16, void *const *b, int s, size_t e) {
  return bf16 ? _tsr_bf16_to_f32(((const uint16_t *)b[s])[e]) : ((const float *)b[s])[e];
}
static float stored(const struct cfg *g, void *const *b, int s, size_t e) { return stored_as(g->bf16, b, s, e); }

static const char *name_of(const struct cfg *g) {
  static char buf[64];
  snprintf(buf, sizeof buf, "%s, %s, %s, %s gradients", g->blk == 16 ? "nChw16c" : g->blk == 8 ? "nChw8c" : "nchw",
           g->bf16 ? "bf16" : "f32", g->relu ? "relu" : "no relu", g->grad ? "bf16" : "f32");
  return buf;
}

/* Against float64 on the stored x and dy: float32 arithmetic errs by 1e-5 + 1e-4 |ref| (the float32
 * suites' bound), a bf16 y's or dx's one rounding (half an ulp, 2^-9 relative) by 2^-8 (|ref| + 1e-5)
 * more; gradient sums over the batch 1e-5 + 1e-4 sum |terms|. The relu's mask in the reference is
 * the stored y's, as the kernels'. */
static void check_reference(const struct cfg *g, const float *dy_in, const float *gamma, const float *beta,
                            struct run *r) {
  const char *nm = name_of(g);
  float *xv = malloc(NALL * 4), *yv = malloc(NALL * 4), *dxv = malloc(NALL * 4), *dy = malloc(NALL * 4);
  for (int s = 0; s < S; s++)
    for (int n = 0; n < NS; n++)
      for (int c = 0; c < C; c++)
        for (int k = 0; k < HW; k++) {
          size_t e = idx(g->blk, n, c, k), p = at(s * NS + n, c, k);
          xv[p] = stored(g, r->x, s, e), yv[p] = stored(g, r->y, s, e), dxv[p] = stored_as(g->grad, r->dx, s, e);
          dy[p] = stored_as(g->grad, r->dy, s, e);
          ck_assert_msg(dy[p] == (g->grad ? _tsr_bf16_to_f32(_tsr_f32_to_bf16(dy_in[p])) : dy_in[p]),
                        "%s: dy[%zu] not stored as given", nm, p);
        }
  for (int s = 0; s < S && g->blk; s++) /* padding channels of the last block stay 0 */
    for (int n = 0; n < NS; n++)
      for (int c = C; c < (C + g->blk - 1) / g->blk * g->blk; c++)
        for (int k = 0; k < HW; k++) {
          size_t e = idx(g->blk, n, c, k);
          ck_assert_msg(stored(g, r->y, s, e) == 0 && stored_as(g->grad, r->dx, s, e) == 0,
                        "%s: padding channel %d not 0", nm, c);
        }
  double *yref = malloc(NALL * 8), *dxref = malloc(NALL * 8);
  const double M = (double)S * NS * HW;
  for (int c = 0; c < C; c++) {
    double m = 0, v = 0, sg = 0, sgx = 0, gmag = 0, bmag = 0;
    for (int n = 0; n < S * NS; n++)
      for (int k = 0; k < HW; k++) m += xv[at(n, c, k)];
    m /= M;
    for (int n = 0; n < S * NS; n++)
      for (int k = 0; k < HW; k++) v += (xv[at(n, c, k)] - m) * (xv[at(n, c, k)] - m);
    v /= M;
    const double is = 1 / sqrt(v + EPS);
    ck_assert_msg(fabs(r->stat[c] - m) <= 1e-6 * (1 + fabs(m)) && fabs(r->stat[C + c] - is) <= 1e-6 * is,
                  "%s: channel %d mean %.8g invstd %.8g, float64 %.8g %.8g", nm, c, r->stat[c], r->stat[C + c], m, is);
    ck_assert_msg(fabs(r->rmean[c] - (0.9 * 0.5 + 0.1 * m)) <= 1e-6 &&
                      fabs(r->rvar[c] - (0.9 * 2 + 0.1 * v * M / (M - 1))) <= 1e-6 * (1 + v),
                  "%s: channel %d running mean %.8g var %.8g", nm, c, r->rmean[c], r->rvar[c]);
    for (int n = 0; n < S * NS; n++)
      for (int k = 0; k < HW; k++) {
        size_t p = at(n, c, k);
        double xh = (xv[p] - m) * is, o = gamma[c] * xh + beta[c];
        yref[p] = g->relu && o < 0 ? 0 : o;
        double gr = g->relu && !(yv[p] > 0) ? 0 : dy[p];
        sg += gr, sgx += gr * xh, bmag += fabs(gr), gmag += fabs(gr * xh);
      }
    ck_assert_msg(fabs(r->dgamma[c] - sgx) <= 1e-5 + 1e-4 * gmag && fabs(r->dbeta[c] - sg) <= 1e-5 + 1e-4 * bmag,
                  "%s: channel %d dgamma %.8g dbeta %.8g, float64 %.8g %.8g", nm, c, r->dgamma[c], r->dbeta[c], sgx, sg);
    for (int n = 0; n < S * NS; n++)
      for (int k = 0; k < HW; k++) {
        size_t p = at(n, c, k);
        double xh = (xv[p] - m) * is, gr = g->relu && !(yv[p] > 0) ? 0 : dy[p];
        dxref[p] = gamma[c] * is * (gr - sg / M - xh * sgx / M);
      }
  }
  for (size_t p = 0; p < NALL; p++) {
    double a = fabs(yref[p]), bound = 1e-5 + 1e-4 * a + (g->bf16 ? 0x1p-8 * (a + 1e-5) : 0);
    ck_assert_msg(fabs(yv[p] - yref[p]) <= bound, "%s: y[%zu] %.8g, float64 %.8g", nm, p, (double)yv[p], yref[p]);
  }
  tt_assert_close(dxv, dxref, NALL, g->grad ? 1e-5 + 0x1p-8 * 1e-5 : 1e-5, g->grad ? 1e-4 + 0x1p-8 : 1e-4, nm);
  free(xv), free(yv), free(dxv), free(dy), free(yref), free(dxref);
}

static void inputs(float *x, float *dy, float *gamma, float *beta, int seed) {
  tt_fill_uniform(x, NALL, 100 + seed, -2, 3);
  tt_fill_uniform(dy, NALL, 200 + seed, -1, 1);
  tt_fill_uniform(gamma, C, 300 + seed, 0.5, 1.5);
  tt_fill_uniform(beta, C, 400 + seed, -0.5, 0.5);
}

static const struct cfg cfgs[] = {
    {0, 0, 0, 0},  {0, 0, 1, 0},  {0, 1, 0, 0},  {0, 1, 1, 0},  {8, 0, 0, 0},  {8, 0, 1, 0},
    {8, 1, 0, 0},  {8, 1, 1, 0},  {16, 0, 0, 0}, {16, 0, 1, 0}, {16, 1, 0, 0}, {16, 1, 1, 0},
    {0, 1, 0, 1},  {0, 1, 1, 1},  {8, 1, 0, 1},  {8, 1, 1, 1},  {16, 1, 0, 1}, {16, 1, 1, 1},
};
#define NCFG ((int)(sizeof cfgs / sizeof cfgs[0]))

/* Loop _i: one configuration on the portable loops, on the AVX-512 ones, and both bitwise equal. */
START_TEST(kernels_match_float64_and_both_loop_sets_agree_bitwise) {
  const struct cfg *g = &cfgs[_i];
  const char *nm = name_of(g);
  float *x = malloc(NALL * 4), *dy = malloc(NALL * 4), gamma[C], beta[C];
  inputs(x, dy, gamma, beta, _i);
  struct run p, v;
  _tsr_bn_rows_use(_tsr_bn_rows_portable());
  ck_assert_str_eq(_tsr_bn_rows()->name, "portable");
  run_bn(g, x, dy, gamma, beta, &p);
  check_reference(g, dy, gamma, beta, &p);
  const struct _tsr_bn_rows *avx = _tsr_bn_rows_avx512();
  _tsr_bn_rows_use(NULL);
  if (!avx) {
    free_run(&p), free(x), free(dy);
    tt_skip("AVX-512 loops not checked: this CPU (or build) has no AVX-512F");
    return;
  }
  ck_assert_str_eq(_tsr_bn_rows()->name, "avx512f"); /* the default where the CPU has it */
  run_bn(g, x, dy, gamma, beta, &v);
  check_reference(g, dy, gamma, beta, &v);
  const size_t len = slice_len(g->blk), es = g->bf16 ? 2 : 4, eg = g->grad ? 2 : 4;
  ck_assert_msg(!memcmp(p.acc, v.acc, sizeof p.acc) && !memcmp(p.stat, v.stat, sizeof p.stat) &&
                    !memcmp(p.rmean, v.rmean, sizeof p.rmean) && !memcmp(p.rvar, v.rvar, sizeof p.rvar),
                "%s: statistics differ between the portable and AVX-512 loops", nm);
  ck_assert_msg(!memcmp(p.bacc, v.bacc, sizeof p.bacc) && !memcmp(p.dgamma, v.dgamma, sizeof p.dgamma) &&
                    !memcmp(p.dbeta, v.dbeta, sizeof p.dbeta),
                "%s: gradient sums differ between the portable and AVX-512 loops", nm);
  for (int s = 0; s < S; s++) {
    ck_assert_msg(!memcmp(p.y[s], v.y[s], len * es), "%s: y of slice %d differs between the loop sets", nm, s);
    ck_assert_msg(!memcmp(p.dx[s], v.dx[s], len * eg), "%s: dx of slice %d differs between the loop sets", nm, s);
  }
  free_run(&p), free_run(&v), free(x), free(dy);
}
END_TEST

/* Loop _i over the configurations with the relu, on both loop sets: channels 3-7 hold one value
 * (x - mean = 0, so the forward's value is beta) with beta the smallest float32 subnormal and 2^-134
 * (y > 0 in float32, 0 once rounded to bf16: 2^-134 is a tie that rounds to the even 0), -0 (y = +0),
 * 1e-30 and 2^-133 (y > 0 in both: 2^-133 rounds to bf16's smallest subnormal). check_reference
 * masks with the stored y, so a mask that misses y's rounding by one step either way, or keeps the
 * sign of -0, shows as a gradient off by about gamma invstd dy. */
START_TEST(relu_mask_is_the_stored_ys_at_zero_and_subnormals) {
  const struct cfg *g = &cfgs[_i];
  if (!g->relu) return;
  float *x = malloc(NALL * 4), *dy = malloc(NALL * 4), gamma[C], beta[C];
  inputs(x, dy, gamma, beta, _i);
  for (int c = 3; c <= 7; c++)
    for (int n = 0; n < S * NS; n++)
      for (int k = 0; k < HW; k++) x[at(n, c, k)] = 0.5f;
  beta[3] = 0x1p-149f, beta[4] = -0.0f, beta[5] = 1e-30f, beta[6] = 0x1p-134f, beta[7] = 0x1p-133f;
  const struct _tsr_bn_rows *sets[2] = {_tsr_bn_rows_portable(), _tsr_bn_rows_avx512()};
  for (int k = 0; k < 2 && sets[k]; k++) {
    struct run r;
    _tsr_bn_rows_use(sets[k]);
    run_bn(g, x, dy, gamma, beta, &r);
    check_reference(g, dy, gamma, beta, &r);
    /* the stored y: channels 3 and 6 positive in float32, 0 in bf16; channel 7 positive in both */
    for (int c = 3; c <= 7; c++) {
      int pos = c == 5 || c == 7 || (!g->bf16 && (c == 3 || c == 6));
      ck_assert_msg((stored(g, r.y, 0, idx(g->blk, 0, c, 0)) > 0) == pos, "%s: y of channel %d is %.9g", name_of(g),
                    c, (double)stored(g, r.y, 0, idx(g->blk, 0, c, 0)));
    }
    free_run(&r);
  }
  _tsr_bn_rows_use(NULL);
  free(x), free(dy);
}
END_TEST

/* Loop _i over the configurations with bf16 gradients, on the loops in use: the run with bf16 dy
 * and dx against the run with float32 dy holding the same (bf16) values and float32 dx. Loading a
 * bf16 dy must change nothing (sums bitwise equal), and each bf16 dx must be that run's float32 dx
 * rounded to nearest even (convert.c), bitwise: a wrong rounding (truncation, a lost tie rule) or a
 * gradient read or written in the wrong format fails. */
START_TEST(bf16_gradients_are_float32_ones_rounded) {
  const struct cfg *g = &cfgs[_i];
  if (!g->grad) return;
  struct cfg f = *g;
  f.grad = 0;
  float *x = malloc(NALL * 4), *dy = malloc(NALL * 4), gamma[C], beta[C];
  inputs(x, dy, gamma, beta, _i);
  for (size_t p = 0; p < NALL; p++) dy[p] = _tsr_bf16_to_f32(_tsr_f32_to_bf16(dy[p]));
  struct run b, r;
  run_bn(g, x, dy, gamma, beta, &b);
  run_bn(&f, x, dy, gamma, beta, &r);
  const char *nm = name_of(g);
  ck_assert_msg(!memcmp(b.bacc, r.bacc, sizeof b.bacc) && !memcmp(b.dgamma, r.dgamma, sizeof b.dgamma) &&
                    !memcmp(b.dbeta, r.dbeta, sizeof b.dbeta),
                "%s: gradient sums differ from float32 dy of the same values", nm);
  const size_t len = slice_len(g->blk);
  for (int s = 0; s < S; s++)
    for (size_t e = 0; e < len; e++) {
      uint16_t got = ((const uint16_t *)b.dx[s])[e], want = _tsr_f32_to_bf16(((const float *)r.dx[s])[e]);
      ck_assert_msg(got == want, "%s: bf16 dx[%zu] of slice %d is 0x%04x, float32 dx %.9g rounds to 0x%04x", nm, e, s,
                    got, (double)((const float *)r.dx[s])[e], want);
    }
  free_run(&b), free_run(&r), free(x), free(dy);
}
END_TEST

/* Loop _i over every configuration, on each loop set: dx added into a buffer of other values
 * (padding channels included, rows with partial vectors) is bitwise that buffer plus the dx written
 * into a zeroed one, element by element; with bf16 gradients the written dx is already rounded and
 * the sum is rounded (convert.c), as the accumulate task sums two bf16 contributions. A kernel that
 * overwrote, added twice, added an unrounded or contracted value, or lost a row's tail fails. */
START_TEST(dx_added_into_is_the_written_dx_plus_the_contents) {
  const struct cfg *g = &cfgs[_i];
  float *x = malloc(NALL * 4), *dy = malloc(NALL * 4), gamma[C], beta[C];
  inputs(x, dy, gamma, beta, _i);
  const size_t len = slice_len(g->blk);
  float *pre = malloc(len * 4);
  tt_fill_uniform(pre, len, 500 + _i, -3, 3);
  if (g->grad) /* the contents in bf16: the first len halves of the buffer */
    for (size_t e = 0; e < len; e++) ((uint16_t *)pre)[e] = _tsr_f32_to_bf16(pre[e]);
  const struct _tsr_bn_rows *sets[2] = {_tsr_bn_rows_portable(), _tsr_bn_rows_avx512()};
  for (int k = 0; k < 2 && sets[k]; k++) {
    _tsr_bn_rows_use(sets[k]);
    struct run w, a;
    run_bn(g, x, dy, gamma, beta, &w);
    run_bn_into(g, x, dy, gamma, beta, pre, &a);
    for (int s = 0; s < S; s++)
      for (size_t e = 0; e < len; e++) {
        float c = stored_as(g->grad, (void *const *)&pre, 0, e), v = stored_as(g->grad, w.dx, s, e);
        float want = g->grad ? _tsr_bf16_to_f32(_tsr_f32_to_bf16(c + v)) : c + v;
        float got = stored_as(g->grad, a.dx, s, e);
        ck_assert_msg(!memcmp(&got, &want, sizeof got), "%s, %s loops: dx[%zu] of slice %d is %.9g, %.9g + %.9g = %.9g",
                      name_of(g), sets[k]->name, e, s, (double)got, (double)c, (double)v, (double)want);
      }
    free_run(&w), free_run(&a);
  }
  _tsr_bn_rows_use(NULL);
  free(pre), free(x), free(dy);
  if (!sets[1]) tt_skip("AVX-512 loops not checked: this CPU (or build) has no AVX-512F");
}
END_TEST

/* y = 1 (x - 0) + (-0) is x exactly, so a bf16 y is x rounded: convert.c's _tsr_f32_to_bf16 on
 * ties (to even), subnormals, the largest floats (to infinity), infinities and NaNs (quiet). */
START_TEST(bf16_rounding_is_convert_c_on_both_loop_sets) {
  static const uint32_t special[] = {
      0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, 0xbf808000, 0xbf818000, 0x00000001, 0x00008000,
      0x00018000, 0x0000ffff, 0x807fffff, 0x007f8000, 0x7f7fffff, 0x7f7f7fff, 0x7f7f8000, 0xff7fffff,
      0x7f800000, 0xff800000, 0x7fc00001, 0x7f800001, 0xff800001, 0x7fffffff, 0xffffffff, 0x7fff8000,
      0x80000000, 0x00000000, 0x3f800000,
  };
  enum { NV = 24 * 8, NSPECIAL = sizeof special / sizeof special[0] }; /* then random bit patterns; 8 rows of 24 */
  uint32_t bits[NV];
  memcpy(bits, special, sizeof special);
  uint64_t z = 12345;
  for (int i = NSPECIAL; i < NV; i++) z = z * 6364136223846793005ull + 1442695040888963407ull, bits[i] = (uint32_t)(z >> 32);
  float x[NV];
  memcpy(x, bits, sizeof x);
  const float gamma[1] = {1}, beta[1] = {-0.0f}, stat[2] = {0, 1};
  const struct _tsr_bn_rows *sets[2] = {_tsr_bn_rows_portable(), _tsr_bn_rows_avx512()};
  for (int k = 0; k < 2; k++) {
    if (!sets[k]) {
      tt_skip("AVX-512 loops not checked: this CPU (or build) has no AVX-512F");
      break;
    }
    _tsr_bn_rows_use(sets[k]);
    uint16_t y[NV];
    struct _tsr_bn_desc d = {.n = 8, .c = 1, .h = 4, .w = 6, .total = 8, .eps = 0, .y_bf16 = 1};
    _tsr_bn_fwd_cpu(&d, x, stat, gamma, beta, (float *)y);
    for (int i = 0; i < NV; i++)
      ck_assert_msg(y[i] == _tsr_f32_to_bf16(x[i]), "%s loops: 0x%08x rounds to 0x%04x, convert.c 0x%04x",
                    sets[k]->name, bits[i], y[i], _tsr_f32_to_bf16(x[i]));
  }
  _tsr_bn_rows_use(NULL);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("bn_rows");
  TCase *t = tcase_create("kernels");
  tcase_add_loop_test(t, kernels_match_float64_and_both_loop_sets_agree_bitwise, 0, NCFG);
  tcase_add_test(t, bf16_rounding_is_convert_c_on_both_loop_sets);
  tcase_add_loop_test(t, bf16_gradients_are_float32_ones_rounded, 0, NCFG);
  tcase_add_loop_test(t, dx_added_into_is_the_written_dx_plus_the_contents, 0, NCFG);
  tcase_add_loop_test(t, relu_mask_is_the_stored_ys_at_zero_and_subnormals, 0, NCFG);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_suite)

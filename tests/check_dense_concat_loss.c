/* Dense, channel concatenation, sum, losses and the elementary tensor tasks: raw kernels against
 * float64 references and finite differences, then each operation through StarPU (including tasks
 * with more than STARPU_NMAXBUFS buffers) against the raw kernels. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "convert.h"
#include "testutil.h"

/* ---- dense ---- */

static void dense_ref(const struct _tsr_dense_desc *d, const float *x, const float *w, const float *b, double *y) {
  for (int i = 0; i < d->n; i++)
    for (int o = 0; o < d->out; o++) {
      double s = d->has_bias ? b[o] : 0.0;
      for (int k = 0; k < d->in; k++) s += (double)x[i * d->in + k] * w[o * d->in + k];
      y[i * d->out + o] = s;
    }
}

START_TEST(dense_fwd_matches_float64_with_and_without_bias) {
  for (int bias = 0; bias <= 1; bias++) {
    struct _tsr_dense_desc d = {5, 37, 11, bias};
    float x[5 * 37], w[11 * 37], b[11], y[5 * 11];
    double ref[5 * 11];
    tt_fill_uniform(x, 5 * 37, 1, -1, 1);
    tt_fill_uniform(w, 11 * 37, 2, -1, 1);
    tt_fill_uniform(b, 11, 3, -1, 1);
    for (int i = 0; i < 5 * 11; i++) y[i] = NAN; /* fwd must overwrite */
    _tsr_dense_fwd_cpu(&d, x, w, bias ? b : NULL, y);
    dense_ref(&d, x, w, b, ref);
    tt_assert_close(y, ref, 5 * 11, 1e-5, 1e-5, bias ? "dense y (bias)" : "dense y (no bias)");
  }
}
END_TEST

struct dense_fd {
  struct _tsr_dense_desc d;
  float *x, *w, *b, *y, *r;
};

/* L = sum(y * r): its gradient with respect to y is r */
static double dense_loss(void *u) {
  struct dense_fd *p = u;
  _tsr_dense_fwd_cpu(&p->d, p->x, p->w, p->b, p->y);
  double s = 0;
  for (int i = 0; i < p->d.n * p->d.out; i++) s += (double)p->y[i] * p->r[i];
  return s;
}

START_TEST(dense_bwd_matches_finite_differences) {
  enum { N = 3, IN = 6, OUT = 4 };
  float x[N * IN], w[OUT * IN], b[OUT], y[N * OUT], r[N * OUT], dx[N * IN], dw[OUT * IN] = {0}, db[OUT] = {0};
  double gx[N * IN], gw[OUT * IN], gb[OUT];
  struct dense_fd p = {{N, IN, OUT, 1}, x, w, b, y, r};
  tt_fill_uniform(x, N * IN, 4, -1, 1);
  tt_fill_uniform(w, OUT * IN, 5, -1, 1);
  tt_fill_uniform(b, OUT, 6, -1, 1);
  tt_fill_uniform(r, N * OUT, 7, -1, 1);
  for (int i = 0; i < N * IN; i++) dx[i] = NAN; /* bwd_data must overwrite */
  _tsr_dense_bwd_data_cpu(&p.d, r, w, dx);
  _tsr_dense_bwd_weights_cpu(&p.d, x, r, dw, db);
  /* L is linear in each argument, so central differences are exact up to float rounding */
  tt_fd_grad(x, N * IN, dense_loss, &p, 1e-2, gx);
  tt_fd_grad(w, OUT * IN, dense_loss, &p, 1e-2, gw);
  tt_fd_grad(b, OUT, dense_loss, &p, 1e-2, gb);
  tt_assert_close(dx, gx, N * IN, 1e-3, 1e-3, "dense dx");
  tt_assert_close(dw, gw, OUT * IN, 1e-3, 1e-3, "dense dW");
  tt_assert_close(db, gb, OUT, 1e-3, 1e-3, "dense db");
}
END_TEST

START_TEST(dense_bwd_weights_accumulates_into_gradients) {
  struct _tsr_dense_desc d = {4, 5, 3, 1};
  float x[20], dy[12], dw[15] = {0}, db[3] = {0}, dw1[15], db1[3];
  double ref_w[15], ref_b[3];
  tt_fill_uniform(x, 20, 8, -1, 1);
  tt_fill_uniform(dy, 12, 9, -1, 1);
  _tsr_dense_bwd_weights_cpu(&d, x, dy, dw, db);
  memcpy(dw1, dw, sizeof(dw));
  memcpy(db1, db, sizeof(db));
  _tsr_dense_bwd_weights_cpu(&d, x, dy, dw, db);
  for (int i = 0; i < 15; i++) ref_w[i] = 2.0 * dw1[i];
  for (int i = 0; i < 3; i++) ref_b[i] = 2.0 * db1[i];
  tt_assert_close(dw, ref_w, 15, 1e-6, 1e-6, "dW after two calls");
  tt_assert_close(db, ref_b, 3, 1e-6, 1e-6, "db after two calls");
  ck_assert_float_ne(dw1[0], 0.0f);
  /* overwrite: written over NaN, bitwise the first call's result (added into zeros) */
  d.overwrite = 1;
  for (int i = 0; i < 15; i++) dw[i] = NAN;
  for (int i = 0; i < 3; i++) db[i] = NAN;
  _tsr_dense_bwd_weights_cpu(&d, x, dy, dw, db);
  ck_assert_msg(memcmp(dw, dw1, sizeof dw) == 0 && memcmp(db, db1, sizeof db) == 0, "dense bwd_weights overwrite");
}
END_TEST

/* ---- concat and add ---- */

/* Input i's element (s, ch, p) lands at channel (offset of i) + ch of sample s. */
static void concat_ref(const struct _tsr_concat_desc *d, const float *const *xs, double *y) {
  int hw = d->h * d->w, ctot = 0;
  for (int i = 0; i < d->k; i++) ctot += d->c[i];
  for (int s = 0; s < d->n; s++) {
    int off = 0;
    for (int i = 0; i < d->k; i++) {
      for (int ch = 0; ch < d->c[i]; ch++)
        for (int p = 0; p < hw; p++) y[(s * ctot + off + ch) * hw + p] = xs[i][(s * d->c[i] + ch) * hw + p];
      off += d->c[i];
    }
  }
}

START_TEST(concat_three_inputs_fwd_and_bwd_match_reference) {
  struct _tsr_concat_desc d = {.n = 2, .h = 3, .w = 4, .k = 3, .c = {2, 3, 1}};
  enum { HW = 12, TOT = 2 * 6 * HW };
  float x0[2 * 2 * HW], x1[2 * 3 * HW], x2[2 * 1 * HW], y[TOT], back0[2 * 2 * HW], back1[2 * 3 * HW], back2[2 * HW];
  double ref[TOT];
  tt_fill_uniform(x0, 2 * 2 * HW, 10, -1, 1);
  tt_fill_uniform(x1, 2 * 3 * HW, 11, -1, 1);
  tt_fill_uniform(x2, 2 * 1 * HW, 12, -1, 1);
  const float *xs[] = {x0, x1, x2};
  _tsr_concat_fwd_cpu(&d, xs, y);
  concat_ref(&d, xs, ref);
  tt_assert_close(y, ref, TOT, 1e-30, 0, "concat y");
  float *dxs[] = {back0, back1, back2};
  _tsr_concat_bwd_cpu(&d, y, dxs); /* the gradient of a concatenation is the split */
  ck_assert_mem_eq(back0, x0, sizeof(x0));
  ck_assert_mem_eq(back1, x1, sizeof(x1));
  ck_assert_mem_eq(back2, x2, sizeof(x2));
}
END_TEST

/* Blocked nChw{B}c concatenation of 24 + 8 + 5 channels (whole blocks, half blocks, odd runs) and
 * its backward against the plain layout: every real channel lands where the plain one says, padding
 * channels stay 0, and the backward gives each input back exactly; the forward on bf16 storage too
 * (runs of 16 and 32 bytes have copies of their own in concat.c). */
static size_t bidx(int blk, int c, int n, int ch, int k, int hw) {
  int nb = (c + blk - 1) / blk;
  return (((size_t)n * nb + ch / blk) * hw + k) * blk + ch % blk;
}

START_TEST(concat_on_blocked_layouts_places_every_channel) {
  enum { N2 = 2, HW2 = 6, K = 3, CT = 37 };
  static const int cs[K] = {24, 8, 5}, blks[] = {8, 16};
  for (size_t b = 0; b < sizeof blks / sizeof blks[0]; b++) {
    int blk = blks[b];
    float *xs[K], *bx[K], *back[K], plain[N2 * CT * HW2];
    struct _tsr_concat_desc pd = {.n = N2, .h = 1, .w = HW2, .k = K}, bd = pd;
    bd.blk = blk;
    for (int i = 0; i < K; i++) {
      size_t pl = (size_t)N2 * cs[i] * HW2, bl = (size_t)N2 * ((cs[i] + blk - 1) / blk * blk) * HW2;
      pd.c[i] = bd.c[i] = cs[i];
      xs[i] = malloc(pl * 4), bx[i] = calloc(bl, 4), back[i] = calloc(bl, 4);
      tt_fill_uniform(xs[i], pl, 80 + i, -1, 1);
      for (int n = 0; n < N2; n++)
        for (int ch = 0; ch < cs[i]; ch++)
          for (int k = 0; k < HW2; k++) bx[i][bidx(blk, cs[i], n, ch, k, HW2)] = xs[i][(n * cs[i] + ch) * HW2 + k];
    }
    size_t yl = (size_t)N2 * ((CT + blk - 1) / blk * blk) * HW2;
    float *y = calloc(yl, 4);
    _tsr_concat_fwd_cpu(&pd, (const float *const *)xs, plain);
    _tsr_concat_fwd_cpu(&bd, (const float *const *)bx, y);
    for (int n = 0; n < N2; n++)
      for (int ch = 0; ch < (CT + blk - 1) / blk * blk; ch++)
        for (int k = 0; k < HW2; k++) {
          float v = y[bidx(blk, CT, n, ch, k, HW2)];
          float want = ch < CT ? plain[(n * CT + ch) * HW2 + k] : 0;
          ck_assert_msg(v == want, "blk %d: sample %d channel %d pixel %d is %g, expected %g", blk, n, ch, k, v, want);
        }
    _tsr_concat_bwd_cpu(&bd, y, back);
    /* bf16 storage (2-byte elements; a half 16-block is then a 16-byte run): distinct bit patterns
     * per (input, sample, channel, pixel) land where the float32 run put the same position */
    uint16_t *hx[K], *hy = calloc(yl, 2);
    struct _tsr_concat_desc hd = bd;
    hd.bf16 = 1;
    for (int i = 0; i < K; i++) {
      size_t bl = (size_t)N2 * ((cs[i] + blk - 1) / blk * blk) * HW2;
      hx[i] = calloc(bl, 2);
      for (int n = 0; n < N2; n++)
        for (int ch = 0; ch < cs[i]; ch++)
          for (int k = 0; k < HW2; k++)
            hx[i][bidx(blk, cs[i], n, ch, k, HW2)] = (uint16_t)(1 + ((i * N2 + n) * CT + ch) * HW2 + k);
    }
    _tsr_concat_fwd_cpu(&hd, (const float *const *)hx, (float *)hy);
    for (int n = 0; n < N2; n++)
      for (int i = 0, off = 0; i < K; off += cs[i], i++)
        for (int ch = 0; ch < cs[i]; ch++)
          for (int k = 0; k < HW2; k++)
            ck_assert_msg(hy[bidx(blk, CT, n, off + ch, k, HW2)] == hx[i][bidx(blk, cs[i], n, ch, k, HW2)],
                          "bf16 blk %d: input %d sample %d channel %d pixel %d misplaced", blk, i, n, ch, k);
    for (int n = 0; n < N2; n++)
      for (int ch = CT; ch < (CT + blk - 1) / blk * blk; ch++)
        for (int k = 0; k < HW2; k++) ck_assert_uint_eq(hy[bidx(blk, CT, n, ch, k, HW2)], 0);
    for (int i = 0; i < K; i++) free(hx[i]);
    free(hy);
    for (int i = 0; i < K; i++) {
      size_t bl = (size_t)N2 * ((cs[i] + blk - 1) / blk * blk) * HW2;
      ck_assert_msg(memcmp(back[i], bx[i], bl * 4) == 0, "blk %d: input %d's gradient differs", blk, i);
      free(xs[i]), free(bx[i]), free(back[i]);
    }
    free(y);
  }
}
END_TEST

START_TEST(add_three_inputs_matches_float64) {
  enum { LEN = 5000 }; /* more than one block of the blocked sum */
  float *x[3], y[LEN];
  double ref[LEN];
  for (int i = 0; i < 3; i++) {
    x[i] = malloc(LEN * sizeof(float));
    tt_fill_uniform(x[i], LEN, 20 + i, -1, 1);
  }
  _tsr_add_fwd_cpu(LEN, 3, (const float *const *)x, y);
  for (int j = 0; j < LEN; j++) ref[j] = (double)x[0][j] + x[1][j] + x[2][j];
  tt_assert_close(y, ref, LEN, 1e-6, 1e-6, "add y");
  for (int i = 0; i < 3; i++) free(x[i]);
}
END_TEST

/* ---- losses ---- */

static const char *loss_name[] = {"mse", "l1", "huber", "softmax_ce"};

/* float64 reference: per-element (or per-position) losses summed, times scale; gradient too */
static double loss_ref(const struct _tsr_loss_desc *d, const float *yh, const float *y, double *g) {
  size_t hw = (size_t)d->h * d->w, per = d->c * hw;
  double sum = 0;
  for (size_t i = 0; i < d->n * per; i++) g[i] = 0;
  for (int s = 0; s < d->nvalid; s++) {
    if (d->kind == TSR_L_SOFTMAX_CE) {
      for (size_t p = 0; p < hw; p++) {
        double mx = -INFINITY, se = 0, ts = 0;
        for (int k = 0; k < d->c; k++) mx = fmax(mx, yh[s * per + k * hw + p]);
        for (int k = 0; k < d->c; k++) {
          se += exp(yh[s * per + k * hw + p] - mx);
          ts += y[s * per + k * hw + p];
        }
        double lse = mx + log(se);
        for (int k = 0; k < d->c; k++) {
          size_t i = s * per + k * hw + p;
          sum -= y[i] * (yh[i] - lse);
          g[i] = d->scale * (exp(yh[i] - lse) * ts - y[i]);
        }
      }
      continue;
    }
    for (size_t j = 0; j < per; j++) {
      size_t i = s * per + j;
      double e = (double)yh[i] - y[i], a = fabs(e), dl = d->delta;
      switch (d->kind) {
      case TSR_L_MSE: sum += e * e; g[i] = 2 * e; break;
      case TSR_L_L1: sum += a; g[i] = e > 0 ? 1 : e < 0 ? -1 : 0; break;
      default: sum += a < dl ? 0.5 * e * e : dl * (a - 0.5 * dl); g[i] = a < dl ? e : (e > 0 ? dl : -dl); break;
      }
      g[i] *= d->scale;
    }
  }
  return d->scale * sum;
}

/* yhat, and targets placed away from the kinks of L1 and Huber so that finite differences with a
 * step of 1e-3 see a smooth function; CE targets are non-negative and deliberately not normalised
 * (the gradient then carries the sum of the targets). */
static void loss_data(const struct _tsr_loss_desc *d, uint64_t seed, float *yh, float *y) {
  size_t len = (size_t)d->n * d->c * d->h * d->w;
  tt_fill_uniform(yh, len, seed, -2, 2);
  tt_fill_uniform(y, len, seed + 1, 0, 1);
  if (d->kind == TSR_L_SOFTMAX_CE) return;
  for (size_t i = 0; i < len; i++) {
    float e = 0.05f + 1.5f * y[i];                        /* |error| in [0.05, 1.55) */
    if (fabsf(e - d->delta) < 0.02f) e = d->delta + 0.1f; /* off the Huber kink */
    y[i] = (i % 2) ? yh[i] - e : yh[i] + e;
  }
}

struct loss_fd {
  struct _tsr_loss_desc d;
  float *yh, *y;
  double *g;
};

/* Differentiated in float64: the kernel's float internals would add noise of ~1e-7 of the loss,
 * larger than step x gradient for the small per-element gradients of a mean. The kernel's value
 * is checked against this same reference. */
static double loss_value(void *u) {
  struct loss_fd *p = u;
  return loss_ref(&p->d, p->yh, p->y, p->g);
}

static struct _tsr_loss_desc loss_desc(int kind, int n, int nvalid) {
  struct _tsr_loss_desc d = {.kind = kind, .n = n, .c = 3, .h = 2, .w = 5, .nvalid = nvalid, .delta = 0.5f};
  d.scale = kind == TSR_L_SOFTMAX_CE ? 1.0 / (nvalid * 10) : 1.0 / (nvalid * 30);
  return d;
}

START_TEST(loss_value_and_gradient_match_float64_and_finite_differences) {
  int kind = _i;
  struct _tsr_loss_desc d = loss_desc(kind, 4, 4);
  enum { LEN = 4 * 30 };
  float yh[LEN], y[LEN], g[LEN];
  double gref[LEN], gfd[LEN], scratch[LEN], l;
  loss_data(&d, 30 + kind, yh, y);
  _tsr_loss_cpu(&d, yh, y, g, &l);
  double lref = loss_ref(&d, yh, y, gref);
  ck_assert_msg(fabs(l - lref) <= 1e-6 * fabs(lref), "%s: loss %.10g, reference %.10g", loss_name[kind], l, lref);
  tt_assert_close(g, gref, LEN, 1e-7, 1e-5, loss_name[kind]);
  struct loss_fd p = {d, yh, y, scratch};
  tt_fd_grad(yh, LEN, loss_value, &p, 1e-3, gfd);
  tt_assert_close(g, gfd, LEN, 1e-6, 1e-3, loss_name[kind]);
}
END_TEST

START_TEST(loss_slices_add_up_to_the_whole_batch) {
  int kind = _i;
  struct _tsr_loss_desc whole = loss_desc(kind, 6, 6), half = whole;
  half.n = half.nvalid = 3; /* same scale: 1 / count over the whole batch */
  enum { LEN = 6 * 30 };
  float yh[LEN], y[LEN], g[LEN], gs[LEN];
  double lw, l0, l1, gref[LEN];
  loss_data(&whole, 40 + kind, yh, y);
  _tsr_loss_cpu(&whole, yh, y, g, &lw);
  _tsr_loss_cpu(&half, yh, y, gs, &l0);
  _tsr_loss_cpu(&half, yh + LEN / 2, y + LEN / 2, gs + LEN / 2, &l1);
  ck_assert_msg(fabs(l0 + l1 - lw) <= 1e-12 * fabs(lw), "%s: slices %.15g + %.15g, whole %.15g", loss_name[kind],
                l0, l1, lw);
  double lref = loss_ref(&whole, yh, y, gref);
  ck_assert_msg(fabs(lw - lref) <= 1e-6 * fabs(lref), "%s: whole %.10g, reference %.10g", loss_name[kind], lw, lref);
  ck_assert_mem_eq(g, gs, sizeof(g));
}
END_TEST

START_TEST(loss_padding_samples_count_for_nothing) {
  int kind = _i;
  struct _tsr_loss_desc d = loss_desc(kind, 4, 3), valid = d;
  valid.n = 3;
  enum { LEN = 4 * 30, PER = 30 };
  float yh[LEN], y[LEN], g[LEN], gv[3 * PER];
  double l, lv;
  loss_data(&d, 50 + kind, yh, y);
  for (int i = 3 * PER; i < LEN; i++) yh[i] = y[i] = NAN; /* padding holds garbage */
  for (int i = 0; i < LEN; i++) g[i] = NAN;
  _tsr_loss_cpu(&d, yh, y, g, &l);
  _tsr_loss_cpu(&valid, yh, y, gv, &lv);
  ck_assert_msg(l == lv, "%s: loss with padding %.10g, without %.10g", loss_name[kind], l, lv);
  ck_assert_mem_eq(g, gv, sizeof(gv));
  for (int i = 3 * PER; i < LEN; i++)
    ck_assert_msg(g[i] == 0.0f, "%s: padding gradient %d is %g", loss_name[kind], i, g[i]);
}
END_TEST

/* the loss of a confident correct prediction must not overflow: log-softmax has to be stable */
START_TEST(softmax_ce_is_stable_for_large_logits) {
  struct _tsr_loss_desc d = {.kind = TSR_L_SOFTMAX_CE, .n = 1, .c = 3, .h = 1, .w = 2, .nvalid = 1, .scale = 0.5};
  float yh[6] = {1000, -1000, 0, 0, 1000, 1000}, y[6] = {1, 0, 0, 0, 0, 1}, g[6];
  double l, gref[6];
  _tsr_loss_cpu(&d, yh, y, g, &l);
  /* channel-major: position 0 has logits (1000, 0, 1000) and target class 0, so log 2; position 1
   * has (-1000, 0, 1000) and target class 2, so ~0 */
  double lref = 0.5 * log(2.0);
  ck_assert_msg(fabs(l - lref) <= 1e-6 * lref, "loss %.10g, reference %.10g", l, lref);
  loss_ref(&d, yh, y, gref);
  tt_assert_close(g, gref, 6, 1e-7, 1e-5, "stable CE gradient");
}
END_TEST

/* torch.sign(0) = 0: an exact prediction gets no L1 gradient; Huber is smooth there */
START_TEST(l1_gradient_is_zero_at_an_exact_prediction) {
  struct _tsr_loss_desc d = {.kind = TSR_L_L1, .n = 1, .c = 3, .h = 1, .w = 1, .nvalid = 1, .scale = 1.0 / 3};
  float yh[3] = {0.5f, -1, 2}, y[3] = {0.5f, 0, 2}, g[3];
  double l;
  _tsr_loss_cpu(&d, yh, y, g, &l);
  ck_assert_msg(g[0] == 0.0f && g[2] == 0.0f, "L1 gradient at zero error: %g, %g", g[0], g[2]);
  ck_assert_float_eq_tol(g[1], -1.0f / 3, 1e-7f);
  ck_assert_double_eq_tol(l, 1.0 / 3, 1e-12);
}
END_TEST

/* ---- through StarPU ---- */

static void starpu_up(void) { tt_starpu_start(2); }
static void starpu_down(void) { tt_starpu_stop(); }

static starpu_data_handle_t reg_doubles(double *p, size_t n) {
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)p, (uint32_t)n, sizeof(double));
  return h;
}

START_TEST(tensor_ops_and_loss_sum_run_through_starpu) {
  enum { N = 1000, K = 10 };
  float a[N], b[N], c[N];
  double ref[N];
  tt_fill_uniform(a, N, 60, -1, 1);
  tt_fill_uniform(b, N, 61, -1, 1);
  for (int i = 0; i < N; i++) {
    ref[i] = (double)a[i] + b[i] + b[i];
    c[i] = NAN;
  }
  starpu_data_handle_t ha = _tsr_register_floats(a, N), hb = _tsr_register_floats(b, N),
                       hc = _tsr_register_floats(c, N);
  ck_assert_int_eq(_tsr_insert_zero(hc, "zero c"), 0);
  ck_assert_int_eq(_tsr_insert_accumulate(hc, ha, "c += a"), 0);
  ck_assert_int_eq(_tsr_insert_accumulate(hc, hb, "c += b"), 0);
  ck_assert_int_eq(_tsr_insert_accumulate(hc, hb, "c += b again"), 0);
  ck_assert_int_eq(_tsr_insert_copy(ha, hc, "a = c"), 0);
  /* K > STARPU_NMAXBUFS loss handles: the sum task uses dynamic handles */
  double losses[K], out = NAN, out3 = NAN;
  starpu_data_handle_t hl[K];
  for (int i = 0; i < K; i++) {
    losses[i] = 0.25 * (i + 1);
    hl[i] = reg_doubles(&losses[i], 1);
  }
  struct starpu_task *t = NULL, *t3 = NULL;
  ck_assert_int_eq(_tsr_insert_loss_sum(K, hl, &out, "loss sum", &t), 0);
  ck_assert_int_eq(_tsr_insert_loss_sum(3, hl, &out3, "loss sum 3", &t3), 0);
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(starpu_task_wait(t), 0);
  ck_assert_int_eq(starpu_task_wait(t3), 0);
  ck_assert_msg(out == 0.25 * K * (K + 1) / 2, "loss sum %g", out);
  ck_assert_msg(out3 == 1.5, "loss sum of 3: %g", out3);
  starpu_task_wait_for_all();
  for (int i = 0; i < K; i++) starpu_data_unregister(hl[i]);
  starpu_data_unregister(ha);
  starpu_data_unregister(hb);
  starpu_data_unregister(hc);
  tt_assert_close(c, ref, N, 1e-6, 1e-6, "zero + accumulate");
  tt_assert_close(a, ref, N, 1e-6, 1e-6, "copy");
}
END_TEST

/* Vectors of 2-byte elements (gradients stored in bf16): the accumulate task sums two bf16
 * contributions as y = bf16(y + x), each sum rounded to nearest even (convert.c), bitwise; the exact
 * sum of two bf16 values fits a double, so the reference is the double sum rounded once to float32
 * (as the task's float32 addition rounds it) and then to bf16. A task that added float32 bit patterns,
 * truncated, or read the halves as floats fails. */
START_TEST(accumulate_sums_bf16_vectors_rounded) {
  enum { N = 999 };
  float a[N], b[N];
  uint16_t ha16[N], hb16[N], want[N];
  tt_fill_uniform(a, N, 62, -4, 4);
  tt_fill_uniform(b, N, 63, -1e-2, 1e-2);
  b[0] = 1e-30f, a[1] = 65504.0f, b[1] = 3e38f; /* far apart; towards overflow */
  for (int i = 0; i < N; i++) {
    ha16[i] = _tsr_f32_to_bf16(a[i]), hb16[i] = _tsr_f32_to_bf16(b[i]);
    double sum = (double)_tsr_bf16_to_f32(ha16[i]) + _tsr_bf16_to_f32(hb16[i]);
    want[i] = _tsr_f32_to_bf16((float)sum);
  }
  starpu_data_handle_t hy, hx;
  starpu_vector_data_register(&hy, STARPU_MAIN_RAM, (uintptr_t)ha16, N, sizeof(uint16_t));
  starpu_vector_data_register(&hx, STARPU_MAIN_RAM, (uintptr_t)hb16, N, sizeof(uint16_t));
  ck_assert_int_eq(_tsr_insert_accumulate(hy, hx, "y += x in bf16"), 0);
  starpu_task_wait_for_all();
  starpu_data_unregister(hy);
  starpu_data_unregister(hx);
  for (int i = 0; i < N; i++)
    ck_assert_msg(ha16[i] == want[i], "element %d: 0x%04x, want 0x%04x (%.9g + %.9g)", i, ha16[i], want[i],
                  (double)a[i], (double)b[i]);
  ck_assert_uint_ne(want[1], _tsr_f32_to_bf16(a[1])); /* the big term counted */
}
END_TEST

START_TEST(dense_runs_through_starpu) {
  enum { N = 8, IN = 20, OUT = 6 };
  struct _tsr_dense_desc d = {N, IN, OUT, 1};
  float x[N * IN], w[OUT * IN], b[OUT], r[N * OUT], y[N * OUT], dx[N * IN], dw[OUT * IN] = {0}, db[OUT] = {0};
  float y0[N * OUT], dx0[N * IN], dw0[OUT * IN] = {0}, db0[OUT] = {0};
  tt_fill_uniform(x, N * IN, 70, -1, 1);
  tt_fill_uniform(w, OUT * IN, 71, -1, 1);
  tt_fill_uniform(b, OUT, 72, -1, 1);
  tt_fill_uniform(r, N * OUT, 73, -1, 1);
  _tsr_dense_fwd_cpu(&d, x, w, b, y0);
  _tsr_dense_bwd_data_cpu(&d, r, w, dx0);
  _tsr_dense_bwd_weights_cpu(&d, x, r, dw0, db0);
  _tsr_dense_bwd_weights_cpu(&d, x, r, dw0, db0);
  starpu_data_handle_t hx = _tsr_register_floats(x, N * IN), hw = _tsr_register_floats(w, OUT * IN),
                       hb = _tsr_register_floats(b, OUT), hr = _tsr_register_floats(r, N * OUT),
                       hy = _tsr_register_floats(y, N * OUT), hdx = _tsr_register_floats(dx, N * IN),
                       hdw = _tsr_register_floats(dw, OUT * IN), hdb = _tsr_register_floats(db, OUT);
  ck_assert_int_eq(_tsr_insert_dense_fwd(&d, hx, hw, hb, hy, "fwd"), 0);
  ck_assert_int_eq(_tsr_insert_dense_bwd_data(&d, hr, hw, hdx, "bwd data"), 0);
  ck_assert_int_eq(_tsr_insert_dense_bwd_weights(&d, hx, hr, hdw, hdb, "bwd weights 1"), 0);
  ck_assert_int_eq(_tsr_insert_dense_bwd_weights(&d, hx, hr, hdw, hdb, "bwd weights 2"), 0);
  starpu_task_wait_for_all();
  starpu_data_handle_t all[] = {hx, hw, hb, hr, hy, hdx, hdw, hdb};
  for (int i = 0; i < 8; i++) starpu_data_unregister(all[i]);
  ck_assert_mem_eq(y, y0, sizeof(y));
  ck_assert_mem_eq(dx, dx0, sizeof(dx));
  /* two accumulations in either order: equal up to rounding */
  double rw[OUT * IN], rb[OUT];
  for (int i = 0; i < OUT * IN; i++) rw[i] = dw0[i];
  for (int i = 0; i < OUT; i++) rb[i] = db0[i];
  tt_assert_close(dw, rw, OUT * IN, 1e-6, 1e-6, "dW through StarPU");
  tt_assert_close(db, rb, OUT, 1e-6, 1e-6, "db through StarPU");
}
END_TEST

/* 9 inputs: the tasks have 10 buffers, more than STARPU_NMAXBUFS */
START_TEST(concat_and_add_with_nine_inputs_run_through_starpu) {
  enum { K = 9, N = 2, HW = 6 };
  struct _tsr_concat_desc d = {.n = N, .h = 2, .w = 3, .k = K};
  float *xs[K], *dxs[K], y[N * 45 * HW], y0[N * 45 * HW], sum[N * HW], sum0[N * HW];
  starpu_data_handle_t hx[K], hdx[K], hadd[K];
  for (int i = 0; i < K; i++) {
    d.c[i] = i + 1; /* 45 channels in all */
    xs[i] = malloc(N * d.c[i] * HW * sizeof(float));
    dxs[i] = malloc(N * d.c[i] * HW * sizeof(float));
    tt_fill_uniform(xs[i], N * d.c[i] * HW, 80 + i, -1, 1);
    for (int j = 0; j < N * d.c[i] * HW; j++) dxs[i][j] = NAN;
    hx[i] = _tsr_register_floats(xs[i], N * d.c[i] * HW);
    hdx[i] = _tsr_register_floats(dxs[i], N * d.c[i] * HW);
  }
  _tsr_concat_fwd_cpu(&d, (const float *const *)xs, y0);
  /* the sum uses the first N*HW elements of each input, through sub-ranges registered apart */
  float *heads[K];
  for (int i = 0; i < K; i++) {
    heads[i] = malloc(N * HW * sizeof(float));
    memcpy(heads[i], xs[i], N * HW * sizeof(float));
    hadd[i] = _tsr_register_floats(heads[i], N * HW);
  }
  _tsr_add_fwd_cpu(N * HW, K, (const float *const *)heads, sum0);
  starpu_data_handle_t hy = _tsr_register_floats(y, N * 45 * HW), hsum = _tsr_register_floats(sum, N * HW);
  ck_assert_int_eq(_tsr_insert_concat_fwd(&d, hx, hy, "concat fwd"), 0);
  ck_assert_int_eq(_tsr_insert_concat_bwd(&d, hy, hdx, "concat bwd"), 0);
  ck_assert_int_eq(_tsr_insert_add_fwd(N * HW, K, hadd, hsum, "add fwd"), 0);
  starpu_task_wait_for_all();
  starpu_data_unregister(hy);
  starpu_data_unregister(hsum);
  for (int i = 0; i < K; i++) {
    starpu_data_unregister(hx[i]);
    starpu_data_unregister(hdx[i]);
    starpu_data_unregister(hadd[i]);
  }
  ck_assert_mem_eq(y, y0, sizeof(y));
  ck_assert_mem_eq(sum, sum0, sizeof(sum));
  for (int i = 0; i < K; i++) {
    ck_assert_mem_eq(dxs[i], xs[i], N * d.c[i] * HW * sizeof(float));
    free(xs[i]);
    free(dxs[i]);
    free(heads[i]);
  }
}
END_TEST

START_TEST(loss_runs_through_starpu) {
  for (int kind = 0; kind < 4; kind++) {
    struct _tsr_loss_desc d = loss_desc(kind, 4, 3);
    enum { LEN = 4 * 30 };
    float yh[LEN], y[LEN], g[LEN], g0[LEN];
    double l = NAN, l0;
    loss_data(&d, 90 + kind, yh, y);
    _tsr_loss_cpu(&d, yh, y, g0, &l0);
    starpu_data_handle_t hyh = _tsr_register_floats(yh, LEN), hy = _tsr_register_floats(y, LEN),
                         hg = _tsr_register_floats(g, LEN), hl = reg_doubles(&l, 1);
    ck_assert_int_eq(_tsr_insert_loss(&d, hyh, hy, hg, hl, "loss"), 0);
    starpu_task_wait_for_all();
    starpu_data_unregister(hyh);
    starpu_data_unregister(hy);
    starpu_data_unregister(hg);
    starpu_data_unregister(hl);
    ck_assert_msg(l == l0, "%s: loss %.10g through StarPU, %.10g raw", loss_name[kind], l, l0);
    ck_assert_mem_eq(g, g0, sizeof(g));
  }
}
END_TEST

static Suite *make_dense_concat_loss_suite(void) {
  Suite *s = suite_create("dense_concat_loss");
  TCase *raw = tcase_create("raw");
  tcase_add_test(raw, dense_fwd_matches_float64_with_and_without_bias);
  tcase_add_test(raw, dense_bwd_matches_finite_differences);
  tcase_add_test(raw, dense_bwd_weights_accumulates_into_gradients);
  tcase_add_test(raw, concat_three_inputs_fwd_and_bwd_match_reference);
  tcase_add_test(raw, concat_on_blocked_layouts_places_every_channel);
  tcase_add_test(raw, add_three_inputs_matches_float64);
  tcase_add_loop_test(raw, loss_value_and_gradient_match_float64_and_finite_differences, 0, 4);
  tcase_add_loop_test(raw, loss_slices_add_up_to_the_whole_batch, 0, 4);
  tcase_add_loop_test(raw, loss_padding_samples_count_for_nothing, 0, 4);
  tcase_add_test(raw, softmax_ce_is_stable_for_large_logits);
  tcase_add_test(raw, l1_gradient_is_zero_at_an_exact_prediction);
  suite_add_tcase(s, raw);
  TCase *sp = tcase_create("starpu");
  tcase_add_checked_fixture(sp, starpu_up, starpu_down);
  tcase_set_timeout(sp, 20);
  tcase_add_test(sp, tensor_ops_and_loss_sum_run_through_starpu);
  tcase_add_test(sp, accumulate_sums_bf16_vectors_rounded);
  tcase_add_test(sp, dense_runs_through_starpu);
  tcase_add_test(sp, concat_and_add_with_nine_inputs_run_through_starpu);
  tcase_add_test(sp, loss_runs_through_starpu);
  suite_add_tcase(s, sp);
  return s;
}

TT_MAIN(make_dense_concat_loss_suite)

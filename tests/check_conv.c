/* Suite "conv": conv2d and conv_transpose2d kernels against a float64 direct convolution,
 * gradients against finite differences of sum(y * r), weight-gradient accumulation, the
 * transposed conv as the adjoint of the conv, the size formulas, the oneDNN implementation
 * chosen for the FCDenseNet shapes, each pass run as a StarPU task, and a oneDNN failure inside a
 * kernel recorded as an error (output zeroed) instead of ending the process; transposed
 * convolutions whose kernel equals their stride (run as a 1x1 convolution and a pixel shuffle) in
 * every layout and output format the trainer stores. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "conv_plan.h"
#include "convert.h"
#include "tensor/shape.h"
#include "kernel_util.h"
#include "testutil.h"

/* Defined in codelets/conv2d.c. */

/* Float sums of up to a few hundred products of values in [-1, 1]. */
#define FWD_ATOL 1e-4
#define FWD_RTOL 1e-4
/* Finite differences of a loss that is linear in the perturbed value, evaluated in float64 by
 * the reference: the only errors are the kernel's float rounding. */
#define FD_ATOL 1e-3
#define FD_RTOL 1e-3
#define FD_STEP 0.25

struct cfg {
  int n, ci, h, w, co, kh, kw, sh, sw, ph, pw, dh, dw, oph, opw, has_bias;
};

static struct _tsr_conv_desc make_desc(const struct cfg *c, int deconv) {
  struct _tsr_conv_desc d = {.n = c->n, .ci = c->ci, .h = c->h, .w = c->w, .co = c->co, .kh = c->kh, .kw = c->kw,
                            .sh = c->sh, .sw = c->sw, .ph = c->ph, .pw = c->pw, .dh = c->dh, .dw = c->dw,
                            .oph = c->oph, .opw = c->opw, .has_bias = c->has_bias};
  if (deconv) {
    d.oh = _tsr_deconv_out(c->h, c->kh, c->sh, c->ph, c->dh, c->oph);
    d.ow = _tsr_deconv_out(c->w, c->kw, c->sw, c->pw, c->dw, c->opw);
  } else {
    d.oh = _tsr_conv_out(c->h, c->kh, c->sh, c->ph, c->dh);
    d.ow = _tsr_conv_out(c->w, c->kw, c->sw, c->pw, c->dw);
  }
  return d;
}

static size_t nx(const struct _tsr_conv_desc *d) { return (size_t)d->n * d->ci * d->h * d->w; }
static size_t ny(const struct _tsr_conv_desc *d) { return (size_t)d->n * d->co * d->oh * d->ow; }
static size_t nw(const struct _tsr_conv_desc *d) { return (size_t)d->ci * d->co * d->kh * d->kw; }

/* Direct convolution in float64. Conv: y[n,o,oy,ox] += x[n,c,oy*s-p+ky*d, ...] w[o,c,ky,kx].
 * Transposed conv scatters instead: y[n,o,iy*s-p+ky*d, ...] += x[n,c,iy,ix] w[c,o,ky,kx]. */
static void ref_fwd(const struct _tsr_conv_desc *d, int deconv, const float *x, const float *w, const float *b,
                    double *y) {
  for (int n = 0; n < d->n; n++)
    for (int o = 0; o < d->co; o++)
      for (int i = 0; i < d->oh * d->ow; i++) y[((size_t)n * d->co + o) * d->oh * d->ow + i] = b ? b[o] : 0.0;
  for (int n = 0; n < d->n; n++)
    for (int o = 0; o < d->co; o++)
      for (int c = 0; c < d->ci; c++)
        for (int ky = 0; ky < d->kh; ky++)
          for (int kx = 0; kx < d->kw; kx++) {
            double wv = deconv ? w[(((size_t)c * d->co + o) * d->kh + ky) * d->kw + kx]
                               : w[(((size_t)o * d->ci + c) * d->kh + ky) * d->kw + kx];
            int ah = deconv ? d->h : d->oh, aw = deconv ? d->w : d->ow; /* loop over these */
            for (int a = 0; a < ah; a++)
              for (int bb = 0; bb < aw; bb++) {
                int py = a * d->sh - d->ph + ky * d->dh, px = bb * d->sw - d->pw + kx * d->dw;
                int yy = deconv ? py : a, yx = deconv ? px : bb, xy = deconv ? a : py, xx = deconv ? bb : px;
                if (yy < 0 || yy >= d->oh || yx < 0 || yx >= d->ow || xy < 0 || xy >= d->h || xx < 0 || xx >= d->w)
                  continue;
                y[(((size_t)n * d->co + o) * d->oh + yy) * d->ow + yx] +=
                    wv * x[(((size_t)n * d->ci + c) * d->h + xy) * d->w + xx];
              }
          }
}

static void run_fwd(const struct _tsr_conv_desc *d, int deconv, const float *x, const float *w, const float *b,
                    float *y) {
  (deconv ? _tsr_deconv2d_fwd_cpu : _tsr_conv2d_fwd_cpu)(d, x, w, b, y);
}
static void run_bwd_data(const struct _tsr_conv_desc *d, int deconv, const float *dy, const float *w, float *dx) {
  (deconv ? _tsr_deconv2d_bwd_data_cpu : _tsr_conv2d_bwd_data_cpu)(d, dy, w, dx);
}
static void run_bwd_weights(const struct _tsr_conv_desc *d, int deconv, const float *x, const float *dy, float *dw,
                            float *db) {
  (deconv ? _tsr_deconv2d_bwd_weights_cpu : _tsr_conv2d_bwd_weights_cpu)(d, x, dy, dw, db);
}

/* Stride 2, padding, dilation 2, non-square kernels and strides, pointwise, wider channels. */
static const struct cfg conv_cfgs[] = {
    {2, 3, 9, 8, 5, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 1},
    {2, 3, 9, 8, 5, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0},
    {2, 3, 11, 10, 5, 3, 3, 1, 1, 2, 2, 2, 2, 0, 0, 1},
    {2, 3, 8, 9, 5, 3, 2, 1, 2, 1, 0, 1, 1, 0, 0, 1},
    {1, 3, 7, 7, 5, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1},
    {1, 16, 5, 5, 17, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 1},
};
/* 2x2 stride 2 (FCDenseNet upsampling), output padding, dilation, non-square, wider channels. */
static const struct cfg deconv_cfgs[] = {
    {2, 3, 5, 4, 5, 2, 2, 2, 2, 0, 0, 1, 1, 0, 0, 1},
    {2, 3, 5, 4, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0},
    {2, 3, 4, 5, 5, 3, 2, 2, 1, 1, 0, 1, 1, 1, 0, 1},
    {1, 3, 4, 4, 5, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1},
    {2, 16, 3, 3, 17, 2, 2, 2, 2, 0, 0, 1, 1, 0, 0, 1},
};
#define NCONV (int)(sizeof conv_cfgs / sizeof conv_cfgs[0])
#define NDECONV (int)(sizeof deconv_cfgs / sizeof deconv_cfgs[0])

static const struct cfg *cfg_of(int deconv, int i) { return deconv ? &deconv_cfgs[i] : &conv_cfgs[i]; }

/* ---- forward against the direct convolution ---- */

static void check_fwd(int deconv, int i) {
  struct _tsr_conv_desc d = make_desc(cfg_of(deconv, i), deconv);
  float *x = malloc(nx(&d) * sizeof *x), *w = malloc(nw(&d) * sizeof *w), *b = malloc(d.co * sizeof *b);
  float *y = malloc(ny(&d) * sizeof *y);
  double *ref = malloc(ny(&d) * sizeof *ref);
  tt_fill_uniform(x, nx(&d), 10 + i, -1, 1);
  tt_fill_uniform(w, nw(&d), 20 + i, -1, 1);
  tt_fill_uniform(b, d.co, 30 + i, -1, 1);
  run_fwd(&d, deconv, x, w, d.has_bias ? b : NULL, y);
  ref_fwd(&d, deconv, x, w, d.has_bias ? b : NULL, ref);
  char what[64];
  snprintf(what, sizeof what, "%s config %d", deconv ? "deconv2d fwd" : "conv2d fwd", i);
  tt_assert_close(y, ref, ny(&d), FWD_ATOL, FWD_RTOL, what);
  free(x), free(w), free(b), free(y), free(ref);
}

START_TEST(test_conv2d_fwd_matches_direct_convolution) { check_fwd(0, _i); }
END_TEST

START_TEST(test_deconv2d_fwd_matches_direct_scatter) { check_fwd(1, _i); }
END_TEST

/* Transposed convolutions whose kernel equals their stride (conv2d.c's taps: a 1x1 convolution to
 * kh kw co channels, then a pixel shuffle adding the bias), loop _i over 24 cases: layouts plain,
 * nChw8c and nChw16c (input channels not a multiple of the block, so the input has padding
 * channels), bias or none, output float32 or stored in bf16, 2x2 taps and non-square 2x3 ones with
 * 16 and 32 outputs; against the float64 scatter, with one bf16 rounding (2^-8 relative) more for a
 * bf16 output. A tap or channel put in the wrong place, a lost bias or a wrong block offset fails. */
START_TEST(test_deconv2d_taps_fwd_in_every_layout) {
  static const struct cfg shapes[] = {
      {2, 20, 5, 4, 16, 2, 2, 2, 2, 0, 0, 1, 1, 0, 0, 1},
      {1, 9, 3, 4, 32, 2, 3, 2, 3, 0, 0, 1, 1, 0, 0, 1},
  };
  static const int blks[] = {0, 8, 16};
  const struct cfg *c = &shapes[_i % 2];
  const int blk = blks[_i / 2 % 3], bias = _i / 6 % 2, bf16 = _i / 12;
  struct _tsr_conv_desc d = make_desc(c, 1);
  d.has_bias = bias, d.src_blk = d.dst_blk = blk, d.dst_bf16 = bf16;
  const size_t cpx = (size_t)(blk ? (d.ci + blk - 1) / blk * blk : d.ci), cpy = (size_t)d.co; /* co % blk == 0 */
  float *x = malloc(nx(&d) * 4), *w = malloc(nw(&d) * 4), *b = malloc(d.co * 4);
  float *xl = calloc(cpx * d.n * d.h * d.w, 4), *yl = calloc(cpy * d.n * d.oh * d.ow, 4), *y = malloc(ny(&d) * 4);
  uint16_t *yh = calloc(cpy * d.n * d.oh * d.ow, 2);
  double *ref = malloc(ny(&d) * sizeof *ref);
  tt_fill_uniform(x, nx(&d), 40 + _i, -1, 1);
  tt_fill_uniform(w, nw(&d), 50 + _i, -1, 1);
  tt_fill_uniform(b, d.co, 60 + _i, -1, 1);
  struct _tsr_reorder_desc in = {.n = d.n, .c = d.ci, .h = d.h, .w = d.w, .from_blk = 0, .to_blk = blk};
  struct _tsr_reorder_desc out = {.n = d.n, .c = d.co, .h = d.oh, .w = d.ow, .from_blk = blk, .to_blk = 0};
  if (blk) _tsr_reorder_cpu(&in, x, xl);
  else memcpy(xl, x, nx(&d) * 4);
  _tsr_deconv2d_fwd_cpu(&d, xl, w, bias ? b : NULL, bf16 ? (float *)yh : yl);
  if (bf16) _tsr_bf16_to_f32_cpu(yh, yl, cpy * d.n * d.oh * d.ow);
  if (blk) _tsr_reorder_cpu(&out, yl, y);
  else memcpy(y, yl, ny(&d) * 4);
  ref_fwd(&d, 1, x, w, bias ? b : NULL, ref);
  char what[96];
  snprintf(what, sizeof what, "taps %dx%d, %d outputs, block %d, %s, %s output", d.kh, d.kw, d.co, blk,
           bias ? "bias" : "no bias", bf16 ? "bf16" : "float32");
  tt_assert_close(y, ref, ny(&d), FWD_ATOL, FWD_RTOL + (bf16 ? 0x1p-8 : 0), what);
  free(x), free(w), free(b), free(xl), free(yl), free(y), free(yh), free(ref);
}
END_TEST

/* ---- gradients against finite differences of L = sum(y * r), y from the float64 reference ---- */

struct fd_ctx {
  const struct _tsr_conv_desc *d;
  int deconv;
  float *x, *w, *b;
  const double *r;
  double *y;
};

static double fd_loss(void *user) {
  struct fd_ctx *c = user;
  ref_fwd(c->d, c->deconv, c->x, c->w, c->d->has_bias ? c->b : NULL, c->y);
  double l = 0;
  for (size_t k = 0; k < ny(c->d); k++) l += c->y[k] * c->r[k];
  return l;
}

struct grad_case {
  struct _tsr_conv_desc d;
  struct fd_ctx ctx;
  float *x, *w, *b, *r_f;
  double *r, *y;
};

static void grad_case_init(struct grad_case *g, int deconv, int i) {
  g->d = make_desc(cfg_of(deconv, i), deconv);
  const struct _tsr_conv_desc *d = &g->d;
  g->x = malloc(nx(d) * sizeof(float));
  g->w = malloc(nw(d) * sizeof(float));
  g->b = malloc(d->co * sizeof(float));
  g->r_f = malloc(ny(d) * sizeof(float));
  g->r = malloc(ny(d) * sizeof(double));
  g->y = malloc(ny(d) * sizeof(double));
  tt_fill_uniform(g->x, nx(d), 40 + i, -1, 1);
  tt_fill_uniform(g->w, nw(d), 50 + i, -1, 1);
  tt_fill_uniform(g->b, d->co, 60 + i, -1, 1);
  tt_fill_uniform(g->r_f, ny(d), 70 + i, -1, 1);
  for (size_t k = 0; k < ny(d); k++) g->r[k] = g->r_f[k];
  g->ctx = (struct fd_ctx){d, deconv, g->x, g->w, g->b, g->r, g->y};
}

static void grad_case_free(struct grad_case *g) {
  free(g->x), free(g->w), free(g->b), free(g->r_f), free(g->r), free(g->y);
}

static void check_bwd_data(int deconv, int i) {
  struct grad_case g;
  grad_case_init(&g, deconv, i);
  size_t n = nx(&g.d);
  float *dx = malloc(n * sizeof *dx);
  double *fd = malloc(n * sizeof *fd);
  for (size_t k = 0; k < n; k++) dx[k] = 1e3f; /* must be overwritten, not added to */
  run_bwd_data(&g.d, deconv, g.r_f, g.w, dx);
  tt_fd_grad(g.x, n, fd_loss, &g.ctx, FD_STEP, fd);
  char what[64];
  snprintf(what, sizeof what, "%s bwd_data config %d", deconv ? "deconv2d" : "conv2d", i);
  tt_assert_close(dx, fd, n, FD_ATOL, FD_RTOL, what);
  free(dx), free(fd);
  grad_case_free(&g);
}

START_TEST(test_conv2d_bwd_data_matches_finite_differences) { check_bwd_data(0, _i); }
END_TEST

START_TEST(test_deconv2d_bwd_data_matches_finite_differences) { check_bwd_data(1, _i); }
END_TEST

/* dw and db start from random values: one call must add the gradient, a second add it again; with
 * overwrite, one call writes it. */
static void check_bwd_weights(int deconv, int i) {
  struct grad_case g;
  grad_case_init(&g, deconv, i);
  const struct _tsr_conv_desc *d = &g.d;
  size_t n = nw(d);
  float *dw = malloc(n * sizeof *dw), *db = malloc(d->co * sizeof *db);
  float *dw0 = malloc(n * sizeof *dw0), *db0 = malloc(d->co * sizeof *db0);
  double *fdw = malloc(n * sizeof *fdw), *fdb = malloc(d->co * sizeof *fdb);
  double *want_w = malloc(n * sizeof *want_w), *want_b = malloc(d->co * sizeof *want_b);
  tt_fill_uniform(dw0, n, 80 + i, -1, 1);
  tt_fill_uniform(db0, d->co, 90 + i, -1, 1);
  memcpy(dw, dw0, n * sizeof *dw);
  memcpy(db, db0, d->co * sizeof *db);
  tt_fd_grad(g.w, n, fd_loss, &g.ctx, FD_STEP, fdw);
  if (d->has_bias) tt_fd_grad(g.b, d->co, fd_loss, &g.ctx, FD_STEP, fdb);
  const char *op = deconv ? "deconv2d" : "conv2d";
  char what[80];
  for (int calls = 1; calls <= 2; calls++) {
    run_bwd_weights(d, deconv, g.x, g.r_f, dw, d->has_bias ? db : NULL);
    for (size_t k = 0; k < n; k++) want_w[k] = dw0[k] + calls * fdw[k];
    snprintf(what, sizeof what, "%s dw after %d calls, config %d", op, calls, i);
    tt_assert_close(dw, want_w, n, 2 * FD_ATOL, FD_RTOL, what);
    if (d->has_bias) {
      for (int k = 0; k < d->co; k++) want_b[k] = db0[k] + calls * fdb[k];
      snprintf(what, sizeof what, "%s db after %d calls, config %d", op, calls, i);
      tt_assert_close(db, want_b, d->co, 2 * FD_ATOL, FD_RTOL, what);
    } else {
      ck_assert_msg(memcmp(db, db0, d->co * sizeof *db) == 0, "%s: db written without bias", op);
    }
  }
  /* With overwrite the call writes dw and db (here full of NaN) instead of adding into them: bitwise
   * what a call adding into zeros gives. */
  struct _tsr_conv_desc dov = *d;
  dov.overwrite = 1;
  for (size_t k = 0; k < n; k++) dw[k] = NAN, dw0[k] = 0;
  for (int k = 0; k < d->co; k++) db[k] = NAN, db0[k] = 0;
  run_bwd_weights(&dov, deconv, g.x, g.r_f, dw, d->has_bias ? db : NULL);
  run_bwd_weights(d, deconv, g.x, g.r_f, dw0, d->has_bias ? db0 : NULL);
  ck_assert_msg(memcmp(dw, dw0, n * sizeof *dw) == 0, "%s config %d: overwritten dw differs from dw added into 0", op,
                i);
  if (d->has_bias)
    ck_assert_msg(memcmp(db, db0, d->co * sizeof *db) == 0, "%s config %d: overwritten db differs", op, i);
  free(dw), free(db), free(dw0), free(db0), free(fdw), free(fdb), free(want_w), free(want_b);
  grad_case_free(&g);
}

START_TEST(test_conv2d_bwd_weights_matches_fd_and_accumulates) { check_bwd_weights(0, _i); }
END_TEST

START_TEST(test_deconv2d_bwd_weights_matches_fd_and_accumulates) { check_bwd_weights(1, _i); }
END_TEST

/* <conv(x), y> == <x, deconv(y)> with the same weight memory: OIHW [co, ci] read as IOHW of the
 * transposed conv from co to ci channels. h = 10 needs output padding 1 to come back to 10. */
START_TEST(test_deconv2d_is_adjoint_of_conv2d) {
  struct cfg cc = {2, 4, 10, 9, 6, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0};
  struct _tsr_conv_desc c = make_desc(&cc, 0);
  struct cfg dc = {2, 6, c.oh, c.ow, 4, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0};
  dc.oph = cc.h - _tsr_deconv_out(c.oh, 3, 2, 1, 1, 0);
  dc.opw = cc.w - _tsr_deconv_out(c.ow, 3, 2, 1, 1, 0);
  ck_assert_int_eq(dc.oph, 1);
  ck_assert_int_eq(dc.opw, 0);
  struct _tsr_conv_desc t = make_desc(&dc, 1);
  ck_assert_int_eq(t.oh, cc.h);
  ck_assert_int_eq(t.ow, cc.w);
  float *x = malloc(nx(&c) * sizeof *x), *w = malloc(nw(&c) * sizeof *w);
  float *y = malloc(ny(&c) * sizeof *y), *cx = malloc(ny(&c) * sizeof *cx), *ty = malloc(nx(&c) * sizeof *ty);
  tt_fill_uniform(x, nx(&c), 1, -1, 1);
  tt_fill_uniform(w, nw(&c), 2, -1, 1);
  tt_fill_uniform(y, ny(&c), 3, -1, 1);
  _tsr_conv2d_fwd_cpu(&c, x, w, NULL, cx);
  _tsr_deconv2d_fwd_cpu(&t, y, w, NULL, ty);
  double lhs = 0, rhs = 0, scale = 0;
  for (size_t k = 0; k < ny(&c); k++) lhs += (double)cx[k] * y[k], scale += fabs((double)cx[k] * y[k]);
  for (size_t k = 0; k < nx(&c); k++) rhs += (double)x[k] * ty[k];
  ck_assert_msg(fabs(lhs - rhs) <= 1e-5 * scale, "<conv(x), y> = %.9g but <x, deconv(y)> = %.9g", lhs, rhs);
  free(x), free(w), free(y), free(cx), free(ty);
}
END_TEST

/* Expected values worked out from PyTorch's Conv2d / ConvTranspose2d formulas. */
START_TEST(test_output_sizes_follow_pytorch) {
  ck_assert_int_eq(_tsr_conv_out(64, 3, 1, 1, 1), 64);
  ck_assert_int_eq(_tsr_conv_out(64, 3, 2, 1, 1), 32);
  ck_assert_int_eq(_tsr_conv_out(7, 3, 2, 1, 1), 4);
  ck_assert_int_eq(_tsr_conv_out(10, 3, 1, 0, 2), 6);
  ck_assert_int_eq(_tsr_conv_out(6, 1, 2, 0, 1), 3);
  ck_assert_int_eq(_tsr_conv_out(5, 2, 3, 0, 1), 2);
  ck_assert_int_eq(_tsr_conv_out(2, 5, 1, 0, 1), -2);
  ck_assert_int_eq(_tsr_conv_out(1, 5, 2, 0, 1), -1);
  ck_assert_int_eq(_tsr_deconv_out(32, 2, 2, 0, 1, 0), 64);
  ck_assert_int_eq(_tsr_deconv_out(32, 3, 2, 1, 1, 1), 64);
  ck_assert_int_eq(_tsr_deconv_out(5, 3, 1, 0, 2, 1), 10);
  ck_assert_int_eq(_tsr_deconv_out(4, 4, 3, 2, 1, 2), 11);
}
END_TEST

/* The FCDenseNet shapes (slices of 16) must get oneDNN's jit kernels, not the reference ones
 * (deconvolution with OIHW weights once fell back to a ~1000x slower "ref" kernel). */
START_TEST(test_fcdensenet_shapes_avoid_reference_kernels) {
  static const struct cfg shapes[] = {
      {16, 48, 64, 64, 16, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 1},
      {16, 128, 32, 32, 128, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 1},
      {16, 96, 64, 64, 48, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1},
      {16, 128, 32, 32, 64, 2, 2, 2, 2, 0, 0, 1, 1, 0, 0, 1},
  };
  for (int i = 0; i < 4; i++) {
    int deconv = i == 3;
    struct _tsr_conv_desc d = make_desc(&shapes[i], deconv);
    for (int pass = TSR_CONV_FWD; pass <= TSR_CONV_BWD_WEIGHTS; pass++) {
      const char *impl = _tsr_convlike_impl(&d, deconv, pass);
      ck_assert_msg(impl && strncmp(impl, "ref", 3) != 0, "shape %d pass %d uses '%s'", i, pass, impl);
    }
  }
}
END_TEST

/* ---- through StarPU: each pass as a task equals the raw kernel ---- */

static void starpu_up(void) { tt_starpu_start(2); }
static void starpu_down(void) { tt_starpu_stop(); }

/* One pass of one op with bias, as a task on registered buffers and as a raw call on copies. */
static void check_task(int deconv, int pass) {
  struct _tsr_conv_desc d = make_desc(cfg_of(deconv, deconv ? 4 : 5), deconv);
  size_t sx = nx(&d), sy = ny(&d), sw = nw(&d), sb = d.co;
  /* in0/in1/in2 are the pass's inputs, out0/out1 its outputs (with their raw-call twins). */
  size_t s_in0 = pass == TSR_CONV_BWD_DATA ? sy : sx, s_in1 = pass == TSR_CONV_BWD_WEIGHTS ? sy : sw;
  size_t s_out0 = pass == TSR_CONV_FWD ? sy : pass == TSR_CONV_BWD_DATA ? sx : sw;
  float *in0 = malloc(s_in0 * 4), *in1 = malloc(s_in1 * 4), *in2 = malloc(sb * 4);
  float *out0 = malloc(s_out0 * 4), *out1 = malloc(sb * 4), *raw0 = malloc(s_out0 * 4), *raw1 = malloc(sb * 4);
  tt_fill_uniform(in0, s_in0, 1, -1, 1);
  tt_fill_uniform(in1, s_in1, 2, -1, 1);
  tt_fill_uniform(in2, sb, 3, -1, 1);
  tt_fill_uniform(out0, s_out0, 4, -1, 1);
  tt_fill_uniform(out1, sb, 5, -1, 1);
  memcpy(raw0, out0, s_out0 * 4);
  memcpy(raw1, out1, sb * 4);

  starpu_data_handle_t h0 = _tsr_register_floats(in0, s_in0), h1 = _tsr_register_floats(in1, s_in1);
  starpu_data_handle_t h2 = _tsr_register_floats(in2, sb), o0 = _tsr_register_floats(out0, s_out0);
  starpu_data_handle_t o1 = _tsr_register_floats(out1, sb);
  int ret;
  if (pass == TSR_CONV_FWD) {
    ret = (deconv ? _tsr_insert_deconv2d_fwd : _tsr_insert_conv2d_fwd)(&d, h0, h1, h2, o0, "fwd");
    run_fwd(&d, deconv, in0, in1, in2, raw0);
  } else if (pass == TSR_CONV_BWD_DATA) {
    ret = (deconv ? _tsr_insert_deconv2d_bwd_data : _tsr_insert_conv2d_bwd_data)(&d, h0, h1, o0, "bwd_data");
    run_bwd_data(&d, deconv, in0, in1, raw0);
  } else {
    ret = (deconv ? _tsr_insert_deconv2d_bwd_weights : _tsr_insert_conv2d_bwd_weights)(&d, h0, h1, o0, o1,
                                                                                       "bwd_weights");
    run_bwd_weights(&d, deconv, in0, in1, raw0, raw1);
  }
  ck_assert_int_eq(ret, 0);
  starpu_task_wait_for_all();
  starpu_data_handle_t hs[] = {h0, h1, h2, o0, o1};
  for (int k = 0; k < 5; k++) starpu_data_unregister(hs[k]);

  /* The task runs oneDNN on one thread and the raw call on up to two: summation orders differ. */
  double *ref0 = malloc(s_out0 * sizeof *ref0), *ref1 = malloc(sb * sizeof *ref1);
  for (size_t k = 0; k < s_out0; k++) ref0[k] = raw0[k];
  for (size_t k = 0; k < sb; k++) ref1[k] = raw1[k];
  tt_assert_close(out0, ref0, s_out0, 1e-5, 1e-5, "task output");
  tt_assert_close(out1, ref1, sb, 1e-5, 1e-5, "task bias gradient (or untouched bias)");
  free(in0), free(in1), free(in2), free(out0), free(out1), free(raw0), free(raw1), free(ref0), free(ref1);
}

START_TEST(test_conv2d_fwd_task_matches_kernel) { check_task(0, TSR_CONV_FWD); }
END_TEST
START_TEST(test_conv2d_bwd_data_task_matches_kernel) { check_task(0, TSR_CONV_BWD_DATA); }
END_TEST
START_TEST(test_conv2d_bwd_weights_task_matches_kernel) { check_task(0, TSR_CONV_BWD_WEIGHTS); }
END_TEST
START_TEST(test_deconv2d_fwd_task_matches_kernel) { check_task(1, TSR_CONV_FWD); }
END_TEST
START_TEST(test_deconv2d_bwd_data_task_matches_kernel) { check_task(1, TSR_CONV_BWD_DATA); }
END_TEST
START_TEST(test_deconv2d_bwd_weights_task_matches_kernel) { check_task(1, TSR_CONV_BWD_WEIGHTS); }
END_TEST

/* A descriptor oneDNN rejects (output height inconsistent with the input and kernel): the graph
 * never makes one, so this is the clean way to see a oneDNN failure inside a kernel. */
static struct _tsr_conv_desc rejected_desc(void) {
  struct cfg c = {1, 2, 6, 6, 3, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0, 1};
  struct _tsr_conv_desc d = make_desc(&c, 0);
  d.oh += 5;
  return d;
}

/* The kernel returns instead of aborting, and the failure is kept with the op and oneDNN's status. */
START_TEST(test_onednn_failure_is_recorded_not_fatal) {
  _tsr_kernel_error_clear();
  struct _tsr_conv_desc d = rejected_desc();
  float x[72] = {0}, w[54] = {0}, b[3] = {0}, y[3 * 11 * 6];
  char msg[512];
  ck_assert(!_tsr_kernel_error(msg, sizeof msg));
  _tsr_conv2d_fwd_cpu(&d, x, w, b, y);
  ck_assert_msg(_tsr_kernel_error(msg, sizeof msg), "no failure recorded");
  ck_assert_msg(strstr(msg, "conv2d_fwd") && strstr(msg, "invalid_arguments"), "message: %s", msg);
  ck_assert_msg(_tsr_convlike_impl(&d, 0, TSR_CONV_FWD) == NULL, "a rejected plan has an implementation");
  _tsr_kernel_error_clear();
  ck_assert(!_tsr_kernel_error(msg, sizeof msg));
}
END_TEST

/* As a StarPU task: the task completes, its write-only output is zeroed, the failure is recorded. */
START_TEST(test_onednn_failure_in_task_zeroes_output) {
  _tsr_kernel_error_clear();
  struct _tsr_conv_desc d = rejected_desc();
  size_t ny = (size_t)d.n * d.co * d.oh * d.ow;
  float x[72], w[54], b[3], *y = malloc(ny * sizeof *y);
  tt_fill_uniform(y, ny, 7, 1, 2);
  starpu_data_handle_t hx = _tsr_register_floats(x, 72), hw = _tsr_register_floats(w, 54);
  starpu_data_handle_t hb = _tsr_register_floats(b, 3), hy = _tsr_register_floats(y, ny);
  ck_assert_int_eq(_tsr_insert_conv2d_fwd(&d, hx, hw, hb, hy, "rejected"), 0);
  starpu_task_wait_for_all();
  starpu_data_handle_t hs[] = {hx, hw, hb, hy};
  for (int k = 0; k < 4; k++) starpu_data_unregister(hs[k]);
  char msg[512];
  ck_assert_msg(_tsr_kernel_error(msg, sizeof msg) && strstr(msg, "conv2d_fwd"), "no failure recorded");
  for (size_t i = 0; i < ny; i++) ck_assert_msg(y[i] == 0.0f, "output %zu is %g, not zeroed", i, y[i]);
  _tsr_kernel_error_clear();
  free(y);
}
END_TEST

static Suite *make_conv_suite(void) {
  Suite *s = suite_create("conv");
  TCase *k = tcase_create("kernels");
  tcase_set_timeout(k, 20);
  tcase_add_test(k, test_output_sizes_follow_pytorch);
  tcase_add_loop_test(k, test_conv2d_fwd_matches_direct_convolution, 0, NCONV);
  tcase_add_loop_test(k, test_deconv2d_fwd_matches_direct_scatter, 0, NDECONV);
  tcase_add_loop_test(k, test_deconv2d_taps_fwd_in_every_layout, 0, 24);
  tcase_add_loop_test(k, test_conv2d_bwd_data_matches_finite_differences, 0, NCONV);
  tcase_add_loop_test(k, test_deconv2d_bwd_data_matches_finite_differences, 0, NDECONV);
  tcase_add_loop_test(k, test_conv2d_bwd_weights_matches_fd_and_accumulates, 0, NCONV);
  tcase_add_loop_test(k, test_deconv2d_bwd_weights_matches_fd_and_accumulates, 0, NDECONV);
  tcase_add_test(k, test_deconv2d_is_adjoint_of_conv2d);
  tcase_add_test(k, test_fcdensenet_shapes_avoid_reference_kernels);
  tcase_add_test(k, test_onednn_failure_is_recorded_not_fatal);
  suite_add_tcase(s, k);

  TCase *t = tcase_create("tasks");
  tcase_set_timeout(t, 20);
  tcase_add_checked_fixture(t, starpu_up, starpu_down);
  tcase_add_test(t, test_conv2d_fwd_task_matches_kernel);
  tcase_add_test(t, test_conv2d_bwd_data_task_matches_kernel);
  tcase_add_test(t, test_conv2d_bwd_weights_task_matches_kernel);
  tcase_add_test(t, test_deconv2d_fwd_task_matches_kernel);
  tcase_add_test(t, test_deconv2d_bwd_data_task_matches_kernel);
  tcase_add_test(t, test_deconv2d_bwd_weights_task_matches_kernel);
  tcase_add_test(t, test_onednn_failure_in_task_zeroes_output);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_conv_suite)

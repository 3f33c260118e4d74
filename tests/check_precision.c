/* Suite "precision": bf16 conv and transposed conv (all three passes) against float64 references
 * with a bound derived from bf16 rounding, the data types of the oneDNN primitives that run them
 * (bf16 inputs, float32 outputs; float32 for the passes that bf16 precision runs so), convolutions, batch
 * normalisation, concatenation and pooling on activations stored in bf16, float32 <-> bf16/fp16 conversions (nearest, ties to even,
 * specials), the half-precision wire format of gradient reductions, and loss scaling in training
 * (power-of-two scales exact, overflowing steps skipped), fp16 refused on CPUs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dnnl.h>
#include <dnnl_debug.h>

#include <tessera.h>
#include "codelets.h"
#include "conv_plan.h"
#include "kernel_util.h"
#include "tensor/shape.h"
#include "convert.h"
#include "optim/loss_scale.h"
#include "testutil.h"


/* Rounding a value to bf16 (8 significant bits, nearest) moves it by at most 2^-8 of itself, so
 * rounding both factors moves each product by at most (1 + 2^-8)^2 - 1 < 1.01 2^-7 of its magnitude;
 * float32 accumulation adds ~K 2^-24. Bound per output: |out - ref| <= BF16_REL sum |products| + 1e-5. */
#define BF16_REL (1.01 * 0x1p-7)
/* Against the float64 result on the bf16-rounded inputs, a bf16 pass differs only by float32
 * accumulation: summed over the pass's outputs it must be this many times closer to that than to
 * the float64 result on the float32 inputs (measured: 10^4 to 2 10^5 times). Float32 arithmetic
 * lands on the far side (10^-4 times), a pass that kept one input in float32 halfway (1.4 times). */
#define ROUNDED_CLOSER 100

struct cfg {
  int deconv, n, ci, h, w, co, k, s, p, op, bias;
};
static const struct cfg cfgs[] = {
    {0, 4, 16, 24, 24, 12, 3, 1, 1, 0, 1}, /* dense-block 3x3 */
    {0, 4, 24, 16, 16, 24, 1, 1, 0, 0, 0}, /* transition 1x1 */
    {0, 2, 8, 20, 20, 8, 3, 2, 1, 0, 1},   /* strided */
    {1, 2, 12, 12, 12, 8, 3, 2, 1, 1, 1},  /* transition up */
};
#define NCFG ((int)(sizeof cfgs / sizeof cfgs[0]))
static const char *pass_names[] = {"forward", "backward data", "backward weights"};

static struct _tsr_conv_desc desc_of(const struct cfg *c) {
  struct _tsr_conv_desc d = {.n = c->n, .ci = c->ci, .h = c->h, .w = c->w, .co = c->co, .kh = c->k, .kw = c->k,
                            .sh = c->s, .sw = c->s, .ph = c->p, .pw = c->p, .dh = 1, .dw = 1, .oph = c->op,
                            .opw = c->op, .has_bias = c->bias};
  d.oh = c->deconv ? _tsr_deconv_out(c->h, c->k, c->s, c->p, 1, c->op) : _tsr_conv_out(c->h, c->k, c->s, c->p, 1);
  d.ow = c->deconv ? _tsr_deconv_out(c->w, c->k, c->s, c->p, 1, c->op) : _tsr_conv_out(c->w, c->k, c->s, c->p, 1);
  return d;
}

/* Whether oneDNN has a bf16 convolution on this CPU at all, asked of oneDNN itself (Tessera's plans
 * fall back to float32 where it has none). oneDNN 2.6 offers bf16 on AVX-512 CPUs (emulated without
 * AVX512-BF16), for every shape and pass, and none below: there it is refused. */
static int onednn_has_bf16_conv(void) {
  dnnl_engine_t eng;
  dnnl_memory_desc_t src, wei, dst;
  dnnl_dims_t sd = {1, 2, 4, 4}, wd = {2, 2, 3, 3}, st = {1, 1}, pad = {1, 1};
  dnnl_convolution_desc_t cd;
  dnnl_primitive_desc_t pd;
  ck_assert_int_eq(dnnl_engine_create(&eng, dnnl_cpu, 0), dnnl_success);
  ck_assert_int_eq(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_bf16, dnnl_format_tag_any), dnnl_success);
  ck_assert_int_eq(dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_bf16, dnnl_format_tag_any), dnnl_success);
  ck_assert_int_eq(dnnl_memory_desc_init_by_tag(&dst, 4, sd, dnnl_f32, dnnl_format_tag_any), dnnl_success);
  ck_assert_int_eq(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, &src, &wei,
                                                      NULL, &dst, st, pad, pad),
                   dnnl_success);
  dnnl_status_t r = dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL);
  ck_assert_msg(r == dnnl_success || r == dnnl_unimplemented, "oneDNN: %s", dnnl_status2str(r));
  if (r == dnnl_success) dnnl_primitive_desc_destroy(pd);
  dnnl_engine_destroy(eng);
  return r == dnnl_success;
}

/* Both ops are sums over (x index, w index, y index) triples: conv gathers y[o, oy] from
 * x[c, oy s - p + ky], transposed conv scatters x[c, iy] into y[o, iy s - p + ky]. The reference
 * visits every triple once; `pass` says which product it accumulates where (with its magnitude). */
static void reference(const struct _tsr_conv_desc *d, int deconv, int pass, const float *x, const float *w,
                      const float *y, double *out, double *mag) {
  for (int n = 0; n < d->n; n++)
    for (int o = 0; o < d->co; o++)
      for (int c = 0; c < d->ci; c++)
        for (int ky = 0; ky < d->kh; ky++)
          for (int kx = 0; kx < d->kw; kx++)
            for (int a = 0; a < (deconv ? d->h : d->oh); a++)
              for (int b = 0; b < (deconv ? d->w : d->ow); b++) {
                int iy, ix, oy, ox;
                if (deconv) iy = a, ix = b, oy = a * d->sh - d->ph + ky, ox = b * d->sw - d->pw + kx;
                else oy = a, ox = b, iy = a * d->sh - d->ph + ky, ix = b * d->sw - d->pw + kx;
                if (iy < 0 || ix < 0 || iy >= d->h || ix >= d->w || oy < 0 || ox < 0 || oy >= d->oh || ox >= d->ow)
                  continue;
                size_t xi = (((size_t)n * d->ci + c) * d->h + iy) * d->w + ix;
                size_t yi = (((size_t)n * d->co + o) * d->oh + oy) * d->ow + ox;
                size_t wi = deconv ? (((size_t)c * d->co + o) * d->kh + ky) * d->kw + kx
                                   : (((size_t)o * d->ci + c) * d->kh + ky) * d->kw + kx;
                double v, t;
                size_t at;
                if (pass == TSR_CONV_FWD) v = (double)x[xi] * w[wi], at = yi;
                else if (pass == TSR_CONV_BWD_DATA) v = (double)y[yi] * w[wi], at = xi;
                else v = (double)x[xi] * y[yi], at = wi;
                t = fabs(v);
                out[at] += v;
                mag[at] += t;
              }
}

/* The float64 result of `pass` over n outputs, the bias (not rounded: oneDNN adds it in float32)
 * included in the forward one. */
static void reference_pass(const struct _tsr_conv_desc *d, int deconv, int pass, const float *x, const float *w,
                           const float *dy, const float *b, size_t n, double *out, double *mag) {
  memset(out, 0, n * sizeof *out);
  memset(mag, 0, n * sizeof *mag);
  reference(d, deconv, pass, x, w, dy, out, mag);
  for (size_t i = 0; b && pass == TSR_CONV_FWD && i < n; i++) out[i] += b[(i / ((size_t)d->oh * d->ow)) % d->co];
}

static float *bf16_rounded(const float *v, size_t n) {
  float *r = malloc(n * sizeof *r);
  for (size_t i = 0; i < n; i++) r[i] = _tsr_bf16_to_f32(_tsr_f32_to_bf16(v[i]));
  return r;
}

/* A pass's bf16 output `got` against the float64 result on the float32 inputs (ref, with the
 * magnitudes mag) and on the bf16-rounded ones (ref_r). */
static void check_pass(int cfg, int pass, const float *got, size_t n, const double *ref, const double *mag,
                       const double *ref_r) {
  double far = 0, near = 0;
  for (size_t i = 0; i < n; i++) {
    double err = fabs(got[i] - ref[i]), bound = BF16_REL * mag[i] + 1e-5;
    ck_assert_msg(err <= bound, "config %d, bf16 %s: element %zu is %.8g, float64 reference %.8g (bound %.3g)", cfg,
                  pass_names[pass], i, (double)got[i], ref[i], bound);
    far += err;
    near += fabs(got[i] - ref_r[i]);
  }
  ck_assert_msg(ROUNDED_CLOSER * near < far,
                "config %d, bf16 %s: summed error %.3g from the float64 result on bf16-rounded inputs, %.3g from the "
                "one on the float32 inputs: not both inputs were rounded to bf16",
                cfg, pass_names[pass], near, far);
}

/* A pass that computes in float32 under bf16 precision (_tsr_conv_bf16_in_f32) on the float64
 * result of its inputs as it takes them: float32 accumulation only, F32_REL sum |products| + 1e-6. */
#define F32_REL 1e-5
static void check_f32_pass(int cfg, int pass, const float *got, size_t n, const double *ref, const double *mag) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabs(got[i] - ref[i]) <= F32_REL * mag[i] + 1e-6,
                  "config %d, %s in float32 under bf16 precision: element %zu is %.8g, float64 reference %.8g", cfg,
                  pass_names[pass], i, (double)got[i], ref[i]);
}

START_TEST(test_bf16_conv_passes_within_bf16_bound) {
  if (!onednn_has_bf16_conv()) {
    tt_skip("bf16 convolutions not checked (config %d): this oneDNN refuses them on this CPU (oneDNN 2.6 needs "
            "AVX-512 or a higher ONEDNN_MAX_CPU_ISA); Tessera runs them in float32 there",
            _i);
    return;
  }
  const struct cfg *c = &cfgs[_i];
  struct _tsr_conv_desc d = desc_of(c);
  size_t nx = (size_t)d.n * d.ci * d.h * d.w, ny = (size_t)d.n * d.co * d.oh * d.ow;
  size_t nw = (size_t)d.ci * d.co * d.kh * d.kw, nmax = nx > ny ? (nx > nw ? nx : nw) : (ny > nw ? ny : nw);
  float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc(d.co * 4), *y = malloc(ny * 4), *dy = malloc(ny * 4);
  float *dx = malloc(nx * 4), *dw = calloc(nw, 4), *db = calloc(d.co, 4);
  double *ref = malloc(nmax * 8), *mag = malloc(nmax * 8), *ref_r = malloc(nmax * 8), *mag_r = malloc(nmax * 8);
  tt_fill_uniform(x, nx, 11 + _i, -1, 1);
  tt_fill_uniform(w, nw, 12 + _i, -1, 1);
  tt_fill_uniform(b, d.co, 13 + _i, -1, 1);
  tt_fill_uniform(dy, ny, 14 + _i, -1, 1);
  float *xr = bf16_rounded(x, nx), *wr = bf16_rounded(w, nw), *dyr = bf16_rounded(dy, ny);
  const float *bias = c->bias ? b : NULL;
  _tsr_set_precision(TSR_PRECISION_BF16);
  for (int pass = TSR_CONV_FWD; pass <= TSR_CONV_BWD_WEIGHTS; pass++) {
    /* what oneDNN was asked for, and took: whichever implementation it picked (jit, brgemm, gemm) */
    dnnl_data_type_t t[3];
    int f32 = _tsr_conv_bf16_in_f32(&d, c->deconv, pass), want = f32 ? dnnl_f32 : dnnl_bf16;
    ck_assert_msg(_tsr_convlike_types(&d, c->deconv, pass, t) == 0, "config %d, %s: no plan", _i, pass_names[pass]);
    ck_assert_msg((int)t[0] == want && (int)t[1] == want && t[2] == dnnl_f32,
                  "config %d, bf16 %s: oneDNN's primitive takes %s and %s to %s, not %s and %s to f32", _i,
                  pass_names[pass], dnnl_dt2str(t[0]), dnnl_dt2str(t[1]), dnnl_dt2str(t[2]),
                  dnnl_dt2str((dnnl_data_type_t)want), dnnl_dt2str((dnnl_data_type_t)want));
    size_t n = pass == TSR_CONV_FWD ? ny : pass == TSR_CONV_BWD_DATA ? nx : nw;
    float *got = pass == TSR_CONV_FWD ? y : pass == TSR_CONV_BWD_DATA ? dx : dw;
    if (pass == TSR_CONV_FWD)
      (c->deconv ? _tsr_deconv2d_fwd_cpu : _tsr_conv2d_fwd_cpu)(&d, x, w, bias, y);
    else if (pass == TSR_CONV_BWD_DATA)
      (c->deconv ? _tsr_deconv2d_bwd_data_cpu : _tsr_conv2d_bwd_data_cpu)(&d, dy, w, dx);
    else
      (c->deconv ? _tsr_deconv2d_bwd_weights_cpu : _tsr_conv2d_bwd_weights_cpu)(&d, x, dy, dw, c->bias ? db : NULL);
    reference_pass(&d, c->deconv, pass, x, w, dy, bias, n, ref, mag);
    reference_pass(&d, c->deconv, pass, xr, wr, dyr, bias, n, ref_r, mag_r);
    if (f32) check_f32_pass(_i, pass, got, n, ref, mag);
    else check_pass(_i, pass, got, n, ref, mag, ref_r);
  }
  /* db sums the bf16-rounded dy in float32: within 2^-8 sum |dy| */
  for (int o = 0; c->bias && o < d.co; o++) {
    double s = 0, m = 0;
    for (int n = 0; n < d.n; n++)
      for (int k = 0; k < d.oh * d.ow; k++) {
        double v = dy[((size_t)n * d.co + o) * d.oh * d.ow + k];
        s += v;
        m += fabs(v);
      }
    ck_assert_msg(fabs(db[o] - s) <= 0x1p-8 * m + 1e-5, "db[%d] = %g, reference %g", o, db[o], s);
  }
  _tsr_set_precision(TSR_PRECISION_F32);
  free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db), free(ref), free(mag), free(ref_r);
  free(mag_r), free(xr), free(wr), free(dyr);
}
END_TEST

/* ---- activations stored in bf16 (the trainer's --precision bf16 between layers) ---- */

static size_t padded(int n, int c, int h, int w, int blk) {
  return (size_t)n * (blk ? (c + blk - 1) / blk * blk : c) * h * w;
}

/* A plain float32 activation into the stored form: layout blk, bf16 values (uint16 bit patterns). */
static uint16_t *to_store(const float *v, int n, int c, int h, int w, int blk) {
  size_t np = padded(n, c, h, w, blk);
  float *t = calloc(np, 4);
  uint16_t *s = malloc(np * 2);
  struct _tsr_reorder_desc r = {.n = n, .c = c, .h = h, .w = w, .from_blk = 0, .to_blk = blk};
  if (blk) _tsr_reorder_cpu(&r, v, t);
  else memcpy(t, v, np * 4);
  _tsr_f32_to_bf16_cpu(t, s, np);
  free(t);
  return s;
}

/* The stored form back into a plain float32 array. */
static float *from_store(const uint16_t *s, int n, int c, int h, int w, int blk) {
  size_t np = padded(n, c, h, w, blk);
  float *t = malloc(np * 4), *v = malloc((size_t)n * c * h * w * 4);
  _tsr_bf16_to_f32_cpu(s, t, np);
  struct _tsr_reorder_desc r = {.n = n, .c = c, .h = h, .w = w, .from_blk = blk, .to_blk = 0};
  if (blk) _tsr_reorder_cpu(&r, t, v);
  else memcpy(v, t, (size_t)n * c * h * w * 4);
  free(t);
  return v;
}

/* A float32 gradient into layout blk (float32). */
static float *to_layout(const float *v, int n, int c, int h, int w, int blk) {
  size_t np = padded(n, c, h, w, blk);
  float *t = calloc(np, 4);
  struct _tsr_reorder_desc r = {.n = n, .c = c, .h = h, .w = w, .from_blk = 0, .to_blk = blk};
  if (blk) _tsr_reorder_cpu(&r, v, t);
  else memcpy(t, v, np * 4);
  return t;
}

/* The set-up of the tests of convolutions on bf16-stored activations: config c's descriptor with its
 * input and output blocked as the trainer stores them (the activation block) and in bf16, and x,
 * w and dy in plain float32, uniform in [-1, 1] (seeds seed + 1, + 2, + 3). */
struct stored_case {
  struct _tsr_conv_desc d;
  int blk;
  size_t nx, ny, nw;
  float *x, *w, *dy;
};

static struct stored_case stored_case(const struct cfg *c, uint64_t seed) {
  struct stored_case k = {.d = desc_of(c), .blk = _tsr_act_block()};
  struct _tsr_conv_desc *d = &k.d;
  d->src_blk = d->dst_blk = k.blk;
  d->src_bf16 = d->dst_bf16 = 1;
  k.nx = (size_t)d->n * d->ci * d->h * d->w, k.ny = (size_t)d->n * d->co * d->oh * d->ow;
  k.nw = (size_t)d->ci * d->co * d->kh * d->kw;
  k.x = malloc(k.nx * 4), k.w = malloc(k.nw * 4), k.dy = malloc(k.ny * 4);
  tt_fill_uniform(k.x, k.nx, seed + 1, -1, 1);
  tt_fill_uniform(k.w, k.nw, seed + 2, -1, 1);
  tt_fill_uniform(k.dy, k.ny, seed + 3, -1, 1);
  return k;
}

/* Forward and backward for weights of a conv / transposed conv whose input and output are stored in
 * bf16, in the trainer's blocked layout: the forward reads the bf16 input and writes the bf16 output
 * without a reorder inside the task; the backward for weights reads the bf16 input. Bounds: the
 * forward's float32 result is within BF16_REL sum |products| + 1e-5 of the float64 one (as above);
 * its rounding to bf16 (8 significant bits, nearest) moves it by at most 2^-8 of itself, and
 * |y| <= sum |products| + |bias| + that bound, so |y - ref| <= BF16_REL mag + 2^-8 (1.01 mag + |b|)
 * + 1e-5. The backward for weights takes the same bf16-rounded input as in the test above: same
 * bound, and the same check that it is far closer to the float64 result on rounded inputs (a pass
 * that bf16 precision runs in float32: the float32 bound on the rounded input and float32 dy). */
START_TEST(test_bf16_stored_conv_within_bf16_bound) {
  if (!onednn_has_bf16_conv()) {
    tt_skip("bf16-stored convolutions not checked (config %d): no bf16 convolution in this oneDNN on this CPU", _i);
    return;
  }
  const struct cfg *c = &cfgs[_i];
  struct stored_case k = stored_case(c, 20 + _i);
  struct _tsr_conv_desc d = k.d;
  const int blk = k.blk;
  const size_t nx = k.nx, ny = k.ny, nw = k.nw, nmax = nx > ny ? (nx > nw ? nx : nw) : (ny > nw ? ny : nw);
  float *x = k.x, *w = k.w, *dy = k.dy, *b = malloc(d.co * 4), *dw = calloc(nw, 4), *db = calloc(d.co, 4);
  double *ref = malloc(nmax * 8), *mag = malloc(nmax * 8), *ref_r = malloc(nmax * 8), *mag_r = malloc(nmax * 8);
  tt_fill_uniform(b, d.co, 24 + _i, -1, 1);
  const float *bias = c->bias ? b : NULL;
  uint16_t *xs = to_store(x, d.n, d.ci, d.h, d.w, blk);
  uint16_t *ys = calloc(padded(d.n, d.co, d.oh, d.ow, blk), 2);
  float *dyb = to_layout(dy, d.n, d.co, d.oh, d.ow, blk);
  float *xr = bf16_rounded(x, nx), *wr = bf16_rounded(w, nw), *dyr = bf16_rounded(dy, ny);
  _tsr_set_precision(TSR_PRECISION_BF16);
  long before = _tsr_conv_reorders(0);
  (c->deconv ? _tsr_deconv2d_fwd_cpu : _tsr_conv2d_fwd_cpu)(&d, (const float *)xs, w, bias, (float *)ys);
  /* The dense-block 3x3 (config 0) reads and writes the caller's blocked bf16 activations as they
   * are; other shapes may want another layout in bf16 (the trainer's edge tasks reorder those). */
  ck_assert_msg(_i != 0 || !blk || _tsr_conv_reorders(0) == before,
                "config %d: the bf16-stored forward reordered an activation inside its task", _i);
  float *y = from_store(ys, d.n, d.co, d.oh, d.ow, blk);
  reference_pass(&d, c->deconv, TSR_CONV_FWD, x, w, dy, bias, ny, ref, mag);
  for (size_t i = 0; i < ny; i++) {
    double bi = bias ? fabs(b[(i / ((size_t)d.oh * d.ow)) % d.co]) : 0;
    double bound = BF16_REL * mag[i] + 0x1p-8 * (1.01 * mag[i] + bi) + 1e-5;
    ck_assert_msg(fabs(y[i] - ref[i]) <= bound,
                  "config %d, bf16-stored forward: element %zu is %.8g, float64 reference %.8g (bound %.3g)", _i, i,
                  (double)y[i], ref[i], bound);
  }
  (c->deconv ? _tsr_deconv2d_bwd_weights_cpu : _tsr_conv2d_bwd_weights_cpu)(&d, (const float *)xs, dyb, dw,
                                                                            c->bias ? db : NULL);
  if (_tsr_conv_bf16_in_f32(&d, c->deconv, TSR_CONV_BWD_WEIGHTS)) {
    /* float32 arithmetic on the widened bf16 input and the float32 dy */
    reference_pass(&d, c->deconv, TSR_CONV_BWD_WEIGHTS, xr, w, dy, NULL, nw, ref, mag);
    check_f32_pass(_i, TSR_CONV_BWD_WEIGHTS, dw, nw, ref, mag);
  } else {
    reference_pass(&d, c->deconv, TSR_CONV_BWD_WEIGHTS, x, w, dy, NULL, nw, ref, mag);
    reference_pass(&d, c->deconv, TSR_CONV_BWD_WEIGHTS, xr, wr, dyr, NULL, nw, ref_r, mag_r);
    check_pass(_i, TSR_CONV_BWD_WEIGHTS, dw, nw, ref, mag, ref_r);
  }
  _tsr_set_precision(TSR_PRECISION_F32);
  free(x), free(w), free(b), free(dy), free(dw), free(db), free(ref), free(mag), free(ref_r), free(mag_r);
  free(xs), free(ys), free(dyb), free(xr), free(wr), free(dyr), free(y);
}
END_TEST

/* Backward passes of a conv / transposed conv whose activation gradients are stored in bf16 too (the
 * trainer's bf16 gradients), blocked layout, bf16 activations: a bf16 dy must give bitwise the
 * results of a float32 dy holding the same (bf16) values, which the bf16 kernels round exactly (data
 * and weight gradients); a bf16 dx must be that float32 dx rounded once: within 2^-8 of it (half an
 * ulp of 8 significant bits is 2^-9 relative; the kernel rounds its float32 sums itself). */
START_TEST(test_bf16_gradients_conv_follow_float32_gradients) {
  if (!onednn_has_bf16_conv()) {
    tt_skip("bf16 gradients of convolutions not checked (config %d): no bf16 convolution in this oneDNN here", _i);
    return;
  }
  const struct cfg *c = &cfgs[_i];
  struct stored_case k = stored_case(c, 70 + _i);
  struct _tsr_conv_desc d = k.d;
  const int blk = k.blk;
  const size_t nx = k.nx, ny = k.ny, nw = k.nw, px = padded(d.n, d.ci, d.h, d.w, blk);
  float *x = k.x, *w = k.w, *dy = k.dy;
  float *dyr = bf16_rounded(dy, ny), *dyl = to_layout(dyr, d.n, d.co, d.oh, d.ow, blk);
  uint16_t *xs = to_store(x, d.n, d.ci, d.h, d.w, blk), *dys = to_store(dy, d.n, d.co, d.oh, d.ow, blk);
  float *dx32 = calloc(px, 4), *dx32b = calloc(px, 4), *dw32 = calloc(nw, 4), *dwb = calloc(nw, 4);
  float *db32 = calloc(d.co, 4), *dbb = calloc(d.co, 4);
  uint16_t *dx16 = calloc(px, 2);
  _tsr_set_precision(TSR_PRECISION_BF16);
  void (*bwd_data)(const struct _tsr_conv_desc *, const float *, const float *, float *) =
      c->deconv ? _tsr_deconv2d_bwd_data_cpu : _tsr_conv2d_bwd_data_cpu;
  void (*bwd_weights)(const struct _tsr_conv_desc *, const float *, const float *, float *, float *) =
      c->deconv ? _tsr_deconv2d_bwd_weights_cpu : _tsr_conv2d_bwd_weights_cpu;
  d.overwrite = 1;
  bwd_data(&d, dyl, w, dx32);                         /* float32 dy (bf16 values), float32 dx */
  bwd_weights(&d, (const float *)xs, dyl, dw32, c->bias ? db32 : NULL);
  d.ddst_bf16 = 1;
  bwd_data(&d, (const float *)dys, w, dx32b);        /* bf16 dy, float32 dx */
  bwd_weights(&d, (const float *)xs, (const float *)dys, dwb, c->bias ? dbb : NULL);
  d.dsrc_bf16 = 1;
  bwd_data(&d, (const float *)dys, w, (float *)dx16); /* bf16 dy, bf16 dx */
  _tsr_set_precision(TSR_PRECISION_F32);
  ck_assert_msg(!memcmp(dx32, dx32b, px * 4), "config %d: data gradient from a bf16 dy differs from float32's", _i);
  ck_assert_msg(!memcmp(dw32, dwb, nw * 4) && !memcmp(db32, dbb, (size_t)d.co * 4),
                "config %d: weight gradient from a bf16 dy differs from float32's", _i);
  struct _tsr_reorder_desc r = {.n = d.n, .c = d.ci, .h = d.h, .w = d.w, .from_blk = blk, .to_blk = 0};
  float *a = malloc(nx * 4), *b = from_store(dx16, d.n, d.ci, d.h, d.w, blk);
  if (blk) _tsr_reorder_cpu(&r, dx32, a);
  else memcpy(a, dx32, nx * 4);
  for (size_t i = 0; i < nx; i++)
    ck_assert_msg(fabs(b[i] - a[i]) <= 0x1p-8 * fabs(a[i]) + 1e-30,
                  "config %d: bf16 dx[%zu] %.8g, float32 dx %.8g: not one rounding", _i, i, (double)b[i], (double)a[i]);
  const size_t plane = (size_t)d.h * d.w * blk, nb = blk ? ((size_t)d.ci + blk - 1) / blk : 0;
  for (size_t i = 0; blk && i < px; i++) /* padding channels (where the last block is partial) stay 0 */
    if ((i / plane) % nb * blk + i % blk >= (size_t)d.ci)
      ck_assert_msg(dx16[i] == 0, "config %d: bf16 dx padding element %zu is 0x%04x", _i, i, dx16[i]);
  free(x), free(w), free(dy), free(dyr), free(dyl), free(xs), free(dys), free(dx32), free(dx32b), free(dw32), free(dwb);
  free(db32), free(dbb), free(dx16), free(a), free(b);
}
END_TEST

/* Batch normalisation (with and without its fused relu) on x and y stored in bf16, over two slices
 * whose statistics span both, in the trainer's blocked layout (loop 0, 1) and plain (2, 3). x is
 * exactly its bf16 values, so against a float64 reference on those values the float32 arithmetic
 * alone errs (1e-5 + 1e-4 |ref|, the float32 suites' bound) before y's one rounding to bf16 (at
 * most 2^-8 |y|): |y - ref| <= 2^-8 (|ref| + 1e-5) + 1e-5 + 1e-4 |ref|. Backward takes the stored y
 * for the relu's mask and a float32 dy, and writes float32 dx, dgamma, dbeta: float32 arithmetic only,
 * 1e-5 + 1e-4 |ref| (gradient sums over the batch: 1e-4 sum |terms|). */
START_TEST(test_bf16_stored_batchnorm_against_float64) {
  const int relu = _i % 2, blk = _i < 2 ? _tsr_act_block() : 0, S = 2, n = 2, c = 20, h = 5, w = 6;
  const size_t hw = (size_t)h * w, ns = (size_t)n * c * hw, ps = padded(n, c, h, w, blk), N = (size_t)S * n * c * hw;
  float *x = malloc(N * 4), *dy = malloc(N * 4), gamma[20], beta[20], rm[20] = {0}, rv[20], stat[40];
  float dgamma[20], dbeta[20];
  double acc[40], bacc[40];
  tt_fill_uniform(x, N, 31 + _i, -2, 3);
  tt_fill_uniform(dy, N, 32 + _i, -1, 1);
  tt_fill_uniform(gamma, c, 33, 0.5, 1.5);
  tt_fill_uniform(beta, c, 34, -0.5, 0.5);
  for (int k = 0; k < c; k++) rv[k] = 1;
  struct _tsr_bn_desc d = {.n = n, .c = c, .h = h, .w = w, .total = S * n, .eps = 1e-5f, .momentum = 0.1f,
                           .blk = blk, .relu = relu, .x_bf16 = 1, .y_bf16 = 1};
  uint16_t *xs[2], *ys[2];
  float *dys[2], *dxs[2];
  for (int s = 0; s < S; s++) {
    xs[s] = to_store(x + s * ns, n, c, h, w, blk);
    ys[s] = calloc(ps, 2);
    dys[s] = to_layout(dy + s * ns, n, c, h, w, blk);
    dxs[s] = calloc(ps, 4);
  }
  for (int s = 0; s < S; s++) {
    d.overwrite = s == 0;
    _tsr_bn_stats_cpu(&d, (const float *)xs[s], acc);
  }
  _tsr_bn_finalize_cpu(&d, acc, stat, rm, rv);
  for (int s = 0; s < S; s++) _tsr_bn_fwd_cpu(&d, (const float *)xs[s], stat, gamma, beta, (float *)ys[s]);
  for (int s = 0; s < S; s++) {
    d.overwrite = s == 0;
    _tsr_bn_bwd_stats_cpu(&d, (const float *)xs[s], stat, dys[s], gamma, beta, bacc);
  }
  d.overwrite = 1;
  _tsr_bn_bwd_params_cpu(&d, bacc, dgamma, dbeta);
  for (int s = 0; s < S; s++)
    _tsr_bn_bwd_data_cpu(&d, (const float *)xs[s], stat, gamma, beta, bacc, dys[s], dxs[s]);
  /* float64 reference on the stored (bf16) x */
  float *xv = malloc(N * 4), *yv = malloc(N * 4), *dxv = malloc(N * 4);
  for (int s = 0; s < S; s++) {
    float *t = from_store(xs[s], n, c, h, w, blk), *u = from_store(ys[s], n, c, h, w, blk);
    memcpy(xv + s * ns, t, ns * 4), memcpy(yv + s * ns, u, ns * 4);
    free(t), free(u);
    struct _tsr_reorder_desc r = {.n = n, .c = c, .h = h, .w = w, .from_blk = blk, .to_blk = 0};
    if (blk) _tsr_reorder_cpu(&r, dxs[s], dxv + s * ns);
    else memcpy(dxv + s * ns, dxs[s], ns * 4);
  }
  double *yref = malloc(N * 8), *dxref = malloc(N * 8), dgref[20], dbref[20], gmag[20], bmag[20];
  const size_t M = (size_t)S * n * hw;
  for (int k = 0; k < c; k++) {
    double m = 0, v = 0, sg = 0, sgx = 0;
    dgref[k] = dbref[k] = gmag[k] = bmag[k] = 0;
#define AT(i, q) ((size_t)(i) * c * hw + (size_t)k * hw + (q))
    for (int i = 0; i < S * n; i++)
      for (size_t q = 0; q < hw; q++) m += xv[AT(i, q)];
    m /= M;
    for (int i = 0; i < S * n; i++)
      for (size_t q = 0; q < hw; q++) v += (xv[AT(i, q)] - m) * (xv[AT(i, q)] - m);
    v /= M;
    double is = 1 / sqrt(v + 1e-5);
    for (int i = 0; i < S * n; i++)
      for (size_t q = 0; q < hw; q++) {
        double xh = (xv[AT(i, q)] - m) * is, o = gamma[k] * xh + beta[k];
        yref[AT(i, q)] = relu && o < 0 ? 0 : o;
        double g = relu && !(yv[AT(i, q)] > 0) ? 0 : dy[AT(i, q)];
        sg += g, sgx += g * xh;
        bmag[k] += fabs(g), gmag[k] += fabs(g * xh);
      }
    dgref[k] = sgx, dbref[k] = sg;
    for (int i = 0; i < S * n; i++)
      for (size_t q = 0; q < hw; q++) {
        double xh = (xv[AT(i, q)] - m) * is, g = relu && !(yv[AT(i, q)] > 0) ? 0 : dy[AT(i, q)];
        dxref[AT(i, q)] = gamma[k] * is * (g - sg / M - xh * sgx / M);
      }
#undef AT
  }
  for (size_t i = 0; i < N; i++) {
    double bound = 0x1p-8 * (fabs(yref[i]) + 1e-5) + 1e-5 + 1e-4 * fabs(yref[i]);
    ck_assert_msg(fabs(yv[i] - yref[i]) <= bound, "loop %d: bf16-stored batchnorm y[%zu] = %.8g, float64 %.8g", _i,
                  i, (double)yv[i], yref[i]);
  }
  tt_assert_close(dxv, dxref, N, 1e-5, 1e-4, "bf16-stored batchnorm dx");
  for (int k = 0; k < c; k++) {
    ck_assert_msg(fabs(dgamma[k] - dgref[k]) <= 1e-5 + 1e-4 * gmag[k], "dgamma[%d] %g, float64 %g", k, dgamma[k],
                  dgref[k]);
    ck_assert_msg(fabs(dbeta[k] - dbref[k]) <= 1e-5 + 1e-4 * bmag[k], "dbeta[%d] %g, float64 %g", k, dbeta[k],
                  dbref[k]);
  }
  for (int s = 0; s < S; s++) free(xs[s]), free(ys[s]), free(dys[s]), free(dxs[s]);
  free(x), free(dy), free(xv), free(yv), free(dxv), free(yref), free(dxref);
}
END_TEST

/* Concatenation forward copies bf16 activations as they are (bit for bit), in blocked (loop 0,
 * channels 8 + 20 + 8: runs of half blocks and unaligned ones) and plain (1) layouts; its backward
 * splits a float32 gradient. Exact: a copy. */
START_TEST(test_bf16_stored_concat_copies_bits) {
  const int blk = _i == 0 ? _tsr_act_block() : 0, n = 2, h = 3, w = 5, cs[3] = {8, 20, 8}, ct = 36;
  struct _tsr_concat_desc d = {.n = n, .h = h, .w = w, .k = 3, .c = {8, 20, 8}, .blk = blk, .bf16 = 1};
  float *parts[3];
  uint16_t *xs[3];
  for (int i = 0; i < 3; i++) {
    parts[i] = malloc((size_t)n * cs[i] * h * w * 4);
    tt_fill_uniform(parts[i], (size_t)n * cs[i] * h * w, 41 + i, -1, 1);
    xs[i] = to_store(parts[i], n, cs[i], h, w, blk);
  }
  uint16_t *y = calloc(padded(n, ct, h, w, blk), 2);
  const float *in[3] = {(const float *)xs[0], (const float *)xs[1], (const float *)xs[2]};
  _tsr_concat_fwd_cpu(&d, in, (float *)y);
  float *yv = from_store(y, n, ct, h, w, blk);
  for (int s = 0; s < n; s++)
    for (int i = 0, off = 0; i < 3; off += cs[i], i++)
      for (size_t q = 0; q < (size_t)cs[i] * h * w; q++) {
        float want = _tsr_bf16_to_f32(_tsr_f32_to_bf16(parts[i][(size_t)s * cs[i] * h * w + q]));
        float got = yv[((size_t)s * ct + off) * h * w + q];
        ck_assert_msg(memcmp(&want, &got, 4) == 0, "layout %d: sample %d, input %d, value %zu: %g, not %g", blk, s, i,
                      q, got, want);
      }
  for (int i = 0; i < 3; i++) free(parts[i]), free(xs[i]);
  free(y), free(yv);
}
END_TEST

/* Concatenation backward with gradients stored in bf16 (the trainer's bf16 activation gradients):
 * loop _i & 1 picks the layout (blocked, plain), _i & 2 a bf16 dy (else float32). Inputs of 8, 20
 * and 7 channels (blocked: half blocks, unaligned runs, padded last blocks), input 1 and (with a
 * float32 dy) input 2 with bf16 gradients, the others float32. Exact: a bf16 dx from a float32 dy is
 * convert.c's rounding of it bit for bit, from a bf16 dy its bits; a float32 dx is dy's value (widened
 * from bf16: exact). Every dx starts as all-ones bytes (NaN in both formats): its padding channels
 * must come out +0, since gradients share memory with others whose values there may read as NaN. */
START_TEST(test_bf16_gradient_concat_backward_rounds_and_zeroes_padding) {
  const int blk = _i & 1 ? 0 : _tsr_act_block(), dyb = _i & 2 ? 1 : 0, n = 2, h = 3, w = 5, hw = h * w;
  const int cs[3] = {8, 20, 7}, ct = 35;
  const unsigned mask = dyb ? 2u : 6u;
  struct _tsr_concat_desc d = {.n = n, .h = h, .w = w, .k = 3, .c = {8, 20, 7}, .blk = blk, .dy_bf16 = dyb,
                               .dx_bf16 = mask};
  float *dy = malloc((size_t)n * ct * hw * 4);
  tt_fill_uniform(dy, (size_t)n * ct * hw, 61 + _i, -1, 1);
  for (size_t q = 0; q < (size_t)n * ct * hw; q += 7) dy[q] *= 0x1p-130f; /* subnormals too */
  void *dys = dyb ? (void *)to_store(dy, n, ct, h, w, blk) : (void *)to_layout(dy, n, ct, h, w, blk);
  void *dxs[3];
  for (int i = 0; i < 3; i++) {
    size_t np = padded(n, cs[i], h, w, blk);
    dxs[i] = malloc(np * 4);
    memset(dxs[i], 0xff, np * 4);
  }
  _tsr_concat_bwd_cpu(&d, dys, (float *const *)dxs);
  for (int i = 0, off = 0; i < 3; off += cs[i], i++) {
    const int xb = mask >> i & 1, c = cs[i], cp = blk ? (c + blk - 1) / blk * blk : c;
    for (int s = 0; s < n; s++)
      for (int ch = 0; ch < cp; ch++)
        for (int k = 0; k < hw; k++) {
          size_t e = blk ? ((((size_t)s * (cp / blk) + ch / blk) * hw + k) * blk + ch % blk)
                         : ((size_t)s * c + ch) * hw + k;
          uint32_t got = xb ? ((const uint16_t *)dxs[i])[e] : ((const uint32_t *)dxs[i])[e], want = 0;
          if (ch < c) {
            float v = dy[((size_t)s * ct + off + ch) * hw + k];
            uint16_t b = _tsr_f32_to_bf16(v);
            float wv = dyb ? _tsr_bf16_to_f32(b) : v;
            if (xb) want = b;
            else memcpy(&want, &wv, 4);
          }
          ck_assert_msg(got == want,
                        "layout %d, dy %s: input %d (%s), sample %d, channel %d%s, pixel %d: 0x%x, not 0x%x", blk,
                        dyb ? "bf16" : "f32", i, xb ? "bf16" : "f32", s, ch, ch < c ? "" : " (padding)", k, got, want);
        }
  }
  for (int i = 0; i < 3; i++) free(dxs[i]);
  free(dy), free(dys);
}
END_TEST

/* Max and average pooling on bf16-stored x and y, float32 gradients, blocked layout: the forward
 * picks (max) or averages (the float32 average's one rounding: 2^-8 |ref| + 1e-6) the stored
 * values; the backward routes a float32 dy exactly (max) or within float32 arithmetic (average). */
START_TEST(test_bf16_stored_pool_against_float64) {
  if (!onednn_has_bf16_conv()) { /* the same ISA (AVX-512) gates oneDNN's bf16 pooling */
    tt_skip("bf16-stored pooling not checked: no bf16 kernels in this oneDNN on this CPU");
    return;
  }
  const int is_max = _i == 0, blk = _tsr_act_block(), n = 2, c = 20, h = 6, w = 6;
  struct _tsr_pool_desc d = {.n = n, .c = c, .h = h, .w = w, .oh = 3, .ow = 3, .kh = 2, .kw = 2, .sh = 2, .sw = 2,
                             .is_max = is_max, .blk = blk, .bf16 = 1};
  const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * 9;
  float *x = malloc(nx * 4), *dy = malloc(ny * 4);
  tt_fill_uniform(x, nx, 51, -1, 1);
  tt_fill_uniform(dy, ny, 52, -1, 1);
  uint16_t *xs = to_store(x, n, c, h, w, blk), *ys = calloc(padded(n, c, 3, 3, blk), 2);
  float *dyb = to_layout(dy, n, c, 3, 3, blk), *dxb = calloc(padded(n, c, h, w, blk), 4);
  void *ws = malloc(_tsr_pool_ws_bytes(&d) + 1);
  _tsr_pool_fwd_cpu(&d, (const float *)xs, (float *)ys, ws);
  _tsr_pool_bwd_cpu(&d, dyb, ws, dxb);
  float *xv = from_store(xs, n, c, h, w, blk), *yv = from_store(ys, n, c, 3, 3, blk), *dxv = malloc(nx * 4);
  struct _tsr_reorder_desc r = {.n = n, .c = c, .h = h, .w = w, .from_blk = blk, .to_blk = 0};
  if (blk) _tsr_reorder_cpu(&r, dxb, dxv);
  else memcpy(dxv, dxb, nx * 4);
  double *dxref = calloc(nx, 8);
  for (int p = 0; p < n * c; p++)
    for (int oy = 0; oy < 3; oy++)
      for (int ox = 0; ox < 3; ox++) {
        double best = -INFINITY, sum = 0;
        size_t arg = 0;
        for (int ky = 0; ky < 2; ky++)
          for (int kx = 0; kx < 2; kx++) {
            size_t i = (size_t)p * h * w + (oy * 2 + ky) * w + ox * 2 + kx;
            sum += xv[i];
            if (xv[i] > best) best = xv[i], arg = i;
          }
        double ref = is_max ? best : sum / 4, g = dy[(size_t)p * 9 + oy * 3 + ox];
        float got = yv[(size_t)p * 9 + oy * 3 + ox];
        ck_assert_msg(fabs(got - ref) <= 0x1p-8 * fabs(ref) + 1e-6, "%s pooling: y %g, float64 %g",
                      is_max ? "max" : "average", got, ref);
        for (int ky = 0; ky < 2; ky++)
          for (int kx = 0; kx < 2; kx++) {
            size_t i = (size_t)p * h * w + (oy * 2 + ky) * w + ox * 2 + kx;
            dxref[i] += is_max ? (i == arg ? g : 0) : g / 4;
          }
      }
  tt_assert_close(dxv, dxref, nx, 1e-7, 1e-6, is_max ? "max pooling dx" : "average pooling dx");
  free(x), free(dy), free(xs), free(ys), free(dyb), free(dxb), free(ws), free(xv), free(yv), free(dxv), free(dxref);
}
END_TEST

/* Pooling backward with bf16 gradients (the trainer's where both sides take them), blocked layout,
 * bf16 x and y, 20 channels (padding channels in a block of 16), windows 2x2 stride 2 and 3x3
 * stride 2 padding 1 (overlapping: dx sums): each of dy and dx in bf16 or float32 must give
 * bitwise the float32 path's dx from a float32 dy of the same values (a bf16 dy's, or a float32
 * dy's that bf16 cannot hold), rounded once to bf16 where dx is bf16 (nearest even, convert.h),
 * and zeros in dx's padding channels even where dy's padding holds NaN bits (gradients share
 * memory with others of other element sizes). */
START_TEST(test_bf16_gradient_pool_backward_rounds_the_float32_path) {
  if (!onednn_has_bf16_conv()) {
    tt_skip("pooling with bf16 gradients not checked: no bf16 kernels in this oneDNN on this CPU");
    return;
  }
  const int is_max = _i & 1, overlap = _i >> 1, blk = _tsr_act_block(), n = 2, c = 20, h = 6, w = 6;
  const int k = overlap ? 3 : 2, p = overlap ? 1 : 0;
  struct _tsr_pool_desc d = {.n = n, .c = c, .h = h, .w = w, .oh = 3, .ow = 3, .kh = k, .kw = k, .sh = 2, .sw = 2,
                             .ph = p, .pw = p, .is_max = is_max, .blk = blk, .bf16 = 1};
  const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * 9, px = padded(n, c, h, w, blk),
               py = padded(n, c, 3, 3, blk);
  float *x = malloc(nx * 4), *dy = malloc(ny * 4);
  tt_fill_uniform(x, nx, 61 + _i, -1, 1);
  tt_fill_uniform(dy, ny, 62 + _i, -1, 1);
  float *dyr = bf16_rounded(dy, ny), *dyl = to_layout(dyr, n, c, 3, 3, blk), *dyu = to_layout(dy, n, c, 3, 3, blk);
  uint16_t *xs = to_store(x, n, c, h, w, blk), *ys = calloc(py, 2), *dys = to_store(dy, n, c, 3, 3, blk);
  void *ws = malloc(_tsr_pool_ws_bytes(&d) + 1);
  float *dx32 = calloc(px, 4), *dx32u = calloc(px, 4), *dxf = malloc(px * 4);
  uint16_t *dxh = malloc(px * 2);
  const size_t plane = (size_t)3 * 3 * blk, nb = blk ? ((size_t)c + blk - 1) / blk : 0;
  for (size_t i = 0; blk && i < py; i++) /* NaN bits in dy's padding channels */
    if ((i / plane) % nb * blk + i % blk >= (size_t)c) dys[i] = 0xffff;
  _tsr_pool_fwd_cpu(&d, (const float *)xs, (float *)ys, ws);
  _tsr_pool_bwd_cpu(&d, dyl, ws, dx32);   /* the float32 path on bf16 values */
  _tsr_pool_bwd_cpu(&d, dyu, ws, dx32u);  /* and on float32 ones */
  const size_t xplane = (size_t)h * w * blk;
  for (int dyb = 0; dyb < 2; dyb++)
    for (int dxb = 0; dxb < 2; dxb++) {
      if (!dyb && !dxb) continue;
      d.dy_bf16 = dyb, d.dx_bf16 = dxb;
      memset(dxf, 0xff, px * 4), memset(dxh, 0xff, px * 2);
      _tsr_pool_bwd_cpu(&d, dyb ? (const float *)dys : dyu, ws, dxb ? (float *)dxh : dxf);
      const float *ref = dyb ? dx32 : dx32u;
      for (size_t i = 0; i < px; i++) {
        int pad = blk && (i / xplane) % nb * blk + i % blk >= (size_t)c;
        uint32_t got = dxb ? dxh[i] : 0, want = 0;
        if (!dxb) memcpy(&got, &dxf[i], 4);
        if (!pad && dxb) want = _tsr_f32_to_bf16(ref[i]);
        else if (!pad) memcpy(&want, &ref[i], 4);
        ck_assert_msg(got == want, "%s pooling, window %d, dy %s, dx %s: element %zu%s is 0x%x, not 0x%x",
                      is_max ? "max" : "average", k, dyb ? "bf16" : "f32", dxb ? "bf16" : "f32", i,
                      pad ? " (padding)" : "", got, want);
      }
    }
  free(x), free(dy), free(dyr), free(dyl), free(dyu), free(xs), free(ys), free(dys), free(ws), free(dx32), free(dx32u);
  free(dxf), free(dxh);
}
END_TEST

START_TEST(test_f32_precision_is_unchanged_by_bf16_plans) {
  /* Plans are cached per precision: switching back gives float32 results again. */
  struct _tsr_conv_desc d = desc_of(&cfgs[0]);
  size_t nx = (size_t)d.n * d.ci * d.h * d.w, ny = (size_t)d.n * d.co * d.oh * d.ow, nw = (size_t)d.ci * d.co * 9;
  float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = calloc(d.co, 4), *y = malloc(ny * 4);
  double *ref = calloc(ny, 8), *mag = calloc(ny, 8);
  tt_fill_uniform(x, nx, 5, -1, 1);
  tt_fill_uniform(w, nw, 6, -1, 1);
  _tsr_set_precision(TSR_PRECISION_BF16);
  _tsr_conv2d_fwd_cpu(&d, x, w, b, y);
  _tsr_set_precision(TSR_PRECISION_F32);
  _tsr_conv2d_fwd_cpu(&d, x, w, b, y);
  reference(&d, 0, TSR_CONV_FWD, x, w, NULL, ref, mag);
  tt_assert_close(y, ref, ny, 1e-4, 1e-4, "float32 forward after a bf16 one");
  free(x), free(w), free(b), free(y), free(ref), free(mag);
}
END_TEST

/* h is the nearest of its neighbours to v, and on a tie its mantissa is even. */
static void assert_nearest(float (*dec)(uint16_t), uint16_t h, double v, const char *what) {
  double got = dec(h), e = fabs(got - v);
  for (int k = -1; k <= 1; k += 2) {
    uint16_t nb = (uint16_t)(h + k);
    if (((h ^ nb) & 0x8000) || isnan(dec(nb))) continue; /* crossed the sign or into NaN */
    double e2 = fabs((double)dec(nb) - v);
    if (isinf(dec(nb)) && !isinf(got)) continue;
    ck_assert_msg(e < e2 || (e == e2 && !(h & 1)), "%s(%.9g) = 0x%04x (%.9g), neighbour 0x%04x (%.9g) is nearer",
                  what, v, h, got, nb, (double)dec(nb));
  }
}

START_TEST(test_conversions_round_to_nearest_even) {
  float v[20000];
  tt_fill_uniform(v, 10000, 21, -70000, 70000);
  tt_fill_uniform(v + 10000, 10000, 22, -1e-3f, 1e-3f); /* fp16 subnormals start at 6.1e-5 */
  for (int i = 0; i < 20000; i++) {
    uint16_t b = _tsr_f32_to_bf16(v[i]);
    assert_nearest(_tsr_bf16_to_f32, b, v[i], "bf16");
    if (fabsf(v[i]) < 65504) assert_nearest(_tsr_f16_to_f32, _tsr_f32_to_f16(v[i]), v[i], "fp16");
  }
  /* ties: 1 + 2^-11 sits halfway between fp16 1 and 1 + 2^-10: to even (1) */
  ck_assert_uint_eq(_tsr_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
  ck_assert_uint_eq(_tsr_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
  ck_assert_uint_eq(_tsr_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  ck_assert_uint_eq(_tsr_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  /* overflow, specials, subnormals */
  ck_assert_uint_eq(_tsr_f32_to_f16(65504.0f), 0x7bff);
  ck_assert_uint_eq(_tsr_f32_to_f16(65520.0f), 0x7c00);
  ck_assert_uint_eq(_tsr_f32_to_f16(-INFINITY), 0xfc00);
  ck_assert(isnan(_tsr_f16_to_f32(_tsr_f32_to_f16(NAN))));
  ck_assert(isnan(_tsr_bf16_to_f32(_tsr_f32_to_bf16(NAN))));
  ck_assert(isinf(_tsr_bf16_to_f32(_tsr_f32_to_bf16(3.4e38f))));
  ck_assert_uint_eq(_tsr_f32_to_f16(0x1p-24f), 0x0001);
  ck_assert_uint_eq(_tsr_f32_to_f16(0x1p-25f), 0x0000); /* tie to even: 0 */
  ck_assert_uint_eq(_tsr_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400); /* rounds up into the normals */
  /* every fp16 and every bf16 value survives the round trip */
  for (uint32_t h = 0; h < 65536; h++) {
    float f = _tsr_f16_to_f32((uint16_t)h), g = _tsr_bf16_to_f32((uint16_t)h);
    if (!isnan(f)) ck_assert_msg(_tsr_f32_to_f16(f) == h, "fp16 0x%04x does not round-trip", h);
    if (!isnan(g)) ck_assert_msg(_tsr_f32_to_bf16(g) == h, "bf16 0x%04x does not round-trip", h);
  }
}
END_TEST

START_TEST(test_array_conversions_and_accumulation) {
  enum { N = 1000 };
  float x[N], y[N], acc[N];
  uint16_t h[N];
  tt_fill_uniform(x, N, 31, -4, 4);
  _tsr_f32_to_bf16_cpu(x, h, N);
  _tsr_bf16_to_f32_cpu(h, y, N);
  for (int i = 0; i < N; i++) ck_assert_msg(fabsf(y[i] - x[i]) <= 0x1p-8f * fabsf(x[i]), "bf16 element %d", i);
  for (int i = 0; i < N; i++) acc[i] = 1.0f;
  _tsr_bf16_accumulate_cpu(acc, h, N);
  for (int i = 0; i < N; i++) ck_assert_float_eq(acc[i], 1.0f + y[i]);
  _tsr_f32_to_f16_cpu(x, h, N);
  _tsr_f16_to_f32_cpu(h, y, N);
  for (int i = 0; i < N; i++) ck_assert_msg(fabsf(y[i] - x[i]) <= 0x1p-11f * fabsf(x[i]), "fp16 element %d", i);
  for (int i = 0; i < N; i++) acc[i] = 0.0f;
  _tsr_f16_accumulate_cpu(acc, h, N);
  for (int i = 0; i < N; i++) ck_assert_float_eq(acc[i], y[i]);
  ck_assert_int_eq(_tsr_all_finite_cpu(x, N), 1);
  x[N / 2] = INFINITY;
  ck_assert_int_eq(_tsr_all_finite_cpu(x, N), 0);
  x[N / 2] = NAN;
  ck_assert_int_eq(_tsr_all_finite_cpu(x, N), 0);
}
END_TEST

START_TEST(test_loss_scaler_halves_skips_and_grows) {
  struct _tsr_loss_scaler p;
  struct _tsr_scale_state s;
  ck_assert_int_eq(_tsr_loss_scaler_init(&p, &s, 0, 10), TSR_ERR_ARG);
  ck_assert_int_eq(_tsr_loss_scaler_init(&p, &s, 0x1p128, 10), TSR_ERR_ARG);
  ck_assert_int_eq(_tsr_loss_scaler_init(&p, &s, 1024, 0), TSR_ERR_ARG);
  ck_assert_int_eq(_tsr_loss_scaler_init(&p, &s, 1024, 3), TSR_OK);
  ck_assert_int_eq(_tsr_loss_scaler_update(&p, &s, 0), 0); /* overflow: skip, halve */
  ck_assert(s.scale == 512);
  ck_assert_int_eq(_tsr_loss_scaler_update(&p, &s, 1), 1);
  ck_assert_int_eq(_tsr_loss_scaler_update(&p, &s, 1), 1);
  ck_assert(s.scale == 512);
  ck_assert_int_eq(_tsr_loss_scaler_update(&p, &s, 1), 1); /* third good step in a row: double */
  ck_assert(s.scale == 1024);
  ck_assert_int_eq(_tsr_loss_scaler_update(&p, &s, 1), 1);
  ck_assert_int_eq(_tsr_loss_scaler_update(&p, &s, 0), 0); /* an overflow restarts the count */
  ck_assert_int_eq(_tsr_loss_scaler_update(&p, &s, 1), 1);
  ck_assert_int_eq(_tsr_loss_scaler_update(&p, &s, 1), 1);
  ck_assert(s.scale == 512);
  ck_assert(s.skipped == 2 && s.steps == 8);
  ck_assert_float_eq(_tsr_loss_scaler_unscale(s.scale, 4), 1.0f / 2048);
  for (int i = 0; i < 200; i++) _tsr_loss_scaler_update(&p, &s, 0);
  ck_assert(s.scale > 0); /* clamped, never 0 */
}
END_TEST

/* ---- loss scaling wired into training (one rank) ---- */

#define LS_S 8
/* The same batch every step (the sample index only), so that a run whose first k steps were
 * skipped must end where a run k steps shorter ends. */
static int ls_fill(void *user, int64_t step, int index, float *x, float *y) {
  for (int c = 0; c < 2; c++)
    for (int p = 0; p < LS_S * LS_S; p++) x[c * LS_S * LS_S + p] = sinf(0.37f * (p + 1) * (index + 1) + c) * 0.8f;
  /* targets of magnitude ~4 make weight gradients of magnitude ~10: times 2^127 they overflow */
  for (int p = 0; p < LS_S * LS_S; p++) y[p] = 4.0f * x[p] * x[p] - 2.4f * x[(p + 1) % (LS_S * LS_S)];
  return 0;
}

struct ls_run {
  double loss[16];
  float params[4096];
  size_t nparams;
  tsr_loss_scale_state state;
};

/* Deterministic training of a conv-relu-batchnorm-conv model for `steps` steps with SGD and momentum
 * (an update left scaled would be `scale` times too big; Adam would hide that) or Adam (its bias
 * correction counts the steps applied). */
/* One CPU worker, deterministic, no MPI. */
static tsr_context *ls_context(void) {
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 1, co.use_mpi = 0, co.deterministic = 1, co.verbose = 0;
  tsr_context *ctx;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  return ctx;
}

/* conv-relu(-batchnorm)-conv on 2 x LS_S x LS_S inputs */
static tsr_model *ls_model(int with_bn) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "ls"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 2, LS_S, LS_S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "a", "in", 4, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "ra", TSR_LAYER_RELU, "a"), TSR_OK);
  if (with_bn) ck_assert_int_eq(tsr_model_add_simple(m, "bn", TSR_LAYER_BATCHNORM, "ra"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out", with_bn ? "bn" : "ra", 1, 3, 1, 1), TSR_OK);
  return m;
}

static void ls_train(tsr_optim_kind kind, double loss_scale, double init, int steps, struct ls_run *r) {
  tsr_context *ctx = ls_context();
  tsr_model *m = ls_model(1);
  tsr_optim_spec sgd = tsr_optim_spec_default(kind);
  sgd.lr = kind == TSR_OPTIM_SGD ? 0.05f : 0.01f;
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 4, o.slices = 2, o.seed = 5, o.loss_scale = loss_scale, o.loss_scale_init = init;
  o.loss_scale_interval = 1000;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &sgd, &o) == TSR_OK, "%s", tsr_last_error());
  for (int i = 0; i < steps; i++) ck_assert_int_eq(tsr_trainer_step(t, ls_fill, NULL, NULL), TSR_OK);
  for (int i = 0; i < steps; i++) ck_assert_int_eq(tsr_trainer_loss(t, i, &r->loss[i]), TSR_OK);
  r->nparams = 0;
  for (int i = 0; i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape sh;
    int trainable;
    ck_assert_int_eq(tsr_trainer_tensor_info(t, i, NULL, &sh, &trainable), TSR_OK);
    if (!trainable) continue; /* running statistics move in skipped steps too, as in PyTorch */
    ck_assert_int_le(r->nparams + tsr_shape_numel(&sh), 4096);
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, r->params + r->nparams), TSR_OK);
    r->nparams += tsr_shape_numel(&sh);
  }
  memset(&r->state, 0, sizeof r->state);
  if (loss_scale == TSR_LOSS_SCALE_DYNAMIC) ck_assert_int_eq(tsr_trainer_loss_scale_get(t, &r->state), TSR_OK);
  else ck_assert_int_eq(tsr_trainer_loss_scale_get(t, &r->state), TSR_ERR_STATE);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}

/* Multiplying by 2^k and by 2^-k is exact in binary floating point (away from overflow and
 * subnormals), so a power-of-two loss scale must not change a single bit. */
START_TEST(test_power_of_two_loss_scale_is_bitwise_exact) {
  static struct ls_run plain, scaled, dyn;
  ls_train(TSR_OPTIM_SGD, 0, 0, 6, &plain);
  ls_train(TSR_OPTIM_SGD, 1024, 0, 6, &scaled);
  ls_train(TSR_OPTIM_SGD, TSR_LOSS_SCALE_DYNAMIC, 0x1p12, 6, &dyn);
  ck_assert(plain.loss[5] < plain.loss[0]);
  for (int i = 0; i < 6; i++) {
    ck_assert_msg(scaled.loss[i] == plain.loss[i], "step %d: loss %.17g with scale 1024, %.17g without", i,
                  scaled.loss[i], plain.loss[i]);
    ck_assert_msg(dyn.loss[i] == plain.loss[i], "step %d: loss %.17g with dynamic scale 2^12, %.17g without", i,
                  dyn.loss[i], plain.loss[i]);
  }
  ck_assert(memcmp(scaled.params, plain.params, plain.nparams * sizeof(float)) == 0);
  ck_assert(memcmp(dyn.params, plain.params, plain.nparams * sizeof(float)) == 0);
  ck_assert(dyn.state.skipped == 0 && dyn.state.steps == 6 && dyn.state.scale == 0x1p12);
}
END_TEST

/* An initial scale of 2^127 overflows float32 gradients: those steps must be skipped (parameters and
 * Adam's moments untouched, its step count not advanced) and the scale halved each time; after k
 * skips the run must equal, bit for bit, an unscaled run k steps shorter on the same batch. */
START_TEST(test_overflowing_loss_scale_skips_steps_and_halves) {
  enum { N = 12 };
  static struct ls_run dyn, plain;
  ls_train(TSR_OPTIM_ADAM, TSR_LOSS_SCALE_DYNAMIC, 0x1p127, N, &dyn);
  int64_t k = dyn.state.skipped;
  ck_assert_msg(k >= 1 && k < N, "%lld of %d steps skipped", (long long)k, N);
  ck_assert(dyn.state.steps == N);
  ck_assert_msg(dyn.state.scale == ldexp(1, 127 - (int)k), "scale %g after %lld overflows", dyn.state.scale,
                (long long)k);
  for (int i = 1; i < k; i++) ck_assert_msg(dyn.loss[i] == dyn.loss[0], "skipped step %d changed the model", i);
  ls_train(TSR_OPTIM_ADAM, 0, 0, N - (int)k, &plain);
  ck_assert(memcmp(dyn.params, plain.params, plain.nparams * sizeof(float)) == 0);
  ck_assert(dyn.loss[N - 1] == plain.loss[N - 1 - k]);
  ck_assert(dyn.loss[N - 1] < 0.8 * dyn.loss[0]); /* and it trains */
}
END_TEST

static tsr_trainer *ls_trainer(tsr_context *ctx, tsr_model *m, double loss_scale, double init) {
  tsr_optim_spec adam = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 4, o.slices = 2, o.seed = 5, o.loss_scale = loss_scale, o.loss_scale_init = init;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &adam, &o) == TSR_OK, "%s", tsr_last_error());
  return t;
}

static void ls_steps(tsr_trainer *t, int n, double *loss) {
  int64_t id[8];
  for (int i = 0; i < n; i++) ck_assert_int_eq(tsr_trainer_step(t, ls_fill, NULL, &id[i]), TSR_OK);
  for (int i = 0; i < n; i++) ck_assert_int_eq(tsr_trainer_loss(t, id[i], &loss[i]), TSR_OK);
}

/* A run resumed from a checkpoint continues bit for bit only if the scaler's state (scale, good
 * steps, skipped steps, which Adam's step count depends on) comes back too. */
START_TEST(test_loss_scaler_state_travels_in_checkpoints) {
  tsr_context *ctx = ls_context();
  tsr_model *m = ls_model(0);
  char path[4096], plain[4096];
  snprintf(path, sizeof path, "%s/scaled.h5", tt_tmpdir());
  snprintf(plain, sizeof plain, "%s/plain.h5", tt_tmpdir());
  tsr_checkpoint_meta meta = {.step = 6, .epoch = 1, .position = 6}, got;
  double before[3], after[3], tmp[6];
  tsr_loss_scale_state s1, s2;

  tsr_trainer *t = ls_trainer(ctx, m, TSR_LOSS_SCALE_DYNAMIC, 0x1p127);
  ls_steps(t, 6, tmp);
  ck_assert_int_eq(tsr_trainer_loss_scale_get(t, &s1), TSR_OK);
  ck_assert_msg(s1.skipped >= 1 && s1.steps == 6, "skipped %lld of %lld", (long long)s1.skipped, (long long)s1.steps);
  ck_assert_msg(tsr_checkpoint_save(t, path, &meta) == TSR_OK, "%s", tsr_last_error());
  ls_steps(t, 3, before);
  tsr_trainer_destroy(t);

  ck_assert_int_eq(tsr_checkpoint_verify(path, &got, NULL), TSR_OK);
  ck_assert(got.loss_scale == s1.scale && got.loss_scale_skipped == s1.skipped && got.loss_scale_steps == 6);
  t = ls_trainer(ctx, m, TSR_LOSS_SCALE_DYNAMIC, 1024);
  ck_assert_msg(tsr_checkpoint_load(t, path, NULL) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_trainer_loss_scale_get(t, &s2), TSR_OK);
  ck_assert(memcmp(&s1, &s2, sizeof s1) == 0);
  ls_steps(t, 3, after);
  for (int i = 0; i < 3; i++)
    ck_assert_msg(after[i] == before[i], "resumed step %d: %.17g, uninterrupted %.17g", i, after[i], before[i]);
  tsr_trainer_destroy(t);

  /* without loss scaling: nothing written, and the file loads into either kind of run */
  t = ls_trainer(ctx, m, 0, 0);
  ck_assert_msg(tsr_checkpoint_load(t, path, NULL) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_checkpoint_save(t, plain, &meta) == TSR_OK, "%s", tsr_last_error());
  tsr_trainer_destroy(t);
  ck_assert_int_eq(tsr_checkpoint_verify(plain, &got, NULL), TSR_OK);
  ck_assert(got.loss_scale == 0);
  t = ls_trainer(ctx, m, TSR_LOSS_SCALE_DYNAMIC, 1024);
  ck_assert_msg(tsr_checkpoint_load(t, plain, NULL) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_trainer_loss_scale_get(t, &s2), TSR_OK);
  ck_assert(s2.scale == 1024 && s2.steps == 0);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

START_TEST(test_fp16_and_gpu_only_refused_on_cpus_and_bad_scales_named) {
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 1, co.use_mpi = 0, co.verbose = 0, co.precision = TSR_PRECISION_FP16;
  tsr_context *ctx = NULL;
  ck_assert_int_eq(tsr_context_create(&ctx, &co, NULL, NULL), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "fp16 needs a CUDA worker"));
  co.precision = TSR_PRECISION_F32, co.gpu_only = 1;
  ck_assert_int_eq(tsr_context_create(&ctx, &co, NULL, NULL), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "gpu_only needs a CUDA worker"));
  co.gpu_only = 0;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "ls"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, 4, 4), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "out", "in", 1, 3, 1, 1), TSR_OK);
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 2, o.loss_scale = -3;
  tsr_trainer *t = NULL;
  ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "loss_scale = -3"));
  o.loss_scale = 0, o.grad_reduce = 7;
  ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "grad_reduce = 7"));
  int p = -1;
  ck_assert_int_eq(tsr_reduce_precision_parse("bf16", &p), TSR_OK);
  ck_assert_int_eq(p, TSR_REDUCE_BF16);
  ck_assert_int_eq(tsr_reduce_precision_parse("half", &p), TSR_ERR_ARG);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* The wire format: halves round to nearest even, the float32 head stays exact (the control word),
 * unpack-accumulate adds in float32. */
START_TEST(test_wire_pack_keeps_head_exact_and_rounds_the_rest) {
  enum { N = 40, KEEP = 16 };
  float x[N], back[N], y[N];
  uint16_t w[N + KEEP];
  for (int i = 0; i < N; i++) x[i] = i < KEEP ? 16777215.0f - (float)i * 3.0f : 1.0f + (float)i / 7.0f;
  for (int fmt = TSR_WIRE_BF16; fmt <= TSR_WIRE_FP16; fmt++) {
    memcpy(back, x, sizeof x);
    _tsr_wire_pack_cpu(x, N, KEEP, fmt, w, back);
    for (int i = 0; i < N; i++) {
      float want = i < KEEP ? x[i] : fmt == TSR_WIRE_BF16 ? _tsr_bf16_to_f32(_tsr_f32_to_bf16(x[i]))
                                                          : _tsr_f16_to_f32(_tsr_f32_to_f16(x[i]));
      ck_assert_msg(back[i] == want, "fmt %d element %d: %g, want %g", fmt, i, back[i], want);
      y[i] = 1.0f;
    }
    _tsr_wire_unpack_cpu(y, N, KEEP, fmt, w, 1);
    for (int i = 0; i < N; i++) ck_assert_msg(y[i] == 1.0f + back[i], "fmt %d accumulate %d", fmt, i);
    _tsr_wire_unpack_cpu(y, N, KEEP, fmt, w, 0);
    ck_assert(memcmp(y, back, sizeof y) == 0);
  }
}
END_TEST

static Suite *make_precision_suite(void) {
  Suite *s = suite_create("precision");
  TCase *k = tcase_create("kernels");
  tcase_set_timeout(k, 120);
  tcase_add_loop_test(k, test_bf16_conv_passes_within_bf16_bound, 0, NCFG);
  tcase_add_loop_test(k, test_bf16_stored_conv_within_bf16_bound, 0, NCFG);
  tcase_add_loop_test(k, test_bf16_gradients_conv_follow_float32_gradients, 0, NCFG);
  tcase_add_loop_test(k, test_bf16_stored_batchnorm_against_float64, 0, 4);
  tcase_add_loop_test(k, test_bf16_stored_concat_copies_bits, 0, 2);
  tcase_add_loop_test(k, test_bf16_gradient_concat_backward_rounds_and_zeroes_padding, 0, 4);
  tcase_add_loop_test(k, test_bf16_stored_pool_against_float64, 0, 2);
  tcase_add_loop_test(k, test_bf16_gradient_pool_backward_rounds_the_float32_path, 0, 4);
  tcase_add_test(k, test_f32_precision_is_unchanged_by_bf16_plans);
  tcase_add_test(k, test_conversions_round_to_nearest_even);
  tcase_add_test(k, test_array_conversions_and_accumulation);
  tcase_add_test(k, test_loss_scaler_halves_skips_and_grows);
  tcase_add_test(k, test_wire_pack_keeps_head_exact_and_rounds_the_rest);
  suite_add_tcase(s, k);
  TCase *tr = tcase_create("training");
  tcase_set_timeout(tr, 120);
  tcase_add_test(tr, test_power_of_two_loss_scale_is_bitwise_exact);
  tcase_add_test(tr, test_overflowing_loss_scale_skips_steps_and_halves);
  tcase_add_test(tr, test_loss_scaler_state_travels_in_checkpoints);
  tcase_add_test(tr, test_fp16_and_gpu_only_refused_on_cpus_and_bad_scales_named);
  suite_add_tcase(s, tr);
  return s;
}

TT_MAIN(make_precision_suite)

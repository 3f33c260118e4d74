/* Suite "layers3d": the kernels of the 3-D layers on NCDHW float32 against float64 references
 * written here as direct loops: conv3d and conv_transpose3d (forward; data and weight gradients by
 * finite differences, weight gradients accumulating), max and average pooling in 3-D (forward;
 * backward by finite differences), nearest upsampling (forward; backward by finite differences),
 * tanh with an output scale, oneDNN's non-reference kernels for CosmoFlow's shapes, conv3d on a
 * range of D planes of larger buffers, and each as a StarPU task equal to its raw kernel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "tensor/shape.h"
#include "testutil.h"

/* Float sums of at most a few hundred products of values in [-1, 1]. */
#define FWD_ATOL 1e-4
#define FWD_RTOL 1e-4
/* Finite differences of L = sum(y * r), y from the float64 reference: linear in each value of x
 * and w, so the step only meets float rounding of the kernel under test. */
#define FD_ATOL 1e-3
#define FD_RTOL 1e-3
#define FD_STEP 0.25

static size_t vol(const int *a) { return (size_t)a[0] * a[1] * a[2]; }

/* ---- conv3d and conv_transpose3d ---- */

struct cfg {
  int n, ci, id[3], co, k[3], s[3], p[3], dil[3], op[3], bias, deconv;
};

/* stride 1 with padding; stride 2 and a non-cubic kernel; dilation 2; transposed 2x2x2 stride 2
 * (the U-Net's upsampling); transposed 3x3x3 stride 2 with output padding and no bias */
static const struct cfg cfgs[] = {
    {2, 3, {5, 6, 4}, 4, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, 1, 0},
    {2, 2, {7, 6, 5}, 3, {3, 2, 3}, {2, 1, 2}, {1, 0, 1}, {1, 1, 1}, {0, 0, 0}, 0, 0},
    {1, 2, {7, 7, 6}, 3, {3, 3, 2}, {1, 1, 1}, {2, 2, 1}, {2, 2, 1}, {0, 0, 0}, 1, 0},
    {2, 3, {3, 4, 2}, 2, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}, {0, 0, 0}, 1, 1},
    {1, 2, {3, 3, 4}, 3, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 0, 1}, 0, 1},
};
#define NCFG (int)(sizeof cfgs / sizeof cfgs[0])

static struct _tsr_conv3d_desc make_desc(const struct cfg *c) {
  struct _tsr_conv3d_desc d = {.n = c->n, .ci = c->ci, .co = c->co, .has_bias = c->bias, .deconv = c->deconv};
  for (int a = 0; a < 3; a++) {
    d.id[a] = c->id[a], d.k[a] = c->k[a], d.s[a] = c->s[a], d.p[a] = c->p[a], d.dil[a] = c->dil[a];
    d.op[a] = c->op[a];
    d.od[a] = (int)(c->deconv ? _tsr_deconv_out(c->id[a], c->k[a], c->s[a], c->p[a], c->dil[a], c->op[a])
                              : _tsr_conv_out(c->id[a], c->k[a], c->s[a], c->p[a], c->dil[a]));
  }
  return d;
}

static size_t nx(const struct _tsr_conv3d_desc *d) { return (size_t)d->n * d->ci * vol(d->id); }
static size_t ny(const struct _tsr_conv3d_desc *d) { return (size_t)d->n * d->co * vol(d->od); }
static size_t nw(const struct _tsr_conv3d_desc *d) { return (size_t)d->ci * d->co * vol(d->k); }

/* Direct 3-D convolution in float64. Conv: y[n,o,q] += x[n,c,q*s-p+k*dil] w[o,c,k] over the
 * positions q of y; transposed: y[n,o,q*s-p+k*dil] += x[n,c,q] w[c,o,k] over the positions q of x. */
static void ref_fwd(const struct _tsr_conv3d_desc *d, const float *x, const float *w, const float *b, double *y) {
  const int t = d->deconv;
  const int *loop = t ? d->id : d->od; /* positions q */
  for (size_t i = 0; i < ny(d); i++) y[i] = b ? b[i / vol(d->od) % d->co] : 0.0;
  for (int n = 0; n < d->n; n++)
    for (int o = 0; o < d->co; o++)
      for (int c = 0; c < d->ci; c++)
        for (int k0 = 0; k0 < d->k[0]; k0++)
          for (int k1 = 0; k1 < d->k[1]; k1++)
            for (int k2 = 0; k2 < d->k[2]; k2++) {
              size_t kk = ((size_t)k0 * d->k[1] + k1) * d->k[2] + k2;
              double wv = t ? w[((size_t)c * d->co + o) * vol(d->k) + kk] : w[((size_t)o * d->ci + c) * vol(d->k) + kk];
              for (int q0 = 0; q0 < loop[0]; q0++)
                for (int q1 = 0; q1 < loop[1]; q1++)
                  for (int q2 = 0; q2 < loop[2]; q2++) {
                    int q[3] = {q0, q1, q2}, k[3] = {k0, k1, k2}, r[3], ok = 1;
                    for (int a = 0; a < 3; a++) {
                      r[a] = q[a] * d->s[a] - d->p[a] + k[a] * d->dil[a];
                      ok = ok && r[a] >= 0 && r[a] < (t ? d->od[a] : d->id[a]);
                    }
                    if (!ok) continue;
                    const int *yq = t ? r : q, *xq = t ? q : r;
                    size_t yi = (((size_t)n * d->co + o) * d->od[0] + yq[0]) * d->od[1] * d->od[2] +
                                (size_t)yq[1] * d->od[2] + yq[2];
                    size_t xi = (((size_t)n * d->ci + c) * d->id[0] + xq[0]) * d->id[1] * d->id[2] +
                                (size_t)xq[1] * d->id[2] + xq[2];
                    y[yi] += wv * x[xi];
                  }
            }
}

START_TEST(test_conv3d_fwd_matches_direct_loops) {
  struct _tsr_conv3d_desc d = make_desc(&cfgs[_i]);
  float *x = malloc(nx(&d) * 4), *w = malloc(nw(&d) * 4), *b = malloc(d.co * 4), *y = malloc(ny(&d) * 4);
  double *ref = malloc(ny(&d) * sizeof *ref);
  tt_fill_uniform(x, nx(&d), 10 + _i, -1, 1);
  tt_fill_uniform(w, nw(&d), 20 + _i, -1, 1);
  tt_fill_uniform(b, d.co, 30 + _i, -1, 1);
  _tsr_conv3d_run(&d, TSR_CONV_FWD, x, w, d.has_bias ? b : NULL, y, NULL);
  ref_fwd(&d, x, w, d.has_bias ? b : NULL, ref);
  char what[64];
  snprintf(what, sizeof what, "%s fwd config %d", d.deconv ? "conv_transpose3d" : "conv3d", _i);
  tt_assert_close(y, ref, ny(&d), FWD_ATOL, FWD_RTOL, what);
  free(x), free(w), free(b), free(y), free(ref);
}
END_TEST

/* The forward on a range of planes along axis ax (0 D, 1 H, 2 W): the input planes
 * [a, a + m + keff - 1) of the whole input give output planes [a, a + m) of the whole output, equal
 * to the float64 reference there, every other output value untouched. Configs 0 and 2 (dilation 2)
 * without padding along ax, for each axis. */
START_TEST(test_conv3d_on_a_range_of_planes) {
  int c = _i % 2 ? 2 : 0, ax = _i / 2;
  struct cfg cf = cfgs[c];
  cf.p[ax] = 0, cf.id[ax] = 9;
  struct _tsr_conv3d_desc d = make_desc(&cf);
  float *x = malloc(nx(&d) * 4), *w = malloc(nw(&d) * 4), *b = malloc(d.co * 4), *y = malloc(ny(&d) * 4);
  double *ref = malloc(ny(&d) * sizeof *ref);
  tt_fill_uniform(x, nx(&d), 40 + c, -1, 1);
  tt_fill_uniform(w, nw(&d), 50 + c, -1, 1);
  tt_fill_uniform(b, d.co, 60 + c, -1, 1);
  ref_fwd(&d, x, w, d.has_bias ? b : NULL, ref);
  int keff = (d.k[ax] - 1) * d.dil[ax] + 1, a = 1, m = d.od[ax] - 2;
  ck_assert_int_gt(m, 0);
  for (size_t k = 0; k < ny(&d); k++) y[k] = 7.0f;
  struct _tsr_conv3d_desc r = d;
  r.src_full[ax] = d.id[ax], r.src_off[ax] = a, r.id[ax] = m + keff - 1;
  r.dst_full[ax] = d.od[ax], r.dst_off[ax] = a, r.od[ax] = m;
  _tsr_conv3d_run(&r, TSR_CONV_FWD, x, w, d.has_bias ? b : NULL, y, NULL);
  size_t inner = 1;
  for (int k = ax + 1; k < 3; k++) inner *= (size_t)d.od[k];
  for (size_t k = 0; k < ny(&d); k++) {
    int q = (int)(k / inner % (size_t)d.od[ax]);
    double want = q >= a && q < a + m ? ref[k] : 7.0;
    ck_assert_msg(fabs(y[k] - want) <= FWD_ATOL + FWD_RTOL * fabs(want),
                  "config %d axis %d value %zu (plane %d): %g, want %g", c, ax, k, q, y[k], want);
  }
  free(x), free(w), free(b), free(y), free(ref);
}
END_TEST

/* len planes from off along axis ax of [nc, ext...] (ext[ax] planes there) into a new dense buffer. */
static float *cut(const float *buf, size_t nc, const int *ext, int ax, int off, int len) {
  size_t outer = nc, inner = 1;
  for (int k = 0; k < ax; k++) outer *= (size_t)ext[k];
  for (int k = ax + 1; k < 3; k++) inner *= (size_t)ext[k];
  float *out = malloc(outer * (size_t)len * inner * sizeof *out);
  for (size_t i = 0; i < outer; i++)
    memcpy(out + i * (size_t)len * inner, buf + (i * (size_t)ext[ax] + (size_t)off) * inner,
           (size_t)len * inner * sizeof *out);
  return out;
}

/* The backward passes on ranges along axis ax, as the pieces of a split convolution take them: the
 * data gradient from output-gradient planes [a, a + m), the weight gradient from input planes
 * [a, a + m + 2) and output-gradient planes [a, a + m), each equal (exactly: the same kernel on the
 * same values) to the pass on those planes cut out beforehand, which the gradient tests check
 * against finite differences. Config 0 without padding along ax. */
START_TEST(test_conv3d_backward_on_ranges_of_planes) {
  int ax = _i;
  struct cfg cf = cfgs[0];
  cf.p[ax] = 0, cf.id[ax] = 9;
  struct _tsr_conv3d_desc d = make_desc(&cf), r = d;
  int a = 2, m = 4;
  r.id[ax] = m + 2, r.od[ax] = m;
  size_t nxr = nx(&r), nwr = nw(&r);
  float *x = malloc(nx(&d) * 4), *dy = malloc(ny(&d) * 4), *w = malloc(nw(&d) * 4);
  tt_fill_uniform(x, nx(&d), 70 + ax, -1, 1);
  tt_fill_uniform(dy, ny(&d), 80 + ax, -1, 1);
  tt_fill_uniform(w, nw(&d), 90 + ax, -1, 1);
  float *xc = cut(x, (size_t)d.n * d.ci, d.id, ax, a, m + 2), *dyc = cut(dy, (size_t)d.n * d.co, d.od, ax, a, m);
  float *dx = malloc(nxr * 4), *dxc = malloc(nxr * 4), *dw = malloc(nwr * 4), *dwc = malloc(nwr * 4);
  float *db = malloc(d.co * 4), *dbc = malloc(d.co * 4);
  struct _tsr_conv3d_desc dense = r;
  dense.overwrite = r.overwrite = 1;
  _tsr_conv3d_run(&dense, TSR_CONV_BWD_DATA, dyc, w, NULL, dxc, NULL);
  _tsr_conv3d_run(&dense, TSR_CONV_BWD_WEIGHTS, xc, dyc, NULL, dwc, dbc);
  struct _tsr_conv3d_desc rd = r, rw = r;
  rd.src_full[ax] = d.od[ax], rd.src_off[ax] = a;
  _tsr_conv3d_run(&rd, TSR_CONV_BWD_DATA, dy, w, NULL, dx, NULL);
  rw.src_full[ax] = d.id[ax], rw.src_off[ax] = a, rw.in1_full[ax] = d.od[ax], rw.in1_off[ax] = a;
  _tsr_conv3d_run(&rw, TSR_CONV_BWD_WEIGHTS, x, dy, NULL, dw, db);
  ck_assert_msg(!memcmp(dx, dxc, nxr * 4), "axis %d: data gradient from a range of planes", ax);
  ck_assert_msg(!memcmp(dw, dwc, nwr * 4) && !memcmp(db, dbc, d.co * 4), "axis %d: weight gradient from ranges", ax);
  free(x), free(dy), free(w), free(xc), free(dyc), free(dx), free(dxc), free(dw), free(dwc), free(db), free(dbc);
}
END_TEST

/* A box [lo, lo + len) of [nc, ext...] into a new dense buffer. */
static float *cut_box(const float *buf, size_t nc, const int *ext, const int *lo, const int *len) {
  float *out = malloc(nc * (size_t)len[0] * len[1] * len[2] * sizeof *out), *o = out;
  for (size_t i = 0; i < nc; i++)
    for (int z = 0; z < len[0]; z++)
      for (int y = 0; y < len[1]; y++, o += len[2])
        memcpy(o,
               buf + ((i * (size_t)ext[0] + (size_t)(lo[0] + z)) * (size_t)ext[1] + (size_t)(lo[1] + y)) * ext[2] +
                   lo[2],
               (size_t)len[2] * sizeof *o);
  return out;
}

/* The three passes on boxes along two axes (D and H, H and W, D and W), as the pieces of a
 * convolution split along two axes take them: forward from input box [a, a + m + 2) to output box
 * [a, a + m) of the whole output (every other output value untouched), the data gradient from an
 * output-gradient box, the weight gradient from an input box and an output-gradient box, each equal
 * (exactly: the same kernel on the same values) to the pass on the boxes cut out beforehand. Config
 * 0 (kernel 3) without padding along the two axes. */
START_TEST(test_conv3d_on_boxes_along_two_axes) {
  int ax[2] = {_i == 1 ? 1 : 0, _i == 0 ? 1 : 2};
  struct cfg cf = cfgs[0];
  for (int i = 0; i < 2; i++) cf.p[ax[i]] = 0, cf.id[ax[i]] = 9;
  struct _tsr_conv3d_desc d = make_desc(&cf), r = d;
  int a = 2, m = 4, ilo[3] = {0, 0, 0}, ilen[3], olo[3] = {0, 0, 0}, olen[3];
  for (int k = 0; k < 3; k++) ilen[k] = d.id[k], olen[k] = d.od[k];
  for (int i = 0; i < 2; i++) {
    int k = ax[i];
    ck_assert_int_eq(d.k[k], 3);
    r.id[k] = m + 2, r.od[k] = m, ilo[k] = olo[k] = a, ilen[k] = m + 2, olen[k] = m;
  }
  size_t nxr = nx(&r), nyr = ny(&r), nwr = nw(&r), nc_o = (size_t)d.n * d.co;
  float *x = malloc(nx(&d) * 4), *dy = malloc(ny(&d) * 4), *w = malloc(nw(&d) * 4), *b = malloc(d.co * 4);
  tt_fill_uniform(x, nx(&d), 71 + _i, -1, 1);
  tt_fill_uniform(dy, ny(&d), 81 + _i, -1, 1);
  tt_fill_uniform(w, nw(&d), 91 + _i, -1, 1);
  tt_fill_uniform(b, d.co, 61 + _i, -1, 1);
  float *xc = cut_box(x, (size_t)d.n * d.ci, d.id, ilo, ilen), *dyc = cut_box(dy, nc_o, d.od, olo, olen);
  float *yc = malloc(nyr * 4), *y = malloc(ny(&d) * 4), *dx = malloc(nxr * 4), *dxc = malloc(nxr * 4);
  float *dw = malloc(nwr * 4), *dwc = malloc(nwr * 4), *db = malloc(d.co * 4), *dbc = malloc(d.co * 4);
  struct _tsr_conv3d_desc dense = r, rf = r, rd = r, rw = r;
  dense.overwrite = rw.overwrite = 1;
  _tsr_conv3d_run(&dense, TSR_CONV_FWD, xc, w, d.has_bias ? b : NULL, yc, NULL);
  _tsr_conv3d_run(&dense, TSR_CONV_BWD_DATA, dyc, w, NULL, dxc, NULL);
  _tsr_conv3d_run(&dense, TSR_CONV_BWD_WEIGHTS, xc, dyc, NULL, dwc, dbc);
  for (size_t k = 0; k < ny(&d); k++) y[k] = 7.0f;
  for (int i = 0; i < 2; i++) {
    int k = ax[i];
    rf.src_full[k] = d.id[k], rf.src_off[k] = a, rf.dst_full[k] = d.od[k], rf.dst_off[k] = a;
    rd.src_full[k] = d.od[k], rd.src_off[k] = a;
    rw.src_full[k] = d.id[k], rw.src_off[k] = a, rw.in1_full[k] = d.od[k], rw.in1_off[k] = a;
  }
  _tsr_conv3d_run(&rf, TSR_CONV_FWD, x, w, d.has_bias ? b : NULL, y, NULL);
  _tsr_conv3d_run(&rd, TSR_CONV_BWD_DATA, dy, w, NULL, dx, NULL);
  _tsr_conv3d_run(&rw, TSR_CONV_BWD_WEIGHTS, x, dy, NULL, dw, db);
  float *ybox = cut_box(y, nc_o, d.od, olo, olen);
  ck_assert_msg(!memcmp(ybox, yc, nyr * 4), "axes %d, %d: forward into an output box", ax[0], ax[1]);
  size_t outside = 0;
  for (size_t k = 0; k < ny(&d); k++) outside += y[k] == 7.0f;
  ck_assert_msg(outside == ny(&d) - nyr, "axes %d, %d: %zu values outside the output box kept, want %zu", ax[0], ax[1],
                outside, ny(&d) - nyr);
  ck_assert_msg(!memcmp(dx, dxc, nxr * 4), "axes %d, %d: data gradient from a box", ax[0], ax[1]);
  ck_assert_msg(!memcmp(dw, dwc, nwr * 4) && !memcmp(db, dbc, d.co * 4), "axes %d, %d: weight gradient from boxes",
                ax[0], ax[1]);
  free(x), free(dy), free(w), free(b), free(xc), free(dyc), free(yc), free(y), free(dx), free(dxc), free(dw);
  free(dwc), free(db), free(dbc), free(ybox);
}
END_TEST

struct fd_ctx {
  const struct _tsr_conv3d_desc *d;
  float *x, *w, *b;
  const double *r;
  double *y;
};

static double conv_loss(void *user) {
  struct fd_ctx *c = user;
  ref_fwd(c->d, c->x, c->w, c->d->has_bias ? c->b : NULL, c->y);
  double l = 0;
  for (size_t k = 0; k < ny(c->d); k++) l += c->y[k] * c->r[k];
  return l;
}

/* dx must be overwritten; dw and db start from random values and must get the gradient added by
 * each of two calls. */
START_TEST(test_conv3d_gradients_match_finite_differences) {
  struct _tsr_conv3d_desc d = make_desc(&cfgs[_i]);
  size_t sx = nx(&d), sy = ny(&d), sw = nw(&d);
  float *x = malloc(sx * 4), *w = malloc(sw * 4), *b = malloc(d.co * 4), *r = malloc(sy * 4);
  double *rd = malloc(sy * 8), *y = malloc(sy * 8);
  tt_fill_uniform(x, sx, 40 + _i, -1, 1);
  tt_fill_uniform(w, sw, 50 + _i, -1, 1);
  tt_fill_uniform(b, d.co, 60 + _i, -1, 1);
  tt_fill_uniform(r, sy, 70 + _i, -1, 1);
  for (size_t k = 0; k < sy; k++) rd[k] = r[k];
  struct fd_ctx ctx = {&d, x, w, b, rd, y};
  const char *op = d.deconv ? "conv_transpose3d" : "conv3d";
  char what[80];

  float *dx = malloc(sx * 4);
  double *fdx = malloc(sx * 8);
  for (size_t k = 0; k < sx; k++) dx[k] = 1e3f;
  _tsr_conv3d_run(&d, TSR_CONV_BWD_DATA, r, w, NULL, dx, NULL);
  tt_fd_grad(x, sx, conv_loss, &ctx, FD_STEP, fdx);
  snprintf(what, sizeof what, "%s dx, config %d", op, _i);
  tt_assert_close(dx, fdx, sx, FD_ATOL, FD_RTOL, what);

  float *dw = malloc(sw * 4), *db = malloc(d.co * 4), *dw0 = malloc(sw * 4), *db0 = malloc(d.co * 4);
  double *fdw = malloc(sw * 8), *fdb = malloc(d.co * 8), *want = malloc((sw > (size_t)d.co ? sw : (size_t)d.co) * 8);
  tt_fill_uniform(dw0, sw, 80 + _i, -1, 1);
  tt_fill_uniform(db0, d.co, 90 + _i, -1, 1);
  memcpy(dw, dw0, sw * 4), memcpy(db, db0, d.co * 4);
  tt_fd_grad(w, sw, conv_loss, &ctx, FD_STEP, fdw);
  if (d.has_bias) tt_fd_grad(b, d.co, conv_loss, &ctx, FD_STEP, fdb);
  for (int calls = 1; calls <= 2; calls++) {
    _tsr_conv3d_run(&d, TSR_CONV_BWD_WEIGHTS, x, r, NULL, dw, d.has_bias ? db : NULL);
    for (size_t k = 0; k < sw; k++) want[k] = dw0[k] + calls * fdw[k];
    snprintf(what, sizeof what, "%s dw after %d calls, config %d", op, calls, _i);
    tt_assert_close(dw, want, sw, 2 * FD_ATOL, FD_RTOL, what);
    if (d.has_bias) {
      for (int k = 0; k < d.co; k++) want[k] = db0[k] + calls * fdb[k];
      snprintf(what, sizeof what, "%s db after %d calls, config %d", op, calls, _i);
      tt_assert_close(db, want, d.co, 2 * FD_ATOL, FD_RTOL, what);
    }
  }
  free(x), free(w), free(b), free(r), free(rd), free(y), free(dx), free(fdx);
  free(dw), free(db), free(dw0), free(db0), free(fdw), free(fdb), free(want);
}
END_TEST

/* CosmoFlow's and the 3-D U-Net's shapes (slices of 4) must get oneDNN's gemm kernels, not the
 * reference ones (orders of magnitude slower). */
START_TEST(test_cosmoflow_shapes_avoid_reference_kernels) {
  static const struct cfg shapes[] = {
      {4, 4, {32, 32, 32}, 16, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, 1, 0},
      {4, 16, {16, 16, 16}, 32, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, 1, 0},
      {4, 32, {8, 8, 8}, 16, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}, {0, 0, 0}, 1, 1},
  };
  for (int i = 0; i < 3; i++) {
    struct _tsr_conv3d_desc d = make_desc(&shapes[i]);
    for (int pass = TSR_CONV_FWD; pass <= TSR_CONV_BWD_WEIGHTS; pass++) {
      const char *impl = _tsr_conv3d_impl(&d, pass);
      ck_assert_msg(impl && !strstr(impl, "ref"), "shape %d pass %d uses '%s'", i, pass, impl ? impl : "(none)");
    }
  }
}
END_TEST

/* ---- 3-D pooling ---- */

/* n, c, d, h, w, k (d, h, w), s, p, is_max: 2x2x2 (CosmoFlow), overlapping 3x3x3 stride 2 with
 * padding, a non-cubic window with odd sizes */
static const int pool_cases[][14] = {
    {2, 3, 4, 6, 4, 2, 2, 2, 2, 2, 2, 0, 0, 0},
    {1, 2, 7, 5, 6, 3, 3, 3, 2, 2, 2, 1, 1, 1},
    {2, 2, 5, 4, 7, 3, 1, 2, 1, 1, 2, 1, 0, 1},
};
#define NPOOL (int)(sizeof pool_cases / sizeof pool_cases[0])

static struct _tsr_pool_desc pool_case(int i, int is_max) {
  const int *v = pool_cases[i];
  struct _tsr_pool_desc d = {.n = v[0], .c = v[1], .d = v[2], .h = v[3], .w = v[4], .kd = v[5], .kh = v[6],
                            .kw = v[7], .sd = v[8], .sh = v[9], .sw = v[10], .pd = v[11], .ph = v[12], .pw = v[13],
                            .is_max = is_max};
  d.od = (int)_tsr_conv_out(d.d, d.kd, d.sd, d.pd, 1);
  d.oh = (int)_tsr_conv_out(d.h, d.kh, d.sh, d.ph, 1);
  d.ow = (int)_tsr_conv_out(d.w, d.kw, d.sw, d.pw, 1);
  return d;
}

static size_t pin(const struct _tsr_pool_desc *d) { return (size_t)d->n * d->c * d->d * d->h * d->w; }
static size_t pout(const struct _tsr_pool_desc *d) { return (size_t)d->n * d->c * d->od * d->oh * d->ow; }

/* max over the window's elements inside the volume; average over kd*kh*kw (padding counted) */
static void pool_ref(const struct _tsr_pool_desc *d, const float *x, double *y) {
  const size_t in_vol = (size_t)d->d * d->h * d->w;
  size_t o = 0;
  for (size_t v = 0; v < (size_t)d->n * d->c; v++)
    for (int a = 0; a < d->od; a++)
      for (int b = 0; b < d->oh; b++)
        for (int e = 0; e < d->ow; e++, o++) {
          double m = -INFINITY, s = 0;
          for (int i = 0; i < d->kd; i++)
            for (int j = 0; j < d->kh; j++)
              for (int k = 0; k < d->kw; k++) {
                int z = a * d->sd - d->pd + i, r = b * d->sh - d->ph + j, c = e * d->sw - d->pw + k;
                if (z < 0 || z >= d->d || r < 0 || r >= d->h || c < 0 || c >= d->w) continue;
                double xv = x[v * in_vol + ((size_t)z * d->h + r) * d->w + c];
                m = xv > m ? xv : m;
                s += xv;
              }
          y[o] = d->is_max ? m : s / (d->kd * d->kh * d->kw);
        }
}

/* Max pooling: distinct values 0.01 apart, so a finite-difference step of 0.004 never changes
 * which element wins a window. */
static void fill_pool(const struct _tsr_pool_desc *d, float *x, uint64_t seed) {
  size_t n = pin(d);
  tt_fill_uniform(x, n, seed, -1, 1);
  if (!d->is_max) return;
  for (size_t i = 0; i < n; i++) { /* rank of x[i] among the values */
    size_t rank = 0;
    for (size_t j = 0; j < n; j++) rank += x[j] < x[i] || (x[j] == x[i] && j < i);
    x[n + i] = 0.01f * (float)rank - 0.005f * (float)n;
  }
  memmove(x, x + n, n * sizeof *x);
}

START_TEST(test_pool3d_fwd_matches_direct_loops) {
  for (int is_max = 0; is_max <= 1; is_max++) {
    struct _tsr_pool_desc d = pool_case(_i, is_max);
    float *x = malloc(2 * pin(&d) * 4), *y = malloc(pout(&d) * 4);
    double *ref = malloc(pout(&d) * 8);
    size_t wsb = _tsr_pool_ws_bytes(&d);
    ck_assert(is_max ? wsb >= pout(&d) : wsb == 0);
    void *ws = wsb ? malloc(wsb) : NULL;
    fill_pool(&d, x, 100 + _i);
    _tsr_pool_fwd_cpu(&d, x, y, ws);
    pool_ref(&d, x, ref);
    tt_assert_close(y, ref, pout(&d), 1e-6, 1e-5, is_max ? "maxpool3d fwd" : "avgpool3d fwd");
    free(x), free(y), free(ref), free(ws);
  }
}
END_TEST

struct pool_fd {
  const struct _tsr_pool_desc *d;
  float *x;
  const double *r;
  double *y;
};

static double pool_loss(void *user) {
  struct pool_fd *c = user;
  pool_ref(c->d, c->x, c->y);
  double l = 0;
  for (size_t k = 0; k < pout(c->d); k++) l += c->y[k] * c->r[k];
  return l;
}

START_TEST(test_pool3d_bwd_matches_finite_differences) {
  for (int is_max = 0; is_max <= 1; is_max++) {
    struct _tsr_pool_desc d = pool_case(_i, is_max);
    size_t sx = pin(&d), sy = pout(&d), wsb = _tsr_pool_ws_bytes(&d);
    float *x = malloc(2 * sx * 4), *y = malloc(sy * 4), *r = malloc(sy * 4), *dx = malloc(sx * 4);
    double *rd = malloc(sy * 8), *yd = malloc(sy * 8), *fd = malloc(sx * 8);
    void *ws = wsb ? malloc(wsb) : NULL;
    fill_pool(&d, x, 200 + _i);
    tt_fill_uniform(r, sy, 300 + _i, -1, 1);
    for (size_t k = 0; k < sy; k++) rd[k] = r[k];
    _tsr_pool_fwd_cpu(&d, x, y, ws);
    for (size_t k = 0; k < sx; k++) dx[k] = 1e3f;
    _tsr_pool_bwd_cpu(&d, r, ws, dx);
    struct pool_fd ctx = {&d, x, rd, yd};
    tt_fd_grad(x, sx, pool_loss, &ctx, is_max ? 0.004 : FD_STEP, fd);
    tt_assert_close(dx, fd, sx, FD_ATOL, FD_RTOL, is_max ? "maxpool3d dx" : "avgpool3d dx");
    free(x), free(y), free(r), free(dx), free(rd), free(yd), free(fd), free(ws);
  }
}
END_TEST

/* ---- nearest upsampling and scaled tanh ---- */

static const struct _tsr_upsample_desc up_desc = {.n = 2, .c = 3, .d = 2, .h = 3, .w = 4, .f = 2};
static size_t up_in(void) { return (size_t)up_desc.n * up_desc.c * up_desc.d * up_desc.h * up_desc.w; }
static size_t up_out(void) { return up_in() * 8; }

static void up_ref(const float *x, double *y) {
  const struct _tsr_upsample_desc *d = &up_desc;
  const int f = d->f, D = d->d * f, H = d->h * f, W = d->w * f;
  for (size_t v = 0; v < (size_t)d->n * d->c; v++)
    for (int z = 0; z < D; z++)
      for (int r = 0; r < H; r++)
        for (int c = 0; c < W; c++)
          y[((v * D + z) * H + r) * W + c] = x[((v * d->d + z / f) * d->h + r / f) * d->w + c / f];
}

struct up_fd {
  float *x;
  const double *r;
  double *y;
};

static double up_loss(void *user) {
  struct up_fd *c = user;
  up_ref(c->x, c->y);
  double l = 0;
  for (size_t k = 0; k < up_out(); k++) l += c->y[k] * c->r[k];
  return l;
}

START_TEST(test_upsample3d_fwd_and_bwd) {
  size_t sx = up_in(), sy = up_out();
  float *x = malloc(sx * 4), *y = malloc(sy * 4), *r = malloc(sy * 4), *dx = malloc(sx * 4);
  double *ref = malloc(sy * 8), *rd = malloc(sy * 8), *fd = malloc(sx * 8);
  tt_fill_uniform(x, sx, 1, -1, 1);
  tt_fill_uniform(r, sy, 2, -1, 1);
  for (size_t k = 0; k < sy; k++) rd[k] = r[k];
  _tsr_upsample_fwd_cpu(&up_desc, x, y);
  up_ref(x, ref);
  tt_assert_close(y, ref, sy, 1e-30, 0, "upsample3d fwd (a copy: exact)");
  _tsr_upsample_bwd_cpu(&up_desc, r, dx);
  struct up_fd ctx = {x, rd, ref};
  tt_fd_grad(x, sx, up_loss, &ctx, FD_STEP, fd);
  tt_assert_close(dx, fd, sx, 1e-5, 1e-5, "upsample3d dx (sums of 8 values)");
  free(x), free(y), free(r), free(dx), free(ref), free(rd), free(fd);
}
END_TEST

/* y = 1.2 tanh(x) (CosmoFlow's output); dx = dy 1.2 (1 - tanh^2 x); tolerance: float tanh */
START_TEST(test_scaled_tanh_fwd_and_bwd) {
  enum { N = 257 };
  float x[N], y[N], dy[N], dx[N];
  double ref[N], gref[N];
  tt_fill_uniform(x, N, 5, -3, 3);
  tt_fill_uniform(dy, N, 6, -1, 1);
  struct _tsr_act_desc d = {.op = _tsr_act_find("tanh"), .len = N, .scale = 1.2f};
  ck_assert(_tsr_act_scale(&d) == 1.2f);
  _tsr_act_fwd_cpu(&d, x, y);
  _tsr_act_bwd_cpu(&d, x, y, dy, dx);
  for (int i = 0; i < N; i++) {
    double t = tanh((double)x[i]);
    ref[i] = 1.2 * t, gref[i] = dy[i] * 1.2 * (1 - t * t);
  }
  tt_assert_close(y, ref, N, 1e-6, 1e-5, "1.2 tanh fwd");
  tt_assert_close(dx, gref, N, 1e-5, 1e-4, "1.2 tanh bwd");
  struct _tsr_act_desc relu = {.op = _tsr_act_find("relu"), .len = N, .scale = 1.2f};
  ck_assert(_tsr_act_scale(&relu) == 1.0f); /* only tanh takes a scale */
}
END_TEST

/* ---- each kernel as a StarPU task equals the raw call ---- */

static void starpu_up(void) { tt_starpu_start(2); }
static void starpu_down(void) { tt_starpu_stop(); }

/* The task runs oneDNN on one thread and the raw call on up to two: summation orders differ. */
static void assert_task_close(const float *task, const float *raw, size_t n, const char *what) {
  double *ref = malloc(n * 8);
  for (size_t k = 0; k < n; k++) ref[k] = raw[k];
  tt_assert_close(task, ref, n, 1e-5, 1e-5, what);
  free(ref);
}

START_TEST(test_conv3d_tasks_match_kernels) {
  struct _tsr_conv3d_desc d = make_desc(&cfgs[_i]);
  size_t sx = nx(&d), sy = ny(&d), sw = nw(&d);
  float *x = malloc(sx * 4), *w = malloc(sw * 4), *b = malloc(d.co * 4), *y = malloc(sy * 4), *dx = malloc(sx * 4);
  float *dw = calloc(sw, 4), *db = calloc(d.co, 4), *ry = malloc(sy * 4), *rdx = malloc(sx * 4);
  float *rdw = calloc(sw, 4), *rdb = calloc(d.co, 4);
  tt_fill_uniform(x, sx, 1, -1, 1);
  tt_fill_uniform(w, sw, 2, -1, 1);
  tt_fill_uniform(b, d.co, 3, -1, 1);
  starpu_data_handle_t hx = _tsr_register_floats(x, sx), hw = _tsr_register_floats(w, sw);
  starpu_data_handle_t hb = _tsr_register_floats(b, d.co), hy = _tsr_register_floats(y, sy);
  starpu_data_handle_t hdx = _tsr_register_floats(dx, sx), hdw = _tsr_register_floats(dw, sw);
  starpu_data_handle_t hdb = _tsr_register_floats(db, d.co);
  ck_assert_int_eq(_tsr_insert_conv3d(&d, TSR_CONV_FWD, hx, hw, hb, hy, "fwd"), 0);
  ck_assert_int_eq(_tsr_insert_conv3d(&d, TSR_CONV_BWD_DATA, hy, hw, hdx, NULL, "bwd_data"), 0);
  ck_assert_int_eq(_tsr_insert_conv3d(&d, TSR_CONV_BWD_WEIGHTS, hx, hy, hdw, hdb, "bwd_weights"), 0);
  starpu_task_wait_for_all();
  starpu_data_handle_t hs[] = {hx, hw, hb, hy, hdx, hdw, hdb};
  for (int k = 0; k < 7; k++) starpu_data_unregister(hs[k]);
  _tsr_conv3d_run(&d, TSR_CONV_FWD, x, w, d.has_bias ? b : NULL, ry, NULL);
  _tsr_conv3d_run(&d, TSR_CONV_BWD_DATA, ry, w, NULL, rdx, NULL);
  _tsr_conv3d_run(&d, TSR_CONV_BWD_WEIGHTS, x, ry, NULL, rdw, d.has_bias ? rdb : NULL);
  assert_task_close(y, ry, sy, "conv3d fwd task");
  assert_task_close(dx, rdx, sx, "conv3d bwd_data task");
  assert_task_close(dw, rdw, sw, "conv3d bwd_weights task");
  assert_task_close(db, rdb, d.co, "conv3d bias gradient task (or untouched bias)");
  /* overwrite: written into buffers of NaN, bitwise what adding into zeros gave */
  struct _tsr_conv3d_desc dov = d;
  dov.overwrite = 1;
  for (size_t k = 0; k < sw; k++) dw[k] = NAN;
  for (int k = 0; k < d.co; k++) db[k] = d.has_bias ? NAN : 0;
  _tsr_conv3d_run(&dov, TSR_CONV_BWD_WEIGHTS, x, ry, NULL, dw, d.has_bias ? db : NULL);
  ck_assert_msg(memcmp(dw, rdw, sw * 4) == 0 && memcmp(db, rdb, d.co * 4) == 0,
                "conv3d bwd_weights with overwrite differs from adding into zeros");
  free(x), free(w), free(b), free(y), free(dx), free(dw), free(db), free(ry), free(rdx), free(rdw), free(rdb);
}
END_TEST

START_TEST(test_pool3d_and_upsample_tasks_match_kernels) {
  struct _tsr_pool_desc d = pool_case(1, 1);
  size_t sx = pin(&d), sy = pout(&d), wsb = _tsr_pool_ws_bytes(&d);
  float *x = malloc(2 * sx * 4), *y = malloc(sy * 4), *dx = malloc(sx * 4), *ry = malloc(sy * 4), *rdx = malloc(sx * 4);
  unsigned char *ws = malloc(wsb), *rws = malloc(wsb);
  fill_pool(&d, x, 7);
  starpu_data_handle_t hx = _tsr_register_floats(x, sx), hy = _tsr_register_floats(y, sy);
  starpu_data_handle_t hdx = _tsr_register_floats(dx, sx), hws;
  starpu_vector_data_register(&hws, STARPU_MAIN_RAM, (uintptr_t)ws, (uint32_t)wsb, 1);
  ck_assert_int_eq(_tsr_insert_pool_fwd(&d, hx, hy, hws, "maxpool3d"), 0);
  ck_assert_int_eq(_tsr_insert_pool_bwd(&d, hy, hws, hdx, "maxpool3d"), 0);
  float *u = malloc(up_out() * 4), *du = malloc(up_in() * 4), *ru = malloc(up_out() * 4), *rdu = malloc(up_in() * 4);
  starpu_data_handle_t hu = _tsr_register_floats(u, up_out()), hdu = _tsr_register_floats(du, up_in());
  ck_assert_int_eq(_tsr_insert_upsample_fwd(&up_desc, hx, hu, "upsample3d"), 0); /* x has enough values */
  ck_assert_int_eq(_tsr_insert_upsample_bwd(&up_desc, hu, hdu, "upsample3d"), 0);
  starpu_task_wait_for_all();
  starpu_data_handle_t hs[] = {hx, hy, hdx, hws, hu, hdu};
  for (int k = 0; k < 6; k++) starpu_data_unregister(hs[k]);
  _tsr_pool_fwd_cpu(&d, x, ry, rws);
  _tsr_pool_bwd_cpu(&d, ry, rws, rdx);
  _tsr_upsample_fwd_cpu(&up_desc, x, ru);
  _tsr_upsample_bwd_cpu(&up_desc, ru, rdu);
  ck_assert_msg(memcmp(y, ry, sy * 4) == 0 && memcmp(ws, rws, wsb) == 0, "maxpool3d fwd task differs");
  ck_assert_msg(memcmp(dx, rdx, sx * 4) == 0, "maxpool3d bwd task differs");
  ck_assert_msg(memcmp(u, ru, up_out() * 4) == 0 && memcmp(du, rdu, up_in() * 4) == 0, "upsample3d tasks differ");
  free(x), free(y), free(dx), free(ry), free(rdx), free(ws), free(rws), free(u), free(du), free(ru), free(rdu);
}
END_TEST

static void one_thread(void) { _tsr_worker_enter(); }

static Suite *make_layers3d_suite(void) {
  Suite *s = suite_create("layers3d");
  TCase *k = tcase_create("kernels");
  tcase_add_checked_fixture(k, one_thread, NULL);
  tcase_add_loop_test(k, test_conv3d_fwd_matches_direct_loops, 0, NCFG);
  tcase_add_loop_test(k, test_conv3d_gradients_match_finite_differences, 0, NCFG);
  tcase_add_test(k, test_cosmoflow_shapes_avoid_reference_kernels);
  tcase_add_loop_test(k, test_conv3d_on_a_range_of_planes, 0, 6);
  tcase_add_loop_test(k, test_conv3d_backward_on_ranges_of_planes, 0, 3);
  tcase_add_loop_test(k, test_conv3d_on_boxes_along_two_axes, 0, 3);
  tcase_add_loop_test(k, test_pool3d_fwd_matches_direct_loops, 0, NPOOL);
  tcase_add_loop_test(k, test_pool3d_bwd_matches_finite_differences, 0, NPOOL);
  tcase_add_test(k, test_upsample3d_fwd_and_bwd);
  tcase_add_test(k, test_scaled_tanh_fwd_and_bwd);
  suite_add_tcase(s, k);
  TCase *t = tcase_create("tasks");
  tcase_add_checked_fixture(t, starpu_up, starpu_down);
  tcase_add_loop_test(t, test_conv3d_tasks_match_kernels, 0, NCFG);
  tcase_add_test(t, test_pool3d_and_upsample_tasks_match_kernels);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_layers3d_suite)

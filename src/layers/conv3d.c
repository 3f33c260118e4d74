/* 3-D convolution and transposed convolution (PyTorch's Conv3d and ConvTranspose3d) on
 * [C, D, H, W] inputs: OIDHW and IODHW weights, optional bias; tasks of codelets/conv3d.c. The
 * depth axis has its own spec fields (kernel_d, stride_d, pad_d, dilation_d, output_pad_d) beside
 * the _h and _w ones of conv2d, so what a halo needs along each axis reads the same way. */
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "codelets.h"
#include "layers/layer.h"
#include "runtime/error.h"
#include "tensor/shape.h"

static int transposed(const tsr_layer_spec *s) { return strcmp(tsr_layer_kind_name(s->kind), "conv_transpose3d") == 0; }

/* The spec's (d, h, w) triples. */
struct axes {
  int k[3], s[3], p[3], dil[3], op[3];
};

static struct axes axes_of(const tsr_layer_spec *s) {
  struct axes a = {{s->kernel_d, s->kernel_h, s->kernel_w},   {s->stride_d, s->stride_h, s->stride_w},
                   {s->pad_d, s->pad_h, s->pad_w},            {s->dilation_d, s->dilation_h, s->dilation_w},
                   {s->output_pad_d, s->output_pad_h, s->output_pad_w}};
  return a;
}

static tsr_status conv3d_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  const char *kn = tsr_layer_kind_name(s->kind);
  const struct _tsr_chw *in = &v->in[0];
  TSR_TRY(_tsr_check_rank(v, 0, in_names, 1));
  struct axes a = axes_of(s);
  int t = transposed(s), ok = s->out_channels > 0;
  for (int i = 0; i < 3; i++) ok = ok && a.k[i] > 0 && a.s[i] > 0 && a.dil[i] > 0 && a.p[i] >= 0 && a.op[i] >= 0;
  if (!ok)
    return _tsr_error(TSR_ERR_ARG,
                      "%s '%s': out_channels %d, kernel %dx%dx%d, stride %dx%dx%d, dilation %dx%dx%d must be positive "
                      "and padding %dx%dx%d non-negative",
                      kn, v->name, s->out_channels, a.k[0], a.k[1], a.k[2], a.s[0], a.s[1], a.s[2], a.dil[0], a.dil[1],
                      a.dil[2], a.p[0], a.p[1], a.p[2]);
  for (int i = 0; t && i < 3; i++)
    if (a.op[i] >= a.s[i])
      return _tsr_error(TSR_ERR_ARG, "%s '%s': output_padding %dx%dx%d must be smaller than the stride %dx%dx%d", kn,
                        v->name, a.op[0], a.op[1], a.op[2], a.s[0], a.s[1], a.s[2]);
  int inx[3] = {in->d, in->h, in->w};
  int64_t o[3];
  for (int i = 0; i < 3; i++) {
    o[i] = t ? _tsr_deconv_out(inx[i], a.k[i], a.s[i], a.p[i], a.dil[i], a.op[i])
             : _tsr_conv_out(inx[i], a.k[i], a.s[i], a.p[i], a.dil[i]);
    if (o[i] <= 0)
      return _tsr_error(TSR_ERR_SHAPE,
                        "%s '%s': input [%d, %d, %d, %d] is smaller than the %dx%dx%d kernel (dilation %dx%dx%d, "
                        "padding %dx%dx%d)",
                        kn, v->name, in->c, in->d, in->h, in->w, a.k[0], a.k[1], a.k[2], a.dil[0], a.dil[1], a.dil[2],
                        a.p[0], a.p[1], a.p[2]);
    if (o[i] > INT_MAX)
      return _tsr_error(TSR_ERR_SHAPE, "%s '%s': output of %lld along an axis from input [%d, %d, %d, %d]; at most %d",
                        kn, v->name, (long long)o[i], in->c, in->d, in->h, in->w, INT_MAX);
  }
  v->out = (struct _tsr_chw){s->out_channels, (int)o[1], (int)o[2], (int)o[0]};
  return TSR_OK;
}

static int conv3d_num_tensors(const tsr_layer_spec *s) { return s->bias ? 2 : 1; }

/* weight: OIDHW [out, in, kd, kh, kw], transposed IODHW [in, out, kd, kh, kw]; bias [out] */
static void conv3d_tensor(const struct _tsr_layer_view *v, int i, tsr_shape *shape, const char **suffix,
                          int *trainable) {
  _tsr_conv_tensor_shape(v, i, transposed(v->spec), 1, shape, suffix, trainable);
}

static double conv3d_flops(const struct _tsr_layer_view *v) {
  const struct _tsr_chw *in = &v->in[0], *o = &v->out;
  const tsr_layer_spec *s = v->spec;
  double k = (double)s->kernel_d * s->kernel_h * s->kernel_w;
  return transposed(s) ? (double)in->c * in->d * in->h * in->w * o->c * k
                       : (double)o->c * o->d * o->h * o->w * in->c * k;
}

static struct _tsr_conv3d_desc conv3d_desc(const struct _tsr_layer_view *v, int n) {
  const struct _tsr_chw *I = &v->in[0], *O = &v->out;
  struct axes a = axes_of(v->spec);
  struct _tsr_conv3d_desc d = {.n = n, .ci = I->c, .id = {I->d, I->h, I->w}, .co = O->c, .od = {O->d, O->h, O->w},
                              .has_bias = v->spec->bias, .deconv = transposed(v->spec)};
  memcpy(d.k, a.k, sizeof d.k), memcpy(d.s, a.s, sizeof d.s), memcpy(d.p, a.p, sizeof d.p);
  memcpy(d.dil, a.dil, sizeof d.dil);
  if (d.deconv) memcpy(d.op, a.op, sizeof d.op);
  return d;
}

/* A convolution split along the axes with edge slabs (c->edge[a]: halos lo = hi there, stride 1,
 * on CPUs), in pieces none of which reads a halo'd copy of the whole block: the interior from the
 * block alone (its own padding lo along each such axis, so it does not wait for the halo exchange),
 * and along each such axis j (in increasing order) the lo output planes at each end whose windows
 * reach into a neighbour's halo from edge slab (j, side) (comm/halo.h), which spans the halos of the
 * axes before j and along later ones only the block (padding lo there). A later axis's edge covers
 * the corners an earlier one computed with padding, so the forward writes them last and right.
 * `whole` describes the halo'd input (id[a] = lo + own + hi, no padding along split axes). */
struct split {
  int n, ax[3], own[3], lo[3]; /* the axes with edge slabs, increasing; per axis of D, H, W */
  struct _tsr_conv3d_desc whole, inner;
};

static struct split split_of(const struct _tsr_layer_call *c, const struct _tsr_conv3d_desc *whole) {
  struct split p = {.whole = *whole, .inner = *whole};
  for (int a = 0; a < 3; a++) {
    if (!c->edge[a][0]) continue;
    p.ax[p.n++] = a, p.lo[a] = c->lo[a], p.own[a] = whole->id[a] - 2 * c->lo[a];
    p.inner.id[a] = p.own[a], p.inner.p[a] = p.lo[a];
  }
  return p;
}

static int edge_at(const struct split *p, int a, int side) { return side ? p->own[a] - p->lo[a] : 0; }

/* Edge slab j's convolution: 3 lo planes to lo along ax[j], the halos spanned before it, the block
 * with padding after it. */
static struct _tsr_conv3d_desc edge_desc(const struct split *p, int j) {
  struct _tsr_conv3d_desc d = p->whole;
  int a = p->ax[j];
  d.id[a] = 3 * p->lo[a], d.od[a] = p->lo[a];
  for (int i = j + 1; i < p->n; i++) d.id[p->ax[i]] = p->own[p->ax[i]], d.p[p->ax[i]] = p->lo[p->ax[i]];
  return d;
}

static int split_forward(const struct _tsr_layer_call *c, const struct _tsr_conv3d_desc *whole) {
  struct split p = split_of(c, whole);
  int s = c->s;
  starpu_data_handle_t b = whole->has_bias ? c->w[1] : NULL;
  int ret = _tsr_insert_conv3d(&p.inner, TSR_CONV_FWD, c->block[s], c->w[0], b, c->y[s], c->v->name);
  for (int j = 0; j < p.n && !ret; j++)
    for (int side = 0; side < 2 && !ret; side++) { /* no neighbour: the interior's padding is right */
      int a = p.ax[j];
      if (!c->edge_nb[a][side]) continue;
      struct _tsr_conv3d_desc d = edge_desc(&p, j);
      d.dst_full[a] = p.own[a], d.dst_off[a] = edge_at(&p, a, side);
      ret = _tsr_insert_conv3d_range(&d, TSR_CONV_FWD, c->edge[a][side][s], c->w[0], b, c->y[s], c->v->name);
    }
  return ret;
}

/* Data gradient: the interior's covers every plane of the block; the edges' give the halo parts,
 * which the trainer sends back to the neighbours (dx_done). Weight gradient: the outputs at least lo
 * from every split end from the block without padding, then along each axis j in order each edge's
 * lo output planes (all of them along earlier axes, those at least lo from the ends along later
 * ones) from its slab, added in this order. */
static int split_backward(const struct _tsr_layer_call *c, const struct _tsr_conv3d_desc *whole) {
  struct split p = split_of(c, whole);
  int s = c->s, ret = 0;
  starpu_data_handle_t dy = c->dy[s];
  if (c->dx[0]) {
    ret = _tsr_insert_conv3d(&p.inner, TSR_CONV_BWD_DATA, dy, c->w[0], c->dx[0][s], NULL, c->v->name);
    for (int j = 0; j < p.n && !ret; j++)
      for (int side = 0; side < 2 && !ret; side++) {
        int a = p.ax[j];
        if (!c->dedge[a][side]) continue;
        struct _tsr_conv3d_desc d = edge_desc(&p, j);
        d.src_full[a] = p.own[a], d.src_off[a] = edge_at(&p, a, side);
        ret = _tsr_insert_conv3d_range(&d, TSR_CONV_BWD_DATA, dy, c->w[0], c->dedge[a][side][s], NULL, c->v->name);
      }
  }
  starpu_data_handle_t dw[2];
  int overwrite;
  _tsr_layer_wgrad(c, 1 + whole->has_bias, dw, &overwrite);
  starpu_data_handle_t db = whole->has_bias ? dw[1] : NULL;
  if (!ret) { /* the plan's blocks have more than 2 lo planes along each split axis (spatial.c, plan_edges) */
    struct _tsr_conv3d_desc d = *whole;
    for (int j = 0; j < p.n; j++) {
      int a = p.ax[j];
      d.id[a] = p.own[a], d.od[a] = p.own[a] - 2 * p.lo[a], d.in1_full[a] = p.own[a], d.in1_off[a] = p.lo[a];
    }
    d.overwrite = overwrite, overwrite = 0;
    ret = _tsr_insert_conv3d_range(&d, TSR_CONV_BWD_WEIGHTS, c->block[s], dy, dw[0], db, c->v->name);
  }
  for (int j = 0; j < p.n && !ret; j++)
    for (int side = 0; side < 2 && !ret; side++) {
      int a = p.ax[j];
      struct _tsr_conv3d_desc d = edge_desc(&p, j);
      for (int i = j + 1; i < p.n; i++) {
        int b = p.ax[i];
        d.p[b] = 0, d.od[b] = p.own[b] - 2 * p.lo[b], d.in1_full[b] = p.own[b], d.in1_off[b] = p.lo[b];
      }
      d.in1_full[a] = p.own[a], d.in1_off[a] = edge_at(&p, a, side), d.overwrite = overwrite, overwrite = 0;
      ret = _tsr_insert_conv3d_range(&d, TSR_CONV_BWD_WEIGHTS, c->edge[a][side][s], dy, dw[0], db, c->v->name);
    }
  if (!ret) ret = _tsr_layer_wgrad_done(c, 1 + whole->has_bias);
  return ret ? ret : _tsr_layer_dx_done(c, 0, c->s);
}

static int has_edges(const struct _tsr_layer_call *c) { return c->edge[0][0] || c->edge[1][0] || c->edge[2][0]; }

static int conv3d_forward(const struct _tsr_layer_call *c) {
  struct _tsr_conv3d_desc d = conv3d_desc(c->v, c->slice_n[c->s]);
  if (has_edges(c)) return split_forward(c, &d);
  return _tsr_insert_conv3d(&d, TSR_CONV_FWD, c->x[0][c->s], c->w[0], d.has_bias ? c->w[1] : NULL, c->y[c->s],
                            c->v->name);
}

static int conv3d_backward(const struct _tsr_layer_call *c) {
  struct _tsr_conv3d_desc d = conv3d_desc(c->v, c->slice_n[c->s]);
  if (has_edges(c)) return split_backward(c, &d);
  starpu_data_handle_t dy = c->dy[c->s];
  int ret = 0;
  if (c->dx[0]) ret = _tsr_insert_conv3d(&d, TSR_CONV_BWD_DATA, dy, c->w[0], c->dx[0][c->s], NULL, c->v->name);
  starpu_data_handle_t dw[2];
  _tsr_layer_wgrad(c, 1 + d.has_bias, dw, &d.overwrite);
  if (!ret)
    ret = _tsr_insert_conv3d(&d, TSR_CONV_BWD_WEIGHTS, c->x[0][c->s], dy, dw[0], d.has_bias ? dw[1] : NULL,
                             c->v->name);
  if (!ret) ret = _tsr_layer_wgrad_done(c, 1 + d.has_bias);
  return ret ? ret : _tsr_layer_dx_done(c, 0, c->s);
}

#define FIELD3 TSR_LAYER_FIELD3
static const struct _tsr_layer_field conv3d_fields[] = {
    TSR_LAYER_FIELD("out_channels", TSR_FIELD_COUNT, out_channels, 1),
    FIELD3("kernel", TSR_FIELD_SIZE3, kernel_h, kernel_d, 1),
    FIELD3("stride", TSR_FIELD_SIZE3, stride_h, stride_d, 0),
    FIELD3("padding", TSR_FIELD_PAD3, pad_h, pad_d, 0),
    FIELD3("dilation", TSR_FIELD_SIZE3, dilation_h, dilation_d, 0),
    TSR_LAYER_FIELD("bias", TSR_FIELD_BOOL, bias, 0),
    {NULL},
};
static const struct _tsr_layer_field deconv3d_fields[] = {
    TSR_LAYER_FIELD("out_channels", TSR_FIELD_COUNT, out_channels, 1),
    FIELD3("kernel", TSR_FIELD_SIZE3, kernel_h, kernel_d, 1),
    FIELD3("stride", TSR_FIELD_SIZE3, stride_h, stride_d, 0),
    FIELD3("padding", TSR_FIELD_PAD3, pad_h, pad_d, 0),
    FIELD3("dilation", TSR_FIELD_SIZE3, dilation_h, dilation_d, 0),
    FIELD3("output_padding", TSR_FIELD_PAD3, output_pad_h, output_pad_d, 0),
    TSR_LAYER_FIELD("bias", TSR_FIELD_BOOL, bias, 0),
    {NULL},
};

#define CONV3D_OPS                                                                                 \
  .kind = TSR_LAYER_REGISTERED, .min_inputs = 1, .max_inputs = 1, .infer = conv3d_infer,              \
  .num_tensors = conv3d_num_tensors, .tensor = conv3d_tensor, .flops = conv3d_flops, .forward = conv3d_forward, \
  .backward = conv3d_backward, .private_wgrad = 1, .wgrad_first = 1

const struct _tsr_layer_ops _tsr_layers_conv3d[] = {
    {.name = "conv3d", .fields = conv3d_fields, .spatial = TSR_SPATIAL_WINDOW, .split_edges = 1, CONV3D_OPS},
    {.name = "conv_transpose3d", .fields = deconv3d_fields, .spatial = TSR_SPATIAL_UPSCALE, CONV3D_OPS},
    {.name = NULL},
};

/* Max and average pooling (PyTorch's MaxPool2d and AvgPool2d with padding counted): stride 0 means
 * the kernel size; max pooling keeps oneDNN's workspace (the argmax) from forward to backward. */
#include <stddef.h>

#include "codelets.h"
#include "kernel_util.h"
#include "layers/layer.h"
#include "runtime/error.h"
#include "tensor/shape.h"

static void pool_defaults(tsr_layer_spec *s) { s->stride_h = s->stride_w = 0; }

static tsr_status pool_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  const char *kn = tsr_layer_kind_name(s->kind);
  const struct _tsr_chw *in = &v->in[0];
  if (s->kernel_h <= 0 || s->kernel_w <= 0 || s->stride_h < 0 || s->stride_w < 0 || s->pad_h < 0 || s->pad_w < 0)
    return _tsr_error(TSR_ERR_ARG, "%s '%s': kernel %dx%d must be positive, stride and padding non-negative", kn,
                      v->name, s->kernel_h, s->kernel_w);
  if (s->stride_h == 0) s->stride_h = s->kernel_h;
  if (s->stride_w == 0) s->stride_w = s->kernel_w;
  if (2 * s->pad_h > s->kernel_h || 2 * s->pad_w > s->kernel_w)
    return _tsr_error(TSR_ERR_ARG, "%s '%s': padding %dx%d must be at most half the kernel %dx%d", kn, v->name,
                      s->pad_h, s->pad_w, s->kernel_h, s->kernel_w);
  v->out.c = in->c;
  v->out.h = (int)_tsr_conv_out(in->h, s->kernel_h, s->stride_h, s->pad_h, 1); /* at most the input's size */
  v->out.w = (int)_tsr_conv_out(in->w, s->kernel_w, s->stride_w, s->pad_w, 1);
  if (v->out.h <= 0 || v->out.w <= 0)
    return _tsr_error(TSR_ERR_SHAPE, "%s '%s': input [%d, %d, %d] is smaller than the %dx%d window", kn, v->name,
                      in->c, in->h, in->w, s->kernel_h, s->kernel_w);
  return TSR_OK;
}

static struct _tsr_pool_desc pool_desc(const struct _tsr_layer_view *v, int n) {
  const tsr_layer_spec *p = v->spec;
  const struct _tsr_chw *I = &v->in[0];
  struct _tsr_pool_desc d = {.n = n, .c = I->c, .h = I->h, .w = I->w, .oh = v->out.h, .ow = v->out.w,
                            .kh = p->kernel_h, .kw = p->kernel_w, .sh = p->stride_h, .sw = p->stride_w,
                            .ph = p->pad_h, .pw = p->pad_w, .is_max = p->kind == TSR_LAYER_MAXPOOL2D,
                            .blk = v->out_blk};
  return d;
}

static tsr_status pool_workspace(const struct _tsr_layer_view *v, int n, size_t *bytes) {
  struct _tsr_pool_desc d = pool_desc(v, n);
  char why[512];
  *bytes = _tsr_pool_ws_bytes(&d);
  if (*bytes == 0 && _tsr_kernel_error(why, sizeof why))
    return _tsr_error(TSR_ERR_RUNTIME, "layer '%s': %s", v->name, why);
  return TSR_OK;
}

static int pool_forward(const struct _tsr_layer_call *c) {
  struct _tsr_pool_desc d = pool_desc(c->v, c->slice_n[c->s]);
  return _tsr_insert_pool_fwd(&d, c->x[0][c->s], c->y[c->s], c->ws ? c->ws[c->s] : NULL, c->v->name);
}

static int pool_backward(const struct _tsr_layer_call *c) {
  struct _tsr_pool_desc d = pool_desc(c->v, c->slice_n[c->s]);
  int ret = 0;
  if (c->dx[0]) ret = _tsr_insert_pool_bwd(&d, c->dy[c->s], c->ws ? c->ws[c->s] : NULL, c->dx[0][c->s], c->v->name);
  return ret ? ret : _tsr_layer_dx_done(c, 0, c->s);
}

static const struct _tsr_layer_field pool_fields[] = {
    TSR_LAYER_FIELD("kernel", TSR_FIELD_SIZE2, kernel_h, 1),
    TSR_LAYER_FIELD("stride", TSR_FIELD_SIZE2, stride_h, 0),
    TSR_LAYER_FIELD("padding", TSR_FIELD_PAD2, pad_h, 0),
    {NULL},
};

#define POOL_OPS                                                                                   \
  .fields = pool_fields, .min_inputs = 1, .max_inputs = 1, .defaults = pool_defaults, .infer = pool_infer, \
  .layout = TSR_LAYOUT_FOLLOW, .forward = pool_forward, .backward = pool_backward

const struct _tsr_layer_ops _tsr_layers_pool[] = {
    {.name = "maxpool2d", .kind = TSR_LAYER_MAXPOOL2D, .workspace = pool_workspace, .spatial = TSR_SPATIAL_WINDOW_MAX,
     POOL_OPS},
    {.name = "avgpool2d", .kind = TSR_LAYER_AVGPOOL2D, .spatial = TSR_SPATIAL_WINDOW, POOL_OPS},
    {.name = NULL},
};

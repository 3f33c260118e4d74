/* Max and average pooling (PyTorch's MaxPool2d, AvgPool2d, MaxPool3d and AvgPool3d with padding
 * counted): stride 0 means the kernel size; max pooling keeps oneDNN's workspace (the argmax) from
 * forward to backward. The 3-D kinds read their depth axis from kernel_d, stride_d and pad_d. */
#include <stddef.h>
#include <string.h>

#include "codelets.h"
#include "kernel_util.h"
#include "layers/layer.h"
#include "runtime/error.h"
#include "tensor/shape.h"

static int is3d(const tsr_layer_spec *s) { return strstr(tsr_layer_kind_name(s->kind), "pool3d") != NULL; }
static int is_max(const tsr_layer_spec *s) { return strncmp(tsr_layer_kind_name(s->kind), "max", 3) == 0; }

static void pool_defaults(tsr_layer_spec *s) { s->stride_h = s->stride_w = 0; }
static void pool3d_defaults(tsr_layer_spec *s) { s->stride_h = s->stride_w = s->stride_d = 0; }

/* One axis: stride 0 means the kernel; the output size, or 0 when the window does not fit. */
static int pool_axis(int in, int k, int *s, int p) {
  if (*s == 0) *s = k;
  return (int)_tsr_conv_out(in, k, *s, p, 1); /* at most the input's size */
}

static tsr_status pool_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  const char *kn = tsr_layer_kind_name(s->kind);
  const struct _tsr_chw *in = &v->in[0];
  int three = is3d(s);
  TSR_TRY(_tsr_check_rank(v, 0, in_names, three));
  if (s->kernel_h <= 0 || s->kernel_w <= 0 || s->stride_h < 0 || s->stride_w < 0 || s->pad_h < 0 || s->pad_w < 0 ||
      (three && (s->kernel_d <= 0 || s->stride_d < 0 || s->pad_d < 0)))
    return _tsr_error(TSR_ERR_ARG, "%s '%s': kernel %dx%d (depth %d) must be positive, stride and padding non-negative",
                      kn, v->name, s->kernel_h, s->kernel_w, s->kernel_d);
  if (2 * s->pad_h > s->kernel_h || 2 * s->pad_w > s->kernel_w || (three && 2 * s->pad_d > s->kernel_d))
    return _tsr_error(TSR_ERR_ARG, "%s '%s': padding %dx%d (depth %d) must be at most half the kernel %dx%d (depth %d)",
                      kn, v->name, s->pad_h, s->pad_w, s->pad_d, s->kernel_h, s->kernel_w, s->kernel_d);
  v->out.c = in->c;
  v->out.h = pool_axis(in->h, s->kernel_h, &s->stride_h, s->pad_h);
  v->out.w = pool_axis(in->w, s->kernel_w, &s->stride_w, s->pad_w);
  if (three) v->out.d = pool_axis(in->d, s->kernel_d, &s->stride_d, s->pad_d);
  if (three && (v->out.d <= 0 || v->out.h <= 0 || v->out.w <= 0))
    return _tsr_error(TSR_ERR_SHAPE, "%s '%s': input [%d, %d, %d, %d] is smaller than the %dx%dx%d window", kn, v->name,
                      in->c, in->d, in->h, in->w, s->kernel_d, s->kernel_h, s->kernel_w);
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
                            .ph = p->pad_h, .pw = p->pad_w, .is_max = is_max(p), .blk = v->out_blk,
                            .bf16 = v->out_bf16, .dy_bf16 = v->dout_bf16, .dx_bf16 = v->din_bf16[0]};
  if (is3d(p)) d.d = I->d, d.od = v->out.d, d.kd = p->kernel_d, d.sd = p->stride_d, d.pd = p->pad_d;
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

static const struct _tsr_layer_field pool3d_fields[] = {
    TSR_LAYER_FIELD3("kernel", TSR_FIELD_SIZE3, kernel_h, kernel_d, 1),
    TSR_LAYER_FIELD3("stride", TSR_FIELD_SIZE3, stride_h, stride_d, 0),
    TSR_LAYER_FIELD3("padding", TSR_FIELD_PAD3, pad_h, pad_d, 0),
    {NULL},
};

#define POOL_OPS                                                                                   \
  .min_inputs = 1, .max_inputs = 1, .infer = pool_infer, .forward = pool_forward, \
  .backward = pool_backward

/* The 2-D kinds also run on blocked activations, on bf16 activations and gradients, and on
 * spatially split samples. */
const struct _tsr_layer_ops _tsr_layers_pool[] = {
    {.name = "maxpool2d", .kind = TSR_LAYER_MAXPOOL2D, .fields = pool_fields, .defaults = pool_defaults,
     .workspace = pool_workspace, .layout = TSR_LAYOUT_FOLLOW, .bf16 = TSR_BF16_SAME, .bf16_grad = 1, .spatial = TSR_SPATIAL_WINDOW_MAX,
     POOL_OPS},
    {.name = "avgpool2d", .kind = TSR_LAYER_AVGPOOL2D, .fields = pool_fields, .defaults = pool_defaults,
     .layout = TSR_LAYOUT_FOLLOW, .bf16 = TSR_BF16_SAME, .bf16_grad = 1, .spatial = TSR_SPATIAL_WINDOW, POOL_OPS},
    {.name = NULL},
};

/* A table of their own, after the registered kinds of the other families (registry.c): their
 * registry indices come after those of existing kinds. */
const struct _tsr_layer_ops _tsr_layers_pool3d[] = {
    {.name = "maxpool3d", .kind = TSR_LAYER_REGISTERED, .fields = pool3d_fields, .workspace = pool_workspace,
     .spatial = TSR_SPATIAL_WINDOW_MAX, POOL_OPS, .defaults = pool3d_defaults},
    {.name = "avgpool3d", .kind = TSR_LAYER_REGISTERED, .fields = pool3d_fields, .spatial = TSR_SPATIAL_WINDOW, POOL_OPS,
     .defaults = pool3d_defaults},
    {.name = NULL},
};

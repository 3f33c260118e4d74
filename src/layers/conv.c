/* Convolution and transposed convolution (PyTorch's Conv2d and ConvTranspose2d): OIHW and IOHW
 * weights, optional bias; oneDNN / cuDNN tasks of codelets/conv2d.c and conv_transpose2d.c. They
 * take activations in any layout and write the blocked one where the trainer keeps it. */
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "codelets.h"
#include "layers/layer.h"
#include "runtime/error.h"
#include "tensor/shape.h"

static int transposed(const tsr_layer_spec *s) { return s->kind == TSR_LAYER_CONV_TRANSPOSE2D; }

static tsr_status conv_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  const char *kn = tsr_layer_kind_name(s->kind);
  const struct _tsr_chw *in = &v->in[0];
  TSR_TRY(_tsr_check_rank(v, 0, in_names, 0));
  if (s->out_channels <= 0 || s->kernel_h <= 0 || s->kernel_w <= 0 || s->stride_h <= 0 || s->stride_w <= 0 ||
      s->pad_h < 0 || s->pad_w < 0 || s->dilation_h <= 0 || s->dilation_w <= 0 || s->output_pad_h < 0 ||
      s->output_pad_w < 0)
    return _tsr_error(TSR_ERR_ARG,
                      "%s '%s': out_channels %d, kernel %dx%d, stride %dx%d, dilation %dx%d must be positive "
                      "and padding %dx%d non-negative",
                      kn, v->name, s->out_channels, s->kernel_h, s->kernel_w, s->stride_h, s->stride_w,
                      s->dilation_h, s->dilation_w, s->pad_h, s->pad_w);
  int t = transposed(s);
  if (t && (s->output_pad_h >= s->stride_h || s->output_pad_w >= s->stride_w))
    return _tsr_error(TSR_ERR_ARG, "%s '%s': output_padding %dx%d must be smaller than the stride %dx%d", kn,
                      v->name, s->output_pad_h, s->output_pad_w, s->stride_h, s->stride_w);
  int64_t h = t ? _tsr_deconv_out(in->h, s->kernel_h, s->stride_h, s->pad_h, s->dilation_h, s->output_pad_h)
                : _tsr_conv_out(in->h, s->kernel_h, s->stride_h, s->pad_h, s->dilation_h);
  int64_t w = t ? _tsr_deconv_out(in->w, s->kernel_w, s->stride_w, s->pad_w, s->dilation_w, s->output_pad_w)
                : _tsr_conv_out(in->w, s->kernel_w, s->stride_w, s->pad_w, s->dilation_w);
  if (h <= 0 || w <= 0)
    return _tsr_error(TSR_ERR_SHAPE,
                      "%s '%s': input [%d, %d, %d] is smaller than the %dx%d kernel (dilation %d, padding %d)", kn,
                      v->name, in->c, in->h, in->w, s->kernel_h, s->kernel_w, s->dilation_h, s->pad_h);
  if (h > INT_MAX || w > INT_MAX)
    return _tsr_error(TSR_ERR_SHAPE,
                      "%s '%s': output of %lld x %lld pixels from input [%d, %d, %d]; at most %d per side", kn,
                      v->name, (long long)h, (long long)w, in->c, in->h, in->w, INT_MAX);
  v->out = (struct _tsr_chw){s->out_channels, (int)h, (int)w, 0};
  return TSR_OK;
}

static int conv_num_tensors(const tsr_layer_spec *s) { return s->bias ? 2 : 1; }

/* weight: OIHW [out, in, kh, kw], transposed IOHW [in, out, kh, kw]; bias [out] */
static void conv_tensor(const struct _tsr_layer_view *v, int i, tsr_shape *shape, const char **suffix,
                        int *trainable) {
  _tsr_conv_tensor_shape(v, i, transposed(v->spec), 0, shape, suffix, trainable);
}

static double conv_flops(const struct _tsr_layer_view *v) {
  const struct _tsr_chw *in = &v->in[0], *o = &v->out;
  double k = (double)v->spec->kernel_h * v->spec->kernel_w;
  return transposed(v->spec) ? (double)in->c * in->h * in->w * o->c * k : (double)o->c * o->h * o->w * in->c * k;
}

static struct _tsr_conv_desc conv_desc(const struct _tsr_layer_view *v, int n) {
  const tsr_layer_spec *p = v->spec;
  const struct _tsr_chw *I = &v->in[0], *O = &v->out;
  struct _tsr_conv_desc d = {.n = n, .ci = I->c, .h = I->h, .w = I->w, .co = O->c, .oh = O->h, .ow = O->w,
                            .kh = p->kernel_h, .kw = p->kernel_w, .sh = p->stride_h, .sw = p->stride_w,
                            .ph = p->pad_h, .pw = p->pad_w, .dh = p->dilation_h, .dw = p->dilation_w,
                            .oph = p->output_pad_h, .opw = p->output_pad_w, .has_bias = p->bias,
                            .src_blk = v->in_blk[0], .dst_blk = v->out_blk, .src_bf16 = v->in_bf16[0],
                            .dst_bf16 = v->out_bf16, .dsrc_bf16 = v->din_bf16[0], .ddst_bf16 = v->dout_bf16};
  return d;
}

static int conv_forward(const struct _tsr_layer_call *c) {
  struct _tsr_conv_desc d = conv_desc(c->v, c->slice_n[c->s]);
  starpu_data_handle_t x = c->x[0][c->s], b = d.has_bias ? c->w[1] : NULL;
  const char *nm = c->v->name;
  return transposed(c->v->spec) ? _tsr_insert_deconv2d_fwd(&d, x, c->w[0], b, c->y[c->s], nm)
                                : _tsr_insert_conv2d_fwd(&d, x, c->w[0], b, c->y[c->s], nm);
}

static int conv_backward(const struct _tsr_layer_call *c) {
  struct _tsr_conv_desc d = conv_desc(c->v, c->slice_n[c->s]);
  starpu_data_handle_t x = c->x[0][c->s], dy = c->dy[c->s], dw[2];
  const char *nm = c->v->name;
  int t = transposed(c->v->spec), ret = 0;
  if (c->dx[0])
    ret = t ? _tsr_insert_deconv2d_bwd_data(&d, dy, c->w[0], c->dx[0][c->s], nm)
            : _tsr_insert_conv2d_bwd_data(&d, dy, c->w[0], c->dx[0][c->s], nm);
  _tsr_layer_wgrad(c, 1 + d.has_bias, dw, &d.overwrite);
  starpu_data_handle_t db = d.has_bias ? dw[1] : NULL;
  if (!ret)
    ret = t ? _tsr_insert_deconv2d_bwd_weights(&d, x, dy, dw[0], db, nm)
            : _tsr_insert_conv2d_bwd_weights(&d, x, dy, dw[0], db, nm);
  if (!ret) ret = _tsr_layer_wgrad_done(c, 1 + d.has_bias);
  return ret ? ret : _tsr_layer_dx_done(c, 0, c->s);
}

static int conv_reorders(const struct _tsr_layer_view *v, int n, int bwd_data) {
  struct _tsr_conv_desc d = conv_desc(v, n);
  int m = _tsr_convlike_reorders(&d, transposed(v->spec), bwd_data);
  if (m < 0) return -1;
  return (m & TSR_CONV_REORDERS_SRC ? TSR_EDGE_IN : 0) | (m & TSR_CONV_REORDERS_DST ? TSR_EDGE_OUT : 0);
}

#define FIELD TSR_LAYER_FIELD
static const struct _tsr_layer_field conv_fields[] = {
    FIELD("out_channels", TSR_FIELD_COUNT, out_channels, 1), FIELD("kernel", TSR_FIELD_SIZE2, kernel_h, 1),
    FIELD("stride", TSR_FIELD_SIZE2, stride_h, 0),           FIELD("padding", TSR_FIELD_PAD2, pad_h, 0),
    FIELD("dilation", TSR_FIELD_SIZE2, dilation_h, 0),       FIELD("bias", TSR_FIELD_BOOL, bias, 0),
    {NULL},
};
static const struct _tsr_layer_field deconv_fields[] = {
    FIELD("out_channels", TSR_FIELD_COUNT, out_channels, 1), FIELD("kernel", TSR_FIELD_SIZE2, kernel_h, 1),
    FIELD("stride", TSR_FIELD_SIZE2, stride_h, 0),           FIELD("padding", TSR_FIELD_PAD2, pad_h, 0),
    FIELD("dilation", TSR_FIELD_SIZE2, dilation_h, 0),       FIELD("output_padding", TSR_FIELD_PAD2, output_pad_h, 0),
    FIELD("bias", TSR_FIELD_BOOL, bias, 0),                  {NULL},
};

#define CONV_OPS                                                                                   \
  .min_inputs = 1, .max_inputs = 1, .infer = conv_infer, .num_tensors = conv_num_tensors, .tensor = conv_tensor, \
  .flops = conv_flops, .layout = TSR_LAYOUT_PRODUCE, .bf16 = TSR_BF16_EACH, .bf16_grad = 1, .reorders = conv_reorders, .forward = conv_forward, \
  .backward = conv_backward, \
  .private_wgrad = 1, .wgrad_first = 1

const struct _tsr_layer_ops _tsr_layers_conv[] = {
    {.name = "conv2d", .kind = TSR_LAYER_CONV2D, .fields = conv_fields, .spatial = TSR_SPATIAL_WINDOW, CONV_OPS},
    {.name = "conv_transpose2d", .kind = TSR_LAYER_CONV_TRANSPOSE2D, .fields = deconv_fields,
     .spatial = TSR_SPATIAL_UPSCALE, CONV_OPS},
    {.name = NULL},
};

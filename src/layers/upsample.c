/* Nearest upsampling of [C, D, H, W] by an integer factor on every spatial axis (PyTorch's
 * Upsample(scale_factor=f) on 5-D tensors; the 3-D U-Net's decoder); tasks of codelets/upsample.c. */
#include <limits.h>
#include <stddef.h>

#include "codelets.h"
#include "layers/layer.h"
#include "runtime/error.h"

static tsr_status upsample_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  const struct _tsr_chw *in = &v->in[0];
  TSR_TRY(_tsr_check_rank(v, 0, in_names, 1));
  if (s->scale_factor <= 0)
    return _tsr_error(TSR_ERR_ARG, "upsample3d '%s': scale %d must be a positive integer", v->name, s->scale_factor);
  int64_t f = s->scale_factor, d = in->d * f, h = in->h * f, w = in->w * f;
  if (d > INT_MAX || h > INT_MAX || w > INT_MAX)
    return _tsr_error(TSR_ERR_SHAPE, "upsample3d '%s': input [%d, %d, %d, %d] times %d has more than %d along an axis",
                      v->name, in->c, in->d, in->h, in->w, s->scale_factor, INT_MAX);
  v->out = (struct _tsr_chw){in->c, (int)h, (int)w, (int)d};
  return TSR_OK;
}

static struct _tsr_upsample_desc upsample_desc(const struct _tsr_layer_call *c) {
  const struct _tsr_chw *in = &c->v->in[0];
  struct _tsr_upsample_desc d = {.n = c->slice_n[c->s], .c = in->c, .d = in->d, .h = in->h, .w = in->w,
                                .f = c->v->spec->scale_factor};
  return d;
}

static int upsample_forward(const struct _tsr_layer_call *c) {
  struct _tsr_upsample_desc d = upsample_desc(c);
  return _tsr_insert_upsample_fwd(&d, c->x[0][c->s], c->y[c->s], c->v->name);
}

static int upsample_backward(const struct _tsr_layer_call *c) {
  struct _tsr_upsample_desc d = upsample_desc(c);
  int ret = c->dx[0] ? _tsr_insert_upsample_bwd(&d, c->dy[c->s], c->dx[0][c->s], c->v->name) : 0;
  return ret ? ret : _tsr_layer_dx_done(c, 0, c->s);
}

static const struct _tsr_layer_field upsample_fields[] = {
    TSR_LAYER_FIELD("scale", TSR_FIELD_COUNT, scale_factor, 1),
    {NULL},
};

const struct _tsr_layer_ops _tsr_layers_upsample[] = {
    {.name = "upsample3d", .kind = TSR_LAYER_REGISTERED, .fields = upsample_fields, .min_inputs = 1, .max_inputs = 1,
     .infer = upsample_infer, .forward = upsample_forward, .backward = upsample_backward,
     .spatial = TSR_SPATIAL_UPSCALE},
    {.name = NULL},
};

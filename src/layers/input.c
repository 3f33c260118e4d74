/* The input layer (the model's data, filled by the step's load tasks; [C, H, W] or [C, D, H, W])
 * and flatten ([C, H, W] or [C, D, H, W] to [C*D*H*W, 1, 1], a copy: the memory is already flat). */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "codelets.h"
#include "layers/layer.h"
#include "runtime/error.h"

static tsr_status input_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  if (s->channels <= 0 || s->height <= 0 || s->width <= 0 || s->depth < 0)
    return _tsr_error(TSR_ERR_SHAPE, "input '%s': shape [%d, %d, %d] (depth %d) must be positive", v->name,
                      s->channels, s->height, s->width, s->depth);
  v->out = (struct _tsr_chw){s->channels, s->height, s->width, s->depth};
  return TSR_OK;
}

static tsr_status flatten_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  const struct _tsr_chw *in = &v->in[0];
  /* fits: the builder keeps every output below 2^61 elements */
  int64_t c = (int64_t)in->c * _tsr_chw_depth(in) * in->h * in->w;
  if (c > INT_MAX)
    return _tsr_error(TSR_ERR_SHAPE, "flatten '%s': input '%s' [%d, %d, %d] (depth %d) makes %lld features; at most %d",
                      v->name, in_names[0], in->c, in->h, in->w, _tsr_chw_depth(in), (long long)c, INT_MAX);
  v->out = (struct _tsr_chw){(int)c, 1, 1, 0};
  return TSR_OK;
}

static int flatten_forward(const struct _tsr_layer_call *c) {
  return _tsr_insert_copy(c->y[c->s], c->x[0][c->s], c->v->name);
}

static int flatten_backward(const struct _tsr_layer_call *c) {
  int ret = c->dx[0] ? _tsr_insert_copy(c->dx[0][c->s], c->dy[c->s], c->v->name) : 0;
  return ret ? ret : _tsr_layer_dx_done(c, 0, c->s);
}

static const struct _tsr_layer_field input_fields[] = {
    TSR_LAYER_FIELD3("shape", TSR_FIELD_SHAPE, channels, depth, 1),
    {NULL},
};

const struct _tsr_layer_ops _tsr_layers_input[] = {
    {.name = "input", .kind = TSR_LAYER_INPUT, .fields = input_fields, .infer = input_infer,
     .spatial = TSR_SPATIAL_POINTWISE},
    {.name = "flatten", .kind = TSR_LAYER_FLATTEN, .min_inputs = 1, .max_inputs = 1, .infer = flatten_infer,
     .forward = flatten_forward, .backward = flatten_backward},
    {.name = NULL},
};

/* Element-wise activations, on [C, H, W] or [C, D, H, W] alike (a flat view). A layer kind here runs
 * the activation of codelets/eltwise.c that has its name (the CPU and CUDA kernels are found there
 * by name), so adding one is one line in the table below plus its kernels. */
#include <stddef.h>

#include "codelets.h"
#include "layers/layer.h"
#include "runtime/error.h"

static int act_op(const tsr_layer_spec *s) { return _tsr_act_find(tsr_layer_kind_name(s->kind)); }

static tsr_status act_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  if (act_op(s) < 0)
    return _tsr_error(TSR_ERR_ARG, "%s '%s': codelets/eltwise.c has no activation of that name",
                      tsr_layer_kind_name(s->kind), v->name);
  return _tsr_infer_same(v, s, in_names);
}

static struct _tsr_act_desc act_desc(const struct _tsr_layer_call *c) {
  struct _tsr_act_desc d = {.op = act_op(c->v->spec), .alpha = c->v->spec->alpha,
                           .len = (size_t)c->slice_n[c->s] * _tsr_view_out_elems(c->v), .scale = c->v->spec->scale};
  return d;
}

static int act_forward(const struct _tsr_layer_call *c) {
  struct _tsr_act_desc d = act_desc(c);
  return _tsr_insert_act_fwd(&d, c->x[0][c->s], c->y[c->s], c->v->name);
}

static int act_backward(const struct _tsr_layer_call *c) {
  struct _tsr_act_desc d = act_desc(c);
  int ret = 0;
  if (c->dx[0]) ret = _tsr_insert_act_bwd(&d, c->x[0][c->s], c->y[c->s], c->dy[c->s], c->dx[0][c->s], c->v->name);
  return ret ? ret : _tsr_layer_dx_done(c, 0, c->s);
}

static const struct _tsr_layer_field alpha_field[] = {
    TSR_LAYER_FIELD("alpha", TSR_FIELD_REAL, alpha, 0),
    {NULL},
};
static const struct _tsr_layer_field scale_field[] = {
    TSR_LAYER_FIELD("scale", TSR_FIELD_POSITIVE, scale, 0), /* y = scale * tanh(x) */
    {NULL},
};

#define ACT_OPS                                                                                    \
  .min_inputs = 1, .max_inputs = 1, .infer = act_infer, .forward = act_forward, .backward = act_backward, \
  .spatial = TSR_SPATIAL_POINTWISE
/* Element-wise over the whole buffer, so any layout where f(0) = 0 keeps a blocked layout's padding
 * zero (not sigmoid). */
#define ANY_LAYOUT .layout = TSR_LAYOUT_FOLLOW

const struct _tsr_layer_ops _tsr_layers_activation[] = {
    {.name = "relu", .kind = TSR_LAYER_RELU, ANY_LAYOUT, ACT_OPS},
    {.name = "leaky_relu", .kind = TSR_LAYER_LEAKY_RELU, .fields = alpha_field, ANY_LAYOUT, ACT_OPS},
    {.name = "tanh", .kind = TSR_LAYER_TANH, .fields = scale_field, ANY_LAYOUT, ACT_OPS},
    {.name = "sigmoid", .kind = TSR_LAYER_SIGMOID, ACT_OPS},
    {.name = "gelu", .kind = TSR_LAYER_REGISTERED, ANY_LAYOUT, ACT_OPS},
    {.name = NULL},
};

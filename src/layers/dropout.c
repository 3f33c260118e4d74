/* Dropout and spatial dropout (one draw per sample and channel, as PyTorch's Dropout2d and
 * Dropout3d; a [C, D, H, W] input is [C, D*H, W] to the kernels). The mask
 * is a pure function of the call's seed (step, layer, slice) and the element, so backward
 * recomputes it; evaluation and p = 0 copy. */
#include <stddef.h>

#include "codelets.h"
#include "layers/layer.h"
#include "runtime/error.h"

static tsr_status dropout_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  if (!(s->p >= 0 && s->p < 1))
    return _tsr_error(TSR_ERR_ARG, "%s '%s': p = %g must be in [0, 1)", tsr_layer_kind_name(s->kind), v->name, s->p);
  return _tsr_infer_same(v, s, in_names);
}

static struct _tsr_dropout_desc dropout_desc(const struct _tsr_layer_call *c) {
  const struct _tsr_layer_view *v = c->v;
  struct _tsr_dropout_desc d = {.n = c->slice_n[c->s], .c = v->out.c, .h = v->out.h * _tsr_chw_depth(&v->out),
                               .w = v->out.w, .p = v->spec->p,
                               .spatial = v->spec->kind == TSR_LAYER_SPATIAL_DROPOUT};
  return d;
}

static int dropout_forward(const struct _tsr_layer_call *c) {
  starpu_data_handle_t x = c->x[0][c->s], y = c->y[c->s];
  if (!c->train || c->v->spec->p == 0) return _tsr_insert_copy(y, x, c->v->name);
  struct _tsr_dropout_desc d = dropout_desc(c);
  return _tsr_insert_dropout_fwd(&d, c->seed, x, y, c->v->name);
}

static int dropout_backward(const struct _tsr_layer_call *c) {
  struct _tsr_dropout_desc d = dropout_desc(c);
  int ret = 0;
  if (c->dx[0])
    ret = c->v->spec->p == 0 ? _tsr_insert_copy(c->dx[0][c->s], c->dy[c->s], c->v->name)
                             : _tsr_insert_dropout_bwd(&d, c->seed, c->dy[c->s], c->dx[0][c->s], c->v->name);
  return ret ? ret : _tsr_layer_dx_done(c, 0, c->s);
}

static const struct _tsr_layer_field dropout_fields[] = {
    TSR_LAYER_FIELD("p", TSR_FIELD_PROB, p, 0),
    {NULL},
};

#define DROPOUT_OPS                                                                                \
  .fields = dropout_fields, .min_inputs = 1, .max_inputs = 1, .infer = dropout_infer, .forward = dropout_forward, \
  .backward = dropout_backward

const struct _tsr_layer_ops _tsr_layers_dropout[] = {
    {.name = "dropout", .kind = TSR_LAYER_DROPOUT, DROPOUT_OPS},
    {.name = "spatial_dropout", .kind = TSR_LAYER_SPATIAL_DROPOUT, .spatial = TSR_SPATIAL_POINTWISE, DROPOUT_OPS},
    {.name = NULL},
};

/* Fully connected layer (PyTorch's Linear) on [C, 1, 1] inputs: weight [out, in], optional bias;
 * OpenBLAS / cuBLAS tasks of codelets/dense.c. */
#include <stddef.h>
#include <string.h>

#include "codelets.h"
#include "layers/layer.h"
#include "runtime/error.h"

static tsr_status dense_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  const struct _tsr_chw *in = &v->in[0];
  if (s->out_channels <= 0)
    return _tsr_error(TSR_ERR_ARG, "dense '%s': out_features %d must be positive", v->name, s->out_channels);
  if (in->h != 1 || in->w != 1 || _tsr_chw_depth(in) != 1)
    return _tsr_error(TSR_ERR_SHAPE, "dense '%s': input '%s' has shape [%d, %d, %d]; add a flatten layer before it",
                      v->name, in_names[0], in->c, in->h, in->w);
  v->out = (struct _tsr_chw){s->out_channels, 1, 1, 0};
  return TSR_OK;
}

static int dense_num_tensors(const tsr_layer_spec *s) { return s->bias ? 2 : 1; }

static void dense_tensor(const struct _tsr_layer_view *v, int i, tsr_shape *shape, const char **suffix,
                         int *trainable) {
  memset(shape, 0, sizeof *shape);
  *trainable = 1;
  *suffix = i == 0 ? "weight" : "bias";
  if (i == 1)
    shape->ndim = 1, shape->dims[0] = v->out.c;
  else
    shape->ndim = 2, shape->dims[0] = v->out.c, shape->dims[1] = v->in[0].c;
}

static double dense_flops(const struct _tsr_layer_view *v) { return (double)v->out.c * v->in[0].c; }

static struct _tsr_dense_desc dense_desc(const struct _tsr_layer_call *c) {
  struct _tsr_dense_desc d = {.n = c->slice_n[c->s], .in = c->v->in[0].c, .out = c->v->out.c,
                             .has_bias = c->v->spec->bias};
  return d;
}

static int dense_forward(const struct _tsr_layer_call *c) {
  struct _tsr_dense_desc d = dense_desc(c);
  return _tsr_insert_dense_fwd(&d, c->x[0][c->s], c->w[0], d.has_bias ? c->w[1] : NULL, c->y[c->s], c->v->name);
}

static int dense_backward(const struct _tsr_layer_call *c) {
  struct _tsr_dense_desc d = dense_desc(c);
  starpu_data_handle_t dy = c->dy[c->s];
  int ret = 0;
  if (c->dx[0]) ret = _tsr_insert_dense_bwd_data(&d, dy, c->w[0], c->dx[0][c->s], c->v->name);
  d.overwrite = (c->s == 0 || c->dw_own) && c->dw_first; /* the step's first writer of dw, db */
  if (!ret)
    ret = _tsr_insert_dense_bwd_weights(&d, c->x[0][c->s], dy, c->dw[0], d.has_bias ? c->dw[1] : NULL, c->v->name);
  return ret ? ret : _tsr_layer_dx_done(c, 0, c->s);
}

static const struct _tsr_layer_field dense_fields[] = {
    TSR_LAYER_FIELD("out_features", TSR_FIELD_COUNT, out_channels, 1),
    TSR_LAYER_FIELD("bias", TSR_FIELD_BOOL, bias, 0),
    {NULL},
};

const struct _tsr_layer_ops _tsr_layers_dense[] = {
    {.name = "dense", .kind = TSR_LAYER_DENSE, .fields = dense_fields, .min_inputs = 1, .max_inputs = 1,
     .infer = dense_infer, .num_tensors = dense_num_tensors, .tensor = dense_tensor, .flops = dense_flops,
     .forward = dense_forward, .backward = dense_backward, .wgrad_first = 1},
    {.name = NULL},
};

/* Pieces the layer families share: same-shape inference, PyTorch's default initialisation and
 * the gradient hand-back to the trainer. */
#include <math.h>
#include <string.h>

#include "codelets.h"
#include "layers/layer.h"
#include "runtime/error.h"
#include "runtime/rng.h"

tsr_status _tsr_infer_same(struct _tsr_layer_view *v, tsr_layer_spec *spec, const char *const *in_names) {
  v->out = v->in[0];
  return TSR_OK;
}

int _tsr_blk_channels(int c, int blk) { return blk ? (c + blk - 1) / blk * blk : c; }

size_t _tsr_view_out_elems(const struct _tsr_layer_view *v) {
  return (size_t)_tsr_blk_channels(v->out.c, v->out_blk) * _tsr_chw_depth(&v->out) * v->out.h * v->out.w;
}

void _tsr_conv_tensor_shape(const struct _tsr_layer_view *v, int i, int transposed, int depth, tsr_shape *shape,
                            const char **suffix, int *trainable) {
  const tsr_layer_spec *s = v->spec;
  memset(shape, 0, sizeof *shape);
  *trainable = 1;
  *suffix = i == 0 ? "weight" : "bias";
  if (i == 1) {
    shape->ndim = 1, shape->dims[0] = v->out.c;
    return;
  }
  int k = 2;
  shape->dims[0] = transposed ? v->in[0].c : v->out.c;
  shape->dims[1] = transposed ? v->out.c : v->in[0].c;
  if (depth) shape->dims[k++] = s->kernel_d;
  shape->dims[k++] = s->kernel_h, shape->dims[k++] = s->kernel_w;
  shape->ndim = k;
}

tsr_status _tsr_check_rank(const struct _tsr_layer_view *v, int k, const char *const *in_names, int want_d) {
  const struct _tsr_chw *x = &v->in[k];
  const char *kn = tsr_layer_kind_name(v->spec->kind);
  if (want_d && x->d <= 0)
    return _tsr_error(TSR_ERR_SHAPE, "%s '%s': input '%s' has shape [%d, %d, %d]; a 3-D layer needs [C, D, H, W]", kn,
                      v->name, in_names[k], x->c, x->h, x->w);
  if (!want_d && x->d > 0)
    return _tsr_error(TSR_ERR_SHAPE,
                      "%s '%s': input '%s' has shape [%d, %d, %d, %d]; a 2-D layer needs [C, H, W] (use the 3-D kind)",
                      kn, v->name, in_names[k], x->c, x->d, x->h, x->w);
  return TSR_OK;
}

void _tsr_init_uniform(float *w, size_t n, double bound, uint64_t seed) {
  struct _tsr_rng r = {.key = seed, .ctr = 0}; /* SplitMix64 from state `seed` */
  for (size_t i = 0; i < n; i++) w[i] = (float)((_tsr_rng_uniform(&r) * 2 - 1) * bound);
}

/* PyTorch's default: weights and biases uniform in +-1/sqrt(fan_in), where fan_in is size(1) of
 * the weight times its kernel area (for transposed convolutions PyTorch takes size(1) = out
 * channels, which is what the IOHW weight's size(1) is). */
void _tsr_layer_init(const struct _tsr_layer_ops *ops, const struct _tsr_layer_view *v, int i, float *w, size_t n,
                     uint64_t seed) {
  if (ops->init) {
    ops->init(v, i, w, n, seed);
    return;
  }
  tsr_shape ws;
  const char *suffix;
  int trainable;
  ops->tensor(v, 0, &ws, &suffix, &trainable);
  double fan_in = (double)ws.dims[1];
  for (int d = 2; d < ws.ndim; d++) fan_in *= (double)ws.dims[d];
  _tsr_init_uniform(w, n, 1.0 / sqrt(fan_in), seed);
}

int _tsr_layer_dx_done(const struct _tsr_layer_call *c, int k, int s) {
  return c->dx[k] ? c->dx_done(c->owner, k, s) : 0;
}

void _tsr_layer_wgrad(const struct _tsr_layer_call *c, int n, starpu_data_handle_t *dw, int *overwrite) {
  int own = 0;
  for (int i = 0; i < n; i++) {
    dw[i] = c->dw[i] && c->dwp[i] ? c->dwp[i] : c->dw[i];
    own |= dw[i] != c->dw[i];
  }
  /* the trainer gives a slice its own buffers for all of a layer's trainable tensors or for none */
  *overwrite = own || ((c->s == 0 || c->dw_own) && c->dw_first);
}

int _tsr_layer_wgrad_done(const struct _tsr_layer_call *c, int n) {
  for (int i = 0; i < n; i++) {
    int ret = c->dw[i] && c->dwp[i] ? _tsr_insert_accumulate_grad(c->dw[i], c->dwp[i], c->v->name) : 0;
    if (ret) return ret;
  }
  return 0;
}

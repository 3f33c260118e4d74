/* Layers of several inputs: channel concatenation and element-wise sum (codelets/concat.c). The
 * inputs must agree in depth, height and width (and, for add, channels); [C, D, H, W] inputs are
 * [C, D*H, W] to the kernels. */
#include <limits.h>
#include <stddef.h>

#include "codelets.h"
#include "layers/layer.h"
#include "runtime/error.h"

_Static_assert(TSR_MAX_INPUTS <= TSR_MAX_CONCAT, "a layer may have more inputs than the concat codelet takes");

static tsr_status merge_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  const char *kn = tsr_layer_kind_name(s->kind);
  int add = s->kind == TSR_LAYER_ADD;
  int64_t c = 0;
  const struct _tsr_chw *in = &v->in[0];
  for (int i = 0; i < v->ninputs; i++) {
    const struct _tsr_chw *x = &v->in[i];
    if (x->d != in->d)
      return _tsr_error(TSR_ERR_SHAPE, "%s '%s': input '%s' has depth %d but input '%s' has depth %d (0: [C, H, W])",
                        kn, v->name, in_names[i], x->d, in_names[0], in->d);
    if (x->h != in->h || x->w != in->w || (add && x->c != in->c))
      return _tsr_error(TSR_ERR_SHAPE, "%s '%s': input '%s' has shape [%d, %d, %d] but input '%s' has [%d, %d, %d]%s",
                        kn, v->name, in_names[i], x->c, x->h, x->w, in_names[0], in->c, in->h, in->w,
                        add ? "" : " (concat needs equal height and width)");
    c += x->c;
  }
  if (c > INT_MAX)
    return _tsr_error(TSR_ERR_SHAPE, "concat '%s': %lld channels in all; at most %d", v->name, (long long)c, INT_MAX);
  v->out = (struct _tsr_chw){add ? in->c : (int)c, in->h, in->w, in->d};
  return TSR_OK;
}

static struct _tsr_concat_desc concat_desc(const struct _tsr_layer_call *c) {
  const struct _tsr_layer_view *v = c->v;
  struct _tsr_concat_desc d = {.n = c->slice_n[c->s], .h = v->out.h * _tsr_chw_depth(&v->out), .w = v->out.w,
                              .k = v->ninputs, .blk = v->out_blk, .bf16 = v->out_bf16, .dy_bf16 = v->dout_bf16};
  for (int i = 0; i < v->ninputs; i++) d.c[i] = v->in[i].c, d.dx_bf16 |= (unsigned)(v->din_bf16[i] != 0) << i;
  return d;
}

static int merge_forward(const struct _tsr_layer_call *c) {
  const struct _tsr_layer_view *v = c->v;
  starpu_data_handle_t xs[TSR_MAX_CONCAT];
  for (int i = 0; i < v->ninputs; i++) xs[i] = c->x[i][c->s];
  if (v->spec->kind == TSR_LAYER_ADD)
    return _tsr_insert_add_fwd((size_t)c->slice_n[c->s] * _tsr_view_out_elems(v), v->ninputs, xs, c->y[c->s], v->name);
  struct _tsr_concat_desc d = concat_desc(c);
  return _tsr_insert_concat_fwd(&d, xs, c->y[c->s], v->name);
}

/* Inputs that need no gradient share the scratch output: concat_bwd writes it, nobody reads it. */
static int concat_backward(const struct _tsr_layer_call *c) {
  struct _tsr_concat_desc d = concat_desc(c);
  starpu_data_handle_t dxs[TSR_MAX_CONCAT];
  for (int k = 0; k < c->v->ninputs; k++) dxs[k] = c->dx[k] ? c->dx[k][c->s] : c->scratch[c->s];
  int ret = _tsr_insert_concat_bwd(&d, c->dy[c->s], dxs, c->v->name);
  for (int k = 0; !ret && k < c->v->ninputs; k++) ret = _tsr_layer_dx_done(c, k, c->s);
  return ret;
}

static int add_backward(const struct _tsr_layer_call *c) {
  int ret = 0;
  for (int k = 0; !ret && k < c->v->ninputs; k++)
    if (c->dx[k]) {
      ret = _tsr_insert_copy(c->dx[k][c->s], c->dy[c->s], c->v->name);
      if (!ret) ret = _tsr_layer_dx_done(c, k, c->s);
    }
  return ret;
}

const struct _tsr_layer_ops _tsr_layers_merge[] = {
    {.name = "concat", .kind = TSR_LAYER_CONCAT, .min_inputs = 2, .max_inputs = TSR_MAX_INPUTS, .infer = merge_infer,
     .scratch = 1, .layout = TSR_LAYOUT_FOLLOW, .bf16 = TSR_BF16_SAME, .bf16_grad = 1, .forward = merge_forward,
     .backward = concat_backward,
     .spatial = TSR_SPATIAL_POINTWISE},
    {.name = "add", .kind = TSR_LAYER_ADD, .min_inputs = 2, .max_inputs = TSR_MAX_INPUTS, .infer = merge_infer,
     .layout = TSR_LAYOUT_FOLLOW, .forward = merge_forward, .backward = add_backward, .spatial = TSR_SPATIAL_POINTWISE},
    {.name = NULL},
};

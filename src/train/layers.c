/* Forward and backward of one layer on one micro-batch slice, as StarPU tasks. Gradients of a
 * layer's output that has several consumers are summed in a fixed order: the first consumer in
 * backward order writes the gradient buffer, later ones write a temporary that is then added. */
#include <string.h>

#include "runtime/rng.h"
#include "train/trainer.h"
#include "runtime/error.h"

starpu_data_handle_t _tsr_out(tsr_trainer *t, int l, int s, int p) {
  return l == t->input_layer ? t->x[p][s] : t->ls[l].y[s];
}

static uint64_t dropout_seed(const tsr_trainer *t, int l, int s, int64_t step) {
  return _tsr_splitmix64(_tsr_splitmix64(_tsr_splitmix64(t->seed ^ 0xD50Full) + (uint64_t)step) +
                         (uint64_t)l * 1000003u + (uint64_t)s);
}

static struct tsr_conv_desc conv_desc(const tsr_trainer *t, int l, int s) {
  const struct _tsr_layer *L = &t->model->layers[l], *I = &t->model->layers[L->inputs[0]];
  const tsr_layer_spec *p = &L->spec;
  struct tsr_conv_desc d = {.n = t->slice_n[s], .ci = I->c, .h = I->h, .w = I->w, .co = L->c, .oh = L->h,
                            .ow = L->w, .kh = p->kernel_h, .kw = p->kernel_w, .sh = p->stride_h, .sw = p->stride_w,
                            .ph = p->pad_h, .pw = p->pad_w, .dh = p->dilation_h, .dw = p->dilation_w,
                            .oph = p->output_pad_h, .opw = p->output_pad_w, .has_bias = p->bias};
  return d;
}

static struct tsr_pool_desc pool_desc(const tsr_trainer *t, int l, int s) {
  const struct _tsr_layer *L = &t->model->layers[l], *I = &t->model->layers[L->inputs[0]];
  const tsr_layer_spec *p = &L->spec;
  struct tsr_pool_desc d = {.n = t->slice_n[s], .c = I->c, .h = I->h, .w = I->w, .oh = L->h, .ow = L->w,
                            .kh = p->kernel_h, .kw = p->kernel_w, .sh = p->stride_h, .sw = p->stride_w,
                            .ph = p->pad_h, .pw = p->pad_w, .is_max = p->kind == TSR_LAYER_MAXPOOL2D};
  return d;
}

static struct tsr_bn_desc bn_desc(const tsr_trainer *t, int l, int s) {
  const struct _tsr_layer *L = &t->model->layers[l];
  struct tsr_bn_desc d = {.n = t->slice_n[s], .c = L->c, .h = L->h, .w = L->w, .total = t->batch,
                          .eps = L->spec.eps, .momentum = L->spec.momentum};
  return d;
}

static struct tsr_act_desc act_desc(const tsr_trainer *t, int l, int s) {
  const struct _tsr_layer *L = &t->model->layers[l];
  static const enum tsr_act kinds[] = {[TSR_LAYER_RELU] = TSR_ACT_RELU, [TSR_LAYER_LEAKY_RELU] = TSR_ACT_LEAKY_RELU,
                                       [TSR_LAYER_TANH] = TSR_ACT_TANH, [TSR_LAYER_SIGMOID] = TSR_ACT_SIGMOID};
  struct tsr_act_desc d = {.kind = kinds[L->spec.kind], .alpha = L->spec.alpha,
                           .len = (size_t)t->slice_n[s] * t->ls[l].elems};
  return d;
}

static struct tsr_dropout_desc dropout_desc(const tsr_trainer *t, int l, int s) {
  const struct _tsr_layer *L = &t->model->layers[l];
  struct tsr_dropout_desc d = {.n = t->slice_n[s], .c = L->c, .h = L->h, .w = L->w, .p = L->spec.p,
                               .spatial = L->spec.kind == TSR_LAYER_SPATIAL_DROPOUT};
  return d;
}

static struct tsr_concat_desc concat_desc(const tsr_trainer *t, int l, int s) {
  const struct _tsr_layer *L = &t->model->layers[l];
  struct tsr_concat_desc d = {.n = t->slice_n[s], .h = L->h, .w = L->w, .k = L->ninputs};
  for (int i = 0; i < L->ninputs; i++) d.c[i] = t->model->layers[L->inputs[i]].c;
  return d;
}

static struct tsr_dense_desc dense_desc(const tsr_trainer *t, int l, int s) {
  const struct _tsr_layer *L = &t->model->layers[l];
  struct tsr_dense_desc d = {.n = t->slice_n[s], .in = t->model->layers[L->inputs[0]].c, .out = L->c,
                             .has_bias = L->spec.bias};
  return d;
}

static const struct _tsr_ptensor *tensor(const tsr_trainer *t, int l, int i) {
  return &t->tensors[t->ls[l].first_tensor + i];
}

int _tsr_layer_forward(tsr_trainer *t, int l, int s, int p, int train, int64_t step) {
  const struct _tsr_layer *L = &t->model->layers[l];
  struct _tsr_lstate *st = &t->ls[l];
  const char *nm = L->name;
  if (L->spec.kind == TSR_LAYER_INPUT) return 0;
  starpu_data_handle_t x = _tsr_out(t, L->inputs[0], s, p), y = st->y[s];
  switch (L->spec.kind) {
  case TSR_LAYER_INPUT: break;
  case TSR_LAYER_CONV2D:
  case TSR_LAYER_CONV_TRANSPOSE2D: {
    struct tsr_conv_desc d = conv_desc(t, l, s);
    starpu_data_handle_t b = d.has_bias ? tensor(t, l, 1)->hw : NULL;
    return L->spec.kind == TSR_LAYER_CONV2D ? _tsr_insert_conv2d_fwd(&d, x, tensor(t, l, 0)->hw, b, y, nm)
                                            : _tsr_insert_deconv2d_fwd(&d, x, tensor(t, l, 0)->hw, b, y, nm);
  }
  case TSR_LAYER_MAXPOOL2D:
  case TSR_LAYER_AVGPOOL2D: {
    struct tsr_pool_desc d = pool_desc(t, l, s);
    return _tsr_insert_pool_fwd(&d, x, y, st->ws ? st->ws[s] : NULL, nm);
  }
  case TSR_LAYER_RELU:
  case TSR_LAYER_LEAKY_RELU:
  case TSR_LAYER_TANH:
  case TSR_LAYER_SIGMOID: {
    struct tsr_act_desc d = act_desc(t, l, s);
    return _tsr_insert_act_fwd(&d, x, y, nm);
  }
  case TSR_LAYER_BATCHNORM: {
    struct tsr_bn_desc d = bn_desc(t, l, s);
    const struct _tsr_ptensor *g = tensor(t, l, 0), *b = tensor(t, l, 1), *rm = tensor(t, l, 2), *rv = tensor(t, l, 3);
    if (!train) return _tsr_insert_bn_fwd_eval(&d, x, rm->hw, rv->hw, g->hw, b->hw, y, nm);
    /* Statistics need every slice: slice 0 opens the accumulation, the last slice closes it and
     * then every slice is normalised (submitted from the last slice's call). */
    int ret = 0;
    if (s == 0) ret = _tsr_insert_zero_doubles(st->acc_f, nm);
    if (!ret) ret = _tsr_insert_bn_stats(&d, x, st->acc_f, nm);
    if (ret || s != t->slices - 1) return ret;
    ret = _tsr_insert_bn_finalize(&d, st->acc_f, st->stat, rm->hw, rv->hw, nm);
    for (int k = 0; !ret && k < t->slices; k++) {
      struct tsr_bn_desc dk = bn_desc(t, l, k);
      ret = _tsr_insert_bn_fwd(&dk, _tsr_out(t, L->inputs[0], k, p), st->stat, g->hw, b->hw, st->y[k], nm);
    }
    return ret;
  }
  case TSR_LAYER_DROPOUT:
  case TSR_LAYER_SPATIAL_DROPOUT: {
    if (!train || L->spec.p == 0) return _tsr_insert_copy(y, x, nm);
    struct tsr_dropout_desc d = dropout_desc(t, l, s);
    return _tsr_insert_dropout_fwd(&d, dropout_seed(t, l, s, step), x, y, nm);
  }
  case TSR_LAYER_CONCAT:
  case TSR_LAYER_ADD: {
    starpu_data_handle_t xs[TSR_MAX_CONCAT];
    for (int i = 0; i < L->ninputs; i++) xs[i] = _tsr_out(t, L->inputs[i], s, p);
    if (L->spec.kind == TSR_LAYER_ADD)
      return _tsr_insert_add_fwd((size_t)t->slice_n[s] * st->elems, L->ninputs, xs, y, nm);
    struct tsr_concat_desc d = concat_desc(t, l, s);
    return _tsr_insert_concat_fwd(&d, xs, y, nm);
  }
  case TSR_LAYER_DENSE: {
    struct tsr_dense_desc d = dense_desc(t, l, s);
    return _tsr_insert_dense_fwd(&d, x, tensor(t, l, 0)->hw, d.has_bias ? tensor(t, l, 1)->hw : NULL, y, nm);
  }
  case TSR_LAYER_FLATTEN: return _tsr_insert_copy(y, x, nm);
  case TSR_LAYER_KIND_COUNT: break;
  }
  _tsr_error(TSR_ERR_ARG, "layer '%s': unknown kind", nm);
  return -EINVAL;
}

/* Where input slot k of layer l writes its gradient contribution for slice s. */
static starpu_data_handle_t grad_dst(tsr_trainer *t, int l, int k, int s) {
  int j = t->model->layers[l].inputs[k];
  return t->edge_first[l * TSR_MAX_CONCAT + k] ? t->ls[j].g[s] : t->ls[j].tmp[s];
}

/* After a task wrote input slot k's contribution: fold it into the gradient if it went to tmp. */
static int grad_fold(tsr_trainer *t, int l, int k, int s) {
  int j = t->model->layers[l].inputs[k];
  if (t->edge_first[l * TSR_MAX_CONCAT + k]) return 0;
  return _tsr_insert_accumulate(t->ls[j].g[s], t->ls[j].tmp[s], t->model->layers[l].name);
}

static int wants(const tsr_trainer *t, int l, int k) {
  return t->ls[t->model->layers[l].inputs[k]].needs_grad;
}

int _tsr_layer_backward(tsr_trainer *t, int l, int s, int p, int64_t step) {
  const struct _tsr_layer *L = &t->model->layers[l];
  struct _tsr_lstate *st = &t->ls[l];
  const char *nm = L->name;
  if (L->spec.kind == TSR_LAYER_INPUT) return 0;
  starpu_data_handle_t x = _tsr_out(t, L->inputs[0], s, p), dy = st->g[s];
  int dx_wanted = L->ninputs && wants(t, l, 0);
  starpu_data_handle_t dx = dx_wanted ? grad_dst(t, l, 0, s) : NULL;
  int ret = 0;
  switch (L->spec.kind) {
  case TSR_LAYER_INPUT: return 0;
  case TSR_LAYER_CONV2D:
  case TSR_LAYER_CONV_TRANSPOSE2D: {
    struct tsr_conv_desc d = conv_desc(t, l, s);
    const struct _tsr_ptensor *w = tensor(t, l, 0);
    starpu_data_handle_t db = d.has_bias ? tensor(t, l, 1)->hg : NULL;
    int conv = L->spec.kind == TSR_LAYER_CONV2D;
    if (dx_wanted)
      ret = conv ? _tsr_insert_conv2d_bwd_data(&d, dy, w->hw, dx, nm) : _tsr_insert_deconv2d_bwd_data(&d, dy, w->hw, dx, nm);
    if (!ret)
      ret = conv ? _tsr_insert_conv2d_bwd_weights(&d, x, dy, w->hg, db, nm)
                 : _tsr_insert_deconv2d_bwd_weights(&d, x, dy, w->hg, db, nm);
    break;
  }
  case TSR_LAYER_MAXPOOL2D:
  case TSR_LAYER_AVGPOOL2D: {
    struct tsr_pool_desc d = pool_desc(t, l, s);
    if (dx_wanted) ret = _tsr_insert_pool_bwd(&d, dy, st->ws ? st->ws[s] : NULL, dx, nm);
    break;
  }
  case TSR_LAYER_RELU:
  case TSR_LAYER_LEAKY_RELU:
  case TSR_LAYER_TANH:
  case TSR_LAYER_SIGMOID: {
    struct tsr_act_desc d = act_desc(t, l, s);
    if (dx_wanted) ret = _tsr_insert_act_bwd(&d, x, st->y[s], dy, dx, nm);
    break;
  }
  case TSR_LAYER_BATCHNORM: {
    const struct _tsr_ptensor *g = tensor(t, l, 0), *b = tensor(t, l, 1);
    struct tsr_bn_desc d = bn_desc(t, l, s);
    if (s == 0) ret = _tsr_insert_zero_doubles(st->acc_b, nm);
    if (!ret) ret = _tsr_insert_bn_bwd_stats(&d, x, st->stat, dy, st->acc_b, nm);
    if (ret || s != t->slices - 1) return ret;
    ret = _tsr_insert_bn_bwd_params(&d, st->acc_b, g->hg, b->hg, nm);
    for (int k = 0; !ret && dx_wanted && k < t->slices; k++) {
      struct tsr_bn_desc dk = bn_desc(t, l, k);
      ret = _tsr_insert_bn_bwd_data(&dk, _tsr_out(t, L->inputs[0], k, p), st->stat, g->hw, st->acc_b, st->g[k],
                                    grad_dst(t, l, 0, k), nm);
      if (!ret) ret = grad_fold(t, l, 0, k);
    }
    return ret;
  }
  case TSR_LAYER_DROPOUT:
  case TSR_LAYER_SPATIAL_DROPOUT: {
    struct tsr_dropout_desc d = dropout_desc(t, l, s);
    if (dx_wanted)
      ret = L->spec.p == 0 ? _tsr_insert_copy(dx, dy, nm)
                           : _tsr_insert_dropout_bwd(&d, dropout_seed(t, l, s, step), dy, dx, nm);
    break;
  }
  case TSR_LAYER_CONCAT: {
    struct tsr_concat_desc d = concat_desc(t, l, s);
    starpu_data_handle_t dxs[TSR_MAX_CONCAT];
    for (int k = 0; k < L->ninputs; k++) dxs[k] = wants(t, l, k) ? grad_dst(t, l, k, s) : st->tmp[s];
    /* Inputs that need no gradient share one scratch output: concat_bwd writes it, nobody reads it. */
    ret = _tsr_insert_concat_bwd(&d, dy, dxs, nm);
    for (int k = 0; !ret && k < L->ninputs; k++)
      if (wants(t, l, k)) ret = grad_fold(t, l, k, s);
    return ret;
  }
  case TSR_LAYER_ADD:
    for (int k = 0; !ret && k < L->ninputs; k++)
      if (wants(t, l, k)) {
        ret = _tsr_insert_copy(grad_dst(t, l, k, s), dy, nm);
        if (!ret) ret = grad_fold(t, l, k, s);
      }
    return ret;
  case TSR_LAYER_DENSE: {
    struct tsr_dense_desc d = dense_desc(t, l, s);
    const struct _tsr_ptensor *w = tensor(t, l, 0);
    if (dx_wanted) ret = _tsr_insert_dense_bwd_data(&d, dy, w->hw, dx, nm);
    if (!ret) ret = _tsr_insert_dense_bwd_weights(&d, x, dy, w->hg, d.has_bias ? tensor(t, l, 1)->hg : NULL, nm);
    break;
  }
  case TSR_LAYER_FLATTEN:
    if (dx_wanted) ret = _tsr_insert_copy(dx, dy, nm);
    break;
  case TSR_LAYER_KIND_COUNT: return -EINVAL;
  }
  if (!ret && dx_wanted) ret = grad_fold(t, l, 0, s);
  return ret;
}

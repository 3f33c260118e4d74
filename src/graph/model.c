/* Model builder: layers form a DAG by name; every add infers the output shape and rejects
 * inconsistent layers with a message naming the layer and the shapes. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/model.h"
#include "runtime/error.h"
#include "tensor/shape.h"

static const char *const kind_names[TSR_LAYER_KIND_COUNT] = {
    "input", "conv2d", "conv_transpose2d", "maxpool2d", "avgpool2d", "relu", "leaky_relu", "tanh",
    "sigmoid", "batchnorm", "dropout", "spatial_dropout", "concat", "add", "dense", "flatten"};
static const char *const loss_names[TSR_LOSS_KIND_COUNT] = {"mse", "l1", "huber", "softmax_cross_entropy"};

const char *tsr_layer_kind_name(tsr_layer_kind k) {
  return (unsigned)k < TSR_LAYER_KIND_COUNT ? kind_names[k] : "?";
}

tsr_status tsr_layer_kind_parse(const char *name, tsr_layer_kind *kind) {
  for (int i = 0; name && i < TSR_LAYER_KIND_COUNT; i++)
    if (strcmp(name, kind_names[i]) == 0) {
      *kind = (tsr_layer_kind)i;
      return TSR_OK;
    }
  return _tsr_error(TSR_ERR_ARG, "unknown layer type '%s'", name ? name : "(null)");
}

const char *tsr_loss_kind_name(tsr_loss_kind k) {
  return (unsigned)k < TSR_LOSS_KIND_COUNT ? loss_names[k] : "?";
}

tsr_status tsr_loss_kind_parse(const char *name, tsr_loss_kind *kind) {
  for (int i = 0; name && i < TSR_LOSS_KIND_COUNT; i++)
    if (strcmp(name, loss_names[i]) == 0) {
      *kind = (tsr_loss_kind)i;
      return TSR_OK;
    }
  return _tsr_error(TSR_ERR_ARG, "unknown loss '%s' (expected mse, l1, huber, softmax_cross_entropy)",
                    name ? name : "(null)");
}

tsr_layer_spec tsr_layer_spec_default(tsr_layer_kind kind) {
  tsr_layer_spec s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.stride_h = s.stride_w = 1;
  s.dilation_h = s.dilation_w = 1;
  s.bias = 1;
  s.alpha = 0.01f;
  s.p = 0.5f;
  s.eps = 1e-5f;
  s.momentum = 0.1f;
  if (kind == TSR_LAYER_MAXPOOL2D || kind == TSR_LAYER_AVGPOOL2D) s.stride_h = s.stride_w = 0;
  return s;
}

tsr_status tsr_model_create(tsr_model **m, const char *name) {
  if (!m) return _tsr_error(TSR_ERR_ARG, "tsr_model_create: m is NULL");
  *m = calloc(1, sizeof **m);
  if (!*m) return _tsr_error(TSR_ERR_NOMEM, "tsr_model_create: out of memory");
  snprintf((*m)->name, sizeof (*m)->name, "%s", name ? name : "model");
  (*m)->output = -1;
  (*m)->loss = TSR_LOSS_MSE;
  (*m)->huber_delta = 1.0f;
  return TSR_OK;
}

void tsr_model_destroy(tsr_model *m) {
  if (!m) return;
  free(m->layers);
  free(m);
}

int _tsr_model_find(const tsr_model *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->layers[i].name, name) == 0) return i;
  return -1;
}

int _tsr_model_output(const tsr_model *m) { return m->output >= 0 ? m->output : m->n - 1; }

#define SHAPE_ERR(...) _tsr_error(TSR_ERR_SHAPE, __VA_ARGS__)

/* Fills l->c/h/w from the inputs' shapes, or explains why the layer does not fit them. */
static tsr_status infer(const tsr_model *m, struct _tsr_layer *l) {
  const tsr_layer_spec *s = &l->spec;
  const char *kn = tsr_layer_kind_name(s->kind);
  const struct _tsr_layer *in = l->ninputs ? &m->layers[l->inputs[0]] : NULL;
  switch (s->kind) {
  case TSR_LAYER_INPUT:
    if (s->channels <= 0 || s->height <= 0 || s->width <= 0)
      return SHAPE_ERR("input '%s': shape [%d, %d, %d] must be positive", l->name, s->channels, s->height,
                       s->width);
    l->c = s->channels, l->h = s->height, l->w = s->width;
    return TSR_OK;
  case TSR_LAYER_CONV2D:
  case TSR_LAYER_CONV_TRANSPOSE2D: {
    if (s->out_channels <= 0 || s->kernel_h <= 0 || s->kernel_w <= 0 || s->stride_h <= 0 || s->stride_w <= 0 ||
        s->pad_h < 0 || s->pad_w < 0 || s->dilation_h <= 0 || s->dilation_w <= 0 || s->output_pad_h < 0 ||
        s->output_pad_w < 0)
      return _tsr_error(TSR_ERR_ARG,
                        "%s '%s': out_channels %d, kernel %dx%d, stride %dx%d, dilation %dx%d must be positive "
                        "and padding %dx%d non-negative",
                        kn, l->name, s->out_channels, s->kernel_h, s->kernel_w, s->stride_h, s->stride_w,
                        s->dilation_h, s->dilation_w, s->pad_h, s->pad_w);
    int t = s->kind == TSR_LAYER_CONV_TRANSPOSE2D;
    if (t && (s->output_pad_h >= s->stride_h || s->output_pad_w >= s->stride_w))
      return _tsr_error(TSR_ERR_ARG, "%s '%s': output_padding %dx%d must be smaller than the stride %dx%d", kn,
                        l->name, s->output_pad_h, s->output_pad_w, s->stride_h, s->stride_w);
    l->c = s->out_channels;
    int64_t h = t ? _tsr_deconv_out(in->h, s->kernel_h, s->stride_h, s->pad_h, s->dilation_h, s->output_pad_h)
                  : _tsr_conv_out(in->h, s->kernel_h, s->stride_h, s->pad_h, s->dilation_h);
    int64_t w = t ? _tsr_deconv_out(in->w, s->kernel_w, s->stride_w, s->pad_w, s->dilation_w, s->output_pad_w)
                  : _tsr_conv_out(in->w, s->kernel_w, s->stride_w, s->pad_w, s->dilation_w);
    if (h <= 0 || w <= 0)
      return SHAPE_ERR("%s '%s': input [%d, %d, %d] is smaller than the %dx%d kernel (dilation %d, padding %d)", kn,
                       l->name, in->c, in->h, in->w, s->kernel_h, s->kernel_w, s->dilation_h, s->pad_h);
    if (h > INT_MAX || w > INT_MAX)
      return SHAPE_ERR("%s '%s': output of %lld x %lld pixels from input [%d, %d, %d]; at most %d per side", kn,
                       l->name, (long long)h, (long long)w, in->c, in->h, in->w, INT_MAX);
    l->h = (int)h, l->w = (int)w;
    return TSR_OK;
  }
  case TSR_LAYER_MAXPOOL2D:
  case TSR_LAYER_AVGPOOL2D:
    if (s->kernel_h <= 0 || s->kernel_w <= 0 || s->stride_h < 0 || s->stride_w < 0 || s->pad_h < 0 || s->pad_w < 0)
      return _tsr_error(TSR_ERR_ARG, "%s '%s': kernel %dx%d must be positive, stride and padding non-negative", kn,
                        l->name, s->kernel_h, s->kernel_w);
    if (s->stride_h == 0) l->spec.stride_h = s->kernel_h;
    if (s->stride_w == 0) l->spec.stride_w = s->kernel_w;
    if (2 * s->pad_h > s->kernel_h || 2 * s->pad_w > s->kernel_w)
      return _tsr_error(TSR_ERR_ARG, "%s '%s': padding %dx%d must be at most half the kernel %dx%d", kn, l->name,
                        s->pad_h, s->pad_w, s->kernel_h, s->kernel_w);
    l->c = in->c;
    l->h = _tsr_conv_out(in->h, s->kernel_h, l->spec.stride_h, s->pad_h, 1);
    l->w = _tsr_conv_out(in->w, s->kernel_w, l->spec.stride_w, s->pad_w, 1);
    if (l->h <= 0 || l->w <= 0)
      return SHAPE_ERR("%s '%s': input [%d, %d, %d] is smaller than the %dx%d window", kn, l->name, in->c, in->h,
                       in->w, s->kernel_h, s->kernel_w);
    return TSR_OK;
  case TSR_LAYER_DROPOUT:
  case TSR_LAYER_SPATIAL_DROPOUT:
    if (!(s->p >= 0 && s->p < 1))
      return _tsr_error(TSR_ERR_ARG, "%s '%s': p = %g must be in [0, 1)", kn, l->name, s->p);
    /* fall through */
  case TSR_LAYER_RELU:
  case TSR_LAYER_LEAKY_RELU:
  case TSR_LAYER_TANH:
  case TSR_LAYER_SIGMOID:
    l->c = in->c, l->h = in->h, l->w = in->w;
    return TSR_OK;
  case TSR_LAYER_BATCHNORM:
    if (!(s->eps > 0) || !(s->momentum >= 0 && s->momentum <= 1))
      return _tsr_error(TSR_ERR_ARG, "batchnorm '%s': eps %g must be > 0 and momentum %g in [0, 1]", l->name, s->eps,
                        s->momentum);
    l->c = in->c, l->h = in->h, l->w = in->w;
    return TSR_OK;
  case TSR_LAYER_CONCAT:
  case TSR_LAYER_ADD: {
    int64_t c = 0;
    for (int i = 0; i < l->ninputs; i++) {
      const struct _tsr_layer *x = &m->layers[l->inputs[i]];
      if (x->h != in->h || x->w != in->w || (s->kind == TSR_LAYER_ADD && x->c != in->c))
        return SHAPE_ERR("%s '%s': input '%s' has shape [%d, %d, %d] but input '%s' has [%d, %d, %d]%s", kn, l->name,
                         x->name, x->c, x->h, x->w, in->name, in->c, in->h, in->w,
                         s->kind == TSR_LAYER_CONCAT ? " (concat needs equal height and width)" : "");
      c += x->c;
    }
    if (c > INT_MAX) return SHAPE_ERR("concat '%s': %lld channels in all; at most %d", l->name, (long long)c, INT_MAX);
    l->c = s->kind == TSR_LAYER_ADD ? in->c : (int)c;
    l->h = in->h, l->w = in->w;
    return TSR_OK;
  }
  case TSR_LAYER_DENSE:
    if (s->out_channels <= 0)
      return _tsr_error(TSR_ERR_ARG, "dense '%s': out_features %d must be positive", l->name, s->out_channels);
    if (in->h != 1 || in->w != 1)
      return SHAPE_ERR("dense '%s': input '%s' has shape [%d, %d, %d]; add a flatten layer before it", l->name,
                       in->name, in->c, in->h, in->w);
    l->c = s->out_channels, l->h = 1, l->w = 1;
    return TSR_OK;
  case TSR_LAYER_FLATTEN: {
    int64_t c = (int64_t)in->c * in->h * in->w; /* fits: check_sizes kept it below 2^61 */
    if (c > INT_MAX)
      return SHAPE_ERR("flatten '%s': input '%s' [%d, %d, %d] makes %lld features; at most %d", l->name, in->name,
                       in->c, in->h, in->w, (long long)c, INT_MAX);
    l->c = (int)c, l->h = 1, l->w = 1;
    return TSR_OK;
  }
  case TSR_LAYER_KIND_COUNT:
    break;
  }
  return _tsr_error(TSR_ERR_ARG, "layer '%s': unknown kind %d", l->name, (int)s->kind);
}

/* Elements of `n` dims, saturating; false when `bytes` (4 per element) would pass INT64_MAX. */
static int fits(const int64_t *dims, int n) {
  uint64_t e = 1;
  for (int i = 0; i < n; i++)
    if (__builtin_mul_overflow(e, (uint64_t)dims[i], &e)) return 0;
  return e <= INT64_MAX / sizeof(float);
}

/* A layer's output per sample and each of its tensors must have a byte count that int64 holds, so
 * tsr_shape_numel and every size computed from them stay exact (memory checks come later). */
static tsr_status check_sizes(const tsr_model *m, const struct _tsr_layer *l) {
  const char *kn = tsr_layer_kind_name(l->spec.kind);
  int64_t out[3] = {l->c, l->h, l->w};
  if (!fits(out, 3))
    return SHAPE_ERR("%s '%s': output [%d, %d, %d] per sample needs more than 2^63 bytes", kn, l->name, l->c, l->h,
                     l->w);
  for (int i = 0; i < _tsr_layer_num_tensors(l); i++) {
    tsr_shape sh;
    const char *suffix;
    int trainable;
    char str[128];
    _tsr_layer_tensor(l, m, i, &sh, &suffix, &trainable);
    if (!fits(sh.dims, sh.ndim))
      return SHAPE_ERR("%s '%s': %s %s needs more than 2^63 bytes", kn, l->name, suffix,
                       tsr_shape_str(&sh, str, sizeof str));
  }
  return TSR_OK;
}

tsr_status tsr_model_add(tsr_model *m, const char *name, const tsr_layer_spec *spec, const char *const *inputs,
                         int ninputs) {
  if (!m || !spec || !name || !*name) return _tsr_error(TSR_ERR_ARG, "tsr_model_add: model, name and spec are required");
  if (strlen(name) >= TSR_NAME_MAX)
    return _tsr_error(TSR_ERR_ARG, "layer name '%s' is longer than %d characters", name, TSR_NAME_MAX - 1);
  if (strpbrk(name, "./ \t"))
    return _tsr_error(TSR_ERR_ARG, "layer name '%s': '.', '/' and spaces are not allowed (they would break "
                      "parameter names such as '<layer>.weight')", name);
  if ((unsigned)spec->kind >= TSR_LAYER_KIND_COUNT)
    return _tsr_error(TSR_ERR_ARG, "layer '%s': unknown kind %d", name, (int)spec->kind);
  if (_tsr_model_find(m, name) >= 0) return _tsr_error(TSR_ERR_ARG, "layer '%s' is defined twice", name);
  const char *kn = tsr_layer_kind_name(spec->kind);
  int want_min = 1, want_max = 1;
  if (spec->kind == TSR_LAYER_INPUT) want_min = want_max = 0;
  if (spec->kind == TSR_LAYER_CONCAT || spec->kind == TSR_LAYER_ADD) want_min = 2, want_max = TSR_MAX_INPUTS;
  if (ninputs < want_min || ninputs > want_max)
    return _tsr_error(TSR_ERR_ARG, "%s '%s': takes %d to %d inputs, got %d", kn, name, want_min, want_max, ninputs);
  if (m->n == m->cap) {
    int cap = m->cap ? 2 * m->cap : 16;
    void *p = realloc(m->layers, cap * sizeof *m->layers);
    if (!p) return _tsr_error(TSR_ERR_NOMEM, "tsr_model_add: out of memory");
    m->layers = p, m->cap = cap;
  }
  struct _tsr_layer *l = &m->layers[m->n];
  memset(l, 0, sizeof *l);
  snprintf(l->name, sizeof l->name, "%s", name);
  l->spec = *spec;
  l->ninputs = ninputs;
  for (int i = 0; i < ninputs; i++) {
    int j = inputs[i] ? _tsr_model_find(m, inputs[i]) : -1;
    if (j < 0)
      return _tsr_error(TSR_ERR_ARG, "%s '%s': input '%s' is not a layer defined before it", kn, name,
                        inputs[i] ? inputs[i] : "(null)");
    l->inputs[i] = j;
  }
  TSR_TRY(infer(m, l));
  TSR_TRY(check_sizes(m, l));
  m->n++;
  return TSR_OK;
}

tsr_status tsr_model_add_input(tsr_model *m, const char *name, int c, int h, int w) {
  tsr_layer_spec s = tsr_layer_spec_default(TSR_LAYER_INPUT);
  s.channels = c, s.height = h, s.width = w;
  return tsr_model_add(m, name, &s, NULL, 0);
}

tsr_status tsr_model_add_conv2d(tsr_model *m, const char *name, const char *input, int out_channels, int kernel,
                                int stride, int pad) {
  tsr_layer_spec s = tsr_layer_spec_default(TSR_LAYER_CONV2D);
  s.out_channels = out_channels;
  s.kernel_h = s.kernel_w = kernel;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  return tsr_model_add(m, name, &s, &input, 1);
}

tsr_status tsr_model_add_simple(tsr_model *m, const char *name, tsr_layer_kind kind, const char *input) {
  tsr_layer_spec s = tsr_layer_spec_default(kind);
  return tsr_model_add(m, name, &s, &input, 1);
}

tsr_status tsr_model_set_output(tsr_model *m, const char *layer, tsr_loss_kind loss, float huber_delta) {
  if (!m || !layer) return _tsr_error(TSR_ERR_ARG, "tsr_model_set_output: model and layer are required");
  int i = _tsr_model_find(m, layer);
  if (i < 0) return _tsr_error(TSR_ERR_ARG, "output layer '%s' is not in model '%s'", layer, m->name);
  if ((unsigned)loss >= TSR_LOSS_KIND_COUNT) return _tsr_error(TSR_ERR_ARG, "unknown loss kind %d", (int)loss);
  if (loss == TSR_LOSS_HUBER && !(huber_delta > 0))
    return _tsr_error(TSR_ERR_ARG, "huber loss: delta %g must be positive", huber_delta);
  if (loss == TSR_LOSS_SOFTMAX_CROSS_ENTROPY && m->layers[i].c < 2)
    return _tsr_error(TSR_ERR_SHAPE, "softmax_cross_entropy on '%s': needs at least 2 channels, has %d", layer,
                      m->layers[i].c);
  m->output = i, m->loss = loss, m->huber_delta = huber_delta;
  return TSR_OK;
}

tsr_status tsr_model_set_group_bytes(tsr_model *m, long long bytes) {
  if (!m || bytes < -1) return _tsr_error(TSR_ERR_ARG, "gradient group size %lld must be >= -1", bytes);
  m->group_bytes = bytes;
  return TSR_OK;
}

int tsr_model_num_layers(const tsr_model *m) { return m ? m->n : 0; }
const char *tsr_model_name(const tsr_model *m) { return m ? m->name : NULL; }

tsr_status tsr_model_layer_shape(const tsr_model *m, const char *layer, int *c, int *h, int *w) {
  int i = m && layer ? _tsr_model_find(m, layer) : -1;
  if (i < 0) return _tsr_error(TSR_ERR_ARG, "no layer named '%s'", layer ? layer : "(null)");
  if (c) *c = m->layers[i].c;
  if (h) *h = m->layers[i].h;
  if (w) *w = m->layers[i].w;
  return TSR_OK;
}

const char *tsr_model_layer_name(const tsr_model *m, int i) {
  return m && i >= 0 && i < m->n ? m->layers[i].name : NULL;
}
tsr_layer_kind tsr_model_layer_kind(const tsr_model *m, int i) { return m->layers[i].spec.kind; }
const tsr_layer_spec *tsr_model_layer_spec(const tsr_model *m, int i) {
  return m && i >= 0 && i < m->n ? &m->layers[i].spec : NULL;
}

int _tsr_layer_num_tensors(const struct _tsr_layer *l) {
  switch (l->spec.kind) {
  case TSR_LAYER_CONV2D:
  case TSR_LAYER_CONV_TRANSPOSE2D:
  case TSR_LAYER_DENSE: return l->spec.bias ? 2 : 1;
  case TSR_LAYER_BATCHNORM: return 4;
  default: return 0;
  }
}

void _tsr_layer_tensor(const struct _tsr_layer *l, const tsr_model *m, int i, tsr_shape *shape, const char **suffix,
                       int *trainable) {
  static const char *const bn[4] = {"weight", "bias", "running_mean", "running_var"};
  const struct _tsr_layer *in = l->ninputs ? &m->layers[l->inputs[0]] : l;
  const tsr_layer_spec *s = &l->spec;
  memset(shape, 0, sizeof *shape);
  *trainable = 1;
  *suffix = i == 0 ? "weight" : "bias";
  if (i == 1 || s->kind == TSR_LAYER_BATCHNORM) {
    shape->ndim = 1;
    shape->dims[0] = l->c;
    if (s->kind == TSR_LAYER_BATCHNORM) *suffix = bn[i], *trainable = i < 2;
    return;
  }
  if (s->kind == TSR_LAYER_DENSE) {
    shape->ndim = 2, shape->dims[0] = l->c, shape->dims[1] = in->c;
    return;
  }
  int t = s->kind == TSR_LAYER_CONV_TRANSPOSE2D;
  shape->ndim = 4;
  shape->dims[0] = t ? in->c : l->c;
  shape->dims[1] = t ? l->c : in->c;
  shape->dims[2] = s->kernel_h, shape->dims[3] = s->kernel_w;
}

int64_t tsr_model_num_params(const tsr_model *m) {
  int64_t n = 0;
  for (int i = 0; m && i < m->n; i++)
    for (int j = 0; j < _tsr_layer_num_tensors(&m->layers[i]); j++) {
      tsr_shape s;
      const char *suf;
      int tr;
      _tsr_layer_tensor(&m->layers[i], m, j, &s, &suf, &tr);
      if (tr && __builtin_add_overflow(n, tsr_shape_numel(&s), &n)) return INT64_MAX;
    }
  return n;
}

double tsr_model_forward_flops(const tsr_model *m) {
  double f = 0;
  for (int i = 0; m && i < m->n; i++) {
    const struct _tsr_layer *l = &m->layers[i];
    const struct _tsr_layer *in = l->ninputs ? &m->layers[l->inputs[0]] : l;
    double k = (double)l->spec.kernel_h * l->spec.kernel_w;
    if (l->spec.kind == TSR_LAYER_CONV2D) f += (double)l->c * l->h * l->w * in->c * k;
    if (l->spec.kind == TSR_LAYER_CONV_TRANSPOSE2D) f += (double)in->c * in->h * in->w * l->c * k;
    if (l->spec.kind == TSR_LAYER_DENSE) f += (double)l->c * in->c;
  }
  return f;
}

void tsr_model_print(const tsr_model *m, void *file) {
  FILE *f = file ? file : stdout;
  fprintf(f, "model '%s': %d layers, %lld parameters\n", m->name, m->n, (long long)tsr_model_num_params(m));
  for (int i = 0; i < m->n; i++) {
    const struct _tsr_layer *l = &m->layers[i];
    char ins[256] = "";
    size_t o = 0;
    for (int j = 0; j < l->ninputs && o < sizeof ins; j++)
      o += snprintf(ins + o, sizeof ins - o, "%s%s", j ? "," : "", m->layers[l->inputs[j]].name);
    fprintf(f, "  %-20s %-17s <- %-30s [%d, %d, %d]\n", l->name, tsr_layer_kind_name(l->spec.kind), ins, l->c, l->h,
            l->w);
  }
}

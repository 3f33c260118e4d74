/* Model builder: layers form a DAG by name; every add finds the kind's registry entry
 * (src/layers), which infers the output shape or rejects the layer with a message naming it and
 * the shapes. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/model.h"
#include "runtime/error.h"

static const char *const loss_names[TSR_LOSS_KIND_COUNT] = {"mse", "l1", "huber", "softmax_cross_entropy"};

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

static void view_of(const tsr_model *m, const struct _tsr_layer *l, struct _tsr_layer_view *v) {
  v->name = l->name;
  v->spec = &l->spec;
  v->ninputs = l->ninputs;
  for (int i = 0; i < l->ninputs; i++) {
    const struct _tsr_layer *x = &m->layers[l->inputs[i]];
    v->in[i] = (struct _tsr_chw){x->c, x->h, x->w, x->d};
    v->in_blk[i] = 0; /* plain float32 unless a trainer says otherwise */
    v->in_bf16[i] = v->din_bf16[i] = 0;
  }
  v->out = (struct _tsr_chw){l->c, l->h, l->w, l->d};
  v->out_blk = v->out_bf16 = v->dout_bf16 = 0;
}

void _tsr_model_view(const tsr_model *m, int l, struct _tsr_layer_view *v) { view_of(m, &m->layers[l], v); }

/* Fills l->c/h/w from the inputs' shapes, or explains why the layer does not fit them. */
static tsr_status infer(const tsr_model *m, struct _tsr_layer *l) {
  struct _tsr_layer_view v;
  const char *in_names[TSR_MAX_INPUTS];
  view_of(m, l, &v);
  for (int i = 0; i < l->ninputs; i++) in_names[i] = m->layers[l->inputs[i]].name;
  TSR_TRY(l->ops->infer(&v, &l->spec, in_names));
  l->c = v.out.c, l->h = v.out.h, l->w = v.out.w, l->d = v.out.d;
  return TSR_OK;
}

/* Elements of `n` dims, saturating; false when `bytes` (4 per element) would pass INT64_MAX. */
static int fits(const int64_t *dims, int n) {
  uint64_t e = 1;
  for (int i = 0; i < n; i++)
    if (__builtin_mul_overflow(e, (uint64_t)dims[i], &e)) return 0;
  return e <= INT64_MAX / sizeof(float);
}

size_t _tsr_layer_elems(const struct _tsr_layer *l) {
  return (size_t)l->c * (size_t)(l->d > 0 ? l->d : 1) * l->h * l->w;
}

/* A layer's output per sample and each of its tensors must have a byte count that int64 holds, so
 * tsr_shape_numel and every size computed from them stay exact (memory checks come later). The
 * [C, D*H, W] view of a [C, D, H, W] output (tsr_model_layer_shape) must fit int. */
static tsr_status check_sizes(const tsr_model *m, const struct _tsr_layer *l) {
  const char *kn = tsr_layer_kind_name(l->spec.kind);
  int64_t out[4] = {l->c, l->h, l->w, l->d > 0 ? l->d : 1};
  if (!fits(out, 4))
    return _tsr_error(TSR_ERR_SHAPE, "%s '%s': output [%d, %d, %d] (depth %d) per sample needs more than 2^63 bytes",
                      kn, l->name, l->c, l->h, l->w, l->d);
  if ((int64_t)l->h * (l->d > 0 ? l->d : 1) > INT_MAX)
    return _tsr_error(TSR_ERR_SHAPE, "%s '%s': output [%d, %d, %d, %d] has more than %d rows of D*H", kn, l->name,
                      l->c, l->d, l->h, l->w, INT_MAX);
  for (int i = 0; i < _tsr_layer_num_tensors(l); i++) {
    tsr_shape sh;
    const char *suffix;
    int trainable;
    char str[128];
    _tsr_layer_tensor(l, m, i, &sh, &suffix, &trainable);
    if (!fits(sh.dims, sh.ndim))
      return _tsr_error(TSR_ERR_SHAPE, "%s '%s': %s %s needs more than 2^63 bytes", kn, l->name, suffix,
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
  const struct _tsr_layer_ops *ops = _tsr_layer_ops_of((int)spec->kind);
  if (!ops) return _tsr_error(TSR_ERR_ARG, "layer '%s': unknown kind %d", name, (int)spec->kind);
  if (_tsr_model_find(m, name) >= 0) return _tsr_error(TSR_ERR_ARG, "layer '%s' is defined twice", name);
  const char *kn = ops->name;
  if (ninputs < ops->min_inputs || ninputs > ops->max_inputs)
    return _tsr_error(TSR_ERR_ARG, "%s '%s': takes %d to %d inputs, got %d", kn, name, ops->min_inputs,
                      ops->max_inputs, ninputs);
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
  l->ops = ops;
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
  const struct _tsr_layer *l = &m->layers[i];
  if (c) *c = l->c;
  if (h) *h = l->h * (l->d > 0 ? l->d : 1); /* fits: check_sizes */
  if (w) *w = l->w;
  return TSR_OK;
}

tsr_status tsr_model_layer_depth(const tsr_model *m, const char *layer, int *d) {
  int i = m && layer ? _tsr_model_find(m, layer) : -1;
  if (i < 0) return _tsr_error(TSR_ERR_ARG, "no layer named '%s'", layer ? layer : "(null)");
  if (d) *d = m->layers[i].d;
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
  return l->ops->num_tensors ? l->ops->num_tensors(&l->spec) : 0;
}

void _tsr_layer_tensor(const struct _tsr_layer *l, const tsr_model *m, int i, tsr_shape *shape, const char **suffix,
                       int *trainable) {
  struct _tsr_layer_view v;
  view_of(m, l, &v);
  l->ops->tensor(&v, i, shape, suffix, trainable);
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
  for (int i = 0; m && i < m->n; i++)
    if (m->layers[i].ops->flops) {
      struct _tsr_layer_view v;
      view_of(m, &m->layers[i], &v);
      f += m->layers[i].ops->flops(&v);
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
    char shape[64];
    if (l->d > 0)
      snprintf(shape, sizeof shape, "[%d, %d, %d, %d]", l->c, l->d, l->h, l->w);
    else
      snprintf(shape, sizeof shape, "[%d, %d, %d]", l->c, l->h, l->w);
    fprintf(f, "  %-20s %-17s <- %-30s %s\n", l->name, tsr_layer_kind_name(l->spec.kind), ins, shape);
  }
}

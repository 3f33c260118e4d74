/* The registry: the families' tables in one list. Kinds of the public enum are found by their
 * `kind`; the others get the indices after TSR_LAYER_KIND_COUNT in list order (stable within one
 * build; model files name kinds by string). Also the public name lookups and spec defaults. */
#include <string.h>

#include "layers/layer.h"
#include "runtime/error.h"

static const struct _tsr_layer_ops *const families[] = {
    _tsr_layers_input,     _tsr_layers_conv,    _tsr_layers_pool,  _tsr_layers_activation,
    _tsr_layers_batchnorm, _tsr_layers_dropout, _tsr_layers_merge, _tsr_layers_dense,
    _tsr_layers_conv3d,    _tsr_layers_pool3d,  _tsr_layers_upsample,
};
#define NFAMILIES (sizeof families / sizeof families[0])

/* The entry with registry index `kind` (name NULL) or called `name`; its index in *index. */
static const struct _tsr_layer_ops *find(int kind, const char *name, int *index) {
  int extra = TSR_LAYER_KIND_COUNT;
  for (size_t f = 0; f < NFAMILIES; f++)
    for (const struct _tsr_layer_ops *e = families[f]; e->name; e++) {
      int k = e->kind == TSR_LAYER_REGISTERED ? extra++ : e->kind;
      if (name ? strcmp(name, e->name) == 0 : k == kind) {
        if (index) *index = k;
        return e;
      }
    }
  if (index) *index = extra;
  return NULL;
}

const struct _tsr_layer_ops *_tsr_layer_ops_of(int kind) { return kind >= 0 ? find(kind, NULL, NULL) : NULL; }

int _tsr_layer_kind_count(void) {
  int n;
  find(-1, NULL, &n);
  return n;
}

const char *tsr_layer_kind_name(tsr_layer_kind k) {
  const struct _tsr_layer_ops *e = _tsr_layer_ops_of((int)k);
  return e ? e->name : "?";
}

tsr_status tsr_layer_kind_parse(const char *name, tsr_layer_kind *kind) {
  int k;
  if (name && find(-1, name, &k)) {
    *kind = (tsr_layer_kind)k;
    return TSR_OK;
  }
  return _tsr_error(TSR_ERR_ARG, "unknown layer type '%s'", name ? name : "(null)");
}

tsr_layer_spec tsr_layer_spec_default(tsr_layer_kind kind) {
  tsr_layer_spec s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.stride_h = s.stride_w = 1;
  s.dilation_h = s.dilation_w = 1;
  s.stride_d = s.dilation_d = 1;
  s.scale = 1.0f;
  s.bias = 1;
  s.alpha = 0.01f;
  s.p = 0.5f;
  s.eps = 1e-5f;
  s.momentum = 0.1f;
  const struct _tsr_layer_ops *e = _tsr_layer_ops_of((int)kind);
  if (e && e->defaults) e->defaults(&s);
  return s;
}

/* Host float32 tensors registered as StarPU vector handles; shapes and their printing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera/tensor.h>
#include "runtime/submit.h"
#include "runtime/error.h"

struct tsr_tensor {
  tsr_shape shape;
  float *data;
  starpu_data_handle_t handle;
  int acquired;
};

tsr_shape tsr_shape_make(int ndim, const int64_t *dims) {
  tsr_shape s;
  memset(&s, 0, sizeof s);
  s.ndim = ndim < 0 ? 0 : ndim > TSR_MAX_DIMS ? TSR_MAX_DIMS : ndim;
  for (int i = 0; i < s.ndim; i++) s.dims[i] = dims[i];
  return s;
}

int64_t tsr_shape_numel(const tsr_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
  return n;
}

const char *tsr_shape_str(const tsr_shape *s, char *buf, size_t len) {
  size_t o = snprintf(buf, len, "[");
  for (int i = 0; i < s->ndim && o < len; i++) o += snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)s->dims[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
  return buf;
}

tsr_status tsr_tensor_create(tsr_tensor **t, const tsr_shape *shape) {
  if (!t || !shape) return _tsr_error(TSR_ERR_ARG, "tsr_tensor_create: t and shape are required");
  if (shape->ndim < 1 || shape->ndim > TSR_MAX_DIMS)
    return _tsr_error(TSR_ERR_ARG, "tsr_tensor_create: %d dimensions (1 to %d allowed)", shape->ndim, TSR_MAX_DIMS);
  for (int i = 0; i < shape->ndim; i++)
    if (shape->dims[i] <= 0)
      return _tsr_error(TSR_ERR_ARG, "tsr_tensor_create: dimension %d is %lld", i, (long long)shape->dims[i]);
  int64_t n = tsr_shape_numel(shape);
  if (n > UINT32_MAX) return _tsr_error(TSR_ERR_ARG, "tsr_tensor_create: %lld elements is too many", (long long)n);
  tsr_tensor *x = calloc(1, sizeof *x);
  if (x) x->data = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) & ~(size_t)63);
  if (!x || !x->data) {
    free(x);
    return _tsr_error(TSR_ERR_NOMEM, "tsr_tensor_create: cannot allocate %lld floats", (long long)n);
  }
  memset(x->data, 0, n * sizeof(float));
  x->shape = *shape;
  x->handle = _tsr_register_floats(x->data, (size_t)n);
  *t = x;
  return TSR_OK;
}

void tsr_tensor_destroy(tsr_tensor *t) {
  if (!t) return;
  if (t->acquired) starpu_data_release(t->handle);
  starpu_data_unregister(t->handle);
  free(t->data);
  free(t);
}

const tsr_shape *tsr_tensor_shape(const tsr_tensor *t) { return &t->shape; }

tsr_status tsr_tensor_acquire(tsr_tensor *t, float **data) {
  if (!t || !data) return _tsr_error(TSR_ERR_ARG, "tsr_tensor_acquire: t and data are required");
  if (t->acquired) return _tsr_error(TSR_ERR_STATE, "tsr_tensor_acquire: tensor already acquired");
  int ret = starpu_data_acquire(t->handle, STARPU_RW);
  if (ret) return _tsr_error(TSR_ERR_RUNTIME, "tsr_tensor_acquire: starpu_data_acquire failed (%d)", ret);
  t->acquired = 1;
  *data = t->data;
  return TSR_OK;
}

void tsr_tensor_release(tsr_tensor *t) {
  if (!t || !t->acquired) return;
  starpu_data_release(t->handle);
  t->acquired = 0;
}

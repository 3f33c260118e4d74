/* Float32 tensors (up to 4 dimensions, NCHW) in host memory, registered as StarPU handles. */
#ifndef TESSERA_TENSOR_H
#define TESSERA_TENSOR_H

#include <stdint.h>
#include <stddef.h>
#include <tessera/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TSR_MAX_DIMS 5

typedef struct tsr_shape {
  int ndim;
  int64_t dims[TSR_MAX_DIMS];
} tsr_shape;

typedef struct tsr_tensor tsr_tensor;

tsr_shape tsr_shape_make(int ndim, const int64_t *dims);
int64_t tsr_shape_numel(const tsr_shape *s);
/* Writes "[32, 16, 64, 64]" into buf; returns buf. */
const char *tsr_shape_str(const tsr_shape *s, char *buf, size_t len);

tsr_status tsr_tensor_create(tsr_tensor **t, const tsr_shape *shape);
void tsr_tensor_destroy(tsr_tensor *t);
const tsr_shape *tsr_tensor_shape(const tsr_tensor *t);
/* Waits for tasks writing the tensor and returns its host data for reading and writing;
 * tsr_tensor_release gives it back to the runtime. */
tsr_status tsr_tensor_acquire(tsr_tensor *t, float **data);
void tsr_tensor_release(tsr_tensor *t);

#ifdef __cplusplus
}
#endif
#endif

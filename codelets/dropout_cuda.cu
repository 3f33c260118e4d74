/* Dropout on CUDA, the twin of codelets/dropout.c: the CPU's counter-based stream (runtime/rng.h),
 * so the masks are bitwise the same. */
#include <stdint.h>

#include "cuda_util.h"
#include "runtime/rng.h"


__global__ static void dropout_k(size_t len, size_t hw, int spatial, uint64_t key, uint64_t thr, float scale,
                                 const float *in, float *out) {
  TSR_GRID_LOOP(i, len) {
    uint64_t idx = spatial ? i / hw : i;
    int keep = (_tsr_rng_at(key, idx + 1) >> 32) >= thr;
    out[i] = in[i] * (keep ? scale : 0.0f);
  }
}

extern "C" int _tsr_dropout_cuda(cudaStream_t s, const struct _tsr_dropout_desc *d, uint64_t seed, const float *in,
                                 float *out) {
  size_t hw = (size_t)d->h * d->w, len = (size_t)d->n * d->c * hw;
  if (d->p == 0) {
    if (in != out) TSR_CUDA_OK(cudaMemcpyAsync(out, in, len * sizeof(float), cudaMemcpyDeviceToDevice, s));
    return 0;
  }
  uint64_t thr = (uint64_t)((double)d->p * 4294967296.0);
  float scale = (float)(1.0 / (1.0 - (double)d->p));
  dropout_k<<<_tsr_blocks(len), TSR_THREADS, 0, s>>>(len, hw, d->spatial, _tsr_mix64(seed), thr, scale, in, out);
  TSR_CUDA_LAUNCHED("dropout kernel");
  return 0;
}

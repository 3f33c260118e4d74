/* Loss scaling on CUDA, the twin of the scaling and overflow-check codelets of
 * src/optim/loss_scale.c: the scale and the overflow flag are read and written in the scaler's
 * state where StarPU put it, in device memory. */
#include "cuda_util.h"

__global__ static void scale_k(size_t n, float fixed, const _tsr_scale_state *state, float *x) {
  const float s = state ? (float)state->scale : fixed;
  TSR_GRID_LOOP(i, n) x[i] *= s;
}

__global__ static void overflow_k(size_t n, const float *x, _tsr_scale_state *state) {
  TSR_GRID_LOOP(i, n) if (!isfinite(x[i])) state->overflow = 1; /* racing writers all write 1 */
}

extern "C" int _tsr_scale_grad_cuda(cudaStream_t s, size_t n, float *x, const struct _tsr_scale_state *state,
                                    double fixed) {
  scale_k<<<_tsr_blocks(n), TSR_THREADS, 0, s>>>(n, (float)fixed, state, x);
  TSR_CUDA_LAUNCHED("loss scale kernel");
  return 0;
}

extern "C" int _tsr_scale_check_cuda(cudaStream_t s, size_t n, const float *x, struct _tsr_scale_state *state) {
  overflow_k<<<_tsr_blocks(n), TSR_THREADS, 0, s>>>(n, x, state);
  TSR_CUDA_LAUNCHED("overflow check kernel");
  return 0;
}

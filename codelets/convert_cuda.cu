/* GPU twins of codelets/convert.c: float32 <-> bf16 / fp16 with CUDA's round-to-nearest-even
 * intrinsics (same results as the CPU's portable code), the half-size accumulation used when a
 * reduced-precision gradient buffer is received, and the loss scaler's finiteness flag. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>

#define TSR_CUDA_STREAM_T cudaStream_t
#include "convert.h"

#define CUDA_OK(call)                                                                                \
  do {                                                                                               \
    cudaError_t _e = (call);                                                                         \
    if (_e != cudaSuccess) {                                                                         \
      fprintf(stderr, "tessera: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(_e), __FILE__, __LINE__); \
      return -1;                                                                                     \
    }                                                                                                \
  } while (0)

static unsigned blocks(size_t n) {
  size_t b = (n + 255) / 256;
  return (unsigned)(b > 8192 ? 8192 : b ? b : 1);
}
#define GRID_LOOP(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ static void to_bf16_k(const float *x, uint16_t *y, size_t n) {
  GRID_LOOP(i, n) y[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}
__global__ static void from_bf16_k(const uint16_t *x, float *y, size_t n) {
  GRID_LOOP(i, n) y[i] = __bfloat162float(__ushort_as_bfloat16(x[i]));
}
__global__ static void to_f16_k(const float *x, uint16_t *y, size_t n) {
  GRID_LOOP(i, n) y[i] = __half_as_ushort(__float2half_rn(x[i]));
}
__global__ static void from_f16_k(const uint16_t *x, float *y, size_t n) {
  GRID_LOOP(i, n) y[i] = __half2float(__ushort_as_half(x[i]));
}
__global__ static void finite_k(const float *x, size_t n, int *flag) {
  GRID_LOOP(i, n) if (!isfinite(x[i])) *flag = 0; /* racing writers all write 0 */
}

extern "C" int _tsr_f32_to_bf16_cuda(const float *x, uint16_t *y, size_t n, cudaStream_t s) {
  to_bf16_k<<<blocks(n), 256, 0, s>>>(x, y, n);
  CUDA_OK(cudaGetLastError());
  return 0;
}
extern "C" int _tsr_bf16_to_f32_cuda(const uint16_t *x, float *y, size_t n, cudaStream_t s) {
  from_bf16_k<<<blocks(n), 256, 0, s>>>(x, y, n);
  CUDA_OK(cudaGetLastError());
  return 0;
}
extern "C" int _tsr_f32_to_f16_cuda(const float *x, uint16_t *y, size_t n, cudaStream_t s) {
  to_f16_k<<<blocks(n), 256, 0, s>>>(x, y, n);
  CUDA_OK(cudaGetLastError());
  return 0;
}
extern "C" int _tsr_f16_to_f32_cuda(const uint16_t *x, float *y, size_t n, cudaStream_t s) {
  from_f16_k<<<blocks(n), 256, 0, s>>>(x, y, n);
  CUDA_OK(cudaGetLastError());
  return 0;
}
extern "C" int _tsr_all_finite_cuda(const float *x, size_t n, int *flag_dev, int reset, cudaStream_t s) {
  static const int one = 1;
  if (reset) CUDA_OK(cudaMemcpyAsync(flag_dev, &one, sizeof one, cudaMemcpyHostToDevice, s));
  finite_k<<<blocks(n), 256, 0, s>>>(x, n, flag_dev);
  CUDA_OK(cudaGetLastError());
  return 0;
}

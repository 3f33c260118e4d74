/* GPU twins of codelets/convert.c: float32 <-> bf16 / fp16 with CUDA's round-to-nearest-even
 * intrinsics (same results as the CPU's portable code), the loss scaler's finiteness flag, and the
 * conversions around the reduced-precision cuDNN convolutions (conv2d_cuda.cu). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>

#define TSR_CUDA_STREAM_T cudaStream_t
#include <tessera/context.h>
#include "convert.h"
#include "cuda_util.h"



/* NaN: CUDA's conversions return a canonical NaN; the CPU's keep sign and payload (quietened), and
 * so do these, so that both give the same bits. */
__device__ static uint16_t nan_bf16(uint32_t b) { return (uint16_t)((b >> 16) | 0x40); }
__device__ static uint16_t nan_f16(uint32_t b) {
  return (uint16_t)(((b >> 16) & 0x8000u) | 0x7e00u | (((b & 0x7fffffffu) >> 13) & 0x3ffu));
}
/* half -> float is exact; NaN keeps its payload, as on the CPU */
__device__ static float f16_to_f32(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
    return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u | ((uint32_t)(h & 0x3ffu) << 13));
  return __half2float(__ushort_as_half(h));
}
__global__ static void to_bf16_k(const float *x, uint16_t *y, size_t n) {
  TSR_GRID_LOOP(i, n) {
    uint32_t b = __float_as_uint(x[i]);
    y[i] = (b & 0x7fffffffu) > 0x7f800000u ? nan_bf16(b) : __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
  }
}
__global__ static void from_bf16_k(const uint16_t *x, float *y, size_t n) {
  TSR_GRID_LOOP(i, n) y[i] = __bfloat162float(__ushort_as_bfloat16(x[i]));
}
__global__ static void to_f16_k(const float *x, uint16_t *y, size_t n) {
  TSR_GRID_LOOP(i, n) {
    uint32_t b = __float_as_uint(x[i]);
    y[i] = (b & 0x7fffffffu) > 0x7f800000u ? nan_f16(b) : __half_as_ushort(__float2half_rn(x[i]));
  }
}
__global__ static void from_f16_k(const uint16_t *x, float *y, size_t n) {
  TSR_GRID_LOOP(i, n) y[i] = f16_to_f32(x[i]);
}
__global__ static void widen_k(const uint16_t *x, float *y, size_t n, int bf16, int accumulate) {
  TSR_GRID_LOOP(i, n) {
    float v = bf16 ? __bfloat162float(__ushort_as_bfloat16(x[i])) : f16_to_f32(x[i]);
    y[i] = accumulate ? y[i] + v : v;
  }
}
__global__ static void finite_k(const float *x, size_t n, int *flag) {
  TSR_GRID_LOOP(i, n) if (!isfinite(x[i])) *flag = 0; /* racing writers all write 0 */
}

extern "C" int _tsr_f32_to_bf16_cuda(const float *x, uint16_t *y, size_t n, cudaStream_t s) {
  to_bf16_k<<<_tsr_blocks(n), TSR_THREADS, 0, s>>>(x, y, n);
  TSR_CUDA_OK(cudaGetLastError());
  return 0;
}
extern "C" int _tsr_bf16_to_f32_cuda(const uint16_t *x, float *y, size_t n, cudaStream_t s) {
  from_bf16_k<<<_tsr_blocks(n), TSR_THREADS, 0, s>>>(x, y, n);
  TSR_CUDA_OK(cudaGetLastError());
  return 0;
}
extern "C" int _tsr_f32_to_f16_cuda(const float *x, uint16_t *y, size_t n, cudaStream_t s) {
  to_f16_k<<<_tsr_blocks(n), TSR_THREADS, 0, s>>>(x, y, n);
  TSR_CUDA_OK(cudaGetLastError());
  return 0;
}
extern "C" int _tsr_f16_to_f32_cuda(const uint16_t *x, float *y, size_t n, cudaStream_t s) {
  from_f16_k<<<_tsr_blocks(n), TSR_THREADS, 0, s>>>(x, y, n);
  TSR_CUDA_OK(cudaGetLastError());
  return 0;
}
extern "C" int _tsr_all_finite_cuda(const float *x, size_t n, int *flag_dev, int reset, cudaStream_t s) {
  static const int one = 1;
  if (reset) TSR_CUDA_OK(cudaMemcpyAsync(flag_dev, &one, sizeof one, cudaMemcpyHostToDevice, s));
  finite_k<<<_tsr_blocks(n), TSR_THREADS, 0, s>>>(x, n, flag_dev);
  TSR_CUDA_OK(cudaGetLastError());
  return 0;
}

extern "C" int _tsr_narrow_cuda(const float *x, uint16_t *y, size_t n, int precision, cudaStream_t s) {
  if (precision == TSR_PRECISION_BF16) return _tsr_f32_to_bf16_cuda(x, y, n, s);
  if (precision == TSR_PRECISION_FP16) return _tsr_f32_to_f16_cuda(x, y, n, s);
  return _tsr_cuda_report("no reduced-precision format for precision %d", precision);
}
extern "C" int _tsr_widen_cuda(const uint16_t *x, float *y, size_t n, int precision, int accumulate, cudaStream_t s) {
  if (precision != TSR_PRECISION_BF16 && precision != TSR_PRECISION_FP16)
    return _tsr_cuda_report("no reduced-precision format for precision %d", precision);
  widen_k<<<_tsr_blocks(n), TSR_THREADS, 0, s>>>(x, y, n, precision == TSR_PRECISION_BF16, accumulate);
  TSR_CUDA_OK(cudaGetLastError());
  return 0;
}

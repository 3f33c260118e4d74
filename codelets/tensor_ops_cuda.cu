/* CUDA side of the elementary tensor tasks (zero, fill, y += a x, copy; zeroing bytes), the twin of
 * codelets/tensor_ops.c: launchers that queue work on the caller's stream (StarPU's local stream
 * in codelets) and report launch failures. */
#include "cuda_util.h"

static __global__ void axpy_kernel(float *__restrict__ y, const float *__restrict__ x, float a, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] += a * x[i];
}

static int report(cudaError_t e, const char *what) {
  return e == cudaSuccess ? 0 : _tsr_cuda_report("%s failed: %s", what, cudaGetErrorString(e));
}

static unsigned blocks_for(size_t n) {
  size_t b = (n + 255) / 256;
  return (unsigned)(b > 4096 ? 4096 : b ? b : 1);
}

extern "C" int _tsr_zero_cuda(float *x, size_t n, cudaStream_t stream) {
  return report(cudaMemsetAsync(x, 0, n * sizeof(float), stream), "cudaMemsetAsync (zero)");
}

extern "C" int _tsr_axpy_cuda(float *y, const float *x, float a, size_t n, cudaStream_t stream) {
  axpy_kernel<<<blocks_for(n), 256, 0, stream>>>(y, x, a, n);
  return report(cudaGetLastError(), "axpy kernel launch");
}

extern "C" int _tsr_copy_cuda(float *y, const float *x, size_t n, cudaStream_t stream) {
  if (y == x) return 0;
  return report(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync (copy)");
}

static __global__ void set_first_kernel(float *x, float v) { x[0] = v; }

extern "C" int _tsr_fill_cuda(float *x, size_t n, float first, cudaStream_t stream) {
  if (_tsr_zero_cuda(x, n, stream)) return -1;
  if (n == 0) return 0;
  set_first_kernel<<<1, 1, 0, stream>>>(x, first);
  return report(cudaGetLastError(), "fill kernel launch");
}

extern "C" int _tsr_zero_bytes_cuda(void *x, size_t bytes, cudaStream_t s) {
  TSR_CUDA_OK(cudaMemsetAsync(x, 0, bytes, s));
  return 0;
}

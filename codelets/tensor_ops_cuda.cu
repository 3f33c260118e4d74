/* CUDA side of the elementary tensor tasks (zero, y += a x, copy): launchers that queue work on
 * the caller's stream (StarPU's local stream in codelets) and report launch failures. The cuDNN/
 * cuBLAS codelets of the layers are the GPU issue's work; this file keeps the CUDA build honest. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stddef.h>

extern "C" {
int _tsr_zero_cuda(float *x, size_t n, cudaStream_t stream);
int _tsr_axpy_cuda(float *y, const float *x, float a, size_t n, cudaStream_t stream);
int _tsr_copy_cuda(float *y, const float *x, size_t n, cudaStream_t stream);
}

static __global__ void axpy_kernel(float *__restrict__ y, const float *__restrict__ x, float a, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] += a * x[i];
}

static int report(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "tessera: %s failed: %s\n", what, cudaGetErrorString(e));
  return -1;
}

static unsigned blocks_for(size_t n) {
  size_t b = (n + 255) / 256;
  return (unsigned)(b > 4096 ? 4096 : b ? b : 1);
}

int _tsr_zero_cuda(float *x, size_t n, cudaStream_t stream) {
  return report(cudaMemsetAsync(x, 0, n * sizeof(float), stream), "cudaMemsetAsync (zero)");
}

int _tsr_axpy_cuda(float *y, const float *x, float a, size_t n, cudaStream_t stream) {
  axpy_kernel<<<blocks_for(n), 256, 0, stream>>>(y, x, a, n);
  return report(cudaGetLastError(), "axpy kernel launch");
}

int _tsr_copy_cuda(float *y, const float *x, size_t n, cudaStream_t stream) {
  if (y == x) return 0;
  return report(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync (copy)");
}

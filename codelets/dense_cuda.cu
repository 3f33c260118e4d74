/* Dense layers on cuBLAS, the twin of codelets/dense.c. */
#include "cuda_util.h"

/* Row-major y[n, out] = x[n, in] W^T is column-major y^T[out, n] = W[in, out]^T x^T[in, n]. */
__global__ static void bias_rows_k(int n, int out, const float *b, float *y) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n * out; i += (size_t)gridDim.x * blockDim.x)
    y[i] = b[i % out];
}

__global__ static void fill_k(int n, float v, float *y) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = v;
}

extern "C" int _tsr_dense_cuda(int worker, cudaStream_t s, const struct _tsr_dense_desc *d, int pass, const float *in0,
                               const float *in1, const float *in2, float *out0, float *out1) {
  cublasHandle_t h;
  if (_tsr_cuda_handles(worker, s, NULL, &h)) return -1;
  const float one = 1.0f, zero = 0.0f;
  if (pass == TSR_CONV_FWD) { /* x, w, b -> y */
    float beta = 0.0f;
    if (d->has_bias) {
      size_t len = (size_t)d->n * d->out;
      bias_rows_k<<<_tsr_blocks(len), TSR_THREADS, 0, s>>>(d->n, d->out, in2, out0);
      TSR_CUDA_LAUNCHED("dense bias kernel");
      beta = 1.0f;
    }
    TSR_CUBLAS_OK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, d->out, d->n, d->in, &one, in1, d->in, in0, d->in, &beta, out0,
                          d->out));
  } else if (pass == TSR_CONV_BWD_DATA) { /* dy, w -> dx[n, in] = dy[n, out] W[out, in] */
    TSR_CUBLAS_OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, d->in, d->n, d->out, &one, in1, d->in, in0, d->out, &zero, out0,
                          d->in));
  } else { /* x, dy -> dw[out, in] += dy^T x ; db += column sums of dy (= with d->overwrite) */
    const float acc = d->overwrite ? 0.0f : 1.0f;
    TSR_CUBLAS_OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, d->in, d->out, d->n, &one, in0, d->in, in1, d->out, &acc, out0,
                          d->in));
    if (d->has_bias && out1) {
      float *ones = (float *)_tsr_cuda_scratch(worker, (size_t)d->n * sizeof(float), s);
      if (!ones) return -1;
      fill_k<<<1, 256, 0, s>>>(d->n, 1.0f, ones);
      TSR_CUDA_LAUNCHED("dense ones kernel");
      TSR_CUBLAS_OK(cublasSgemv(h, CUBLAS_OP_N, d->out, d->n, &one, in1, d->out, ones, 1, &acc, out1, 1));
    }
  }
  return 0;
}

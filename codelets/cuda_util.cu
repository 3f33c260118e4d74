/* Per-worker CUDA state: the cuDNN and cuBLAS handles of each StarPU CUDA worker (created on its
 * thread at first use, then re-bound to the stream the codelet is given), and a per-worker device
 * scratch that grows. Indexed by worker id: a worker is one thread, so no locks. */
#include <stdio.h>

#include "cuda_util.h"

enum { MAX_WORKERS = 1024 }; /* above STARPU_NMAXWORKERS of any StarPU build */

static struct {
  cudnnHandle_t dnn;
  cublasHandle_t blas;
  void *scratch;
  size_t scratch_bytes;
} workers[MAX_WORKERS];

extern "C" int _tsr_cuda_handles(int worker, cudaStream_t stream, cudnnHandle_t *dnn, cublasHandle_t *blas) {
  if (worker < 0 || worker >= MAX_WORKERS) {
    fprintf(stderr, "tessera: CUDA worker id %d out of range [0, %d)\n", worker, MAX_WORKERS);
    return -1;
  }
  cudnnStatus_t ds;
  cublasStatus_t bs;
  if (!workers[worker].dnn && (ds = cudnnCreate(&workers[worker].dnn)) != CUDNN_STATUS_SUCCESS) {
    fprintf(stderr, "tessera: cudnnCreate failed on worker %d: %s\n", worker, cudnnGetErrorString(ds));
    workers[worker].dnn = NULL;
    return -1;
  }
  if (!workers[worker].blas) {
    if ((bs = cublasCreate(&workers[worker].blas)) != CUBLAS_STATUS_SUCCESS) {
      fprintf(stderr, "tessera: cublasCreate failed on worker %d: %s\n", worker, cublasGetStatusString(bs));
      workers[worker].blas = NULL;
      return -1;
    }
    /* float32 stays float32: no TF32 unless the precision asks for reduced-precision math */
    cublasSetMathMode(workers[worker].blas, CUBLAS_PEDANTIC_MATH);
  }
  if ((ds = cudnnSetStream(workers[worker].dnn, stream)) != CUDNN_STATUS_SUCCESS) {
    fprintf(stderr, "tessera: cudnnSetStream failed: %s\n", cudnnGetErrorString(ds));
    return -1;
  }
  if ((bs = cublasSetStream(workers[worker].blas, stream)) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "tessera: cublasSetStream failed: %s\n", cublasGetStatusString(bs));
    return -1;
  }
  if (dnn) *dnn = workers[worker].dnn;
  if (blas) *blas = workers[worker].blas;
  return 0;
}

extern "C" void *_tsr_cuda_scratch(int worker, size_t bytes, cudaStream_t stream) {
  if (worker < 0 || worker >= MAX_WORKERS) return NULL;
  if (workers[worker].scratch_bytes >= bytes) return workers[worker].scratch;
  cudaError_t e;
  if (workers[worker].scratch) { /* earlier work queued on the stream may still use it */
    if ((e = cudaStreamSynchronize(stream)) != cudaSuccess || (e = cudaFree(workers[worker].scratch)) != cudaSuccess) {
      fprintf(stderr, "tessera: freeing CUDA scratch failed: %s\n", cudaGetErrorString(e));
      return NULL;
    }
  }
  workers[worker].scratch = NULL;
  workers[worker].scratch_bytes = 0;
  size_t want = bytes + bytes / 4 + 256;
  if ((e = cudaMalloc(&workers[worker].scratch, want)) != cudaSuccess) {
    fprintf(stderr, "tessera: cudaMalloc(%zu bytes of scratch) failed: %s\n", want, cudaGetErrorString(e));
    workers[worker].scratch = NULL;
    return NULL;
  }
  workers[worker].scratch_bytes = want;
  return workers[worker].scratch;
}

/* Per-worker CUDA state: the cuDNN and cuBLAS handles of each StarPU CUDA worker (created on its
 * thread at first use, then re-bound to the stream the codelet is given), a per-worker device
 * scratch that grows, and each thread's last failure report. Indexed by worker id: a worker is one
 * thread, so no locks. */
#include <stdarg.h>
#include <stdio.h>

#include "cuda_util.h"

enum { MAX_WORKERS = 1024 }; /* above STARPU_NMAXWORKERS of any StarPU build */

static struct {
  cudnnHandle_t dnn;
  cublasHandle_t blas;
  void *scratch;
  size_t scratch_bytes;
} workers[MAX_WORKERS];

static thread_local char last_report[512];

extern "C" int _tsr_cuda_report(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_report, sizeof last_report, fmt, ap);
  va_end(ap);
  fprintf(stderr, "tessera: %s\n", last_report);
  return -1;
}

extern "C" const char *_tsr_cuda_last_report(void) { return last_report; }

extern "C" int _tsr_cuda_handles(int worker, cudaStream_t stream, cudnnHandle_t *dnn, cublasHandle_t *blas) {
  if (worker < 0 || worker >= MAX_WORKERS)
    return _tsr_cuda_report("CUDA worker id %d out of range [0, %d)", worker, MAX_WORKERS);
  cudnnStatus_t ds;
  cublasStatus_t bs;
  if (!workers[worker].dnn && (ds = cudnnCreate(&workers[worker].dnn)) != CUDNN_STATUS_SUCCESS) {
    workers[worker].dnn = NULL;
    return _tsr_cuda_report("cudnnCreate failed on worker %d: %s", worker, cudnnGetErrorString(ds));
  }
  if (!workers[worker].blas) {
    if ((bs = cublasCreate(&workers[worker].blas)) != CUBLAS_STATUS_SUCCESS) {
      workers[worker].blas = NULL;
      return _tsr_cuda_report("cublasCreate failed on worker %d: %s", worker, cublasGetStatusString(bs));
    }
    /* float32 stays float32 (no TF32 or other reduced-precision math); dense layers are float32 in
     * every precision, as on CPUs */
    if ((bs = cublasSetMathMode(workers[worker].blas, CUBLAS_PEDANTIC_MATH)) != CUBLAS_STATUS_SUCCESS)
      return _tsr_cuda_report("cublasSetMathMode(CUBLAS_PEDANTIC_MATH) failed: %s", cublasGetStatusString(bs));
  }
  /* cuBLAS is bitwise reproducible for one handle on one stream (each worker has both) unless
   * atomics are allowed; they are off by default, and said so explicitly in deterministic mode */
  if (_tsr_get_deterministic() &&
      (bs = cublasSetAtomicsMode(workers[worker].blas, CUBLAS_ATOMICS_NOT_ALLOWED)) != CUBLAS_STATUS_SUCCESS)
    return _tsr_cuda_report("cublasSetAtomicsMode(CUBLAS_ATOMICS_NOT_ALLOWED) failed: %s", cublasGetStatusString(bs));
  if ((ds = cudnnSetStream(workers[worker].dnn, stream)) != CUDNN_STATUS_SUCCESS)
    return _tsr_cuda_report("cudnnSetStream failed: %s", cudnnGetErrorString(ds));
  if ((bs = cublasSetStream(workers[worker].blas, stream)) != CUBLAS_STATUS_SUCCESS)
    return _tsr_cuda_report("cublasSetStream failed: %s", cublasGetStatusString(bs));
  if (dnn) *dnn = workers[worker].dnn;
  if (blas) *blas = workers[worker].blas;
  return 0;
}

extern "C" void *_tsr_cuda_scratch(int worker, size_t bytes, cudaStream_t stream) {
  if (worker < 0 || worker >= MAX_WORKERS) {
    _tsr_cuda_report("CUDA worker id %d out of range [0, %d)", worker, MAX_WORKERS);
    return NULL;
  }
  if (workers[worker].scratch_bytes >= bytes) return workers[worker].scratch;
  cudaError_t e;
  if (workers[worker].scratch) { /* earlier work queued on the stream may still use it */
    if ((e = cudaStreamSynchronize(stream)) != cudaSuccess || (e = cudaFree(workers[worker].scratch)) != cudaSuccess) {
      _tsr_cuda_report("freeing CUDA scratch (cudaStreamSynchronize, cudaFree) failed: %s", cudaGetErrorString(e));
      return NULL;
    }
  }
  workers[worker].scratch = NULL;
  workers[worker].scratch_bytes = 0;
  size_t want = bytes + bytes / 4 + 256;
  if ((e = cudaMalloc(&workers[worker].scratch, want)) != cudaSuccess) {
    workers[worker].scratch = NULL;
    _tsr_cuda_report("cudaMalloc(%zu bytes of scratch) failed: %s", want, cudaGetErrorString(e));
    return NULL;
  }
  workers[worker].scratch_bytes = want;
  return workers[worker].scratch;
}

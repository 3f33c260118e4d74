/* Shared by the CUDA side of the codelets: per-worker cuDNN/cuBLAS handles bound to the worker's
 * stream, per-worker device scratch, the failure report of the last failed CUDA/cuDNN/cuBLAS call,
 * the launcher prototypes (plain functions on device pointers + stream, compiled whenever
 * --with-cuda; each defined in the CUDA twin <op>_cuda.cu of its operation's <op>.c), the helpers of
 * the codelets' CUDA functions (each written beside its CPU function in <op>.c), and
 * TSR_CUDA_FUNCS(f) which adds a CUDA implementation to a codelet only when StarPU has CUDA. */
#ifndef TSR_CUDA_UTIL_H
#define TSR_CUDA_UTIL_H

#ifdef HAVE_CONFIG_H
#include "config.h" /* TSR_WITH_CUDA */
#endif
#include <starpu.h> /* STARPU_USE_CUDA */

/* CUDA implementations exist only when Tessera compiled them and StarPU can run them. */
#if defined(STARPU_USE_CUDA) && defined(TSR_WITH_CUDA)
#define TSR_CUDA_CODELETS 1
#define TSR_CUDA_FUNCS(f) .cuda_funcs = {f}, .cuda_flags = {STARPU_CUDA_ASYNC},
#else
#define TSR_CUDA_FUNCS(f)
#endif

#if defined(TSR_WITH_CUDA) || defined(__CUDACC__)
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cublas_v2.h>
#include <stddef.h>
#include <stdint.h>

#include "codelets.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reports a failed call: prints "tessera: <message>" to stderr and keeps the message as this
 * thread's last CUDA failure (the codelet records it for the trainer: _tsr_kernel_record). -1. */
int _tsr_cuda_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* This thread's last report ("" when none). */
const char *_tsr_cuda_last_report(void);

#ifdef __CUDACC__
/* In the .cu launchers: return _tsr_cuda_report(...) (-1) naming the failed call, file and line. */
#define TSR_CUDA_OK(call)                                                                            \
  do {                                                                                               \
    cudaError_t _e = (call);                                                                         \
    if (_e != cudaSuccess)                                                                           \
      return _tsr_cuda_report("%s failed: %s (%s:%d)", #call, cudaGetErrorString(_e), __FILE__, __LINE__); \
  } while (0)
#define TSR_CUDNN_OK(call)                                                                           \
  do {                                                                                               \
    cudnnStatus_t _s = (call);                                                                       \
    if (_s != CUDNN_STATUS_SUCCESS)                                                                  \
      return _tsr_cuda_report("%s failed: %s (%s:%d)", #call, cudnnGetErrorString(_s), __FILE__, __LINE__); \
  } while (0)
#define TSR_CUBLAS_OK(call)                                                                          \
  do {                                                                                               \
    cublasStatus_t _s = (call);                                                                      \
    if (_s != CUBLAS_STATUS_SUCCESS)                                                                 \
      return _tsr_cuda_report("%s failed: %s (%s:%d)", #call, cublasGetStatusString(_s), __FILE__, __LINE__); \
  } while (0)
#define TSR_CUDA_LAUNCHED(what)                                                                      \
  do {                                                                                               \
    cudaError_t _e = cudaGetLastError();                                                             \
    if (_e != cudaSuccess) return _tsr_cuda_report("%s launch failed: %s", what, cudaGetErrorString(_e)); \
  } while (0)

/* Launch shape of the element-wise kernels: TSR_THREADS per block, enough blocks for n elements
 * (at most 8192; TSR_GRID_LOOP strides over the rest). */
enum { TSR_THREADS = 256 };
static inline unsigned _tsr_blocks(size_t n) {
  size_t b = (n + TSR_THREADS - 1) / TSR_THREADS;
  return (unsigned)(b > 8192 ? 8192 : b ? b : 1);
}
#define TSR_GRID_LOOP(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* One float operation rounded on its own, never fused into an FMA nor approximated (the _rn
 * intrinsics on the device; plain operators in the host runs of kernel code that tests call): for
 * kernels whose results must be the CPU kernels' bit for bit. */
#ifdef __CUDA_ARCH__
#define TSR_RN(dev, op) return dev(a, b)
#else
#define TSR_RN(dev, op) return a op b
#endif
__host__ __device__ static inline float _tsr_add_rn(float a, float b) { TSR_RN(__fadd_rn, +); }
__host__ __device__ static inline float _tsr_sub_rn(float a, float b) { TSR_RN(__fsub_rn, -); }
__host__ __device__ static inline float _tsr_mul_rn(float a, float b) { TSR_RN(__fmul_rn, *); }
__host__ __device__ static inline float _tsr_div_rn(float a, float b) { TSR_RN(__fdiv_rn, /); }
#undef TSR_RN

/* Block-wide sum of two doubles in a fixed order (tree over shared memory); blocks of TSR_THREADS. */
__device__ static inline void _tsr_block_sum2(double *a, double *b) {
  __shared__ double sa[TSR_THREADS], sb[TSR_THREADS];
  sa[threadIdx.x] = *a;
  sb[threadIdx.x] = *b;
  __syncthreads();
  for (int w = TSR_THREADS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) {
      sa[threadIdx.x] += sa[threadIdx.x + w];
      sb[threadIdx.x] += sb[threadIdx.x + w];
    }
    __syncthreads();
  }
  *a = sa[0];
  *b = sb[0];
}
#endif

/* Handles of worker `worker` (created at its first call), bound to `stream`; in deterministic
 * mode cuBLAS is told not to use atomics. 0, or -1 after reporting the failed call. */
int _tsr_cuda_handles(int worker, cudaStream_t stream, cudnnHandle_t *dnn, cublasHandle_t *blas);
/* Device scratch of worker `worker`, at least `bytes` (grown after synchronising `stream`); NULL
 * after reporting the failure. */
void *_tsr_cuda_scratch(int worker, size_t bytes, cudaStream_t stream);

/* ---- launchers: 0, or -1 after reporting the failed call; `worker` keys handles and caches ---- */
/* `pass` of the conv and dense launchers: an enum _tsr_conv_pass (codelets.h). */
int _tsr_conv_cuda(int worker, cudaStream_t s, const struct _tsr_conv_desc *d, int deconv, int pass, int precision,
                   const float *in0, const float *in1, const float *in2, float *out0, float *out1);
/* conv3d and conv_transpose3d (conv3d_cuda.cu), float32: buffers as _tsr_conv_cuda's. */
int _tsr_conv3d_cuda(int worker, cudaStream_t s, const struct _tsr_conv3d_desc *d, int pass, const float *in0,
                     const float *in1, const float *in2, float *out0, float *out1);
/* Nearest upsampling (upsample_cuda.cu): fwd in = x, out = y; bwd in = dy, out = dx. */
int _tsr_upsample_cuda(cudaStream_t s, const struct _tsr_upsample_desc *d, int bwd, const float *in, float *out);
int _tsr_dense_cuda(int worker, cudaStream_t s, const struct _tsr_dense_desc *d, int pass, const float *in0,
                    const float *in1, const float *in2, float *out0, float *out1);
/* Pooling (pool_cuda.cu): fwd in = x, out = y, ws written for max pooling; bwd in = dy, ws read
 * for max pooling, out = dx. ws is oneDNN's workspace layout (see pool_cuda.cu). */
int _tsr_pool_cuda(int worker, cudaStream_t s, const struct _tsr_pool_desc *d, int bwd, const float *in, void *ws,
                   float *out);
/* Bytes of the max-pooling workspace in oneDNN's layout (what _tsr_pool_ws_bytes returns). */
size_t _tsr_pool_cuda_ws_bytes(const struct _tsr_pool_desc *d);
/* The pooling kernels' per-element code run on the host (tests compare it with oneDNN without a
 * GPU): max forward (y and ws) and the backward of either kind. */
void _tsr_pool_max_fwd_host(const struct _tsr_pool_desc *d, const float *x, float *y, void *ws);
void _tsr_pool_bwd_host(const struct _tsr_pool_desc *d, const float *dy, const void *ws, float *dx);
/* Activations (eltwise_cuda.cu): fwd x -> out = y; bwd x, y, dy -> out = dx. */
int _tsr_act_cuda(int worker, cudaStream_t s, const struct _tsr_act_desc *d, int bwd, const float *x, const float *y,
                  const float *dy, float *out);
int _tsr_bn_cuda(cudaStream_t s, const struct _tsr_bn_desc *d, int op, const float *x, const float *f0,
                 const float *f1, const float *f2, const float *f3, double *acc, float *out0, float *out1);
int _tsr_bn_finalize_cuda(cudaStream_t s, const struct _tsr_bn_desc *d, const double *acc, float *stat,
                          float *running_mean, float *running_var);
int _tsr_dropout_cuda(cudaStream_t s, const struct _tsr_dropout_desc *d, uint64_t seed, const float *in, float *out);
int _tsr_concat_cuda(cudaStream_t s, const struct _tsr_concat_desc *d, int bwd, float *const *parts, float *whole);
int _tsr_add_cuda(cudaStream_t s, size_t len, int k, const float *const *xs, float *y);
int _tsr_loss_cuda(int worker, cudaStream_t s, const struct _tsr_loss_desc *d, const float *yhat, const float *y,
                   float *dyhat, double *loss);
/* float32 <-> bf16 / fp16 (precision TSR_PRECISION_BF16 or _FP16; convert_cuda.cu) for the
 * reduced-precision cuDNN calls; widen adds into y when `accumulate`. */
int _tsr_narrow_cuda(const float *x, uint16_t *y, size_t n, int precision, cudaStream_t stream);
int _tsr_widen_cuda(const uint16_t *x, float *y, size_t n, int precision, int accumulate, cudaStream_t stream);
/* Loss scaling: x *= state->scale (state in device memory) or `fixed` when state is NULL; and
 * state->overflow = 1 when some x is not finite. */
int _tsr_scale_grad_cuda(cudaStream_t s, size_t n, float *x, const struct _tsr_scale_state *state, double fixed);
int _tsr_scale_check_cuda(cudaStream_t s, size_t n, const float *x, struct _tsr_scale_state *state);
int _tsr_zero_bytes_cuda(void *x, size_t bytes, cudaStream_t stream);
int _tsr_zero_cuda(float *x, size_t n, cudaStream_t stream);
int _tsr_axpy_cuda(float *y, const float *x, float a, size_t n, cudaStream_t stream);
int _tsr_copy_cuda(float *y, const float *x, size_t n, cudaStream_t stream);
int _tsr_fill_cuda(float *x, size_t n, float first, cudaStream_t stream); /* x = 0, x[0] = first */

/* Batch-norm operations of _tsr_bn_cuda, with the buffers each one reads (f0..f3) and writes. */
enum _tsr_bn_op {
  TSR_BN_STATS,      /* x -> acc += */
  TSR_BN_FWD,        /* x, f0 = stat, f1 = gamma, f2 = beta -> out0 = y */
  TSR_BN_FWD_EVAL,   /* x, f0 = running mean, f1 = running var, f2 = gamma, f3 = beta -> out0 = y */
  TSR_BN_BWD_STATS,  /* x, f0 = stat, f1 = dy -> acc += */
  TSR_BN_BWD_PARAMS, /* acc -> out0 = dgamma +=, out1 = dbeta += */
  TSR_BN_BWD_DATA    /* x, f0 = stat, f1 = gamma, f2 = dy, acc -> out0 = dx */
};

#ifdef __cplusplus
}
#endif
#endif /* TSR_WITH_CUDA */

#ifdef TSR_CUDA_CODELETS
/* In the codelets' CUDA functions (void f(void *b[], void *a)): each reads its buffers in the order
 * of the CPU function and queues work on StarPU's local stream (codelets are STARPU_CUDA_ASYNC)
 * with the worker's handles. TSR_CUDA_RUN(launcher call): a failed call is printed and recorded as
 * the kernels' first failure, which the trainer returns from its next call; the task's write-only
 * outputs are zeroed, as after a failed CPU kernel, and the process goes on. */
#define TSR_CUDA_STREAM starpu_cuda_get_local_stream()
#define TSR_CUDA_WORKER starpu_worker_get_id()
#define TSR_CUDA_RUN(call)                                                                         \
  do {                                                                                             \
    if ((call) != 0) _tsr_cuda_task_failed(__func__, b);                                           \
  } while (0)
/* Records the failure of codelet `codelet` and zeroes the current task's write-only vectors
 * (kernel_util.c). */
void _tsr_cuda_task_failed(const char *codelet, void *buffers[]);
/* conv2d.c: the CUDA function of conv2d's and conv_transpose2d's codelets for one pass. */
void _tsr_convlike_cuda(void *b[], const struct _tsr_conv_desc *d, int deconv, int pass);
#endif
#endif

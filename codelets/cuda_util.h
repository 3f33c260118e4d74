/* Shared by the CUDA side of the codelets: per-worker cuDNN/cuBLAS handles bound to the worker's
 * stream, per-worker device scratch, checks that print the failed call, the launcher prototypes
 * (plain functions on device pointers + stream, compiled whenever --with-cuda), and
 * TSR_CUDA_FUNCS(f) which adds a CUDA implementation to a codelet only when StarPU has CUDA. */
#ifndef TSR_CUDA_UTIL_H
#define TSR_CUDA_UTIL_H

#ifdef HAVE_CONFIG_H
#include "config.h" /* TSR_WITH_CUDA */
#endif
#include <starpu.h> /* STARPU_USE_CUDA */

/* CUDA implementations exist only when Tessera compiled them and StarPU can run them. */
#if defined(STARPU_USE_CUDA) && defined(TSR_WITH_CUDA)
#define TSR_CUDA_FUNCS(f) .cuda_funcs = {f}, .cuda_flags = {STARPU_CUDA_ASYNC},
/* The CUDA functions of the codelets (cuda_codelets.c): <cpu function name>_cuda. */
#define TSR_CL_CUDA(f) void f##_cuda(void *buffers[], void *cl_arg);
TSR_CL_CUDA(zero_cpu) TSR_CL_CUDA(accumulate_cpu) TSR_CL_CUDA(copy_cpu)
TSR_CL_CUDA(conv2d_fwd_cpu) TSR_CL_CUDA(conv2d_bwd_data_cpu) TSR_CL_CUDA(conv2d_bwd_weights_cpu)
TSR_CL_CUDA(deconv2d_fwd_cpu) TSR_CL_CUDA(deconv2d_bwd_data_cpu) TSR_CL_CUDA(deconv2d_bwd_weights_cpu)
TSR_CL_CUDA(dense_fwd_cpu) TSR_CL_CUDA(dense_bwd_data_cpu) TSR_CL_CUDA(dense_bwd_weights_cpu)
TSR_CL_CUDA(act_fwd_cpu) TSR_CL_CUDA(act_bwd_cpu) TSR_CL_CUDA(dropout_fwd_cpu) TSR_CL_CUDA(dropout_bwd_cpu)
TSR_CL_CUDA(concat_fwd_cpu) TSR_CL_CUDA(concat_bwd_cpu) TSR_CL_CUDA(add_fwd_cpu)
TSR_CL_CUDA(loss_cpu) TSR_CL_CUDA(opt_update_cpu) TSR_CL_CUDA(zero_doubles_cpu)
TSR_CL_CUDA(bn_stats_cpu) TSR_CL_CUDA(bn_finalize_cpu) TSR_CL_CUDA(bn_fwd_cpu) TSR_CL_CUDA(bn_fwd_eval_cpu)
TSR_CL_CUDA(bn_bwd_stats_cpu) TSR_CL_CUDA(bn_bwd_params_cpu) TSR_CL_CUDA(bn_bwd_data_cpu)
#undef TSR_CL_CUDA
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

/* Handles of worker `worker` (created at its first call), bound to `stream`. 0, or -1 after
 * printing the failed call. */
int _tsr_cuda_handles(int worker, cudaStream_t stream, cudnnHandle_t *dnn, cublasHandle_t *blas);
/* Device scratch of worker `worker`, at least `bytes` (grown after synchronising `stream`); NULL
 * after printing the failure. */
void *_tsr_cuda_scratch(int worker, size_t bytes, cudaStream_t stream);

/* ---- launchers: 0, or -1 after printing the failed call; `worker` keys handles and caches ---- */
int _tsr_conv_cuda(int worker, cudaStream_t s, const struct tsr_conv_desc *d, int deconv, int pass, int precision,
                   const float *in0, const float *in1, const float *in2, float *out0, float *out1);
int _tsr_dense_cuda(int worker, cudaStream_t s, const struct tsr_dense_desc *d, int pass, const float *in0,
                    const float *in1, const float *in2, float *out0, float *out1);
int _tsr_act_cuda(int worker, cudaStream_t s, const struct tsr_act_desc *d, int bwd, const float *x, const float *y,
                  const float *dy, float *out);
int _tsr_bn_cuda(cudaStream_t s, const struct tsr_bn_desc *d, int op, const float *x, const float *f0,
                 const float *f1, const float *f2, const float *f3, double *acc, float *out0, float *out1);
int _tsr_bn_finalize_cuda(cudaStream_t s, const struct tsr_bn_desc *d, const double *acc, float *stat,
                          float *running_mean, float *running_var);
int _tsr_dropout_cuda(cudaStream_t s, const struct tsr_dropout_desc *d, uint64_t seed, const float *in, float *out);
int _tsr_concat_cuda(cudaStream_t s, const struct tsr_concat_desc *d, int bwd, float *const *parts, float *whole);
int _tsr_add_cuda(cudaStream_t s, size_t len, int k, const float *const *xs, float *y);
int _tsr_loss_cuda(int worker, cudaStream_t s, const struct tsr_loss_desc *d, const float *yhat, const float *y,
                   float *dyhat, double *loss);
int _tsr_opt_update_cuda(cudaStream_t s, const struct tsr_opt_args *a, size_t n, float *w, const float *g, float *m,
                         float *v);
int _tsr_zero_bytes_cuda(void *x, size_t bytes, cudaStream_t stream);
int _tsr_zero_cuda(float *x, size_t n, cudaStream_t stream);
int _tsr_axpy_cuda(float *y, const float *x, float a, size_t n, cudaStream_t stream);
int _tsr_copy_cuda(float *y, const float *x, size_t n, cudaStream_t stream);

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
#endif

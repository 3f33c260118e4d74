/* Lion on CUDA, the twins of lion.c (PyTorch reference semantics): the fused update, optionally gated
 * by the loss scaler, and the two halves of the sign reductions (direction, apply). Every product and
 * sum is rounded on its own (__fmul_rn, __fadd_rn: nvcc never fuses these into an FMA), in lion.c's
 * order, so the three kernels agree with one another as lion.c's do (a vote of identical directions
 * gives the 1-rank result bitwise on CUDA workers too) and with the CPU kernels wherever the host
 * compiler does not contract either (x86-64 without -mfma). */
#include "optim/update_cuda.h"

__device__ static inline float sign_of(float c) { return (float)((c > 0) - (c < 0)); }
/* b1 m + (1 - b1) gi */
__device__ static inline float interp(float b, float m, float gi) {
  return __fadd_rn(__fmul_rn(b, m), __fmul_rn(1.0f - b, gi));
}
/* decay w - lr d, decay = 1 - lr wd */
__device__ static inline float step_w(float w, float d, float lr, float wd) {
  return __fsub_rn(__fmul_rn(__fsub_rn(1.0f, __fmul_rn(lr, wd)), w), __fmul_rn(lr, d));
}

__global__ static void lion_k(_tsr_optim_args a, _tsr_opt_gate host, const _tsr_scale_state *gate, size_t n, float *w,
                              const float *g, float *m) {
  const _tsr_opt_gate c = _tsr_block_coef(a, host, gate);
  if (!c.apply) return;
  const float b1 = a.h.beta1, b2 = a.h.beta2, lr = a.h.lr, wd = a.h.weight_decay;
  TSR_GRID_LOOP(i, n) {
    float gi = __fmul_rn(c.grad_scale, g[i]);
    w[i] = step_w(w[i], sign_of(interp(b1, m[i], gi)), lr, wd);
    m[i] = interp(b2, m[i], gi);
  }
}

__global__ static void lion_direction_k(_tsr_optim_args a, size_t n, float *g, float *m) {
  const float b1 = a.h.beta1, b2 = a.h.beta2, gs = a.grad_scale;
  TSR_GRID_LOOP(i, n) {
    float gi = __fmul_rn(gs, g[i]);
    g[i] = sign_of(interp(b1, m[i], gi));
    m[i] = interp(b2, m[i], gi);
  }
}

__global__ static void lion_apply_k(_tsr_optim_args a, size_t n, float *w, const float *d) {
  TSR_GRID_LOOP(i, n) w[i] = step_w(w[i], d[i], a.h.lr, a.h.weight_decay);
}

extern "C" _tsr_optim_cuda_fn _tsr_lion_cuda;
extern "C" int _tsr_lion_cuda(void *stream, const _tsr_optim_args *a, size_t n, float *w, const float *g,
                              float *const *state, const _tsr_scale_state *gate) {
  const _tsr_opt_gate host = _tsr_opt_gate::of(*a, a->step, a->grad_scale, 1);
  lion_k<<<_tsr_blocks(n), TSR_THREADS, 0, (cudaStream_t)stream>>>(*a, host, gate, n, w, g, state[0]);
  TSR_CUDA_LAUNCHED("optimizer kernel");
  return 0;
}

extern "C" _tsr_optim_dir_cuda_fn _tsr_lion_direction_cuda;
extern "C" int _tsr_lion_direction_cuda(void *stream, const _tsr_optim_args *a, size_t n, float *g,
                                        float *const *state) {
  if (!n) return 0;
  lion_direction_k<<<_tsr_blocks(n), TSR_THREADS, 0, (cudaStream_t)stream>>>(*a, n, g, state[0]);
  TSR_CUDA_LAUNCHED("Lion direction kernel");
  return 0;
}

extern "C" _tsr_optim_apply_cuda_fn _tsr_lion_apply_cuda;
extern "C" int _tsr_lion_apply_cuda(void *stream, const _tsr_optim_args *a, size_t n, float *w, const float *d) {
  if (!n) return 0;
  lion_apply_k<<<_tsr_blocks(n), TSR_THREADS, 0, (cudaStream_t)stream>>>(*a, n, w, d);
  TSR_CUDA_LAUNCHED("Lion apply kernel");
  return 0;
}

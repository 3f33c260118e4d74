/* Lion on CUDA, the twins of lion.c (PyTorch reference semantics): the fused update, optionally gated
 * by the loss scaler, and the two halves of the sign reductions (direction, apply). Every product and
 * sum is rounded on its own (_tsr_mul_rn, _tsr_add_rn: never fused into an FMA), in lion.c's
 * order, so the three kernels agree with one another as lion.c's do (a vote of identical directions
 * gives the 1-rank result bitwise on CUDA workers too) and with the CPU kernels wherever the host
 * compiler does not contract either (x86-64 without -mfma). The per-index code also runs on the host
 * (_tsr_lion_*_host), where tests/gpu/check_gpu compares it with a float64 reference without a GPU. */
#include "optim/update_cuda.h"

__host__ __device__ static inline float sign_of(float c) { return (float)((c > 0) - (c < 0)); }
/* b m + (1 - b) gi */
__host__ __device__ static inline float interp(float b, float m, float gi) {
  return _tsr_add_rn(_tsr_mul_rn(b, m), _tsr_mul_rn(1.0f - b, gi));
}
/* decay w - lr d, decay = 1 - lr wd */
__host__ __device__ static inline float step_w(float w, float d, float lr, float wd) {
  return _tsr_sub_rn(_tsr_mul_rn(_tsr_sub_rn(1.0f, _tsr_mul_rn(lr, wd)), w), _tsr_mul_rn(lr, d));
}
/* Value i of the fused update, of the direction and of its application (the kernels' per-index code,
 * also run on the host by tests: _tsr_lion_*_host). */
__host__ __device__ static inline void fused_one(size_t i, const _tsr_optim_args &a, float gs, float *w, const float *g,
                                                 float *m) {
  float gi = _tsr_mul_rn(gs, g[i]);
  w[i] = step_w(w[i], sign_of(interp(a.h.beta1, m[i], gi)), a.h.lr, a.h.weight_decay);
  m[i] = interp(a.h.beta2, m[i], gi);
}
__host__ __device__ static inline void direction_one(size_t i, const _tsr_optim_args &a, float *g, float *m) {
  float gi = _tsr_mul_rn(a.grad_scale, g[i]);
  g[i] = sign_of(interp(a.h.beta1, m[i], gi));
  m[i] = interp(a.h.beta2, m[i], gi);
}

__global__ static void lion_k(_tsr_optim_args a, _tsr_opt_gate host, const _tsr_scale_state *gate, size_t n, float *w,
                              const float *g, float *m) {
  const _tsr_opt_gate c = _tsr_block_coef(a, host, gate);
  if (!c.apply) return;
  TSR_GRID_LOOP(i, n) fused_one(i, a, c.grad_scale, w, g, m);
}
__global__ static void lion_direction_k(_tsr_optim_args a, size_t n, float *g, float *m) {
  TSR_GRID_LOOP(i, n) direction_one(i, a, g, m);
}
__global__ static void lion_apply_k(_tsr_optim_args a, size_t n, float *w, const float *d) {
  TSR_GRID_LOOP(i, n) w[i] = step_w(w[i], d[i], a.h.lr, a.h.weight_decay);
}

extern "C" void _tsr_lion_update_host(const _tsr_optim_args *a, size_t n, float *w, const float *g, float *m) {
  for (size_t i = 0; i < n; i++) fused_one(i, *a, a->grad_scale, w, g, m);
}
extern "C" void _tsr_lion_direction_host(const _tsr_optim_args *a, size_t n, float *g, float *m) {
  for (size_t i = 0; i < n; i++) direction_one(i, *a, g, m);
}
extern "C" void _tsr_lion_apply_host(const _tsr_optim_args *a, size_t n, float *w, const float *d) {
  for (size_t i = 0; i < n; i++) w[i] = step_w(w[i], d[i], a->h.lr, a->h.weight_decay);
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

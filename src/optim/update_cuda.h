/* For the optimizers' CUDA kernels (<name>_cuda.cu): the step's coefficients, from the host for a
 * plain update or, for one gated by the loss scaler, from the scaler's state where StarPU put it in
 * device memory, read once per block so the decision never makes the host wait. A skipped step
 * changes nothing and does not count in the step number (bias corrections). */
#ifndef TSR_OPTIM_UPDATE_CUDA_H
#define TSR_OPTIM_UPDATE_CUDA_H

#include "cuda_util.h"
#include "optim/optim.h"

/* The coefficients every kernel needs; kernels with more derive a struct with the same `of`. */
struct _tsr_opt_gate {
  int apply;
  int64_t step; /* 1-based, skipped steps not counted */
  float grad_scale;
  __host__ __device__ static _tsr_opt_gate of(const _tsr_optim_args &a, int64_t step, float grad_scale, int apply) {
    return _tsr_opt_gate{apply, step, grad_scale};
  }
};

/* C: a coefficient struct with a static C::of(args, step, grad_scale, apply); `host` was made on
 * the host with the task's step and grad_scale. Every thread of the block must call it (it
 * synchronises the block). */
template <class C>
__device__ static C _tsr_block_coef(const _tsr_optim_args &a, const C &host, const _tsr_scale_state *gate) {
  __shared__ C c;
  if (!gate) return host;
  if (threadIdx.x == 0) c = C::of(a, a.step - gate->skipped, gate->unscale, gate->apply);
  __syncthreads();
  return c;
}

#endif

/* Optimizer updates on CUDA, the twin of codelets/optim.c (PyTorch semantics), optionally gated by
 * the loss scaler. */
#include <math.h>
#include <stdint.h>

#include "cuda_util.h"

/* The coefficients of a step: from the host for a plain update; for one gated by the loss scaler
 * from the scaler's state in device memory (computed once per block, so the decision never makes
 * the host wait): a skipped step changes nothing and does not count for Adam's bias correction. */

struct opt_coef {
  int apply;
  int64_t step; /* 1-based, skipped steps not counted */
  float grad_scale, step_size, inv_bc2_sqrt;
};

__host__ __device__ static opt_coef coef_of(const tsr_opt_args &a, int64_t step, float grad_scale, int apply) {
  opt_coef c;
  const double t = (double)(step < 1 ? 1 : step);
  c.apply = apply;
  c.step = step;
  c.grad_scale = grad_scale;
  c.step_size = (float)(a.lr / (1.0 - pow((double)a.beta1, t)));
  c.inv_bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow((double)a.beta2, t)));
  return c;
}

/* every thread of the block must call it (it synchronises the block) */
__device__ static opt_coef block_coef(const tsr_opt_args &a, const opt_coef &host, const _tsr_scale_state *gate) {
  __shared__ opt_coef c;
  if (!gate) return host;
  if (threadIdx.x == 0) c = coef_of(a, a.step - gate->skipped, gate->unscale, gate->apply);
  __syncthreads();
  return c;
}

__global__ static void sgd_k(tsr_opt_args a, opt_coef host, const _tsr_scale_state *gate, size_t n, float *w,
                             const float *g, float *m) {
  const opt_coef c = block_coef(a, host, gate);
  if (!c.apply) return;
  TSR_GRID_LOOP(i, n) {
    float gi = c.grad_scale * g[i] + a.weight_decay * w[i];
    if (a.momentum == 0.0f) {
      w[i] -= a.lr * gi;
      continue;
    }
    float mi = a.momentum * (c.step <= 1 ? 0.0f : m[i]) + gi;
    m[i] = mi;
    w[i] -= a.lr * (a.nesterov ? gi + a.momentum * mi : mi);
  }
}

__global__ static void adam_k(tsr_opt_args a, opt_coef host, const _tsr_scale_state *gate, float l2, float decay,
                              size_t n, float *w, const float *g, float *m, float *v) {
  const opt_coef c = block_coef(a, host, gate);
  if (!c.apply) return;
  TSR_GRID_LOOP(i, n) {
    float wi = decay * w[i];
    float gi = c.grad_scale * g[i] + l2 * wi;
    float mi = a.beta1 * m[i] + (1.0f - a.beta1) * gi;
    float vi = a.beta2 * v[i] + (1.0f - a.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - c.step_size * mi / (sqrtf(vi) * c.inv_bc2_sqrt + a.eps);
  }
}

extern "C" int _tsr_opt_update_cuda(cudaStream_t s, const struct tsr_opt_args *a, size_t n, float *w, const float *g,
                                    float *m, float *v, const struct _tsr_scale_state *gate) {
  const opt_coef host = coef_of(*a, a->step, a->grad_scale, 1);
  if (a->kind == TSR_OPT_SGD) {
    sgd_k<<<_tsr_blocks(n), TSR_THREADS, 0, s>>>(*a, host, gate, n, w, g, m);
  } else {
    float l2 = a->kind == TSR_OPT_ADAM ? a->weight_decay : 0.0f;
    float decay = a->kind == TSR_OPT_ADAMW ? 1.0f - a->lr * a->weight_decay : 1.0f;
    adam_k<<<_tsr_blocks(n), TSR_THREADS, 0, s>>>(*a, host, gate, l2, decay, n, w, g, m, v);
  }
  LAUNCHED("optimizer kernel");
  return 0;
}

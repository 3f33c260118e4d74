/* Adam and AdamW on CUDA, the twin of adam.c (PyTorch semantics), optionally gated by the loss
 * scaler. */
#include <math.h>

#include "optim/update_cuda.h"

/* The gate and the bias corrections of the step. */
struct adam_coef {
  int apply;
  int64_t step;
  float grad_scale, step_size, inv_bc2_sqrt;
  __host__ __device__ static adam_coef of(const _tsr_optim_args &a, int64_t step, float grad_scale, int apply) {
    const double t = (double)(step < 1 ? 1 : step);
    adam_coef c;
    c.apply = apply;
    c.step = step;
    c.grad_scale = grad_scale;
    c.step_size = (float)(a.h.lr / (1.0 - pow((double)a.h.beta1, t)));
    c.inv_bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow((double)a.h.beta2, t)));
    return c;
  }
};

/* `l2` is the L2 coefficient added to the gradient (Adam), `decay` the factor the weights are
 * multiplied by first (AdamW). */
__global__ static void adam_k(_tsr_optim_args a, adam_coef host, const _tsr_scale_state *gate, float l2, float decay,
                              size_t n, float *w, const float *g, float *m, float *v) {
  const adam_coef c = _tsr_block_coef(a, host, gate);
  if (!c.apply) return;
  TSR_GRID_LOOP(i, n) {
    float wi = decay * w[i];
    float gi = c.grad_scale * g[i] + l2 * wi;
    float mi = a.h.beta1 * m[i] + (1.0f - a.h.beta1) * gi;
    float vi = a.h.beta2 * v[i] + (1.0f - a.h.beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - c.step_size * mi / (sqrtf(vi) * c.inv_bc2_sqrt + a.h.eps);
  }
}

static int launch(void *stream, const _tsr_optim_args *a, float l2, float decay, size_t n, float *w, const float *g,
                  float *const *state, const _tsr_scale_state *gate) {
  const adam_coef host = adam_coef::of(*a, a->step, a->grad_scale, 1);
  adam_k<<<_tsr_blocks(n), TSR_THREADS, 0, (cudaStream_t)stream>>>(*a, host, gate, l2, decay, n, w, g, state[0],
                                                                   state[1]);
  TSR_CUDA_LAUNCHED("optimizer kernel");
  return 0;
}

extern "C" _tsr_optim_cuda_fn _tsr_adam_cuda;
extern "C" int _tsr_adam_cuda(void *stream, const _tsr_optim_args *a, size_t n, float *w, const float *g,
                              float *const *state, const _tsr_scale_state *gate) {
  return launch(stream, a, a->h.weight_decay, 1.0f, n, w, g, state, gate);
}
extern "C" _tsr_optim_cuda_fn _tsr_adamw_cuda;
extern "C" int _tsr_adamw_cuda(void *stream, const _tsr_optim_args *a, size_t n, float *w, const float *g,
                               float *const *state, const _tsr_scale_state *gate) {
  return launch(stream, a, 0.0f, 1.0f - a->h.lr * a->h.weight_decay, n, w, g, state, gate);
}

/* Lion on CUDA, the twin of the fused kernel of lion.c (PyTorch reference semantics), optionally
 * gated by the loss scaler. */
#include "optim/update_cuda.h"

__global__ static void lion_k(_tsr_optim_args a, _tsr_opt_gate host, const _tsr_scale_state *gate, size_t n, float *w,
                              const float *g, float *m) {
  const _tsr_opt_gate c = _tsr_block_coef(a, host, gate);
  if (!c.apply) return;
  const float b1 = a.h.beta1, b2 = a.h.beta2, lr = a.h.lr, decay = 1.0f - lr * a.h.weight_decay;
  TSR_GRID_LOOP(i, n) {
    float gi = c.grad_scale * g[i], u = b1 * m[i] + (1.0f - b1) * gi;
    w[i] = decay * w[i] - lr * (float)((u > 0) - (u < 0));
    m[i] = b2 * m[i] + (1.0f - b2) * gi;
  }
}

extern "C" _tsr_optim_cuda_fn _tsr_lion_cuda;
extern "C" int _tsr_lion_cuda(void *stream, const _tsr_optim_args *a, size_t n, float *w, const float *g,
                              float *const *state, const _tsr_scale_state *gate) {
  const _tsr_opt_gate host = _tsr_opt_gate::of(*a, a->step, a->grad_scale, 1);
  lion_k<<<_tsr_blocks(n), TSR_THREADS, 0, (cudaStream_t)stream>>>(*a, host, gate, n, w, g, state[0]);
  TSR_CUDA_LAUNCHED("optimizer kernel");
  return 0;
}

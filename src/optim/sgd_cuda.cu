/* SGD on CUDA, the twin of sgd.c (PyTorch semantics), optionally gated by the loss scaler. */
#include "optim/update_cuda.h"

__global__ static void sgd_k(_tsr_optim_args a, _tsr_opt_gate host, const _tsr_scale_state *gate, size_t n, float *w,
                             const float *g, float *m) {
  const _tsr_opt_gate c = _tsr_block_coef(a, host, gate);
  if (!c.apply) return;
  TSR_GRID_LOOP(i, n) {
    float gi = c.grad_scale * g[i] + a.h.weight_decay * w[i];
    if (a.h.momentum == 0.0f) {
      w[i] -= a.h.lr * gi;
      continue;
    }
    float mi = a.h.momentum * (c.step <= 1 ? 0.0f : m[i]) + gi;
    m[i] = mi;
    w[i] -= a.h.lr * (a.h.nesterov ? gi + a.h.momentum * mi : mi);
  }
}

extern "C" _tsr_optim_cuda_fn _tsr_sgd_cuda;
extern "C" int _tsr_sgd_cuda(void *stream, const _tsr_optim_args *a, size_t n, float *w, const float *g,
                             float *const *state, const _tsr_scale_state *gate) {
  const _tsr_opt_gate host = _tsr_opt_gate::of(*a, a->step, a->grad_scale, 1);
  sgd_k<<<_tsr_blocks(n), TSR_THREADS, 0, (cudaStream_t)stream>>>(*a, host, gate, n, w, g, state[0]);
  TSR_CUDA_LAUNCHED("optimizer kernel");
  return 0;
}

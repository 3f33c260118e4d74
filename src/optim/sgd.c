/* SGD with the semantics of torch.optim.SGD: momentum (dampening 0), Nesterov, L2 weight decay
 * added to the gradient. One state tensor, the momentum buffer ("moment0" in checkpoints, as
 * before optimizers were entries). The CUDA kernel is in sgd_cuda.cu. */
#include <string.h>

#include "optim/optim.h"

/* The loops are plain streams over restrict pointers so that gcc vectorises them. */
static void sgd(const struct _tsr_optim_args *a, size_t n, float *restrict w, const float *restrict g,
                float *const *state) {
  float *restrict m = state[0];
  const float lr = a->h.lr, mu = a->h.momentum, wd = a->h.weight_decay, gs = a->grad_scale;
  if (mu == 0.0f) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) w[i] -= lr * (gs * g[i] + wd * w[i]);
    return;
  }
  /* PyTorch starts the buffer at the first gradient: clearing it first gives that for any prior
   * content, and keeps the loops free of a per-element select */
  if (a->step <= 1) memset(m, 0, n * sizeof(*m));
  if (a->h.nesterov) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
      float gi = gs * g[i] + wd * w[i];
      float mi = mu * m[i] + gi;
      m[i] = mi;
      w[i] -= lr * (gi + mu * mi);
    }
  } else {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
      float gi = gs * g[i] + wd * w[i];
      float mi = mu * m[i] + gi;
      m[i] = mi;
      w[i] -= lr * mi;
    }
  }
}

_tsr_optim_cuda_fn _tsr_sgd_cuda;

static const struct _tsr_optim_hyper hyper[] = {
    TSR_HYPER("lr", TSR_HYPER_POSITIVE, lr, 0.01f),
    TSR_HYPER("weight_decay", TSR_HYPER_NONNEG, weight_decay, 0.0f),
    TSR_HYPER("momentum", TSR_HYPER_PROB, momentum, 0.9f),
    TSR_HYPER("nesterov", TSR_HYPER_BOOL, nesterov, 0),
    TSR_LARC_HYPERS,
    {.key = NULL},
};

const struct _tsr_optim_ops _tsr_optim_sgd[] = {
    {.name = "sgd",
     .kind = TSR_OPTIM_SGD,
     .hyper = hyper,
     .nstate = 1,
     .state = {"moment0"},
     .cpu = sgd,
     TSR_OPTIM_CUDA(_tsr_sgd_cuda),
     .larc_cpu = sgd},
    {.name = NULL},
};

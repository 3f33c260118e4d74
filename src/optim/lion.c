/* Lion (Chen et al. 2023, arXiv 2302.06675) with the semantics of the PyTorch reference (lion-pytorch):
 * decoupled weight decay first, then p -= lr * sign(b1 m + (1 - b1) g) with sign(0) = 0, then
 * m = b2 m + (1 - b2) g. One state tensor, the momentum ("moment0" in checkpoints, as SGD's). The
 * update is also split in two halves for the sign reductions of Lion Cub (src/comm/sign.c): the
 * direction (sign into the gradient buffer, momentum advanced, per rank) and its application after
 * the ranks combined their directions. Both halves use the fused kernel's expressions, so a vote of
 * identical directions gives the 1-rank result bitwise. The CUDA kernels (fused and both halves) are
 * in lion_cuda.cu. */
#include "optim/optim.h"

static inline float sign_of(float c) { return (float)((c > 0) - (c < 0)); }

static void lion(const struct _tsr_optim_args *a, size_t n, float *restrict w, const float *restrict g,
                 float *const *state) {
  float *restrict m = state[0];
  const float b1 = a->h.beta1, b2 = a->h.beta2, lr = a->h.lr, gs = a->grad_scale;
  const float decay = 1.0f - lr * a->h.weight_decay;
  for (size_t i = 0; i < n; i++) {
    float gi = gs * g[i];
    w[i] = decay * w[i] - lr * sign_of(b1 * m[i] + (1.0f - b1) * gi);
    m[i] = b2 * m[i] + (1.0f - b2) * gi;
  }
}

static void lion_direction(const struct _tsr_optim_args *a, size_t n, float *restrict g, float *const *state) {
  float *restrict m = state[0];
  const float b1 = a->h.beta1, b2 = a->h.beta2, gs = a->grad_scale;
  for (size_t i = 0; i < n; i++) {
    float gi = gs * g[i];
    g[i] = sign_of(b1 * m[i] + (1.0f - b1) * gi);
    m[i] = b2 * m[i] + (1.0f - b2) * gi;
  }
}

static void lion_apply(const struct _tsr_optim_args *a, size_t n, float *restrict w, const float *restrict d) {
  const float lr = a->h.lr, decay = 1.0f - lr * a->h.weight_decay;
  for (size_t i = 0; i < n; i++) w[i] = decay * w[i] - lr * d[i];
}

_tsr_optim_cuda_fn _tsr_lion_cuda;
_tsr_optim_dir_cuda_fn _tsr_lion_direction_cuda;
_tsr_optim_apply_cuda_fn _tsr_lion_apply_cuda;

static const struct _tsr_optim_hyper hyper[] = {
    TSR_HYPER("lr", TSR_HYPER_POSITIVE, lr, 1e-4f),
    TSR_HYPER("weight_decay", TSR_HYPER_NONNEG, weight_decay, 0.0f),
    TSR_HYPER_PAIR("betas", beta1, beta2, 0.9f, 0.99f),
    {"momentum_sync_every",
     TSR_HYPER_NONNEG,
     {"momentum_sync_every", NULL},
     {offsetof(tsr_optim_spec, extra[TSR_HYPER_SYNC_EVERY]), 0},
     {0.0f, 0.0f}},
    {"momentum_sync_layers",
     TSR_HYPER_NAMES,
     {"momentum_sync_layers", NULL},
     {offsetof(tsr_optim_spec, momentum_sync_layers), 0},
     {0.0f, 0.0f}},
    {.key = NULL},
};

const struct _tsr_optim_ops _tsr_optim_lion[] = {
    {.name = "lion",
     .kind = TSR_OPTIM_LION,
     .hyper = hyper,
     .nstate = 1,
     .state = {"moment0"},
     .cpu = lion,
     .direction = lion_direction,
     .apply = lion_apply,
     TSR_OPTIM_CUDA(_tsr_lion_cuda),
     TSR_OPTIM_SIGN_CUDA(_tsr_lion_direction_cuda, _tsr_lion_apply_cuda)},
    {.name = NULL},
};

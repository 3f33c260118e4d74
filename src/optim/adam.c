/* Adam (torch.optim.Adam: L2 weight decay added to the gradient) and AdamW (torch.optim.AdamW:
 * decoupled weight decay), one kernel for both. Two state tensors, the first and second moments
 * ("moment0" and "moment1" in checkpoints, as before optimizers were entries). The CUDA kernel is
 * in adam_cuda.cu. */
#include <math.h>

#include "optim/optim.h"

/* `l2` is the L2 coefficient added to the gradient (Adam), `decay` the factor the weights are
 * multiplied by first (AdamW). Note: gcc vectorises this loop only under -fno-math-errno (sqrtf may
 * set errno otherwise), which makes it about 3x faster. */
static void adam_update(const struct _tsr_optim_args *a, float l2, float decay, size_t n, float *restrict w,
                        const float *restrict g, float *restrict m, float *restrict v) {
  const float b1 = a->h.beta1, b2 = a->h.beta2, gs = a->grad_scale, eps = a->h.eps;
  const double t = (double)(a->step < 1 ? 1 : a->step);
  const float step_size = (float)(a->h.lr / (1.0 - pow(a->h.beta1, t)));
  const float inv_bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow(a->h.beta2, t)));
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    float wi = decay * w[i];
    float gi = gs * g[i] + l2 * wi;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi - step_size * mi / (sqrtf(vi) * inv_bc2_sqrt + eps);
  }
}

static void adam(const struct _tsr_optim_args *a, size_t n, float *w, const float *g, float *const *state) {
  adam_update(a, a->h.weight_decay, 1.0f, n, w, g, state[0], state[1]);
}

static void adamw(const struct _tsr_optim_args *a, size_t n, float *w, const float *g, float *const *state) {
  adam_update(a, 0.0f, 1.0f - a->h.lr * a->h.weight_decay, n, w, g, state[0], state[1]);
}

_tsr_optim_cuda_fn _tsr_adam_cuda, _tsr_adamw_cuda;

static const struct _tsr_optim_hyper adam_hyper[] = {
    TSR_HYPER("lr", TSR_HYPER_POSITIVE, lr, 1e-3f),
    TSR_HYPER("weight_decay", TSR_HYPER_NONNEG, weight_decay, 0.0f),
    TSR_HYPER_PAIR("betas", beta1, beta2, 0.9f, 0.999f),
    TSR_HYPER("eps", TSR_HYPER_POSITIVE, eps, 1e-8f),
    TSR_LARC_HYPERS,
    {.key = NULL},
};
static const struct _tsr_optim_hyper adamw_hyper[] = {
    TSR_HYPER("lr", TSR_HYPER_POSITIVE, lr, 1e-3f),
    TSR_HYPER("weight_decay", TSR_HYPER_NONNEG, weight_decay, 0.01f), /* PyTorch's AdamW default */
    TSR_HYPER_PAIR("betas", beta1, beta2, 0.9f, 0.999f),
    TSR_HYPER("eps", TSR_HYPER_POSITIVE, eps, 1e-8f),
    TSR_LARC_HYPERS,
    {.key = NULL},
};

const struct _tsr_optim_ops _tsr_optim_adam[] = {
    {.name = "adam",
     .kind = TSR_OPTIM_ADAM,
     .hyper = adam_hyper,
     .nstate = 2,
     .state = {"moment0", "moment1"},
     .cpu = adam,
     TSR_OPTIM_CUDA(_tsr_adam_cuda),
     .larc_cpu = adam},
    {.name = "adamw",
     .kind = TSR_OPTIM_ADAMW,
     .hyper = adamw_hyper,
     .nstate = 2,
     .state = {"moment0", "moment1"},
     .cpu = adamw,
     TSR_OPTIM_CUDA(_tsr_adamw_cuda),
     .larc_cpu = adam}, /* apex's LARC turns AdamW's decay into a gradient term */
    {.name = NULL},
};

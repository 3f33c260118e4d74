/* LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
 * Algorithm 2 with bias correction and phi the identity): Adam's direction plus decoupled weight
 * decay, r = m_hat / (sqrt(v_hat) + eps) + wd w, scaled per tensor by the trust ratio |w| / |r|
 * (1 when either norm is 0): w -= lr |w| / |r| r. No global gradient-norm clipping (apex's
 * FusedLAMB adds one; the paper's algorithm has none). The norms are sums over the task's tensor,
 * in double, so data parallelism needs no extra communication. Two state tensors, the moments
 * ("moment0", "moment1", as Adam's). CPU only: GPU builds run its updates on CPU workers. */
#include <math.h>

#include "optim/optim.h"

/* The bias-corrected Adam direction plus decay for element i, from the updated moments: the same
 * expression in both passes, so the second applies exactly the r whose norm the first took. */
static inline float direction(float mi, float vi, float wi, float c1, float c2, float eps, float wd) {
  return mi * c1 / (sqrtf(vi * c2) + eps) + wd * wi;
}

static void lamb(const struct _tsr_optim_args *a, size_t n, float *restrict w, const float *restrict g,
                 float *const *state) {
  float *restrict m = state[0], *restrict v = state[1];
  const float b1 = a->h.beta1, b2 = a->h.beta2, gs = a->grad_scale, eps = a->h.eps, wd = a->h.weight_decay;
  const double t = (double)(a->step < 1 ? 1 : a->step);
  const float c1 = (float)(1.0 / (1.0 - pow(b1, t))), c2 = (float)(1.0 / (1.0 - pow(b2, t)));
  double ww = 0, rr = 0;
  for (size_t i = 0; i < n; i++) {
    float gi = gs * g[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    double r = direction(m[i], v[i], w[i], c1, c2, eps, wd);
    ww += (double)w[i] * w[i];
    rr += r * r;
  }
  const float step = (float)(a->h.lr * (ww > 0 && rr > 0 ? sqrt(ww) / sqrt(rr) : 1.0));
#pragma omp simd
  for (size_t i = 0; i < n; i++) w[i] -= step * direction(m[i], v[i], w[i], c1, c2, eps, wd);
}

static const struct _tsr_optim_hyper hyper[] = {
    TSR_HYPER("lr", TSR_HYPER_POSITIVE, lr, 1e-3f),
    TSR_HYPER("weight_decay", TSR_HYPER_NONNEG, weight_decay, 0.01f),
    TSR_HYPER_PAIR("betas", beta1, beta2, 0.9f, 0.999f),
    TSR_HYPER("eps", TSR_HYPER_POSITIVE, eps, 1e-6f),
    {.key = NULL},
};

const struct _tsr_optim_ops _tsr_optim_lamb[] = {
    {.name = "lamb",
     .kind = TSR_OPTIM_REGISTERED,
     .hyper = hyper,
     .nstate = 2,
     .state = {"moment0", "moment1"},
     .cpu = lamb},
    {.name = NULL},
};

/* Losses on CUDA, the twin of codelets/loss.c: double sums in two fixed-order passes (per-block
 * partial sums in scratch, then one block adds them in order). */
#include <math.h>

#include "cuda_util.h"

enum { LOSS_BLOCKS = 256 };

__global__ static void loss_elem_k(_tsr_loss_desc d, size_t len, const float *yhat, const float *y, float *g,
                                   double *part) {
  double sum = 0, unused = 0;
  for (size_t i = blockIdx.x * (size_t)TSR_THREADS + threadIdx.x; i < len; i += (size_t)LOSS_BLOCKS * TSR_THREADS) {
    double e = (double)yhat[i] - y[i], a = fabs(e);
    if (d.kind == TSR_L_MSE) sum += e * e, g[i] = (float)(2.0 * d.scale * e);
    else if (d.kind == TSR_L_L1) sum += a, g[i] = e > 0 ? (float)d.scale : e < 0 ? (float)-d.scale : 0.0f;
    else if (a < d.delta) sum += 0.5 * e * e, g[i] = (float)(d.scale * e);
    else sum += d.delta * (a - 0.5 * d.delta), g[i] = (float)(e > 0 ? d.scale * d.delta : -d.scale * d.delta);
  }
  _tsr_block_sum2(&sum, &unused);
  if (threadIdx.x == 0) part[blockIdx.x] = sum;
}

/* softmax cross-entropy over channels: one thread per (sample, position) */
__global__ static void loss_ce_k(_tsr_loss_desc d, int nv, const float *z, const float *t, float *g, double *part) {
  const size_t hw = (size_t)d.h * d.w, npos = (size_t)nv * hw;
  double sum = 0, unused = 0;
  for (size_t p = blockIdx.x * (size_t)TSR_THREADS + threadIdx.x; p < npos; p += (size_t)LOSS_BLOCKS * TSR_THREADS) {
    size_t base = (p / hw) * d.c * hw + p % hw;
    float mx = -INFINITY, se = 0, ts = 0;
    for (int k = 0; k < d.c; k++) mx = fmaxf(mx, z[base + k * hw]);
    for (int k = 0; k < d.c; k++) se += expf(z[base + k * hw] - mx), ts += t[base + k * hw];
    float lse = logf(se);
    for (int k = 0; k < d.c; k++) {
      size_t i = base + k * hw;
      float logp = (z[i] - mx) - lse;
      sum -= (double)t[i] * logp;
      g[i] = (float)(d.scale * ((double)expf(logp) * ts - t[i]));
    }
  }
  _tsr_block_sum2(&sum, &unused);
  if (threadIdx.x == 0) part[blockIdx.x] = sum;
}

__global__ static void loss_final_k(const double *part, double scale, double *loss) {
  double s = part[threadIdx.x], unused = 0;
  _tsr_block_sum2(&s, &unused);
  if (threadIdx.x == 0) *loss = scale * s;
}

extern "C" int _tsr_loss_cuda(int worker, cudaStream_t s, const struct _tsr_loss_desc *d, const float *yhat,
                              const float *y, float *dyhat, double *loss) {
  size_t per = (size_t)d->c * d->h * d->w;
  int nv = d->nvalid < 0 ? 0 : d->nvalid > d->n ? d->n : d->nvalid;
  double *part = (double *)_tsr_cuda_scratch(worker, LOSS_BLOCKS * sizeof(double), s);
  if (!part) return -1;
  if (d->kind == TSR_L_SOFTMAX_CE) loss_ce_k<<<LOSS_BLOCKS, TSR_THREADS, 0, s>>>(*d, nv, yhat, y, dyhat, part);
  else loss_elem_k<<<LOSS_BLOCKS, TSR_THREADS, 0, s>>>(*d, nv * per, yhat, y, dyhat, part);
  TSR_CUDA_LAUNCHED("loss kernel");
  static_assert((int)LOSS_BLOCKS == (int)TSR_THREADS, "the final pass has one thread per partial sum");
  loss_final_k<<<1, TSR_THREADS, 0, s>>>(part, d->scale, loss);
  TSR_CUDA_LAUNCHED("loss reduction kernel");
  if (nv < d->n) TSR_CUDA_OK(cudaMemsetAsync(dyhat + nv * per, 0, (d->n - nv) * per * sizeof(float), s));
  return 0;
}

/* Batch normalisation on CUDA, the twin of codelets/batchnorm.c: statistics across slices in
 * double (one block per channel, fixed reduction order), normalisation, and the backward pass. */
#include <math.h>

#include "cuda_util.h"

__global__ static void bn_stats_k(_tsr_bn_desc d, const float *x, const float *stat, const float *dy, double *acc) {
  const int ch = blockIdx.x;
  const size_t hw = (size_t)d.h * d.w, tot = (size_t)d.n * hw;
  const double mean = stat ? stat[ch] : 0;
  double s = 0, q = 0;
  for (size_t j = threadIdx.x; j < tot; j += TSR_THREADS) {
    size_t off = ((j / hw) * d.c + ch) * hw + j % hw;
    double v = x[off];
    if (dy) {
      double g = dy[off];
      s += g;
      q += g * (v - mean);
    } else {
      s += v;
      q += v * v;
    }
  }
  _tsr_block_sum2(&s, &q);
  if (threadIdx.x == 0) { /* d.overwrite: the first slice writes acc */
    acc[ch] = (d.overwrite ? 0.0 : acc[ch]) + s;
    acc[d.c + ch] = (d.overwrite ? 0.0 : acc[d.c + ch]) + (dy ? q * stat[d.c + ch] : q);
  }
}

__global__ static void bn_finalize_k(_tsr_bn_desc d, const double *acc, float *stat, float *rm, float *rv) {
  int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= d.c) return;
  const double m = (double)d.total * d.h * d.w, unbias = m > 1 ? m / (m - 1) : 1.0, mom = d.momentum;
  double mean = acc[ch] / m, var = acc[d.c + ch] / m - mean * mean;
  if (var < 0) var = 0;
  stat[ch] = (float)mean;
  stat[d.c + ch] = (float)(1.0 / sqrt(var + d.eps));
  rm[ch] = (float)((1 - mom) * rm[ch] + mom * mean);
  rv[ch] = (float)((1 - mom) * rv[ch] + mom * var * unbias);
}

__global__ static void bn_elem_k(_tsr_bn_desc d, int op, const float *x, const float *f0, const float *f1,
                                 const float *f2, const float *f3, const double *acc, float *y) {
  const size_t hw = (size_t)d.h * d.w, len = (size_t)d.n * d.c * hw;
  const double m = (double)d.total * hw;
  TSR_GRID_LOOP(i, len) {
    int ch = (int)((i / hw) % d.c);
    if (op == TSR_BN_FWD) {
      float a = f1[ch] * f0[d.c + ch];
      y[i] = a * (x[i] - f0[ch]) + f2[ch];
    } else if (op == TSR_BN_FWD_EVAL) {
      float a = (float)(f2[ch] / sqrt((double)f1[ch] + d.eps));
      y[i] = a * (x[i] - f0[ch]) + f3[ch];
    } else { /* TSR_BN_BWD_DATA: dx = k dy - k mean(dy) - k invstd mean(dy xhat) (x - mean) */
      double invstd = f0[d.c + ch], k = f1[ch] * invstd;
      float shift = (float)(k * acc[ch] / m), slope = (float)(k * invstd * acc[d.c + ch] / m);
      float v = (float)k * f2[i] - shift - slope * (x[i] - f0[ch]);
      y[i] = d.dx_add ? y[i] + v : v; /* dx holds other consumers' contributions */
    }
  }
}

/* overwrite: written, not added into (the step's only writer) */
__global__ static void bn_params_k(int c, int overwrite, const double *acc, float *dgamma, float *dbeta) {
  int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  dgamma[ch] = (float)acc[c + ch] + (overwrite ? 0.0f : dgamma[ch]);
  dbeta[ch] = (float)acc[ch] + (overwrite ? 0.0f : dbeta[ch]);
}

extern "C" int _tsr_bn_cuda(cudaStream_t s, const struct _tsr_bn_desc *d, int op, const float *x, const float *f0,
                            const float *f1, const float *f2, const float *f3, double *acc, float *out0,
                            float *out1) {
  size_t len = (size_t)d->n * d->c * d->h * d->w;
  switch (op) {
  case TSR_BN_STATS: bn_stats_k<<<d->c, TSR_THREADS, 0, s>>>(*d, x, NULL, NULL, acc); break;
  case TSR_BN_BWD_STATS: bn_stats_k<<<d->c, TSR_THREADS, 0, s>>>(*d, x, f0, f1, acc); break;
  case TSR_BN_BWD_PARAMS: bn_params_k<<<(d->c + 63) / 64, 64, 0, s>>>(d->c, d->overwrite, acc, out0, out1); break;
  default: bn_elem_k<<<_tsr_blocks(len), TSR_THREADS, 0, s>>>(*d, op, x, f0, f1, f2, f3, acc, out0); break;
  }
  TSR_CUDA_LAUNCHED("batch-norm kernel");
  return 0;
}

extern "C" int _tsr_bn_finalize_cuda(cudaStream_t s, const struct _tsr_bn_desc *d, const double *acc, float *stat,
                                     float *running_mean, float *running_var) {
  bn_finalize_k<<<(d->c + 63) / 64, 64, 0, s>>>(*d, acc, stat, running_mean, running_var);
  TSR_CUDA_LAUNCHED("batch-norm finalize kernel");
  return 0;
}

/* CUDA kernels where no library call does the job, each the twin of a CPU kernel: batch-norm
 * statistics across slices (double accumulation, fixed reduction order per channel), dropout with
 * the CPU's counter hash (bitwise the same masks), channel concat/split and sums, losses (double,
 * two-pass fixed-order reduction) and the optimizer updates (PyTorch semantics, optionally gated by
 * the loss scaler), and the loss scaler's scaling and overflow check. */
#include <math.h>
#include <stdio.h>

#include "cuda_util.h"


enum { THREADS = 256 };
static unsigned blocks(size_t n) {
  size_t b = (n + THREADS - 1) / THREADS;
  return (unsigned)(b > 8192 ? 8192 : b ? b : 1);
}
#define GRID_LOOP(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* Block-wide sum of two doubles in a fixed order (tree over shared memory). */
__device__ static void block_sum2(double *a, double *b) {
  __shared__ double sa[THREADS], sb[THREADS];
  sa[threadIdx.x] = *a;
  sb[threadIdx.x] = *b;
  __syncthreads();
  for (int w = THREADS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) {
      sa[threadIdx.x] += sa[threadIdx.x + w];
      sb[threadIdx.x] += sb[threadIdx.x + w];
    }
    __syncthreads();
  }
  *a = sa[0];
  *b = sb[0];
}

/* ---- batch normalisation: one block per channel for the reductions ---- */

__global__ static void bn_stats_k(tsr_bn_desc d, const float *x, const float *stat, const float *dy, double *acc) {
  const int ch = blockIdx.x;
  const size_t hw = (size_t)d.h * d.w, tot = (size_t)d.n * hw;
  const double mean = stat ? stat[ch] : 0;
  double s = 0, q = 0;
  for (size_t j = threadIdx.x; j < tot; j += THREADS) {
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
  block_sum2(&s, &q);
  if (threadIdx.x == 0) {
    acc[ch] += s;
    acc[d.c + ch] += dy ? q * stat[d.c + ch] : q;
  }
}

__global__ static void bn_finalize_k(tsr_bn_desc d, const double *acc, float *stat, float *rm, float *rv) {
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

__global__ static void bn_elem_k(tsr_bn_desc d, int op, const float *x, const float *f0, const float *f1,
                                 const float *f2, const float *f3, const double *acc, float *y) {
  const size_t hw = (size_t)d.h * d.w, len = (size_t)d.n * d.c * hw;
  const double m = (double)d.total * hw;
  GRID_LOOP(i, len) {
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
      y[i] = (float)k * f2[i] - shift - slope * (x[i] - f0[ch]);
    }
  }
}

__global__ static void bn_params_k(int c, const double *acc, float *dgamma, float *dbeta) {
  int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  dgamma[ch] += (float)acc[c + ch];
  dbeta[ch] += (float)acc[ch];
}

extern "C" int _tsr_bn_cuda(cudaStream_t s, const struct tsr_bn_desc *d, int op, const float *x, const float *f0,
                            const float *f1, const float *f2, const float *f3, double *acc, float *out0,
                            float *out1) {
  size_t len = (size_t)d->n * d->c * d->h * d->w;
  switch (op) {
  case TSR_BN_STATS: bn_stats_k<<<d->c, THREADS, 0, s>>>(*d, x, NULL, NULL, acc); break;
  case TSR_BN_BWD_STATS: bn_stats_k<<<d->c, THREADS, 0, s>>>(*d, x, f0, f1, acc); break;
  case TSR_BN_BWD_PARAMS: bn_params_k<<<(d->c + 63) / 64, 64, 0, s>>>(d->c, acc, out0, out1); break;
  default: bn_elem_k<<<blocks(len), THREADS, 0, s>>>(*d, op, x, f0, f1, f2, f3, acc, out0); break;
  }
  LAUNCHED("batch-norm kernel");
  return 0;
}

extern "C" int _tsr_bn_finalize_cuda(cudaStream_t s, const struct tsr_bn_desc *d, const double *acc, float *stat,
                                     float *running_mean, float *running_var) {
  bn_finalize_k<<<(d->c + 63) / 64, 64, 0, s>>>(*d, acc, stat, running_mean, running_var);
  LAUNCHED("batch-norm finalize kernel");
  return 0;
}

/* ---- dropout: the hash of codelets/dropout.c ---- */

__device__ static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static uint64_t mix64_host(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ static void dropout_k(size_t len, size_t hw, int spatial, uint64_t key, uint64_t thr, float scale,
                                 const float *in, float *out) {
  GRID_LOOP(i, len) {
    uint64_t idx = spatial ? i / hw : i;
    int keep = (mix64(key + (idx + 1) * 0x9E3779B97F4A7C15ull) >> 32) >= thr;
    out[i] = in[i] * (keep ? scale : 0.0f);
  }
}

extern "C" int _tsr_dropout_cuda(cudaStream_t s, const struct tsr_dropout_desc *d, uint64_t seed, const float *in,
                                 float *out) {
  size_t hw = (size_t)d->h * d->w, len = (size_t)d->n * d->c * hw;
  if (d->p == 0) {
    if (in != out) CUDA_OK(cudaMemcpyAsync(out, in, len * sizeof(float), cudaMemcpyDeviceToDevice, s));
    return 0;
  }
  uint64_t thr = (uint64_t)((double)d->p * 4294967296.0);
  float scale = (float)(1.0 / (1.0 - (double)d->p));
  dropout_k<<<blocks(len), THREADS, 0, s>>>(len, hw, d->spatial, mix64_host(seed), thr, scale, in, out);
  LAUNCHED("dropout kernel");
  return 0;
}

/* ---- concat / split (strided 2-D copies) and sums ---- */

extern "C" int _tsr_concat_cuda(cudaStream_t s, const struct tsr_concat_desc *d, int bwd, float *const *parts,
                                float *whole) {
  size_t hw = (size_t)d->h * d->w, row = 0, off = 0;
  for (int i = 0; i < d->k; i++) row += (size_t)d->c[i] * hw;
  for (int i = 0; i < d->k; i++) {
    size_t len = (size_t)d->c[i] * hw * sizeof(float);
    float *w = whole + off;
    if (bwd)
      CUDA_OK(cudaMemcpy2DAsync(parts[i], len, w, row * sizeof(float), len, d->n, cudaMemcpyDeviceToDevice, s));
    else
      CUDA_OK(cudaMemcpy2DAsync(w, row * sizeof(float), parts[i], len, len, d->n, cudaMemcpyDeviceToDevice, s));
    off += (size_t)d->c[i] * hw;
  }
  return 0;
}

struct ptrs {
  const float *p[TSR_MAX_CONCAT];
};

__global__ static void add_k(size_t len, int k, ptrs xs, float *y) {
  GRID_LOOP(i, len) {
    float v = xs.p[0][i];
    for (int j = 1; j < k; j++) v += xs.p[j][i];
    y[i] = v;
  }
}

extern "C" int _tsr_add_cuda(cudaStream_t s, size_t len, int k, const float *const *xs, float *y) {
  /* up to 32 inputs per launch; later launches read y back as their first input */
  ptrs p;
  for (int done = 0, first = 1; done < k; first = 0) {
    int slots = first ? TSR_MAX_CONCAT : TSR_MAX_CONCAT - 1, m = k - done < slots ? k - done : slots, j = 0;
    if (!first) p.p[j++] = y;
    for (int q = 0; q < m; q++) p.p[j++] = xs[done + q];
    add_k<<<blocks(len), THREADS, 0, s>>>(len, j, p, y);
    LAUNCHED("add kernel");
    done += m;
  }
  return 0;
}

/* ---- losses: per-block partial sums in scratch, then one block adds them in order ---- */

enum { LOSS_BLOCKS = 256 };

__global__ static void loss_elem_k(tsr_loss_desc d, size_t len, const float *yhat, const float *y, float *g,
                                   double *part) {
  double sum = 0, unused = 0;
  for (size_t i = blockIdx.x * (size_t)THREADS + threadIdx.x; i < len; i += (size_t)LOSS_BLOCKS * THREADS) {
    double e = (double)yhat[i] - y[i], a = fabs(e);
    if (d.kind == TSR_L_MSE) sum += e * e, g[i] = (float)(2.0 * d.scale * e);
    else if (d.kind == TSR_L_L1) sum += a, g[i] = e > 0 ? (float)d.scale : e < 0 ? (float)-d.scale : 0.0f;
    else if (a < d.delta) sum += 0.5 * e * e, g[i] = (float)(d.scale * e);
    else sum += d.delta * (a - 0.5 * d.delta), g[i] = (float)(e > 0 ? d.scale * d.delta : -d.scale * d.delta);
  }
  block_sum2(&sum, &unused);
  if (threadIdx.x == 0) part[blockIdx.x] = sum;
}

/* softmax cross-entropy over channels: one thread per (sample, position) */
__global__ static void loss_ce_k(tsr_loss_desc d, int nv, const float *z, const float *t, float *g, double *part) {
  const size_t hw = (size_t)d.h * d.w, npos = (size_t)nv * hw;
  double sum = 0, unused = 0;
  for (size_t p = blockIdx.x * (size_t)THREADS + threadIdx.x; p < npos; p += (size_t)LOSS_BLOCKS * THREADS) {
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
  block_sum2(&sum, &unused);
  if (threadIdx.x == 0) part[blockIdx.x] = sum;
}

__global__ static void loss_final_k(const double *part, double scale, double *loss) {
  double s = part[threadIdx.x], unused = 0;
  block_sum2(&s, &unused);
  if (threadIdx.x == 0) *loss = scale * s;
}

extern "C" int _tsr_loss_cuda(int worker, cudaStream_t s, const struct tsr_loss_desc *d, const float *yhat,
                              const float *y, float *dyhat, double *loss) {
  size_t per = (size_t)d->c * d->h * d->w;
  int nv = d->nvalid < 0 ? 0 : d->nvalid > d->n ? d->n : d->nvalid;
  double *part = (double *)_tsr_cuda_scratch(worker, LOSS_BLOCKS * sizeof(double), s);
  if (!part) return -1;
  if (d->kind == TSR_L_SOFTMAX_CE) loss_ce_k<<<LOSS_BLOCKS, THREADS, 0, s>>>(*d, nv, yhat, y, dyhat, part);
  else loss_elem_k<<<LOSS_BLOCKS, THREADS, 0, s>>>(*d, nv * per, yhat, y, dyhat, part);
  LAUNCHED("loss kernel");
  static_assert((int)LOSS_BLOCKS == (int)THREADS, "the final pass has one thread per partial sum");
  loss_final_k<<<1, THREADS, 0, s>>>(part, d->scale, loss);
  LAUNCHED("loss reduction kernel");
  if (nv < d->n) CUDA_OK(cudaMemsetAsync(dyhat + nv * per, 0, (d->n - nv) * per * sizeof(float), s));
  return 0;
}

/* ---- optimizers (codelets/optim.c) ----
 * The coefficients of a step: from the host for a plain update; for one gated by the loss scaler
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
  GRID_LOOP(i, n) {
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
  GRID_LOOP(i, n) {
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
    sgd_k<<<blocks(n), THREADS, 0, s>>>(*a, host, gate, n, w, g, m);
  } else {
    float l2 = a->kind == TSR_OPT_ADAM ? a->weight_decay : 0.0f;
    float decay = a->kind == TSR_OPT_ADAMW ? 1.0f - a->lr * a->weight_decay : 1.0f;
    adam_k<<<blocks(n), THREADS, 0, s>>>(*a, host, gate, l2, decay, n, w, g, m, v);
  }
  LAUNCHED("optimizer kernel");
  return 0;
}

/* ---- loss scaling (src/optim/loss_scale.c): the scale and the overflow flag are read and written
 * in the scaler's state where StarPU put it, in device memory ---- */

__global__ static void scale_k(size_t n, float fixed, const _tsr_scale_state *state, float *x) {
  const float s = state ? (float)state->scale : fixed;
  GRID_LOOP(i, n) x[i] *= s;
}

__global__ static void overflow_k(size_t n, const float *x, _tsr_scale_state *state) {
  GRID_LOOP(i, n) if (!isfinite(x[i])) state->overflow = 1; /* racing writers all write 1 */
}

extern "C" int _tsr_scale_grad_cuda(cudaStream_t s, size_t n, float *x, const struct _tsr_scale_state *state,
                                    double fixed) {
  scale_k<<<blocks(n), THREADS, 0, s>>>(n, (float)fixed, state, x);
  LAUNCHED("loss scale kernel");
  return 0;
}

extern "C" int _tsr_scale_check_cuda(cudaStream_t s, size_t n, const float *x, struct _tsr_scale_state *state) {
  overflow_k<<<blocks(n), THREADS, 0, s>>>(n, x, state);
  LAUNCHED("overflow check kernel");
  return 0;
}

extern "C" int _tsr_zero_bytes_cuda(void *x, size_t bytes, cudaStream_t s) {
  CUDA_OK(cudaMemsetAsync(x, 0, bytes, s));
  return 0;
}

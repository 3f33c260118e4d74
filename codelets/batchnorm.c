/* Batch normalisation whose statistics span the whole batch while slices run as separate tasks
 * (PyTorch BatchNorm2d training semantics), optionally with the following relu fused, on plain or
 * blocked activations. oneDNN computes statistics per call, and a call sees one slice only, hence
 * our own loops. Layouts of the [2c] buffers are planar: acc = [sum[c] |
 * sumsq[c]] (forward) or [sum dy[c] | sum dy*xhat[c]] (backward), stat = [mean[c] | invstd[c]].
 * Every per-channel loop runs over h*w contiguous values and is marked for SIMD reduction. */
#include <math.h>
#include <string.h>

#include "codelets.h"
#include "convert.h"
#include "cuda_util.h"
#include "kernel_util.h"

/* ---- raw kernels ----
 * Plain NCHW runs per (sample, channel) over h*w contiguous values; the blocked layout nChw{B}c
 * per (sample, channel block) over h*w rows of B channels, with per-lane partial sums. Padding
 * lanes get coefficients 0, so their outputs stay 0. relu: y = v > 0 ? v : v * 0 and the
 * gradient's mask dy * (y > 0), bit for bit what the relu layer's oneDNN kernels compute. */

enum { MAXB = 16 }; /* the widest channel block */

static float relu_f(float v) { return v > 0 ? v : v * 0.f; }
static float relu_mask(float g, float y) { return y > 0 ? g : g * 0.f; }

static size_t plane(const struct _tsr_bn_desc *d) { return (size_t)d->h * d->w; }
static int nblocks(const struct _tsr_bn_desc *d) { return (d->c + d->blk - 1) / d->blk; }

/* Channels of block cb: lanes [0, valid) are real. */
static int lanes(const struct _tsr_bn_desc *d, int cb) {
  int v = d->c - cb * d->blk;
  return v < d->blk ? v : d->blk;
}

/* ---- bf16 storage ----
 * x and y may be stored in bf16 (d->x_bf16, d->y_bf16): each row a loop below runs over (h*w values
 * of a channel, or h*w rows of a channel block) is loaded into float32 in per-thread scratch, which
 * stays in cache, and y's row is rounded to bf16 (nearest even) after it is computed. The arithmetic
 * is the float32 one on the same values, in the same order. */
enum { SCRATCH_X = 0, SCRATCH_Y = 1 };

/* Elements [off, off + len) of x as float32: x's own, or converted from bf16 into scratch slot. */
static inline const float *row_in(const float *x, int bf, size_t off, size_t len, int slot) {
  if (!bf) return x + off;
  float *t = _tsr_scratch(slot, len * sizeof *t);
  _tsr_bf16_to_f32_cpu((const uint16_t *)(const void *)x + off, t, len);
  return t;
}

/* Where a row of y is computed: y itself, or scratch that row_out_done rounds into bf16 y. */
static inline float *row_out(float *y, int bf, size_t off, size_t len) {
  return bf ? _tsr_scratch(SCRATCH_Y, len * sizeof(float)) : y + off;
}

static inline void row_out_done(float *y, int bf, size_t off, size_t len, const float *t) {
  if (bf) _tsr_f32_to_bf16_cpu(t, (uint16_t *)(void *)y + off, len);
}

#define BLOCKED static inline __attribute__((always_inline)) void
BLOCKED stats_blocked_b(int B, const struct _tsr_bn_desc *d, const float *x, double *acc) {
  const size_t hw = plane(d);
  const int nb = nblocks(d), c = d->c;
  for (int i = 0; i < d->n; i++)
    for (int cb = 0; cb < nb; cb++) {
      const float *restrict xp = row_in(x, d->x_bf16, ((size_t)i * nb + cb) * hw * B, hw * B, SCRATCH_X);
      double s[MAXB] = {0}, ss[MAXB] = {0};
      for (size_t k = 0; k < hw; k++) {
        TSR_SIMD(omp simd)
        for (int j = 0; j < B; j++) {
          double v = xp[k * B + j];
          s[j] += v;
          ss[j] += v * v;
        }
      }
      for (int j = 0; j < lanes(d, cb); j++) acc[cb * B + j] += s[j], acc[c + cb * B + j] += ss[j];
    }
}

static inline void normalise_blocked_b(int B, const struct _tsr_bn_desc *d, const float *x, const float *mean,
                                const float *spread, int eval, const float *gamma, const float *beta, float *y);
static inline void bwd_stats_blocked_b(int B, const struct _tsr_bn_desc *d, const float *x, const float *stat,
                                const float *dy, const float *y, double *acc);
static inline void bwd_data_blocked_b(int B, const struct _tsr_bn_desc *d, const float *x, const float *stat,
                               const float *gamma, const double *acc, const float *dy, const float *y, float *dx);

/* The blocked kernels with the block as a constant, so that the lane loops unroll into registers;
 * nChw16c (chosen on AVX-512 CPUs) in AVX-512 code where the CPU has it. Each lane sums over the
 * pixels in order whatever the vector width. */
#if defined(__GNUC__) && defined(__x86_64__)
#define AVX512 __attribute__((target("avx512f")))
static int has_avx512(void) { return __builtin_cpu_supports("avx512f"); }
#else
#define AVX512
static int has_avx512(void) { return 0; }
#endif

AVX512 static void stats_16(const struct _tsr_bn_desc *d, const float *x, double *acc) {
  stats_blocked_b(16, d, x, acc);
}
AVX512 static void normalise_16(const struct _tsr_bn_desc *d, const float *x, const float *mean, const float *spread,
                                int eval, const float *gamma, const float *beta, float *y) {
  normalise_blocked_b(16, d, x, mean, spread, eval, gamma, beta, y);
}
AVX512 static void bwd_stats_16(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *dy,
                                const float *y, double *acc) {
  bwd_stats_blocked_b(16, d, x, stat, dy, y, acc);
}
AVX512 static void bwd_data_16(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *gamma,
                               const double *acc, const float *dy, const float *y, float *dx) {
  bwd_data_blocked_b(16, d, x, stat, gamma, acc, dy, y, dx);
}

static void stats_blocked(const struct _tsr_bn_desc *d, const float *x, double *acc) {
  if (d->blk == 16 && has_avx512()) stats_16(d, x, acc);
  else if (d->blk == 16) stats_blocked_b(16, d, x, acc);
  else stats_blocked_b(8, d, x, acc);
}

static void normalise_blocked(const struct _tsr_bn_desc *d, const float *x, const float *mean, const float *spread,
                              int eval, const float *gamma, const float *beta, float *y) {
  if (d->blk == 16 && has_avx512()) normalise_16(d, x, mean, spread, eval, gamma, beta, y);
  else if (d->blk == 16) normalise_blocked_b(16, d, x, mean, spread, eval, gamma, beta, y);
  else normalise_blocked_b(8, d, x, mean, spread, eval, gamma, beta, y);
}

static void bwd_stats_blocked(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *dy,
                              const float *y, double *acc) {
  if (d->blk == 16 && has_avx512()) bwd_stats_16(d, x, stat, dy, y, acc);
  else if (d->blk == 16) bwd_stats_blocked_b(16, d, x, stat, dy, y, acc);
  else bwd_stats_blocked_b(8, d, x, stat, dy, y, acc);
}

static void bwd_data_blocked(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *gamma,
                             const double *acc, const float *dy, const float *y, float *dx) {
  if (d->blk == 16 && has_avx512()) bwd_data_16(d, x, stat, gamma, acc, dy, y, dx);
  else if (d->blk == 16) bwd_data_blocked_b(16, d, x, stat, gamma, acc, dy, y, dx);
  else bwd_data_blocked_b(8, d, x, stat, gamma, acc, dy, y, dx);
}

void _tsr_bn_stats_cpu(const struct _tsr_bn_desc *d, const float *x, double *acc) {
  if (d->overwrite) memset(acc, 0, 2 * (size_t)d->c * sizeof *acc); /* 2c doubles, in place of a task */
  if (d->blk) {
    stats_blocked(d, x, acc);
    return;
  }
  const size_t hw = plane(d);
  const int c = d->c;
  for (int i = 0; i < d->n; i++)
    for (int ch = 0; ch < c; ch++) {
      const float *restrict xp = row_in(x, d->x_bf16, ((size_t)i * c + ch) * hw, hw, SCRATCH_X);
      double s = 0, ss = 0;
      TSR_SIMD(omp simd reduction(+ : s, ss))
      for (size_t k = 0; k < hw; k++) {
        double v = xp[k];
        s += v;
        ss += v * v;
      }
      acc[ch] += s;
      acc[c + ch] += ss;
    }
}

void _tsr_bn_finalize_cpu(const struct _tsr_bn_desc *d, const double *acc, float *stat, float *running_mean,
                          float *running_var) {
  const double m = (double)d->total * d->h * d->w;
  /* PyTorch stores the unbiased variance; with one value per channel it raises, we keep the biased one. */
  const double unbias = m > 1 ? m / (m - 1) : 1.0;
  const double mom = d->momentum;
  for (int ch = 0; ch < d->c; ch++) {
    double mean = acc[ch] / m;
    double var = acc[d->c + ch] / m - mean * mean;
    if (var < 0) var = 0; /* rounding when the variance is tiny next to mean^2 */
    stat[ch] = (float)mean;
    stat[d->c + ch] = (float)(1.0 / sqrt(var + d->eps));
    running_mean[ch] = (float)((1 - mom) * running_mean[ch] + mom * mean);
    running_var[ch] = (float)((1 - mom) * running_var[ch] + mom * var * unbias);
  }
}

/* y = a (x - mean) + beta per channel, with a = gamma invstd (training: the batch's statistics) or,
 * when `eval`, a = gamma / sqrt(var + eps) in double (the running statistics, as PyTorch's eval
 * mode): centring first keeps the float error relative to the spread of x rather than to its mean
 * (the folded a x + b cancels when |mean| >> std). `spread` is invstd, or var when eval. */
static float scale_of(const struct _tsr_bn_desc *d, const float *spread, int eval, const float *gamma, int ch) {
  return eval ? (float)(gamma[ch] / sqrt((double)spread[ch] + d->eps)) : gamma[ch] * spread[ch];
}

BLOCKED normalise_blocked_b(int B, const struct _tsr_bn_desc *d, const float *x, const float *mean, const float *spread,
                              int eval, const float *gamma, const float *beta, float *y) {
  const size_t hw = plane(d);
  const int nb = nblocks(d), relu = d->relu;
  for (int cb = 0; cb < nb; cb++) {
    float a[MAXB] = {0}, m[MAXB] = {0}, b[MAXB] = {0};
    for (int j = 0; j < lanes(d, cb); j++) {
      int ch = cb * B + j;
      a[j] = scale_of(d, spread, eval, gamma, ch), m[j] = mean[ch], b[j] = beta[ch];
    }
    for (int i = 0; i < d->n; i++) {
      const size_t off = ((size_t)i * nb + cb) * hw * B;
      const float *restrict xp = row_in(x, d->x_bf16, off, hw * B, SCRATCH_X);
      float *restrict yp = row_out(y, d->y_bf16, off, hw * B);
      for (size_t k = 0; k < hw; k++) {
        TSR_SIMD(omp simd)
        for (int j = 0; j < B; j++) {
          float v = a[j] * (xp[k * B + j] - m[j]) + b[j];
          yp[k * B + j] = relu ? relu_f(v) : v;
        }
      }
      row_out_done(y, d->y_bf16, off, hw * B, yp);
    }
  }
}

static void normalise(const struct _tsr_bn_desc *d, const float *x, const float *mean, const float *spread, int eval,
                      const float *gamma, const float *beta, float *y) {
  if (d->blk) {
    normalise_blocked(d, x, mean, spread, eval, gamma, beta, y);
    return;
  }
  const size_t hw = plane(d);
  for (int i = 0; i < d->n; i++)
    for (int ch = 0; ch < d->c; ch++) {
      const size_t off = ((size_t)i * d->c + ch) * hw;
      const float *restrict xp = row_in(x, d->x_bf16, off, hw, SCRATCH_X);
      float *restrict yp = row_out(y, d->y_bf16, off, hw);
      const float a = scale_of(d, spread, eval, gamma, ch);
      const float m = mean[ch], b = beta[ch];
      if (d->relu) {
        TSR_SIMD(omp simd)
        for (size_t k = 0; k < hw; k++) yp[k] = relu_f(a * (xp[k] - m) + b);
      } else {
        TSR_SIMD(omp simd)
        for (size_t k = 0; k < hw; k++) yp[k] = a * (xp[k] - m) + b;
      }
      row_out_done(y, d->y_bf16, off, hw, yp);
    }
}

void _tsr_bn_fwd_cpu(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *gamma,
                     const float *beta, float *y) {
  normalise(d, x, stat, stat + d->c, 0, gamma, beta, y);
}

void _tsr_bn_fwd_eval_cpu(const struct _tsr_bn_desc *d, const float *x, const float *running_mean,
                          const float *running_var, const float *gamma, const float *beta, float *y) {
  normalise(d, x, running_mean, running_var, 1, gamma, beta, y);
}

BLOCKED bwd_stats_blocked_b(int B, const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *dy,
                              const float *y, double *acc) {
  const size_t hw = plane(d);
  const int nb = nblocks(d), c = d->c;
  for (int cb = 0; cb < nb; cb++) {
    double mean[MAXB] = {0};
    for (int j = 0; j < lanes(d, cb); j++) mean[j] = stat[cb * B + j];
    for (int i = 0; i < d->n; i++) {
      const size_t off = ((size_t)i * nb + cb) * hw * B;
      const float *restrict xp = row_in(x, d->x_bf16, off, hw * B, SCRATCH_X);
      const float *restrict gp = dy + off;
      const float *restrict yp = d->relu ? row_in(y, d->y_bf16, off, hw * B, SCRATCH_Y) : NULL;
      double s[MAXB] = {0}, sx[MAXB] = {0};
      for (size_t e = 0; yp && e < hw * B; e += B) {
        TSR_SIMD(omp simd)
        for (int j = 0; j < B; j++) {
          double g = relu_mask(gp[e + j], yp[e + j]);
          s[j] += g;
          sx[j] += g * ((double)xp[e + j] - mean[j]);
        }
      }
      for (size_t e = 0; !yp && e < hw * B; e += B) {
        TSR_SIMD(omp simd)
        for (int j = 0; j < B; j++) {
          double g = gp[e + j];
          s[j] += g;
          sx[j] += g * ((double)xp[e + j] - mean[j]);
        }
      }
      for (int j = 0; j < lanes(d, cb); j++) {
        acc[cb * B + j] += s[j];
        acc[c + cb * B + j] += sx[j] * stat[c + cb * B + j];
      }
    }
  }
}

void _tsr_bn_bwd_stats_cpu(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *dy,
                           const float *y, double *acc) {
  if (d->overwrite) memset(acc, 0, 2 * (size_t)d->c * sizeof *acc);
  if (d->blk) {
    bwd_stats_blocked(d, x, stat, dy, y, acc);
    return;
  }
  const size_t hw = plane(d);
  const int c = d->c;
  for (int i = 0; i < d->n; i++)
    for (int ch = 0; ch < c; ch++) {
      const size_t off = ((size_t)i * c + ch) * hw;
      const float *restrict xp = row_in(x, d->x_bf16, off, hw, SCRATCH_X);
      const float *restrict gp = dy + off;
      const double mean = stat[ch];
      double s = 0, sx = 0;
      /* centred before the product: sum(dy x) - mean sum(dy) cancels badly when |mean| >> std */
      if (d->relu) {
        const float *restrict yp = row_in(y, d->y_bf16, off, hw, SCRATCH_Y);
        TSR_SIMD(omp simd reduction(+ : s, sx))
        for (size_t k = 0; k < hw; k++) {
          double g = relu_mask(gp[k], yp[k]);
          s += g;
          sx += g * ((double)xp[k] - mean);
        }
      } else {
        TSR_SIMD(omp simd reduction(+ : s, sx))
        for (size_t k = 0; k < hw; k++) {
          double g = gp[k];
          s += g;
          sx += g * ((double)xp[k] - mean);
        }
      }
      acc[ch] += s;
      acc[c + ch] += sx * stat[c + ch];
    }
}

void _tsr_bn_bwd_params_cpu(const struct _tsr_bn_desc *d, const double *acc, float *dgamma, float *dbeta) {
  for (int ch = 0; ch < d->c; ch++) {
    dgamma[ch] = (float)acc[d->c + ch] + (d->overwrite ? 0.0f : dgamma[ch]);
    dbeta[ch] = (float)acc[ch] + (d->overwrite ? 0.0f : dbeta[ch]);
  }
}

/* dx = k (dy - mean(dy)) - k invstd mean(dy xhat) (x - mean), k = gamma invstd, as
 * dx = kf dy - shift - slope (x - mean) with the coefficients of channel ch. */
struct bwd_coef {
  float kf, shift, slope, mean;
};

static struct bwd_coef bwd_coef(const struct _tsr_bn_desc *d, const float *stat, const float *gamma,
                                const double *acc, int ch) {
  const double m = (double)d->total * plane(d);
  const double invstd = stat[d->c + ch];
  const double k = gamma[ch] * invstd;
  return (struct bwd_coef){(float)k, (float)(k * acc[ch] / m), (float)(k * invstd * acc[d->c + ch] / m), stat[ch]};
}

BLOCKED bwd_data_blocked_b(int B, const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *gamma,
                             const double *acc, const float *dy, const float *y, float *dx) {
  const size_t hw = plane(d);
  const int nb = nblocks(d);
  for (int cb = 0; cb < nb; cb++) {
    float kf[MAXB] = {0}, shift[MAXB] = {0}, slope[MAXB] = {0}, mean[MAXB] = {0};
    for (int j = 0; j < lanes(d, cb); j++) {
      struct bwd_coef q = bwd_coef(d, stat, gamma, acc, cb * B + j);
      kf[j] = q.kf, shift[j] = q.shift, slope[j] = q.slope, mean[j] = q.mean;
    }
    for (int i = 0; i < d->n; i++) {
      const size_t off = ((size_t)i * nb + cb) * hw * B;
      const float *restrict xp = row_in(x, d->x_bf16, off, hw * B, SCRATCH_X);
      const float *restrict gp = dy + off;
      const float *restrict yp = d->relu ? row_in(y, d->y_bf16, off, hw * B, SCRATCH_Y) : NULL;
      float *restrict dp = dx + off;
      if (yp) {
        for (size_t e = 0; e < hw * B; e += B) {
          TSR_SIMD(omp simd)
          for (int j = 0; j < B; j++)
            dp[e + j] = kf[j] * relu_mask(gp[e + j], yp[e + j]) - shift[j] - slope[j] * (xp[e + j] - mean[j]);
        }
      } else {
        for (size_t e = 0; e < hw * B; e += B) {
          TSR_SIMD(omp simd)
          for (int j = 0; j < B; j++) dp[e + j] = kf[j] * gp[e + j] - shift[j] - slope[j] * (xp[e + j] - mean[j]);
        }
      }
    }
  }
}

void _tsr_bn_bwd_data_cpu(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *gamma,
                          const double *acc, const float *dy, const float *y, float *dx) {
  if (d->blk) {
    bwd_data_blocked(d, x, stat, gamma, acc, dy, y, dx);
    return;
  }
  const size_t hw = plane(d);
  const int c = d->c;
  for (int i = 0; i < d->n; i++)
    for (int ch = 0; ch < c; ch++) {
      const size_t off = ((size_t)i * c + ch) * hw;
      const float *restrict xp = row_in(x, d->x_bf16, off, hw, SCRATCH_X);
      const float *restrict gp = dy + off;
      float *restrict dp = dx + off;
      const struct bwd_coef q = bwd_coef(d, stat, gamma, acc, ch);
      const float kf = q.kf, shift = q.shift, slope = q.slope, mean = q.mean;
      if (d->relu) {
        const float *restrict yp = row_in(y, d->y_bf16, off, hw, SCRATCH_Y);
        TSR_SIMD(omp simd)
        for (size_t j = 0; j < hw; j++) dp[j] = kf * relu_mask(gp[j], yp[j]) - shift - slope * (xp[j] - mean);
      } else {
        TSR_SIMD(omp simd)
        for (size_t j = 0; j < hw; j++) dp[j] = kf * gp[j] - shift - slope * (xp[j] - mean);
      }
    }
}

/* ---- codelets ---- */

#define BN_CODELET(var, fn, sym)                                                                   \
  static struct starpu_perfmodel var##_model = {.type = STARPU_HISTORY_BASED, .symbol = sym};      \
  static struct starpu_codelet var = {.cpu_funcs = {fn}, TSR_CUDA_FUNCS(fn##_cuda)                 \
                                      .cpu_funcs_name = {#fn},                                     \
                                      .nbuffers = STARPU_VARIABLE_NBUFFERS,                        \
                                      .model = &var##_model,                                       \
                                      .name = sym}

static void bn_stats_cpu(void *buffers[], void *arg) {
  _tsr_worker_enter();
  _tsr_bn_stats_cpu(arg, TSR_BUF(buffers, 0), TSR_DBUF(buffers, 1));
}

static void bn_finalize_cpu(void *buffers[], void *arg) {
  _tsr_worker_enter();
  _tsr_bn_finalize_cpu(arg, TSR_DBUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2), TSR_BUF(buffers, 3));
}

static void bn_fwd_cpu(void *buffers[], void *arg) {
  _tsr_worker_enter();
  _tsr_bn_fwd_cpu(arg, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2), TSR_BUF(buffers, 3),
                  TSR_BUF(buffers, 4));
}

static void bn_fwd_eval_cpu(void *buffers[], void *arg) {
  _tsr_worker_enter();
  _tsr_bn_fwd_eval_cpu(arg, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2), TSR_BUF(buffers, 3),
                       TSR_BUF(buffers, 4), TSR_BUF(buffers, 5));
}

/* Buffers: x, stat, dy, acc, and y when relu */
static void bn_bwd_stats_cpu(void *buffers[], void *arg) {
  const struct _tsr_bn_desc *d = arg;
  _tsr_worker_enter();
  _tsr_bn_bwd_stats_cpu(d, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2),
                        d->relu ? TSR_BUF(buffers, 4) : NULL, TSR_DBUF(buffers, 3));
}

static void bn_bwd_params_cpu(void *buffers[], void *arg) {
  _tsr_worker_enter();
  _tsr_bn_bwd_params_cpu(arg, TSR_DBUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2));
}

/* Buffers: x, stat, gamma, acc, dy, dx, and y when relu */
static void bn_bwd_data_cpu(void *buffers[], void *arg) {
  const struct _tsr_bn_desc *d = arg;
  _tsr_worker_enter();
  _tsr_bn_bwd_data_cpu(d, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2), TSR_DBUF(buffers, 3),
                       TSR_BUF(buffers, 4), d->relu ? TSR_BUF(buffers, 6) : NULL, TSR_BUF(buffers, 5));
}

#ifdef TSR_CUDA_CODELETS
/* CUDA (batchnorm_cuda.cu) */
static void bn_stats_cpu_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_bn_cuda(TSR_CUDA_STREAM, a, TSR_BN_STATS, TSR_BUF(b, 0), NULL, NULL, NULL, NULL, TSR_DBUF(b, 1), NULL, NULL));
}
static void bn_finalize_cpu_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_bn_finalize_cuda(TSR_CUDA_STREAM, a, TSR_DBUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 3)));
}
static void bn_fwd_cpu_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_bn_cuda(TSR_CUDA_STREAM, a, TSR_BN_FWD, TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 3), NULL, NULL,
                   TSR_BUF(b, 4), NULL));
}
static void bn_fwd_eval_cpu_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_bn_cuda(TSR_CUDA_STREAM, a, TSR_BN_FWD_EVAL, TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 3),
                   TSR_BUF(b, 4), NULL, TSR_BUF(b, 5), NULL));
}
static void bn_bwd_stats_cpu_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_bn_cuda(TSR_CUDA_STREAM, a, TSR_BN_BWD_STATS, TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), NULL, NULL, TSR_DBUF(b, 3),
                   NULL, NULL));
}
static void bn_bwd_params_cpu_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_bn_cuda(TSR_CUDA_STREAM, a, TSR_BN_BWD_PARAMS, NULL, NULL, NULL, NULL, NULL, TSR_DBUF(b, 0), TSR_BUF(b, 1),
                   TSR_BUF(b, 2)));
}
/* x, stat, gamma, acc, dy -> dx */
static void bn_bwd_data_cpu_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_bn_cuda(TSR_CUDA_STREAM, a, TSR_BN_BWD_DATA, TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 4), NULL,
                   TSR_DBUF(b, 3), TSR_BUF(b, 5), NULL));
}
#endif

BN_CODELET(cl_bn_stats, bn_stats_cpu, "tsr_bn_stats");
BN_CODELET(cl_bn_finalize, bn_finalize_cpu, "tsr_bn_finalize");
BN_CODELET(cl_bn_fwd, bn_fwd_cpu, "tsr_bn_fwd");
BN_CODELET(cl_bn_fwd_eval, bn_fwd_eval_cpu, "tsr_bn_fwd_eval");
BN_CODELET(cl_bn_bwd_stats, bn_bwd_stats_cpu, "tsr_bn_bwd_stats");
BN_CODELET(cl_bn_bwd_params, bn_bwd_params_cpu, "tsr_bn_bwd_params");
BN_CODELET(cl_bn_bwd_data, bn_bwd_data_cpu, "tsr_bn_bwd_data");

/* ---- insert functions ---- */

#define SUBMIT(cl, d, name, ...)                                                                   \
  do {                                                                                             \
    const struct _tsr_buf bufs[] = {__VA_ARGS__};                                                  \
    return _tsr_submit(&(cl), (d), sizeof(*(d)), STARPU_DEFAULT_PRIO, name,                        \
                       (int)(sizeof(bufs) / sizeof(bufs[0])), bufs);                               \
  } while (0)

int _tsr_insert_bn_stats(const struct _tsr_bn_desc *d, starpu_data_handle_t x, starpu_data_handle_t acc,
                         const char *name) {
  SUBMIT(cl_bn_stats, d, name, {x, STARPU_R}, {acc, d->overwrite ? STARPU_W : _tsr_accum_mode()});
}

int _tsr_insert_bn_finalize(const struct _tsr_bn_desc *d, starpu_data_handle_t acc, starpu_data_handle_t stat,
                            starpu_data_handle_t running_mean, starpu_data_handle_t running_var, const char *name) {
  SUBMIT(cl_bn_finalize, d, name, {acc, STARPU_R}, {stat, STARPU_W}, {running_mean, STARPU_RW},
         {running_var, STARPU_RW});
}

int _tsr_insert_bn_fwd(const struct _tsr_bn_desc *d, starpu_data_handle_t x, starpu_data_handle_t stat,
                       starpu_data_handle_t gamma, starpu_data_handle_t beta, starpu_data_handle_t y,
                       const char *name) {
  SUBMIT(cl_bn_fwd, d, name, {x, STARPU_R}, {stat, STARPU_R}, {gamma, STARPU_R}, {beta, STARPU_R},
         {y, STARPU_W});
}

int _tsr_insert_bn_fwd_eval(const struct _tsr_bn_desc *d, starpu_data_handle_t x, starpu_data_handle_t running_mean,
                            starpu_data_handle_t running_var, starpu_data_handle_t gamma, starpu_data_handle_t beta,
                            starpu_data_handle_t y, const char *name) {
  SUBMIT(cl_bn_fwd_eval, d, name, {x, STARPU_R}, {running_mean, STARPU_R}, {running_var, STARPU_R},
         {gamma, STARPU_R}, {beta, STARPU_R}, {y, STARPU_W});
}

int _tsr_insert_bn_bwd_stats(const struct _tsr_bn_desc *d, starpu_data_handle_t x, starpu_data_handle_t stat,
                             starpu_data_handle_t dy, starpu_data_handle_t y, starpu_data_handle_t acc,
                             const char *name) {
  enum starpu_data_access_mode mode = d->overwrite ? STARPU_W : _tsr_accum_mode();
  if (d->relu)
    SUBMIT(cl_bn_bwd_stats, d, name, {x, STARPU_R}, {stat, STARPU_R}, {dy, STARPU_R}, {acc, mode}, {y, STARPU_R});
  SUBMIT(cl_bn_bwd_stats, d, name, {x, STARPU_R}, {stat, STARPU_R}, {dy, STARPU_R}, {acc, mode});
}

int _tsr_insert_bn_bwd_params(const struct _tsr_bn_desc *d, starpu_data_handle_t acc, starpu_data_handle_t dgamma,
                              starpu_data_handle_t dbeta, const char *name) {
  enum starpu_data_access_mode mode = d->overwrite ? STARPU_W : _tsr_accum_mode();
  SUBMIT(cl_bn_bwd_params, d, name, {acc, STARPU_R}, {dgamma, mode}, {dbeta, mode});
}

int _tsr_insert_bn_bwd_data(const struct _tsr_bn_desc *d, starpu_data_handle_t x, starpu_data_handle_t stat,
                            starpu_data_handle_t gamma, starpu_data_handle_t acc, starpu_data_handle_t dy,
                            starpu_data_handle_t y, starpu_data_handle_t dx, const char *name) {
  if (d->relu)
    SUBMIT(cl_bn_bwd_data, d, name, {x, STARPU_R}, {stat, STARPU_R}, {gamma, STARPU_R}, {acc, STARPU_R},
           {dy, STARPU_R}, {dx, STARPU_W}, {y, STARPU_R});
  SUBMIT(cl_bn_bwd_data, d, name, {x, STARPU_R}, {stat, STARPU_R}, {gamma, STARPU_R}, {acc, STARPU_R},
         {dy, STARPU_R}, {dx, STARPU_W});
}

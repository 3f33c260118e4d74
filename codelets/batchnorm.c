/* Batch normalisation whose statistics span the whole batch while slices run as separate tasks
 * (PyTorch BatchNorm2d training semantics), optionally with the following relu fused, on plain or
 * blocked activations. oneDNN computes statistics per call, and a call sees one slice only, hence
 * our own loops. Layouts of the [2c] buffers are planar: acc = [sum[c] |
 * sumsq[c]] (forward) or [sum dy[c] | sum dy*xhat[c]] (backward), stat = [mean[c] | invstd[c]].
 * The loops over values are in batchnorm_rows.c (AVX-512 or portable, bitwise equal). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "batchnorm_rows.h"
#include "codelets.h"
#include "cuda_util.h"
#include "kernel_util.h"
#include "runtime/error.h"

/* ---- raw kernels ----
 * The loops over values are batchnorm_rows.c's, on rows of 16 lanes. A row is h*w values of one
 * (sample, channel) in plain NCHW, or h*w pixels of one (sample, channel block) in the blocked
 * layout nChw{B}c (B = 8 or 16), lane j then holding channel j mod B of the block; a row *group* is
 * a channel (plain) or a channel block. Each lane sums its values in order, in double; a channel's
 * sum is then its lanes' in lane order, so the statistics do not depend on which worker or which
 * loops ran. Padding lanes get coefficients 0, so their outputs stay 0. relu: y = v > 0 ? v : v * 0
 * and the gradient's mask dy * (y > 0), bit for bit what the relu layer's oneDNN kernels compute;
 * the backward recomputes v from x, the statistics, gamma and beta (the forward's coefficients, so
 * the forward's bits) instead of reading y. That needs the gamma and beta the forward used: true
 * wherever the parameters keep StarPU's sequential consistency (not with asynchronous slices, which
 * do not fuse the relu).
 * x, y, dy and dx may be stored in bf16 (d->x_bf16, y_bf16, dy_bf16, dx_bf16), loaded and rounded
 * inside the loops. */

enum { LANES = TSR_BN_LANES };

static size_t plane(const struct _tsr_bn_desc *d) { return (size_t)d->h * d->w; }
static int groups(const struct _tsr_bn_desc *d) { return d->blk ? (d->c + d->blk - 1) / d->blk : d->c; }
static size_t row_len(const struct _tsr_bn_desc *d) { return d->blk ? plane(d) * d->blk : plane(d); }
/* lanes of one channel repeat with this period */
static int period(const struct _tsr_bn_desc *d) { return d->blk ? d->blk : 1; }

/* Channel of the q-th lane of group g (q < period), -1 for a padding lane. */
static int channel_of(const struct _tsr_bn_desc *d, int g, int q) {
  if (!d->blk) return g;
  int ch = g * d->blk + q;
  return ch < d->c ? ch : -1;
}

/* Row (sample i, group g) of a buffer whose elements are bf16 (bf) or float32. */
static const void *row(const void *p, int bf, const struct _tsr_bn_desc *d, int i, int g) {
  size_t k = ((size_t)i * groups(d) + g) * row_len(d);
  return (const char *)p + k * (bf ? 2 : 4);
}
#define ROW_W(p, bf, d, i, g) ((void *)(uintptr_t)row(p, bf, d, i, g))

/* lanes[j] = f(channel of lane j), 0 on padding lanes */
#define FILL_LANES(d, g, lanes, expr_of_ch)                                                        \
  for (int j_ = 0; j_ < LANES; j_++) {                                                             \
    int ch = channel_of(d, g, j_ % period(d));                                                     \
    lanes[j_] = ch < 0 ? 0.f : (expr_of_ch);                                                       \
  }

/* Per-channel sums of group g's lane sums, in lane order: out[q] for the q-th channel of the group. */
static void fold_lanes(const struct _tsr_bn_desc *d, const double *lanes, double *out) {
  const int p = period(d);
  for (int q = 0; q < p; q++) out[q] = 0;
  for (int j = 0; j < LANES; j++) out[j % p] += lanes[j];
}

void _tsr_bn_stats_cpu(const struct _tsr_bn_desc *d, const float *x, double *acc) {
  if (d->overwrite) memset(acc, 0, 2 * (size_t)d->c * sizeof *acc); /* 2c doubles, in place of a task */
  const struct _tsr_bn_rows *k = _tsr_bn_rows();
  const int c = d->c;
  for (int g = 0; g < groups(d); g++)
    for (int i = 0; i < d->n; i++) {
      double s[LANES] = {0}, ss[LANES] = {0}, fs[LANES], fss[LANES];
      k->stats(row(x, d->x_bf16, d, i, g), d->x_bf16, row_len(d), s, ss);
      fold_lanes(d, s, fs), fold_lanes(d, ss, fss);
      for (int q = 0; q < period(d); q++) {
        int ch = channel_of(d, g, q);
        if (ch >= 0) acc[ch] += fs[q], acc[c + ch] += fss[q];
      }
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

static void normalise(const struct _tsr_bn_desc *d, const float *x, const float *mean, const float *spread, int eval,
                      const float *gamma, const float *beta, float *y) {
  const struct _tsr_bn_rows *k = _tsr_bn_rows();
  for (int g = 0; g < groups(d); g++) {
    float a[LANES], m[LANES], b[LANES];
    FILL_LANES(d, g, a, scale_of(d, spread, eval, gamma, ch));
    FILL_LANES(d, g, m, mean[ch]);
    FILL_LANES(d, g, b, beta[ch]);
    for (int i = 0; i < d->n; i++)
      k->fwd(row(x, d->x_bf16, d, i, g), d->x_bf16, ROW_W(y, d->y_bf16, d, i, g), d->y_bf16, row_len(d), a, m, b,
             d->relu);
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

/* The forward's coefficients of group g (a = gamma invstd, b = beta) for the relu's mask; zeros
 * without the relu (gamma and beta may then be NULL). */
static void relu_lanes(const struct _tsr_bn_desc *d, int g, const float *stat, const float *gamma,
                       const float *beta, float *a, float *b) {
  if (!d->relu) {
    memset(a, 0, LANES * sizeof *a), memset(b, 0, LANES * sizeof *b);
    return;
  }
  FILL_LANES(d, g, a, scale_of(d, stat + d->c, 0, gamma, ch));
  FILL_LANES(d, g, b, beta[ch]);
}

/* acc += [sum g | invstd sum g (x - mean)], g = dy (masked by the forward's y > 0 with the relu);
 * centred before the product: sum(dy x) - mean sum(dy) cancels badly when |mean| >> std */
void _tsr_bn_bwd_stats_cpu(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *dy,
                           const float *gamma, const float *beta, double *acc) {
  if (d->overwrite) memset(acc, 0, 2 * (size_t)d->c * sizeof *acc);
  const struct _tsr_bn_rows *k = _tsr_bn_rows();
  const int c = d->c;
  for (int g = 0; g < groups(d); g++) {
    float m[LANES], a[LANES], b[LANES];
    FILL_LANES(d, g, m, stat[ch]);
    relu_lanes(d, g, stat, gamma, beta, a, b);
    for (int i = 0; i < d->n; i++) {
      double s[LANES] = {0}, sx[LANES] = {0}, fs[LANES], fsx[LANES];
      k->bwd_stats(row(x, d->x_bf16, d, i, g), d->x_bf16, row(dy, d->dy_bf16, d, i, g), d->dy_bf16, d->relu,
                   d->y_bf16, row_len(d), m, a, b, s, sx);
      fold_lanes(d, s, fs), fold_lanes(d, sx, fsx);
      for (int q = 0; q < period(d); q++) {
        int ch = channel_of(d, g, q);
        if (ch >= 0) acc[ch] += fs[q], acc[c + ch] += fsx[q] * stat[c + ch];
      }
    }
  }
}

void _tsr_bn_bwd_params_cpu(const struct _tsr_bn_desc *d, const double *acc, float *dgamma, float *dbeta) {
  for (int ch = 0; ch < d->c; ch++) {
    dgamma[ch] = (float)acc[d->c + ch] + (d->overwrite ? 0.0f : dgamma[ch]);
    dbeta[ch] = (float)acc[ch] + (d->overwrite ? 0.0f : dbeta[ch]);
  }
}

/* dx = k (dy - mean(dy)) - k invstd mean(dy xhat) (x - mean), k = gamma invstd, as
 * dx = (kf dy - shift) - slope (x - mean) with the coefficients of channel ch. */
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

void _tsr_bn_bwd_data_cpu(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *gamma,
                          const float *beta, const double *acc, const float *dy, float *dx) {
  const struct _tsr_bn_rows *k = _tsr_bn_rows();
  const int mode = d->dx_add ? (d->dx_bf16 ? TSR_BN_DX_ADD_BF16 : TSR_BN_DX_ADD) : d->dx_bf16;
  for (int g = 0; g < groups(d); g++) {
    float kf[LANES], shift[LANES], slope[LANES], m[LANES], a[LANES], b[LANES];
    FILL_LANES(d, g, kf, bwd_coef(d, stat, gamma, acc, ch).kf);
    FILL_LANES(d, g, shift, bwd_coef(d, stat, gamma, acc, ch).shift);
    FILL_LANES(d, g, slope, bwd_coef(d, stat, gamma, acc, ch).slope);
    FILL_LANES(d, g, m, stat[ch]);
    relu_lanes(d, g, stat, gamma, beta, a, b);
    for (int i = 0; i < d->n; i++)
      k->bwd_data(row(x, d->x_bf16, d, i, g), d->x_bf16, row(dy, d->dy_bf16, d, i, g), d->dy_bf16, d->relu,
                  d->y_bf16, ROW_W(dx, d->dx_bf16, d, i, g), mode, row_len(d), kf, shift, slope, m, a, b);
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

/* Buffers: x, stat, dy, acc, and gamma, beta when relu */
static void bn_bwd_stats_cpu(void *buffers[], void *arg) {
  const struct _tsr_bn_desc *d = arg;
  _tsr_worker_enter();
  _tsr_bn_bwd_stats_cpu(d, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2),
                        d->relu ? TSR_BUF(buffers, 4) : NULL, d->relu ? TSR_BUF(buffers, 5) : NULL,
                        TSR_DBUF(buffers, 3));
}

static void bn_bwd_params_cpu(void *buffers[], void *arg) {
  _tsr_worker_enter();
  _tsr_bn_bwd_params_cpu(arg, TSR_DBUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2));
}

/* Buffers: x, stat, gamma, acc, dy, dx, and beta when relu */
static void bn_bwd_data_cpu(void *buffers[], void *arg) {
  const struct _tsr_bn_desc *d = arg;
  _tsr_worker_enter();
  _tsr_bn_bwd_data_cpu(d, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2),
                       d->relu ? TSR_BUF(buffers, 6) : NULL, TSR_DBUF(buffers, 3), TSR_BUF(buffers, 4),
                       TSR_BUF(buffers, 5));
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
                             starpu_data_handle_t dy, starpu_data_handle_t gamma, starpu_data_handle_t beta,
                             starpu_data_handle_t acc, const char *name) {
  enum starpu_data_access_mode mode = d->overwrite ? STARPU_W : _tsr_accum_mode();
  if (d->relu)
    SUBMIT(cl_bn_bwd_stats, d, name, {x, STARPU_R}, {stat, STARPU_R}, {dy, STARPU_R}, {acc, mode},
           {gamma, STARPU_R}, {beta, STARPU_R});
  SUBMIT(cl_bn_bwd_stats, d, name, {x, STARPU_R}, {stat, STARPU_R}, {dy, STARPU_R}, {acc, mode});
}

int _tsr_insert_bn_bwd_params(const struct _tsr_bn_desc *d, starpu_data_handle_t acc, starpu_data_handle_t dgamma,
                              starpu_data_handle_t dbeta, const char *name) {
  enum starpu_data_access_mode mode = d->overwrite ? STARPU_W : _tsr_accum_mode();
  SUBMIT(cl_bn_bwd_params, d, name, {acc, STARPU_R}, {dgamma, mode}, {dbeta, mode});
}

int _tsr_insert_bn_bwd_data(const struct _tsr_bn_desc *d, starpu_data_handle_t x, starpu_data_handle_t stat,
                            starpu_data_handle_t gamma, starpu_data_handle_t beta, starpu_data_handle_t acc,
                            starpu_data_handle_t dy, starpu_data_handle_t dx, const char *name) {
  const enum starpu_data_access_mode dx_mode = d->dx_add ? STARPU_RW : STARPU_W;
  if (d->relu)
    SUBMIT(cl_bn_bwd_data, d, name, {x, STARPU_R}, {stat, STARPU_R}, {gamma, STARPU_R}, {acc, STARPU_R},
           {dy, STARPU_R}, {dx, dx_mode}, {beta, STARPU_R});
  SUBMIT(cl_bn_bwd_data, d, name, {x, STARPU_R}, {stat, STARPU_R}, {gamma, STARPU_R}, {acc, STARPU_R},
         {dy, STARPU_R}, {dx, dx_mode});
}

/* Channel concatenation of k tensors, plain NCHW or blocked (and its backward, which splits the
 * gradient, rounding it to bf16 or widening it where an input's gradient is stored otherwise), and
 * the element-wise sum of k tensors (any layout). Tasks carry k + 1 buffers, so past 7 inputs they
 * rely on _tsr_submit's dynamic handles (the codelet's buffers[] array is then StarPU's dynamic one). */
#include <errno.h>
#include <string.h>

#include "codelets.h"
#include "convert.h"
#include "kernel_util.h"
#include "cuda_util.h"
#include "runtime/error.h"

static size_t sample_elems(int c, int blk, size_t hw) { return (size_t)(blk ? (c + blk - 1) / blk * blk : c) * hw; }

/* hw rows of `bytes` each, `row` bytes apart on both sides. Inlined with a constant size (half a
 * 16-block of bf16 or float32), each row is two vector moves; with a size known only at run time it
 * is a generic copy loop (callgrind: 4.7 M instead of 21.4 M instructions for these rows in one step
 * of the example at batch 8, bench/bench_concat). */
static inline void copy_rows(char *restrict dp, const char *restrict sp, size_t hw, size_t row, size_t bytes) {
  for (size_t k = 0; k < hw; k++) memcpy(dp + k * row, sp + k * row, bytes);
}

/* Copies channels [s0, s0 + nch) of one sample to channels [d0, d0 + nch) of another, both in the
 * layout of channel block blk with elements of es bytes: in runs that stay within one block on both
 * sides (whole planes or blocks when aligned). Padding channels are not touched (they stay zero). */
static void copy_channels(int blk, size_t hw, size_t es, const char *src, int s0, char *dst, int d0, int nch) {
  if (!blk) {
    memcpy(dst + (size_t)d0 * hw * es, src + (size_t)s0 * hw * es, (size_t)nch * hw * es);
    return;
  }
  while (nch > 0) {
    int run = blk - s0 % blk < blk - d0 % blk ? blk - s0 % blk : blk - d0 % blk;
    if (run > nch) run = nch;
    const char *restrict sp = src + ((size_t)(s0 / blk) * hw * blk + s0 % blk) * es;
    char *restrict dp = dst + ((size_t)(d0 / blk) * hw * blk + d0 % blk) * es;
    const size_t row = blk * es, bytes = run * es;
    if (run == blk)
      memcpy(dp, sp, hw * row);
    else if (bytes == 16) /* half a 16-block of bf16 (a DenseNet's growth of 8) */
      copy_rows(dp, sp, hw, row, 16);
    else if (bytes == 32) /* half a 16-block of float32 */
      copy_rows(dp, sp, hw, row, 32);
    else
      copy_rows(dp, sp, hw, row, bytes);
    s0 += run, d0 += run, nch -= run;
  }
}

static int total_channels(const struct _tsr_concat_desc *d) {
  int c = 0;
  for (int i = 0; i < d->k; i++) c += d->c[i];
  return c;
}

void _tsr_concat_fwd_cpu(const struct _tsr_concat_desc *d, const float *const *xs, float *y) {
  size_t hw = (size_t)d->h * d->w, ly = sample_elems(total_channels(d), d->blk, hw), es = d->bf16 ? 2 : 4;
  for (int s = 0; s < d->n; s++)
    for (int i = 0, off = 0; i < d->k; off += d->c[i], i++)
      copy_channels(d->blk, hw, es, (const char *)xs[i] + s * sample_elems(d->c[i], d->blk, hw) * es, 0,
                    (char *)y + s * ly * es, off, d->c[i]);
}

/* n values from float32 to bf16 (rounded as convert.h does) or back (exact); loops gcc vectorises. */
static void round_span(uint16_t *restrict d, const float *restrict s, size_t n) {
#pragma omp simd
  for (size_t j = 0; j < n; j++) d[j] = _tsr_bf16_round(s[j]);
}
static void widen_span(float *restrict d, const uint16_t *restrict s, size_t n) {
#pragma omp simd
  for (size_t j = 0; j < n; j++) d[j] = _tsr_bf16_widen(s[j]);
}

/* copy_channels between float32 and bf16: rounds or widens each value; whole planes or blocks as one
 * span, partial blocks row by row. */
static void convert_channels(int blk, size_t hw, int from_bf16, const char *src, int s0, char *dst, int d0, int nch) {
  size_t es = from_bf16 ? 2 : 4, ed = from_bf16 ? 4 : 2;
  while (nch > 0) {
    int run = !blk ? nch : blk - s0 % blk < blk - d0 % blk ? blk - s0 % blk : blk - d0 % blk;
    if (run > nch) run = nch;
    int whole = !blk || run == blk;
    size_t rows = whole ? 1 : hw, len = !blk ? (size_t)run * hw : whole ? hw * blk : (size_t)run;
    size_t so = blk ? (size_t)(s0 / blk) * hw * blk + s0 % blk : (size_t)s0 * hw;
    size_t dof = blk ? (size_t)(d0 / blk) * hw * blk + d0 % blk : (size_t)d0 * hw;
    for (size_t k = 0; k < rows; k++) {
      const char *sp = src + (so + k * blk) * es;
      char *dp = dst + (dof + k * blk) * ed;
      if (from_bf16)
        widen_span((float *)dp, (const uint16_t *)sp, len);
      else
        round_span((uint16_t *)dp, (const float *)sp, len);
    }
    s0 += run, d0 += run, nch -= run;
  }
}

/* Each input gradient is written whole, its padding channels zeroed too: gradients share memory
 * (src/train/grad_share.c) with others of other shapes and element sizes, whose values there could
 * read as NaN where the bf16 kernels read the padding (0 x NaN). */
void _tsr_concat_bwd_cpu(const struct _tsr_concat_desc *d, const float *dy, float *const *dxs) {
  size_t hw = (size_t)d->h * d->w, ly = sample_elems(total_channels(d), d->blk, hw), eg = d->dy_bf16 ? 2 : 4;
  for (int s = 0; s < d->n; s++)
    for (int i = 0, off = 0; i < d->k; off += d->c[i], i++) {
      int xb = d->dx_bf16 >> i & 1;
      const char *src = (const char *)dy + s * ly * eg;
      char *dst = (char *)dxs[i] + s * sample_elems(d->c[i], d->blk, hw) * (xb ? 2 : 4);
      if (xb == d->dy_bf16)
        copy_channels(d->blk, hw, eg, src, off, dst, 0, d->c[i]);
      else
        convert_channels(d->blk, hw, d->dy_bf16, src, off, dst, 0, d->c[i]);
      _tsr_zero_pad_channels(d->blk, hw, xb ? 2 : 4, dst, d->c[i]);
    }
}

/* Blocked so that the partial sums stay in L1 while every input streams through once. */
void _tsr_add_fwd_cpu(size_t len, int k, const float *const *xs, float *y) {
  enum { BLOCK = 2048 };
  for (size_t b0 = 0; b0 < len; b0 += BLOCK) {
    size_t m = len - b0 < BLOCK ? len - b0 : BLOCK;
    float *restrict yb = y + b0;
    const float *restrict x0 = xs[0] + b0;
    for (size_t j = 0; j < m; j++) yb[j] = x0[j];
    for (int i = 1; i < k; i++) {
      const float *restrict xb = xs[i] + b0;
#pragma omp simd
      for (size_t j = 0; j < m; j++) yb[j] += xb[j];
    }
  }
}

/* ---- codelets ---- */

struct add_desc {
  size_t len;
  int k;
};

/* Buffers: the k inputs, then y. */
static void concat_fwd_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  const struct _tsr_concat_desc *d = cl_arg;
  const float *xs[TSR_MAX_CONCAT];
  for (int i = 0; i < d->k; i++) xs[i] = TSR_BUF(buffers, i);
  _tsr_concat_fwd_cpu(d, xs, TSR_BUF(buffers, d->k));
}

/* Buffers: dy, then the k input gradients. */
static void concat_bwd_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  const struct _tsr_concat_desc *d = cl_arg;
  float *dxs[TSR_MAX_CONCAT];
  for (int i = 0; i < d->k; i++) dxs[i] = TSR_BUF(buffers, i + 1);
  _tsr_concat_bwd_cpu(d, TSR_BUF(buffers, 0), dxs);
}

/* Buffers: the k inputs, then y. */
static void add_fwd_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  const struct add_desc *d = cl_arg;
  const float *xs[TSR_MAX_CONCAT];
  for (int i = 0; i < d->k; i++) xs[i] = TSR_BUF(buffers, i);
  _tsr_add_fwd_cpu(d->len, d->k, xs, TSR_BUF(buffers, d->k));
}

#ifdef TSR_CUDA_CODELETS
/* CUDA (concat_cuda.cu) */
static void concat_fwd_cpu_cuda(void *b[], void *a) {
  const struct _tsr_concat_desc *d = a;
  float *parts[TSR_MAX_CONCAT];
  for (int i = 0; i < d->k; i++) parts[i] = TSR_BUF(b, i);
  TSR_CUDA_RUN(_tsr_concat_cuda(TSR_CUDA_STREAM, d, 0, parts, TSR_BUF(b, d->k)));
}
static void concat_bwd_cpu_cuda(void *b[], void *a) {
  const struct _tsr_concat_desc *d = a;
  float *parts[TSR_MAX_CONCAT];
  for (int i = 0; i < d->k; i++) parts[i] = TSR_BUF(b, 1 + i);
  TSR_CUDA_RUN(_tsr_concat_cuda(TSR_CUDA_STREAM, d, 1, parts, TSR_BUF(b, 0)));
}
static void add_fwd_cpu_cuda(void *b[], void *a) {
  const struct add_desc *d = a;
  const float **xs = malloc((size_t)d->k * sizeof *xs);
  if (!xs) {
    _tsr_cuda_report("out of host memory for %d input pointers", d->k);
    _tsr_cuda_task_failed(__func__, b);
    return;
  }
  for (int i = 0; i < d->k; i++) xs[i] = TSR_BUF(b, i);
  TSR_CUDA_RUN(_tsr_add_cuda(TSR_CUDA_STREAM, d->len, d->k, xs, TSR_BUF(b, d->k)));
  free(xs);
}
#endif

static struct starpu_perfmodel concat_fwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_concat_fwd"};
static struct starpu_perfmodel concat_bwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_concat_bwd"};
static struct starpu_perfmodel add_fwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_add_fwd"};

static struct starpu_codelet cl_concat_fwd = {
    .cpu_funcs = {concat_fwd_cpu}, TSR_CUDA_FUNCS(concat_fwd_cpu_cuda)
    .cpu_funcs_name = {"concat_fwd_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_concat_fwd",
    .model = &concat_fwd_model,
};
static struct starpu_codelet cl_concat_bwd = {
    .cpu_funcs = {concat_bwd_cpu}, TSR_CUDA_FUNCS(concat_bwd_cpu_cuda)
    .cpu_funcs_name = {"concat_bwd_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_concat_bwd",
    .model = &concat_bwd_model,
};
static struct starpu_codelet cl_add_fwd = {
    .cpu_funcs = {add_fwd_cpu}, TSR_CUDA_FUNCS(add_fwd_cpu_cuda)
    .cpu_funcs_name = {"add_fwd_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_add_fwd",
    .model = &add_fwd_model,
};

static int check_k(int k, const char *name) {
  if (k < 1 || k > TSR_MAX_CONCAT) {
    _tsr_error(TSR_ERR_ARG, "'%s': %d inputs (1 to %d allowed)", name, k, TSR_MAX_CONCAT);
    return -EINVAL;
  }
  return 0;
}

int _tsr_insert_concat_fwd(const struct _tsr_concat_desc *d, const starpu_data_handle_t *xs, starpu_data_handle_t y,
                           const char *name) {
  int ret = check_k(d->k, name);
  if (ret) return ret;
  struct _tsr_buf bufs[TSR_MAX_CONCAT + 1];
  for (int i = 0; i < d->k; i++) bufs[i] = (struct _tsr_buf){xs[i], STARPU_R};
  bufs[d->k] = (struct _tsr_buf){y, STARPU_W};
  return _tsr_submit(&cl_concat_fwd, d, sizeof(*d), STARPU_DEFAULT_PRIO, name, d->k + 1, bufs);
}

int _tsr_insert_concat_bwd(const struct _tsr_concat_desc *d, starpu_data_handle_t dy, const starpu_data_handle_t *dxs,
                           const char *name) {
  int ret = check_k(d->k, name);
  if (ret) return ret;
  struct _tsr_buf bufs[TSR_MAX_CONCAT + 1];
  bufs[0] = (struct _tsr_buf){dy, STARPU_R};
  for (int i = 0; i < d->k; i++) bufs[i + 1] = (struct _tsr_buf){dxs[i], STARPU_W};
  return _tsr_submit(&cl_concat_bwd, d, sizeof(*d), STARPU_DEFAULT_PRIO, name, d->k + 1, bufs);
}

int _tsr_insert_add_fwd(size_t len, int k, const starpu_data_handle_t *xs, starpu_data_handle_t y, const char *name) {
  int ret = check_k(k, name);
  if (ret) return ret;
  struct add_desc d = {len, k};
  struct _tsr_buf bufs[TSR_MAX_CONCAT + 1];
  for (int i = 0; i < k; i++) bufs[i] = (struct _tsr_buf){xs[i], STARPU_R};
  bufs[k] = (struct _tsr_buf){y, STARPU_W};
  return _tsr_submit(&cl_add_fwd, &d, sizeof(d), STARPU_DEFAULT_PRIO, name, k + 1, bufs);
}

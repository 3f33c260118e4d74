/* Dropout and spatial dropout (PyTorch semantics: kept values scaled by 1/(1-p)). The keep/drop
 * decision is a counter-based hash of (seed, element index), or of (seed, sample*c + channel) for
 * spatial dropout, so there is no mask buffer: backward recomputes the same mask, and neither the
 * worker nor the order in which tasks run can change it. */
#include <string.h>

#include "codelets.h"
#include "cuda_util.h"
#include "runtime/error.h"
#include "runtime/rng.h"

/* Vector 64-bit multiplies need AVX-512DQ; the x86-64 baseline runs the hash loop ~7x slower. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TSR_HASH_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define TSR_HASH_CLONES
#endif

/* Kept with probability 1 - p: the top 32 bits of draw index + 1 of the stream (runtime/rng.h)
 * against p * 2^32. The key is the mixed seed, so nearby seeds do not give shifted copies of one
 * stream. */
static inline int keep(uint64_t key, uint64_t index, uint64_t threshold) {
  return (_tsr_rng_at(key, index + 1) >> 32) >= threshold;
}

static uint64_t threshold_of(float p) { return (uint64_t)((double)p * 4294967296.0); }

/* Branch-free so that gcc vectorises the hash (a branch would mispredict on every other element). */
TSR_HASH_CLONES static void mask_elements(size_t len, uint64_t key, uint64_t thr, float scale,
                                          const float *restrict in, float *restrict out) {
  TSR_SIMD(omp simd)
  for (size_t i = 0; i < len; i++) out[i] = in[i] * (keep(key, i, thr) ? scale : 0.0f);
}

/* out = in * mask * 1/(1-p); shared by forward (x -> y) and backward (dy -> dx). */
static void apply_mask(const struct _tsr_dropout_desc *d, uint64_t seed, const float *restrict in,
                       float *restrict out) {
  const size_t hw = (size_t)d->h * d->w;
  const size_t len = (size_t)d->n * d->c * hw;
  if (d->p == 0) {
    memcpy(out, in, len * sizeof(float));
    return;
  }
  const uint64_t key = _tsr_mix64(seed), thr = threshold_of(d->p);
  const float scale = (float)(1.0 / (1.0 - (double)d->p));
  if (d->spatial) {
    const size_t planes = (size_t)d->n * d->c;
    for (size_t pl = 0; pl < planes; pl++) {
      const float s = keep(key, pl, thr) ? scale : 0.0f;
      const float *restrict ip = in + pl * hw;
      float *restrict op = out + pl * hw;
      TSR_SIMD(omp simd)
      for (size_t k = 0; k < hw; k++) op[k] = ip[k] * s;
    }
    return;
  }
  mask_elements(len, key, thr, scale, in, out);
}

void _tsr_dropout_fwd_cpu(const struct _tsr_dropout_desc *d, uint64_t seed, const float *x, float *y) {
  apply_mask(d, seed, x, y);
}

void _tsr_dropout_bwd_cpu(const struct _tsr_dropout_desc *d, uint64_t seed, const float *dy, float *dx) {
  apply_mask(d, seed, dy, dx);
}

/* The task argument: descriptor and seed in one byte copy. */
struct dropout_arg {
  struct _tsr_dropout_desc d;
  uint64_t seed;
};

static void dropout_fwd_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  const struct dropout_arg *a = cl_arg;
  _tsr_dropout_fwd_cpu(&a->d, a->seed, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1));
}

static void dropout_bwd_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  const struct dropout_arg *a = cl_arg;
  _tsr_dropout_bwd_cpu(&a->d, a->seed, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1));
}

#ifdef TSR_CUDA_CODELETS
/* CUDA (dropout_cuda.cu) */
static void dropout_fwd_cpu_cuda(void *b[], void *a) {
  const struct dropout_arg *x = a;
  TSR_CUDA_RUN(_tsr_dropout_cuda(TSR_CUDA_STREAM, &x->d, x->seed, TSR_BUF(b, 0), TSR_BUF(b, 1)));
}
static void dropout_bwd_cpu_cuda(void *b[], void *a) { dropout_fwd_cpu_cuda(b, a); }
#endif

static struct starpu_perfmodel dropout_fwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_dropout_fwd"};
static struct starpu_perfmodel dropout_bwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_dropout_bwd"};

static struct starpu_codelet cl_dropout_fwd = {.cpu_funcs = {dropout_fwd_cpu}, TSR_CUDA_FUNCS(dropout_fwd_cpu_cuda)
                                               .cpu_funcs_name = {"dropout_fwd_cpu"},
                                               .nbuffers = STARPU_VARIABLE_NBUFFERS,
                                               .model = &dropout_fwd_model,
                                               .name = "tsr_dropout_fwd"};
static struct starpu_codelet cl_dropout_bwd = {.cpu_funcs = {dropout_bwd_cpu}, TSR_CUDA_FUNCS(dropout_bwd_cpu_cuda)
                                               .cpu_funcs_name = {"dropout_bwd_cpu"},
                                               .nbuffers = STARPU_VARIABLE_NBUFFERS,
                                               .model = &dropout_bwd_model,
                                               .name = "tsr_dropout_bwd"};

static int submit(struct starpu_codelet *cl, const struct _tsr_dropout_desc *d, uint64_t seed,
                  starpu_data_handle_t in, starpu_data_handle_t out, const char *name) {
  if (!(d->p >= 0 && d->p < 1))
    return _tsr_error(TSR_ERR_ARG, "dropout '%s': p = %g, expected 0 <= p < 1", name ? name : "?", (double)d->p);
  struct dropout_arg a;
  memset(&a, 0, sizeof(a)); /* padding bytes are copied into the task too */
  a.d = *d;
  a.seed = seed;
  const struct _tsr_buf bufs[] = {{in, STARPU_R}, {out, STARPU_W}};
  return _tsr_submit(cl, &a, sizeof(a), STARPU_DEFAULT_PRIO, name, 2, bufs);
}

int _tsr_insert_dropout_fwd(const struct _tsr_dropout_desc *d, uint64_t seed, starpu_data_handle_t x,
                            starpu_data_handle_t y, const char *name) {
  return submit(&cl_dropout_fwd, d, seed, x, y, name);
}

int _tsr_insert_dropout_bwd(const struct _tsr_dropout_desc *d, uint64_t seed, starpu_data_handle_t dy,
                            starpu_data_handle_t dx, const char *name) {
  return submit(&cl_dropout_bwd, d, seed, dy, dx, name);
}

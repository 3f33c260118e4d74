/* Parameter updates with the semantics of torch.optim.SGD (momentum, dampening 0, Nesterov, L2
 * weight decay), Adam (L2 weight decay) and AdamW (decoupled weight decay), one task per parameter
 * tensor. Scalars are folded outside the loops and the loops are plain streams over restrict
 * pointers so that gcc vectorises them. */
#include <math.h>
#include <string.h>

#include "codelets.h"
#include "cuda_util.h"

static void sgd(const struct tsr_opt_args *a, size_t n, float *restrict w, const float *restrict g,
                float *restrict m) {
  const float lr = a->lr, mu = a->momentum, wd = a->weight_decay, gs = a->grad_scale;
  if (mu == 0.0f) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) w[i] -= lr * (gs * g[i] + wd * w[i]);
    return;
  }
  /* PyTorch starts the buffer at the first gradient: clearing it first gives that for any prior
   * content, and keeps the loops free of a per-element select */
  if (a->step <= 1) memset(m, 0, n * sizeof(*m));
  if (a->nesterov) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
      float gi = gs * g[i] + wd * w[i];
      float mi = mu * m[i] + gi;
      m[i] = mi;
      w[i] -= lr * (gi + mu * mi);
    }
  } else {
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
      float gi = gs * g[i] + wd * w[i];
      float mi = mu * m[i] + gi;
      m[i] = mi;
      w[i] -= lr * mi;
    }
  }
}

/* Adam and AdamW; `l2` is the L2 coefficient added to the gradient (Adam), `decay` the factor the
 * weights are multiplied by first (AdamW). Note: gcc vectorises this loop only under
 * -fno-math-errno (sqrtf may set errno otherwise), which makes it about 3x faster. */
static void adam(const struct tsr_opt_args *a, float l2, float decay, size_t n, float *restrict w,
                 const float *restrict g, float *restrict m, float *restrict v) {
  const float b1 = a->beta1, b2 = a->beta2, gs = a->grad_scale, eps = a->eps;
  const double t = (double)(a->step < 1 ? 1 : a->step);
  const float step_size = (float)(a->lr / (1.0 - pow(a->beta1, t)));
  const float inv_bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow(a->beta2, t)));
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

void _tsr_opt_update_cpu(const struct tsr_opt_args *a, size_t n, float *w, const float *g, float *m, float *v) {
  switch (a->kind) {
  case TSR_OPT_SGD:
    sgd(a, n, w, g, m);
    break;
  case TSR_OPT_ADAM:
    adam(a, a->weight_decay, 1.0f, n, w, g, m, v);
    break;
  case TSR_OPT_ADAMW:
    adam(a, 0.0f, 1.0f - a->lr * a->weight_decay, n, w, g, m, v);
    break;
  }
}

/* ---- codelet: buffers w (RW), g (R), m (RW), v (RW) ---- */

static void opt_update_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  _tsr_opt_update_cpu(cl_arg, TSR_NX(buffers, 0), TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2),
                      TSR_BUF(buffers, 3));
}

/* With loss scaling: buffer 4 is the scaler state (R); a skipped step leaves w, m, v untouched and
 * does not count for Adam's bias correction (as torch.cuda.amp skips optimizer.step()). */
static void opt_update_gated_cpu(void *buffers[], void *cl_arg) {
  const struct _tsr_scale_state *s = (const struct _tsr_scale_state *)STARPU_VARIABLE_GET_PTR(buffers[4]);
  if (!s->apply) return;
  _tsr_worker_enter();
  struct tsr_opt_args a = *(const struct tsr_opt_args *)cl_arg;
  a.grad_scale = s->unscale;
  a.step -= s->skipped;
  _tsr_opt_update_cpu(&a, TSR_NX(buffers, 0), TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2),
                      TSR_BUF(buffers, 3));
}

#ifdef TSR_CUDA_CODELETS
/* CUDA (optim_cuda.cu) */
static void opt_update_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_opt_update_cuda(STREAM, a, TSR_NX(b, 0), TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 3), NULL));
}
/* buffer 4: the loss scaler's state (a StarPU variable), read on the device */
static void opt_update_gated_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_opt_update_cuda(STREAM, a, TSR_NX(b, 0), TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 3),
                           (const struct _tsr_scale_state *)STARPU_VARIABLE_GET_PTR(b[4])));
}
#endif

static struct starpu_perfmodel opt_update_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_opt_update"};
static struct starpu_perfmodel opt_update_gated_model = {.type = STARPU_HISTORY_BASED,
                                                         .symbol = "tsr_opt_update_gated"};

static struct starpu_codelet cl_opt_update = {
    .cpu_funcs = {opt_update_cpu}, TSR_CUDA_FUNCS(opt_update_cpu_cuda)
    .cpu_funcs_name = {"opt_update_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_opt_update",
    .model = &opt_update_model,
};

/* The CUDA variant reads the scaler's state where StarPU put it, in device memory. */
static struct starpu_codelet cl_opt_update_gated = {
    .cpu_funcs = {opt_update_gated_cpu}, TSR_CUDA_FUNCS(opt_update_gated_cpu_cuda)
    .cpu_funcs_name = {"opt_update_gated_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_opt_update_gated",
    .model = &opt_update_gated_model,
};

int _tsr_insert_opt_update(const struct tsr_opt_args *a, starpu_data_handle_t w, starpu_data_handle_t g,
                           starpu_data_handle_t m, starpu_data_handle_t v, starpu_data_handle_t scaler,
                           const char *name) {
  struct _tsr_buf bufs[] = {{w, STARPU_RW}, {g, STARPU_R}, {m, STARPU_RW}, {v, STARPU_RW}, {scaler, STARPU_R}};
  if (scaler) return _tsr_submit(&cl_opt_update_gated, a, sizeof(*a), STARPU_DEFAULT_PRIO, name, 5, bufs);
  return _tsr_submit(&cl_opt_update, a, sizeof(*a), STARPU_DEFAULT_PRIO, name, 4, bufs);
}

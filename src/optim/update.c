/* The update task of every optimizer, one per parameter tensor: buffers w (RW), g (R), the
 * optimizer's state tensors (RW) and, gated by the dynamic loss scaler, its state (R). The task runs
 * the kernels of the optimizer's registry entry, or LARC around them; CUDA workers take it only
 * when the entry has a CUDA kernel and LARC is off. For sign reductions, the entry's two halves as
 * tasks of their own: the direction (before the reduction) and its application (after); CUDA
 * workers take them when the entry has their CUDA kernels. */
#include <math.h>

#include "codelets.h"
#include "optim/optim.h"
#include "runtime/error.h"
#include "runtime/submit.h"

/* LARC with the semantics of NVIDIA apex's LARC wrapper: when |w| and |g| are both nonzero, the
 * gradient becomes f (g + wd w) with f = eta |w| / (|g| + wd |w| + eps), clipped to min(f / lr, 1)
 * in clip mode; otherwise the gradient stays as it is and no decay applies (apex zeroes the group's
 * decay around the inner step either way). The norms are sums over the task's tensor, in double;
 * |g| is of the gradient times grad_scale. The wrapped kernel adds its weight_decay * w to the
 * gradient, so f enters as its gradient scale and f wd as its decay. */
static void larc_update(const struct _tsr_optim_args *a, size_t n, float *w, const float *g, float *const *state) {
  const double eps = 1e-8;
  double ww = 0, gg = 0;
  for (size_t i = 0; i < n; i++) {
    double gi = (double)a->grad_scale * g[i];
    ww += (double)w[i] * w[i];
    gg += gi * gi;
  }
  struct _tsr_optim_args b = *a;
  b.h.weight_decay = 0.0f;
  if (ww > 0 && gg > 0) {
    double pn = sqrt(ww), f = a->h.larc_eta * pn / (sqrt(gg) + a->h.weight_decay * pn + eps);
    if (a->h.larc_clip) f = fmin(f / a->h.lr, 1.0);
    b.grad_scale = (float)(a->grad_scale * f);
    b.h.weight_decay = (float)(a->h.weight_decay * f);
  }
  _tsr_optim_ops_of(a->h.kind)->larc_cpu(&b, n, w, g, state);
}

void _tsr_optim_update_cpu(const struct _tsr_optim_args *a, size_t n, float *w, const float *g, float *const *state) {
  if (a->h.larc)
    larc_update(a, n, w, g, state);
  else
    _tsr_optim_ops_of(a->h.kind)->cpu(a, n, w, g, state);
}

tsr_status _tsr_optim_check(const tsr_optim_spec *spec) {
  const struct _tsr_optim_ops *e = _tsr_optim_ops_of(spec->kind);
  if (!e) return _tsr_error(TSR_ERR_ARG, "optimizer kind %d is not registered", (int)spec->kind);
  if (spec->larc && !e->larc_cpu)
    return _tsr_error(TSR_ERR_ARG, "optimizer '%s': LARC wraps only sgd, adam and adamw", e->name);
  if (spec->larc && !(spec->larc_eta > 0))
    return _tsr_error(TSR_ERR_ARG, "optimizer '%s': larc_eta must be > 0 (got %g)", e->name, spec->larc_eta);
  return TSR_OK;
}

/* The state buffers of a task whose buffers from index `first` on are the optimizer's state: 2 for
 * the update (w, g, state...), 1 for the direction (g, state...). */
static void state_of(void *buffers[], int first, int nstate, float **state) {
  for (int k = 0; k < nstate; k++) state[k] = TSR_BUF(buffers, first + k);
}

static void opt_update_cpu(void *buffers[], void *cl_arg) {
  const struct _tsr_optim_args *a = cl_arg;
  float *state[TSR_OPTIM_MAX_STATE];
  state_of(buffers, 2, _tsr_optim_ops_of(a->h.kind)->nstate, state);
  _tsr_worker_enter();
  _tsr_optim_update_cpu(a, TSR_NX(buffers, 0), TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), state);
}

/* With loss scaling: a skipped step leaves w and the state untouched and does not count in the step
 * number. */
static void opt_update_gated_cpu(void *buffers[], void *cl_arg) {
  struct _tsr_optim_args a = *(const struct _tsr_optim_args *)cl_arg;
  int nstate = _tsr_optim_ops_of(a.h.kind)->nstate;
  const struct _tsr_scale_state *s = (const struct _tsr_scale_state *)STARPU_VARIABLE_GET_PTR(buffers[2 + nstate]);
  if (!s->apply) return;
  float *state[TSR_OPTIM_MAX_STATE];
  state_of(buffers, 2, nstate, state);
  _tsr_worker_enter();
  a.grad_scale = s->unscale;
  a.step -= s->skipped;
  _tsr_optim_update_cpu(&a, TSR_NX(buffers, 0), TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), state);
}

#ifdef TSR_CUDA_CODELETS
/* gated: the scaler's state is read on the device by the kernel */
static void update_cuda(void *b[], const struct _tsr_optim_args *a, int gated) {
  const struct _tsr_optim_ops *ops = _tsr_optim_ops_of(a->h.kind);
  float *state[TSR_OPTIM_MAX_STATE];
  state_of(b, 2, ops->nstate, state);
  const struct _tsr_scale_state *gate =
      gated ? (const struct _tsr_scale_state *)STARPU_VARIABLE_GET_PTR(b[2 + ops->nstate]) : NULL;
  TSR_CUDA_RUN(ops->cuda(TSR_CUDA_STREAM, a, TSR_NX(b, 0), TSR_BUF(b, 0), TSR_BUF(b, 1), state, gate));
}
static void opt_update_cpu_cuda(void *b[], void *a) { update_cuda(b, a, 0); }
static void opt_update_gated_cpu_cuda(void *b[], void *a) { update_cuda(b, a, 1); }

static int can_execute(unsigned worker, struct starpu_task *task, unsigned nimpl) {
  const struct _tsr_optim_args *a = task->cl_arg;
  return starpu_worker_get_type((int)worker) != STARPU_CUDA_WORKER || (_tsr_optim_ops_of(a->h.kind)->cuda && !a->h.larc);
}
#define CAN_EXECUTE .can_execute = can_execute,
#else
#define CAN_EXECUTE
#endif

static struct starpu_perfmodel update_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_opt_update"};
static struct starpu_perfmodel update_gated_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_opt_update_gated"};

static struct starpu_codelet cl_update = {
    .cpu_funcs = {opt_update_cpu}, TSR_CUDA_FUNCS(opt_update_cpu_cuda) CAN_EXECUTE
    .cpu_funcs_name = {"opt_update_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_opt_update",
    .model = &update_model,
};

static struct starpu_codelet cl_update_gated = {
    .cpu_funcs = {opt_update_gated_cpu}, TSR_CUDA_FUNCS(opt_update_gated_cpu_cuda) CAN_EXECUTE
    .cpu_funcs_name = {"opt_update_gated_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_opt_update_gated",
    .model = &update_gated_model,
};

int _tsr_optim_submit(const struct _tsr_optim_args *a, starpu_data_handle_t w, starpu_data_handle_t g,
                      const starpu_data_handle_t *state, starpu_data_handle_t scaler, const char *name) {
  int nstate = _tsr_optim_ops_of(a->h.kind)->nstate;
  struct _tsr_buf bufs[3 + TSR_OPTIM_MAX_STATE] = {{w, STARPU_RW}, {g, STARPU_R}};
  for (int k = 0; k < nstate; k++) bufs[2 + k] = (struct _tsr_buf){state[k], STARPU_RW};
  bufs[2 + nstate] = (struct _tsr_buf){scaler, STARPU_R};
  if (scaler) return _tsr_submit(&cl_update_gated, a, sizeof(*a), STARPU_DEFAULT_PRIO, name, 3 + nstate, bufs);
  return _tsr_submit(&cl_update, a, sizeof(*a), STARPU_DEFAULT_PRIO, name, 2 + nstate, bufs);
}

/* buffers: g (RW), state... (RW) */
static void opt_direction_cpu(void *buffers[], void *cl_arg) {
  const struct _tsr_optim_args *a = cl_arg;
  const struct _tsr_optim_ops *ops = _tsr_optim_ops_of(a->h.kind);
  float *state[TSR_OPTIM_MAX_STATE];
  state_of(buffers, 1, ops->nstate, state);
  _tsr_worker_enter();
  ops->direction(a, TSR_NX(buffers, 1), TSR_BUF(buffers, 0), state); /* the state's length: g is padded */
}

/* buffers: w (RW), d (R) */
static void opt_apply_cpu(void *buffers[], void *cl_arg) {
  const struct _tsr_optim_args *a = cl_arg;
  _tsr_worker_enter();
  _tsr_optim_ops_of(a->h.kind)->apply(a, TSR_NX(buffers, 0), TSR_BUF(buffers, 0), TSR_BUF(buffers, 1));
}

#ifdef TSR_CUDA_CODELETS
static void opt_direction_cpu_cuda(void *b[], void *cl_arg) {
  const struct _tsr_optim_args *a = cl_arg;
  const struct _tsr_optim_ops *ops = _tsr_optim_ops_of(a->h.kind);
  float *state[TSR_OPTIM_MAX_STATE];
  state_of(b, 1, ops->nstate, state);
  TSR_CUDA_RUN(ops->direction_cuda(TSR_CUDA_STREAM, a, TSR_NX(b, 1), TSR_BUF(b, 0), state));
}
static void opt_apply_cpu_cuda(void *b[], void *cl_arg) {
  const struct _tsr_optim_args *a = cl_arg;
  TSR_CUDA_RUN(_tsr_optim_ops_of(a->h.kind)->apply_cuda(TSR_CUDA_STREAM, a, TSR_NX(b, 0), TSR_BUF(b, 0), TSR_BUF(b, 1)));
}
static int can_execute_halves(unsigned worker, struct starpu_task *task, unsigned nimpl) {
  const struct _tsr_optim_args *a = task->cl_arg;
  const struct _tsr_optim_ops *ops = _tsr_optim_ops_of(a->h.kind);
  return starpu_worker_get_type((int)worker) != STARPU_CUDA_WORKER || (ops->direction_cuda && ops->apply_cuda);
}
#define CAN_EXECUTE_HALVES .can_execute = can_execute_halves,
#else
#define CAN_EXECUTE_HALVES
#endif

static struct starpu_perfmodel direction_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_opt_direction"};
static struct starpu_perfmodel apply_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_opt_apply"};
static struct starpu_codelet cl_direction = {
    .cpu_funcs = {opt_direction_cpu}, TSR_CUDA_FUNCS(opt_direction_cpu_cuda) CAN_EXECUTE_HALVES
    .cpu_funcs_name = {"opt_direction_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_opt_direction",
    .model = &direction_model,
};
static struct starpu_codelet cl_apply = {
    .cpu_funcs = {opt_apply_cpu}, TSR_CUDA_FUNCS(opt_apply_cpu_cuda) CAN_EXECUTE_HALVES
    .cpu_funcs_name = {"opt_apply_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_opt_apply",
    .model = &apply_model,
};

int _tsr_optim_submit_direction(const struct _tsr_optim_args *a, starpu_data_handle_t g,
                                const starpu_data_handle_t *state, const char *name) {
  int nstate = _tsr_optim_ops_of(a->h.kind)->nstate;
  struct _tsr_buf bufs[1 + TSR_OPTIM_MAX_STATE] = {{g, STARPU_RW}};
  for (int k = 0; k < nstate; k++) bufs[1 + k] = (struct _tsr_buf){state[k], STARPU_RW};
  return _tsr_submit(&cl_direction, a, sizeof(*a), STARPU_DEFAULT_PRIO, name, 1 + nstate, bufs);
}

int _tsr_optim_submit_apply(const struct _tsr_optim_args *a, starpu_data_handle_t w, starpu_data_handle_t d,
                            const char *name) {
  struct _tsr_buf bufs[2] = {{w, STARPU_RW}, {d, STARPU_R}};
  return _tsr_submit(&cl_apply, a, sizeof(*a), STARPU_DEFAULT_PRIO, name, 2, bufs);
}

/* Dynamic loss scaling: the policy (halve on overflow and skip, double after a run of finite steps,
 * clamped to [2^-24, 2^40] so that repeated overflows or long runs cannot reach 0 or inf) and the
 * three tasks that run it inside the step graph: scale the loss gradient, check the reduced
 * gradients of a group, decide the step. All ranks decide alike because they check the same
 * reduced values. */
#include <stdlib.h>

#include "convert.h"
#include "cuda_util.h"
#include "optim/loss_scale.h"
#include "runtime/error.h"

tsr_status _tsr_loss_scaler_init(struct _tsr_loss_scaler *p, struct _tsr_scale_state *s, double init_scale,
                                 int growth_interval) {
  if (!p || !s) return _tsr_error(TSR_ERR_ARG, "loss scaler: NULL scaler");
  if (!(init_scale > 0) || init_scale > 0x1p127)
    return _tsr_error(TSR_ERR_ARG, "loss scaler: initial scale %g (must be in (0, 2^127])", init_scale);
  if (growth_interval < 1)
    return _tsr_error(TSR_ERR_ARG, "loss scaler: growth interval %d (must be >= 1)", growth_interval);
  *p = (struct _tsr_loss_scaler){.growth = 2.0, .backoff = 0.5, .min_scale = 0x1p-24, .max_scale = 0x1p40,
                                 .growth_interval = growth_interval};
  *s = (struct _tsr_scale_state){.scale = init_scale, .unscale = 1.0f, .apply = 1};
  return TSR_OK;
}

int _tsr_loss_scaler_update(const struct _tsr_loss_scaler *p, struct _tsr_scale_state *s, int grads_finite) {
  s->steps++;
  if (!grads_finite) {
    s->skipped++;
    s->good_steps = 0;
    s->scale *= p->backoff;
    if (s->scale < p->min_scale) s->scale = p->min_scale;
    return 0;
  }
  if (++s->good_steps >= p->growth_interval) {
    s->good_steps = 0;
    if (s->scale * p->growth <= p->max_scale) s->scale *= p->growth;
  }
  return 1;
}

float _tsr_loss_scaler_unscale(double scale, int ranks) { return (float)(1.0 / (scale * (ranks > 0 ? ranks : 1))); }

/* ---- tasks ---- */

static void scale_grad_cpu(void *buffers[], void *cl_arg) {
  const struct starpu_task *task = starpu_task_get_current();
  float s = task->nbuffers > 1 ? (float)((struct _tsr_scale_state *)STARPU_VARIABLE_GET_PTR(buffers[1]))->scale
                               : (float)*(const double *)cl_arg;
  float *x = TSR_BUF(buffers, 0);
  size_t n = TSR_NX(buffers, 0);
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

static void scale_check_cpu(void *buffers[], void *cl_arg) {
  const struct starpu_task *task = starpu_task_get_current();
  struct _tsr_scale_state *s = (struct _tsr_scale_state *)STARPU_VARIABLE_GET_PTR(buffers[0]);
  for (int i = 1; i < task->nbuffers && !s->overflow; i++)
    if (!_tsr_all_finite_cpu(TSR_BUF(buffers, i), TSR_NX(buffers, i))) s->overflow = 1;
}

struct decide_arg {
  struct _tsr_loss_scaler policy;
  int ranks;
};

static void scale_decide_cpu(void *buffers[], void *cl_arg) {
  const struct decide_arg *a = cl_arg;
  struct _tsr_scale_state *s = (struct _tsr_scale_state *)STARPU_VARIABLE_GET_PTR(buffers[0]);
  s->unscale = _tsr_loss_scaler_unscale(s->scale, a->ranks);
  s->apply = _tsr_loss_scaler_update(&a->policy, s, !s->overflow);
  s->overflow = 0;
}

#ifdef TSR_CUDA_CODELETS
/* CUDA (loss_scale_cuda.cu). scale_grad: x[, state]; cl_arg the fixed scale. scale_check: state,
 * then the gradients. */
static void scale_grad_cpu_cuda(void *b[], void *a) {
  double fixed;
  memcpy(&fixed, a, sizeof fixed);
  const struct _tsr_scale_state *state =
      STARPU_TASK_GET_NBUFFERS(starpu_task_get_current()) > 1 ? (const void *)STARPU_VARIABLE_GET_PTR(b[1]) : NULL;
  TSR_CUDA_RUN(_tsr_scale_grad_cuda(TSR_CUDA_STREAM, TSR_NX(b, 0), TSR_BUF(b, 0), state, fixed));
}
static void scale_check_cpu_cuda(void *b[], void *a) {
  struct _tsr_scale_state *state = (void *)STARPU_VARIABLE_GET_PTR(b[0]);
  int n = STARPU_TASK_GET_NBUFFERS(starpu_task_get_current());
  for (int i = 1; i < n; i++) TSR_CUDA_RUN(_tsr_scale_check_cuda(TSR_CUDA_STREAM, TSR_NX(b, i), TSR_BUF(b, i), state));
}
#endif

static struct starpu_perfmodel scale_grad_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_scale_grad"};
static struct starpu_perfmodel scale_check_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_scale_check"};
static struct starpu_perfmodel scale_decide_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_scale_decide"};
static struct starpu_codelet cl_scale_grad = {.cpu_funcs = {scale_grad_cpu}, TSR_CUDA_FUNCS(scale_grad_cpu_cuda)
                                              .cpu_funcs_name = {"scale_grad_cpu"},
                                              .nbuffers = STARPU_VARIABLE_NBUFFERS, .name = "tsr_scale_grad",
                                              .model = &scale_grad_model};
static struct starpu_codelet cl_scale_check = {.cpu_funcs = {scale_check_cpu}, TSR_CUDA_FUNCS(scale_check_cpu_cuda)
                                               .cpu_funcs_name = {"scale_check_cpu"},
                                               .nbuffers = STARPU_VARIABLE_NBUFFERS, .name = "tsr_scale_check",
                                               .model = &scale_check_model};
static struct starpu_codelet cl_scale_decide = {.cpu_funcs = {scale_decide_cpu},
                                                .cpu_funcs_name = {"scale_decide_cpu"},
                                                .nbuffers = STARPU_VARIABLE_NBUFFERS, .name = "tsr_scale_decide",
                                                .model = &scale_decide_model};

int _tsr_insert_scale_grad(starpu_data_handle_t x, starpu_data_handle_t state, double fixed, const char *name) {
  struct _tsr_buf b[2] = {{x, STARPU_RW}, {state, STARPU_R}};
  return _tsr_submit(&cl_scale_grad, &fixed, sizeof fixed, STARPU_DEFAULT_PRIO, name, state ? 2 : 1, b);
}

int _tsr_insert_scale_check(starpu_data_handle_t state, int n, const starpu_data_handle_t *grads, const char *name) {
  struct _tsr_buf *b = malloc((size_t)(n + 1) * sizeof *b);
  if (!b) return _tsr_error(TSR_ERR_NOMEM, "loss scaler: out of memory"), -1;
  b[0] = (struct _tsr_buf){state, STARPU_RW | STARPU_COMMUTE};
  for (int i = 0; i < n; i++) b[i + 1] = (struct _tsr_buf){grads[i], STARPU_R};
  int ret = _tsr_submit(&cl_scale_check, NULL, 0, STARPU_MAX_PRIO, name, n + 1, b);
  free(b);
  return ret;
}

int _tsr_insert_scale_decide(starpu_data_handle_t state, const struct _tsr_loss_scaler *p, int ranks) {
  struct decide_arg a = {*p, ranks};
  struct _tsr_buf b = {state, STARPU_RW};
  return _tsr_submit(&cl_scale_decide, &a, sizeof a, STARPU_MAX_PRIO, "loss_scale_decide", 1, &b);
}

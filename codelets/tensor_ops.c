/* Elementary tensor tasks the graph needs between operations: zeroing, filling the control word,
 * summing gradient contributions of several consumers, copying, and the per-step collection of the slices' losses
 * into host memory (the only task the host waits on). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "convert.h"
#include "cuda_util.h"
#include "runtime/error.h"

void _tsr_zero_cpu(float *x, size_t n) { memset(x, 0, n * sizeof(*x)); }

void _tsr_axpy_cpu(float *restrict y, const float *restrict x, float a, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

void _tsr_copy_cpu(float *y, const float *x, size_t n) {
  if (y != x) memcpy(y, x, n * sizeof(*y));
}

/* ---- codelets: buffer 0 is the output, buffer 1 (if any) the input ---- */

static void zero_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  _tsr_zero_cpu(TSR_BUF(buffers, 0), TSR_NX(buffers, 0));
}

/* float32 y += x, or both bf16 (vectors of 2-byte elements: gradients stored in bf16) y = bf16(y + x) */
static void accumulate_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  if (STARPU_VECTOR_GET_ELEMSIZE(buffers[0]) == sizeof(uint16_t))
    _tsr_bf16_add_cpu((uint16_t *)STARPU_VECTOR_GET_PTR(buffers[0]), (const uint16_t *)STARPU_VECTOR_GET_PTR(buffers[1]),
                      TSR_NX(buffers, 0));
  else
    _tsr_axpy_cpu(TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), 1.0f, TSR_NX(buffers, 0));
}

static void copy_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  _tsr_copy_cpu(TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_NX(buffers, 0));
}

static void fill_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  float v;
  memcpy(&v, cl_arg, sizeof v);
  float *x = TSR_BUF(buffers, 0);
  _tsr_zero_cpu(x, TSR_NX(buffers, 0));
  x[0] = v;
}

/* cl_arg: {double *out, double *ctl_out}; with ctl_out, the last buffer is the control word. */
static void loss_sum_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  double *out, *ctl_out;
  memcpy(&out, cl_arg, sizeof(out));
  memcpy(&ctl_out, (char *)cl_arg + sizeof(out), sizeof(ctl_out));
  int k = STARPU_TASK_GET_NBUFFERS(starpu_task_get_current());
  if (ctl_out) *ctl_out = ((const float *)STARPU_VECTOR_GET_PTR(buffers[--k]))[0];
  double s = 0; /* fixed order: the reported loss does not depend on scheduling */
  for (int i = 0; i < k; i++) {
    const double *l = (const double *)STARPU_VECTOR_GET_PTR(buffers[i]);
    size_t nx = STARPU_VECTOR_GET_NX(buffers[i]);
    for (size_t j = 0; j < nx; j++) s += l[j];
  }
  *out = s;
}

#ifdef TSR_CUDA_CODELETS
/* CUDA (tensor_ops_cuda.cu) */
static void zero_cpu_cuda(void *b[], void *a) { TSR_CUDA_RUN(_tsr_zero_cuda(TSR_BUF(b, 0), TSR_NX(b, 0), TSR_CUDA_STREAM)); }
static void accumulate_cpu_cuda(void *b[], void *a) { TSR_CUDA_RUN(_tsr_axpy_cuda(TSR_BUF(b, 0), TSR_BUF(b, 1), 1.0f, TSR_NX(b, 0), TSR_CUDA_STREAM)); }
static void copy_cpu_cuda(void *b[], void *a) { TSR_CUDA_RUN(_tsr_copy_cuda(TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_NX(b, 0), TSR_CUDA_STREAM)); }
static void fill_cpu_cuda(void *b[], void *a) {
  float v;
  memcpy(&v, a, sizeof v);
  TSR_CUDA_RUN(_tsr_fill_cuda(TSR_BUF(b, 0), TSR_NX(b, 0), v, TSR_CUDA_STREAM));
}
#endif

static struct starpu_perfmodel zero_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_zero"};
static struct starpu_perfmodel accumulate_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_accumulate"};
static struct starpu_perfmodel copy_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_copy"};
static struct starpu_perfmodel fill_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_fill"};
static struct starpu_perfmodel loss_sum_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_loss_sum"};

static struct starpu_codelet cl_zero = {
    .cpu_funcs = {zero_cpu}, TSR_CUDA_FUNCS(zero_cpu_cuda)
    .cpu_funcs_name = {"zero_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_zero",
    .model = &zero_model,
};
static struct starpu_codelet cl_accumulate = {
    .cpu_funcs = {accumulate_cpu}, TSR_CUDA_FUNCS(accumulate_cpu_cuda)
    .cpu_funcs_name = {"accumulate_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_accumulate",
    .model = &accumulate_model,
};
static struct starpu_codelet cl_copy = {
    .cpu_funcs = {copy_cpu}, TSR_CUDA_FUNCS(copy_cpu_cuda)
    .cpu_funcs_name = {"copy_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_copy",
    .model = &copy_model,
};
static struct starpu_codelet cl_fill = {
    .cpu_funcs = {fill_cpu}, TSR_CUDA_FUNCS(fill_cpu_cuda)
    .cpu_funcs_name = {"fill_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_fill",
    .model = &fill_model,
};
static struct starpu_codelet cl_loss_sum = {
    .cpu_funcs = {loss_sum_cpu},
    .cpu_funcs_name = {"loss_sum_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_loss_sum",
    .model = &loss_sum_model,
};

int _tsr_insert_zero(starpu_data_handle_t x, const char *name) {
  struct _tsr_buf b[] = {{x, STARPU_W}};
  return _tsr_submit(&cl_zero, NULL, 0, STARPU_DEFAULT_PRIO, name, 1, b);
}

/* Plain RW, not the commutative mode: the graph sums several consumers' contributions in a fixed
 * order so that results are reproducible. */
int _tsr_insert_accumulate_prio(starpu_data_handle_t y, starpu_data_handle_t x, const char *name, int prio) {
  struct _tsr_buf b[] = {{y, STARPU_RW}, {x, STARPU_R}};
  return _tsr_submit(&cl_accumulate, NULL, 0, prio, name, 2, b);
}

int _tsr_insert_accumulate(starpu_data_handle_t y, starpu_data_handle_t x, const char *name) {
  return _tsr_insert_accumulate_prio(y, x, name, STARPU_DEFAULT_PRIO);
}

int _tsr_insert_accumulate_grad(starpu_data_handle_t y, starpu_data_handle_t x, const char *name) {
  struct _tsr_buf b[] = {{y, _tsr_accum_mode()}, {x, STARPU_R}};
  return _tsr_submit(&cl_accumulate, NULL, 0, STARPU_DEFAULT_PRIO, name, 2, b);
}

int _tsr_insert_fill(starpu_data_handle_t x, float value, const char *name) {
  struct _tsr_buf b[] = {{x, STARPU_W}};
  return _tsr_submit(&cl_fill, &value, sizeof value, STARPU_DEFAULT_PRIO, name, 1, b);
}

int _tsr_insert_copy(starpu_data_handle_t y, starpu_data_handle_t x, const char *name) {
  struct _tsr_buf b[] = {{y, STARPU_W}, {x, STARPU_R}};
  return _tsr_submit(&cl_copy, NULL, 0, STARPU_DEFAULT_PRIO, name, 2, b);
}

/* Built here rather than by _tsr_submit because the host must wait on it: the task is not
 * detached. The caller must call starpu_task_wait(*task_out) exactly once; that also frees the task
 * (destroy stays 1, and StarPU 1.3 frees a non-detached task with destroy set inside
 * starpu_task_wait). starpu_task_wait_for_all() alone would leak it. */
int _tsr_insert_loss_sum(int k, const starpu_data_handle_t *losses, double *out, const char *name,
                         struct starpu_task **task_out) {
  return _tsr_insert_loss_sum_ctl(k, losses, NULL, NULL, out, name, task_out);
}

int _tsr_insert_loss_sum_ctl(int k, const starpu_data_handle_t *losses, starpu_data_handle_t ctl, double *ctl_out,
                             double *out, const char *name, struct starpu_task **task_out) {
  *task_out = NULL;
  if (!ctl) ctl_out = NULL;
  if (k < 0) {
    _tsr_error(TSR_ERR_ARG, "task '%s': %d loss handles", name, k);
    return -EINVAL;
  }
  struct starpu_task *task = starpu_task_create();
  task->cl = &cl_loss_sum;
  task->name = name;
  task->detach = 0;
  int nb = k + (ctl_out != NULL);
  double **arg = malloc(2 * sizeof(*arg));
  starpu_data_handle_t *dh = nb > STARPU_NMAXBUFS ? malloc(nb * sizeof(*dh)) : NULL;
  enum starpu_data_access_mode *dm = nb > STARPU_NMAXBUFS ? malloc(nb * sizeof(*dm)) : NULL;
  if (!arg || (nb > STARPU_NMAXBUFS && (!dh || !dm))) {
    free(arg);
    free(dh);
    free(dm);
    starpu_task_destroy(task);
    _tsr_error(TSR_ERR_NOMEM, "task '%s': cannot allocate its arguments", name);
    return -ENOMEM;
  }
  arg[0] = out, arg[1] = ctl_out;
  task->cl_arg = arg;
  task->cl_arg_size = 2 * sizeof(*arg);
  task->cl_arg_free = 1;
  task->nbuffers = nb;
  if (dh) {
    task->dyn_handles = dh;
    task->dyn_modes = dm;
  }
  for (int i = 0; i < nb; i++) {
    starpu_data_handle_t h = i < k ? losses[i] : ctl;
    if (dh) {
      dh[i] = h;
      dm[i] = STARPU_R;
    } else {
      task->handles[i] = h;
      task->modes[i] = STARPU_R;
    }
  }
  int ret = _tsr_submit_task(task, name);
  if (ret != 0) return ret;
  *task_out = task;
  return 0;
}

/* The one place where Tessera tasks are created and submitted (see submit.h). */
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/submit.h"
#include "runtime/switches.h"

static _Atomic(_tsr_submit_hook_fn) submit_hook;

void _tsr_submit_set_hook(_tsr_submit_hook_fn hook) { atomic_store(&submit_hook, hook); }

enum starpu_data_access_mode _tsr_accum_mode(void) {
  return _tsr_get_deterministic() ? STARPU_RW : (enum starpu_data_access_mode)(STARPU_RW | STARPU_COMMUTE);
}

starpu_data_handle_t _tsr_register_floats(float *ptr, size_t n) { return _tsr_register_values(ptr, n, 0); }

starpu_data_handle_t _tsr_register_values(void *ptr, size_t n, int bf16) {
  starpu_data_handle_t h = NULL;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)ptr, (uint32_t)n, bf16 ? sizeof(uint16_t) : sizeof(float));
  return h;
}

int _tsr_submit_task(struct starpu_task *task, const char *name) {
  _tsr_submit_hook_fn hook = atomic_load_explicit(&submit_hook, memory_order_relaxed);
  if (hook) hook(task);
  int ret = starpu_task_submit(task);
  if (ret != 0) {
    _tsr_error(TSR_ERR_RUNTIME, "task '%s' (%s): starpu_task_submit failed: %s", name,
               task->cl && task->cl->name ? task->cl->name : "?", strerror(-ret));
    task->destroy = 0;
    starpu_task_destroy(task);
  }
  return ret;
}

/* Where a task's copy of its arguments starts in the block _tsr_submit allocates for both. */
#define ARGS_ALIGN _Alignof(max_align_t)
#define ARGS_AT ((sizeof(struct starpu_task) + ARGS_ALIGN - 1) / ARGS_ALIGN * ARGS_ALIGN)

int _tsr_submit(struct starpu_codelet *cl, const void *arg, size_t arg_size, int priority, const char *name, int nbufs,
                const struct _tsr_buf *bufs) {
  /* The task and the copy of its arguments in one block, set up as starpu_task_create does
   * (starpu_task_init, destroy = 1): StarPU releases a task it destroys with free(), and the copy
   * goes with it (cl_arg_free stays 0). One malloc on the submitting thread and one free on the
   * worker per task instead of two of each (bench/README.md, "Task Bench"). */
  struct starpu_task *task = malloc(ARGS_AT + arg_size);
  if (!task) {
    _tsr_error(TSR_ERR_NOMEM, "task '%s': cannot allocate a task with %zu bytes of arguments", name, arg_size);
    return -ENOMEM;
  }
  starpu_task_init(task);
  task->destroy = 1;
  task->cl = cl;
  /* Deterministic mode with GPUs: a task that can run on a GPU always does, since a CPU kernel and
   * its CUDA twin round differently and the scheduler's choice would show in the results. The same
   * placement when the user asks for it (gpu_only), so no convolution lands on a CPU worker. */
  uint32_t where = _tsr_get_where();
  if (!where && (_tsr_get_deterministic() || _tsr_get_gpu_only()) && starpu_cuda_worker_get_count())
    where = STARPU_CUDA;
  if ((where == STARPU_CUDA && cl->cuda_funcs[0]) || (where == STARPU_CPU && cl->cpu_funcs[0])) task->where = where;
  task->name = name;
  task->priority = priority;
  if (arg_size) {
    task->cl_arg = memcpy((char *)task + ARGS_AT, arg, arg_size);
    task->cl_arg_size = arg_size;
  }
  task->nbuffers = nbufs;
  if (nbufs > STARPU_NMAXBUFS) {
    task->dyn_handles = malloc(nbufs * sizeof(*task->dyn_handles));
    task->dyn_modes = malloc(nbufs * sizeof(*task->dyn_modes));
    if (!task->dyn_handles || !task->dyn_modes) {
      free(task->dyn_handles);
      free(task->dyn_modes);
      task->dyn_handles = NULL;
      task->dyn_modes = NULL;
      task->destroy = 0;
      starpu_task_destroy(task);
      _tsr_error(TSR_ERR_NOMEM, "task '%s': cannot allocate %d buffer slots", name, nbufs);
      return -ENOMEM;
    }
    for (int i = 0; i < nbufs; i++) {
      task->dyn_handles[i] = bufs[i].h;
      task->dyn_modes[i] = bufs[i].mode;
    }
  } else {
    for (int i = 0; i < nbufs; i++) {
      task->handles[i] = bufs[i].h;
      task->modes[i] = bufs[i].mode;
    }
  }
  return _tsr_submit_task(task, name);
}

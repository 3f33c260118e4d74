/* The one place where Tessera tasks are created and submitted (codelets' insert functions call it),
 * so naming, priorities, argument copies, the tracing hook and placement rules are switched here
 * only. The trace (src/trace) installs its hook here: the runtime never calls up into it. */
#ifndef TSR_RUNTIME_SUBMIT_H
#define TSR_RUNTIME_SUBMIT_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>

#ifdef __cplusplus /* the CUDA launchers (*.cu) see these declarations through codelets.h */
extern "C" {
#endif

/* Every Tessera codelet declares .nbuffers = STARPU_VARIABLE_NBUFFERS and no .modes: access modes
 * come from the task (gradient accumulations switch between RW and RW|COMMUTE at run time). */
struct _tsr_buf {
  starpu_data_handle_t h;
  enum starpu_data_access_mode mode;
};

/* The insert wrapper: copies `arg` (arg_size bytes) into the task, names it, sets priority,
 * submits. Any number of buffers (dynamic handles past STARPU_NMAXBUFS). Returns 0 or -errno
 * style StarPU code; on failure it has set tsr_last_error. */
int _tsr_submit(struct starpu_codelet *cl, const void *arg, size_t arg_size, int priority,
                const char *name, int nbufs, const struct _tsr_buf *bufs);
/* Submits a task its caller built (buffers and arguments set): placement rule and hook applied as
 * in _tsr_submit. On failure the task is destroyed and tsr_last_error set. */
int _tsr_submit_task(struct starpu_task *task, const char *name);
/* Access mode for gradient accumulations: STARPU_RW|STARPU_COMMUTE, or STARPU_RW alone in
 * deterministic mode (fixed order = submission order). */
enum starpu_data_access_mode _tsr_accum_mode(void);
/* Registers a host buffer of n floats as a vector handle. */
starpu_data_handle_t _tsr_register_floats(float *ptr, size_t n);
/* The same for n values stored in bf16 (2-byte elements) when bf16, else in float32. */
starpu_data_handle_t _tsr_register_values(void *ptr, size_t n, int bf16);

/* Pointer/length of a vector handle's buffer inside a codelet. */
#define TSR_BUF(buffers, i) ((float *)STARPU_VECTOR_GET_PTR((buffers)[i]))
#define TSR_NX(buffers, i) (STARPU_VECTOR_GET_NX((buffers)[i]))
#define TSR_DBUF(buffers, i) ((double *)STARPU_VECTOR_GET_PTR((buffers)[i]))

/* A function run on every task right before starpu_task_submit (the trace's recorder); NULL: none.
 * Installed once by whoever records tasks; it decides itself whether to act. */
typedef void (*_tsr_submit_hook_fn)(struct starpu_task *task);
void _tsr_submit_set_hook(_tsr_submit_hook_fn hook);

#ifdef __cplusplus
}
#endif
#endif

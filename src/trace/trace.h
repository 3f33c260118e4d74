/* Internal tracing API. Recording (record.c): the submit hook every task passes through, the step
 * setter, MPI transfer events and the clock. Reading and analysing traces is src/trace_analysis.
 * Times are microseconds. */
#ifndef TSR_TRACE_INTERNAL_H
#define TSR_TRACE_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <tessera/trace.h>

struct starpu_task;

/* Widths of a task's name and operation in the raw files (written here, read by trace_analysis). */
#define TSR_TRACE_NAME 72
#define TSR_TRACE_OP 40

/* ---- recording (record.c) ---- */

extern atomic_int _tsr_trace_active;
/* Called by _tsr_submit (and the loss-sum insert) right before starpu_task_submit: when tracing is
 * on and the current step lies in the window, installs a callback that records the task. Any
 * callback already set on the task still runs. */
void _tsr_trace_task_hook(struct starpu_task *task);
static inline void _tsr_trace_task(struct starpu_task *task) {
  if (atomic_load_explicit(&_tsr_trace_active, memory_order_relaxed)) _tsr_trace_task_hook(task);
}
/* The step whose tasks are being submitted (set by the graph before submitting a step). */
void _tsr_trace_set_step(int64_t step);
int64_t _tsr_trace_get_step(void);
/* The trace clock, microseconds: starpu_timing_now(), the clock of StarPU's profiling times, which
 * counts from starpu_init (so it differs between ranks: tsr_trace_stop measures the offsets). */
double _tsr_trace_now_us(void);
/* One MPI transfer: posted at post_us, complete at done_us (both _tsr_trace_now_us()), from any
 * thread. The step is the one being submitted when the transfer was posted by the graph: pass it
 * explicitly with _tsr_trace_transfer_step, or use _tsr_trace_transfer, which assigns the transfer
 * to a step later by time (the latest-started step running at post_us). */
void _tsr_trace_transfer(int peer, size_t bytes, int64_t tag, double post_us, double done_us, int is_send);
void _tsr_trace_transfer_step(int64_t step, int peer, size_t bytes, int64_t tag, double post_us, double done_us,
                              int is_send);
/* For starpu_mpi_isend/irecv_detached: when tracing, returns a callback argument recording the
 * post time now (NULL when not tracing: pass NULL callback then); _tsr_trace_xfer_done, used as
 * the request's callback, records the transfer with the completion time and frees the argument:
 *   void *a = _tsr_trace_xfer_arg(step, peer, bytes, tag, 1);
 *   starpu_mpi_isend_detached(h, peer, tag, comm, a ? _tsr_trace_xfer_done : NULL, a); */
void *_tsr_trace_xfer_arg(int64_t step, int peer, size_t bytes, int64_t tag, int is_send);
void _tsr_trace_xfer_done(void *arg);
/* A gradient group's reduction submitted for `step` (g: its index, bytes: its float32 size): the
 * marker lies between the tasks submitted before and after it (their sequence numbers), so a replay
 * (src/scale) finds the group's gradients and its updates even in a 1-rank trace, where the
 * reduction submits nothing. Host thread only. */
void _tsr_trace_group(int64_t step, int g, uint64_t bytes);
/* Tasks recorded since tsr_trace_start (tests). */
uint64_t _tsr_trace_num_hooked(void);

#endif

/* What the trainer's load tasks ask of a loader (src/train calls these, nothing else does): the
 * StarPU handles a task reading a sample must declare (a stream's pool slot; none for files), the
 * notice that such a task was submitted (a pool then schedules the slot's refill), and the read
 * inside the task from the declared buffers. */
#ifndef TSR_DATA_LOADER_TASKS_H
#define TSR_DATA_LOADER_TASKS_H

#include <starpu.h>
#include <stdint.h>

#include <tessera/loader.h>

/* A stream's pool size (a step may read at most that many samples), 0 for files. */
int _tsr_loader_stream_slots(const tsr_loader *l);
/* Handles (input, target) a task reading `index` must read (STARPU_R); left alone for files. Reads
 * of a stream are submitted in the order of the calls. */
tsr_status _tsr_loader_task_deps(tsr_loader *l, int64_t index, starpu_data_handle_t h[2]);
tsr_status _tsr_loader_task_submitted(tsr_loader *l, int64_t index);
/* Inside the task: sample `index` into x and y (standardised if enabled); bx, by are the data of the
 * handles _tsr_loader_task_deps gave (NULL for files). */
tsr_status _tsr_loader_task_read(tsr_loader *l, int64_t index, const float *bx, const float *by, float *x, float *y);

#endif

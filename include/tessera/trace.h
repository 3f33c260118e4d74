/* Performance traces: every task's submit/start/end time, worker, rank, layer, operation and bytes,
 * and every MPI transfer, recorded from StarPU's profiling API. tsr_trace_stop writes one raw file
 * per rank (DIR/rank-R.tsv) and, on rank 0, the merged trace of all ranks on aligned clocks:
 * DIR/trace.json (Chrome trace format: open it in https://ui.perfetto.dev) and DIR/trace.paje (ViTE). */
#ifndef TESSERA_TRACE_H
#define TESSERA_TRACE_H

#include <stdint.h>
#include <stdio.h>
#include <tessera/context.h>
#include <tessera/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Starts recording the tasks of steps first_step..last_step (step ids of tsr_trainer_step/eval;
 * last_step < 0: no end) into folder `dir` (created if missing). Turns StarPU's profiling on. */
tsr_status tsr_trace_start(tsr_context *ctx, const char *dir, int64_t first_step, int64_t last_step);
/* Waits for every submitted task, stops recording and writes the files. Every rank must call it
 * (it estimates clock offsets to rank 0 and waits for all raw files before rank 0 merges them;
 * rank 0 needs the other ranks' files in `dir`: a shared file system, else copy them there and run
 * tsr_trace_merge / tessera-trace --merge). */
tsr_status tsr_trace_stop(tsr_context *ctx);
/* 1 while recording. */
int tsr_trace_active(void);

/* (Re)writes DIR/trace.json and DIR/trace.paje from the raw files DIR/rank-*.tsv. */
tsr_status tsr_trace_merge(const char *dir);

typedef struct tsr_trace_report_opts {
  int64_t first_step, last_step; /* steps reported; last_step < 0: to the last one */
  const char *timeline_data;     /* not NULL: also write the task timeline there as gnuplot data */
} tsr_trace_report_opts;
void tsr_trace_report_opts_default(tsr_trace_report_opts *o);
/* Prints, per step, computation time by layer and operation, communication, idle time, the fraction
 * of communication hidden behind computation and the critical path, reading DIR/rank-*.tsv. */
tsr_status tsr_trace_report(const char *dir, FILE *out, const tsr_trace_report_opts *o);

#ifdef __cplusplus
}
#endif
#endif

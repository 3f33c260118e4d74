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
  /* Not NULL: also write the timeline of those steps there, for a plotting program. Plain text,
   * times in ms from the first task's start; header lines "# rows N" (lanes: each rank's workers,
   * then its MPI sends and its MPI receives), "# ytics (\"r0 CPU 0\" 0, ...)" (gnuplot's syntax)
   * and "# families A|B|..." (operation families, numbered from 0); then three blocks separated by
   * two blank lines, each opened by a comment naming it (gnuplot: index 'tasks:'): tasks "start end
   * lane family critical step" (critical: 1 on its step's critical path), MPI transfers "post done
   * lane is_send bytes peer", steps "begin end step" (over all ranks). */
  const char *timeline_data;
  int detail; /* 0: a one-screen summary of the steps; 1: every step's breakdown (long) */
} tsr_trace_report_opts;
void tsr_trace_report_opts_default(tsr_trace_report_opts *o);
/* Prints a summary of the steps (per rank: wall time per step, critical path, computing and idle
 * shares, communication and the part of it hidden behind computation; the slowest steps; task time
 * by operation family, layer and operation; the critical path of the median step) or, with
 * detail, the same per step with computation by layer and operation, reading DIR/rank-*.tsv. */
tsr_status tsr_trace_report(const char *dir, FILE *out, const tsr_trace_report_opts *o);

#ifdef __cplusplus
}
#endif
#endif

/* Per-task cost of tracing: 20000 small tasks through the insert wrapper (_tsr_submit), alternately
 * without and with tracing, 5 rounds each; prints the wall time per task and the difference, to be
 * multiplied by the tasks of a step (tessera-trace prints them) and compared with its duration.
 * Build: make bench/bench_trace_tasks; run: bench/bench_trace_tasks [ntasks]. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <tessera.h>

#include "codelets.h"
#include "trace/trace.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  setenv("STARPU_SILENT", "1", 0);
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 1, co.use_mpi = 0, co.verbose = 0;
  tsr_context *ctx;
  if (tsr_context_create(&ctx, &co, NULL, NULL) != TSR_OK) return fprintf(stderr, "%s\n", tsr_last_error()), 1;
  enum { K = 8 };
  float buf[K][16];
  starpu_data_handle_t h[K];
  for (int k = 0; k < K; k++) h[k] = _tsr_register_floats(buf[k], 16);
  double best[2] = {1e9, 1e9};
  char dir[] = "/tmp/tessera-bench-tasks-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  for (int round = 0; round < 6; round++) /* round 0 warms up */
    for (int on = 0; on < 2; on++) {
      if (on && tsr_trace_start(ctx, dir, 0, -1) != TSR_OK) return fprintf(stderr, "%s\n", tsr_last_error()), 1;
      double t = now();
      for (int i = 0; i < n; i++)
        if (_tsr_insert_zero(h[i % K], "bench")) return 1;
      starpu_task_wait_for_all();
      t = (now() - t) / n;
      if (on && tsr_trace_stop(ctx) != TSR_OK) return fprintf(stderr, "%s\n", tsr_last_error()), 1;
      if (round && t < best[on]) best[on] = t;
      if (round) printf("round %d %-8s %.2f us per task\n", round, on ? "traced" : "plain", 1e6 * t);
    }
  printf("best of 5: plain %.2f us, traced %.2f us per task: tracing adds %.2f us per task\n", 1e6 * best[0],
         1e6 * best[1], 1e6 * (best[1] - best[0]));
  for (int k = 0; k < K; k++) starpu_data_unregister(h[k]);
  tsr_context_destroy(ctx);
  return 0;
}

/* Internal tracing API. Recording (record.c): the submit hook every task passes through, the step
 * setter, MPI transfer events and the clock. A loaded trace (timeline.c) is a flat list of task and
 * transfer events of every rank on rank 0's clock, read by the writers (chrome.c, paje.c) and the
 * analysis (analysis.c). Times are microseconds. */
#ifndef TSR_TRACE_INTERNAL_H
#define TSR_TRACE_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <tessera/trace.h>

struct starpu_task;

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
/* Tasks recorded since tsr_trace_start (tests). */
uint64_t _tsr_trace_num_hooked(void);

/* ---- a loaded trace (timeline.c) ---- */

#define TSR_TRACE_NAME 72
#define TSR_TRACE_OP 40

struct _tsr_tev {             /* one task */
  uint64_t seq;               /* submission order on its rank */
  int64_t step;
  int rank, worker;
  double submit, start, end;
  uint64_t bytes;
  char name[TSR_TRACE_NAME];  /* task name: layer or tensor ("enc1", "enc1.weight", "load") */
  char op[TSR_TRACE_OP];      /* codelet name without "tsr_" ("conv2d_fwd") */
  int ndeps;
  int *deps;                  /* indices into tl->tasks of the tasks it waited for */
};

struct _tsr_xev {             /* one MPI transfer */
  int64_t step, tag;          /* step -1: assigned by time */
  int rank, peer, is_send;
  uint64_t bytes;
  double post, done;
};

struct _tsr_tl {
  int nranks;
  int *nworkers;              /* [nranks] */
  char ***worker_names;       /* [nranks][nworkers] */
  double *offset;             /* [nranks] added to a rank's clock to get rank 0's */
  double t0;                  /* earliest event (aligned), subtracted by the writers */
  int ntasks, nxfers;
  struct _tsr_tev *tasks;     /* sorted by (rank, seq) */
  struct _tsr_xev *xfers;
};

/* Reads DIR/rank-*.tsv (the raw files written by tsr_trace_stop). */
tsr_status _tsr_tl_load(struct _tsr_tl **tl, const char *dir);
/* An empty timeline for hand-built tests: nranks ranks of nworkers workers, no events. */
struct _tsr_tl *_tsr_tl_new(int nranks, int nworkers);
/* Appends a task (deps: indices of earlier tasks) or a transfer; returns its index or -1. */
int _tsr_tl_add_task(struct _tsr_tl *tl, const struct _tsr_tev *ev, const int *deps, int ndeps);
int _tsr_tl_add_xfer(struct _tsr_tl *tl, const struct _tsr_xev *ev);
/* Sets t0 and gives unassigned transfers (step -1) a step by time. Call once all events are in. */
void _tsr_tl_finish(struct _tsr_tl *tl);
void _tsr_tl_free(struct _tsr_tl *tl);

/* ---- writers ---- */
tsr_status _tsr_tl_write_chrome(const struct _tsr_tl *tl, const char *path);
tsr_status _tsr_tl_write_paje(const struct _tsr_tl *tl, const char *path);

/* ---- analysis (analysis.c) ----
 * Steps overlap (the trainer keeps several in flight), so a step's window holds other steps' tasks
 * too: each task's time counts for its own step (busy); within a step's window, time a worker spends
 * in other steps' tasks is `other`, and only time with no task of any step running is idle. */
struct _tsr_step_stats {
  int64_t step;
  int rank, ntasks, nworkers;
  double begin, end;          /* first task start, last task or transfer end */
  double busy;                /* sum of the step's task durations (worker time) */
  double other;               /* worker time in [begin, end] running tasks of other steps */
  double idle;                /* worker time in [begin, end] with no task running (the rest) */
  double comm;                /* length of the union of the transfer intervals */
  double hidden;              /* part of `comm` during which some worker of the rank computed */
  double critical;            /* longest dependency path, weighted by task durations */
  int ncrit;
  int *crit;                  /* its tasks, first to last (indices into tl->tasks) */
};
/* Statistics of every (step, rank) present, sorted by step then rank. */
tsr_status _tsr_tl_step_stats(const struct _tsr_tl *tl, struct _tsr_step_stats **out, int *n);
void _tsr_step_stats_free(struct _tsr_step_stats *s, int n);
struct _tsr_run_stats {       /* one rank over its steps first..last */
  int rank, nworkers, nsteps;
  double wall;                /* first task start to last task or transfer end of those steps */
  double busy;                /* worker time in it running tasks (of any step) */
  double idle;                /* nworkers * wall - busy */
};
/* out[nranks]: per-rank totals for the steps of st[n] in [first, last] (last < 0: no end). */
tsr_status _tsr_tl_run_stats(const struct _tsr_tl *tl, const struct _tsr_step_stats *st, int n, int64_t first,
                             int64_t last, struct _tsr_run_stats *out);
/* Per-step report (summary, layer x operation table, critical path) for steps in [first, last]. */
void _tsr_tl_report(const struct _tsr_tl *tl, FILE *out, int64_t first, int64_t last);
/* Gnuplot data: one line per task, "start_ms end_ms row op_index" with rows per (rank, worker). */
tsr_status _tsr_tl_write_gnuplot(const struct _tsr_tl *tl, const char *path, int64_t first, int64_t last);

#endif

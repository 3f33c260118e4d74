/* A loaded trace (timeline.c): a flat list of task and transfer events of every rank on rank 0's
 * clock, read by the writers (chrome.c, paje.c) and the analysis (analysis.c). Apart from the
 * recording (src/trace) so that reading traces never links into the training path. Times in us. */
#ifndef TSR_TRACE_ANALYSIS_TIMELINE_H
#define TSR_TRACE_ANALYSIS_TIMELINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <tessera/trace.h>

#include "trace/trace.h" /* TSR_TRACE_NAME, TSR_TRACE_OP: the raw files' field widths */

/* ---- a loaded trace (timeline.c) ---- */

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

struct _tsr_gev {             /* a gradient group's reduction (marker) */
  int64_t step;
  int rank, group;
  uint64_t bytes;             /* the group's float32 size */
  uint64_t seq;               /* the first task of its rank submitted after it */
};

struct _tsr_tl {
  int nranks;
  int *nworkers;              /* [nranks] */
  char ***worker_names;       /* [nranks][nworkers] */
  double *offset;             /* [nranks] added to a rank's clock to get rank 0's */
  double t0;                  /* earliest event (aligned), subtracted by the writers */
  int ntasks, nxfers, ngroups;
  struct _tsr_tev *tasks;     /* sorted by (rank, seq) */
  struct _tsr_xev *xfers;
  struct _tsr_gev *groups;    /* in file order: by (rank, step, group) */
};

/* Reads DIR/rank-*.tsv (the raw files written by tsr_trace_stop). */
tsr_status _tsr_tl_load(struct _tsr_tl **tl, const char *dir);
/* An empty timeline for hand-built tests: nranks ranks of nworkers workers, no events. */
struct _tsr_tl *_tsr_tl_new(int nranks, int nworkers);
/* Appends a task (deps: indices of earlier tasks) or a transfer; returns its index or -1. */
int _tsr_tl_add_task(struct _tsr_tl *tl, const struct _tsr_tev *ev, const int *deps, int ndeps);
int _tsr_tl_add_xfer(struct _tsr_tl *tl, const struct _tsr_xev *ev);
int _tsr_tl_add_group(struct _tsr_tl *tl, const struct _tsr_gev *ev);
/* Sets t0 and gives unassigned transfers (step -1) a step by time. Call once all events are in. */
void _tsr_tl_finish(struct _tsr_tl *tl);
void _tsr_tl_free(struct _tsr_tl *tl);

/* ---- writers ---- */
/* DIR/rank-R.tsv for every rank, in the format tsr_trace_stop writes (offsets 0: times are already
 * on one clock), so that _tsr_tl_load and tessera-trace read it back. */
tsr_status _tsr_tl_write_raw(const struct _tsr_tl *tl, const char *dir);
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
/* Operation families (families.c): what a task does, by its operation and name. */
enum {
  TSR_TL_LOAD, TSR_TL_HEAVY_FWD, TSR_TL_HEAVY_BWD_DATA, TSR_TL_HEAVY_BWD_WEIGHTS, TSR_TL_OTHER_FWD,
  TSR_TL_OTHER_BWD, TSR_TL_LOSS, TSR_TL_REDUCE, TSR_TL_UPDATE, TSR_TL_OTHER, TSR_TL_NFAMILIES
};
int _tsr_tl_family(const char *name, const char *op);
const char *_tsr_tl_family_name(int family);

/* One-screen summary of steps [first, last] (summary.c): per rank wall time per step, critical
 * path, computing and idle shares, communication and how much of it is hidden; the slowest steps;
 * task time by operation family, layer and operation; the critical path of the median step. */
void _tsr_tl_summary(const struct _tsr_tl *tl, FILE *out, int64_t first, int64_t last);
/* Timeline data of steps [first, last] for plotting (plot_data.c), times in ms from the window's
 * first task start; see tsr_trace_report_opts.timeline_data for the format. */
tsr_status _tsr_tl_write_plot_data(const struct _tsr_tl *tl, const char *path, int64_t first, int64_t last);

#endif

/* The replay graph (replay.c): one rank's traced tasks and one node per gradient group's reduction,
 * simulated on a number of workers and one network queue. Built by predict.c and by the tests from
 * hand-made timelines. Times in microseconds. */
#ifndef TSR_SCALE_REPLAY_H
#define TSR_SCALE_REPLAY_H

#include "scale/scale.h"
#include "trace_analysis/timeline.h"

struct _tsr_rnode {
  int task;        /* index into the timeline's tasks; -1: a group's reduction */
  int group;       /* reduction: the group's index */
  int consumer_of; /* task waiting for a reduction: that reduction's marker index, else -1 */
  int64_t step;
  uint64_t seq;      /* submission order: ready tasks start in this order */
  double bytes;      /* reduction: the group's float32 bytes */
  double dur;        /* set before simulating (tasks: the traced duration) */
  int *deps, ndeps;  /* nodes it waits for */
  double start, end; /* simulated */
  int worker;        /* simulated; -1 for reductions (the network queue) */
  const char *algo;  /* reduction: the cost model that priced it */
};

struct _tsr_rgraph {
  int n, cap;
  struct _tsr_rnode *v; /* reductions first (nodes 0 .. nmarks-1, by step and submission), then tasks */
  int nmarks;
  struct _tsr_gev *marks;
};

/* One rank's tasks of steps [first, last] (last < 0: no end) with the reductions of its markers. */
tsr_status _tsr_rgraph_build(struct _tsr_rgraph *g, const struct _tsr_tl *tl, int rank, int64_t first, int64_t last);
/* Simulates g on `workers` workers and one network queue (simulate.c). net NULL, one rank, or progress
 * `thread`: a reduction takes its node's dur on the network queue. Else its rounds (the cost model
 * v->algo of net->m at net->ranks) are played under the progress rule of worker 0. */
struct _tsr_rnet {
  const tsr_machine *m;
  int ranks;
};
tsr_status _tsr_rgraph_simulate(struct _tsr_rgraph *g, int workers, const struct _tsr_rnet *net);
/* The simulated timeline as a trace folder: `ranks` alike, the first out_ranks of them written. */
tsr_status _tsr_rgraph_write(const struct _tsr_rgraph *g, const struct _tsr_tl *tl, int workers, int ranks,
                             int out_ranks, const char *dir);
void _tsr_rgraph_free(struct _tsr_rgraph *g);

#endif

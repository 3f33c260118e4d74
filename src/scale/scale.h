/* Internals of the scaling prediction: the table of reduction cost models (cost.c), shared by the
 * replay (replay.c) and the public queries. Times in microseconds, sizes in bytes of float32. */
#ifndef TSR_SCALE_SCALE_H
#define TSR_SCALE_SCALE_H

#include <tessera/scale.h>

#include "trace_analysis/timeline.h"

/* A reduction as the sequence of its message rounds: in each, a rank's message crosses its link
 * (wire_us: latency and bytes, the link's sharing included), the node's ranks that take turns on one
 * core have each run after it arrived (wait_us: 0 without the machine's timeslice_us), then the rank
 * works on what arrived (work_us: the sum, and the packs of half formats, which run as tasks on a
 * worker). A model's time is the sum of its rounds' wire, wait and work times; the replay under
 * progress mode `worker` plays the rounds one by one (simulate.c), with a round's wait only where the
 * rank had no task running when its message arrived. */
struct _tsr_round {
  double wire_us, work_us, wait_us;
};
struct _tsr_rounds {
  struct _tsr_round *v;
  int n, cap, oom; /* oom: an append failed (the time is still right) */
};

struct _tsr_cost_model {
  const char *name; /* what --algo selects; the collective's --grad-reduce name where it has one */
  const char *impl; /* the algorithm */
  int exact;        /* 1: sums in float32 (a candidate for "best") */
  const char *about;
  /* Time of one reduction; rounds (NULL: not wanted) receives its rounds in order. */
  double (*time_us)(const tsr_machine *m, double bytes, int ranks, struct _tsr_rounds *rounds);
};

/* The entry named `name`, or NULL. */
const struct _tsr_cost_model *_tsr_cost_model(const char *name);
/* TSR_OK if `algo` names an entry or is "best", else an error listing them. */
tsr_status _tsr_cost_check(const char *algo);
/* One reduction's time; *used: the entry it used (the cheapest exact one for "best"). 0 on one rank. */
double _tsr_cost_us(const tsr_machine *m, const char *algo, double bytes, int ranks, const char **used);
/* The rounds of entry `name` (not "best") for one reduction, appended to *r (r->n = 0 first); returns
 * its time (the rounds' sum), or -1 when out of memory. None on one rank. */
double _tsr_cost_rounds(const tsr_machine *m, const char *name, double bytes, int ranks, struct _tsr_rounds *r);

/* Tasks a reduction submits in a multi-rank trace (sums, wire packs): replaced by the modelled
 * reduction in the replay. */
int _tsr_reduction_task(const struct _tsr_tev *e);
/* Tasks that wait for their group's reduction (updates, finiteness checks). */
int _tsr_group_consumer(const struct _tsr_tev *e);

/* The rank whose workers were occupied longest (task time plus dispatch waits): in synchronous data
 * parallelism it sets everyone's pace. *wait: its dispatch time per task (machine.c). */
tsr_status _tsr_scale_slowest_rank(const struct _tsr_tl *tl, int *rank, double *wait);

#endif

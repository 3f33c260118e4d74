/* Recording side of the traces, shared by record.c (buffers, start/stop), raw.c (dependencies and
 * the raw file of a rank) and sync.c (clock offsets and the barrier across ranks). */
#ifndef TSR_TRACE_RECORD_H
#define TSR_TRACE_RECORD_H

#include "trace/trace.h"

struct _tsr_access {          /* one buffer of a task */
  void *h;                    /* starpu_data_handle_t */
  int mode;                   /* enum starpu_data_access_mode */
};

struct _tsr_rec {             /* one executed task */
  uint64_t seq;
  int64_t step;
  int worker;
  double submit, start, end;
  uint64_t bytes;
  char name[TSR_TRACE_NAME];
  const char *op;             /* the codelet's name: static storage */
  size_t afirst;
  int nacc;
};

struct _tsr_xrec {            /* one MPI transfer */
  int64_t step, tag;
  int peer, is_send;
  uint64_t bytes;
  double post, done;
};

struct _tsr_grec {            /* one group marker */
  int64_t step;
  int group;
  uint64_t bytes, seq;        /* seq: the first task submitted after it */
};

struct _tsr_tbuf {            /* one thread's events */
  struct _tsr_rec *recs;
  struct _tsr_access *acc;
  struct _tsr_xrec *xfers;
  size_t nrecs, rcap, nacc, acap, nxfers, xcap;
  struct _tsr_tbuf *next;
};

struct _tsr_recs {            /* a rank's events, records in submission order */
  struct _tsr_rec *recs;
  const struct _tsr_access **acc; /* [nrecs]: each record's recs[i].nacc accesses */
  struct _tsr_xrec *xfers;
  const struct _tsr_grec *groups;
  size_t nrecs, nxfers, ngroups;
};

/* raw.c: rebuilds data dependencies (sequential consistency, in submission order) and writes the
 * rank's raw file. */
tsr_status _tsr_trace_write_raw(const char *path, const struct _tsr_recs *r, int rank, int size, double offset);

/* sync.c: waits for every task (and, with MPI, every request); clock offset of this rank to rank 0
 * (add it to this rank's times); all ranks reach the barrier before rank 0 passes it. */
tsr_status _tsr_trace_quiesce(int size);
tsr_status _tsr_trace_clock_offset(int rank, int size, double *offset);
tsr_status _tsr_trace_barrier(int rank, int size);

#endif

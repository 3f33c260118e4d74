/* Scaling prediction: replays a traced training run's task graph (tasks, dependencies, measured
 * durations, gradient groups) on a model of a machine for any number of ranks, with each group's
 * reduction costed by the algorithm that runs it (a table of cost models: ring with float32, bf16
 * or fp16 chunks, recursive doubling, hierarchical, 1-bit sign votes). Machines are JSON files
 * (docs/scaling.md), written by hand or measured by tsr_scale_calibrate. */
#ifndef TESSERA_SCALE_H
#define TESSERA_SCALE_H

#include <stdint.h>
#include <stdio.h>
#include <tessera/context.h>
#include <tessera/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_link {
  double latency_us;     /* one message, end to end */
  double bandwidth_gbit; /* Gbit/s of payload */
  int shared;            /* 1: the flows of a node's ranks share it (a node's network link) */
  double rendezvous_us;  /* added to every message above eager_bytes: the MPI rendezvous' handshake */
  double eager_bytes;    /* largest message sent without a rendezvous */
  double exchange_gbit;  /* Gbit/s each way while both directions carry a message at once (the rounds
                            in which every rank sends and receives); 0: bandwidth_gbit (full duplex) */
} tsr_link;

typedef struct tsr_machine {
  char name[128];
  int workers_per_rank;    /* workers (CPU cores or GPUs) per rank; 0: as in the trace */
  int ranks_per_node;      /* ranks placed on one node, consecutive ranks together */
  double compute_scale;    /* traced task durations are multiplied by it (a slower or faster device) */
  double task_overhead_us; /* added to every task: the runtime's dispatch time between tasks */
  tsr_link intra;          /* between two ranks of one node */
  tsr_link inter;          /* a node's link to the other nodes */
  double reduce_gbit;      /* float32 sums on receipt: Gbit/s of float32 input */
  double pack_gbit;        /* packing and unpacking bf16/fp16 wire chunks: Gbit/s of float32 */
  double timeslice_us;     /* ranks take turns on one core (each rank's progress loop polls without
                              sleeping; ranks_per_core): the operating system's time slice. A round of
                              a reduction then ends only once every rank on the core has run after its
                              message arrived: (ranks_per_core - 1.5) slices more on average, half the
                              running rank's slice for two. 0 (the default): cores of their own */
  tsr_mpi_progress progress; /* who moves the reductions' messages (TESSERA_MPI_PROGRESS): WORKER (the
                                default): worker 0's progress loop, between its tasks, so a message is
                                posted and seen complete only when worker 0 is between two tasks;
                                THREAD: a thread of its own, at once */
  int ranks_per_core;      /* ranks taking turns on one core, for timeslice_us (a host with fewer
                              cores than ranks, such as an emulated cluster); 0 (the default): the
                              ranks of a node (ranks_per_node) */
} tsr_machine;

/* Defaults: one rank per node, workers as traced, scale 1, intra 1 us / 100 Gbit/s, inter 10 us /
 * 10 Gbit/s shared, reduce and pack 40 Gbit/s, progress by worker 0. */
void tsr_machine_default(tsr_machine *m);
/* Reads a machine file; errors name the file and the field. Fields left out keep their defaults. */
tsr_status tsr_machine_load(const char *path, tsr_machine *m);
/* The same from JSON text; `what` names it in messages. */
tsr_status tsr_machine_parse(const char *json, const char *what, tsr_machine *m);
tsr_status tsr_machine_save(const char *path, const tsr_machine *m);
/* The compute side from a traced run: workers per rank, the runtime's mean dispatch time per task
 * (a worker's wait between its previous task's end, or the task's dependencies and submission, and
 * the task's start), and the float32 sum and pack rates from the reductions' own tasks (kept when
 * the trace has none, e.g. one rank). The slowest rank's tasks (see tsr_scale_opts.trace_rank). */
tsr_status tsr_machine_from_trace(const char *trace_dir, tsr_machine *m);

/* Time of one reduction of `bytes` bytes of float32 gradients over `ranks` ranks with cost model
 * `algo` (tsr_scale_algo_name lists them; "best": the cheapest exact one). */
tsr_status tsr_scale_collective_us(const tsr_machine *m, const char *algo, double bytes, int ranks, double *us);
/* Cost models by index (NULL past the end) and what each describes. */
const char *tsr_scale_algo_name(int i, const char **about);

typedef struct tsr_scale_opts {
  int ranks;                     /* ranks to predict (>= 1) */
  const char *algo;              /* cost model of the reductions (default "f32": the ring, float32 chunks) */
  int trace_rank;                /* whose tasks are replayed (default -1: the slowest rank, whose workers
                                    were occupied longest: it sets the pace of synchronous data parallelism) */
  int64_t first_step, last_step; /* training steps replayed (default -1: all traced but the first) */
  const char *out_dir;           /* not NULL: write the predicted timeline there (raw files, trace.json, trace.paje) */
  int out_ranks;                 /* ranks written to out_dir (default 4, at most `ranks`) */
} tsr_scale_opts;
void tsr_scale_opts_default(tsr_scale_opts *o);

typedef struct tsr_scale_group {
  int group;
  double bytes;      /* float32 size */
  double cost_us;    /* one reduction at `ranks` */
  double exposed_us; /* mean per step: part of the reduction with no worker computing */
  const char *algo;  /* the cost model used (differs from the option's with "best") */
} tsr_scale_group;

typedef struct tsr_scale_result {
  int ranks, nsteps, workers;
  int trace_rank;     /* the traced rank that was replayed */
  double step_us;     /* predicted time per step at `ranks` */
  double step1_us;    /* the same replay at one rank */
  double efficiency;  /* step1_us / step_us (weak scaling: the same per-rank batch) */
  double measured_us; /* the traced run's own time per step over the same steps */
  int ngroups;
  tsr_scale_group *groups;
} tsr_scale_result;

/* Replays the steps of the trace in trace_dir on machine m. Time per step: from the end of the
 * first replayed step's last task to the end of the last's, divided by the steps between them
 * (so at least 2 training steps must be traced). */
tsr_status tsr_scale_predict(const char *trace_dir, const tsr_machine *m, const tsr_scale_opts *o, tsr_scale_result *r);
void tsr_scale_result_free(tsr_scale_result *r);

/* Measures the link between ranks 0 and 1 of the context (every rank calls it): half round trips by
 * ping-pong and streaming rates at each message size (bytes; NULL: 8 B to 4 MiB), `reps` times each.
 * latency: the smallest size's half round trip; bandwidth: least-squares slope of the streaming time
 * per message over the sizes from 64 KiB. A table per size goes to `log` (rank 0; NULL: none). */
tsr_status tsr_scale_calibrate(tsr_context *ctx, const int64_t *sizes, int nsizes, int reps, tsr_link *link, FILE *log);
/* Measures the time slice of ranks 0 and 1 placed on one core (tsr_machine.timeslice_us): the median
 * half round trip of `reps` 8-byte ping-pongs between them, less `latency_us` (the same ping-pong's
 * time with a core per rank: the intra link's latency), into *slice_us (0 when not above it). Each
 * rank polls for the other's message while it holds the core, so each message waits for the
 * sender's slice to end. Every rank calls it; only ranks 0 and 1 take part. */
tsr_status tsr_scale_calibrate_timeslice(tsr_context *ctx, int reps, double latency_us, double *slice_us, FILE *log);

#ifdef __cplusplus
}
#endif
#endif

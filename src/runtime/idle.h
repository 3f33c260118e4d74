/* Idle threads that give their core away (idle.c): StarPU workers without a task, MPI progress. */
#ifndef TSR_RUNTIME_IDLE_H
#define TSR_RUNTIME_IDLE_H

struct starpu_sched_policy;

/* A copy of StarPU's predefined policy `name` whose idle CPU workers sleep until a task is pushed, or
 * NULL when there is no such policy (StarPU then reports the name). One copy per process: the context
 * is unique. */
struct starpu_sched_policy *_tsr_idle_policy(const char *name);
/* Open MPI's progress yields the core when it finds nothing to do, unless the user set
 * OMPI_MCA_mpi_yield_when_idle (call before MPI_Init). */
void _tsr_idle_mpi_yield(void);

#endif

/* Idle threads that give their core away (idle.c): StarPU workers without a task, MPI progress. */
#ifndef TSR_RUNTIME_IDLE_H
#define TSR_RUNTIME_IDLE_H

struct starpu_sched_policy;

/* A copy of StarPU's predefined policy `name` whose idle CPU workers sleep until a task is pushed, or
 * NULL when there is no such policy (StarPU then reports the name). One copy per process: the context
 * is unique. */
struct starpu_sched_policy *_tsr_idle_policy(const char *name);
/* Call before MPI starts: the thread that initialises MPI (StarPU-MPI's progress thread) sleeps
 * between fruitless passes over its posted requests once it has polled 20 us, never while it holds
 * its progress lock (this library defines MPI_Init_thread and MPI_Test over PMPI_*; other threads'
 * calls are passed through untouched). */
void _tsr_idle_mpi(void);

#endif

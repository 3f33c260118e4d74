/* The process environment, read in this one place: the TESSERA_* variables, fallbacks of trainer
 * options (README, "Environment variables"), the launcher's variables (mpirun, srun) and the
 * STARPU_* variables the context defers to. Nothing else in the library calls getenv. */
#ifndef TSR_RUNTIME_ENV_H
#define TSR_RUNTIME_ENV_H

#include <stddef.h>
#include <stdint.h>

/* TESSERA_GROUP_BYTES: a size in bytes, -1 for "layer", 0 when unset or empty. */
long long _tsr_env_group_bytes(void);
/* TESSERA_SKIP_ALLREDUCE: 1 when set to a nonzero integer, else 0. */
int _tsr_env_skip_reduce(void);
/* TESSERA_SKIP_ALLREDUCE=alternate:K (a benchmark aid): 1 and K when set so (K > 0), -1 when it starts
 * with "alternate" and K is not a positive integer, 0 otherwise. */
int _tsr_env_skip_reduce_block(int *steps);
/* TESSERA_NO_NCCL: 1 when set (to anything), else 0. */
int _tsr_env_no_nccl(void);
/* TESSERA_STEP_TIMEOUT: 1 and its value in seconds (<= 0: wait forever) when set and not empty. */
int _tsr_env_step_timeout(double *seconds);
/* TESSERA_SLOW_RANK=R:MS, jitter:MS or slices:MS (a benchmark aid): 1 and rank R (-1 for jitter,
 * -2 for slices) and milliseconds MS when set, -1 when malformed, 0 when not set. */
int _tsr_env_slow_rank(int *rank, double *ms);

/* TESSERA_COLLECTIVE: the gradient reduction algorithm's name when set and not empty, else NULL. */
const char *_tsr_env_collective(void);
/* TESSERA_NODE_SIZE: ranks per emulated node (> 0) when set, else 0 (nodes by host name). */
int _tsr_env_node_size(void);
/* TESSERA_LINK: the link parameters' text (comm/net.h) when set and not empty, else NULL. */
const char *_tsr_env_link(void);
/* Tests of sample pools (tsr_pool_opts): TESSERA_SIM_DELAY_MS, milliseconds each production task
 * sleeps (0 when unset); TESSERA_SIM_FAIL_AT, the producer index that fails (1 and the index when set). */
int _tsr_env_sim_delay_ms(void);
int _tsr_env_sim_fail_at(int64_t *index);

/* TESSERA_MEMORY_LIMIT: its text when set and not empty (parsed by memory.c), else NULL. */
const char *_tsr_env_memory_limit(void);

/* TESSERA_IDLE: 1 for "yield", 2 for "spin" (tsr_idle), 0 when unset or empty, -1 for anything else. */
int _tsr_env_idle(void);
/* TESSERA_MPI_PROGRESS: 1 for "thread", 2 for "worker" (tsr_mpi_progress), 0 when unset or empty, -1 for
 * anything else. */
int _tsr_env_mpi_progress(void);
/* TESSERA_ACT_BLOCK: 8 or 16 (the channel block of the activations' layout), 0 when unset or empty,
 * -1 for anything else. */
int _tsr_env_act_block(void);
/* The integer value of `name`, or `fallback` when it is unset or empty (StarPU's own settings). */
int _tsr_env_int(const char *name, int fallback);
/* STARPU_WORKERS_GETBIND: 1 when set to a nonzero integer (StarPU keeps to the process's CPUs). */
int _tsr_env_starpu_getbind(void);
/* STARPU_SCHED: its text when set and not empty, else NULL. */
const char *_tsr_env_starpu_sched(void);

/* 1 when started by mpirun, srun or another PMI launcher. */
int _tsr_env_launched_by_mpi(void);
/* Ranks on this machine and this rank's index among them, from the launcher (1 and 0 without). */
int _tsr_env_local_ranks(void);
int _tsr_env_local_rank(void);
/* The folder where StarPU 1.3 keeps its bus calibration (`<sampling>/bus/`, as its perfmodel.c finds
 * it: STARPU_PERF_MODEL_DIR, else `.starpu/sampling` under XDG_CACHE_HOME, STARPU_HOME, HOME, TMPDIR,
 * TEMP, TMP or /tmp) and the host name its files are named after (STARPU_HOSTNAME, else the host name
 * up to its first dot). 0 on success, -1 when a buffer is too small. */
int _tsr_env_starpu_bus_files(char *dir, size_t ndir, char *host, size_t nhost);
/* 1 when the variable `name` is set (the user's STARPU_* settings take precedence). */
int _tsr_env_is_set(const char *name);

#endif

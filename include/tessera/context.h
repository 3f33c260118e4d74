/* The Tessera context: starts and stops StarPU (and StarPU-MPI when run under mpirun/srun). */
#ifndef TESSERA_CONTEXT_H
#define TESSERA_CONTEXT_H

#include <stddef.h>
#include <stdint.h>
#include <tessera/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_context tsr_context;

/* Arithmetic of convolutions and transposed convolutions. BF16: inputs rounded to bf16 (oneDNN's
 * bf16/AMX kernels on CPUs), float32 accumulation, outputs, weights and optimizer state. FP16: the
 * same with IEEE half (cuDNN tensor cores on GPUs), with dynamic loss scaling. */
typedef enum { TSR_PRECISION_F32 = 0, TSR_PRECISION_BF16 = 1, TSR_PRECISION_FP16 = 2 } tsr_precision;

/* What threads with nothing to do do. YIELD: an idle StarPU CPU worker sleeps until a task is pushed
 * (after 50 us of polling; sleeps bounded by 1 ms); under MPI with TSR_MPI_PROGRESS_THREAD,
 * StarPU-MPI's progress thread sleeps between fruitless passes over its posted requests (after 20 us;
 * 10 us doubling to 500 us).
 * SPIN: StarPU's and Open MPI's own behaviour, polling without letting go.
 * Default: YIELD in a process without MPI, SPIN under MPI. */
typedef enum { TSR_IDLE_DEFAULT = 0, TSR_IDLE_YIELD = 1, TSR_IDLE_SPIN = 2 } tsr_idle;

/* Who drives StarPU-MPI's messages under MPI. WORKER (the default): StarPU-MPI's progress thread is
 * also CPU worker 0 and runs that worker's tasks between its passes over the MPI requests, so no
 * thread polls beside the workers. THREAD: a progress thread of its own beside the workers (a core
 * kept for it where a rank has several); it polls while any request is pending. */
typedef enum { TSR_MPI_PROGRESS_DEFAULT = 0, TSR_MPI_PROGRESS_THREAD = 1, TSR_MPI_PROGRESS_WORKER = 2 } tsr_mpi_progress;

typedef struct tsr_context_opts {
  int ncpus;            /* CPU workers; -1 = StarPU's choice (STARPU_NCPU is honoured) */
  int use_mpi;          /* 1 = start StarPU-MPI, 0 = never, -1 = when launched by mpirun/srun */
  int deterministic;    /* 1 = fixed reduction order: bitwise-identical runs for one seed */
  uint64_t seed;        /* seed of every random stream (initialisation, dropout, shuffling) */
  int verbose;          /* 0 quiet, 1 info, 2 debug (to stderr) */
  int precision;        /* tsr_precision; default TSR_PRECISION_F32 */
  int idle;             /* tsr_idle; 0 = TESSERA_IDLE=yield|spin, else yield (spin under MPI) */
  int mpi_progress;     /* tsr_mpi_progress; 0 = TESSERA_MPI_PROGRESS=thread|worker, else worker */
  int gpu_only;         /* 1 = every task that has a CUDA kernel runs on a CUDA worker (refused without one);
                           CPU workers run only what has none (reading samples, NaN checks, loss sums) */
} tsr_context_opts;

void tsr_context_opts_default(tsr_context_opts *opts);
/* argc/argv may be NULL; they are passed to MPI_Init when MPI is started. */
tsr_status tsr_context_create(tsr_context **ctx, const tsr_context_opts *opts, int *argc, char ***argv);
void tsr_context_destroy(tsr_context *ctx);

int tsr_context_rank(const tsr_context *ctx);
int tsr_context_size(const tsr_context *ctx);
int tsr_context_nworkers(const tsr_context *ctx);
int tsr_context_deterministic(const tsr_context *ctx);
uint64_t tsr_context_seed(const tsr_context *ctx);
/* Collective over all ranks (every rank must call it with its own value): returns TSR_ERR_MISMATCH
 * on every rank, naming `what`, when the `len` bytes at `data` differ between ranks. */
tsr_status tsr_context_check_same(tsr_context *ctx, const char *what, const void *data, size_t len);
/* Waits for every submitted task. */
tsr_status tsr_context_wait_all(tsr_context *ctx);

#ifdef __cplusplus
}
#endif
#endif

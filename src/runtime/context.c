/* The context owns StarPU's lifetime (and StarPU-MPI's under mpirun/srun), the worker threading
 * policy for kernel libraries, and the run-wide seed and determinism flag. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cblas.h>
#include <starpu.h>
#include <starpu_mpi.h>

#include <tessera/context.h>
#include "runtime/bus_calibration.h"
#include "runtime/env.h"
#include "runtime/hang.h"
#include "runtime/idle.h"
#include "runtime/progress.h"
#include "runtime/switches.h"
#include "runtime/error.h"

struct tsr_context {
  int rank, size, use_mpi, deterministic;
  uint64_t seed;
};

static int context_alive;

void tsr_context_opts_default(tsr_context_opts *o) {
  memset(o, 0, sizeof *o);
  o->ncpus = -1;
  o->use_mpi = -1;
  o->seed = 1;
  o->verbose = 1;
}

/* Under MPI, worker 0 doubles as StarPU-MPI's progress thread unless the user asks otherwise. */
static int mpi_progress_mode(const tsr_context_opts *o) {
  int m = o->mpi_progress ? o->mpi_progress : _tsr_env_mpi_progress();
  return m == TSR_MPI_PROGRESS_DEFAULT ? TSR_MPI_PROGRESS_WORKER : m;
}

/* Several ranks on one machine must not pin their workers to the same cores: each rank's workers
 * are bound to its own block of cores (unless the progress thread drives worker 0, one core of a
 * block of two or more is left to StarPU-MPI's progress thread, which is not bound). With
 * STARPU_WORKERS_GETBIND set, the launcher chose the process's CPUs (StarPU then numbers them from
 * 0): the block is cut from them, also for one rank (so that a rank given one CPU keeps a worker
 * instead of leaving it to the progress thread).
 * The user's STARPU_NCPU, STARPU_WORKERS_CPUID, STARPU_WORKERS_NOBIND or ncpus take precedence. */
static long allowed_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return sysconf(_SC_NPROCESSORS_ONLN);
  return CPU_COUNT(&set);
}

static void share_machine(struct starpu_conf *conf, int ncpus_opt, int progress_core) {
  int local = _tsr_env_local_ranks(), me = _tsr_env_local_rank(), getbind = _tsr_env_starpu_getbind();
  if ((local < 2 && !getbind) || _tsr_env_is_set("STARPU_WORKERS_CPUID") || _tsr_env_is_set("STARPU_WORKERS_NOBIND"))
    return;
  setenv("STARPU_MPI_NOBIND", "1", 0);
  long cores = getbind ? allowed_cpus() : sysconf(_SC_NPROCESSORS_ONLN);
  long first, count;
  if (local <= cores) {
    first = me * cores / local;
    count = (me + 1) * cores / local - first;
    if (count > 1 && progress_core) count--;
  } else {
    first = me % cores, count = 1;
  }
  if (ncpus_opt > 0 || _tsr_env_is_set("STARPU_NCPU")) {
    setenv("STARPU_WORKERS_NOBIND", "1", 0); /* the user sized the workers: do not pin them */
    return;
  }
  char ids[1024];
  size_t o = 0;
  for (long c = 0; c < count && o + 16 < sizeof ids; c++) o += snprintf(ids + o, sizeof ids - o, "%ld ", first + c);
  setenv("STARPU_WORKERS_CPUID", ids, 1);
  conf->ncpus = (int)count;
}

/* Once no task is pending. */
static void stop_runtime(int use_mpi) {
  if (!use_mpi) {
    starpu_shutdown();
    return;
  }
  _tsr_progress_stop();
  starpu_mpi_shutdown();
}

/* The scheduler where STARPU_SCHED is unset: eager (one queue that every idle worker takes the next
 * ready task from) in a process without MPI on a StarPU without CUDA; dmdas elsewhere, whose
 * placement by calibrated performance models is what GPUs need and whose priorities order the
 * reductions under MPI. On CPU workers alone dmdas's per-worker queues left workers idle while the
 * other's queue held ready tasks: the example trained 7% faster in float32 and 5% in bf16 with eager
 * (bench/README, "The scheduler of a single process"). */
static const char *default_sched(int use_mpi) {
#ifdef STARPU_USE_CUDA
  return "dmdas";
#else
  return use_mpi ? "dmdas" : "eager";
#endif
}

tsr_status tsr_context_create(tsr_context **ctx, const tsr_context_opts *opts, int *argc, char ***argv) {
  if (!ctx) return _tsr_error(TSR_ERR_ARG, "tsr_context_create: ctx is NULL");
  *ctx = NULL;
  if (context_alive) return _tsr_error(TSR_ERR_STATE, "tsr_context_create: a context already exists in this process");
  tsr_context_opts def;
  tsr_context_opts_default(&def);
  if (!opts) opts = &def;
  if (opts->ncpus == 0 || opts->ncpus < -1)
    return _tsr_error(TSR_ERR_ARG, "tsr_context_create: ncpus = %d (use -1 for the default or a positive count)",
                      opts->ncpus);
  if (opts->precision != TSR_PRECISION_F32 && opts->precision != TSR_PRECISION_BF16 &&
      opts->precision != TSR_PRECISION_FP16)
    return _tsr_error(TSR_ERR_ARG, "tsr_context_create: precision = %d (TSR_PRECISION_F32, _BF16 or _FP16)",
                      opts->precision);
  if (opts->idle < 0 || opts->idle > TSR_IDLE_SPIN)
    return _tsr_error(TSR_ERR_ARG, "tsr_context_create: idle = %d (TSR_IDLE_YIELD or TSR_IDLE_SPIN)", opts->idle);
  int idle = opts->idle ? opts->idle : _tsr_env_idle();
  if (idle < 0) return _tsr_error(TSR_ERR_ARG, "tsr_context_create: TESSERA_IDLE is neither 'yield' nor 'spin'");
  if (opts->mpi_progress < 0 || opts->mpi_progress > TSR_MPI_PROGRESS_WORKER)
    return _tsr_error(TSR_ERR_ARG, "tsr_context_create: mpi_progress = %d (TSR_MPI_PROGRESS_THREAD or _WORKER)",
                      opts->mpi_progress);
  int progress = mpi_progress_mode(opts);
  if (progress < 0)
    return _tsr_error(TSR_ERR_ARG, "tsr_context_create: TESSERA_MPI_PROGRESS is neither 'thread' nor 'worker'");
  tsr_context *c = calloc(1, sizeof *c);
  if (!c) return _tsr_error(TSR_ERR_NOMEM, "tsr_context_create: out of memory");
  c->use_mpi = opts->use_mpi < 0 ? _tsr_env_launched_by_mpi() : opts->use_mpi;
  /* Default: idle workers sleep in a single process, where a polling worker takes the CPU time its
   * busy siblings need once other programs share the cores; under MPI yield stays opt-in (worker 0
   * sleeping in its pop delays the reductions it drives): README, TESSERA_IDLE. */
  if (idle == TSR_IDLE_DEFAULT) idle = c->use_mpi ? TSR_IDLE_SPIN : TSR_IDLE_YIELD;
  c->deterministic = opts->deterministic;
  c->seed = opts->seed;
  c->size = 1;
  _tsr_set_verbosity(opts->verbose);
  _tsr_set_deterministic(opts->deterministic);
  _tsr_set_precision(opts->precision);
  /* Kernel libraries run one thread per StarPU worker: parallelism comes from the task graph. */
  openblas_set_num_threads(1);
  if (!_tsr_env_is_set("STARPU_SILENT") && opts->verbose < 2) setenv("STARPU_SILENT", "1", 0);
  /* StarPU keeps 5 to 10% of a GPU's buffers clean by copying modified ones back to main memory while
   * it works. A training step rewrites every activation and gradient, so on GPUs that meant a stream of
   * write-backs of buffers up to hundreds of MB each step, which delayed ready tasks by 10-70 ms each
   * (H200, bench/README.md "GPU"). Nothing needs those copies: buffers are written back when memory runs
   * short, or when the CPU reads them. The user's settings win. */
  setenv("STARPU_MINIMUM_CLEAN_BUFFERS", "0", 0);
  setenv("STARPU_TARGET_CLEAN_BUFFERS", "0", 0);

  struct starpu_conf conf;
  starpu_conf_init(&conf);
  if (opts->ncpus > 0) conf.ncpus = opts->ncpus;
  const char *sched = _tsr_env_starpu_sched();
  if (!sched) conf.sched_policy_name = sched = default_sched(c->use_mpi);
  int driving = c->use_mpi && _tsr_progress_configure(progress);
  if (idle == TSR_IDLE_YIELD) {
    /* a policy set in conf takes precedence over STARPU_SCHED (this copy is of the policy it names),
     * but not over conf.sched_policy_name: StarPU 1.3 looks that name up first, and with it set
     * the copy was never used (idle workers polled in yield mode as in spin mode) */
    struct starpu_sched_policy *p = _tsr_idle_policy(sched);
    if (p) conf.sched_policy = p, conf.sched_policy_name = NULL;
    if (c->use_mpi && !driving) _tsr_idle_mpi(); /* a driving thread sleeps in worker 0's pop instead */
  }
  /* A single process whose workers the user sized leaves them unpinned, as ranks do (share_machine):
   * on cores that other programs share, a pinned worker cannot leave a busy core, and the other
   * slices wait for its slice at each batch normalisation (1 rank x 2 workers at load 8-16: 12-26
   * samples/s unpinned, mostly 5-14 pinned; issue 15). */
  if (!c->use_mpi && (opts->ncpus > 0 || _tsr_env_is_set("STARPU_NCPU")) && !_tsr_env_starpu_getbind() &&
      !_tsr_env_is_set("STARPU_WORKERS_CPUID"))
    setenv("STARPU_WORKERS_NOBIND", "1", 0);
  /* ranks started together must not all measure the bus at once (bus_calibration.h) */
  if (_tsr_bus_calibrate_once() != 0)
    _tsr_log(2, "context: could not make sure StarPU's bus calibration exists first; StarPU will calibrate");
  _tsr_hang_watch_prepare();
  int ret;
  if (c->use_mpi) share_machine(&conf, opts->ncpus, !driving);
  if (c->use_mpi) {
    ret = starpu_mpi_init_conf(argc, argv, 1, MPI_COMM_WORLD, &conf);
    if (ret == 0) {
      starpu_mpi_comm_rank(MPI_COMM_WORLD, &c->rank);
      starpu_mpi_comm_size(MPI_COMM_WORLD, &c->size);
      int pr = _tsr_progress_start(c->rank);
      if (pr) {
        starpu_mpi_shutdown();
        free(c);
        return _tsr_error(TSR_ERR_RUNTIME, "cannot start StarPU-MPI's progress as worker 0 (error %d)", pr);
      }
    }
  } else {
    ret = starpu_init(&conf);
  }
  if (ret != 0) {
    int mpi = c->use_mpi;
    free(c);
    return _tsr_error(TSR_ERR_RUNTIME, "cannot start StarPU%s (error %d): check STARPU_* environment variables",
                      mpi ? "-MPI" : "", ret);
  }
  if (starpu_cpu_worker_get_count() + starpu_cuda_worker_get_count() == 0) {
    stop_runtime(c->use_mpi);
    free(c);
    return _tsr_error(TSR_ERR_RUNTIME, "StarPU started with no worker (STARPU_NCPU=0?)");
  }
  /* fp16 convolutions exist only on GPUs (cuDNN): oneDNN 2.6 creates no f16 convolution on CPUs, even
   * with AVX512-FP16, and running float32 instead would be a silent lie. */
  if (opts->precision == TSR_PRECISION_FP16 && starpu_cuda_worker_get_count() == 0) {
    stop_runtime(c->use_mpi);
    free(c);
    return _tsr_error(TSR_ERR_ARG, "tsr_context_create: precision fp16 needs a CUDA worker (CPU convolutions have "
                                   "no fp16 path: oneDNN here creates no f16 convolution); use bf16 on CPUs");
  }
  if (opts->gpu_only && starpu_cuda_worker_get_count() == 0) {
    stop_runtime(c->use_mpi);
    free(c);
    return _tsr_error(TSR_ERR_ARG, "tsr_context_create: gpu_only needs a CUDA worker, and StarPU started none "
                                   "(no GPU, STARPU_NCUDA=0, or a StarPU without CUDA)");
  }
  _tsr_set_gpu_only(opts->gpu_only);
  _tsr_hang_watch_start();
  context_alive = 1;
  _tsr_log(2, "context: rank %d/%d, %u CPU workers, %u CUDA workers, %s", c->rank, c->size,
           starpu_cpu_worker_get_count(), starpu_cuda_worker_get_count(),
           c->deterministic ? "deterministic" : "non-deterministic reductions");
  *ctx = c;
  return TSR_OK;
}

void tsr_context_destroy(tsr_context *c) {
  if (!c) return;
  starpu_task_wait_for_all();
  stop_runtime(c->use_mpi);
  _tsr_set_gpu_only(0);
  context_alive = 0;
  free(c);
}

int tsr_context_rank(const tsr_context *c) { return c ? c->rank : 0; }
int tsr_context_size(const tsr_context *c) { return c ? c->size : 1; }
int tsr_context_nworkers(const tsr_context *c) { return (int)starpu_worker_get_count(); }
int tsr_context_deterministic(const tsr_context *c) { return c ? c->deterministic : 0; }
uint64_t tsr_context_seed(const tsr_context *c) { return c ? c->seed : 1; }

tsr_status tsr_context_wait_all(tsr_context *c) {
  int ret = starpu_task_wait_for_all();
  return ret == 0 ? TSR_OK : _tsr_error(TSR_ERR_RUNTIME, "starpu_task_wait_for_all failed: %d", ret);
}

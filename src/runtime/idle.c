/* Idle threads that give their core away. Debian's StarPU 1.3 is built with non-blocking drivers: an
 * idle CPU worker polls its scheduler without pause, and StarPU-MPI's progress thread polls MPI_Test
 * while any request is pending. Where ranks share cores, each poller takes the core from a thread that
 * computes. The cure here: a copy of the chosen scheduling policy whose CPU workers, idle for a while,
 * sleep until a task is pushed (bounded waits), and an MPI_Test (MPI's profiling interface) that makes
 * the progress thread, after a while without news, sleep a little between polls. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <mpi.h>
#include <starpu.h>

#include "runtime/idle.h"

/* An idle worker polls for this long before it sleeps: gaps between dependent tasks are shorter and
 * cost no wake-up. Its sleeps double from the first to the last length while nothing is pushed; the
 * bound catches work that reaches a worker without a push (tasks bound to a worker, data requests). */
#define SPIN_NS 50000L
#define SLEEP_FIRST_NS 50000L
#define SLEEP_MAX_NS 1000000L

static struct starpu_sched_policy idle_policy;
static struct starpu_task *(*base_pop)(unsigned sched_ctx_id);
static int (*base_push)(struct starpu_task *task);

static pthread_mutex_t idle_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond;
static pthread_once_t idle_once = PTHREAD_ONCE_INIT;
static int idle_cond_ok;
static unsigned long pushes; /* atomics: a sleeper and a pusher each see the other's change */
static int sleepers;

static __thread long idle_since_ns, sleep_ns;

static long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}

static int push_and_wake(struct starpu_task *task) {
  int ret = base_push(task);
  __atomic_add_fetch(&pushes, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&sleepers, __ATOMIC_SEQ_CST)) {
    pthread_mutex_lock(&idle_mutex);
    pthread_cond_broadcast(&idle_cond);
    pthread_mutex_unlock(&idle_mutex);
  }
  return ret;
}

/* Sleeps unless a task was pushed since `seen`. Relaxed: a thread pushing to this worker's queue
 * (starpu_worker_lock) need not wait for the sleep to end. */
static void sleep_unless_pushed(unsigned long seen) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_nsec += sleep_ns;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  starpu_worker_relax_on();
  pthread_mutex_lock(&idle_mutex);
  __atomic_add_fetch(&sleepers, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&pushes, __ATOMIC_SEQ_CST) == seen) pthread_cond_timedwait(&idle_cond, &idle_mutex, &until);
  __atomic_sub_fetch(&sleepers, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&idle_mutex);
  starpu_worker_relax_off();
  if (sleep_ns < SLEEP_MAX_NS) sleep_ns *= 2;
}

static struct starpu_task *pop_or_sleep(unsigned sched_ctx_id) {
  unsigned long seen = __atomic_load_n(&pushes, __ATOMIC_SEQ_CST);
  struct starpu_task *task = base_pop(sched_ctx_id);
  if (task || starpu_worker_get_type(starpu_worker_get_id()) != STARPU_CPU_WORKER) {
    idle_since_ns = 0;
    return task; /* CUDA workers poll their streams in this loop: they never sleep */
  }
  long t = now_ns();
  if (!idle_since_ns) idle_since_ns = t, sleep_ns = SLEEP_FIRST_NS;
  if (t - idle_since_ns >= SPIN_NS) sleep_unless_pushed(seen);
  return NULL;
}

static void init_cond(void) {
  pthread_condattr_t attr;
  if (pthread_condattr_init(&attr)) return;
  idle_cond_ok = !pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) && !pthread_cond_init(&idle_cond, &attr);
  pthread_condattr_destroy(&attr);
}

struct starpu_sched_policy *_tsr_idle_policy(const char *name) {
  if (pthread_once(&idle_once, init_cond) || !idle_cond_ok) return NULL;
  struct starpu_sched_policy **p = starpu_sched_get_predefined_policies();
  for (; p && *p; p++) {
    if (!(*p)->policy_name || strcmp((*p)->policy_name, name) != 0) continue;
    if (!(*p)->pop_task || !(*p)->push_task) return NULL;
    idle_policy = **p;
    base_pop = (*p)->pop_task;
    base_push = (*p)->push_task;
    idle_policy.pop_task = pop_or_sleep;
    idle_policy.push_task = push_and_wake;
    return &idle_policy;
  }
  return NULL;
}

/* The progress thread polls for this long without a completed request before it sleeps; its sleeps
 * double from the first to the last length until a request completes. A sleeping thread that wakes
 * gets the core at once (it is owed CPU time), so messages still progress while workers compute: a
 * polling thread that yields does not (it keeps being put behind them). */
#define MPI_POLL_NS 20000L
#define MPI_SLEEP_FIRST_NS 10000L
#define MPI_SLEEP_MAX_NS 500000L

static int mpi_armed;        /* set before MPI starts, read by the progress thread */
static pthread_t mpi_thread; /* the thread that initialised MPI: StarPU-MPI's progress thread */
static int mpi_thread_known;
static __thread long mpi_idle_since_ns, mpi_sleep_ns;

void _tsr_idle_mpi(void) {
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  __atomic_store_n(&mpi_armed, 1, __ATOMIC_SEQ_CST);
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
  int ret = PMPI_Init_thread(argc, argv, required, provided);
  if (__atomic_load_n(&mpi_armed, __ATOMIC_SEQ_CST)) {
    mpi_thread = pthread_self();
    __atomic_store_n(&mpi_thread_known, 1, __ATOMIC_SEQ_CST);
  }
  return ret;
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
  int ret = PMPI_Test(request, flag, status);
  if (!__atomic_load_n(&mpi_thread_known, __ATOMIC_RELAXED) || !pthread_equal(pthread_self(), mpi_thread)) return ret;
  if (ret != MPI_SUCCESS || *flag) {
    mpi_idle_since_ns = 0;
    return ret;
  }
  long t = now_ns();
  if (!mpi_idle_since_ns) mpi_idle_since_ns = t, mpi_sleep_ns = MPI_SLEEP_FIRST_NS;
  if (t - mpi_idle_since_ns >= MPI_POLL_NS) {
    struct timespec d = {0, mpi_sleep_ns};
    nanosleep(&d, NULL);
    if (mpi_sleep_ns < MPI_SLEEP_MAX_NS) mpi_sleep_ns *= 2;
  }
  return ret;
}

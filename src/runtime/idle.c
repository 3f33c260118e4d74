/* Idle threads that give their core away. Debian's StarPU 1.3 is built with non-blocking drivers: an
 * idle CPU worker polls its scheduler without pause, and StarPU-MPI's progress thread polls MPI_Test
 * while any request is pending. Where ranks share cores, each poller takes the core from a thread that
 * computes. The cure here: a copy of the chosen scheduling policy whose CPU workers, idle for a while,
 * sleep until a task is pushed (bounded waits), and an MPI_Test (MPI's profiling interface) that makes
 * the progress thread, after a while without news, sleep a little between passes over its requests
 * (only where it is a thread of its own: as worker 0, progress.c, it sleeps in that worker's pop). */
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
  sleep_ns = sleep_ns * 2 < SLEEP_MAX_NS ? sleep_ns * 2 : SLEEP_MAX_NS;
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

/* StarPU-MPI 1.3's progress thread tests every pending request once per pass of its loop (MPI_Test on
 * each posted send and receive, with MPI_STATUS_IGNORE, its lock released) and then the receive of
 * envelopes (with a status, holding its progress lock, which every thread that hands it a request
 * must take). It sleeps only in the former: a thread that sleeps holding that lock lets go of it
 * only for the instant between two passes, and a worker handing over a send (woken at the unlock but
 * not yet running) never gets it, so both ranks waited for each other's messages for ever (seen under
 * load). For the same reason Open MPI's yield_when_idle (a sched_yield inside MPI_Test) is not set.
 * A pass whose tests bring no news ends in one sleep, taken when the pass's first request comes up
 * again: a sleep per fruitless test multiplied the wait by the requests pending (tens in a
 * reduction). The thread polls for this long without news before it sleeps; its sleeps double from
 * the first to the last length until a request completes. A sleeping thread that wakes gets the core
 * at once (it is owed CPU time), so messages still progress while workers compute. */
#define MPI_POLL_NS 20000L
#define MPI_SLEEP_FIRST_NS 10000L
#define MPI_SLEEP_MAX_NS 500000L
/* A pass longer than this many tests is taken as ended (its first request may have been replaced). */
#define MPI_PASS_MAX 4096

static int mpi_armed;        /* set before MPI starts, read by the progress thread */
static pthread_t mpi_thread; /* the thread that initialised MPI: StarPU-MPI's progress thread */
static int mpi_thread_known;
/* the progress thread's: when its tests stopped bringing news, its next sleep, the first request
 * tested in this pass and the tests since */
static __thread long mpi_idle_since_ns, mpi_sleep_ns;
static __thread const MPI_Request *mpi_pass_first;
static __thread int mpi_pass_tests;

void _tsr_idle_mpi(void) {
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

/* At the start of a pass that follows one without news: sleeps once the thread has polled long enough. */
static void mpi_pass_ended(void) {
  mpi_pass_first = NULL, mpi_pass_tests = 0;
  if (now_ns() - mpi_idle_since_ns < MPI_POLL_NS) return;
  struct timespec d = {0, mpi_sleep_ns};
  nanosleep(&d, NULL);
  mpi_sleep_ns = mpi_sleep_ns * 2 < MPI_SLEEP_MAX_NS ? mpi_sleep_ns * 2 : MPI_SLEEP_MAX_NS;
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
  if (!__atomic_load_n(&mpi_thread_known, __ATOMIC_RELAXED) || !pthread_equal(pthread_self(), mpi_thread))
    return PMPI_Test(request, flag, status);
  int unlocked = status == MPI_STATUS_IGNORE; /* a posted send or receive: StarPU-MPI holds no lock */
  if (unlocked && mpi_pass_first && (request == mpi_pass_first || mpi_pass_tests >= MPI_PASS_MAX)) mpi_pass_ended();
  int ret = PMPI_Test(request, flag, status);
  if (ret != MPI_SUCCESS || *flag) { /* news: poll again before sleeping */
    mpi_idle_since_ns = 0, mpi_pass_first = NULL, mpi_pass_tests = 0;
    return ret;
  }
  if (!mpi_idle_since_ns) mpi_idle_since_ns = now_ns(), mpi_sleep_ns = MPI_SLEEP_FIRST_NS;
  if (unlocked && !mpi_pass_first) mpi_pass_first = request;
  mpi_pass_tests += unlocked;
  return ret;
}

/* StarPU-MPI's progress thread as CPU worker 0 (tsr_mpi_progress WORKER). StarPU-MPI 1.3 can run a
 * CPU worker from its progress thread (STARPU_MPI_DRIVER_CALL_FREQUENCY): no core is kept for MPI,
 * and between two passes over its requests the thread runs worker 0 once (one task at most). As
 * shipped (1.3 and 1.4 alike) that mode hangs twice over: STARPU_MPI_DRIVER_TASK_FREQUENCY defaults
 * to 0, so the worker never runs; and the thread runs it only in a pass that waits for an envelope,
 * which it posts only while a receive is pending: with no request in flight it sleeps on its condition
 * and worker 0's tasks wait for ever. Here the task frequency is set to 1, and a receive from this rank
 * itself that nothing sends (the sentinel) keeps an envelope expected from start-up to shutdown. */
#include <stdint.h>
#include <stdlib.h>
#include <starpu.h>
#include <starpu_mpi.h>

#include <tessera/context.h>
#include "runtime/env.h"
#include "runtime/progress.h"

/* Above every tag Tessera uses (communicators' tags stay below 2^56, the trace's near 2^60). */
#define SENTINEL_TAG ((starpu_mpi_tag_t)INT64_MAX)

static int driving, posted, sentinel_rank;
static starpu_data_handle_t sentinel;
static int32_t sentinel_word;

int _tsr_progress_configure(int mode) {
  /* with no CPU worker there is no worker 0 to drive */
  if (mode == TSR_MPI_PROGRESS_WORKER && _tsr_env_int("STARPU_NCPU", -1) != 0)
    setenv("STARPU_MPI_DRIVER_CALL_FREQUENCY", "1", 0);
  driving = _tsr_env_int("STARPU_MPI_DRIVER_CALL_FREQUENCY", 0) > 0;
  if (driving && _tsr_env_int("STARPU_MPI_DRIVER_TASK_FREQUENCY", 0) <= 0)
    setenv("STARPU_MPI_DRIVER_TASK_FREQUENCY", "1", 1);
  return driving;
}

int _tsr_progress_start(int rank) {
  if (!driving || posted) return 0;
  sentinel_rank = rank;
  starpu_variable_data_register(&sentinel, STARPU_MAIN_RAM, (uintptr_t)&sentinel_word, sizeof sentinel_word);
  int ret = starpu_mpi_irecv_detached(sentinel, rank, SENTINEL_TAG, MPI_COMM_WORLD, NULL, NULL);
  if (ret) {
    starpu_data_unregister(sentinel);
    return ret;
  }
  posted = 1;
  return 0;
}

int _tsr_progress_stop(void) {
  if (!posted) return 0;
  int32_t word = 0;
  starpu_data_handle_t h;
  starpu_variable_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&word, sizeof word);
  int ret = starpu_mpi_send(h, sentinel_rank, SENTINEL_TAG, MPI_COMM_WORLD);
  starpu_data_unregister(h);
  if (ret) return ret;
  starpu_data_unregister(sentinel); /* waits for the receive to write */
  posted = 0;
  return 0;
}

int _tsr_mpi_wait_for_all(void) {
  int was = posted, ret = starpu_task_wait_for_all();
  if (!ret) ret = _tsr_progress_stop();
  if (!ret) ret = starpu_mpi_wait_for_all(MPI_COMM_WORLD);
  if (!ret && was) ret = _tsr_progress_start(sentinel_rank);
  return ret;
}

int _tsr_mpi_wait(starpu_mpi_req *req) {
  (void)starpu_mpi_wait(req, MPI_STATUS_IGNORE); /* -1 for a message that came first: progress.h */
  return 0;
}

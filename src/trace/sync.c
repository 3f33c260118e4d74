/* Across ranks: the clock offset of each rank to rank 0 from a few ping-pongs (the sample with the
 * smallest round trip wins; its error is at most half that round trip), and a barrier so that rank 0
 * merges only complete raw files. Messages go through StarPU-MPI (its progress thread owns MPI, so
 * the host thread must not call MPI directly). With one rank nothing here touches MPI. */
#include <mpi.h>
#include <starpu.h>
#include <starpu_mpi.h>

#include "runtime/error.h"
#include "runtime/progress.h"
#include "trace/record.h"

enum { PINGS = 8 };
/* Tags far above any (step, group, chunk) tag of the gradient exchange. */
#define TAG_PING ((starpu_mpi_tag_t)1 << 60)
#define TAG_DONE (TAG_PING + 1)

static int mpi_up(void) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  if (up) MPI_Finalized(&down);
  return up && !down;
}

tsr_status _tsr_trace_quiesce(int size) {
  int ret = size > 1 && mpi_up() ? _tsr_mpi_wait_for_all() : starpu_task_wait_for_all();
  return ret == 0 ? TSR_OK : _tsr_error(TSR_ERR_RUNTIME, "tsr_trace_stop: waiting for the tasks failed (%d)", ret);
}

/* Blocking exchange of one double through a registered variable. */
static int xchg(starpu_data_handle_t h, double *val, double send, int peer, starpu_mpi_tag_t tag, int is_send) {
  int ret;
  if (is_send) {
    if ((ret = starpu_data_acquire(h, STARPU_W))) return ret;
    *val = send;
    starpu_data_release(h);
    return starpu_mpi_send(h, peer, tag, MPI_COMM_WORLD);
  }
  MPI_Status status;
  return starpu_mpi_recv(h, peer, tag, MPI_COMM_WORLD, &status);
}

static double read_val(starpu_data_handle_t h, const double *val) {
  double v = 0;
  if (starpu_data_acquire(h, STARPU_R) == 0) {
    v = *val;
    starpu_data_release(h);
  }
  return v;
}

tsr_status _tsr_trace_clock_offset(int rank, int size, double *offset) {
  *offset = 0;
  if (size <= 1 || !mpi_up()) return TSR_OK;
  double val = 0;
  starpu_data_handle_t h;
  starpu_variable_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&val, sizeof val);
  int ret = 0;
  double best = 1e300;
  if (rank == 0) {
    for (int r = 1; r < size && !ret; r++)
      for (int k = 0; k < PINGS && !ret; k++) {
        ret = xchg(h, &val, 0, r, TAG_PING, 0);
        if (!ret) ret = xchg(h, &val, starpu_timing_now(), r, TAG_PING, 1);
      }
  } else {
    for (int k = 0; k < PINGS && !ret; k++) {
      double t1 = starpu_timing_now();
      ret = xchg(h, &val, t1, 0, TAG_PING, 1);
      if (!ret) ret = xchg(h, &val, 0, 0, TAG_PING, 0);
      double t2 = starpu_timing_now();
      if (!ret && t2 - t1 < best) {
        best = t2 - t1;
        *offset = read_val(h, &val) - 0.5 * (t1 + t2);
      }
    }
  }
  starpu_data_unregister(h);
  if (ret) return _tsr_error(TSR_ERR_RUNTIME, "tsr_trace_stop: clock ping-pong with rank 0 failed (%d)", ret);
  if (rank) _tsr_log(2, "trace: rank %d clock offset %.1f us (round trip %.1f us)", rank, *offset, best);
  return TSR_OK;
}

tsr_status _tsr_trace_barrier(int rank, int size) {
  if (size <= 1 || !mpi_up()) return TSR_OK;
  double val = 0;
  starpu_data_handle_t h;
  starpu_variable_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&val, sizeof val);
  int ret = 0;
  if (rank == 0)
    for (int r = 1; r < size && !ret; r++) ret = xchg(h, &val, 0, r, TAG_DONE, 0);
  else
    ret = xchg(h, &val, 1, 0, TAG_DONE, 1);
  starpu_data_unregister(h);
  return ret ? _tsr_error(TSR_ERR_RUNTIME, "tsr_trace_stop: barrier before merging failed (%d)", ret) : TSR_OK;
}

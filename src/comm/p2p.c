/* Point-to-point messages of the collectives (p2p.h): StarPU-MPI detached requests over
 * MPI_COMM_WORLD, addressed by world rank, so no blocking MPI call runs on a worker. */
#include <starpu_mpi.h>

#include "comm/p2p.h"
#include "runtime/communicator.h"
#include "trace/trace.h"

int _tsr_p2p_send(const struct _tsr_comm *cm, starpu_data_handle_t h, int peer, int64_t tag, int64_t step) {
  void *a = _tsr_trace_xfer_arg(step, cm->ranks[peer], starpu_data_get_size(h), tag, 1);
  return starpu_mpi_isend_detached_prio(h, cm->ranks[peer], tag, STARPU_MAX_PRIO, MPI_COMM_WORLD,
                                        a ? _tsr_trace_xfer_done : NULL, a);
}

int _tsr_p2p_recv(const struct _tsr_comm *cm, starpu_data_handle_t h, int peer, int64_t tag, int64_t step) {
  void *a = _tsr_trace_xfer_arg(step, cm->ranks[peer], starpu_data_get_size(h), tag, 0);
  return starpu_mpi_irecv_detached(h, cm->ranks[peer], tag, MPI_COMM_WORLD, a ? _tsr_trace_xfer_done : NULL, a);
}

int64_t _tsr_p2p_tag(const struct _tsr_comm *cm, int64_t step, int g, int k) {
  return _tsr_comm_tag(cm, ((((int64_t)(step & 0xFFFFF)) * 4096 + g) * 2048) + k);
}

int64_t _tsr_p2p_layer_tag(const struct _tsr_comm *cm, int64_t step, int layer, int slice, int k) {
  return _tsr_comm_tag(cm, (((((int64_t)(step & 0xFFFFF)) * 1024 + layer) * 64 + slice) * 64) + k);
}

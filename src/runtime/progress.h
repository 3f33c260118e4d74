/* Who drives StarPU-MPI's messages (progress.c): its progress thread alone, or that thread as CPU
 * worker 0 too (tsr_mpi_progress). */
#ifndef TSR_RUNTIME_PROGRESS_H
#define TSR_RUNTIME_PROGRESS_H

#include <starpu_mpi.h>

/* Before StarPU-MPI starts: sets StarPU-MPI's driver variables for `mode` (tsr_mpi_progress; the
 * user's STARPU_MPI_DRIVER_CALL_FREQUENCY takes precedence) and returns 1 when the progress thread
 * will drive CPU worker 0 (no core is then kept for it), else 0. */
int _tsr_progress_configure(int mode);
/* After StarPU-MPI has started on world rank `rank`, when it drives worker 0: posts the receive that
 * keeps it driving (0 or StarPU-MPI's error). */
int _tsr_progress_start(int rank);
/* Ends that receive, by a message to this rank itself, and waits for it (0 or StarPU-MPI's error).
 * Call before starpu_mpi_shutdown and starpu_mpi_wait_for_all, which wait for it; no task may be
 * pending: with no request in flight worker 0 runs no more. */
int _tsr_progress_stop(void);
/* starpu_mpi_wait_for_all(MPI_COMM_WORLD) that also holds where the progress thread drives worker 0:
 * the tasks first, then the receive ended, the requests and the barrier, and the receive again. */
int _tsr_mpi_wait_for_all(void);

/* starpu_mpi_wait without its result: returns 0 once the request has completed. StarPU-MPI 1.3
 * aborts the process on an MPI failure (its assertions on what MPI returns), and its starpu_mpi_wait
 * returns -1 for a receive whose message arrived before the receive was posted: that message is
 * copied from StarPU-MPI's own buffer and the request's result keeps its initial -1 (starpu_mpi_recv
 * and starpu_mpi_send return 0 always; StarPU 1.4's starpu_mpi_wait too). A caller that stopped on
 * that -1 left its peer waiting for a message it would never send (issues 13 and 19:
 * tessera-scale --calibrate hung). */
int _tsr_mpi_wait(starpu_mpi_req *req);

#endif

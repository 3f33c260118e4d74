/* NCCL reductions for GPU builds (nccl.c): set up when StarPU has CUDA workers and several ranks;
 * otherwise trainer->nccl stays NULL and the StarPU-MPI ring is used. */
#ifndef TSR_COMM_NCCL_H
#define TSR_COMM_NCCL_H

#include <tessera/status.h>

struct tsr_trainer;
tsr_status _tsr_nccl_setup(struct tsr_trainer *t);
int _tsr_nccl_allreduce(struct tsr_trainer *t, int g);
void _tsr_nccl_teardown(struct tsr_trainer *t);

#endif

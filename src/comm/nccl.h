/* The NCCL launchers of the NCCL collectives (nccl.c: entries of the collective table, chosen when
 * StarPU has CUDA workers and the communicator several ranks; otherwise the StarPU-MPI ring). */
#ifndef TSR_COMM_NCCL_H
#define TSR_COMM_NCCL_H

#if defined(TSR_WITH_CUDA) || defined(__CUDACC__)
/* The NCCL launchers (nccl_cuda.cu): plain functions on device pointers and a stream; 0, or -1
 * after printing the failed call. */
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#ifdef __cplusplus
extern "C" {
#endif
int _tsr_nccl_unique_id(void *id, size_t len);
int _tsr_nccl_comm_init(void **comm, int nranks, const void *id, int rank);
int _tsr_nccl_allreduce_sum(float *buf, size_t n, void *comm, cudaStream_t stream);
/* The first `keep` floats in float32, the other n - keep through `wire` (device, n - keep halves)
 * in bf16 (bf16 = 1) or fp16, widened back into buf. */
int _tsr_nccl_allreduce_half(float *buf, size_t n, size_t keep, uint16_t *wire, int bf16, void *comm,
                             cudaStream_t stream);
void _tsr_nccl_comm_destroy(void *comm);
#ifdef __cplusplus
}
#endif
#endif

#endif

/* NCCL side of the gradient reductions on GPUs: the unique id, the communicator (created on the
 * CUDA device of the worker that runs the reductions) and the in-place sum on a StarPU stream.
 * Plain launchers: the StarPU codelet that calls them is in nccl.c. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

extern "C" {
int _tsr_nccl_unique_id(void *id, size_t len);
int _tsr_nccl_comm_init(void **comm, int nranks, const void *id, int rank);
int _tsr_nccl_allreduce_sum(float *buf, size_t n, void *comm, cudaStream_t stream);
void _tsr_nccl_comm_destroy(void *comm);
}

static int report(ncclResult_t r, const char *call) {
  if (r == ncclSuccess) return 0;
  fprintf(stderr, "tessera: %s failed: %s\n", call, ncclGetErrorString(r));
  return -1;
}

int _tsr_nccl_unique_id(void *id, size_t len) {
  if (len < sizeof(ncclUniqueId)) return -1;
  ncclUniqueId u;
  if (report(ncclGetUniqueId(&u), "ncclGetUniqueId")) return -1;
  memcpy(id, &u, sizeof u);
  return 0;
}

int _tsr_nccl_comm_init(void **comm, int nranks, const void *id, int rank) {
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  ncclComm_t c = NULL;
  if (report(ncclCommInitRank(&c, nranks, u, rank), "ncclCommInitRank")) return -1;
  *comm = c;
  return 0;
}

int _tsr_nccl_allreduce_sum(float *buf, size_t n, void *comm, cudaStream_t stream) {
  return report(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, (ncclComm_t)comm, stream), "ncclAllReduce");
}

void _tsr_nccl_comm_destroy(void *comm) {
  if (comm) report(ncclCommDestroy((ncclComm_t)comm), "ncclCommDestroy");
}

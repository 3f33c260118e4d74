/* NCCL side of the gradient reductions on GPUs: the unique id, the communicator (created on the
 * CUDA device of the worker that runs the reductions) and the in-place sum on a StarPU stream, in
 * float32 or, to halve the bytes, in bf16/fp16. Plain launchers: the StarPU codelet that calls them
 * is in nccl.c. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <tessera/context.h>
#include "comm/nccl.h"
#include "cuda_util.h" /* the bf16/fp16 conversions */


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

/* The first `keep` floats (the control word, which must sum exactly) in float32, the rest rounded to
 * bf16/fp16 in `wire` (n - keep halves of device memory), summed by NCCL in that format (so partial
 * sums are rounded at each hop of NCCL's algorithm, unlike the StarPU-MPI ring, which sums in
 * float32) and widened back into buf. Both collectives are one NCCL group. NCCL gives every rank the
 * same result bits, so the ranks' parameters stay identical. */
int _tsr_nccl_allreduce_half(float *buf, size_t n, size_t keep, uint16_t *wire, int bf16, void *comm,
                             cudaStream_t stream) {
  ncclComm_t c = (ncclComm_t)comm;
  int prec = bf16 ? TSR_PRECISION_BF16 : TSR_PRECISION_FP16;
  size_t m = n > keep ? n - keep : 0;
  if (m && _tsr_narrow_cuda(buf + keep, wire, m, prec, stream)) return -1;
  if (report(ncclGroupStart(), "ncclGroupStart")) return -1;
  int bad = 0;
  if (keep)
    bad |= report(ncclAllReduce(buf, buf, keep, ncclFloat32, ncclSum, c, stream), "ncclAllReduce (control word)");
  if (m)
    bad |= report(ncclAllReduce(wire, wire, m, bf16 ? ncclBfloat16 : ncclFloat16, ncclSum, c, stream),
                  bf16 ? "ncclAllReduce (bf16)" : "ncclAllReduce (fp16)");
  bad |= report(ncclGroupEnd(), "ncclGroupEnd");
  if (bad) return -1;
  return m ? _tsr_widen_cuda(wire, buf + keep, m, prec, 0, stream) : 0;
}

void _tsr_nccl_comm_destroy(void *comm) {
  if (comm) report(ncclCommDestroy((ncclComm_t)comm), "ncclCommDestroy");
}

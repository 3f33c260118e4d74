/* Gradient reductions with NCCL when StarPU has CUDA workers: one CUDA task per group calls
 * ncclAllReduce on StarPU's stream for that worker (STARPU_CUDA_ASYNC). Every collective task also
 * accesses one token handle in RW, so collectives run in submission order on every rank — the
 * same order everywhere, since every rank submits the same graph. The tasks are pinned to one CUDA
 * worker per rank, the one owning the communicator. With bf16/fp16 reductions a per-group scratch
 * handle holds the narrowed gradients on the device; the control word stays float32. */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <starpu_mpi.h>

#include "train/fingerprint.h"
#include "comm/groups.h"
#include "comm/nccl.h"
#include "train/trainer.h"
#include "runtime/error.h"

#if defined(STARPU_USE_CUDA) && defined(TSR_WITH_CUDA)


struct nccl_state {
  void *comm;
  int worker;            /* the CUDA worker that owns the communicator */
  char id[128];
  float token;
  starpu_data_handle_t token_h;
  starpu_data_handle_t *wire; /* per group, n halves (bf16/fp16 reductions only) */
  int ngroups, fmt;           /* tsr_reduce_precision */
  int rank, size, failed;
};

struct nccl_arg {
  struct nccl_state *s;
  size_t keep; /* leading floats reduced in float32: the control word of group 0 */
};

static void allreduce_cuda(void *buffers[], void *cl_arg) {
  struct nccl_arg *a = cl_arg;
  struct nccl_state *s = a->s;
  if (!s->comm && _tsr_nccl_comm_init(&s->comm, s->size, s->id, s->rank) != 0) {
    s->failed = 1;
    return;
  }
  cudaStream_t st = starpu_cuda_get_local_stream();
  int r = s->fmt == TSR_REDUCE_F32
              ? _tsr_nccl_allreduce_sum(TSR_BUF(buffers, 0), TSR_NX(buffers, 0), s->comm, st)
              : _tsr_nccl_allreduce_half(TSR_BUF(buffers, 0), TSR_NX(buffers, 0), a->keep,
                                         (uint16_t *)STARPU_VECTOR_GET_PTR(buffers[2]), s->fmt == TSR_REDUCE_BF16,
                                         s->comm, st);
  if (r != 0) s->failed = 1;
}

static struct starpu_perfmodel allreduce_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_nccl_allreduce"};
static struct starpu_codelet allreduce_cl = {
    .cuda_funcs = {allreduce_cuda}, .cuda_flags = {STARPU_CUDA_ASYNC}, .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_nccl_allreduce", .model = &allreduce_model};

tsr_status _tsr_nccl_setup(tsr_trainer *t) {
  if (t->size < 2 || starpu_cuda_worker_get_count() == 0 || !t->use_nccl) return TSR_OK;
  struct nccl_state *s = calloc(1, sizeof *s);
  if (!s) return _tsr_error(TSR_ERR_NOMEM, "NCCL: out of memory");
  s->rank = t->rank, s->size = t->size;
  s->worker = starpu_worker_get_by_type(STARPU_CUDA_WORKER, 0);
  if (t->rank == 0 && _tsr_nccl_unique_id(s->id, sizeof s->id) != 0) {
    free(s);
    return _tsr_error(TSR_ERR_RUNTIME, "NCCL: ncclGetUniqueId failed");
  }
  /* rank 0's id reaches every rank through StarPU-MPI */
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)s->id, sizeof s->id, 1);
  int ret = 0;
  for (int r = 1; !ret && r < t->size; r++)
    ret = t->rank == 0 ? starpu_mpi_send(h, r, 0x7A6F0000, MPI_COMM_WORLD)
          : t->rank == r ? starpu_mpi_recv(h, 0, 0x7A6F0000, MPI_COMM_WORLD, MPI_STATUS_IGNORE) : 0;
  starpu_data_unregister(h);
  if (ret) {
    free(s);
    return _tsr_error(TSR_ERR_RUNTIME, "NCCL: exchanging the unique id failed (%d)", ret);
  }
  s->fmt = t->grad_reduce;
  if (s->fmt != TSR_REDUCE_F32) {
    s->wire = calloc(t->ngroups, sizeof *s->wire);
    if (!s->wire) {
      free(s);
      return _tsr_error(TSR_ERR_NOMEM, "NCCL: out of memory");
    }
    s->ngroups = t->ngroups;
    for (int g = 0; g < t->ngroups; g++) /* no home: StarPU allocates it on the device as scratch */
      starpu_vector_data_register(&s->wire[g], -1, 0, (uint32_t)t->groups[g].n, sizeof(uint16_t));
  }
  starpu_variable_data_register(&s->token_h, STARPU_MAIN_RAM, (uintptr_t)&s->token, sizeof s->token);
  t->nccl = s;
  _tsr_log(t->rank == 0, "gradient reductions: NCCL (%s) on CUDA worker %d of each rank",
           s->fmt == TSR_REDUCE_F32 ? "float32" : s->fmt == TSR_REDUCE_BF16 ? "bf16" : "fp16", s->worker);
  return TSR_OK;
}

int _tsr_nccl_allreduce(tsr_trainer *t, int g) {
  struct nccl_state *s = t->nccl;
  struct _tsr_group *gr = &t->groups[g];
  if (s->failed) return _tsr_error(TSR_ERR_RUNTIME, "NCCL: an earlier collective failed (see above)"), -1;
  starpu_data_unpartition_submit(gr->h, gr->nchild, gr->tensors, STARPU_MAIN_RAM);
  struct starpu_task *task = starpu_task_create();
  task->cl = &allreduce_cl;
  task->name = "nccl_allreduce";
  task->priority = STARPU_MAX_PRIO;
  task->execute_on_a_specific_worker = 1;
  task->workerid = s->worker;
  struct nccl_arg *a = malloc(sizeof *a);
  if (!a) {
    starpu_task_destroy(task);
    starpu_data_partition_submit(gr->h, gr->nchild, gr->tensors);
    return _tsr_error(TSR_ERR_NOMEM, "NCCL: out of memory"), -1;
  }
  a->s = s;
  a->keep = g == 0 ? TSR_CTL_FLOATS : 0;
  task->cl_arg = a;
  task->cl_arg_size = sizeof *a;
  task->cl_arg_free = 1;
  task->nbuffers = s->fmt == TSR_REDUCE_F32 ? 2 : 3;
  task->handles[0] = gr->h, task->modes[0] = STARPU_RW;
  task->handles[1] = s->token_h, task->modes[1] = STARPU_RW;
  if (s->fmt != TSR_REDUCE_F32) task->handles[2] = s->wire[g], task->modes[2] = STARPU_SCRATCH;
  /* bytes this rank sends in NCCL's ring algorithm: 2 (N - 1) / N of the payload */
  size_t payload = s->fmt == TSR_REDUCE_F32 ? gr->n * sizeof(float)
                                            : a->keep * sizeof(float) + (gr->n - a->keep) * sizeof(uint16_t);
  t->reduce_bytes += (int64_t)(2 * (s->size - 1) * payload / s->size);
  int ret = starpu_task_submit(task);
  starpu_data_partition_submit(gr->h, gr->nchild, gr->tensors);
  if (ret) _tsr_error(TSR_ERR_RUNTIME, "NCCL: submitting the allreduce of group %d failed (%d)", g, ret);
  return ret;
}

void _tsr_nccl_teardown(tsr_trainer *t) {
  struct nccl_state *s = t->nccl;
  if (!s) return;
  starpu_data_unregister(s->token_h);
  for (int g = 0; g < s->ngroups; g++) starpu_data_unregister(s->wire[g]);
  free(s->wire);
  _tsr_nccl_comm_destroy(s->comm);
  free(s);
  t->nccl = NULL;
}

#else /* no CUDA in this StarPU or no CUDA codelets compiled: reductions use the StarPU-MPI ring */

tsr_status _tsr_nccl_setup(tsr_trainer *t) { return TSR_OK; }
int _tsr_nccl_allreduce(tsr_trainer *t, int g) {
  return _tsr_error(TSR_ERR_STATE, "NCCL: not compiled in (needs --with-cuda and a StarPU with CUDA)"), -1;
}
void _tsr_nccl_teardown(tsr_trainer *t) {}

#endif

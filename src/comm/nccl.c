/* Gradient reductions with NCCL when StarPU has CUDA workers: one CUDA task per group calls
 * ncclAllReduce on StarPU's stream for that worker (STARPU_CUDA_ASYNC). Every collective task also
 * accesses one token handle in RW, so collectives run in submission order on every rank — the
 * same order everywhere, since every rank submits the same graph. The tasks are pinned to one CUDA
 * worker per rank, the one owning the NCCL communicator (one per communicator: its members, in its
 * order). With bf16/fp16 reductions a per-group scratch handle holds the narrowed gradients on the
 * device; the kept word stays float32. Three entries of the collective table, one per format. */
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <starpu_mpi.h>

#include "comm/collective.h"
#include "comm/groups.h"
#include "comm/nccl.h"
#include "convert.h"
#include "runtime/communicator.h"
#include "runtime/error.h"
#include "runtime/submit.h"

#define NCCL_ID_TAG 0x7A6F0000

#if defined(STARPU_USE_CUDA) && defined(TSR_WITH_CUDA)

struct nccl_state {
  void *comm;
  int worker;            /* the CUDA worker that owns the communicator */
  char id[128];
  float token;
  starpu_data_handle_t token_h;
  starpu_data_handle_t *wire; /* per group, n halves (bf16/fp16 reductions only) */
  int ngroups, fmt;           /* 0 (float32), TSR_WIRE_BF16 or TSR_WIRE_FP16 */
  int rank, size, failed;     /* this process's index in the communicator, its size */
};

struct nccl_arg {
  struct nccl_state *s;
  size_t keep; /* leading floats reduced in float32: the kept word of group 0 */
};

static void allreduce_cuda(void *buffers[], void *cl_arg) {
  struct nccl_arg *a = cl_arg;
  struct nccl_state *s = a->s;
  if (!s->comm && _tsr_nccl_comm_init(&s->comm, s->size, s->id, s->rank) != 0) {
    s->failed = 1;
    return;
  }
  cudaStream_t st = starpu_cuda_get_local_stream();
  int r = s->fmt == 0 ? _tsr_nccl_allreduce_sum(TSR_BUF(buffers, 0), TSR_NX(buffers, 0), s->comm, st)
                      : _tsr_nccl_allreduce_half(TSR_BUF(buffers, 0), TSR_NX(buffers, 0), a->keep,
                                                 (uint16_t *)STARPU_VECTOR_GET_PTR(buffers[2]),
                                                 s->fmt == TSR_WIRE_BF16, s->comm, st);
  if (r != 0) s->failed = 1;
}

static struct starpu_perfmodel allreduce_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_nccl_allreduce"};
static struct starpu_codelet allreduce_cl = {
    .cuda_funcs = {allreduce_cuda}, .cuda_flags = {STARPU_CUDA_ASYNC}, .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_nccl_allreduce", .model = &allreduce_model};

static int usable(const struct _tsr_comm *comm) {
  return comm->size >= 2 && starpu_cuda_worker_get_count() > 0;
}

/* The first member's NCCL id reaches every member through StarPU-MPI. */
static int share_id(const struct _tsr_comm *cm, char *id, size_t len) {
  int64_t tag = _tsr_comm_tag(cm, NCCL_ID_TAG), ret = 0;
  for (int r = 1; !ret && r < cm->size; r++)
    ret = cm->index == 0 ? _tsr_comm_xfer(id, len, cm->ranks[r], 1, tag)
          : cm->index == r ? _tsr_comm_xfer(id, len, cm->ranks[0], 0, tag) : 0;
  return (int)ret;
}

static tsr_status setup(struct _tsr_groups *gs) {
  struct nccl_state *s = calloc(1, sizeof *s);
  if (!s) return _tsr_error(TSR_ERR_NOMEM, "NCCL: out of memory");
  s->rank = gs->comm->index, s->size = gs->comm->size;
  s->worker = starpu_worker_get_by_type(STARPU_CUDA_WORKER, 0);
  if (s->rank == 0 && _tsr_nccl_unique_id(s->id, sizeof s->id) != 0) {
    free(s);
    return _tsr_error(TSR_ERR_RUNTIME, "NCCL: ncclGetUniqueId failed");
  }
  int ret = share_id(gs->comm, s->id, sizeof s->id);
  if (ret) {
    free(s);
    return _tsr_error(TSR_ERR_RUNTIME, "NCCL: exchanging the unique id failed (%d)", ret);
  }
  s->fmt = gs->ops->variant;
  if (s->fmt != 0) {
    s->wire = calloc(gs->n, sizeof *s->wire);
    if (!s->wire) {
      free(s);
      return _tsr_error(TSR_ERR_NOMEM, "NCCL: out of memory");
    }
    s->ngroups = gs->n;
    for (int g = 0; g < gs->n; g++) /* no home: StarPU allocates it on the device as scratch */
      starpu_vector_data_register(&s->wire[g], -1, 0, (uint32_t)gs->g[g].n, sizeof(uint16_t));
  }
  starpu_variable_data_register(&s->token_h, STARPU_MAIN_RAM, (uintptr_t)&s->token, sizeof s->token);
  gs->state = s;
  if (gs->comm->index == 0) /* once, from the first rank: the level is 2 (verbose), as the ring's */
    _tsr_log(2, "gradient reductions: NCCL (%s) on CUDA worker %d of each rank",
             s->fmt == 0 ? "float32" : s->fmt == TSR_WIRE_BF16 ? "bf16" : "fp16", s->worker);
  return TSR_OK;
}

static int submit(struct _tsr_groups *gs, int g, int64_t step) {
  struct nccl_state *s = gs->state;
  struct _tsr_group *gr = &gs->g[g];
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
  a->keep = gr->keep;
  task->cl_arg = a;
  task->cl_arg_size = sizeof *a;
  task->cl_arg_free = 1;
  task->nbuffers = s->fmt == 0 ? 2 : 3;
  task->handles[0] = gr->h, task->modes[0] = STARPU_RW;
  task->handles[1] = s->token_h, task->modes[1] = STARPU_RW;
  if (s->fmt != 0) task->handles[2] = s->wire[g], task->modes[2] = STARPU_SCRATCH;
  int ret = starpu_task_submit(task);
  starpu_data_partition_submit(gr->h, gr->nchild, gr->tensors);
  if (ret) _tsr_error(TSR_ERR_RUNTIME, "NCCL: submitting the allreduce of group %d failed (%d)", g, ret);
  return ret;
}

/* Bytes this rank sends in NCCL's ring algorithm: 2 (N - 1) / N of the payload. */
static int64_t wire_bytes(const struct _tsr_groups *gs, int g) {
  const struct _tsr_group *gr = &gs->g[g];
  size_t payload = gs->ops->variant == 0 ? gr->n * sizeof(float)
                                         : gr->keep * sizeof(float) + (gr->n - gr->keep) * sizeof(uint16_t);
  return (int64_t)(2 * (gs->comm->size - 1) * payload / gs->comm->size);
}

static void teardown(struct _tsr_groups *gs) {
  struct nccl_state *s = gs->state;
  if (!s) return;
  starpu_data_unregister(s->token_h);
  for (int g = 0; g < s->ngroups; g++) starpu_data_unregister(s->wire[g]);
  free(s->wire);
  _tsr_nccl_comm_destroy(s->comm);
  free(s);
  gs->state = NULL;
}

#define NCCL(fmt_name, fmt)                                                                                    \
  {.name = fmt_name, .impl = "nccl", .variant = fmt, .usable = usable, .setup = setup, .teardown = teardown,    \
   .submit = submit, .wire_bytes = wire_bytes}

#else /* no CUDA in this StarPU or no CUDA codelets compiled: the registry falls back to the ring */

static int usable(const struct _tsr_comm *comm) { return 0; }
#define NCCL(fmt_name, fmt) {.name = fmt_name, .impl = "nccl", .variant = fmt, .usable = usable}

#endif

const struct _tsr_collective_ops _tsr_nccl_f32 = NCCL("f32", 0);
const struct _tsr_collective_ops _tsr_nccl_bf16 = NCCL("bf16", TSR_WIRE_BF16);
const struct _tsr_collective_ops _tsr_nccl_fp16 = NCCL("fp16", TSR_WIRE_FP16);

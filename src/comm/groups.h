/* Gradient groups: contiguous ranges of the gradient buffer (backward order), each registered as
 * one StarPU handle partitioned into its tensors' gradients (used by backward and updates) or into
 * ring chunks (used by the allreduce); switching partitions is what orders the two. */
#ifndef TSR_COMM_GROUPS_H
#define TSR_COMM_GROUPS_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>

struct tsr_trainer;

struct _tsr_group {
  int first, end;               /* tensors [first, end) of trainer->tensors (running statistics
                                   of batch norm included: they have no gradient) */
  int count;                    /* trainable tensors among them */
  size_t off, n;                /* range of the gradient buffer, in floats */
  starpu_data_handle_t h;       /* the whole group */
  starpu_data_handle_t *tensors;/* partition 1: one child per tensor (the tensors' hg); group 0
                                   starts with the control word (trainer->ctl) */
  int nchild;                   /* children of partition 1: count, plus 1 in group 0 */
  uint32_t *tensor_len;
  starpu_data_handle_t *chunks; /* partition 2: one chunk per rank (ranks > 1 only) */
  uint32_t *chunk_len;
  starpu_data_handle_t *tmp;    /* receive buffers, one per chunk (wire format with half reductions) */
  void **tmpbuf;
  /* half-precision reductions (trainer->grad_reduce): send buffers in the wire format of
   * codelets/convert.h, and per chunk the values at its start that stay float32 (control word) */
  starpu_data_handle_t *wire;
  void **wirebuf;
  uint32_t *chunk_keep;
};

/* Default group size when neither the API, TESSERA_GROUP_BYTES nor the model file sets one. */
#define TSR_DEFAULT_GROUP_BYTES (256 * 1024)

/* Cuts the trainable tensors into groups (bytes < 0: one group per layer), registers the group
 * handles and makes the tensor partitions active. Logs the layout once (rank 0). */
#include <tessera/status.h>
tsr_status _tsr_groups_build(struct tsr_trainer *t, long long bytes);
void _tsr_groups_destroy(struct tsr_trainer *t);
/* Submits the allreduce (sum, ring reduce-scatter + allgather over chunks) of group g for step
 * `step`; the tensors' gradients are usable again by tasks submitted after it. No-op on 1 rank.
 * With trainer->grad_reduce bf16/fp16 chunks travel in half precision and are summed in float32;
 * the owner of a reduced chunk rounds it as it sends it, so every rank ends with the same values. */
int _tsr_group_allreduce(struct tsr_trainer *t, int g, int64_t step);
/* Index of the group holding tensor i. */
int _tsr_group_of(const struct tsr_trainer *t, int tensor);

#endif

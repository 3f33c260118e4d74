/* Gradient groups over a gradient-buffer view: contiguous ranges of the buffer (backward order),
 * each registered as one StarPU handle partitioned into its tensors' gradients (used by backward
 * and updates); a collective may plan partitions of its own (the ring's chunks). Switching
 * partitions is what orders the two. The groups see the buffer and a communicator, not the trainer. */
#ifndef TSR_COMM_GROUPS_H
#define TSR_COMM_GROUPS_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>
#include <tessera/status.h>

#include "comm/net.h"

struct _tsr_comm;
struct _tsr_collective_ops;

/* One tensor of the view, in buffer order. */
struct _tsr_grad_tensor {
  const char *name; /* for the layout log */
  size_t off, n;    /* its gradient: floats [off, off + n) of the buffer (trainable tensors only) */
  int layer;        /* groups are cut between layers only */
  int trainable;    /* 0: no gradient (running statistics); it still counts in the indices */
};

/* The gradient buffer as the collectives see it. */
struct _tsr_grad_view {
  float *buf;
  size_t keep;  /* its first `keep` floats (<= 16) are a word summed exactly, in float32 whatever the
                   wire format (the trainer's control word); they lead group 0 as its own child */
  int ntensors;
  const struct _tsr_grad_tensor *tensors;
};

struct _tsr_group {
  int first, end;               /* tensors [first, end) of the view (untrainable ones included) */
  int count;                    /* trainable tensors among them */
  size_t off, n;                /* range of the buffer, in floats */
  size_t keep;                  /* leading floats that stay float32: the view's keep in group 0, else 0 */
  starpu_data_handle_t h;       /* the whole group */
  starpu_data_handle_t *tensors;/* its partition: the kept word (group 0), then one child per tensor */
  int nchild;
  uint32_t *tensor_len;
  const struct _tsr_collective_ops *ops; /* its collective (NULL on one rank) */
  void *priv;                   /* the collective's state for this group */
};

struct _tsr_groups {
  const struct _tsr_comm *comm;
  int n;
  struct _tsr_group *g;
  starpu_data_handle_t *grad;   /* per view tensor: its gradient, a child of its group (NULL if untrainable) */
  starpu_data_handle_t head;    /* the kept word: a child of group 0, or registered alone without groups */
  int head_own;
  const char *name;             /* the reduction's name ("f32", "bf16", ...) */
  const char *algo;             /* set before _tsr_groups_build: the implementation to use ("ring",
                                   "rd", "tree", "hier"), "auto" (per group, least cost on the
                                   measured links) or NULL (the first entry of the name that can run) */
  const struct _tsr_collective_ops *ops; /* NULL on one rank: nothing to reduce; else the groups'
                                   collective, or the one whose function runs */
  const struct _tsr_collective_ops *cand[8]; /* "auto": the entries it chooses among */
  int ncand;
  struct _tsr_net net;          /* nodes and links, when an entry or "auto" needed them */
  void *state;                  /* the collective's state for all groups */
  int64_t bytes;                /* bytes this rank has posted on the wire (tsr_trainer_reduce_bytes) */
};

/* Default group size when neither the API, TESSERA_GROUP_BYTES nor the model file sets one. */
#define TSR_DEFAULT_GROUP_BYTES (256 * 1024)

/* Cuts the view's trainable tensors into groups (bytes < 0: one group per layer), registers the
 * group handles, makes the tensor partitions active and picks the collective `name` that can run
 * on comm, passing over implementation skip_impl (NULL: none; no collective on one rank). Logs the
 * layout once (comm index 0). */
tsr_status _tsr_groups_build(struct _tsr_groups *gs, const struct _tsr_grad_view *v, const struct _tsr_comm *comm,
                             long long bytes, const char *name, const char *skip_impl);
/* Chooses each group's collective with "auto" (measuring the links: collective over the
 * communicator) and sets the collectives up (their buffers, their own exchanges between ranks). */
tsr_status _tsr_groups_start(struct _tsr_groups *gs);
/* As _tsr_groups_start, with each group's collective taken from `like` (groups of the same layout
 * over another buffer, already started): no second measurement of the links. */
tsr_status _tsr_groups_start_as(struct _tsr_groups *gs, const struct _tsr_groups *like);
void _tsr_groups_destroy(struct _tsr_groups *gs);
/* Submits the sum of group g over the communicator for step `step`; the tensors' gradients are
 * usable again by tasks submitted after it. No-op on one rank. */
int _tsr_group_allreduce(struct _tsr_groups *gs, int g, int64_t step);

#endif

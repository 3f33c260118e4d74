/* A collective as a small table of functions over gradient groups (groups.h) and a communicator,
 * and the registry that names them (registry.c). An entry is one way of summing the groups across
 * ranks: the StarPU-MPI ring with float32, bf16 or fp16 chunks on the wire (ring.c), recursive
 * doubling and the binomial tree (tree.c), the hierarchical one over nodes (hier.c), recursive
 * halving and doubling (halving.c) and the hierarchical one with it across nodes (hier_rh.c), NCCL
 * on GPUs (nccl.c); or of combining update directions (Lion Cub's sign reductions, sign.c). Several entries
 * may share a name (the reduction the user asks for); by default the registry picks the first one
 * that can run here, the user may name the implementation (the algorithm), and "auto" picks per
 * group the one of least cost on the measured links. */
#ifndef TSR_COMM_COLLECTIVE_H
#define TSR_COMM_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>
#include <tessera/status.h>

struct _tsr_comm;
struct _tsr_groups;

struct _tsr_collective_ops {
  const char *name;  /* what users select: "f32", "bf16", "fp16" */
  const char *impl;  /* how (the algorithm users may select): "ring", "rd", "tree", "hier",
                        "rabenseifner", "hier-rh", "nccl" */
  int variant;       /* a parameter of the implementation shared by several entries (wire format) */
  int signs;         /* 1: combines update directions, not gradients (sign.c): each rank's optimizer
                        writes its direction into the gradient buffer before, and applies the
                        combined one after (an optimizer with direction and apply halves) */
  /* (optional) 1 when it can run on comm in this process (NULL: always) */
  int (*usable)(const struct _tsr_comm *comm);
  /* (optional) TSR_OK when it can reduce these groups, else a status naming the reason; runs
   * before the ranks agree on their layout, so it must not communicate */
  tsr_status (*check)(const struct _tsr_groups *gs);
  /* (optional) buffers and handles for the groups whose collective it is (gs->g[i].ops; with
   * "auto" other groups may have other entries; an entry without `cost` has every group) in
   * gs->g[i].priv, or gs->state; may exchange messages over gs->comm. teardown releases them, also
   * after a failed setup. While any function of an entry runs, gs->ops is that entry. */
  tsr_status (*setup)(struct _tsr_groups *gs);
  void (*teardown)(struct _tsr_groups *gs);
  /* submits the sum of group g for step `step`: the group's tensor partition is active before and
   * must be again after; 0 or an error (message set) */
  int (*submit)(struct _tsr_groups *gs, int g, int64_t step);
  /* bytes this rank puts on the wire for one reduction of group g */
  int64_t (*wire_bytes)(const struct _tsr_groups *gs, int g);
  /* (optional) state that must survive a restart, e.g. error-feedback residuals: its floats for
   * group g and their count (NULL: none; no entry has any yet) */
  float *(*state)(struct _tsr_groups *gs, int g, size_t *n);
  /* (optional) seconds one reduction of group g takes by the alpha-beta model on gs->net's links;
   * the entries of a name that have one are the choices of "auto" */
  double (*cost)(const struct _tsr_groups *gs, int g);
};

/* The reductions' names in registry order (the index is tsr_reduce_precision's value). */
int _tsr_collective_count(void);
const char *_tsr_collective_name(int index);
int _tsr_collective_index(const char *name); /* -1 if unknown */
/* The names as "f32, bf16 or fp16" in buf, for messages; returns buf. */
const char *_tsr_collective_names(char *buf, size_t len);
/* The first entry named `name` that can run on comm and is not of implementation `skip_impl`
 * (NULL: any; "nccl" when the user turned NCCL off), or NULL. */
const struct _tsr_collective_ops *_tsr_collective_select(const char *name, const struct _tsr_comm *comm,
                                                         const char *skip_impl);
/* The entries named `name` that can run on comm, of implementation `impl` (NULL: any), passing
 * over skip_impl, in registry order: at most max into out; returns how many there are. */
int _tsr_collective_usable(const char *name, const char *impl, const struct _tsr_comm *comm, const char *skip_impl,
                           const struct _tsr_collective_ops **out, int max);
/* 1 when `algo` is "auto" or the implementation of some entry. */
int _tsr_collective_algo_known(const char *algo);
/* The implementations as "ring, rd, tree, hier, nccl or auto" in buf, for messages; returns buf. */
const char *_tsr_collective_algos(char *buf, size_t len);

#endif

/* The ring's chunked reduce-scatter + allgather of one group over any communicator, for the ring
 * entries (ring.c), the hierarchical allreduce, which runs it across node leaders (hier.c), and the
 * hierarchical halving-doubling one, which runs its two halves inside a node (hier_rh.c). */
#ifndef TSR_COMM_RING_H
#define TSR_COMM_RING_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>
#include <tessera/status.h>

struct _tsr_comm;
struct _tsr_groups;
struct _tsr_group;
struct _tsr_ring;

#define TSR_WIRE_F32 0 /* else TSR_WIRE_BF16 or TSR_WIRE_FP16 (convert.h) */

/* TSR_OK when every group has at least one value per member of gs->comm, else the message. */
tsr_status _tsr_ring_check(const struct _tsr_groups *gs);
/* Chunks of group g for r members (a partition plan of g->h) and their buffers in wire format fmt;
 * NULL when out of memory. _tsr_ring_free also frees a half-made plan. */
struct _tsr_ring *_tsr_ring_plan(struct _tsr_group *g, int r, int fmt);
void _tsr_ring_free(struct _tsr_group *g, struct _tsr_ring *q);
/* Submits the ring sum of g->h (whole, no partition active) over cm, tags from (step, group index
 * gi); g->h is whole again afterwards. 0 or StarPU-MPI's error. */
int _tsr_ring_sum(const struct _tsr_comm *cm, struct _tsr_group *g, struct _tsr_ring *q, int fmt, int gi, int64_t step);
/* Makes g->h's chunks the active partition (on) or g->h whole again (off). */
void _tsr_ring_partition(struct _tsr_group *g, struct _tsr_ring *q, int on);
/* Its two halves, over g's chunks (partition active): the reduce-scatter, after which member me
 * holds the full sum of chunk _tsr_ring_owned(q, me), and the allgather, after which every member
 * holds them all (messages 0 .. 2 (r - 1) - 1 of (step, gi)). The chunk c's handle, its floats and
 * how many of its leading ones stay float32 in half formats. */
int _tsr_ring_scatter(const struct _tsr_comm *cm, struct _tsr_ring *q, int fmt, int gi, int64_t step);
int _tsr_ring_gather(const struct _tsr_comm *cm, struct _tsr_ring *q, int fmt, int gi, int64_t step);
int _tsr_ring_owned(const struct _tsr_ring *q, int me);
starpu_data_handle_t _tsr_ring_chunk(const struct _tsr_ring *q, int c, size_t *n, size_t *keep);
/* Bytes member `me` sends in one _tsr_ring_sum. */
int64_t _tsr_ring_bytes(const struct _tsr_ring *q, int fmt, int me);

#endif

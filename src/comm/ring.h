/* The ring's chunked reduce-scatter + allgather of one group over any communicator, for the ring
 * entries (ring.c) and the hierarchical allreduce, which runs it across node leaders (hier.c). */
#ifndef TSR_COMM_RING_H
#define TSR_COMM_RING_H

#include <stdint.h>
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
/* Bytes member `me` sends in one _tsr_ring_sum. */
int64_t _tsr_ring_bytes(const struct _tsr_ring *q, int fmt, int me);

#endif

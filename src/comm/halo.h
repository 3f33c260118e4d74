/* The messages of spatially split layers (halo.c), over the communicator of one spatial group:
 * halo exchanges of a block (forward: neighbours' boundary slabs into the halo; backward: the
 * halo's gradient sent back to its owners and added), gathers of every member's block into the
 * whole map, and ordered sums of small double vectors (batch statistics). All are tasks and
 * detached StarPU-MPI requests; nothing blocks the host. Written over TSR_BOX_AXES spatial axes. */
#ifndef TSR_COMM_HALO_H
#define TSR_COMM_HALO_H

#include <stdint.h>
#include <starpu.h>
#include <tessera/status.h>

#include "box_copy.h"

struct _tsr_comm;

/* One block of one slice: [outer, lo[0] + own[0] + hi[0], ...] with the block in the middle. */
struct _tsr_halo {
  const struct _tsr_comm *comm;
  int nd;                                 /* spatial axes */
  int64_t outer;                          /* samples x channels */
  int own[TSR_BOX_AXES];                  /* the block's extent along each axis */
  int lo[TSR_BOX_AXES], hi[TSR_BOX_AXES]; /* halo widths below and above */
  int nb[TSR_BOX_AXES][2];                /* member index of the neighbour below / above; -1: none, the
                                             halo there holds `pad` (the layer's padding value) */
  float pad;
  int layer, slice; /* for tags */
  /* forward: slab to neighbour [a][side] and slab from it (backward: the other way round) */
  starpu_data_handle_t out[TSR_BOX_AXES][2], in[TSR_BOX_AXES][2];
  float *outbuf[TSR_BOX_AXES][2], *inbuf[TSR_BOX_AXES][2];
};

/* Allocates the message buffers of a filled-in geometry; _tsr_halo_free releases them. */
tsr_status _tsr_halo_init(struct _tsr_halo *h);
void _tsr_halo_free(struct _tsr_halo *h);
/* Values of the halo'd array. */
int64_t _tsr_halo_count(const struct _tsr_halo *h);
/* Forward: halo = block placed in the middle, `pad` where no neighbour is, the neighbours' slabs in
 * the halo (axis by axis, each slab spanning the halos of the axes before it, so corners come too). */
int _tsr_halo_forward(const struct _tsr_halo *h, starpu_data_handle_t block, starpu_data_handle_t halo, int64_t step,
                      const char *name);
/* Backward: dhalo's halo slabs go back to their owners and are added to their boundary values (in
 * the reverse order of the forward axes); dblock = the middle of dhalo afterwards. */
int _tsr_halo_backward(const struct _tsr_halo *h, starpu_data_handle_t dhalo, starpu_data_handle_t dblock, int64_t step,
                       const char *name);

/* Edge slabs of a block whose halos have equal widths lo = hi along each axis that has them (the
 * edge axes; none elsewhere): slab (a, side) holds along a the halo of that side and the block's
 * lo + hi planes next to it ([halo lo | block planes 0 .. lo + hi) below, [block planes own - lo - hi
 * .. own | halo hi] above), along the edge axes before a the block with its halos, along the later
 * axes the block only: enough for the output planes whose windows reach into that halo, corners
 * where the halos of two axes meet included. Values of slab (a, side). */
int64_t _tsr_halo_edge_count(const struct _tsr_halo *h, int a, int side);
/* Forward, axis by axis in increasing order: the block's boundary slabs (with the halos of earlier
 * axes, from their edge slabs: the diagonal neighbours' corners come that way) go to the neighbours,
 * theirs come into the edge slabs' halo parts (a side without a neighbour keeps the zeros its buffer
 * was allocated with: padding), and the block's planes (with earlier axes' halos) are copied beside
 * them. Nothing reads or writes a halo'd copy of the whole block. edge[a] is unused along axes
 * without halos. */
int _tsr_halo_edges_forward(const struct _tsr_halo *h, starpu_data_handle_t block, const starpu_data_handle_t edge[][2],
                            int64_t step, const char *name);
/* Backward, axis by axis in decreasing order: the halo parts of dedge[a][side] (sides with a
 * neighbour) go back to their owners, and what the neighbours send back is added to dblock's
 * boundary planes (side 0, then side 1) and, where it lies in the halos of earlier axes (a diagonal
 * neighbour's values), to those axes' dedge halo parts, which go on to their owners next. */
int _tsr_halo_edges_backward(const struct _tsr_halo *h, const starpu_data_handle_t dedge[][2],
                             starpu_data_handle_t dblock, int64_t step, const char *name);

/* Every member's block into `whole` (the same on every member): block goes to the others, theirs
 * come into recv[q] (q != comm->index), and place[q] puts member q's block into whole. */
int _tsr_gather_blocks(const struct _tsr_comm *comm, const struct _tsr_box_desc *place, starpu_data_handle_t block,
                       const starpu_data_handle_t *recv, starpu_data_handle_t whole, int layer, int slice, int64_t step,
                       const char *name);
/* acc (doubles) summed over the members in member order, the same on all: acc goes to the others,
 * theirs come into recv[q]. kind tells sums of one layer and step apart (< 16). */
int _tsr_group_sum(const struct _tsr_comm *comm, starpu_data_handle_t acc, const starpu_data_handle_t *recv, int layer,
                   int kind, int64_t step, const char *name);

#endif

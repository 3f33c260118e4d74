/* Spatial partitioning in the trainer (tsr_trainer_opts.spatial): every sample is split into a
 * grid of blocks along its spatial axes over a group of ranks (the spatial group, one replica),
 * and the batch over the replicas. The plan says per layer whether its output is split and how
 * (block, halos of its input, gather of a split input before a layer that needs whole samples);
 * spatial.c holds the plan, the buffers and what a step submits around the layers (trainer.h). */
#ifndef TSR_TRAIN_SPATIAL_H
#define TSR_TRAIN_SPATIAL_H

#include <tessera.h>

#include "box_copy.h"
#include "comm/halo.h"
#include "graph/model.h"
#include "layers/layer.h"
#include "runtime/communicator.h"
#include "tensor/dist.h"

struct _tsr_sp_layer {
  int split;                                  /* its output is split into blocks */
  int own[TSR_BOX_AXES], first[TSR_BOX_AXES]; /* this rank's output block along each spatial axis */
  struct _tsr_chw out;                        /* per-sample output here: the block when split */
  int window, gather;                         /* input 0 gets halos / is gathered (layer not split) */
  int lo[TSR_BOX_AXES], hi[TSR_BOX_AXES];     /* window: halo widths of input 0 */
  struct _tsr_chw in;                         /* window: the halo'd input block; gather: the whole input */
  tsr_layer_spec spec;                        /* window: no padding along split axes (halos hold it) */
  /* [slices]: halo'd (window) or whole (gather) input and its gradient */
  struct _tsr_halo *halo;
  starpu_data_handle_t *x, *dx;
  float **xbuf, **dxbuf;
  /* window with no halos (direct): the layer runs on the block itself, no copy. With edge slabs
   * (edges, the layer's split_edges): no halo'd copy; along each axis a with halos, [a][side][slices]
   * the slabs (edge_len values per sample, 0 along axes without halos) and, on sides with a
   * neighbour (edge_nb) where the input's gradient is needed (dedge_len > 0: the plan sets it on
   * every side with a neighbour, _tsr_spatial_blocks clears it where the input needs no gradient),
   * their gradients */
  int direct, edges, edge_nb[TSR_BOX_AXES][2];
  int64_t edge_len[TSR_BOX_AXES][2], dedge_len[TSR_BOX_AXES][2];
  starpu_data_handle_t *edge[TSR_BOX_AXES][2], *dedge[TSR_BOX_AXES][2];
  float **edgebuf[TSR_BOX_AXES][2], **dedgebuf[TSR_BOX_AXES][2];
  starpu_data_handle_t *recv; /* gather: [slice * parts + member] the other members' blocks */
  float **recvbuf;
  starpu_data_handle_t *sum; /* group sums: [member] the others' vectors (registered on first use) */
  void **sumbuf;
};

struct _tsr_spatial {
  int parts, nd, grid[TSR_BOX_AXES];
  struct _tsr_comm comm; /* the spatial group: the ranks holding blocks of the same samples */
  int slices, nlayers;
  struct _tsr_sp_layer *l; /* [model layers] */
  /* [slices] a split output gathered whole for the loss and the loss's gradient of it (NULL when the
   * output is whole); yrecv: [slice * parts + member] the other members' blocks */
  starpu_data_handle_t *y, *dy, *yrecv;
  float **ybuf, **dybuf, **yrecvbuf;
};

/* Spatial extents of a layer's per-sample output ([H, W] of [C, H, W]) into ext; returns how many. */
int _tsr_spatial_extents(const struct _tsr_layer *L, int *ext);
/* The plan of every layer of m (out[m->n]) for block `part` of a grid over nd spatial axes (row-major,
 * the last axis fastest): a status naming the layer when its shape cannot be split. No messages. */
tsr_status _tsr_spatial_plan(const tsr_model *m, int nd, const int *grid, int part, struct _tsr_sp_layer *out);
/* Grid coordinates of `part` and the member index of its neighbour along axis a (dir -1 or +1; -1: none). */
void _tsr_spatial_coords(int nd, const int *grid, int part, int *coord);
int _tsr_spatial_neighbour(int nd, const int *grid, int part, int a, int dir);

#endif

/* How a tensor is spread over the ranks of a communicator: replicated (every rank holds all of it),
 * split along the batch (part p of P holds samples p, p + P, p + 2P, ...: the loader's shards and
 * data-parallel training), or split along its last spatial axes into a grid of blocks, each with
 * halos of neighbouring values (described and sized here; spatial layers read it later). */
#ifndef TSR_TENSOR_DIST_H
#define TSR_TENSOR_DIST_H

#include <stdint.h>
#include <tessera/status.h>

struct _tsr_comm;

enum _tsr_dist_kind { TSR_DIST_REPLICATED, TSR_DIST_BATCH, TSR_DIST_SPATIAL };

#define TSR_DIST_MAX_AXES 3

struct _tsr_dist {
  enum _tsr_dist_kind kind;
  const struct _tsr_comm *comm; /* the ranks it is spread over; NULL: parts/part given directly */
  int parts, part;              /* how many parts, and this rank's */
  int naxes;                    /* spatial: the last naxes axes are split */
  int grid[TSR_DIST_MAX_AXES];  /* spatial: parts along each split axis (their product is parts);
                                   part p sits at grid coordinates in row-major order */
  int halo[TSR_DIST_MAX_AXES];  /* spatial: values borrowed from each neighbour along each axis */
};

struct _tsr_dist _tsr_dist_replicated(void);
/* Split along the batch over comm (parts = its size, part = this process's index), or, with a
 * NULL comm, as part `part` of `parts`. */
tsr_status _tsr_dist_batch(struct _tsr_dist *d, const struct _tsr_comm *comm, int part, int parts);
/* Split along the last naxes axes into grid[0] x ... blocks with halo[a] values on each side that
 * has a neighbour (outer sides get none: padding is the layer's business). parts = product of grid;
 * comm as for _tsr_dist_batch. */
tsr_status _tsr_dist_spatial(struct _tsr_dist *d, const struct _tsr_comm *comm, int part, int naxes, const int *grid,
                             const int *halo);

/* Samples of a batch of n this part holds (n unless split along the batch). */
int64_t _tsr_dist_batch_count(const struct _tsr_dist *d, int64_t n);
/* Index in the whole batch of this part's k-th sample. */
int64_t _tsr_dist_batch_index(const struct _tsr_dist *d, int64_t k);

/* This part's block of a tensor whose last naxes axes have sizes whole[0..naxes): per split axis,
 * the first index it owns, how many it owns (the first whole % grid blocks own one more), and its
 * extent with halos. TSR_ERR_SHAPE when an axis has fewer values than blocks or a block fewer
 * values than a halo it must lend. */
tsr_status _tsr_dist_block(const struct _tsr_dist *d, const int64_t *whole, int64_t *first, int64_t *owned,
                           int64_t *with_halo);

#endif

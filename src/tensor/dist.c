/* Distribution descriptors: which part of a tensor a rank holds, and its arithmetic (batch shards,
 * spatial blocks with halos). */
#include <string.h>

#include "tensor/dist.h"
#include "runtime/communicator.h"
#include "runtime/error.h"

struct _tsr_dist _tsr_dist_replicated(void) { return (struct _tsr_dist){.kind = TSR_DIST_REPLICATED, .parts = 1}; }

static tsr_status place(struct _tsr_dist *d, const struct _tsr_comm *comm, int part, int parts, const char *what) {
  if (comm) part = comm->index, parts = comm->size;
  if (parts < 1 || part < 0 || part >= parts)
    return _tsr_error(TSR_ERR_ARG, "%s distribution: part %d of %d", what, part, parts);
  d->comm = comm, d->part = part, d->parts = parts;
  return TSR_OK;
}

tsr_status _tsr_dist_batch(struct _tsr_dist *d, const struct _tsr_comm *comm, int part, int parts) {
  memset(d, 0, sizeof *d);
  d->kind = TSR_DIST_BATCH;
  return place(d, comm, part, parts, "batch");
}

tsr_status _tsr_dist_spatial(struct _tsr_dist *d, const struct _tsr_comm *comm, int part, int naxes, const int *grid,
                             const int *halo) {
  memset(d, 0, sizeof *d);
  d->kind = TSR_DIST_SPATIAL;
  if (naxes < 1 || naxes > TSR_DIST_MAX_AXES || !grid || !halo)
    return _tsr_error(TSR_ERR_ARG, "spatial distribution: %d split axes (1 to %d, with a grid and halos)", naxes,
                      TSR_DIST_MAX_AXES);
  int parts = 1;
  for (int a = 0; a < naxes; a++) {
    if (grid[a] < 1 || halo[a] < 0)
      return _tsr_error(TSR_ERR_ARG, "spatial distribution: axis %d has %d blocks and halo %d", a, grid[a], halo[a]);
    d->grid[a] = grid[a], d->halo[a] = halo[a];
    parts *= grid[a];
  }
  d->naxes = naxes;
  TSR_TRY(place(d, comm, part, parts, "spatial"));
  if (d->parts != parts)
    return _tsr_error(TSR_ERR_ARG, "spatial distribution: a grid of %d blocks over %d ranks", parts, d->parts);
  return TSR_OK;
}

int64_t _tsr_dist_batch_count(const struct _tsr_dist *d, int64_t n) {
  if (d->kind != TSR_DIST_BATCH || n <= 0) return n > 0 ? n : 0;
  return n / d->parts + (d->part < n % d->parts ? 1 : 0);
}

int64_t _tsr_dist_batch_index(const struct _tsr_dist *d, int64_t k) {
  return d->kind == TSR_DIST_BATCH ? d->part + k * d->parts : k;
}

tsr_status _tsr_dist_block(const struct _tsr_dist *d, const int64_t *whole, int64_t *first, int64_t *owned,
                           int64_t *with_halo) {
  if (d->kind != TSR_DIST_SPATIAL) return _tsr_error(TSR_ERR_ARG, "spatial block of a tensor that is not split spatially");
  int rest = d->part;
  for (int a = d->naxes - 1; a >= 0; a--) { /* row-major: the last axis varies fastest */
    int blocks = d->grid[a], at = rest % blocks, halo = d->halo[a];
    rest /= blocks;
    int64_t base = whole[a] / blocks, extra = whole[a] % blocks;
    if (base < 1 || (blocks > 1 && base < halo))
      return _tsr_error(TSR_ERR_SHAPE, "spatial distribution: axis %d has %lld values for %d blocks with halo %d", a,
                        (long long)whole[a], blocks, halo);
    first[a] = at * base + (at < extra ? at : extra);
    owned[a] = base + (at < extra);
    with_halo[a] = owned[a] + (at > 0 ? halo : 0) + (at < blocks - 1 ? halo : 0);
  }
  return TSR_OK;
}

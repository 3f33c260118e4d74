/* Boxes of a sample's spatial axes (the part of each sample a rank reads under spatial
 * partitioning): the check of a box against a per-sample shape, and the cut of a box out of a whole
 * sample held in memory (.npy sources, produced samples). */
#ifndef TSR_DATA_BOX_H
#define TSR_DATA_BOX_H

#include <stdint.h>

#include <tessera/status.h>
#include <tessera/tensor.h>

/* The box [start[a], start[a] + extent[a]) on each spatial axis a of per-sample shape s ([C, H, W]
 * or [C, D, H, W]: s->ndim - 1 axes) lies inside it; errors name `what`, the axis and the values. */
tsr_status _tsr_box_check(const char *what, const tsr_shape *s, const int64_t *start, const int64_t *extent);
/* Elements of the box, all channels. */
int64_t _tsr_box_numel(const tsr_shape *s, const int64_t *extent);
/* Copies the box of the whole sample `whole` (shape s) into out as [C, extent...]. */
void _tsr_box_cut(const tsr_shape *s, const int64_t *start, const int64_t *extent, const float *whole, float *out);

#endif

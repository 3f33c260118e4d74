/* Copies of sub-boxes between arrays of up to 3 spatial axes (box_copy.c): packing and unpacking the
 * halo slabs of a spatially split tensor, placing a block inside its halo'd copy, assembling a
 * gathered map; and fixed-order sums of double vectors (statistics summed over a spatial group). */
#ifndef TSR_CODELETS_BOX_COPY_H
#define TSR_CODELETS_BOX_COPY_H

#include <stdint.h>
#include <starpu.h>

#define TSR_BOX_AXES 3

/* Both arrays are [outer, ext[0], ..., ext[nd-1]] (row-major); the box has len[a] values along
 * axis a, starting at src_lo[a] in the source and dst_lo[a] in the destination. */
struct _tsr_box_desc {
  int64_t outer; /* samples x channels */
  int nd;        /* spatial axes, 1 to TSR_BOX_AXES */
  int src_ext[TSR_BOX_AXES], dst_ext[TSR_BOX_AXES];
  int src_lo[TSR_BOX_AXES], dst_lo[TSR_BOX_AXES], len[TSR_BOX_AXES];
  float scale; /* dst box = scale * src box (+ the old dst box when add) */
  int add;
  int fill; /* 1: every destination value outside the box is set to `value` */
  float value;
};

/* Values in one array of the box's destination (or source) extents. */
int64_t _tsr_box_dst_count(const struct _tsr_box_desc *d);
int64_t _tsr_box_src_count(const struct _tsr_box_desc *d);
void _tsr_box_copy_cpu(const struct _tsr_box_desc *d, const float *src, float *dst);
/* The task: R src, dst W (fill, or a box that covers it) or RW. */
int _tsr_insert_box_copy(const struct _tsr_box_desc *d, starpu_data_handle_t src, starpu_data_handle_t dst,
                         const char *name);

/* acc[i] = sum over k of part_k[i] in order k = 0..n-1, where part `own` is acc itself (RW) and the
 * others are read: every member of a group sums its own and the received vectors in the same order,
 * so all hold the same result. Vectors of doubles. */
void _tsr_sum_doubles_cpu(int n, int own, const double *const *parts, double *acc, size_t len);
int _tsr_insert_sum_doubles(int n, int own, const starpu_data_handle_t *parts, const char *name);

#endif

/* What the tools read from a data set's HDF5 metadata beyond inputs and targets: the targets' pixel
 * size in angstrom (for the atom-column metrics) and their units (for the colour bars). */
#ifndef TSR_TOOLS_DATA_META_H
#define TSR_TOOLS_DATA_META_H

#include <stddef.h>
#include <stdint.h>

#include <tessera.h>

/* Pixel sizes (x along the width, y along the height; A) of samples [first, first + n) of a loader,
 * from each HDF5 file's dataset `pixel_size_A` ([N, 2] per sample: x, y), else member `pixel_A` of
 * tessera-cbed's per-sample record `meta`, else its root attribute `pixel_size_A` (one value, or x
 * and y). Returns 1 with px, py filled ([n] each), or 0 with the reason in `why` when a file has none
 * of them (tessera-cbed's attribute `fov_requested_A` is the field of view asked for, not the
 * simulated cell, so it is not used). */
int data_pixel_sizes(const tsr_loader *l, int64_t first, int64_t n, double *px, double *py, char *why, size_t cap);

/* The targets' units as a label: "V A" for tessera-cbed's raw potentials, "standardised per sample
 * (mean 0, std 1)" for its default ones, the root attribute `target_units` when a file has one,
 * else "units of the targets". Written to buf. */
void data_target_units(const tsr_loader *l, char *buf, size_t cap);

#endif

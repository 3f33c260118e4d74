/* The per-sample record's HDF5 dataset (cbed_meta.c), for the writer. */
#ifndef TSR_CBED_META_H
#define TSR_CBED_META_H

#include <hdf5.h>

#include "sim/cbed/cbed.h"

/* Dataset `meta` [n] of f; -1 on failure. */
hid_t _tsr_cbed_meta_create(hid_t f, int64_t n);
/* Records [first, first + count) from m; 0 on failure. */
int _tsr_cbed_meta_write(hid_t d, int64_t first, int64_t count, const struct cbed_meta *m);

#endif

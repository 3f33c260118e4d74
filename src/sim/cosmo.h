/* The CosmoFlow-style generator's work area, shared by the sample code (cosmo_gen.c) and the HDF5
 * writer (cosmo_write.c): one per thread. */
#ifndef TSR_SIM_COSMO_H
#define TSR_SIM_COSMO_H

#include <stdint.h>

#include "sim/grf.h"
#include <tessera/cosmo.h>

struct _tsr_cosmo_work {
  struct _tsr_grf grf;
  double *delta;          /* [S^3] the linear field at z = 0 */
  unsigned char *label;   /* [S^3] segmentation classes */
};

tsr_status _tsr_cosmo_work_init(struct _tsr_cosmo_work *w, const tsr_cosmo_opts *o);
void _tsr_cosmo_work_free(struct _tsr_cosmo_work *w);
/* Sample `index` into x, y, params [4] and *amp (A) (options checked by the caller). */
void _tsr_cosmo_generate(const tsr_cosmo_opts *o, struct _tsr_cosmo_work *w, int64_t index, float *x, float *y,
                         double *params, double *amp);

#endif

/* Gaussian random fields on a periodic cube of n^3 cells of side `cell` (box L = n cell, V = L^3):
 * white noise coloured by sqrt(P(k)) with FFTW. Conventions (as in cosmology codes; the tests
 * measure the power spectrum with them):
 *   delta_k = cell^3 sum_x delta(x) exp(-i k.x),  <|delta_k|^2> = V P(k),  var(delta) = sum_k P(k) / V,
 * k on the grid 2 pi / L x (integers in [-n/2, n/2)); the k = 0 mode is zero (mean 0). */
#ifndef TSR_SIM_GRF_H
#define TSR_SIM_GRF_H

#include <stdint.h>

#include <fftw3.h>

#include "runtime/rng.h"
#include <tessera/status.h>

/* P(k) = amp (k / pivot)^index exp(-(k / cutoff)^2); k, pivot, cutoff in 1 / (unit of cell). */
struct _tsr_spectrum {
  double amp, index, pivot, cutoff;
};

double _tsr_spectrum_at(const struct _tsr_spectrum *s, double k);
/* sum over the grid's k != 0 of P(k) / V: the expected variance of a field with spectrum s. */
double _tsr_spectrum_variance(const struct _tsr_spectrum *s, int n, double cell);

/* One work area: its FFTW plans and buffers (plans are made under a lock, FFTW's planner is not
 * thread-safe; executing them is). */
struct _tsr_grf {
  int n;
  double cell;
  double *real;          /* [n^3] */
  fftw_complex *freq;    /* [n, n, n/2 + 1] (r2c half) */
  fftw_plan fwd, back;
};

tsr_status _tsr_grf_init(struct _tsr_grf *g, int n, double cell);
void _tsr_grf_free(struct _tsr_grf *g);
/* out[n^3] (row-major, D H W) = a field with spectrum s from the noise of stream r (n^3 normal draws). */
void _tsr_grf_make(struct _tsr_grf *g, struct _tsr_rng *r, const struct _tsr_spectrum *s, double *out);

#endif

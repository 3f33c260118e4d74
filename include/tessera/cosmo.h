/* CosmoFlow-style synthetic volumes: Gaussian random fields on a periodic cube with a parametrised
 * power spectrum, evolved to several redshifts (one channel each), whose parameters are the
 * regression targets; and a segmentation variant (halos and voids in such a field, one class per
 * voxel). Every sample depends only on (seed, index). */
#ifndef TESSERA_COSMO_H
#define TESSERA_COSMO_H

#include <stdint.h>
#include <tessera/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The parameters of a sample, drawn uniformly in [lo, hi] each (lo == hi fixes one):
 *   omega_m  matter density; sets the growth factor D(z) of flat LambdaCDM, so the channels' relative
 *            amplitudes (default 0.2..0.4)
 *   sigma    rms of the linear density contrast at z = 0 over the box; sets A (default 0.5..1.0)
 *   n_s      spectral index n (default -2.0..-1.0)
 *   k_c      cutoff wavenumber in h/Mpc (default 0.2..0.5)
 * of the linear power spectrum P(k) = A (k / k_p)^n exp(-(k / k_c)^2), k_p = pivot. */
enum { TSR_COSMO_OMEGA_M, TSR_COSMO_SIGMA, TSR_COSMO_N_S, TSR_COSMO_K_C, TSR_COSMO_PARAMS };
enum { TSR_COSMO_MAX_CHANNELS = 16, TSR_COSMO_CLASSES = 3 /* background, halo, void */ };

typedef enum tsr_cosmo_task {
  TSR_COSMO_REGRESSION,   /* inputs [Z, S, S, S], targets [4, 1, 1] (standardised parameters) */
  TSR_COSMO_SEGMENTATION  /* inputs [1, S, S, S], targets [3, S, S, S] (one-hot class per voxel) */
} tsr_cosmo_task;

typedef enum tsr_cosmo_transform {
  TSR_COSMO_LOGNORMAL, /* channel = exp(D delta - D^2 sigma^2 / 2) - 1: positive density, mean ~0 */
  TSR_COSMO_LINEAR     /* channel = D delta: the Gaussian field itself, scaled */
} tsr_cosmo_transform;

typedef struct tsr_cosmo_opts {
  tsr_cosmo_task task;
  int size;                 /* cells per side S (default 32) */
  double cell;              /* cell side in Mpc/h (default 4: Nyquist 0.785 h/Mpc) */
  double pivot;             /* k_p in h/Mpc (default 0.1) */
  double lo[TSR_COSMO_PARAMS], hi[TSR_COSMO_PARAMS]; /* parameter ranges (see above) */
  int nz;                   /* channels (regression; default 4) */
  double z[TSR_COSMO_MAX_CHANNELS]; /* their redshifts (default 3, 2, 1, 0) */
  tsr_cosmo_transform transform; /* default lognormal */
  /* segmentation: spheres of radius [radius_min, radius_max] cells, blobs_min..blobs_max per
   * sample, each a halo (+contrast x sigma) or a void (-contrast x sigma) over the field at z = 0 */
  int blobs_min, blobs_max; /* default 2..6 */
  double radius_min, radius_max; /* default 3..7 cells */
  double contrast;          /* default 1.5 */
  uint64_t seed;            /* default 1 */
  int64_t first;            /* index of the first sample written (default 0) */
  int chunk;                /* HDF5 chunk side along D, H, W (default 0 = S: one channel of one sample) */
  int workers;              /* threads in tsr_cosmo_write (default 1); the data do not depend on it */
} tsr_cosmo_opts;

void tsr_cosmo_opts_default(tsr_cosmo_opts *o);
/* Checks every field the task uses; the error names the field and its value. */
tsr_status tsr_cosmo_opts_check(const tsr_cosmo_opts *o);
/* Name ("omega_m") and unit ("1", "h/Mpc") of parameter i. */
const char *tsr_cosmo_param_name(int i);
const char *tsr_cosmo_param_unit(int i);
/* Per-sample shapes: inputs [c, s, s, s], targets [tc, th, th, th] (th = 1 for regression). */
void tsr_cosmo_shapes(const tsr_cosmo_opts *o, int *c, int *s, int *tc, int *th);
/* Linear growth factor D(z) of flat LambdaCDM with matter density omega_m, D(0) = 1. */
double tsr_cosmo_growth(double omega_m, double z);

/* Sample `index`: x (inputs), y (targets: standardised parameters, t = 2 (p - lo) / (hi - lo) - 1,
 * 0 where lo == hi; or one-hot classes), params (the physical parameters [4], may be NULL). */
tsr_status tsr_cosmo_sample(const tsr_cosmo_opts *o, int64_t index, float *x, float *y, double *params);
/* Writes samples first .. first + n - 1 to an HDF5 file (written to PATH.tmp, then renamed):
 * datasets inputs [n, C, S, S, S], targets, and for regression params [n, 4] (physical values,
 * float64) and amplitude [n] (A); attributes name every option, the parameters' names, units and
 * ranges, and the targets' transform. progress(user, done, total) now and then if not NULL. */
tsr_status tsr_cosmo_write(const tsr_cosmo_opts *o, int64_t n, const char *path,
                           void (*progress)(void *user, int64_t done, int64_t total), void *user);

#ifdef __cplusplus
}
#endif
#endif

/* Internals of the CBED simulator shared by its files and the tests: the Kirkland table, crystal
 * builders (one z-period of an orthogonal supercell) and the multislice work space. Lengths in
 * angstrom, reciprocal lengths in 1/A, potentials in V A (projected). */
#ifndef TSR_CBED_INTERNAL_H
#define TSR_CBED_INTERNAL_H

#include <stdint.h>
#include <fftw3.h>

#include <tessera/cbed.h>

/* ---- physics (cbed_physics.c) ---- */
/* Electron scattering factor f_e(q) in A for element Z at spatial frequency q (1/A), Kirkland's
 * parameterisation; returns -1 for an element not in the table. */
double _tsr_cbed_fe(int z, double q);
int _tsr_cbed_has_element(int z);
const char *_tsr_cbed_element_name(int z);

/* ---- crystals (cbed_crystal.c) ---- */
struct cbed_atoms {
  int n, cap;
  double *x, *y, *z; /* positions in [0, lx) x [0, ly) x [0, lz) */
  int *zn;           /* atomic numbers */
  double lx, ly, lz; /* the supercell; lz is one period along the beam */
};

void _tsr_cbed_atoms_free(struct cbed_atoms *a);
/* Orthogonal supercell of `s` viewed along zone `zone` (1 = [001], 2 = [110], 4 = [111]) with whole
 * cells tiled to about `fov` in x and y, shifted in plane by (sx, sy) fractions of the unit cell. */
int _tsr_cbed_build_crystal(struct cbed_atoms *a, tsr_cbed_structure s, int zone, double fov, double sx,
                            double sy);
/* `count` atoms of random elements in fov x fov x thickness, no two closer than dmin (rng: uniform [0,1)). */
int _tsr_cbed_build_random(struct cbed_atoms *a, int count, double fov, double thickness, double dmin,
                           double (*uniform)(void *), void *rng);

/* ---- multislice (cbed_sim.c) ---- */
struct cbed_work {
  int n;                   /* grid side */
  double lx, ly;           /* cell */
  double lambda, sigma;
  int nslices;             /* slices in one period */
  double dz;
  fftw_complex *psi, *tmp, *trans; /* trans: nslices transmission functions */
  fftw_complex *vq;        /* [n*n] sum of the slice potentials in Fourier space */
  fftw_complex *prop;      /* [n*n] Fresnel propagator over dz, band-limited, with FFTW's 1/n^2 */
  double *fe;              /* [elements][n*n] 2 pi a0 e f_e(|k|) / area, zero out of band */
  fftw_plan fwd, bwd;      /* psi -> tmp, tmp -> psi */
  int cap_slices;
};

int _tsr_cbed_work_init(struct cbed_work *w, int n);
void _tsr_cbed_work_free(struct cbed_work *w);
/* Projected potentials of every slice of one period, their transmission functions (band-limited)
 * and the slice-averaged potential; returns 0 or -1 (out of memory). */
int _tsr_cbed_prepare(struct cbed_work *w, const struct cbed_atoms *a, double kv, double slice);
/* Probe centred at (px, py) A (aperture alpha mrad, defocus A, Cs mm) in w->psi, unit total intensity. */
void _tsr_cbed_probe(struct cbed_work *w, double alpha_mrad, double defocus, double cs_mm, double px, double py);
/* Propagates w->psi through `periods` periods; leaves the exit wave's Fourier transform in w->tmp
 * (FFTW order, scaled by 1/n^2: the intensity is n^2 |tmp|^2). */
void _tsr_cbed_propagate(struct cbed_work *w, int periods);
/* Intensity |tmp|^2 normalised to the probe's unit intensity, fftshifted (zero frequency at
 * (n/2, n/2)), into out [n*n] (float64). */
void _tsr_cbed_intensity(const struct cbed_work *w, double *out);
/* Bandwidth limit: |k| < 2/3 of the smaller Nyquist frequency. */
int _tsr_cbed_in_band(const struct cbed_work *w, int i, int j);


/* ---- samples (cbed_sample.c) ---- */
/* Sample `index` with a work space of side o->grid and a scratch buffer of 2 grid^2 doubles. */
tsr_status _tsr_cbed_sample_with(const tsr_cbed_opts *o, struct cbed_work *w, double *buf, int64_t index, float *x,
                                 float *v);

#endif

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
  int nslices;             /* transmission functions held (the propagation cycles through them) */
  double dz;
  fftw_complex *psi, *tmp, *trans; /* trans: nslices transmission functions */
  fftw_complex *vq;        /* [n*n] sum of the slice potentials in Fourier space */
  fftw_complex *prop;      /* [n*n] Fresnel propagator over dz, band-limited, with FFTW's 1/n^2 */
  double *fe;              /* [elements][n*n] 2 pi a0 e f_e(|k|) / area, zero out of band */
  fftw_plan fwd, bwd;      /* psi -> tmp, tmp -> psi */
  int cap_slices;
  double *img;             /* [n*n] intensity of one exit wave */
  double *acc;             /* [cap_acc] patterns accumulated over configurations (cbed_sample.c) */
  size_t cap_acc;
};

int _tsr_cbed_work_init(struct cbed_work *w, int n);
/* Makes w a work space of side n (keeps it when it already is one); 0 or -1 (out of memory). */
int _tsr_cbed_work_resize(struct cbed_work *w, int n);
void _tsr_cbed_work_free(struct cbed_work *w);
/* Projected potentials of every slice of `a` (slices of about `slice` A over a->lz), their
 * transmission functions (band-limited) and their sum w->vq; returns 0 or -1 (out of memory). */
int _tsr_cbed_prepare(struct cbed_work *w, const struct cbed_atoms *a, double kv, double slice);
/* Probe optics; angles in radians (azimuths of A1 and B2 measured from the x axis). */
struct cbed_optics {
  double alpha_mrad, defocus, cs_mm; /* Kirkland's defocus (positive = underfocus, C1 = -defocus) */
  double a1, a1_angle, b2, b2_angle; /* A */
};
/* Aberration phase chi (rad) at spatial frequency (kx, ky) 1/A (cbed_probe.c). */
double _tsr_cbed_chi(const struct cbed_optics *op, double lambda, double kx, double ky);
/* Probe centred at (px, py) A in w->psi, unit total intensity (cbed_probe.c). */
void _tsr_cbed_probe(struct cbed_work *w, const struct cbed_optics *op, double px, double py);
/* Propagates w->psi through `slices` slices, cycling through the w->nslices transmission functions;
 * leaves the exit wave's Fourier transform in w->tmp (FFTW order, scaled by 1/n^2: the intensity
 * is n^2 |tmp|^2). */
void _tsr_cbed_propagate(struct cbed_work *w, int slices);
/* Intensity |tmp|^2 normalised to the probe's unit intensity, fftshifted (zero frequency at
 * (n/2, n/2)), into out [n*n] (float64). */
void _tsr_cbed_intensity(const struct cbed_work *w, double *out);
/* Bandwidth limit: |k| < 2/3 of the smaller Nyquist frequency. */
int _tsr_cbed_in_band(const struct cbed_work *w, int i, int j);
/* The projected potential w->vq, blurred by a Gaussian of rms `blur` A, at m x m points of the
 * window [x0, x0 + wx) x [y0, y0 + wy) of the cell (from its corner, spacing wx / m, wy / m), by
 * direct summation of the Fourier series (point values of the band-limited potential); 0 or -1. */
int _tsr_cbed_window_potential(const struct cbed_work *w, int m, double x0, double y0, double wx, double wy,
                               double blur, double *out);

/* ---- sampling (cbed_sampling.c) ---- */
/* Smallest even grid side of factors 2, 3, 5, 7, at least min_n, whose band limit (2/3 of the
 * Nyquist frequency of the longer cell edge) reaches theta_mrad at wavelength lambda. */
int _tsr_cbed_grid_for(double lx, double ly, double lambda, double theta_mrad, int min_n);
/* Slice thickness (A) for band limit theta_mrad: the Fresnel phase pi lambda dz k^2 of one slice
 * stays below pi at the band limit, and dz <= 2 A. */
double _tsr_cbed_slice_for(double lambda, double theta_mrad);

/* ---- frozen phonons (cbed_phonon.c) ---- */
/* Mean square displacement per axis (A^2) of element z: o->u2[z] when set, else the built-in value. */
double _tsr_cbed_u2(const tsr_cbed_opts *o, int z);
/* Standard normal draw (Box-Muller on the uniform callback). */
double _tsr_cbed_normal(double (*uniform)(void *), void *rng);
/* `copies` copies of one period `a` stacked along z (out->lz = copies a->lz), every atom displaced
 * by independent Gaussians of per-axis variance _tsr_cbed_u2 (x, y and z wrapped into the cell). */
int _tsr_cbed_displaced(struct cbed_atoms *out, const struct cbed_atoms *a, int copies, const tsr_cbed_opts *o,
                        double (*uniform)(void *), void *rng);

/* ---- detector (cbed_detector.c) ---- */
/* Adds weight x the n x n fftshifted intensity img (pixels of 1 / lx by 1 / ly in 1/A) integrated
 * over the p x p detector pixels of det_mrad (0: the centre p x p simulation pixels) to out;
 * scratch holds n * p doubles. */
void _tsr_cbed_detect(const double *img, int n, double lx, double ly, double lambda, int p, double det_mrad,
                      double weight, double *scratch, double *out);
/* Poisson draw of mean `mean` (inversion below 10, Hoermann's PTRS above). */
double _tsr_cbed_poisson(double mean, double (*uniform)(void *), void *rng);
/* Counts of `dose` electrons over the m pixels of intensity `in` (fractions of the beam), as counts /
 * dose in place; dose <= 0 leaves `in` alone. */
void _tsr_cbed_dose(double *in, size_t m, double dose, double (*uniform)(void *), void *rng);
/* Gaussian point-spread function of rms sigma pixels over a p x p image, zero outside it; scratch
 * holds p * p doubles. */
void _tsr_cbed_psf(double *img, int p, double sigma, double *scratch);

/* ---- samples (cbed_sample.c) ---- */
/* What one sample drew and chose; cbed_write.c stores each field per sample (its field table). */
struct cbed_meta {
  double kv, alpha_mrad, defocus_A, cs_mm, a1_A, a1_deg, b2_A, b2_deg, source_A, dose;
  double cell_x_A, cell_y_A, period_A, thickness_A, grid, slices_per_period, slice_A, band_mrad;
  double sim_pixel_x_mrad, sim_pixel_y_mrad, det_pixel_mrad, phonons, coherence_samples;
  double target_pixel_x_A, target_pixel_y_A, target_mean_VA, target_std_VA;
  double scan_x_A, scan_y_A, scan_width_A, scan_height_A; /* the scanned (and target) window */
};
/* Checks the physics options (ranges of the drawn optics, phonons, coherence, detector) (cbed_scan.c). */
tsr_status _tsr_cbed_physics_check(const tsr_cbed_opts *o);
/* Everything after the specimen `a` (one period along the beam, repeated `periods` times): optics,
 * sampling, target into v, the scan into x, meta (cbed_scan.c). */
tsr_status _tsr_cbed_simulate(const tsr_cbed_opts *o, struct cbed_work *w, const struct cbed_atoms *a, int periods,
                              int64_t index, float *x, float *v, struct cbed_meta *meta);
/* Sample `index` with the work space w (resized as the sample needs); meta may be NULL. */
tsr_status _tsr_cbed_sample_with(const tsr_cbed_opts *o, struct cbed_work *w, int64_t index, float *x, float *v,
                                 struct cbed_meta *meta);

#endif

/* Internals of the CBED simulator shared by its files and the tests: the Kirkland table, crystals
 * (built-in, CIF, random), supercells along a zone axis (one z-period of an orthogonal box), the
 * per-sample record and the multislice work space. Lengths in
 * angstrom, reciprocal lengths in 1/A, potentials in V A (projected). */
#ifndef TSR_CBED_INTERNAL_H
#define TSR_CBED_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <fftw3.h>

#include <tessera/cbed.h>

#include "runtime/rng.h"

/* ---- elements (cbed_kirkland.c; Z = 1..TSR_CBED_ZMAX, tessera/cbed.h) ---- */
/* Electron scattering factor f_e(q) in A for element Z at spatial frequency q (1/A), Kirkland's
 * parameterisation; returns -1 for an element not in the table. */
double _tsr_cbed_fe(int z, double q);
int _tsr_cbed_has_element(int z);
const char *_tsr_cbed_element_name(int z);
/* Z of an element symbol (case-insensitive), 0 if unknown. */
int _tsr_cbed_element_parse(const char *symbol);

/* ---- specimens (cbed_crystal.c) ---- */
struct cbed_atoms {
  int n, cap;
  double *x, *y, *z; /* positions in [0, lx) x [0, ly) x [0, lz) */
  int *zn;           /* atomic numbers */
  double lx, ly, lz; /* the supercell; lz is one period along the beam */
  double tilt[2];    /* specimen tilt (rad) towards x and y: tilts the propagator (Kirkland eq. 6.99) */
};

void _tsr_cbed_atoms_free(struct cbed_atoms *a);
/* Appends an atom; -1 when out of memory. */
int _tsr_cbed_atoms_push(struct cbed_atoms *a, int zn, double x, double y, double z);
/* `count` atoms of random elements in fov x fov x thickness, no two closer than dmin (rng: uniform [0,1)). */
int _tsr_cbed_build_random(struct cbed_atoms *a, int count, double fov, double thickness, double dmin,
                           double (*uniform)(void *), void *rng);

/* ---- crystals (cbed_crystal.c, cbed_cif.c, cbed_random.c) ---- */
/* A crystal: its cell and every atom of the unit cell (symmetry already expanded). */
struct cbed_crystal {
  char name[64];     /* "Si", a CIF's data block name, "random" */
  char source[256];  /* "built-in", the CIF file, "generated" */
  double cell[6];    /* a, b, c (A), alpha, beta, gamma (degrees) */
  double lat[3][3];  /* rows: the lattice vectors a, b, c in A (a along x, b in the xy plane) */
  int spacegroup;    /* international number spglib finds for the atoms (0: none found) */
  int n, cap;
  int *zn;
  double (*frac)[3]; /* fractional coordinates in [0, 1) */
};

void _tsr_cbed_crystal_free(struct cbed_crystal *c);
/* Sets cell[] and lat[]; -1 when the lengths or angles make no cell. */
int _tsr_cbed_crystal_set_cell(struct cbed_crystal *c, const double cell[6]);
/* Adds an atom at fractional f (wrapped into [0, 1)) unless one lies within tol A of it (periodic
 * images counted): 0 added, 1 already there, -1 out of memory. */
int _tsr_cbed_crystal_add(struct cbed_crystal *c, int zn, const double f[3], double tol);
/* Shortest distance (A) between fractional positions f and g, periodic images counted. */
double _tsr_cbed_crystal_distance(const struct cbed_crystal *c, const double f[3], const double g[3]);
/* Reduced formula, elements in order of first appearance ("SrTiO3", "Al2O3"). */
void _tsr_cbed_crystal_formula(const struct cbed_crystal *c, char *out, size_t len);
/* c->spacegroup from spglib (tolerance 1e-3 A). */
void _tsr_cbed_crystal_find_spacegroup(struct cbed_crystal *c);
/* The built-in crystals (Si, SrTiO3, Cu) as conventional cubic cells. */
int _tsr_cbed_crystal_builtin(tsr_cbed_structure s, struct cbed_crystal *c);
/* Reads the first data block of a CIF file (libcif): cell, symmetry operations (or the Hall symbol,
 * or the space group number through spglib's tables), the asymmetric unit; expands the symmetry and
 * merges atoms closer than 0.01 A (special positions). Errors name the file and the item. */
tsr_status _tsr_cbed_crystal_read_cif(const char *path, struct cbed_crystal *c);
/* A random but physical crystal (cbed_random.c): a lattice system and centring, 1-3 elements of Z in
 * [o->zmin, o->zmax], a motif of at most o->sites atoms per cell, no two closer than o->min_distance,
 * number density in [o->density_min, o->density_max] atoms/A^3. -1 when out of memory. */
int _tsr_cbed_crystal_random(struct cbed_crystal *c, const tsr_cbed_opts *o, double (*uniform)(void *), void *rng);

/* ---- prototype crystals (cbed_prototype.c, cbed_radii.c) ---- */
/* Covalent radius (A) of element z (Cordero et al. 2008); -1 outside 1..TSR_CBED_ZMAX. */
double _tsr_cbed_covalent_radius(int z);
/* The random lattice constant is PROTOTYPE_SCALE_MIN..MAX times the hard-sphere one (tightest
 * contact = sum of covalent radii): covalent radii overestimate ionic and metallic bonds (SrTiO3
 * and rutile are 0.86 of it, Cu 0.97, MgO and GaAs 1.02, Si 1.06); a non-cubic c/a is the
 * archetype's times PROTOTYPE_CA_MIN..MAX. */
#define PROTOTYPE_SCALE_MIN 0.85
#define PROTOTYPE_SCALE_MAX 1.10
#define PROTOTYPE_CA_MIN 0.95
#define PROTOTYPE_CA_MAX 1.05
/* Name (option spelling), Strukturbericht type with archetype, element types (1-3), atoms per
 * conventional cell of prototype p (0 <= p < TSR_CBED_NPROTOTYPES); the index of a name, -1 if unknown. */
const char *_tsr_cbed_prototype_name(int p);
const char *_tsr_cbed_prototype_type(int p);
int _tsr_cbed_prototype_types(int p);
int _tsr_cbed_prototype_atoms(int p);
double _tsr_cbed_prototype_c_a(int p); /* the archetype's (or the ideal) c / a */
int _tsr_cbed_prototype_find(const char *name);
/* Prototype p with element zs[t] on the sites of element type t, lattice constant a (A), c = c_a a:
 * its sites expanded by the space group's operations. 0, -1 out of memory, -2 bad arguments. */
int _tsr_cbed_prototype_build(struct cbed_crystal *c, int p, const int *zs, double a, double c_a);
/* Shortest distance between two atoms of c, an atom's own periodic images included (A). */
double _tsr_cbed_crystal_min_distance(const struct cbed_crystal *c);
/* Reduced composition (atoms per Z, divided by their gcd) of the formula s[0..len) ("TiO2"); -1 when
 * it is not a formula of known element symbols. */
int _tsr_cbed_formula_parse(const char *s, size_t len, int n[TSR_CBED_ZMAX + 1]);
/* 1 when c's reduced composition is one of the comma-separated formulas of list. */
int _tsr_cbed_excluded(const struct cbed_crystal *c, const char *list);
/* A random prototype crystal for the options (o->prototypes, zmin..zmax, min_distance, exclude):
 * 0, -1 out of memory, -2 the draw is too tight or excluded (draw again from another stream). */
int _tsr_cbed_crystal_prototype(struct cbed_crystal *c, const tsr_cbed_opts *o, double (*uniform)(void *), void *rng);

/* A crystal seen along a zone axis: the supercell edges x, y (lattice vectors normal to the beam and
 * to each other within `strain`) and the beam direction uvw (a lattice vector), made exactly
 * orthogonal by a shear of at most `strain` (|cos| of the largest angle error). */
struct cbed_zone {
  int uvw[3], x[3], y[3];
  double rotation_deg; /* angle of x from the zone's reference edge (its shortest normal lattice vector) */
  double strain;
  double len[3];       /* |x|, |y|, |uvw| in A: the orthogonal cell before tiling */
};

/* The edges for zone uvw whose x lies nearest `rotation_deg` from the reference edge, none longer than
 * lmax A; -1 when no cell orthogonal within 2% exists. */
int _tsr_cbed_zone_cell(const struct cbed_crystal *c, const int uvw[3], double rotation_deg, double lmax,
                        struct cbed_zone *z);
/* The zone's cell tiled to about fov in x and y, shifted in plane by (sx, sy) cells; -1 when out of
 * memory or when the cell does not hold det(x, y, uvw) unit cells' atoms. */
int _tsr_cbed_build_supercell(struct cbed_atoms *a, const struct cbed_crystal *c, const struct cbed_zone *z,
                              double fov, double sx, double sy);

/* ---- per-sample record (cbed_specimen.c, cbed_scan.c; the dataset `meta`, cbed_meta.c) ---- */
struct cbed_meta {
  char structure[64], formula[64], source[256];
  int spacegroup;
  double cell[6];        /* the crystal's a, b, c (A), alpha, beta, gamma (deg); zeros for random atoms */
  int zone[3];           /* beam direction [uvw] in the crystal's lattice */
  int edge_x[3], edge_y[3]; /* supercell edges as lattice vectors, before tiling */
  int tiles[2];
  double supercell[3];   /* the simulated box lx, ly (A) and one period lz along the beam */
  double strain;         /* orthogonalisation shear (|cos| of the largest angle error) */
  double rotation_deg;   /* in-plane rotation of the crystal actually simulated */
  double tilt_mrad[2];   /* specimen tilt towards x and y */
  double origin_A[2];    /* in-plane shift of the crystal */
  double thickness_A;    /* simulated thickness: periods x lz */
  int periods, atoms;    /* atoms in one period of the box */
  int crystal_redraws;   /* random crystals drawn and rejected before this one (no usable box or motif) */
  /* the rest is filled by _tsr_cbed_simulate (cbed_scan.c): the optics drawn for this sample */
  double kv, alpha_mrad, defocus_A, cs_mm, a1_A, a1_angle_deg, b2_A, b2_angle_deg, source_rms_A, dose_electrons;
  /* sampling: slice_A is the slice simulated, band_limit_mrad the angle the grid reaches */
  int grid, slices_per_period;
  double slice_A, band_limit_mrad, sim_pixel_mrad[2], detector_pixel_mrad;
  int phonon_configurations, coherence_samples;
  /* the target: pixel_A its pixel over the scan window, its mean and std over the window (V A) */
  double blur_A, pixel_A[2], target_mean_VA, target_std_VA;
  double scan_A[4];      /* the scanned (and target) window: x0, y0, width, height in the box */
};

/* Draws sample `index`'s specimen from the options and the sample's stream (structure, zone axis,
 * thickness, origin, tilt, rotation) and records it in m (may be NULL); *periods is the number of
 * times the box repeats along the beam. Errors name the structure. */
tsr_status _tsr_cbed_specimen(const tsr_cbed_opts *o, int64_t index, struct _tsr_rng *r, struct cbed_atoms *a,
                              int *periods, struct cbed_meta *m);

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
/* Checks the physics options (ranges of the drawn optics, phonons, coherence, detector) (cbed_scan.c). */
tsr_status _tsr_cbed_physics_check(const tsr_cbed_opts *o);
/* Everything after the specimen `a` (one period along the beam, repeated `periods` times): optics,
 * sampling, target into v, the scan into x; the optics, sampling, detector and scan fields of meta
 * (its specimen fields are left alone) unless meta is NULL (cbed_scan.c). */
tsr_status _tsr_cbed_simulate(const tsr_cbed_opts *o, struct cbed_work *w, const struct cbed_atoms *a, int periods,
                              int64_t index, float *x, float *v, struct cbed_meta *meta);
/* Sample `index` with the work space w (resized as the sample needs): the specimen
 * (cbed_specimen.c), then _tsr_cbed_simulate; its whole record in meta unless meta is NULL. */
tsr_status _tsr_cbed_sample_with(const tsr_cbed_opts *o, struct cbed_work *w, int64_t index, float *x, float *v,
                                 struct cbed_meta *meta);

#endif

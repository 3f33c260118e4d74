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

/* ---- elements (cbed_kirkland.c) ---- */
#define TSR_CBED_ZMAX 103
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

/* ---- per-sample record (cbed_specimen.c; written by cbed_write.c as the compound dataset `meta`) ---- */
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
  double kv, alpha_mrad, defocus_A, cs_mm, slice_A, blur_A;
  double pixel_A[2];     /* real-space pixel of the potential: lx / grid, ly / grid */
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
/* Sample `index` with a work space of side o->grid and a scratch buffer of 2 grid^2 doubles; its
 * record in m unless m is NULL. */
tsr_status _tsr_cbed_sample_with(const tsr_cbed_opts *o, struct cbed_work *w, double *buf, int64_t index, float *x,
                                 float *v, struct cbed_meta *m);

#endif

/* Multislice simulation of convergent-beam electron diffraction (CBED): crystal supercells (built-in,
 * read from CIF files, random but physical crystals over Z = 1..103 or random crystals of common
 * structure types; or random atoms) along a
 * zone axis, tilted and rotated, Kirkland projected potentials, a probe with convergence angle and
 * aberrations (defocus, Cs, astigmatism, coma) scanned over a grid of positions, partial spatial
 * coherence, frozen phonons, a detector with finite dose. One sample is an input stack [P, H, W] of
 * diffraction intensities (one pattern per probe position) and a target [1, H', W'], the projected
 * potential of one period in V A. */
#ifndef TESSERA_CBED_H
#define TESSERA_CBED_H

#include <stdint.h>
#include <tessera/status.h>
#include <tessera/context.h>
#include <tessera/loader.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tsr_cbed_structure {
  TSR_CBED_SI,      /* diamond-cubic silicon, a = 5.431 A */
  TSR_CBED_SRTIO3,  /* cubic perovskite SrTiO3, a = 3.905 A */
  TSR_CBED_CU,      /* fcc copper, a = 3.615 A */
  TSR_CBED_RANDOM,  /* random atoms of Si, O, Ti, Sr, Cu in the field of view */
  TSR_CBED_CRYSTAL, /* a random crystal per sample (fields zmin .. density_max below) */
  TSR_CBED_PROTOTYPE, /* a random crystal of a common structure type per sample (prototypes, exclude) */
  TSR_CBED_NSTRUCT
} tsr_cbed_structure;

/* Structure types of TSR_CBED_PROTOTYPE (bit k of `prototypes`, in this order): fcc, bcc, hcp,
 * diamond, rocksalt, cscl, zincblende, wurtzite, nias, fluorite, rutile, corundum, perovskite, l12,
 * spinel. */
#define TSR_CBED_NPROTOTYPES 15

/* Highest atomic number of the scattering-factor table. */
#define TSR_CBED_ZMAX 103

typedef enum tsr_cbed_intensity { TSR_CBED_LINEAR, TSR_CBED_SQRT, TSR_CBED_LOG } tsr_cbed_intensity;

typedef struct tsr_cbed_opts {
  double kv;              /* accelerating voltage, kV (default 200) */
  double alpha_mrad;      /* probe convergence semi-angle (default 10) */
  double defocus;         /* A, positive = underfocus in Kirkland's convention (default 0) */
  double cs_mm;           /* spherical aberration, mm (default 0) */
  int grid;               /* simulation pixels per side; 0 = chosen per sample from max_angle_mrad (default 0) */
  int pattern;            /* pattern side H = W, the centre of the grid's diffraction plane (default 128) */
  int target;             /* target side H' = W': samples of the potential over the scan window (default 128) */
  int probes;             /* probe positions per side: P = probes^2 (default 8) */
  double fov;             /* field of view (supercell side), A; crystals tile whole cells near it (default 20) */
  double thickness_min, thickness_max; /* specimen thickness range, A (default 20..80) */
  double slice;           /* slice thickness, A; 0 = chosen from the wavelength and max_angle_mrad (default 0) */
  double blur;            /* Gaussian blur of the target, rms in A (default 0.3) */
  unsigned structures;    /* bit mask of tsr_cbed_structure drawn per sample (default Si|SrTiO3|Cu) */
  char cif[1024];         /* CIF files, comma-separated, drawn as further structures (default none) */
  unsigned zones;         /* bit mask: 1 = [001], 2 = [110], 4 = [111] (default 1|2) */
  int zone_index;         /* > 0: zone axis [uvw] drawn per sample with |u|, |v|, |w| <= zone_index (default 0) */
  double tilt_mrad;       /* largest specimen tilt off the zone axis, random direction (default 0) */
  double rotation_deg;    /* in-plane rotation of the crystal drawn in [0, rotation_deg) (default 0) */
  int shift;              /* 1 = random in-plane origin of the crystal per sample (default 1) */
  int random_atoms_min, random_atoms_max; /* atoms per sample in random mode (default 20..60) */
  int zmin, zmax;         /* random crystals: elements Z in [zmin, zmax] (default 1..103) */
  int sites;              /* random crystals: at most this many atoms per unit cell (default 8) */
  double min_distance;    /* random crystals: closest approach of two atoms, A (default 1.8) */
  double density_min, density_max; /* random crystals: atoms per A^3 (default 0.03..0.08) */
  /* Prototype crystals: elements Z in [zmin, zmax] (distinct per element type), no two atoms closer
   * than min_distance (a draw that is is redrawn); the lattice constant puts the tightest contact at
   * the sum of covalent radii times a factor drawn in [0.85, 1.10] */
  unsigned prototypes;    /* bit mask of the TSR_CBED_NPROTOTYPES types drawn from (default all) */
  char exclude[256];      /* formulas, comma-separated ("SrTiO3,Cu,TiO2"): a prototype draw of one of
                             these compositions (reduced, any structure type) is redrawn (default none) */
  tsr_cbed_intensity intensity; /* input scaling (default log: log(1 + I / intensity_floor)) */
  double intensity_floor; /* default 1e-5 (intensities sum to 1 over the whole diffraction plane) */
  uint64_t seed;          /* default 1, as every seed in Tessera (programs, tsr_context_opts) */
  /* Sampling: grid = 0 chooses the grid per sample so that the band limit (2/3 of Nyquist) reaches
   * max_angle_mrad; slice = 0 chooses the slice thickness from the wavelength and that angle. */
  double max_angle_mrad;  /* highest scattering angle simulated (default 150) */
  /* Per-sample draws: each of kv, alpha_mrad, defocus, cs_mm, a1, b2 is drawn uniformly in
   * [value - spread, value + spread] (spreads default 0); every drawn value is stored per sample. */
  double kv_spread, alpha_spread, defocus_spread, cs_spread, a1_spread, b2_spread;
  /* Probe aberrations, chi = 2 pi / lambda [theta^2 (C1 + A1 cos 2(phi - phi_A1)) / 2 + theta^3 B2
   * cos(phi - phi_B2) / 3 + theta^4 C3 / 4] with C1 = -defocus, C3 = cs_mm; the azimuths are drawn
   * uniformly per sample. */
  double a1;              /* two-fold astigmatism |A1|, A (default 0) */
  double b2;              /* axial coma |B2|, A (default 0) */
  /* Partial spatial coherence: the pattern is the incoherent mean over `coherence_samples` probe
   * positions drawn from a Gaussian source image of rms source_A around each scan position. */
  double source_A;        /* default 0 (coherent) */
  int coherence_samples;  /* default 8; unused when source_A = 0 */
  /* Frozen phonons: the pattern is the mean over `phonons` configurations of random Gaussian
   * displacements with per-axis mean square u2 (A^2) per element; 0 = static lattice. */
  int phonons;            /* default 0 */
  double u2[TSR_CBED_ZMAX + 1]; /* per atomic number; 0 = the built-in room-temperature value */
  /* Detector: det_mrad = pixel size (0 = the simulation's pixel, lambda / cell, centre crop); the
   * simulated intensity is integrated over each detector pixel, counted with Poisson noise at
   * `dose` electrons per pattern (0 = noiseless) and blurred by a Gaussian point-spread function of
   * rms det_psf detector pixels (MTF exp(-2 pi^2 det_psf^2 q^2), q in cycles per pixel). */
  double det_mrad, dose, det_psf;
  /* Scan window: the probes span a square of scan_A A centred in the cell and the target samples
   * the same square; 0 = the whole cell (default). A window of about one unit cell keeps the probe
   * positions from repeating a lattice period (identical patterns). */
  double scan_A;
} tsr_cbed_opts;

void tsr_cbed_opts_default(tsr_cbed_opts *o);
/* Checks ranges and names the bad field. */
tsr_status tsr_cbed_opts_check(const tsr_cbed_opts *o);
const char *tsr_cbed_structure_name(tsr_cbed_structure s);
tsr_status tsr_cbed_structure_parse(const char *name, tsr_cbed_structure *s);
/* Prototype names (fcc, ..., spinel; TSR_CBED_NPROTOTYPES), comma-separated, as a bit mask into
 * *mask; "all" selects every type. Errors name the unknown type. */
tsr_status tsr_cbed_prototypes_parse(const char *list, unsigned *mask);
/* Per-element mean square displacements from "Si:0.0058,O:0.0074" (element symbols or atomic
 * numbers, A^2) into o->u2. */
tsr_status tsr_cbed_u2_parse(const char *list, tsr_cbed_opts *o);

/* Relativistic electron wavelength (A) and interaction constant sigma (rad / (V A)) at kv kilovolts. */
double tsr_cbed_wavelength(double kv);
double tsr_cbed_sigma(double kv);

/* Simulates sample `index` (deterministic for (seed, index)): x [P, pattern, pattern], v [1, target,
 * target], the projected potential in V A (no rescaling). Thread-safe. */
tsr_status tsr_cbed_sample(const tsr_cbed_opts *o, int64_t index, float *x, float *v);

/* Simulates samples [first, first + n) as StarPU tasks (one per sample) on the context's workers
 * and writes them to an HDF5 file: datasets `cbed` [n, P, H, W] and `potential` [n, 1, H', W']
 * (float32, or IEEE half precision with half = 1), `meta` [n] (one compound record per sample:
 * structure, formula, source file, cell, zone axis, supercell, thickness, tilt, rotation, origin,
 * the optics drawn, sampling, detector and scan window), one attribute per option plus `first_index`.
 * Written to path.tmp, then renamed. progress(user, done, n) is called now and then if not NULL. */
tsr_status tsr_cbed_write(tsr_context *ctx, const tsr_cbed_opts *o, int64_t first, int64_t n, int half,
                          const char *path, void (*progress)(void *user, int64_t done, int64_t total),
                          void *user);

/* Options from a JSON file: one object whose fields are tessera-cbed's long options ("kv": 200,
 * "thickness": [20, 80], "structures": ["si", "cu", "crystal"], "cif": ["a.cif"], "zones": ["001"],
 * "zone_index": 2, "tilt": 5, "rotation": 360, "elements": [1, 103], "density": [0.03, 0.08],
 * "atoms": [20, 60], "intensity": "log", "shift": false, "seed": 7, ...); the rest keep their
 * defaults. Unknown fields and bad values are errors naming the file and the field. */
tsr_status tsr_cbed_opts_load_json(const char *path, tsr_cbed_opts *o);

/* The simulator as a producer for tsr_loader_open_pool (in-situ training): sample `index` is
 * tsr_cbed_sample's, inputs [P, pattern, pattern], targets [1, target, target], simulated inside the
 * pool's tasks with one work space per worker. tsr_loader_close frees it (p->destroy). */
tsr_status tsr_cbed_producer(const tsr_cbed_opts *o, tsr_sample_producer *p);

#ifdef __cplusplus
}
#endif
#endif

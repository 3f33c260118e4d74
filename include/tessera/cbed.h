/* Multislice simulation of convergent-beam electron diffraction (CBED): crystal supercells (built-in,
 * read from CIF files, or random but physical crystals over Z = 1..103; or random atoms) along a
 * zone axis, tilted and rotated, Kirkland projected potentials, a probe with convergence angle,
 * defocus and Cs scanned over a grid of positions. One sample is an input stack [P, H, W] of
 * diffraction intensities (one pattern per probe position) and a target [1, H', W'], the
 * slice-averaged projected potential in V A. */
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
  TSR_CBED_NSTRUCT
} tsr_cbed_structure;

typedef enum tsr_cbed_intensity { TSR_CBED_LINEAR, TSR_CBED_SQRT, TSR_CBED_LOG } tsr_cbed_intensity;

typedef struct tsr_cbed_opts {
  double kv;              /* accelerating voltage, kV (default 200) */
  double alpha_mrad;      /* probe convergence semi-angle (default 10) */
  double defocus;         /* A, positive = underfocus in Kirkland's convention (default 0) */
  double cs_mm;           /* spherical aberration, mm (default 0) */
  int grid;               /* simulation pixels per side (default 64) */
  int pattern;            /* pattern side H = W, the centre of the grid's diffraction plane (default 64) */
  int target;             /* target side H' = W', the centre of the potential (default 64) */
  int probes;             /* probe positions per side: P = probes^2 (default 4) */
  double fov;             /* field of view (supercell side), A; crystals tile whole cells near it (default 20) */
  double thickness_min, thickness_max; /* specimen thickness range, A (default 20..80) */
  double slice;           /* slice thickness, A (default 2) */
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
  tsr_cbed_intensity intensity; /* input scaling (default log: log(1 + I / intensity_floor)) */
  double intensity_floor; /* default 1e-5 (intensities sum to 1 over the whole diffraction plane) */
  uint64_t seed;          /* default 1, as every seed in Tessera (programs, tsr_context_opts) */
} tsr_cbed_opts;

void tsr_cbed_opts_default(tsr_cbed_opts *o);
/* Checks ranges and names the bad field. */
tsr_status tsr_cbed_opts_check(const tsr_cbed_opts *o);
const char *tsr_cbed_structure_name(tsr_cbed_structure s);
tsr_status tsr_cbed_structure_parse(const char *name, tsr_cbed_structure *s);

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
 * probe), one attribute per option plus `first_index`.
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

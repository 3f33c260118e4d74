/* One CBED training sample: the specimen drawn from (seed, index) alone (cbed_specimen.c), then the
 * physics (cbed_scan.c): the optics drawn from their ranges, a grid and slice thickness chosen for
 * the angles simulated (cbed_sampling.c), the multislice run for each probe position of the scan
 * grid (input channels), averaged over frozen-phonon configurations and source positions, recorded
 * by the detector (cbed_detector.c); and the target: the projected potential of one period along
 * the beam (V A), blurred by a Gaussian and sampled over the scan window. Also the options' checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim/cbed/cbed.h"
#include "runtime/error.h"
#include "runtime/rng.h"

static const char *names[] = {[TSR_CBED_SI] = "si", [TSR_CBED_SRTIO3] = "srtio3", [TSR_CBED_CU] = "cu",
                              [TSR_CBED_RANDOM] = "random", [TSR_CBED_CRYSTAL] = "crystal",
                              [TSR_CBED_PROTOTYPE] = "prototype"};

const char *tsr_cbed_structure_name(tsr_cbed_structure s) {
  return s >= 0 && s < TSR_CBED_NSTRUCT ? names[s] : "?";
}

tsr_status tsr_cbed_structure_parse(const char *name, tsr_cbed_structure *s) {
  for (int i = 0; name && i < TSR_CBED_NSTRUCT; i++)
    if (strcasecmp(name, names[i]) == 0) {
      *s = (tsr_cbed_structure)i;
      return TSR_OK;
    }
  return _tsr_error(TSR_ERR_ARG, "unknown structure '%s' (known: si, srtio3, cu, random, crystal, prototype)", name ? name : "(null)");
}

void tsr_cbed_opts_default(tsr_cbed_opts *o) {
  *o = (tsr_cbed_opts){.kv = 200, .alpha_mrad = 10, .defocus = 0, .cs_mm = 0, .grid = 0, .pattern = 128,
                       .target = 128, .probes = 8, .fov = 20, .thickness_min = 20, .thickness_max = 80,
                       .slice = 0, .blur = 0.3, .max_angle_mrad = 150, .coherence_samples = 8,
                       .structures = 1u << TSR_CBED_SI | 1u << TSR_CBED_SRTIO3 | 1u << TSR_CBED_CU,
                       .zones = 1 | 2, .shift = 1, .random_atoms_min = 20, .random_atoms_max = 60,
                       .zmin = 1, .zmax = 103, .sites = 8, .min_distance = 1.8, .density_min = 0.03,
                       .density_max = 0.08, .prototypes = (1u << TSR_CBED_NPROTOTYPES) - 1, .intensity = TSR_CBED_LOG, .intensity_floor = 1e-5, .seed = 1};
}

#define BAD(...) return _tsr_error(TSR_ERR_ARG, "cbed: " __VA_ARGS__)

tsr_status tsr_cbed_opts_check(const tsr_cbed_opts *o) {
  if (!o) BAD("options are NULL");
  if (!(o->kv >= 1 && o->kv <= 3000)) BAD("kv %g is not in [1, 3000]", o->kv);
  if (!(o->alpha_mrad > 0 && o->alpha_mrad <= 200)) BAD("alpha %g mrad is not in (0, 200]", o->alpha_mrad);
  if (!isfinite(o->defocus) || !(o->cs_mm >= 0 && o->cs_mm <= 100)) BAD("defocus %g A / Cs %g mm", o->defocus, o->cs_mm);
  if (o->grid && (o->grid < 8 || o->grid > 4096 || o->grid % 2))
    BAD("grid %d is not an even number in [8, 4096] (or 0: chosen per sample)", o->grid);
  if (o->pattern < 1 || o->pattern > 4096) BAD("pattern %d is not in [1, 4096]", o->pattern);
  if (o->grid && !(o->det_mrad > 0) && o->pattern > o->grid)
    BAD("pattern %d is larger than the grid %d (and det_mrad is 0: simulation pixels)", o->pattern, o->grid);
  if (o->target < 1 || o->target > 4096) BAD("target %d is not in [1, 4096]", o->target);
  if (o->probes < 1 || o->probes > 64) BAD("probes %d per side is not in [1, 64]", o->probes);
  if (!(o->fov >= 2 && o->fov <= 1000)) BAD("field of view %g A is not in [2, 1000]", o->fov);
  if (!(o->thickness_min > 0 && o->thickness_max >= o->thickness_min && o->thickness_max <= 1e5))
    BAD("thickness range %g..%g A is not positive and increasing", o->thickness_min, o->thickness_max);
  if (o->slice != 0 && !(o->slice > 0.1 && o->slice <= 100)) BAD("slice thickness %g A is not 0 (chosen) or in (0.1, 100]", o->slice);
  if (!(o->blur >= 0 && o->blur < 100)) BAD("blur %g A is not in [0, 100)", o->blur);
  if ((!o->structures && !o->cif[0]) || o->structures >> TSR_CBED_NSTRUCT)
    BAD("structure mask 0x%x selects nothing valid and no CIF file is given", o->structures);
  if (!memchr(o->cif, 0, sizeof o->cif)) BAD("the CIF list is not a terminated string");
  if (!o->zones || o->zones > 7) BAD("zone mask %u selects no zone axis of [001]=1, [110]=2, [111]=4", o->zones);
  if (o->zone_index < 0 || o->zone_index > 6) BAD("zone index %d is not in [0, 6]", o->zone_index);
  if (!(o->tilt_mrad >= 0 && o->tilt_mrad <= 200)) BAD("tilt %g mrad is not in [0, 200]", o->tilt_mrad);
  if (!(o->rotation_deg >= 0 && o->rotation_deg <= 360)) BAD("rotation %g degrees is not in [0, 360]", o->rotation_deg);
  if (o->zmin < 1 || o->zmax > 103 || o->zmax < o->zmin) BAD("elements Z %d..%d are not in 1..103", o->zmin, o->zmax);
  if (o->sites < 1 || o->sites > 256) BAD("sites %d per cell is not in [1, 256]", o->sites);
  if (!(o->min_distance >= 0.5 && o->min_distance <= 5)) BAD("minimum distance %g A is not in [0.5, 5]", o->min_distance);
  if (!(o->density_min >= 0.005 && o->density_max >= o->density_min && o->density_max <= 0.3))
    BAD("density %g..%g atoms/A^3 is not an increasing range in [0.005, 0.3]", o->density_min, o->density_max);
  if (!o->prototypes || o->prototypes >> TSR_CBED_NPROTOTYPES) BAD("prototype mask 0x%x selects no type of the %d", o->prototypes, TSR_CBED_NPROTOTYPES);
  if (!memchr(o->exclude, 0, sizeof o->exclude)) BAD("the exclude list is not a terminated string");
  for (const char *p = o->exclude; *p;) {
    size_t len = strcspn(p, ",");
    int n[TSR_CBED_ZMAX + 1];
    if (len > 0 && _tsr_cbed_formula_parse(p, len, n) != 0) BAD("exclude: '%.*s' is not a formula of element symbols", (int)len, p);
    p += len + (p[len] == ',');
  }
  if (o->random_atoms_min < 1 || o->random_atoms_max < o->random_atoms_min)
    BAD("random atoms %d..%d", o->random_atoms_min, o->random_atoms_max);
  if (o->intensity < TSR_CBED_LINEAR || o->intensity > TSR_CBED_LOG) BAD("intensity scaling %d", o->intensity);
  if (!(o->intensity_floor > 0)) BAD("intensity floor %g is not positive", o->intensity_floor);
  return _tsr_cbed_physics_check(o);
}

tsr_status _tsr_cbed_sample_with(const tsr_cbed_opts *o, struct cbed_work *w, int64_t index, float *x, float *v,
                                 struct cbed_meta *meta) {
  struct _tsr_rng r = _tsr_rng_stream(o->seed, (uint64_t)index + 0x3C6EF372FE94F82Bull);
  struct cbed_atoms a;
  int periods;
  tsr_status st = _tsr_cbed_specimen(o, index, &r, &a, &periods, meta);
  if (st == TSR_OK) st = _tsr_cbed_simulate(o, w, &a, periods, index, x, v, meta);
  _tsr_cbed_atoms_free(&a);
  if (st == TSR_OK) return st;
  /* the one place that names the sample: the messages below it say what failed, not where */
  char why[900];
  snprintf(why, sizeof why, "%s", tsr_last_error());
  return _tsr_error(st, "cbed: sample %lld: %s", (long long)index, why);
}

tsr_status tsr_cbed_sample(const tsr_cbed_opts *o, int64_t index, float *x, float *v) {
  TSR_TRY(tsr_cbed_opts_check(o));
  if (!x || !v) return _tsr_error(TSR_ERR_ARG, "tsr_cbed_sample: %s is NULL", x ? "v" : "x");
  if (index < 0) return _tsr_error(TSR_ERR_ARG, "tsr_cbed_sample: index %lld is negative", (long long)index);
  struct cbed_work w = {0};
  tsr_status st = _tsr_cbed_sample_with(o, &w, index, x, v, NULL);
  _tsr_cbed_work_free(&w);
  return st;
}

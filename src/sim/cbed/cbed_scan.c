/* The physics of one sample once its specimen is built: the optics drawn from their ranges, the
 * grid and slice thickness (cbed_sampling.c), the target (the projected potential of one period,
 * V A, over the scan window), and the scan: for every probe position of the window (the whole
 * cell unless tsr_cbed_opts.scan_A is set), the mean over frozen-phonon configurations and
 * source positions (partial spatial coherence: incoherent averaging over probe positions drawn
 * from a Gaussian source image) of the detector's record, then dose noise, point spread and the
 * input scaling. Each kind of draw has its own stream of (seed, index), so changing one (e.g. the
 * number of phonon configurations) leaves the others' draws alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/rng.h"
#include "sim/cbed/cbed.h"

#define SALT_OPTICS 0x5851F42D4C957F2Dull
#define SALT_PHONON 0x14057B7EF767814Full
#define SALT_SOURCE 0x2545F4914F6CDD1Dull
#define SALT_DOSE 0x9FB21C651E98DF25ull
/* transmission functions of a displaced specimen held at once, in complex values (64 MiB) */
#define STACK_MAX (1 << 22)

#define BAD(...) return _tsr_error(TSR_ERR_ARG, "cbed: " __VA_ARGS__)

tsr_status _tsr_cbed_physics_check(const tsr_cbed_opts *o) {
  const struct {
    const char *name;
    double v, s, lo, hi;
  } r[] = {{"kv", o->kv, o->kv_spread, 1, 3000},         {"alpha", o->alpha_mrad, o->alpha_spread, 1e-3, 200},
           {"defocus", o->defocus, o->defocus_spread, -1e6, 1e6}, {"cs", o->cs_mm, o->cs_spread, 0, 100},
           {"a1", o->a1, o->a1_spread, 0, 1e5},          {"b2", o->b2, o->b2_spread, 0, 1e6}};
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
    if (!(r[i].s >= 0 && r[i].v - r[i].s >= r[i].lo && r[i].v + r[i].s <= r[i].hi))
      BAD("%s %g with spread %g leaves [%g, %g]", r[i].name, r[i].v, r[i].s, r[i].lo, r[i].hi);
  if (!(o->max_angle_mrad > 0 && o->max_angle_mrad <= 500)) BAD("max angle %g mrad is not in (0, 500]", o->max_angle_mrad);
  if (!(o->source_A >= 0 && o->source_A <= 100)) BAD("source size %g A is not in [0, 100]", o->source_A);
  if (o->coherence_samples < 1 || o->coherence_samples > 1024)
    BAD("coherence samples %d is not in [1, 1024]", o->coherence_samples);
  if (o->phonons < 0 || o->phonons > 10000) BAD("phonon configurations %d is not in [0, 10000]", o->phonons);
  for (int z = 0; z <= TSR_CBED_ZMAX; z++)
    if (!(o->u2[z] >= 0 && o->u2[z] <= 1)) BAD("u2 %g A^2 of Z = %d is not in [0, 1]", o->u2[z], z);
  if (!(o->det_mrad >= 0 && o->det_mrad <= 1000)) BAD("detector pixel %g mrad is not in [0, 1000]", o->det_mrad);
  if (!(o->dose >= 0 && o->dose <= 1e15)) BAD("dose %g electrons is not in [0, 1e15]", o->dose);
  if (!(o->det_psf >= 0 && o->det_psf <= 64)) BAD("detector PSF %g pixels is not in [0, 64]", o->det_psf);
  if (!(o->scan_A >= 0 && o->scan_A <= 1000)) BAD("scan window %g A is not in [0, 1000]", o->scan_A);
  return TSR_OK;
}

tsr_status tsr_cbed_u2_parse(const char *list, tsr_cbed_opts *o) {
  if (!list || !o) return _tsr_error(TSR_ERR_ARG, "tsr_cbed_u2_parse: %s is NULL", o ? "list" : "o");
  const char *p = list;
  for (int items = 0; *p && items <= TSR_CBED_ZMAX; items++) {
    char el[8];
    double u2;
    int used = 0, z = 0;
    if (sscanf(p, "%7[^:,]:%lf%n", el, &u2, &used) != 2) break;
    char *end;
    long zl = strtol(el, &end, 10);
    z = *end ? _tsr_cbed_element_parse(el) : zl >= 1 && zl <= TSR_CBED_ZMAX ? (int)zl : 0;
    if (z < 1 || z > TSR_CBED_ZMAX) return _tsr_error(TSR_ERR_ARG, "u2 '%s': unknown element '%s'", list, el);
    if (!(u2 > 0 && u2 <= 1)) return _tsr_error(TSR_ERR_ARG, "u2 '%s': %g A^2 for %s is not in (0, 1]", list, u2, el);
    o->u2[z] = u2;
    p += used;
    if (*p == ',') p++;
    else if (*p) break;
  }
  if (*p) return _tsr_error(TSR_ERR_ARG, "u2 '%s': expected ELEMENT:A2[,ELEMENT:A2...] at '%s'", list, p);
  return TSR_OK;
}

static double uniform(void *r) { return _tsr_rng_uniform(r); }
static double spread(struct _tsr_rng *r, double v, double s) { return s > 0 ? v + s * (2 * uniform(r) - 1) : v; }

static float scale_intensity(const tsr_cbed_opts *o, double i) {
  switch (o->intensity) {
  case TSR_CBED_LINEAR: return (float)i;
  case TSR_CBED_SQRT: return (float)sqrt(i);
  default: return (float)log1p(i / o->intensity_floor);
  }
}

/* The target over the scan window into v (V A, not rescaled); its mean and standard deviation into meta. */
static tsr_status target(const tsr_cbed_opts *o, struct cbed_work *w, double x0, double y0, double sx, double sy,
                         double *buf, float *v, struct cbed_meta *m) {
  size_t mm = (size_t)o->target * o->target;
  if (_tsr_cbed_window_potential(w, o->target, x0, y0, sx, sy, o->blur, buf) != 0)
    return _tsr_error(TSR_ERR_NOMEM, "out of memory for a %d x %d target", o->target, o->target);
  double mean = 0, var = 0;
  for (size_t p = 0; p < mm; p++) mean += buf[p] / mm;
  for (size_t p = 0; p < mm; p++) var += (buf[p] - mean) * (buf[p] - mean) / mm;
  double sd = sqrt(var);
  for (size_t p = 0; p < mm; p++) v[p] = (float)buf[p];
  m->target_mean_VA = mean, m->target_std_VA = sd;
  return TSR_OK;
}

tsr_status _tsr_cbed_simulate(const tsr_cbed_opts *o, struct cbed_work *w, const struct cbed_atoms *a, int periods,
                              int64_t index, float *x, float *v, struct cbed_meta *meta) {
  struct cbed_meta m = meta ? *meta : (struct cbed_meta){0}; /* keeps the specimen's fields */
  struct _tsr_rng ro = _tsr_rng_stream(o->seed, (uint64_t)index + SALT_OPTICS);
  double kv = spread(&ro, o->kv, o->kv_spread), lambda = tsr_cbed_wavelength(kv);
  struct cbed_optics op = {.alpha_mrad = spread(&ro, o->alpha_mrad, o->alpha_spread),
                           .defocus = spread(&ro, o->defocus, o->defocus_spread),
                           .cs_mm = spread(&ro, o->cs_mm, o->cs_spread),
                           .a1 = spread(&ro, o->a1, o->a1_spread), .a1_angle = M_PI * uniform(&ro),
                           .b2 = spread(&ro, o->b2, o->b2_spread), .b2_angle = 2 * M_PI * uniform(&ro)};
  int P = o->pattern, K = o->probes, det = o->det_mrad > 0;
  int n = o->grid ? o->grid : _tsr_cbed_grid_for(a->lx, a->ly, lambda, o->max_angle_mrad, det ? 8 : P);
  if (n > 4096)
    return _tsr_error(TSR_ERR_ARG, "needs a %d x %d grid for a %.1f x %.1f A cell up to %g mrad "
                      "(at most 4096: lower max_angle or fov)", n, n, a->lx, a->ly, o->max_angle_mrad);
  size_t pp = (size_t)P * P, mm = (size_t)o->target * o->target, scratch = (size_t)n * P;
  scratch = scratch > pp ? scratch : pp, scratch = scratch > mm ? scratch : mm;
  size_t need = (size_t)K * K * pp + scratch;
  if (_tsr_cbed_work_resize(w, n) != 0) return _tsr_error(TSR_ERR_NOMEM, "out of memory for a %d x %d grid", n, n);
  if (w->cap_acc < need) {
    free(w->acc);
    w->acc = malloc(sizeof(double) * need);
    w->cap_acc = w->acc ? need : 0;
    if (!w->acc) return _tsr_error(TSR_ERR_NOMEM, "out of memory for %d patterns of %d x %d", K * K, P, P);
  }
  double *acc = w->acc, *buf = w->acc + (size_t)K * K * pp;
  double band = lambda * n / (3 * fmax(a->lx, a->ly)) * 1e3;
  double dz = o->slice > 0 ? o->slice : _tsr_cbed_slice_for(lambda, band);
  if (_tsr_cbed_prepare(w, a, kv, dz) != 0) return _tsr_error(TSR_ERR_NOMEM, "out of memory preparing the slices");
  int nsl = w->nslices, total = nsl * periods;
  if (o->scan_A > fmin(a->lx, a->ly))
    return _tsr_error(TSR_ERR_ARG, "the scan window of %g A is larger than its %.2f x %.2f A cell",
                      o->scan_A, a->lx, a->ly);
  double sx = o->scan_A > 0 ? o->scan_A : a->lx, sy = o->scan_A > 0 ? o->scan_A : a->ly;
  double x0 = (a->lx - sx) / 2, y0 = (a->ly - sy) / 2;
  TSR_TRY(target(o, w, x0, y0, sx, sy, buf, v, &m));

  int configs = o->phonons > 0 ? o->phonons : 1, ncoh = o->source_A > 0 ? o->coherence_samples : 1;
  long per_copy = (long)nsl * n * n, copies = o->phonons > 0 ? STACK_MAX / per_copy : 1;
  copies = copies < 1 ? 1 : copies > periods ? periods : copies;
  double weight = 1.0 / ((double)configs * ncoh);
  struct _tsr_rng rp = _tsr_rng_stream(o->seed, (uint64_t)index + SALT_PHONON);
  struct _tsr_rng rs = _tsr_rng_stream(o->seed, (uint64_t)index + SALT_SOURCE);
  memset(acc, 0, sizeof(double) * K * K * pp);
  for (int c = 0; c < configs; c++) {
    if (o->phonons > 0) {
      struct cbed_atoms d;
      int rc = _tsr_cbed_displaced(&d, a, (int)copies, o, uniform, &rp);
      if (rc == 0) rc = _tsr_cbed_prepare(w, &d, kv, a->lz / nsl);
      _tsr_cbed_atoms_free(&d);
      if (rc != 0) return _tsr_error(TSR_ERR_NOMEM, "out of memory for phonon configuration %d", c);
    }
    for (int pj = 0; pj < K; pj++)
      for (int pi = 0; pi < K; pi++)
        for (int s = 0; s < ncoh; s++) {
          double px = x0 + (pi + 0.5) / K * sx, py = y0 + (pj + 0.5) / K * sy;
          if (ncoh > 1) px += o->source_A * _tsr_cbed_normal(uniform, &rs), py += o->source_A * _tsr_cbed_normal(uniform, &rs);
          _tsr_cbed_probe(w, &op, px, py);
          _tsr_cbed_propagate(w, total);
          _tsr_cbed_intensity(w, w->img);
          _tsr_cbed_detect(w->img, n, w->lx, w->ly, lambda, P, o->det_mrad, weight, buf, acc + (size_t)(pj * K + pi) * pp);
        }
  }
  struct _tsr_rng rd = _tsr_rng_stream(o->seed, (uint64_t)index + SALT_DOSE);
  for (int q = 0; q < K * K; q++) {
    double *pat = acc + (size_t)q * pp;
    _tsr_cbed_dose(pat, pp, o->dose, uniform, &rd);
    _tsr_cbed_psf(pat, P, o->det_psf, buf);
    for (size_t k = 0; k < pp; k++) x[(size_t)q * pp + k] = scale_intensity(o, pat[k]);
  }
  if (meta) {
    m.kv = kv, m.alpha_mrad = op.alpha_mrad, m.defocus_A = op.defocus, m.cs_mm = op.cs_mm;
    m.a1_A = op.a1, m.a1_angle_deg = op.a1_angle * 180 / M_PI, m.b2_A = op.b2, m.b2_angle_deg = op.b2_angle * 180 / M_PI;
    m.source_rms_A = o->source_A, m.dose_electrons = o->dose;
    m.grid = n, m.slices_per_period = nsl, m.slice_A = a->lz / nsl, m.band_limit_mrad = band;
    m.sim_pixel_mrad[0] = lambda / a->lx * 1e3, m.sim_pixel_mrad[1] = lambda / a->ly * 1e3;
    m.detector_pixel_mrad = det ? o->det_mrad : 0, m.phonon_configurations = o->phonons, m.coherence_samples = ncoh;
    m.blur_A = o->blur, m.pixel_A[0] = sx / o->target, m.pixel_A[1] = sy / o->target;
    m.scan_A[0] = x0, m.scan_A[1] = y0, m.scan_A[2] = sx, m.scan_A[3] = sy;
    *meta = m;
  }
  return TSR_OK;
}

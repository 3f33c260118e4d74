/* The specimen of one sample, drawn from the sample's own random stream: the structure (a built-in
 * crystal, a CIF file, a random or prototype crystal or random atoms), the zone axis, the thickness, the in-plane
 * origin, then (only when asked for, so older settings draw as before) a random low-index zone, a
 * rotation and a tilt; and the record of what was drawn. A random or prototype crystal that cannot be simulated
 * along the zone is drawn again from streams of (seed, index, redraw), at most CRYSTAL_DRAWS times.
 * CIF files are read once per process and kept (read-only) in a table shared by the workers. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "sim/cbed/cbed.h"

#define MAX_CIFS 64

static double uniform(void *r) { return _tsr_rng_uniform(r); }

/* ---- CIF files, read once ---- */

static struct {
  char path[256];
  struct cbed_crystal c;
} cifs[MAX_CIFS];
static int ncifs;
static pthread_mutex_t cif_mutex = PTHREAD_MUTEX_INITIALIZER;

static tsr_status cif_crystal(const char *path, const struct cbed_crystal **out) {
  tsr_status st = TSR_OK;
  pthread_mutex_lock(&cif_mutex);
  int i = 0;
  while (i < ncifs && strcmp(cifs[i].path, path) != 0) i++;
  if (i == ncifs) {
    if (ncifs == MAX_CIFS) st = _tsr_error(TSR_ERR_ARG, "more than %d CIF files (%s)", MAX_CIFS, path);
    else if (strlen(path) >= sizeof cifs[i].path) st = _tsr_error(TSR_ERR_ARG, "CIF path too long: %s", path);
    else if ((st = _tsr_cbed_crystal_read_cif(path, &cifs[i].c)) == TSR_OK) snprintf(cifs[ncifs++].path, 256, "%s", path);
  }
  if (st == TSR_OK) *out = &cifs[i].c;
  pthread_mutex_unlock(&cif_mutex);
  return st;
}

/* The k-th path of a comma-separated list into out; the number of paths when k < 0. */
static int list_item(const char *list, int k, char *out, size_t len) {
  int count = 0;
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n > 0) {
      if (count == k) snprintf(out, len, "%.*s", (int)n, p);
      count++;
    }
    p += n + (e ? 1 : 0);
  }
  return count;
}

/* ---- draws ---- */

static int pick_bit(unsigned mask, int k) {
  for (int b = 0; b < 32; b++)
    if (mask >> b & 1 && k-- == 0) return b;
  return 0;
}

static const int mask_zones[3][3] = {{0, 0, 1}, {1, 1, 0}, {1, 1, 1}};

/* A zone [uvw] with |u|, |v|, |w| <= n, not all zero, no common factor. */
static void random_zone(int n, struct _tsr_rng *r, int uvw[3]) {
  for (int tries = 0; tries < 100; tries++) {
    int g = 0;
    for (int k = 0; k < 3; k++) {
      uvw[k] = -n + (int)(uniform(r) * (2 * n + 1));
      if (uvw[k] > n) uvw[k] = n;
      int a = abs(uvw[k]);
      while (a) { int t = g % a; g = a, a = t; }
    }
    if (g == 1) return;
  }
  uvw[0] = uvw[1] = 0, uvw[2] = 1;
}

/* The zone's cell; when the crystal has no orthogonal cell along it, the zones of the mask, then
 * the low-index ones, in a fixed order (the record says which was used). */
static int zone_cell(const struct cbed_crystal *c, const int want[3], double rot, double lmax, struct cbed_zone *z) {
  if (_tsr_cbed_zone_cell(c, want, rot, lmax, z) == 0) return 0;
  for (int n = 1; n <= 2; n++)
    for (int u = 0; u <= n; u++)
      for (int v = -n; v <= n; v++)
        for (int w = -n; w <= n; w++) {
          const int uvw[3] = {u, v, w};
          if ((u || v || w) && _tsr_cbed_zone_cell(c, uvw, rot, lmax, z) == 0) return 0;
        }
  return -1;
}

static void record(const tsr_cbed_opts *o, const struct cbed_crystal *c, const struct cbed_zone *z,
                   const struct cbed_atoms *a, int periods, double sx, double sy, struct cbed_meta *m) {
  /* the optics, sampling and target fields are _tsr_cbed_simulate's (cbed_scan.c) */
  *m = (struct cbed_meta){.periods = periods, .atoms = a->n, .supercell = {a->lx, a->ly, a->lz},
                          .thickness_A = periods * a->lz, .tilt_mrad = {a->tilt[0] * 1e3, a->tilt[1] * 1e3}};
  if (!c) {
    snprintf(m->structure, sizeof m->structure, "random atoms");
    snprintf(m->source, sizeof m->source, "generated");
    return;
  }
  snprintf(m->structure, sizeof m->structure, "%s", c->name);
  snprintf(m->source, sizeof m->source, "%s", c->source);
  _tsr_cbed_crystal_formula(c, m->formula, sizeof m->formula);
  m->spacegroup = c->spacegroup;
  memcpy(m->cell, c->cell, sizeof m->cell);
  memcpy(m->zone, z->uvw, sizeof m->zone);
  memcpy(m->edge_x, z->x, sizeof m->edge_x);
  memcpy(m->edge_y, z->y, sizeof m->edge_y);
  m->tiles[0] = (int)lround(a->lx / z->len[0]), m->tiles[1] = (int)lround(a->ly / z->len[1]);
  m->strain = z->strain, m->rotation_deg = z->rotation_deg;
  m->origin_A[0] = sx * z->len[0], m->origin_A[1] = sy * z->len[1];
}

/* Random crystals drawn for one sample before giving up: the first from the sample's stream, the
 * others from redraw streams (redraw_stream). */
#define CRYSTAL_DRAWS 64
#define SALT_REDRAW 0x510E527FADE682D1ull

/* Redraw k >= 1 of sample `index`'s random crystal: a stream of (seed, index, k) only, so the
 * redrawn crystal does not depend on the workers or on other samples. */
static struct _tsr_rng redraw_stream(const tsr_cbed_opts *o, int64_t index, int k) {
  struct _tsr_rng r = _tsr_rng_stream(o->seed, (uint64_t)index + SALT_REDRAW);
  r.key = _tsr_mix64(r.key ^ (uint64_t)k);
  return r;
}

/* A random crystal (s = TSR_CBED_CRYSTAL) or prototype crystal (TSR_CBED_PROTOTYPE) from stream r. */
static int draw_crystal(tsr_cbed_structure s, struct cbed_crystal *c, const tsr_cbed_opts *o, struct _tsr_rng *r) {
  return s == TSR_CBED_PROTOTYPE ? _tsr_cbed_crystal_prototype(c, o, uniform, r) : _tsr_cbed_crystal_random(c, o, uniform, r);
}

/* c's box along uvw tiled to about fov into a (built afresh); 0, or -1 when c has no orthogonal cell
 * along uvw or a low-index zone within the size limit (*lmax) or the box could not be built. */
static int specimen_box(const tsr_cbed_opts *o, const struct cbed_crystal *c, int uvw[3], double rot, double sx,
                        double sy, struct cbed_zone *z, struct cbed_atoms *a, double *lmax) {
  *lmax = fmax(o->fov, 2.5 * fmax(c->cell[0], fmax(c->cell[1], c->cell[2])));
  int rc = zone_cell(c, uvw, rot, *lmax, z);
  return rc == 0 ? _tsr_cbed_build_supercell(a, c, z, o->fov, sx, sy) : rc;
}

tsr_status _tsr_cbed_specimen(const tsr_cbed_opts *o, int64_t index, struct _tsr_rng *r, struct cbed_atoms *a,
                              int *periods, struct cbed_meta *m) {
  *a = (struct cbed_atoms){0};
  int nbuiltin = __builtin_popcount(o->structures), ncif = list_item(o->cif, -1, NULL, 0);
  int pick = (int)(uniform(r) * (nbuiltin + ncif));
  pick = pick < nbuiltin + ncif ? pick : nbuiltin + ncif - 1;
  int zone_bit = pick_bit(o->zones, (int)(uniform(r) * __builtin_popcount(o->zones)));
  double thick = o->thickness_min + uniform(r) * (o->thickness_max - o->thickness_min);
  double sx = o->shift ? uniform(r) : 0, sy = o->shift ? uniform(r) : 0;
  tsr_cbed_structure s = pick < nbuiltin ? (tsr_cbed_structure)pick_bit(o->structures, pick) : TSR_CBED_NSTRUCT;
  *periods = 1;
  if (s == TSR_CBED_RANDOM) {
    int count = o->random_atoms_min + (int)(uniform(r) * (o->random_atoms_max - o->random_atoms_min + 1));
    if (_tsr_cbed_build_random(a, count, o->fov, thick, 1.5, uniform, r) != 0)
      return _tsr_error(TSR_ERR_NOMEM, "out of memory for its atoms");
    if (m) record(o, NULL, NULL, a, 1, 0, 0, m);
    return TSR_OK;
  }
  struct cbed_crystal own = {0};
  const struct cbed_crystal *c = &own;
  char path[1024];
  tsr_status st = TSR_OK;
  int drawn = 0; /* random crystals only: 0 drawn, -1 out of memory, -2 no motif in the constraints */
  if (s == TSR_CBED_NSTRUCT) {
    list_item(o->cif, pick - nbuiltin, path, sizeof path);
    st = cif_crystal(path, &c);
  } else if (s == TSR_CBED_CRYSTAL || s == TSR_CBED_PROTOTYPE) {
    drawn = draw_crystal(s, &own, o, r);
  } else if (_tsr_cbed_crystal_builtin(s, &own) != 0) {
    st = _tsr_error(TSR_ERR_NOMEM, "out of memory for its atoms");
  }
  if (drawn == -1) st = _tsr_error(TSR_ERR_NOMEM, "out of memory for its atoms");
  if (st != TSR_OK) {
    _tsr_cbed_crystal_free(&own);
    return st;
  }
  int uvw[3];
  memcpy(uvw, mask_zones[zone_bit < 3 ? zone_bit : 0], sizeof uvw);
  if (o->zone_index > 0) random_zone(o->zone_index, r, uvw);
  double rot = o->rotation_deg > 0 ? uniform(r) * o->rotation_deg : 0, tilt[2] = {0, 0};
  if (o->tilt_mrad > 0) {
    double t = uniform(r) * o->tilt_mrad * 1e-3, phi = 2 * M_PI * uniform(r);
    tilt[0] = t * cos(phi), tilt[1] = t * sin(phi);
  }
  /* A random or prototype crystal without a usable box along the zone, or without a motif that keeps the minimum
   * distance, is drawn again (the zone, thickness, origin, rotation and tilt stay): the sample is
   * the first usable one of its draws, `redraws` says how many came before it. */
  struct cbed_zone z;
  double lmax = 0, lmax_lo = INFINITY, lmax_hi = 0;
  int redraws = 0, no_box = 0, no_motif = 0, rc;
  for (;;) {
    rc = drawn == 0 ? specimen_box(o, c, uvw, rot, sx, sy, &z, a, &lmax) : -1;
    if (rc == 0) break;
    if (drawn == 0) no_box++, lmax_lo = fmin(lmax_lo, lmax), lmax_hi = fmax(lmax_hi, lmax);
    else no_motif++;
    _tsr_cbed_atoms_free(a);
    if (s != TSR_CBED_CRYSTAL && s != TSR_CBED_PROTOTYPE) {
      _tsr_cbed_crystal_free(&own);
      return _tsr_error(TSR_ERR_ARG, "%s (%s) has no orthogonal cell along [%d %d %d] or a "
                        "low-index zone within %g A", c->name, c->source, uvw[0], uvw[1], uvw[2],
                        lmax);
    }
    _tsr_cbed_crystal_free(&own);
    if (++redraws == CRYSTAL_DRAWS) {
      char box[320] = "", motif[448] = "";
      if (no_box)
        snprintf(box, sizeof box, "; %d had no orthogonal cell along [%d %d %d] or a low-index zone with edges up to "
                 "max(--fov %g, 2.5 x the longest cell edge) = %.3g..%.3g A (raise --fov above that)", no_box, uvw[0],
                 uvw[1], uvw[2], o->fov, lmax_lo, lmax_hi);
      if (no_motif && s == TSR_CBED_PROTOTYPE)
        snprintf(motif, sizeof motif, "; %d prototype draws had atoms closer than --min-distance %g A or an "
                 "excluded composition (--exclude-formulas '%s')", no_motif, o->min_distance, o->exclude);
      else if (no_motif)
        snprintf(motif, sizeof motif, "; %d found no motif of up to --sites %d atoms %g A apart (--min-distance) at "
                 "--density %g:%g atoms/A^3 (lower the distance or the density)", no_motif, o->sites, o->min_distance,
                 o->density_min, o->density_max);
      return _tsr_error(TSR_ERR_ARG, "none of %d random crystals could be simulated along [%d %d %d]%s%s",
                        CRYSTAL_DRAWS, uvw[0], uvw[1], uvw[2], box, motif);
    }
    struct _tsr_rng rr = redraw_stream(o, index, redraws);
    drawn = draw_crystal(s, &own, o, &rr);
    if (drawn == -1) return _tsr_error(TSR_ERR_NOMEM, "out of memory for its atoms");
  }
  a->tilt[0] = tilt[0], a->tilt[1] = tilt[1];
  *periods = (int)lround(thick / a->lz);
  *periods = *periods < 1 ? 1 : *periods;
  if (m) {
    record(o, c, &z, a, *periods, sx, sy, m);
    m->crystal_redraws = redraws;
  }
  _tsr_cbed_crystal_free(&own);
  return TSR_OK;
}

/* Random specimens. Random crystals: a lattice system (cubic, tetragonal, orthorhombic, hexagonal,
 * monoclinic) with a centring it allows, 1-3 elements anywhere in the Kirkland table's Z range, a
 * motif placed by random sequential addition so that no two atoms of the periodic crystal come
 * closer than a minimum distance, and a cell scaled to a number density drawn from a plausible
 * range. Random atoms: the non-crystalline mode, atoms anywhere in the box. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sim/cbed/cbed.h"

enum { CUBIC, TETRAGONAL, ORTHORHOMBIC, HEXAGONAL, MONOCLINIC, NSYSTEMS };

/* centring translations (the first is the identity) */
static const double centrings[4][4][3] = {
    {{0, 0, 0}},                                               /* P */
    {{0, 0, 0}, {.5, .5, .5}},                                 /* I */
    {{0, 0, 0}, {0, .5, .5}, {.5, 0, .5}, {.5, .5, 0}},        /* F */
    {{0, 0, 0}, {.5, .5, 0}}};                                 /* C */
static const int ncentring[4] = {1, 2, 4, 2};
/* the centrings each system allows, as a bit mask of P, I, F, C */
static const unsigned allowed[NSYSTEMS] = {[CUBIC] = 7, [TETRAGONAL] = 3, [ORTHORHOMBIC] = 15, [HEXAGONAL] = 1,
                                           [MONOCLINIC] = 9};

static int draw_int(double u, int lo, int hi) {
  int k = lo + (int)(u * (hi - lo + 1));
  return k > hi ? hi : k;
}

/* Cell lengths and angles of the system, a fixed by the volume. */
static void draw_cell(int sys, double volume, double (*uniform)(void *), void *rng, double cell[6]) {
  double rb = 1, rc = 1, alpha = 90, beta = 90, gamma = 90;
  if (sys == TETRAGONAL || sys == HEXAGONAL) rc = 0.6 + 1.0 * uniform(rng);
  if (sys == ORTHORHOMBIC || sys == MONOCLINIC) rb = 0.75 + 0.65 * uniform(rng), rc = 0.75 + 0.65 * uniform(rng);
  if (sys == HEXAGONAL) gamma = 120;
  if (sys == MONOCLINIC) beta = 95 + 25 * uniform(rng);
  double sb = sin(beta * M_PI / 180), sg = sin(gamma * M_PI / 180); /* V = a b c sin(beta) sin(gamma) here */
  double a = cbrt(volume / (rb * rc * sb * sg));
  cell[0] = a, cell[1] = rb * a, cell[2] = rc * a, cell[3] = alpha, cell[4] = beta, cell[5] = gamma;
}

/* Places the motif: atom 0 at the origin, the others at random until each (with its centring copies)
 * keeps dmin from all before it; 0, 1 when an atom found no place in its tries, -1 out of memory. */
static int place(struct cbed_crystal *c, const int *zs, int motif, int cen, double dmin, double (*uniform)(void *),
                 void *rng) {
  for (int k = 0; k < motif; k++) {
    int ok = 0;
    for (int tries = 0; tries < 400 && !ok; tries++) {
      double f[3] = {0, 0, 0};
      if (k > 0) f[0] = uniform(rng), f[1] = uniform(rng), f[2] = uniform(rng);
      ok = 1;
      for (int t = 0; t < ncentring[cen] && ok; t++) {
        const double g[3] = {f[0] + centrings[cen][t][0], f[1] + centrings[cen][t][1], f[2] + centrings[cen][t][2]};
        for (int m = 0; m < c->n && ok; m++) ok = _tsr_cbed_crystal_distance(c, c->frac[m], g) >= dmin;
        for (int u = 0; u < t && ok; u++) {
          const double h[3] = {f[0] + centrings[cen][u][0], f[1] + centrings[cen][u][1], f[2] + centrings[cen][u][2]};
          ok = _tsr_cbed_crystal_distance(c, h, g) >= dmin;
        }
      }
      for (int t = 0; t < ncentring[cen] && ok; t++) {
        const double g[3] = {f[0] + centrings[cen][t][0], f[1] + centrings[cen][t][1], f[2] + centrings[cen][t][2]};
        if (_tsr_cbed_crystal_add(c, zs[k], g, 1e-6) < 0) return -1;
      }
    }
    if (!ok) return 1;
  }
  return 0;
}

int _tsr_cbed_crystal_random(struct cbed_crystal *c, const tsr_cbed_opts *o, double (*uniform)(void *), void *rng) {
  for (int attempt = 0; attempt < 50; attempt++) {
    *c = (struct cbed_crystal){0};
    snprintf(c->name, sizeof c->name, "random");
    snprintf(c->source, sizeof c->source, "generated");
    int sys = draw_int(uniform(rng), 0, NSYSTEMS - 1), cen = 0;
    unsigned ok_cen = 0; /* the centrings the system allows that fit in o->sites atoms (P always) */
    for (int k = 0; k < 4; k++)
      if (allowed[sys] >> k & 1 && ncentring[k] <= o->sites) ok_cen |= 1u << k;
    for (int k = draw_int(uniform(rng), 1, __builtin_popcount(ok_cen)); k > 0; cen++) k -= ok_cen >> cen & 1;
    cen--; /* the k-th of them */
    int nspecies = draw_int(uniform(rng), 1, 3), species[3];
    for (int s = 0; s < nspecies; s++) {
      int z = o->zmin, dup;
      for (int tries = 0; tries < 100; tries++) { /* distinct when the range allows */
        z = draw_int(uniform(rng), o->zmin, o->zmax), dup = 0;
        for (int t = 0; t < s; t++) dup |= species[t] == z;
        if (!dup || o->zmax - o->zmin + 1 <= s) break;
      }
      species[s] = z;
    }
    int motif = draw_int(uniform(rng), 1, o->sites / ncentring[cen]), zs[256];
    if (motif > 256) motif = 256;
    if (nspecies > motif) nspecies = motif;
    for (int k = 0; k < motif; k++) zs[k] = k < nspecies ? species[k] : species[draw_int(uniform(rng), 0, nspecies - 1)];
    double density = o->density_min + uniform(rng) * (o->density_max - o->density_min), cell[6];
    draw_cell(sys, motif * ncentring[cen] / density, uniform, rng, cell);
    if (_tsr_cbed_crystal_set_cell(c, cell) != 0) continue;
    int rc = place(c, zs, motif, cen, o->min_distance, uniform, rng);
    if (rc < 0) {
      _tsr_cbed_crystal_free(c);
      return -1;
    }
    /* atoms never closer than dmin to their own images either */
    int ok = rc == 0 && c->n == motif * ncentring[cen];
    for (int k = 0; k < 3 && ok; k++) ok = cell[k] >= o->min_distance;
    if (ok) {
      _tsr_cbed_crystal_find_spacegroup(c);
      return 0;
    }
    _tsr_cbed_crystal_free(c);
  }
  return -2;
}

int _tsr_cbed_build_random(struct cbed_atoms *a, int count, double fov, double thickness, double dmin,
                           double (*uniform)(void *), void *rng) {
  static const int elements[] = {8, 14, 22, 29, 38};
  *a = (struct cbed_atoms){.lx = fov, .ly = fov, .lz = thickness};
  int placed = 0;
  for (int tries = 0; placed < count && tries < 100 * count; tries++) {
    double x = uniform(rng) * fov, y = uniform(rng) * fov, z = uniform(rng) * thickness;
    int zn = elements[(int)(uniform(rng) * 5) % 5], ok = 1;
    for (int m = 0; m < a->n && ok; m++) {
      double dx = fabs(a->x[m] - x), dy = fabs(a->y[m] - y), dz = a->z[m] - z;
      dx = fmin(dx, fov - dx), dy = fmin(dy, fov - dy);
      ok = dx * dx + dy * dy + dz * dz >= dmin * dmin;
    }
    if (!ok) continue;
    if (_tsr_cbed_atoms_push(a, zn, x, y, z) != 0) return -1;
    placed++;
  }
  return 0;
}

/* Specimens for the CBED simulator: cubic crystals (diamond Si, perovskite SrTiO3, fcc Cu) rotated
 * so that a zone axis ([001], [110], [111]) lies along the beam, in an orthogonal cell whose edges are
 * lattice vectors (so the supercell is periodic in x, y and z), tiled to the field of view; and
 * random atoms for the non-crystalline mode. */
#include <math.h>
#include <stdlib.h>

#include "sim/cbed/cbed.h"

struct site {
  int zn;
  double f[3]; /* fractional position in the conventional cubic cell */
};

static const struct site si_sites[] = {
    {14, {0, 0, 0}},       {14, {0, .5, .5}},       {14, {.5, 0, .5}},       {14, {.5, .5, 0}},
    {14, {.25, .25, .25}}, {14, {.25, .75, .75}},   {14, {.75, .25, .75}},   {14, {.75, .75, .25}}};
static const struct site sto_sites[] = {
    {38, {0, 0, 0}}, {22, {.5, .5, .5}}, {8, {.5, .5, 0}}, {8, {.5, 0, .5}}, {8, {0, .5, .5}}};
static const struct site cu_sites[] = {{29, {0, 0, 0}}, {29, {0, .5, .5}}, {29, {.5, 0, .5}}, {29, {.5, .5, 0}}};

static const struct {
  double a;
  const struct site *sites;
  int nsites;
} crystals[] = {
    [TSR_CBED_SI] = {5.431, si_sites, 8},
    [TSR_CBED_SRTIO3] = {3.905, sto_sites, 5},
    [TSR_CBED_CU] = {3.615, cu_sites, 4},
};

void _tsr_cbed_atoms_free(struct cbed_atoms *a) {
  free(a->x);
  free(a->y);
  free(a->z);
  free(a->zn);
  *a = (struct cbed_atoms){0};
}

static int push(struct cbed_atoms *a, int zn, double x, double y, double z) {
  if (a->n == a->cap) {
    int cap = a->cap ? 2 * a->cap : 64;
    double *nx = realloc(a->x, cap * sizeof *nx);
    if (nx) a->x = nx;
    double *ny = realloc(a->y, cap * sizeof *ny);
    if (ny) a->y = ny;
    double *nz = realloc(a->z, cap * sizeof *nz);
    if (nz) a->z = nz;
    int *nzn = realloc(a->zn, cap * sizeof *nzn);
    if (nzn) a->zn = nzn;
    if (!nx || !ny || !nz || !nzn) return -1;
    a->cap = cap;
  }
  a->x[a->n] = x, a->y[a->n] = y, a->z[a->n] = z, a->zn[a->n] = zn;
  a->n++;
  return 0;
}

/* Edges of the orthogonal cell, as integer lattice directions of the cubic cell: x, y, z (beam). */
static void zone_axes(int zone, int u[3][3]) {
  static const int z001[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
  static const int z110[3][3] = {{1, -1, 0}, {0, 0, 1}, {1, 1, 0}};
  static const int z111[3][3] = {{1, -1, 0}, {1, 1, -2}, {1, 1, 1}};
  const int(*src)[3] = zone == 2 ? z110 : zone == 4 ? z111 : z001;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) u[i][j] = src[i][j];
}

/* Whole orthogonal cells: every lattice point within a box that covers the cell is rotated into it
 * and kept when it falls inside [0, L) on each axis (a small tolerance puts boundary atoms on one side). */
static int unit_cell(struct cbed_atoms *a, tsr_cbed_structure s, int zone, double len[3]) {
  int u[3][3];
  zone_axes(zone, u);
  double e[3][3]; /* unit vectors */
  int reach = 0;
  for (int i = 0; i < 3; i++) {
    double l2 = 0;
    for (int j = 0; j < 3; j++) l2 += (double)u[i][j] * u[i][j], reach += abs(u[i][j]);
    len[i] = sqrt(l2) * crystals[s].a;
    for (int j = 0; j < 3; j++) e[i][j] = u[i][j] / sqrt(l2);
  }
  const double eps = 1e-7;
  for (int n0 = -reach; n0 <= reach; n0++)
    for (int n1 = -reach; n1 <= reach; n1++)
      for (int n2 = -reach; n2 <= reach; n2++)
        for (int k = 0; k < crystals[s].nsites; k++) {
          const struct site *st = &crystals[s].sites[k];
          double c[3] = {(st->f[0] + n0) * crystals[s].a, (st->f[1] + n1) * crystals[s].a,
                         (st->f[2] + n2) * crystals[s].a};
          double p[3];
          int inside = 1;
          for (int i = 0; i < 3; i++) {
            p[i] = e[i][0] * c[0] + e[i][1] * c[1] + e[i][2] * c[2];
            if (p[i] < -eps * len[i] || p[i] >= len[i] * (1 - eps)) inside = 0;
            if (p[i] < 0) p[i] = 0;
          }
          if (inside && push(a, st->zn, p[0], p[1], p[2]) != 0) return -1;
        }
  return 0;
}

int _tsr_cbed_build_crystal(struct cbed_atoms *a, tsr_cbed_structure s, int zone, double fov, double sx,
                            double sy) {
  *a = (struct cbed_atoms){0};
  if (s < 0 || s >= TSR_CBED_RANDOM) return -1;
  struct cbed_atoms cell = {0};
  double len[3];
  if (unit_cell(&cell, s, zone, len) != 0) {
    _tsr_cbed_atoms_free(&cell);
    return -1;
  }
  int tx = (int)lround(fov / len[0]), ty = (int)lround(fov / len[1]);
  tx = tx < 1 ? 1 : tx, ty = ty < 1 ? 1 : ty;
  a->lx = tx * len[0], a->ly = ty * len[1], a->lz = len[2];
  int rc = 0;
  for (int i = 0; i < tx && rc == 0; i++)
    for (int j = 0; j < ty && rc == 0; j++)
      for (int k = 0; k < cell.n && rc == 0; k++) {
        double x = fmod(cell.x[k] + (i + sx) * len[0], a->lx), y = fmod(cell.y[k] + (j + sy) * len[1], a->ly);
        rc = push(a, cell.zn[k], x, y, cell.z[k]);
      }
  _tsr_cbed_atoms_free(&cell);
  return rc;
}

int _tsr_cbed_build_random(struct cbed_atoms *a, int count, double fov, double thickness, double dmin,
                           double (*uniform)(void *), void *rng) {
  static const int elements[] = {8, 14, 22, 29, 38};
  *a = (struct cbed_atoms){0};
  a->lx = a->ly = fov, a->lz = thickness;
  for (int k = 0, tries = 0; k < count && tries < 100 * count; tries++) {
    double x = uniform(rng) * fov, y = uniform(rng) * fov, z = uniform(rng) * thickness;
    int zn = elements[(int)(uniform(rng) * 5) % 5], ok = 1;
    for (int m = 0; m < a->n && ok; m++) {
      double dx = fabs(a->x[m] - x), dy = fabs(a->y[m] - y), dz = a->z[m] - z;
      dx = fmin(dx, fov - dx), dy = fmin(dy, fov - dy);
      ok = dx * dx + dy * dy + dz * dz >= dmin * dmin;
    }
    if (!ok) continue;
    if (push(a, zn, x, y, z) != 0) return -1;
    k++;
  }
  return 0;
}

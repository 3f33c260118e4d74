/* Crystals and the specimens built from them: a crystal is a cell and the atoms of one unit cell
 * (built-in, read from a CIF file or generated); a specimen is that crystal seen along a zone axis
 * [uvw], in an orthogonal box whose edges are lattice vectors (so the box is periodic in x, y and
 * z; the edges normal to the beam are found by search, a small shear making them exactly
 * orthogonal where the lattice has no exact rectangle), rotated in plane by the choice of edge and
 * tiled to the field of view. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spglib.h>

#include "sim/cbed/cbed.h"

#define DEG (M_PI / 180)
/* the largest |cos| of an angle error the box's edges may have (2%: a shear of at most 1.15 degrees) */
#define MAX_STRAIN 0.02

/* ---- crystals ---- */

void _tsr_cbed_crystal_free(struct cbed_crystal *c) {
  free(c->zn);
  free(c->frac);
  *c = (struct cbed_crystal){0};
}

/* exact for the angles of the common lattices, so that their orthogonal cells have no rounding strain */
static double cosd(double d) { return d == 90 ? 0 : d == 120 ? -0.5 : d == 60 ? 0.5 : cos(d * DEG); }

int _tsr_cbed_crystal_set_cell(struct cbed_crystal *c, const double cell[6]) {
  double ca = cosd(cell[3]), cb = cosd(cell[4]), cg = cosd(cell[5]), sg = sqrt(1 - cg * cg);
  if (!(cell[0] > 0 && cell[1] > 0 && cell[2] > 0 && sg > 1e-6)) return -1;
  double cy = (ca - cb * cg) / sg, cz2 = 1 - cb * cb - cy * cy;
  if (!(cz2 > 1e-9)) return -1;
  memcpy(c->cell, cell, sizeof c->cell);
  const double lat[3][3] = {{cell[0], 0, 0}, {cell[1] * cg, cell[1] * sg, 0}, {cell[2] * cb, cell[2] * cy, cell[2] * sqrt(cz2)}};
  memcpy(c->lat, lat, sizeof lat);
  return 0;
}

static void to_cart(const double lat[3][3], const double f[3], double out[3]) {
  for (int j = 0; j < 3; j++) out[j] = f[0] * lat[0][j] + f[1] * lat[1][j] + f[2] * lat[2][j];
}

double _tsr_cbed_crystal_distance(const struct cbed_crystal *c, const double f[3], const double g[3]) {
  double d[3], best = INFINITY;
  for (int k = 0; k < 3; k++) d[k] = f[k] - g[k] - floor(f[k] - g[k] + 0.5);
  for (int i = -1; i <= 1; i++)
    for (int j = -1; j <= 1; j++)
      for (int k = -1; k <= 1; k++) {
        double e[3] = {d[0] + i, d[1] + j, d[2] + k}, r[3];
        to_cart(c->lat, e, r);
        best = fmin(best, sqrt(r[0] * r[0] + r[1] * r[1] + r[2] * r[2]));
      }
  return best;
}

int _tsr_cbed_crystal_add(struct cbed_crystal *c, int zn, const double f[3], double tol) {
  double w[3];
  for (int k = 0; k < 3; k++) {
    w[k] = f[k] - floor(f[k]);
    if (w[k] >= 1) w[k] = 0;
  }
  for (int m = 0; m < c->n; m++)
    if (_tsr_cbed_crystal_distance(c, c->frac[m], w) < tol) return 1;
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 16;
    int *zn2 = realloc(c->zn, sizeof *zn2 * cap);
    if (zn2) c->zn = zn2;
    double(*f2)[3] = realloc(c->frac, sizeof *f2 * cap);
    if (f2) c->frac = f2;
    if (!zn2 || !f2) return -1;
    c->cap = cap;
  }
  c->zn[c->n] = zn;
  memcpy(c->frac[c->n++], w, sizeof w);
  return 0;
}

static int gcd(int a, int b) { return b ? gcd(b, a % b) : abs(a); }

void _tsr_cbed_crystal_formula(const struct cbed_crystal *c, char *out, size_t len) {
  int order[TSR_CBED_ZMAX + 1], count[TSR_CBED_ZMAX + 1] = {0}, ne = 0, g = 0;
  for (int k = 0; k < c->n; k++)
    if (c->zn[k] >= 1 && c->zn[k] <= TSR_CBED_ZMAX && count[c->zn[k]]++ == 0) order[ne++] = c->zn[k];
  for (int e = 0; e < ne; e++) g = gcd(g, count[order[e]]);
  size_t at = 0;
  out[0] = 0;
  for (int e = 0; e < ne && at < len; e++) {
    int m = count[order[e]] / g;
    int w = m > 1 ? snprintf(out + at, len - at, "%s%d", _tsr_cbed_element_name(order[e]), m)
                  : snprintf(out + at, len - at, "%s", _tsr_cbed_element_name(order[e]));
    at += w > 0 ? (size_t)w : 0;
  }
}

void _tsr_cbed_crystal_find_spacegroup(struct cbed_crystal *c) {
  double lat[3][3]; /* spglib wants the lattice vectors as columns */
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) lat[i][j] = c->lat[j][i];
  SpglibDataset *d = c->n > 0 ? spg_get_dataset(lat, c->frac, c->zn, c->n, 1e-3) : NULL;
  c->spacegroup = d ? d->spacegroup_number : 0;
  if (d) spg_free_dataset(d);
}

/* conventional cubic cells */
struct site {
  int zn;
  double f[3];
};

static const struct site si_sites[] = {
    {14, {0, 0, 0}},       {14, {0, .5, .5}},       {14, {.5, 0, .5}},       {14, {.5, .5, 0}},
    {14, {.25, .25, .25}}, {14, {.25, .75, .75}},   {14, {.75, .25, .75}},   {14, {.75, .75, .25}}};
static const struct site sto_sites[] = {
    {38, {0, 0, 0}}, {22, {.5, .5, .5}}, {8, {.5, .5, 0}}, {8, {.5, 0, .5}}, {8, {0, .5, .5}}};
static const struct site cu_sites[] = {{29, {0, 0, 0}}, {29, {0, .5, .5}}, {29, {.5, 0, .5}}, {29, {.5, .5, 0}}};

static const struct {
  const char *name;
  double a;
  const struct site *sites;
  int nsites;
} builtins[] = {
    [TSR_CBED_SI] = {"Si", 5.431, si_sites, 8},
    [TSR_CBED_SRTIO3] = {"SrTiO3", 3.905, sto_sites, 5},
    [TSR_CBED_CU] = {"Cu", 3.615, cu_sites, 4},
};

int _tsr_cbed_crystal_builtin(tsr_cbed_structure s, struct cbed_crystal *c) {
  *c = (struct cbed_crystal){0};
  if (s < 0 || s > TSR_CBED_CU) return -1;
  double a = builtins[s].a, cell[6] = {a, a, a, 90, 90, 90};
  snprintf(c->name, sizeof c->name, "%s", builtins[s].name);
  snprintf(c->source, sizeof c->source, "built-in");
  _tsr_cbed_crystal_set_cell(c, cell);
  for (int k = 0; k < builtins[s].nsites; k++)
    if (_tsr_cbed_crystal_add(c, builtins[s].sites[k].zn, builtins[s].sites[k].f, 0.01) < 0) return -1;
  _tsr_cbed_crystal_find_spacegroup(c);
  return 0;
}

/* ---- zone axes ---- */

struct cand {
  int n[3];
  double v[3], len, phi;
};

static double dot(const double a[3], const double b[3]) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

static void lattice_vector(const struct cbed_crystal *c, const int n[3], double v[3]) {
  const double f[3] = {n[0], n[1], n[2]};
  to_cart(c->lat, f, v);
}

/* shorter first; equal lengths: the larger index triple (so [100] before [-100]) */
static int shorter(const struct cand *a, const struct cand *b) {
  if (fabs(a->len - b->len) > 1e-6) return a->len < b->len;
  for (int k = 0; k < 3; k++)
    if (a->n[k] != b->n[k]) return a->n[k] > b->n[k];
  return 0;
}

static double wrap180(double d) { return d - 360 * floor((d + 180) / 360); }

int _tsr_cbed_zone_cell(const struct cbed_crystal *c, const int uvw[3], double rotation_deg, double lmax,
                        struct cbed_zone *z) {
  double t[3];
  lattice_vector(c, uvw, t);
  double lt = sqrt(dot(t, t)), shortest = fmin(c->cell[0], fmin(c->cell[1], c->cell[2]));
  if (!(lt > 0)) return -1;
  int reach = (int)ceil(lmax / shortest);
  reach = reach < 1 ? 1 : reach > 10 ? 10 : reach;
  int side = 2 * reach + 1, m = 0;
  struct cand *cs = malloc(sizeof *cs * side * side * side);
  if (!cs) return -1;
  for (int i = -reach; i <= reach; i++)
    for (int j = -reach; j <= reach; j++)
      for (int k = -reach; k <= reach; k++) {
        struct cand q = {.n = {i, j, k}};
        lattice_vector(c, q.n, q.v);
        q.len = sqrt(dot(q.v, q.v));
        if (q.len > 0 && q.len <= lmax && fabs(dot(q.v, t)) <= MAX_STRAIN * q.len * lt) cs[m++] = q;
      }
  int ref = -1;
  for (int i = 0; i < m; i++)
    if (ref < 0 || shorter(&cs[i], &cs[ref])) ref = i;
  int found = 0;
  if (ref >= 0) {
    double ez[3] = {t[0] / lt, t[1] / lt, t[2] / lt}, e0[3], e1[3], p = dot(cs[ref].v, ez);
    for (int k = 0; k < 3; k++) e0[k] = cs[ref].v[k] - p * ez[k];
    double l0 = sqrt(dot(e0, e0));
    for (int k = 0; k < 3; k++) e0[k] /= l0;
    e1[0] = ez[1] * e0[2] - ez[2] * e0[1], e1[1] = ez[2] * e0[0] - ez[0] * e0[2], e1[2] = ez[0] * e0[1] - ez[1] * e0[0];
    for (int i = 0; i < m; i++) cs[i].phi = atan2(dot(cs[i].v, e1), dot(cs[i].v, e0)) / DEG;
    /* x: the candidates in order of angle from the rotation wanted (then length), until one has a y */
    for (int tries = 0; tries < m && !found; tries++) {
      int xi = -1;
      for (int i = 0; i < m; i++) {
        if (cs[i].len < 0) continue;
        double ei = fabs(wrap180(cs[i].phi - rotation_deg)), ex = xi < 0 ? 0 : fabs(wrap180(cs[xi].phi - rotation_deg));
        if (xi < 0 || ei < ex - 1e-9 || (ei < ex + 1e-9 && shorter(&cs[i], &cs[xi]))) xi = i;
      }
      if (xi < 0) break;
      int yi = -1;
      for (int i = 0; i < m; i++) {
        if (cs[i].len < 0 || i == xi) continue;
        double cr[3] = {cs[xi].v[1] * cs[i].v[2] - cs[xi].v[2] * cs[i].v[1],
                        cs[xi].v[2] * cs[i].v[0] - cs[xi].v[0] * cs[i].v[2],
                        cs[xi].v[0] * cs[i].v[1] - cs[xi].v[1] * cs[i].v[0]};
        if (fabs(dot(cs[xi].v, cs[i].v)) <= MAX_STRAIN * cs[xi].len * cs[i].len && dot(cr, t) > 0 &&
            (yi < 0 || shorter(&cs[i], &cs[yi])))
          yi = i;
      }
      if (yi < 0) {
        cs[xi].len = -1; /* no partner: never again */
        continue;
      }
      *z = (struct cbed_zone){.rotation_deg = wrap180(cs[xi].phi), .len = {cs[xi].len, cs[yi].len, lt}};
      memcpy(z->uvw, uvw, sizeof z->uvw);
      memcpy(z->x, cs[xi].n, sizeof z->x);
      memcpy(z->y, cs[yi].n, sizeof z->y);
      z->strain = fmax(fabs(dot(cs[xi].v, t)) / (cs[xi].len * lt),
                       fmax(fabs(dot(cs[yi].v, t)) / (cs[yi].len * lt), fabs(dot(cs[xi].v, cs[yi].v)) / (cs[xi].len * cs[yi].len)));
      found = 1;
    }
  }
  free(cs);
  return found ? 0 : -1;
}

/* ---- specimens ---- */

void _tsr_cbed_atoms_free(struct cbed_atoms *a) {
  free(a->x);
  free(a->y);
  free(a->z);
  free(a->zn);
  *a = (struct cbed_atoms){0};
}

int _tsr_cbed_atoms_push(struct cbed_atoms *a, int zn, double x, double y, double z) {
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

/* The atoms of one box: every lattice point of a range that covers it, plus each atom of the unit
 * cell, written in the box's fractional coordinates s = p M^-1 (rows of M: x, y, uvw) and kept when
 * inside [0, 1) on each axis (a small tolerance puts boundary atoms on one side). */
static int one_box(struct cbed_atoms *a, const struct cbed_crystal *c, const struct cbed_zone *z) {
  const int *rows[3] = {z->x, z->y, z->uvw};
  double m[3][3], inv[3][3];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) m[i][j] = rows[i][j];
  double det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
               m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  if (fabs(det) < 0.5) return -1;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      int i1 = (j + 1) % 3, i2 = (j + 2) % 3, j1 = (i + 1) % 3, j2 = (i + 2) % 3;
      inv[i][j] = (m[i1][j1] * m[i2][j2] - m[i1][j2] * m[i2][j1]) / det;
    }
  int lo[3], hi[3];
  for (int k = 0; k < 3; k++) {
    double mn = 0, mx = 0;
    for (int corner = 1; corner < 8; corner++) {
      double s = 0;
      for (int r = 0; r < 3; r++) s += (corner >> r & 1) * m[r][k];
      mn = fmin(mn, s), mx = fmax(mx, s);
    }
    lo[k] = (int)floor(mn) - 1, hi[k] = (int)ceil(mx) + 1;
  }
  const double eps = 1e-7;
  for (int n0 = lo[0]; n0 <= hi[0]; n0++)
    for (int n1 = lo[1]; n1 <= hi[1]; n1++)
      for (int n2 = lo[2]; n2 <= hi[2]; n2++)
        for (int k = 0; k < c->n; k++) {
          double p[3] = {n0 + c->frac[k][0], n1 + c->frac[k][1], n2 + c->frac[k][2]}, s[3];
          int inside = 1;
          for (int j = 0; j < 3; j++) {
            s[j] = p[0] * inv[0][j] + p[1] * inv[1][j] + p[2] * inv[2][j];
            if (s[j] < -eps || s[j] >= 1 - eps) inside = 0;
            if (s[j] < 0) s[j] = 0;
          }
          if (inside && _tsr_cbed_atoms_push(a, c->zn[k], s[0] * z->len[0], s[1] * z->len[1], s[2] * z->len[2]) != 0) return -1;
        }
  return a->n == (int)lround(fabs(det)) * c->n ? 0 : -1;
}

int _tsr_cbed_build_supercell(struct cbed_atoms *a, const struct cbed_crystal *c, const struct cbed_zone *z,
                              double fov, double sx, double sy) {
  *a = (struct cbed_atoms){0};
  struct cbed_atoms box = {0};
  if (one_box(&box, c, z) != 0) {
    _tsr_cbed_atoms_free(&box);
    return -1;
  }
  int tx = (int)lround(fov / z->len[0]), ty = (int)lround(fov / z->len[1]);
  tx = tx < 1 ? 1 : tx, ty = ty < 1 ? 1 : ty;
  a->lx = tx * z->len[0], a->ly = ty * z->len[1], a->lz = z->len[2];
  int rc = 0;
  for (int i = 0; i < tx && rc == 0; i++)
    for (int j = 0; j < ty && rc == 0; j++)
      for (int k = 0; k < box.n && rc == 0; k++) {
        double x = fmod(box.x[k] + (i + sx) * z->len[0], a->lx), y = fmod(box.y[k] + (j + sy) * z->len[1], a->ly);
        rc = _tsr_cbed_atoms_push(a, box.zn[k], x, y, box.z[k]);
      }
  _tsr_cbed_atoms_free(&box);
  return rc;
}

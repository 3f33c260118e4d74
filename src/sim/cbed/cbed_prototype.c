/* Prototype crystals: common structure types as data (space group, cell shape, one representative
 * position per Wyckoff site and the element type each site takes), expanded by the space group's
 * operations from spglib's database; and random crystals drawn from them: distinct random elements
 * per element type, the lattice constant from the elements' covalent radii (cbed_radii.c) and a
 * random scale, compositions the options exclude rejected. Type names are the Strukturbericht
 * designations with their archetype; the free parameters (c/a, x, z) are the archetype's or the
 * ideal values of the type. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <spglib.h>

#include "runtime/error.h"
#include "sim/cbed/cbed.h"

struct wyckoff {
  int type; /* element type: 0 = A, 1 = B, 2 = X */
  double f[3];
};

static const struct prototype {
  const char *name, *type; /* option name; Strukturbericht designation and archetype */
  int spacegroup;          /* international number; the database's first setting (origin choice 1 for
                              Fd-3m, hexagonal axes for R-3c) */
  int hexagonal;           /* 1: a = b, gamma = 120; else a = b (tetragonal when c_a != 1) */
  double c_a;              /* c / a */
  int ntypes, nsites, atoms; /* element types, Wyckoff sites, atoms per conventional cell */
  struct wyckoff site[3];
} protos[TSR_CBED_NPROTOTYPES] = {
    {"fcc", "A1 (Cu)", 225, 0, 1, 1, 1, 4, {{0, {0, 0, 0}}}},
    {"bcc", "A2 (W)", 229, 0, 1, 1, 1, 2, {{0, {0, 0, 0}}}},
    {"hcp", "A3 (Mg)", 194, 1, 1.633, 1, 1, 2, {{0, {1. / 3, 2. / 3, .25}}}},
    {"diamond", "A4 (C)", 227, 0, 1, 1, 1, 8, {{0, {0, 0, 0}}}},
    {"rocksalt", "B1 (NaCl)", 225, 0, 1, 2, 2, 8, {{0, {0, 0, 0}}, {1, {.5, .5, .5}}}},
    {"cscl", "B2 (CsCl)", 221, 0, 1, 2, 2, 2, {{0, {0, 0, 0}}, {1, {.5, .5, .5}}}},
    {"zincblende", "B3 (ZnS, sphalerite)", 216, 0, 1, 2, 2, 8, {{0, {0, 0, 0}}, {1, {.25, .25, .25}}}},
    {"wurtzite", "B4 (ZnS, wurtzite)", 186, 1, 1.633, 2, 2, 4, {{0, {1. / 3, 2. / 3, 0}}, {1, {1. / 3, 2. / 3, .375}}}},
    {"nias", "B8_1 (NiAs)", 194, 1, 1.39, 2, 2, 4, {{0, {0, 0, 0}}, {1, {1. / 3, 2. / 3, .25}}}},
    {"fluorite", "C1 (CaF2)", 225, 0, 1, 2, 2, 12, {{0, {0, 0, 0}}, {1, {.25, .25, .25}}}},
    {"rutile", "C4 (TiO2)", 136, 0, 0.644, 2, 2, 6, {{0, {0, 0, 0}}, {1, {.305, .305, 0}}}},
    {"corundum", "D5_1 (Al2O3)", 167, 1, 2.730, 2, 2, 30, {{0, {0, 0, .3523}}, {1, {.3064, 0, .25}}}},
    {"perovskite", "E2_1 (CaTiO3, cubic)", 221, 0, 1, 3, 3, 5, {{0, {0, 0, 0}}, {1, {.5, .5, .5}}, {2, {0, .5, .5}}}},
    {"l12", "L1_2 (Cu3Au)", 221, 0, 1, 2, 2, 4, {{0, {0, 0, 0}}, {1, {0, .5, .5}}}},
    {"spinel", "H1_1 (MgAl2O4)", 227, 0, 1, 3, 3, 56, {{0, {0, 0, 0}}, {1, {.625, .625, .625}}, {2, {.387, .387, .387}}}},
};

const char *_tsr_cbed_prototype_name(int p) { return p >= 0 && p < TSR_CBED_NPROTOTYPES ? protos[p].name : "?"; }
const char *_tsr_cbed_prototype_type(int p) { return p >= 0 && p < TSR_CBED_NPROTOTYPES ? protos[p].type : "?"; }
int _tsr_cbed_prototype_types(int p) { return p >= 0 && p < TSR_CBED_NPROTOTYPES ? protos[p].ntypes : 0; }
double _tsr_cbed_prototype_c_a(int p) { return p >= 0 && p < TSR_CBED_NPROTOTYPES ? protos[p].c_a : 0; }
int _tsr_cbed_prototype_atoms(int p) { return p >= 0 && p < TSR_CBED_NPROTOTYPES ? protos[p].atoms : 0; }

int _tsr_cbed_prototype_find(const char *name) {
  for (int p = 0; p < TSR_CBED_NPROTOTYPES; p++)
    if (strcmp(protos[p].name, name) == 0) return p;
  return -1;
}

tsr_status tsr_cbed_prototypes_parse(const char *list, unsigned *mask) {
  *mask = 0;
  for (const char *p = list; p && *p;) {
    size_t len = strcspn(p, ",");
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(len < 31 ? len : 31), p);
    int k = _tsr_cbed_prototype_find(name);
    if (!strcmp(name, "all")) *mask |= (1u << TSR_CBED_NPROTOTYPES) - 1;
    else if (k >= 0) *mask |= 1u << k;
    else if (len > 0)
      return _tsr_error(TSR_ERR_ARG, "unknown prototype '%s' (known: fcc, bcc, hcp, diamond, rocksalt, cscl, zincblende, "
                        "wurtzite, nias, fluorite, rutile, corundum, perovskite, l12, spinel, all)", name);
    p += len + (p[len] == ',');
  }
  if (!*mask) return _tsr_error(TSR_ERR_ARG, "the prototype list '%s' names no type", list ? list : "(null)");
  return TSR_OK;
}

/* The first Hall number of the space group (spglib's database order). */
static int hall_of(int spacegroup) {
  for (int h = 1; h <= 530; h++)
    if (spg_get_spacegroup_type(h).number == spacegroup) return h;
  return 0;
}

int _tsr_cbed_prototype_build(struct cbed_crystal *c, int p, const int *zs, double a, double c_a) {
  *c = (struct cbed_crystal){0};
  if (p < 0 || p >= TSR_CBED_NPROTOTYPES || !(a > 0) || !(c_a > 0)) return -2;
  const struct prototype *t = &protos[p];
  snprintf(c->name, sizeof c->name, "%s", t->name);
  snprintf(c->source, sizeof c->source, "prototype %s", t->type);
  const double cell[6] = {a, a, c_a * a, 90, 90, t->hexagonal ? 120 : 90};
  if (_tsr_cbed_crystal_set_cell(c, cell) != 0) return -2;
  int rot[192][3][3];
  double tr[192][3];
  int nops = spg_get_symmetry_from_database(rot, tr, hall_of(t->spacegroup));
  if (nops <= 0) return -2;
  for (int s = 0; s < t->nsites; s++)
    for (int k = 0; k < nops; k++) {
      double g[3];
      for (int i = 0; i < 3; i++)
        g[i] = rot[k][i][0] * t->site[s].f[0] + rot[k][i][1] * t->site[s].f[1] + rot[k][i][2] * t->site[s].f[2] + tr[k][i];
      if (_tsr_cbed_crystal_add(c, zs[t->site[s].type], g, 1e-3 * a) < 0) {
        _tsr_cbed_crystal_free(c);
        return -1;
      }
    }
  return 0;
}

/* The shortest distance between two atoms of c, periodic images of one atom included. */
double _tsr_cbed_crystal_min_distance(const struct cbed_crystal *c) {
  double best = INFINITY;
  for (int i = 0; i < c->n; i++)
    for (int j = i + 1; j < c->n; j++) best = fmin(best, _tsr_cbed_crystal_distance(c, c->frac[i], c->frac[j]));
  for (int i = -1; i <= 1; i++) /* an atom and its own images: the shortest lattice vector */
    for (int j = -1; j <= 1; j++)
      for (int k = -1; k <= 1; k++) {
        if (!i && !j && !k) continue;
        double r[3];
        for (int d = 0; d < 3; d++) r[d] = i * c->lat[0][d] + j * c->lat[1][d] + k * c->lat[2][d];
        best = fmin(best, sqrt(r[0] * r[0] + r[1] * r[1] + r[2] * r[2]));
      }
  return best;
}

/* The lattice constant at which the tightest contact of c (built with a = 1) equals the sum of the
 * two atoms' covalent radii: the hard-sphere size of the structure with these elements. */
static double contact_scale(const struct cbed_crystal *c) {
  double worst = INFINITY;
  for (int i = 0; i < c->n; i++)
    for (int j = i + 1; j < c->n; j++) {
      double d = _tsr_cbed_crystal_distance(c, c->frac[i], c->frac[j]);
      worst = fmin(worst, d / (_tsr_cbed_covalent_radius(c->zn[i]) + _tsr_cbed_covalent_radius(c->zn[j])));
    }
  double self = INFINITY, rmax = 0; /* own images: the shortest lattice vector against the largest atom */
  for (int i = 0; i < c->n; i++) rmax = fmax(rmax, _tsr_cbed_covalent_radius(c->zn[i]));
  for (int i = 0; i < 3; i++) self = fmin(self, sqrt(c->lat[i][0] * c->lat[i][0] + c->lat[i][1] * c->lat[i][1] + c->lat[i][2] * c->lat[i][2]));
  worst = fmin(worst, self / (2 * rmax));
  return 1 / worst;
}

/* ---- compositions ---- */

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

/* Reduced atom counts per Z of c into n[]. */
static void composition(const struct cbed_crystal *c, int n[TSR_CBED_ZMAX + 1]) {
  memset(n, 0, sizeof(int) * (TSR_CBED_ZMAX + 1));
  int g = 0;
  for (int k = 0; k < c->n; k++) n[c->zn[k]]++;
  for (int z = 1; z <= TSR_CBED_ZMAX; z++) g = gcd(g, n[z]);
  for (int z = 1; z <= TSR_CBED_ZMAX && g > 1; z++) n[z] /= g;
}

int _tsr_cbed_formula_parse(const char *s, size_t len, int n[TSR_CBED_ZMAX + 1]) {
  memset(n, 0, sizeof(int) * (TSR_CBED_ZMAX + 1));
  size_t i = 0;
  int any = 0;
  while (i < len) {
    char sym[4] = {0};
    if (s[i] < 'A' || s[i] > 'Z') return -1;
    sym[0] = s[i++];
    if (i < len && s[i] >= 'a' && s[i] <= 'z') sym[1] = s[i++];
    int z = _tsr_cbed_element_parse(sym), m = 0;
    if (z <= 0) return -1;
    while (i < len && s[i] >= '0' && s[i] <= '9' && m < 10000) m = 10 * m + (s[i++] - '0');
    n[z] += m ? m : 1, any = 1;
  }
  if (!any) return -1;
  int g = 0;
  for (int z = 1; z <= TSR_CBED_ZMAX; z++) g = gcd(g, n[z]);
  for (int z = 1; z <= TSR_CBED_ZMAX && g > 1; z++) n[z] /= g;
  return 0;
}

int _tsr_cbed_excluded(const struct cbed_crystal *c, const char *list) {
  int have[TSR_CBED_ZMAX + 1], want[TSR_CBED_ZMAX + 1];
  composition(c, have);
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (len > 0 && _tsr_cbed_formula_parse(p, len, want) == 0 && memcmp(have, want, sizeof have) == 0) return 1;
    p += len + (p[len] == ',');
  }
  return 0;
}

/* ---- random draws ---- */

static int draw_int(double u, int lo, int hi) {
  int k = lo + (int)(u * (hi - lo + 1));
  return k > hi ? hi : k;
}

int _tsr_cbed_crystal_prototype(struct cbed_crystal *c, const tsr_cbed_opts *o, double (*uniform)(void *), void *rng) {
  *c = (struct cbed_crystal){0};
  int p = draw_int(uniform(rng), 0, __builtin_popcount(o->prototypes) - 1), b = 0;
  for (;; b++) /* the p-th prototype of the mask */
    if (o->prototypes >> b & 1 && p-- == 0) break;
  const struct prototype *t = &protos[b];
  int zs[3];
  for (int s = 0; s < t->ntypes; s++) { /* distinct elements when the range allows */
    for (int tries = 0; tries < 100; tries++) {
      zs[s] = draw_int(uniform(rng), o->zmin, o->zmax);
      int dup = 0;
      for (int u = 0; u < s; u++) dup |= zs[u] == zs[s];
      if (!dup || o->zmax - o->zmin + 1 <= s) break;
    }
  }
  double c_a = t->c_a;
  if (t->hexagonal || t->c_a != 1) c_a *= PROTOTYPE_CA_MIN + uniform(rng) * (PROTOTYPE_CA_MAX - PROTOTYPE_CA_MIN);
  double scale = PROTOTYPE_SCALE_MIN + uniform(rng) * (PROTOTYPE_SCALE_MAX - PROTOTYPE_SCALE_MIN);
  int rc = _tsr_cbed_prototype_build(c, b, zs, 1, c_a);
  if (rc != 0) return rc;
  double a = scale * contact_scale(c);
  _tsr_cbed_crystal_free(c);
  if ((rc = _tsr_cbed_prototype_build(c, b, zs, a, c_a)) != 0) return rc;
  if (_tsr_cbed_crystal_min_distance(c) < o->min_distance || _tsr_cbed_excluded(c, o->exclude)) {
    _tsr_cbed_crystal_free(c);
    return -2;
  }
  _tsr_cbed_crystal_find_spacegroup(c);
  return 0;
}

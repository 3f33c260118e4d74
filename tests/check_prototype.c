/* Suite "prototype": the prototype crystals of tessera-cbed (--structures prototype). Each structure
 * type built with distinct elements has the textbook atom count per cell and per element, space
 * group and nearest-neighbour distance; with one element on every site the types collapse to the
 * simpler lattices they must (rock salt to simple cubic of half the constant, CsCl to bcc,
 * zincblende to diamond, L1_2 to fcc); random draws keep the minimum distance, their elements and
 * their hard-sphere lattice constants, are deterministic for a stream and skip excluded
 * compositions; the covalent-radius table holds the published values at both ends. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <spglib.h>
#include <tessera/cbed.h>

#include "sim/cbed/cbed.h"
#include "testutil.h"

/* Textbook values, typed here independently of the table in cbed_prototype.c: space group, atoms per
 * conventional cell, atoms per element type, nearest-neighbour distance / a at the archetype's c/a
 * (0: not checked). */
static const struct {
  const char *name;
  int spacegroup, atoms, per_type[3];
  double nn;
} ref[TSR_CBED_NPROTOTYPES] = {
    {"fcc", 225, 4, {4}, 0.70710678},          {"bcc", 229, 2, {2}, 0.86602540},
    {"hcp", 194, 2, {2}, 1.0},                 {"diamond", 227, 8, {8}, 0.43301270},
    {"rocksalt", 225, 8, {4, 4}, 0.5},         {"cscl", 221, 2, {1, 1}, 0.86602540},
    {"zincblende", 216, 8, {4, 4}, 0.43301270}, {"wurtzite", 186, 4, {2, 2}, 0.61237}, /* u c = 3/8 x 1.633 */
    {"nias", 194, 4, {2, 2}, 0.67386},         /* sqrt(1/3 + (1.39 / 4)^2) */
    {"fluorite", 225, 12, {4, 8}, 0.43301270}, {"rutile", 136, 6, {2, 4}, 0.42392}, /* apical Ti-O */
    {"corundum", 167, 30, {12, 18}, 0},        {"perovskite", 221, 5, {1, 1, 3}, 0.5},
    {"l12", 221, 4, {1, 3}, 0.70710678},       {"spinel", 227, 56, {8, 16, 32}, 0}};

static const int distinct[3] = {38, 22, 8}; /* Sr, Ti, O */

static double uniform(void *r) { return _tsr_rng_uniform(r); }

static int count_z(const struct cbed_crystal *c, int z) {
  int n = 0;
  for (int k = 0; k < c->n; k++) n += c->zn[k] == z;
  return n;
}

START_TEST(prototypes_have_their_textbook_cells) {
  for (int p = 0; p < TSR_CBED_NPROTOTYPES; p++) {
    ck_assert_str_eq(_tsr_cbed_prototype_name(p), ref[p].name);
    ck_assert_int_eq(_tsr_cbed_prototype_find(ref[p].name), p);
    struct cbed_crystal c;
    const double a = 5;
    ck_assert_int_eq(_tsr_cbed_prototype_build(&c, p, distinct, a, _tsr_cbed_prototype_c_a(p)), 0);
    ck_assert_msg(c.n == ref[p].atoms && _tsr_cbed_prototype_atoms(p) == ref[p].atoms, "%s: %d atoms per cell, not %d",
                  ref[p].name, c.n, ref[p].atoms);
    for (int t = 0; t < 3; t++)
      ck_assert_msg(count_z(&c, distinct[t]) == ref[p].per_type[t], "%s: %d atoms of type %d, not %d", ref[p].name,
                    count_z(&c, distinct[t]), t, ref[p].per_type[t]);
    _tsr_cbed_crystal_find_spacegroup(&c);
    ck_assert_msg(c.spacegroup == ref[p].spacegroup, "%s: space group %d, not %d", ref[p].name, c.spacegroup,
                  ref[p].spacegroup);
    if (ref[p].nn > 0)
      ck_assert_msg(fabs(_tsr_cbed_crystal_min_distance(&c) / a - ref[p].nn) < 1e-4, "%s: nearest neighbours %.5f a, not %.5f a",
                    ref[p].name, _tsr_cbed_crystal_min_distance(&c) / a, ref[p].nn);
    _tsr_cbed_crystal_free(&c);
  }
}
END_TEST

/* Primitive cell of c by spglib: its atom count and volume. */
static int primitive(const struct cbed_crystal *c, double *volume) {
  double lat[3][3], (*pos)[3] = malloc(sizeof *pos * 4 * c->n);
  int *types = malloc(sizeof *types * 4 * c->n);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) lat[i][j] = c->lat[j][i];
  memcpy(pos, c->frac, sizeof *pos * c->n);
  memcpy(types, c->zn, sizeof *types * c->n);
  int n = spg_find_primitive(lat, pos, types, c->n, 1e-4);
  *volume = fabs(lat[0][0] * (lat[1][1] * lat[2][2] - lat[1][2] * lat[2][1]) -
                 lat[0][1] * (lat[1][0] * lat[2][2] - lat[1][2] * lat[2][0]) +
                 lat[0][2] * (lat[1][0] * lat[2][1] - lat[1][1] * lat[2][0]));
  free(pos), free(types);
  return n;
}

START_TEST(one_element_collapses_to_the_simpler_lattice) {
  const int same[3] = {29, 29, 29};
  const double a = 4;
  struct {
    const char *name;
    int spacegroup, prim_atoms;
    double prim_volume, nn; /* in a^3, a */
  } want[] = {{"rocksalt", 221, 1, 0.125, 0.5},            /* simple cubic, a / 2 */
              {"cscl", 229, 1, 0.5, 0.86602540},           /* bcc */
              {"zincblende", 227, 2, 0.25, 0.43301270},    /* diamond */
              {"l12", 225, 1, 0.25, 0.70710678}};          /* fcc */
  for (int i = 0; i < 4; i++) {
    struct cbed_crystal c;
    ck_assert_int_eq(_tsr_cbed_prototype_build(&c, _tsr_cbed_prototype_find(want[i].name), same, a, 1), 0);
    _tsr_cbed_crystal_find_spacegroup(&c);
    double v = 0;
    int n = primitive(&c, &v);
    ck_assert_msg(c.spacegroup == want[i].spacegroup && n == want[i].prim_atoms && fabs(v / (a * a * a) - want[i].prim_volume) < 1e-9,
                  "%s of one element: space group %d, primitive cell of %d atoms and %g a^3", want[i].name, c.spacegroup, n,
                  v / (a * a * a));
    ck_assert(fabs(_tsr_cbed_crystal_min_distance(&c) / a - want[i].nn) < 1e-6);
    _tsr_cbed_crystal_free(&c);
  }
}
END_TEST

/* The tightest contact of c over the sum of the two atoms' covalent radii (own images: 2 r). */
static double contact_ratio(const struct cbed_crystal *c) {
  double worst = INFINITY;
  for (int i = 0; i < c->n; i++) {
    for (int j = i + 1; j < c->n; j++)
      worst = fmin(worst, _tsr_cbed_crystal_distance(c, c->frac[i], c->frac[j]) /
                              (_tsr_cbed_covalent_radius(c->zn[i]) + _tsr_cbed_covalent_radius(c->zn[j])));
    for (int k = 0; k < 3; k++)
      worst = fmin(worst, sqrt(c->lat[k][0] * c->lat[k][0] + c->lat[k][1] * c->lat[k][1] + c->lat[k][2] * c->lat[k][2]) /
                              (2 * _tsr_cbed_covalent_radius(c->zn[i])));
  }
  return worst;
}

/* 400 draws over O..Ba (the held-out benchmark's range): every type appears; each draw has its
 * type's atoms, space group and number of distinct elements, no two atoms closer than the minimum
 * distance, and a tightest contact 0.85-1.10 x the sum of covalent radii. */
START_TEST(random_prototypes_obey_their_constraints) {
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  o.zmin = 8, o.zmax = 56;
  unsigned seen = 0;
  int rejected = 0;
  for (int i = 0; i < 400; i++) {
    struct _tsr_rng r = _tsr_rng_stream(3, (uint64_t)i);
    struct cbed_crystal c;
    int rc = _tsr_cbed_crystal_prototype(&c, &o, uniform, &r);
    ck_assert(rc == 0 || rc == -2);
    if (rc == -2) {
      rejected++;
      continue;
    }
    int p = _tsr_cbed_prototype_find(c.name);
    ck_assert(p >= 0);
    seen |= 1u << p;
    ck_assert_msg(c.n == ref[p].atoms && c.spacegroup == ref[p].spacegroup, "draw %d (%s): %d atoms, space group %d", i,
                  c.name, c.n, c.spacegroup);
    int nz = 0;
    for (int z = o.zmin; z <= o.zmax; z++) nz += count_z(&c, z) > 0;
    ck_assert_int_eq(nz, _tsr_cbed_prototype_types(p));
    ck_assert_int_eq(nz, ref[p].per_type[2] ? 3 : ref[p].per_type[1] ? 2 : 1);
    ck_assert_msg(_tsr_cbed_crystal_min_distance(&c) >= o.min_distance, "draw %d: atoms %.3f A apart", i,
                  _tsr_cbed_crystal_min_distance(&c));
    double q = contact_ratio(&c);
    ck_assert_msg(q >= 0.85 - 1e-9 && q <= 1.10 + 1e-9, "draw %d (%s): tightest contact %.3f x the radii", i, c.name, q);
    _tsr_cbed_crystal_free(&c);
  }
  ck_assert_msg(seen == (1u << TSR_CBED_NPROTOTYPES) - 1, "types drawn: 0x%x", seen);
  ck_assert_msg(rejected < 200, "%d of 400 draws too tight", rejected);
}
END_TEST

static int same_crystal(const struct cbed_crystal *a, const struct cbed_crystal *b) {
  return a->n == b->n && !strcmp(a->name, b->name) && !memcmp(a->cell, b->cell, sizeof a->cell) &&
         !memcmp(a->zn, b->zn, sizeof *a->zn * a->n) && !memcmp(a->frac, b->frac, sizeof *a->frac * a->n);
}

START_TEST(draws_are_deterministic_for_a_stream) {
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  o.zmin = 20, o.zmax = 60;
  struct cbed_crystal c[3];
  for (int k = 0; k < 3; k++) {
    struct _tsr_rng r = _tsr_rng_stream(9, k < 2 ? 4 : 5);
    ck_assert_int_eq(_tsr_cbed_crystal_prototype(&c[k], &o, uniform, &r), 0);
  }
  ck_assert(same_crystal(&c[0], &c[1]));
  ck_assert(!same_crystal(&c[0], &c[2]));
  for (int k = 0; k < 3; k++) _tsr_cbed_crystal_free(&c[k]);
}
END_TEST

START_TEST(excluded_compositions_are_redrawn) {
  /* compositions compared reduced, in any order */
  struct cbed_crystal sto, rut;
  const int ti_o[2] = {22, 8};
  ck_assert_int_eq(_tsr_cbed_prototype_build(&sto, _tsr_cbed_prototype_find("perovskite"), distinct, 3.905, 1), 0);
  ck_assert_int_eq(_tsr_cbed_prototype_build(&rut, _tsr_cbed_prototype_find("rutile"), ti_o, 4.594, 0.644), 0);
  ck_assert(_tsr_cbed_excluded(&sto, "SrTiO3") && _tsr_cbed_excluded(&sto, "Cu,TiO3Sr"));
  ck_assert(!_tsr_cbed_excluded(&sto, "SrTiO2") && !_tsr_cbed_excluded(&sto, "") && !_tsr_cbed_excluded(&sto, "Cu,TiO2"));
  ck_assert(_tsr_cbed_excluded(&rut, "SrTiO3,Cu,TiO2") && _tsr_cbed_excluded(&rut, "Ti2O4") && !_tsr_cbed_excluded(&rut, "TiO"));
  _tsr_cbed_crystal_free(&sto), _tsr_cbed_crystal_free(&rut);

  /* specimens of fcc or bcc Cu or Zn: with Cu excluded, no sample is Cu */
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  o.structures = 1u << TSR_CBED_PROTOTYPE, o.zmin = 29, o.zmax = 30, o.fov = 10;
  ck_assert(tsr_cbed_prototypes_parse("fcc,bcc", &o.prototypes) == TSR_OK && o.prototypes == 3);
  for (int excl = 0; excl < 2; excl++) {
    snprintf(o.exclude, sizeof o.exclude, "%s", excl ? "Cu" : "");
    ck_assert_msg(tsr_cbed_opts_check(&o) == TSR_OK, "%s", tsr_last_error());
    int cu = 0, zn = 0;
    for (int64_t i = 0; i < 30; i++) {
      struct _tsr_rng r = _tsr_rng_stream(o.seed, (uint64_t)i);
      struct cbed_atoms a;
      struct cbed_meta m;
      int periods;
      ck_assert_msg(_tsr_cbed_specimen(&o, i, &r, &a, &periods, &m) == TSR_OK, "%s", tsr_last_error());
      cu += !strcmp(m.formula, "Cu"), zn += !strcmp(m.formula, "Zn");
      ck_assert(strstr(m.source, "prototype A") && m.cell[0] > 0);
      _tsr_cbed_atoms_free(&a);
    }
    ck_assert_msg(excl ? cu == 0 && zn == 30 : cu > 5 && zn > 5, "exclude '%s': %d Cu, %d Zn of 30", o.exclude, cu, zn);
  }
  /* every draw excluded: the specimen error says why */
  o.zmax = 29;
  snprintf(o.exclude, sizeof o.exclude, "Cu");
  struct _tsr_rng r = _tsr_rng_stream(o.seed, 0);
  struct cbed_atoms a;
  int periods;
  ck_assert(_tsr_cbed_specimen(&o, 0, &r, &a, &periods, NULL) != TSR_OK);
  ck_assert_msg(strstr(tsr_last_error(), "excluded composition") != NULL, "%s", tsr_last_error());
}
END_TEST

START_TEST(bad_options_are_named) {
  unsigned mask;
  ck_assert(tsr_cbed_prototypes_parse("rocksalt,perovskit", &mask) != TSR_OK);
  ck_assert_msg(strstr(tsr_last_error(), "'perovskit'") != NULL, "%s", tsr_last_error());
  ck_assert(tsr_cbed_prototypes_parse("all", &mask) == TSR_OK && mask == (1u << TSR_CBED_NPROTOTYPES) - 1);
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  snprintf(o.exclude, sizeof o.exclude, "SrTiO3,Xq2");
  ck_assert(tsr_cbed_opts_check(&o) != TSR_OK);
  ck_assert_msg(strstr(tsr_last_error(), "'Xq2'") != NULL, "%s", tsr_last_error());
  o.exclude[0] = 0, o.prototypes = 0;
  ck_assert(tsr_cbed_opts_check(&o) != TSR_OK && strstr(tsr_last_error(), "prototype"));
  /* the JSON options: the lists, and a bad name naming the field */
  char *path = tt_path_in(tt_tmpdir(), "proto.json");
  FILE *f = fopen(path, "w");
  fputs("{\"prototypes\": [\"rocksalt\", \"perovskite\"], \"exclude_formulas\": [\"SrTiO3\", \"Cu\"]}", f);
  fclose(f);
  tsr_cbed_opts_default(&o);
  ck_assert_msg(tsr_cbed_opts_load_json(path, &o) == TSR_OK, "%s", tsr_last_error());
  ck_assert(o.prototypes == (1u << _tsr_cbed_prototype_find("rocksalt") | 1u << _tsr_cbed_prototype_find("perovskite")));
  ck_assert_str_eq(o.exclude, "SrTiO3,Cu");
  f = fopen(path, "w");
  fputs("{\"prototypes\": [\"halite\"]}", f);
  fclose(f);
  ck_assert(tsr_cbed_opts_load_json(path, &o) != TSR_OK);
  ck_assert_msg(strstr(tsr_last_error(), "prototypes") != NULL, "%s", tsr_last_error());
}
END_TEST

/* Cordero et al. 2008, Table 2: H 0.31, C (sp3) 0.76, O 0.66, Fe (high spin) 1.52, Cu 1.32, Sr 1.95,
 * Ba 2.15, Cm 1.69; Lr takes Cm's. */
START_TEST(covalent_radii_are_cordero_s) {
  const struct { int z; double r; } want[] = {{1, 0.31}, {6, 0.76}, {8, 0.66}, {26, 1.52}, {29, 1.32},
                                              {38, 1.95}, {56, 2.15}, {96, 1.69}, {103, 1.69}};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    ck_assert_msg(_tsr_cbed_covalent_radius(want[i].z) == want[i].r, "Z %d: %g", want[i].z, _tsr_cbed_covalent_radius(want[i].z));
  for (int z = 1; z <= TSR_CBED_ZMAX; z++) ck_assert(_tsr_cbed_covalent_radius(z) > 0.2);
  ck_assert(_tsr_cbed_covalent_radius(0) < 0 && _tsr_cbed_covalent_radius(104) < 0);
}
END_TEST

static Suite *make_prototype_suite(void) {
  Suite *s = suite_create("prototype");
  TCase *t = tcase_create("prototype");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, prototypes_have_their_textbook_cells);
  tcase_add_test(t, one_element_collapses_to_the_simpler_lattice);
  tcase_add_test(t, random_prototypes_obey_their_constraints);
  tcase_add_test(t, draws_are_deterministic_for_a_stream);
  tcase_add_test(t, excluded_compositions_are_redrawn);
  tcase_add_test(t, bad_options_are_named);
  tcase_add_test(t, covalent_radii_are_cordero_s);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_prototype_suite)

/* Suite "crystal": the CBED simulator's specimens. The Kirkland table (Z = 1..103 against float64
 * sums of the published parameters), CIF round trips (the shipped files of examples/stemdl/structures
 * read, their symmetry expanded: atom counts, the file's sites, bond lengths and the space group
 * spglib finds, against textbook values), errors naming file and item, supercells along zone axes
 * (whole cells, orthogonal edges, rotation), random crystals within their constraints, and the
 * per-sample record. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera/cbed.h>

#include "sim/cbed/cbed.h"
#include "testutil.h"

static char *structure_path(const char *name) {
  const char *top = getenv("TESSERA_SRCDIR");
  char *p;
  ck_assert(asprintf(&p, "%s/examples/stemdl/structures/%s", top ? top : ".", name) > 0);
  return p;
}

static void read_cif(const char *name, struct cbed_crystal *c) {
  char *p = structure_path(name);
  ck_assert_msg(_tsr_cbed_crystal_read_cif(p, c) == TSR_OK, "%s", tsr_last_error());
  free(p);
}

/* f_e(0) = sum a_i / b_i + sum c_i and f_e(1/A) from the published parameters (float64 sums of
 * abTEM's kirkland.json done outside this code), and the symbols at both ends of the table. */
START_TEST(kirkland_table_covers_z_1_to_103) {
  const struct {
    int z;
    const char *sym;
    double f0, f1;
  } ref[] = {{1, "H", 0.529697153, 0.088951096}, {79, "Au", 10.553352706, 3.070813339},
             {92, "U", 19.099076068, 3.507407368}, {103, "Lr", 15.842464020, 3.865148863}};
  for (int i = 0; i < 4; i++) {
    ck_assert_str_eq(_tsr_cbed_element_name(ref[i].z), ref[i].sym);
    ck_assert_int_eq(_tsr_cbed_element_parse(ref[i].sym), ref[i].z);
    ck_assert_msg(fabs(_tsr_cbed_fe(ref[i].z, 0) - ref[i].f0) < 1e-8, "Z=%d f(0) = %.9f", ref[i].z,
                  _tsr_cbed_fe(ref[i].z, 0));
    ck_assert_msg(fabs(_tsr_cbed_fe(ref[i].z, 1) - ref[i].f1) < 1e-8, "Z=%d f(1) = %.9f", ref[i].z,
                  _tsr_cbed_fe(ref[i].z, 1));
  }
  for (int z = 1; z <= 103; z++) {
    double prev = _tsr_cbed_fe(z, 0);
    for (double q = 0.25; q <= 4; q += 0.25) {
      double f = _tsr_cbed_fe(z, q);
      ck_assert_msg(f > 0 && f < prev, "Z=%d (%s): f(%g) = %g after %g", z, _tsr_cbed_element_name(z), q, f, prev);
      prev = f;
    }
  }
  ck_assert(_tsr_cbed_fe(0, 0.5) < 0 && _tsr_cbed_fe(104, 0.5) < 0 && _tsr_cbed_element_parse("Xx") == 0);
}
END_TEST

/* Neighbours of element zb within r of atom k, every periodic image counted; their distances in d. */
static int neighbours(const struct cbed_crystal *c, int k, int zb, double r, double *d, int cap) {
  int n = 0;
  for (int j = 0; j < c->n; j++) {
    if (c->zn[j] != zb) continue;
    for (int i0 = -2; i0 <= 2; i0++)
      for (int i1 = -2; i1 <= 2; i1++)
        for (int i2 = -2; i2 <= 2; i2++) {
          double f[3] = {c->frac[j][0] - c->frac[k][0] + i0, c->frac[j][1] - c->frac[k][1] + i1,
                         c->frac[j][2] - c->frac[k][2] + i2}, v[3] = {0, 0, 0};
          for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) v[b] += f[a] * c->lat[a][b];
          double len = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
          if (len > 1e-6 && len < r) {
            if (n < cap) d[n] = len;
            n++;
          }
        }
  }
  return n;
}

static int has_atom(const struct cbed_crystal *c, int zn, const double f[3]) {
  for (int k = 0; k < c->n; k++)
    if (c->zn[k] == zn && _tsr_cbed_crystal_distance(c, c->frac[k], f) < 1e-6) return 1;
  return 0;
}

/* Every shipped CIF: atoms in the cell, the space group spglib finds in the expanded atoms, the
 * formula, the file's own sites among the atoms, and every atom of element A with `coord` atoms of
 * element B at the textbook bond lengths (each within 0.005 A, none other within `cut`). */
START_TEST(cif_files_expand_to_their_textbook_cells) {
  const struct {
    const char *file, *formula;
    int atoms, spacegroup, za, zb, coord;
    double bond[2], cut;
    int zsite; /* a site as the file lists it */
    double site[3];
  } t[] = {
      {"Si.cif", "Si", 8, 227, 14, 14, 4, {2.35167, 2.35167}, 3.0, 14, {.125, .125, .125}},
      {"MgO.cif", "MgO", 8, 225, 12, 8, 6, {2.106, 2.106}, 2.8, 8, {.5, .5, .5}},
      {"SrTiO3.cif", "SrTiO3", 5, 221, 22, 8, 6, {1.9525, 1.9525}, 2.6, 8, {.5, .5, 0}},
      {"Cu.cif", "Cu", 4, 225, 29, 29, 12, {2.55619, 2.55619}, 3.3, 29, {0, 0, 0}},
      {"GaAs.cif", "GaAs", 8, 216, 31, 33, 4, {2.44784, 2.44784}, 3.3, 33, {.25, .25, .25}},
      {"TiO2_rutile.cif", "TiO2", 6, 136, 22, 8, 6, {1.9485, 1.9801}, 2.5, 8, {.3048, .3048, 0}},
      {"Al2O3_corundum.cif", "Al2O3", 30, 167, 13, 8, 6, {1.8547, 1.9711}, 2.3, 13, {0, 0, .35216}},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    struct cbed_crystal c;
    read_cif(t[i].file, &c);
    char formula[64];
    _tsr_cbed_crystal_formula(&c, formula, sizeof formula);
    ck_assert_msg(c.n == t[i].atoms, "%s: %d atoms, expected %d", t[i].file, c.n, t[i].atoms);
    ck_assert_msg(c.spacegroup == t[i].spacegroup, "%s: space group %d", t[i].file, c.spacegroup);
    ck_assert_msg(!strcmp(formula, t[i].formula), "%s: formula %s", t[i].file, formula);
    ck_assert_msg(strstr(c.source, t[i].file), "%s: source %s", t[i].file, c.source);
    ck_assert_msg(has_atom(&c, t[i].zsite, t[i].site), "%s: the file's site is not among the atoms", t[i].file);
    for (int k = 0; k < c.n; k++) {
      if (c.zn[k] != t[i].za) continue;
      double d[32];
      int n = neighbours(&c, k, t[i].zb, t[i].cut, d, 32);
      ck_assert_msg(n == t[i].coord, "%s atom %d: %d neighbours within %g A, expected %d", t[i].file, k, n, t[i].cut,
                    t[i].coord);
      for (int j = 0; j < n; j++)
        ck_assert_msg(fabs(d[j] - t[i].bond[0]) < 0.005 || fabs(d[j] - t[i].bond[1]) < 0.005,
                      "%s atom %d: bond %.4f A, expected %.4f or %.4f", t[i].file, k, d[j], t[i].bond[0], t[i].bond[1]);
    }
    _tsr_cbed_crystal_free(&c);
  }
}
END_TEST

/* The CIFs of Si (origin choice 2), SrTiO3 and Cu hold the built-in cells: the same atoms, Si's
 * shifted by the change of origin, -(1/8, 1/8, 1/8). */
START_TEST(cif_cells_match_the_builtin_crystals) {
  const char *files[] = {"Si.cif", "SrTiO3.cif", "Cu.cif"};
  const double shift[] = {-0.125, 0, 0};
  for (int s = 0; s < 3; s++) {
    struct cbed_crystal b, c;
    ck_assert_int_eq(_tsr_cbed_crystal_builtin((tsr_cbed_structure)s, &b), 0);
    read_cif(files[s], &c);
    ck_assert_int_eq(b.n, c.n);
    for (int k = 0; k < b.n; k++) {
      double f[3] = {b.frac[k][0] + shift[s], b.frac[k][1] + shift[s], b.frac[k][2] + shift[s]};
      ck_assert_msg(has_atom(&c, b.zn[k], f), "%s: built-in atom %d not found", files[s], k);
    }
    ck_assert(fabs(b.cell[0] - c.cell[0]) < 1e-12 && b.spacegroup == c.spacegroup);
    _tsr_cbed_crystal_free(&b);
    _tsr_cbed_crystal_free(&c);
  }
}
END_TEST

static const char *write_file(const char *name, const char *text) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", tt_tmpdir(), name);
  FILE *f = fopen(path, "w");
  ck_assert(f);
  fputs(text, f);
  fclose(f);
  return path;
}

START_TEST(cif_errors_name_the_file_and_the_item) {
  const char *cell = "_cell_length_a 4\n_cell_length_b 4\n_cell_length_c 4\n_cell_angle_alpha 90\n"
                     "_cell_angle_beta 90\n_cell_angle_gamma 90\n";
  char text[1024];
  const struct {
    const char *name, *body, *want;
  } t[] = {
      {"nob.cif", "data_x\n_cell_length_a 4\n_cell_length_c 4\n", "no _cell_length_b"},
      {"badop.cif", "loop_\n_space_group_symop_operation_xyz\n'x,y,z'\n'x,y,q'\n"
                    "loop_\n_atom_site_label\n_atom_site_fract_x\n_atom_site_fract_y\n_atom_site_fract_z\nC1 0 0 0\n",
       "'x,y,q' is not an operation"},
      {"nosym.cif", "loop_\n_atom_site_label\n_atom_site_fract_x\n_atom_site_fract_y\n_atom_site_fract_z\nC1 0 0 0\n",
       "no symmetry"},
      {"elem.cif", "_space_group_IT_number 1\nloop_\n_atom_site_label\n_atom_site_fract_x\n_atom_site_fract_y\n"
                   "_atom_site_fract_z\nQq1 0 0 0\n",
       "site 'Qq1'"},
  };
  for (int i = 0; i < 4; i++) {
    snprintf(text, sizeof text, "%s%s", i == 0 ? "" : "data_x\n", i == 0 ? t[i].body : cell);
    if (i > 0) strncat(text, t[i].body, sizeof text - strlen(text) - 1);
    const char *path = write_file(t[i].name, text);
    struct cbed_crystal c;
    ck_assert_int_ne(_tsr_cbed_crystal_read_cif(path, &c), TSR_OK);
    ck_assert_msg(strstr(tsr_last_error(), t[i].want) && strstr(tsr_last_error(), t[i].name), "%s: %s", t[i].name,
                  tsr_last_error());
    ck_assert(c.n == 0 && c.zn == NULL);
  }
  struct cbed_crystal c;
  ck_assert_int_eq(_tsr_cbed_crystal_read_cif("/nonexistent/x.cif", &c), TSR_ERR_IO);
  ck_assert(strstr(tsr_last_error(), "/nonexistent/x.cif"));
}
END_TEST

static double cosine(const struct cbed_crystal *c, const int a[3], const int b[3]) {
  double u[3] = {0, 0, 0}, v[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) u[j] += a[i] * c->lat[i][j], v[j] += b[i] * c->lat[i][j];
  return (u[0] * v[0] + u[1] * v[1] + u[2] * v[2]) /
         sqrt((u[0] * u[0] + u[1] * u[1] + u[2] * u[2]) * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]));
}

static double cell_volume(const struct cbed_crystal *c) {
  const double(*l)[3] = c->lat;
  return fabs(l[0][0] * (l[1][1] * l[2][2] - l[1][2] * l[2][1]) - l[0][1] * (l[1][0] * l[2][2] - l[1][2] * l[2][0]) +
              l[0][2] * (l[1][0] * l[2][1] - l[1][1] * l[2][0]));
}

/* Along every zone that has a cell: the edges are normal to the beam and to each other within the
 * recorded strain (at most 2%), and the box holds the crystal's density (up to that shear). Cubic,
 * tetragonal [001]/[100]/[110] and hexagonal [001]/[100] cells are exact. */
START_TEST(zone_cells_are_orthogonal_and_hold_whole_cells) {
  const char *files[] = {"Si.cif", "SrTiO3.cif", "GaAs.cif", "TiO2_rutile.cif", "Al2O3_corundum.cif"};
  const int zones[][3] = {{0, 0, 1}, {1, 0, 0}, {1, 1, 0}, {1, 1, 1}, {2, 1, 0}, {1, 1, 2}, {2, 1, 1}};
  for (int f = 0; f < 5; f++) {
    struct cbed_crystal c;
    read_cif(files[f], &c);
    int found = 0;
    for (int zi = 0; zi < 7; zi++) {
      struct cbed_zone z;
      if (_tsr_cbed_zone_cell(&c, zones[zi], 0, 30, &z) != 0) continue;
      found++;
      double worst = fmax(fabs(cosine(&c, z.x, z.uvw)), fmax(fabs(cosine(&c, z.y, z.uvw)), fabs(cosine(&c, z.x, z.y))));
      ck_assert_msg(worst <= z.strain + 1e-12 && z.strain <= 0.02, "%s [%d%d%d]: |cos| %g, strain %g", files[f],
                    zones[zi][0], zones[zi][1], zones[zi][2], worst, z.strain);
      int exact = f < 3 || (f == 3 && zi < 3) || (f == 4 && zi < 2);
      ck_assert_msg(!exact || z.strain < 1e-12, "%s [%d%d%d]: strain %g, expected an exact cell", files[f],
                    zones[zi][0], zones[zi][1], zones[zi][2], z.strain);
      struct cbed_atoms a;
      ck_assert_msg(_tsr_cbed_build_supercell(&a, &c, &z, 12, 0.3, 0.6) == 0, "%s [%d%d%d]", files[f], zones[zi][0],
                    zones[zi][1], zones[zi][2]);
      double rho = a.n / (a.lx * a.ly * a.lz), want = c.n / cell_volume(&c);
      ck_assert_msg(fabs(rho / want - 1) <= 3 * z.strain + 1e-9, "%s [%d%d%d]: %.6f atoms/A^3, crystal %.6f", files[f],
                    zones[zi][0], zones[zi][1], zones[zi][2], rho, want);
      for (int k = 0; k < a.n; k++)
        ck_assert(a.x[k] >= 0 && a.x[k] < a.lx && a.y[k] >= 0 && a.y[k] < a.ly && a.z[k] >= 0 && a.z[k] < a.lz);
      _tsr_cbed_atoms_free(&a);
    }
    ck_assert_msg(found >= (f < 3 ? 7 : 3), "%s: cells along %d of 7 zones", files[f], found);
    _tsr_cbed_crystal_free(&c);
  }
}
END_TEST

/* Si [001] rotated: x is the lattice vector [h k 0] whose angle atan2(k, h) is nearest the request,
 * y is [-k h 0], and the recorded rotation is that angle. */
START_TEST(rotation_picks_the_nearest_lattice_direction) {
  struct cbed_crystal c;
  ck_assert_int_eq(_tsr_cbed_crystal_builtin(TSR_CBED_SI, &c), 0);
  const int uvw[3] = {0, 0, 1};
  const double want[] = {0, 10, 30, 45, 100};
  for (int i = 0; i < 5; i++) {
    struct cbed_zone z;
    ck_assert_int_eq(_tsr_cbed_zone_cell(&c, uvw, want[i], 25, &z), 0);
    double got = atan2(z.x[1], z.x[0]) * 180 / M_PI;
    ck_assert_msg(z.x[2] == 0 && z.y[0] == -z.x[1] && z.y[1] == z.x[0] && z.y[2] == 0, "x [%d %d %d] y [%d %d %d]",
                  z.x[0], z.x[1], z.x[2], z.y[0], z.y[1], z.y[2]);
    ck_assert_msg(fabs(got - z.rotation_deg) < 1e-9 && fabs(got - want[i]) < 5, "asked %g: x [%d %d 0] at %g, recorded %g",
                  want[i], z.x[0], z.x[1], got, z.rotation_deg);
    ck_assert(z.len[0] <= 25 && z.strain < 1e-12);
  }
  struct cbed_zone z0;
  ck_assert_int_eq(_tsr_cbed_zone_cell(&c, uvw, 0, 25, &z0), 0);
  ck_assert(z0.x[0] == 1 && z0.x[1] == 0 && fabs(z0.len[0] - 5.431) < 1e-12);
  _tsr_cbed_crystal_free(&c);
}
END_TEST

static double uniform(void *r) { return _tsr_rng_uniform(r); }

/* 300 random crystals: no two atoms (periodic images included) closer than the minimum distance,
 * density, elements and atoms per cell within their ranges, a space group found; together they
 * reach both ends of the table. */
START_TEST(random_crystals_obey_their_constraints) {
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  int zlo = 200, zhi = 0, systems_seen = 0;
  for (int i = 0; i < 300; i++) {
    struct _tsr_rng r = _tsr_rng_stream(5, (uint64_t)i);
    struct cbed_crystal c;
    ck_assert_int_eq(_tsr_cbed_crystal_random(&c, &o, uniform, &r), 0);
    double v = cell_volume(&c), rho = c.n / v;
    ck_assert_msg(rho >= o.density_min - 1e-12 && rho <= o.density_max + 1e-12, "crystal %d: %g atoms/A^3", i, rho);
    ck_assert_msg(c.n >= 1 && c.n <= o.sites, "crystal %d: %d atoms", i, c.n);
    ck_assert_msg(c.spacegroup >= 1 && c.spacegroup <= 230, "crystal %d: space group %d", i, c.spacegroup);
    for (int k = 0; k < c.n; k++) {
      ck_assert(c.zn[k] >= o.zmin && c.zn[k] <= o.zmax);
      zlo = c.zn[k] < zlo ? c.zn[k] : zlo, zhi = c.zn[k] > zhi ? c.zn[k] : zhi;
      double d[1];
      ck_assert_msg(neighbours(&c, k, c.zn[k], o.min_distance - 1e-9, d, 1) == 0, "crystal %d atom %d: an image closer "
                    "than %g A", i, k, o.min_distance);
      for (int j = k + 1; j < c.n; j++)
        ck_assert_msg(_tsr_cbed_crystal_distance(&c, c.frac[k], c.frac[j]) >= o.min_distance - 1e-9,
                      "crystal %d: atoms %d and %d %.3f A apart", i, k, j,
                      _tsr_cbed_crystal_distance(&c, c.frac[k], c.frac[j]));
    }
    systems_seen |= 1 << (c.cell[5] == 120 ? 0 : c.cell[4] != 90 ? 1 : c.cell[0] == c.cell[2] ? 2 : 3);
    _tsr_cbed_crystal_free(&c);
  }
  ck_assert_msg(zlo <= 3 && zhi >= 100, "elements drawn span Z %d..%d only", zlo, zhi);
  ck_assert_msg(systems_seen == 15, "lattice kinds seen: 0x%x", systems_seen);
  o.zmin = o.zmax = 79, o.sites = 2, o.density_min = 0.05, o.density_max = 0.05;
  struct _tsr_rng r = _tsr_rng_stream(6, 0);
  struct cbed_crystal c;
  ck_assert_int_eq(_tsr_cbed_crystal_random(&c, &o, uniform, &r), 0);
  ck_assert(c.n <= 2 && c.zn[0] == 79 && fabs(c.n / cell_volume(&c) - 0.05) < 1e-12);
  _tsr_cbed_crystal_free(&c);
}
END_TEST

/* Specimens drawn for the options record what was built: random crystals along random zones, tilted
 * and rotated, and CIF files among the structures. */
START_TEST(specimens_record_what_was_built) {
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  char *cif = structure_path("TiO2_rutile.cif");
  snprintf(o.cif, sizeof o.cif, "%s", cif);
  o.structures = 1u << TSR_CBED_CRYSTAL, o.zone_index = 2, o.tilt_mrad = 10, o.rotation_deg = 360, o.fov = 15;
  ck_assert_msg(tsr_cbed_opts_check(&o) == TSR_OK, "%s", tsr_last_error());
  int from_cif = 0;
  for (int64_t i = 0; i < 40; i++) {
    struct _tsr_rng r = _tsr_rng_stream(o.seed, (uint64_t)i);
    struct cbed_atoms a;
    struct cbed_meta m;
    int periods;
    ck_assert_msg(_tsr_cbed_specimen(&o, i, &r, &a, &periods, &m) == TSR_OK, "%s", tsr_last_error());
    from_cif += strstr(m.source, "TiO2_rutile.cif") != NULL;
    ck_assert(m.atoms == a.n && a.n > 0 && m.supercell[0] == a.lx && m.supercell[1] == a.ly && m.supercell[2] == a.lz);
    ck_assert(m.periods == periods && fabs(m.thickness_A - periods * a.lz) < 1e-9 && m.strain <= 0.02);
    ck_assert(hypot(m.tilt_mrad[0], m.tilt_mrad[1]) <= 10 + 1e-9 && m.rotation_deg >= -180 && m.rotation_deg <= 180);
    ck_assert(abs(m.zone[0]) + abs(m.zone[1]) + abs(m.zone[2]) > 0 && m.cell[0] > 0 && m.formula[0]);
    _tsr_cbed_atoms_free(&a);
  }
  ck_assert_msg(from_cif > 5 && from_cif < 35, "%d of 40 samples from the CIF file", from_cif);
  free(cif);
}
END_TEST

static Suite *make_crystal_suite(void) {
  Suite *s = suite_create("crystal");
  TCase *t = tcase_create("crystal");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, kirkland_table_covers_z_1_to_103);
  tcase_add_test(t, cif_files_expand_to_their_textbook_cells);
  tcase_add_test(t, cif_cells_match_the_builtin_crystals);
  tcase_add_test(t, cif_errors_name_the_file_and_the_item);
  tcase_add_test(t, zone_cells_are_orthogonal_and_hold_whole_cells);
  tcase_add_test(t, rotation_picks_the_nearest_lattice_direction);
  tcase_add_test(t, random_crystals_obey_their_constraints);
  tcase_add_test(t, specimens_record_what_was_built);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_crystal_suite)

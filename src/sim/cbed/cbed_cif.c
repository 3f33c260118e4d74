/* Crystals from CIF files, parsed by the CIF API (libcif, COMCIFS): the first data block's cell,
 * its symmetry operations (the xyz loop under its CIF 1.1 or DDLm names; else the Hall symbol, the
 * Hermann-Mauguin symbol or the space group number, expanded from spglib's tables) and the
 * asymmetric unit (_atom_site_fract_*, the element from _atom_site_type_symbol or the label).
 * Every site is carried through every operation; images closer than 0.02 A are one atom (a site
 * on a special position), so partly occupied sites sharing a place keep the first one listed. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cif.h>
#include <cif_error.h>
#include <spglib.h>

#include "runtime/error.h"
#include "sim/cbed/cbed.h"

#define MERGE_A 0.02

struct ops {
  int n;
  int rot[192][3][3];
  double tr[192][3];
};

static void to_ascii(const UChar *u, char *out, size_t len) {
  size_t i = 0;
  for (; u && u[i] && i + 1 < len; i++) out[i] = u[i] < 128 ? (char)u[i] : '?';
  out[i] = 0;
}

static const char *cif_reason(int code) { return code >= 0 && code < cif_nerr ? cif_errlist[code] : "error"; }

/* The text of a value (numbers as written), or -1. */
static int value_text(cif_value_tp *v, char *out, size_t len) {
  UChar *u = NULL;
  if (cif_value_get_text(v, &u) != CIF_OK || !u) return -1;
  to_ascii(u, out, len);
  free(u);
  return 0;
}

/* Scalar item `name` of the block: its text, or -1 when absent. */
static int item_text(cif_block_tp *b, const char *name, char *out, size_t len) {
  UChar *un = NULL;
  cif_value_tp *v = NULL;
  int rc = -1;
  if (cif_cstr_to_ustr(name, -1, &un) == CIF_OK && cif_container_get_value(b, un, &v) == CIF_OK)
    rc = value_text(v, out, len);
  if (v) cif_value_free(v);
  free(un);
  return rc;
}

/* A number without its standard uncertainty: "5.431(2)" is 5.431. */
static int parse_number(const char *s, double *out) {
  char *end;
  *out = strtod(s, &end);
  return end != s && (*end == 0 || *end == '(') ? 0 : -1;
}

/* One operation "-x+1/2, y, z-1/4" (also "1/2+x", "x-y", "+0.5-z"). */
static int parse_op(const char *s, int rot[3][3], double tr[3]) {
  memset(rot, 0, sizeof(int[3][3]));
  memset(tr, 0, sizeof(double[3]));
  const char *p = s;
  for (int row = 0; row < 3; row++) {
    double sign = 1;
    int terms = 0;
    for (; *p && *p != ','; p++) {
      char ch = (char)tolower((unsigned char)*p);
      if (isspace((unsigned char)ch)) continue;
      if (ch == '+' || ch == '-') {
        sign = ch == '-' ? -1 : 1;
      } else if (ch >= 'x' && ch <= 'z') {
        rot[row][ch - 'x'] += (int)sign, sign = 1, terms++;
      } else if (isdigit((unsigned char)ch) || ch == '.') {
        char *e;
        double num = strtod(p, &e);
        if (*e == '/') {
          double den = strtod(e + 1, &e);
          if (!(den > 0)) return -1;
          num /= den;
        }
        tr[row] += sign * num, sign = 1, terms++;
        p = e - 1;
      } else {
        return -1;
      }
    }
    if (!terms || (row < 2 && *p != ',')) return -1;
    if (*p == ',') p++;
  }
  while (isspace((unsigned char)*p)) p++;
  return *p == 0 ? 0 : -1;
}

/* The packets of the loop holding `name`, calling fn(packet) for each; -1 when the item is absent. */
static int each_packet(cif_block_tp *b, const char *name, int (*fn)(cif_packet_tp *, void *), void *user) {
  UChar *un = NULL;
  cif_loop_tp *loop = NULL;
  cif_pktitr_tp *it = NULL;
  cif_packet_tp *pk = NULL;
  int rc = -1;
  if (cif_cstr_to_ustr(name, -1, &un) == CIF_OK && cif_container_get_item_loop(b, un, &loop) == CIF_OK &&
      cif_loop_get_packets(loop, &it) == CIF_OK) {
    rc = 0;
    while (rc == 0 && cif_pktitr_next_packet(it, &pk) == CIF_OK) rc = fn(pk, user);
  }
  if (it && cif_pktitr_close(it) != CIF_OK) rc = -1;
  if (pk) cif_packet_free(pk);
  if (loop) cif_loop_free(loop);
  free(un);
  return rc;
}

static int packet_text(cif_packet_tp *pk, const char *name, char *out, size_t len) {
  UChar *un = NULL;
  cif_value_tp *v = NULL; /* owned by the packet */
  int rc = cif_cstr_to_ustr(name, -1, &un) == CIF_OK && cif_packet_get_item(pk, un, &v) == CIF_OK && v
               ? value_text(v, out, len)
               : -1;
  free(un);
  return rc;
}

struct op_reader {
  const char *name;
  struct ops *ops;
  char bad[128];
};

static int read_op(cif_packet_tp *pk, void *user) {
  struct op_reader *r = user;
  char text[128];
  if (packet_text(pk, r->name, text, sizeof text) != 0 || r->ops->n == 192 ||
      parse_op(text, r->ops->rot[r->ops->n], r->ops->tr[r->ops->n]) != 0) {
    snprintf(r->bad, sizeof r->bad, "%s", text);
    return -1;
  }
  r->ops->n++;
  return 0;
}

/* Spaces, underscores and case do not count: "P 42/m n m" is spglib's "P4_2/mnm". */
static int same_symbol(const char *a, const char *b) {
  for (;; a++, b++) {
    while (*a == ' ' || *a == '_') a++;
    while (*b == ' ' || *b == '_') b++;
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    if (!*a) return 1;
  }
}

/* Hall number from the Hall symbol, the H-M symbol (":2", ":H" choosing the setting) or the number. */
static int hall_number(cif_block_tp *b, char *what, size_t len) {
  static const char *hall[] = {"_space_group_name_Hall", "_symmetry_space_group_name_Hall"};
  static const char *hm[] = {"_space_group_name_H-M_alt", "_symmetry_space_group_name_H-M"};
  static const char *num[] = {"_space_group_IT_number", "_symmetry_Int_Tables_number"};
  char s[64];
  for (int k = 0; k < 2; k++)
    if (item_text(b, hall[k], s, sizeof s) == 0)
      for (int h = 1; h <= 530; h++)
        if (same_symbol(spg_get_spacegroup_type(h).hall_symbol, s)) return snprintf(what, len, "%s '%s'", hall[k], s), h;
  for (int k = 0; k < 2; k++)
    if (item_text(b, hm[k], s, sizeof s) == 0) {
      char *colon = strchr(s, ':'), *choice = colon ? colon + 1 : NULL;
      if (colon) *colon = 0;
      for (int h = 1; h <= 530; h++) {
        SpglibSpacegroupType t = spg_get_spacegroup_type(h);
        if (same_symbol(t.international_short, s) && (!choice || same_symbol(t.choice, choice)))
          return snprintf(what, len, "%s '%s' (setting %s)", hm[k], s, t.choice[0] ? t.choice : "standard"), h;
      }
    }
  double d;
  for (int k = 0; k < 2; k++)
    if (item_text(b, num[k], s, sizeof s) == 0 && parse_number(s, &d) == 0)
      for (int h = 1; h <= 530; h++)
        if (spg_get_spacegroup_type(h).number == (int)d) return snprintf(what, len, "%s %d", num[k], (int)d), h;
  return 0;
}

struct site_reader {
  struct cbed_crystal *c;
  const struct ops *ops;
  char bad[160];
  int oom;
};

/* The element of a type symbol or label: "Sr", "O2-", "Ti1", "SI4" (two letters when they name one). */
static int element_of(const char *s) {
  char two[3] = {s[0], s[0] ? s[1] : 0, 0}, one[2] = {s[0], 0};
  if (isalpha((unsigned char)two[1]) && _tsr_cbed_element_parse(two)) return _tsr_cbed_element_parse(two);
  return _tsr_cbed_element_parse(one);
}

static int read_site(cif_packet_tp *pk, void *user) {
  struct site_reader *r = user;
  static const char *xyz[3] = {"_atom_site_fract_x", "_atom_site_fract_y", "_atom_site_fract_z"};
  char text[64], label[64] = "?";
  double f[3];
  if (packet_text(pk, "_atom_site_type_symbol", label, sizeof label) != 0)
    packet_text(pk, "_atom_site_label", label, sizeof label);
  int zn = element_of(label);
  if (!zn) return snprintf(r->bad, sizeof r->bad, "site '%s': no element of Z = 1..103 in its type or label", label), -1;
  for (int k = 0; k < 3; k++)
    if (packet_text(pk, xyz[k], text, sizeof text) != 0 || parse_number(text, &f[k]) != 0)
      return snprintf(r->bad, sizeof r->bad, "site '%s': %s is not a number", label, xyz[k]), -1;
  for (int o = 0; o < r->ops->n; o++) {
    double g[3];
    for (int i = 0; i < 3; i++)
      g[i] = r->ops->rot[o][i][0] * f[0] + r->ops->rot[o][i][1] * f[1] + r->ops->rot[o][i][2] * f[2] + r->ops->tr[o][i];
    if (_tsr_cbed_crystal_add(r->c, zn, g, MERGE_A) < 0) return r->oom = 1, -1;
  }
  return 0;
}

/* Everything after parsing: the block's cell, operations and sites into c. */
static tsr_status read_block(const char *path, cif_block_tp *b, struct cbed_crystal *c, struct ops *ops) {
  static const char *cellnames[6] = {"_cell_length_a", "_cell_length_b", "_cell_length_c",
                                     "_cell_angle_alpha", "_cell_angle_beta", "_cell_angle_gamma"};
  char text[64];
  double cell[6];
  for (int k = 0; k < 6; k++) {
    if (item_text(b, cellnames[k], text, sizeof text) != 0)
      return _tsr_error(TSR_ERR_FORMAT, "%s: no %s", path, cellnames[k]);
    if (parse_number(text, &cell[k]) != 0)
      return _tsr_error(TSR_ERR_FORMAT, "%s: %s '%s' is not a number", path, cellnames[k], text);
  }
  if (_tsr_cbed_crystal_set_cell(c, cell) != 0)
    return _tsr_error(TSR_ERR_FORMAT, "%s: cell %g %g %g %g %g %g is not a cell", path, cell[0], cell[1], cell[2],
                      cell[3], cell[4], cell[5]);
  static const char *opnames[] = {"_space_group_symop_operation_xyz", "_symmetry_equiv_pos_as_xyz",
                                  "_space_group_symop.operation_xyz"};
  int found = 0;
  for (int k = 0; k < 3 && !found; k++) {
    struct op_reader r = {.name = opnames[k], .ops = ops};
    int rc = each_packet(b, opnames[k], read_op, &r);
    if (rc == 0 && ops->n > 0) found = 1;
    else if (rc != 0 && r.bad[0]) return _tsr_error(TSR_ERR_FORMAT, "%s: %s '%s' is not an operation", path, opnames[k], r.bad);
  }
  char what[128];
  if (!found) {
    int h = hall_number(b, what, sizeof what);
    if (!h)
      return _tsr_error(TSR_ERR_FORMAT, "%s: no symmetry: neither %s nor a Hall symbol, H-M symbol or space group "
                        "number that spglib knows", path, opnames[0]);
    ops->n = spg_get_symmetry_from_database(ops->rot, ops->tr, h);
    if (ops->n < 1) return _tsr_error(TSR_ERR_FORMAT, "%s: spglib has no operations for %s", path, what);
  }
  struct site_reader r = {.c = c, .ops = ops};
  if (each_packet(b, "_atom_site_fract_x", read_site, &r) != 0) {
    if (r.oom) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
    return r.bad[0] ? _tsr_error(TSR_ERR_FORMAT, "%s: %s", path, r.bad)
                    : _tsr_error(TSR_ERR_FORMAT, "%s: no _atom_site_fract_x loop", path);
  }
  if (c->n == 0) return _tsr_error(TSR_ERR_FORMAT, "%s: no atoms", path);
  return TSR_OK;
}

tsr_status _tsr_cbed_crystal_read_cif(const char *path, struct cbed_crystal *c) {
  *c = (struct cbed_crystal){0};
  FILE *f = fopen(path, "rb");
  if (!f) return _tsr_error(TSR_ERR_IO, "%s: cannot open", path);
  cif_tp *cif = NULL;
  cif_block_tp **blocks = NULL;
  struct ops *ops = calloc(1, sizeof *ops);
  int rc = ops ? cif_parse(f, NULL, &cif) : CIF_ERROR;
  fclose(f);
  tsr_status st = TSR_OK;
  if (!ops) st = _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
  else if (rc != CIF_OK) st = _tsr_error(TSR_ERR_FORMAT, "%s: not a CIF file (%s)", path, cif_reason(rc));
  else if (cif_get_all_blocks(cif, &blocks) != CIF_OK || !blocks || !blocks[0])
    st = _tsr_error(TSR_ERR_FORMAT, "%s: no data block", path);
  if (st == TSR_OK) {
    UChar *code = NULL;
    if (cif_container_get_code(blocks[0], &code) == CIF_OK) to_ascii(code, c->name, sizeof c->name);
    free(code);
    snprintf(c->source, sizeof c->source, "%s", path);
    st = read_block(path, blocks[0], c, ops);
  }
  for (int i = 0; blocks && blocks[i]; i++) cif_block_free(blocks[i]);
  free(blocks);
  if (cif && cif_destroy(cif) != CIF_OK && st == TSR_OK) st = _tsr_error(TSR_ERR_IO, "%s: cannot release the parse", path);
  free(ops);
  if (st != TSR_OK) {
    _tsr_cbed_crystal_free(c);
    return st;
  }
  _tsr_cbed_crystal_find_spacegroup(c);
  return TSR_OK;
}

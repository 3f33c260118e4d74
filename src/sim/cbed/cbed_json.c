/* CBED settings as a JSON file (cbed.json): one object whose fields are tessera-cbed's long options
 * ("kv": 200, "thickness": [20, 80], "structures": ["si", "cu", "crystal"], "cif": ["stem/Si.cif"],
 * "zones": ["001"], "zone_index": 2, "tilt": 5, "rotation": 360, "elements": [1, 103],
 * "density": [0.03, 0.08], "shift": false, ...); kv, alpha, defocus, cs, a1 and b2 take a number or a
 * range [A, B] drawn per sample, u2 an object {"Si": 0.0058, "O": 0.0074}. Fields left out keep tsr_cbed_opts_default's values; an unknown field,
 * a value of the wrong type and a value out of range are errors naming the file and the field. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "runtime/error.h"
#include "sim/cbed/cbed.h"

#define FIELDS                                                                                                 \
  "seed, kv, alpha, defocus, cs, grid, pattern, target, probes, fov, thickness, slice, blur, structures, zones, " \
  "cif, zone_index, tilt, rotation, shift, atoms, elements, sites, min_distance, density, prototypes, exclude_formulas, intensity, floor, " \
  "max_angle, a1, b2, source, coherence_samples, phonons, u2, detector_mrad, dose, psf, scan"

static tsr_status bad(const char *path, const char *key, const char *want) {
  return _tsr_error(TSR_ERR_ARG, "%s: field '%s' must be %s", path, key, want);
}

static tsr_status number(const char *path, const char *key, const json_t *v, double *out) {
  if (!json_is_number(v)) return bad(path, key, "a number");
  *out = json_number_value(v);
  return TSR_OK;
}

static tsr_status integer(const char *path, const char *key, const json_t *v, int *out) {
  double d = 0;
  if (number(path, key, v, &d) != TSR_OK || d != floor(d) || fabs(d) > 1e9) return bad(path, key, "an integer");
  *out = (int)d;
  return TSR_OK;
}

/* A number A, or a range [A, B]. */
static tsr_status range(const char *path, const char *key, const json_t *v, double *lo, double *hi) {
  if (json_is_number(v)) return number(path, key, v, lo) == TSR_OK ? number(path, key, v, hi) : TSR_ERR_ARG;
  if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_number(json_array_get(v, 0)) ||
      !json_is_number(json_array_get(v, 1)))
    return bad(path, key, "a number or a range [A, B]");
  *lo = json_number_value(json_array_get(v, 0)), *hi = json_number_value(json_array_get(v, 1));
  return TSR_OK;
}

/* A value drawn per sample: a number, or a range [A, B] = centre and half-width. */
static tsr_status drawn(const char *path, const char *key, const json_t *v, double *value, double *spread) {
  double lo, hi;
  TSR_TRY(range(path, key, v, &lo, &hi));
  if (hi < lo) return bad(path, key, "a number or a range [A, B] with A <= B");
  *value = lo == hi ? lo : 0.5 * (lo + hi), *spread = 0.5 * (hi - lo);
  return TSR_OK;
}

static tsr_status u2(const char *path, const json_t *v, tsr_cbed_opts *o) {
  const char *el;
  json_t *e;
  if (!json_is_object(v)) return bad(path, "u2", "an object of element: mean square displacement (A^2)");
  json_object_foreach((json_t *)v, el, e) {
    char item[64];
    if (!json_is_number(e) || snprintf(item, sizeof item, "%s:%.17g", el, json_number_value(e)) >= (int)sizeof item ||
        tsr_cbed_u2_parse(item, o) != TSR_OK)
      return bad(path, "u2", "an object of element: mean square displacement in (0, 1] A^2");
  }
  return TSR_OK;
}

static tsr_status structures(const char *path, const json_t *v, unsigned *mask) {
  size_t i;
  json_t *e;
  *mask = 0;
  if (!json_is_array(v)) return bad(path, "structures", "a list of si, srtio3, cu, random, crystal, prototype");
  json_array_foreach(v, i, e) {
    tsr_cbed_structure s;
    if (!json_is_string(e) || tsr_cbed_structure_parse(json_string_value(e), &s) != TSR_OK)
      return bad(path, "structures", "a list of si, srtio3, cu, random, crystal, prototype");
    *mask |= 1u << s;
  }
  return TSR_OK;
}

static tsr_status zones(const char *path, const json_t *v, unsigned *mask) {
  static const char *names[] = {"001", "110", "111"};
  size_t i;
  json_t *e;
  *mask = 0;
  if (!json_is_array(v)) return bad(path, "zones", "a list of \"001\", \"110\", \"111\"");
  json_array_foreach(v, i, e) {
    int z = 0;
    while (z < 3 && !(json_is_string(e) && !strcmp(json_string_value(e), names[z]))) z++;
    if (z == 3) return bad(path, "zones", "a list of \"001\", \"110\", \"111\"");
    *mask |= 1u << z;
  }
  return TSR_OK;
}

/* A file name or a list of them, joined with commas into o->cif. */
static tsr_status cif_list(const char *path, const json_t *v, tsr_cbed_opts *o) {
  const char *want = "a CIF file name or a list of them (no commas in names)";
  size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0, at = 0;
  if (!n) return bad(path, "cif", want);
  o->cif[0] = 0;
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_is_string(v) ? v : json_array_get(v, i);
    const char *name = json_is_string(e) ? json_string_value(e) : NULL;
    size_t len = name ? strlen(name) : 0;
    if (!len || strchr(name, ',') || at + len + 2 > sizeof o->cif) return bad(path, "cif", want);
    at += (size_t)snprintf(o->cif + at, sizeof o->cif - at, "%s%s", at ? "," : "", name);
  }
  return TSR_OK;
}

static tsr_status field(const char *path, const char *k, const json_t *v, tsr_cbed_opts *o) {
  double lo, hi;
  if (!strcmp(k, "seed")) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return bad(path, k, "a non-negative integer");
    o->seed = (uint64_t)json_integer_value(v);
    return TSR_OK;
  }
  if (!strcmp(k, "kv")) return drawn(path, k, v, &o->kv, &o->kv_spread);
  if (!strcmp(k, "alpha")) return drawn(path, k, v, &o->alpha_mrad, &o->alpha_spread);
  if (!strcmp(k, "defocus")) return drawn(path, k, v, &o->defocus, &o->defocus_spread);
  if (!strcmp(k, "cs")) return drawn(path, k, v, &o->cs_mm, &o->cs_spread);
  if (!strcmp(k, "a1")) return drawn(path, k, v, &o->a1, &o->a1_spread);
  if (!strcmp(k, "b2")) return drawn(path, k, v, &o->b2, &o->b2_spread);
  if (!strcmp(k, "max_angle")) return number(path, k, v, &o->max_angle_mrad);
  if (!strcmp(k, "source")) return number(path, k, v, &o->source_A);
  if (!strcmp(k, "coherence_samples")) return integer(path, k, v, &o->coherence_samples);
  if (!strcmp(k, "phonons")) return integer(path, k, v, &o->phonons);
  if (!strcmp(k, "detector_mrad")) return number(path, k, v, &o->det_mrad);
  if (!strcmp(k, "dose")) return number(path, k, v, &o->dose);
  if (!strcmp(k, "psf")) return number(path, k, v, &o->det_psf);
  if (!strcmp(k, "scan")) return number(path, k, v, &o->scan_A);
  if (!strcmp(k, "u2")) return u2(path, v, o);
  if (!strcmp(k, "grid")) return integer(path, k, v, &o->grid);
  if (!strcmp(k, "pattern")) return integer(path, k, v, &o->pattern);
  if (!strcmp(k, "target")) return integer(path, k, v, &o->target);
  if (!strcmp(k, "probes")) return integer(path, k, v, &o->probes);
  if (!strcmp(k, "fov")) return number(path, k, v, &o->fov);
  if (!strcmp(k, "thickness")) return range(path, k, v, &o->thickness_min, &o->thickness_max);
  if (!strcmp(k, "slice")) return number(path, k, v, &o->slice);
  if (!strcmp(k, "blur")) return number(path, k, v, &o->blur);
  if (!strcmp(k, "structures")) return structures(path, v, &o->structures);
  if (!strcmp(k, "zones")) return zones(path, v, &o->zones);
  if (!strcmp(k, "cif")) return cif_list(path, v, o);
  if (!strcmp(k, "zone_index")) return integer(path, k, v, &o->zone_index);
  if (!strcmp(k, "tilt")) return number(path, k, v, &o->tilt_mrad);
  if (!strcmp(k, "rotation")) return number(path, k, v, &o->rotation_deg);
  if (!strcmp(k, "sites")) return integer(path, k, v, &o->sites);
  if (!strcmp(k, "min_distance")) return number(path, k, v, &o->min_distance);
  if (!strcmp(k, "density")) return range(path, k, v, &o->density_min, &o->density_max);
  if (!strcmp(k, "prototypes") || !strcmp(k, "exclude_formulas")) {
    char buf[512] = "";
    if (!json_is_array(v)) return bad(path, k, "a list of strings");
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
      if (!json_is_string(e) || strlen(buf) + strlen(json_string_value(e)) + 2 > sizeof buf) return bad(path, k, "a list of strings");
      snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", *buf ? "," : "", json_string_value(e));
    }
    if (!strcmp(k, "exclude_formulas")) {
      if (strlen(buf) >= sizeof o->exclude) return bad(path, k, "a shorter list");
      snprintf(o->exclude, sizeof o->exclude, "%s", buf);
      return TSR_OK;
    }
    if (tsr_cbed_prototypes_parse(buf, &o->prototypes) != TSR_OK) return bad(path, k, "a list of prototype names");
    return TSR_OK;
  }
  if (!strcmp(k, "elements")) {
    TSR_TRY(range(path, k, v, &lo, &hi));
    if (lo != floor(lo) || hi != floor(hi) || lo < 1 || hi > 103) return bad(path, k, "atomic numbers [A, B] in 1..103");
    o->zmin = (int)lo, o->zmax = (int)hi;
    return TSR_OK;
  }
  if (!strcmp(k, "floor")) return number(path, k, v, &o->intensity_floor);
  if (!strcmp(k, "atoms")) {
    TSR_TRY(range(path, k, v, &lo, &hi));
    if (lo != floor(lo) || hi != floor(hi) || lo < 1 || hi > 1e6) return bad(path, k, "whole numbers of atoms");
    o->random_atoms_min = (int)lo, o->random_atoms_max = (int)hi;
    return TSR_OK;
  }
  if (!strcmp(k, "shift")) {
    if (!json_is_boolean(v)) return bad(path, k, "true or false");
    o->shift = json_is_true(v);
    return TSR_OK;
  }
  if (!strcmp(k, "raw_target"))
    return _tsr_error(TSR_ERR_ARG, "%s: field 'raw_target' is gone: the target is always the potential in V A", path);
  if (!strcmp(k, "intensity")) {
    static const char *names[] = {[TSR_CBED_LINEAR] = "linear", [TSR_CBED_SQRT] = "sqrt", [TSR_CBED_LOG] = "log"};
    for (int i = 0; i < 3; i++)
      if (json_is_string(v) && !strcmp(json_string_value(v), names[i])) {
        o->intensity = (tsr_cbed_intensity)i;
        return TSR_OK;
      }
    return bad(path, k, "\"log\", \"sqrt\" or \"linear\"");
  }
  return _tsr_error(TSR_ERR_ARG, "%s: unknown field '%s' (known: " FIELDS ")", path, k);
}

tsr_status tsr_cbed_opts_load_json(const char *path, tsr_cbed_opts *o) {
  if (!path || !o) return _tsr_error(TSR_ERR_ARG, "tsr_cbed_opts_load_json: %s is NULL", path ? "o" : "path");
  tsr_cbed_opts_default(o);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) return _tsr_error(TSR_ERR_FORMAT, "%s:%d: %s", path, err.line, err.text);
  tsr_status st = json_is_object(root) ? TSR_OK : _tsr_error(TSR_ERR_FORMAT, "%s: not a JSON object", path);
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (st == TSR_OK) st = field(path, key, v, o);
  }
  json_decref(root);
  if (st == TSR_OK && tsr_cbed_opts_check(o) != TSR_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tsr_last_error());
    st = _tsr_error(TSR_ERR_ARG, "%s: %s", path, msg);
  }
  return st;
}

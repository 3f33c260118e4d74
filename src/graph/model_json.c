/* Model files: reads the JSON format of docs/model-format.md (layers, output, loss, optimizer) with
 * jansson and builds the model through the public builder API; which fields a layer type takes,
 * and their form, come from its registry entry (src/layers). Every error names the file, a
 * best-effort line, the layer (index and name) or section, and the field; jansson keeps no positions
 * for values, so a layer's line is found by scanning the text for its `"name": "<name>"` pair. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <tessera/model.h>
#include <tessera/schedule.h>
#include <tessera/train.h>

#include "layers/layer.h"
#include "optim/optim.h"
#include "runtime/error.h"

/* Where the reader is, for messages. */
typedef struct jctx {
  const char *path;
  const char *text;   /* whole file, NUL-terminated */
  const char *scan;   /* the next layer's name is searched from here, so layers are found in order */
  int line;           /* 0 = unknown */
  char where[160];    /* "layers[3] ('enc1')", "optimizer", or "" at the top level */
} jctx;

static tsr_status fail(const jctx *c, tsr_status s, const char *field, const char *fmt, ...) TSR_PRINTF(4, 5);

static tsr_status fail(const jctx *c, tsr_status s, const char *field, const char *fmt, ...) {
  char msg[640], pos[24] = "", fld[96] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (c->line > 0) snprintf(pos, sizeof pos, ":%d", c->line);
  if (field) snprintf(fld, sizeof fld, "field '%s': ", field);
  return _tsr_error(s, "%s%s: %s%s%s%s", c->path, pos, c->where, c->where[0] ? ": " : "", fld, msg);
}

/* Short JSON rendering of a value for "got ..." in messages. */
static const char *show(const json_t *v, char *buf, size_t len) {
  char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  if (!s)
    snprintf(buf, len, "?");
  else if (strlen(s) > 40)
    snprintf(buf, len, "%.37s...", s);
  else
    snprintf(buf, len, "%s", s);
  free(s);
  return buf;
}

#define GOT(v) show((v), got, sizeof got)

static int line_at(const char *text, const char *p) {
  int n = 1;
  for (; text < p; text++) n += *text == '\n';
  return n;
}

/* First `"key" : "value"` (or `"key" :` when value is NULL) at or after `from`; NULL if none. */
static const char *find_key(const char *from, const char *key, const char *value) {
  char pat[96];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  for (const char *p = strstr(from, pat); p; p = strstr(p + 1, pat)) {
    const char *q = p + strlen(pat);
    q += strspn(q, " \t\r\n");
    if (*q != ':') continue;
    if (!value) return p;
    q += 1 + strspn(q + 1, " \t\r\n");
    size_t n = strlen(value);
    if (*q == '"' && strncmp(q + 1, value, n) == 0 && q[1 + n] == '"') return p;
  }
  return NULL;
}

static void enter_section(jctx *c, const char *key) {
  const char *p = find_key(c->text, key, NULL);
  c->line = p ? line_at(c->text, p) : 0;
  snprintf(c->where, sizeof c->where, "%s", key);
}

static tsr_status get_int(const jctx *c, const json_t *v, const char *field, int min, int *out) {
  char got[48];
  if (json_is_integer(v) && json_integer_value(v) >= min && json_integer_value(v) <= INT_MAX) {
    *out = (int)json_integer_value(v);
    return TSR_OK;
  }
  return fail(c, TSR_ERR_FORMAT, field, "expected a %s integer, got %s", min > 0 ? "positive" : "non-negative",
              GOT(v));
}

/* An integer >= min for every one of n values, or an array of n of them ("[h, w]", "[d, h, w]"). */
static tsr_status get_tuple(const jctx *c, const json_t *v, const char *field, int min, int n, int *const *out) {
  char got[48];
  int arr = json_is_array(v) && json_array_size(v) == (size_t)n, ok = 1;
  for (int k = 0; k < n && ok; k++) {
    const json_t *e = arr ? json_array_get(v, (size_t)k) : v;
    ok = json_is_integer(e) && json_integer_value(e) >= min && json_integer_value(e) <= INT_MAX;
    if (ok) *out[k] = (int)json_integer_value(e);
  }
  if (ok) return TSR_OK;
  return fail(c, TSR_ERR_FORMAT, field, "expected a %s integer or %s, got %s", min > 0 ? "positive" : "non-negative",
              n == 3 ? "[d, h, w]" : "[h, w]", GOT(v));
}

static tsr_status get_pair(const jctx *c, const json_t *v, const char *field, int min, int *h, int *w) {
  return get_tuple(c, v, field, min, 2, (int *const[]){h, w});
}

static tsr_status get_triple(const jctx *c, const json_t *v, const char *field, int min, int *d, int *h, int *w) {
  return get_tuple(c, v, field, min, 3, (int *const[]){d, h, w});
}

enum range { R_ANY, R_POS, R_NONNEG, R_PROB, R_UNIT };

static tsr_status get_num(const jctx *c, const json_t *v, const char *field, enum range r, float *out) {
  static const char *const what[] = {"a number", "a positive number", "a non-negative number",
                                     "a number in [0, 1)", "a number in [0, 1]"};
  char got[48];
  double x = json_number_value(v);
  int ok = json_is_number(v) && isfinite(x);
  if (ok && r == R_POS) ok = x > 0;
  if (ok && r == R_NONNEG) ok = x >= 0;
  if (ok && r == R_PROB) ok = x >= 0 && x < 1;
  if (ok && r == R_UNIT) ok = x >= 0 && x <= 1;
  if (!ok) return fail(c, TSR_ERR_FORMAT, field, "expected %s, got %s", what[r], GOT(v));
  *out = (float)x;
  return TSR_OK;
}

static tsr_status get_bool(const jctx *c, const json_t *v, const char *field, int *out) {
  char got[48];
  if (!json_is_boolean(v)) return fail(c, TSR_ERR_FORMAT, field, "expected true or false, got %s", GOT(v));
  *out = json_is_true(v);
  return TSR_OK;
}

static const struct _tsr_layer_field *field_of(const struct _tsr_layer_ops *ops, const char *key) {
  for (const struct _tsr_layer_field *f = ops->fields; f && f->name; f++)
    if (strcmp(f->name, key) == 0) return f;
  return NULL;
}

/* Rejects fields the layer type does not take and reports missing required ones. Every type takes
 * name and type, types with inputs take input or inputs, and the rest comes from the registry. */
static tsr_status check_fields(const jctx *c, const json_t *o, const struct _tsr_layer_ops *ops) {
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)o, key, v) {
    int common = strcmp(key, "name") == 0 || strcmp(key, "type") == 0 ||
                 (ops->max_inputs > 0 && (strcmp(key, "input") == 0 || strcmp(key, "inputs") == 0));
    if (common || field_of(ops, key)) continue;
    char valid[256];
    size_t n = snprintf(valid, sizeof valid, "name, type%s", ops->max_inputs > 0 ? ", input, inputs" : "");
    for (const struct _tsr_layer_field *f = ops->fields; f && f->name && n < sizeof valid; f++)
      n += snprintf(valid + n, sizeof valid - n, ", %s", f->name);
    return fail(c, TSR_ERR_FORMAT, key, "unknown field for type '%s' (valid fields: %s)", ops->name, valid);
  }
  for (const struct _tsr_layer_field *f = ops->fields; f && f->name; f++)
    if (f->required && !json_object_get(o, f->name))
      return fail(c, TSR_ERR_FORMAT, f->name, "missing (required for type '%s')", ops->name);
  return TSR_OK;
}

/* Reads one field into the spec, at the place and in the form its registry entry gives. */
static tsr_status parse_field(const jctx *c, const json_t *v, const struct _tsr_layer_field *f, tsr_layer_spec *s) {
  char got[48];
  int *i = (int *)((char *)s + f->offset);
  float *x = (float *)((char *)s + f->offset);
  switch (f->type) {
  case TSR_FIELD_SHAPE: {
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    int d[4] = {0, 0, 0, 0}, ok = n == 3 || n == 4;
    for (size_t k = 0; ok && k < n; k++) {
      const json_t *e = json_array_get(v, k);
      ok = json_is_integer(e) && json_integer_value(e) > 0 && json_integer_value(e) <= INT_MAX;
      if (ok) d[k] = (int)json_integer_value(e);
    }
    if (!ok)
      return fail(c, TSR_ERR_FORMAT, f->name, "expected [C, H, W] or [C, D, H, W] of positive integers, got %s",
                  GOT(v));
    int *depth = (int *)((char *)s + f->offset_d);
    i[0] = d[0], i[1] = d[n - 2], i[2] = d[n - 1], *depth = n == 4 ? d[1] : 0;
    return TSR_OK;
  }
  case TSR_FIELD_COUNT: return get_int(c, v, f->name, 1, i);
  case TSR_FIELD_SIZE2: return get_pair(c, v, f->name, 1, &i[0], &i[1]);
  case TSR_FIELD_PAD2: return get_pair(c, v, f->name, 0, &i[0], &i[1]);
  case TSR_FIELD_SIZE3: return get_triple(c, v, f->name, 1, (int *)((char *)s + f->offset_d), &i[0], &i[1]);
  case TSR_FIELD_PAD3: return get_triple(c, v, f->name, 0, (int *)((char *)s + f->offset_d), &i[0], &i[1]);
  case TSR_FIELD_BOOL: return get_bool(c, v, f->name, i);
  case TSR_FIELD_REAL: return get_num(c, v, f->name, R_ANY, x);
  case TSR_FIELD_POSITIVE: return get_num(c, v, f->name, R_POS, x);
  case TSR_FIELD_PROB: return get_num(c, v, f->name, R_PROB, x);
  case TSR_FIELD_UNIT: return get_num(c, v, f->name, R_UNIT, x);
  }
  return fail(c, TSR_ERR_FORMAT, f->name, "field type %d unknown to the reader", (int)f->type);
}

/* Fills the layer spec from the fields check_fields let through. */
static tsr_status parse_spec(const jctx *c, const json_t *o, const struct _tsr_layer_ops *ops, tsr_layer_spec *s) {
  for (const struct _tsr_layer_field *f = ops->fields; f && f->name; f++) {
    const json_t *v = json_object_get(o, f->name);
    if (v) TSR_TRY(parse_field(c, v, f, s));
  }
  return TSR_OK;
}

/* Index of the layer called `name` in the file, searching [from, to); -1 if none. */
static int layer_index(const json_t *layers, const char *name, size_t from, size_t to) {
  for (size_t j = from; j < to; j++) {
    const char *n = json_string_value(json_object_get(json_array_get(layers, j), "name"));
    if (n && strcmp(n, name) == 0) return (int)j;
  }
  return -1;
}

/* Checks that every input names a layer listed before layer i. */
static tsr_status check_inputs(const jctx *c, const json_t *layers, size_t i, const char *field,
                               const char **names, int n) {
  size_t total = json_array_size(layers);
  for (int k = 0; k < n; k++) {
    if (layer_index(layers, names[k], 0, i) >= 0) continue;
    int later = layer_index(layers, names[k], i, total);
    if (later == (int)i) return fail(c, TSR_ERR_FORMAT, field, "a layer cannot read its own output");
    if (later >= 0)
      return fail(c, TSR_ERR_FORMAT, field, "layer '%s' is defined later (layers[%d]); list a layer after its inputs",
                  names[k], later);
    return fail(c, TSR_ERR_FORMAT, field, "unknown layer '%s'", names[k]);
  }
  return TSR_OK;
}

/* Reads layers[i] and adds it to the model. */
static tsr_status add_layer(jctx *c, tsr_model *m, const json_t *layers, size_t i) {
  char got[48];
  const json_t *o = json_array_get(layers, i);
  snprintf(c->where, sizeof c->where, "layers[%zu]", i);
  if (!json_is_object(o)) return fail(c, TSR_ERR_FORMAT, NULL, "expected a layer object, got %s", GOT(o));
  const json_t *jn = json_object_get(o, "name");
  if (!jn) return fail(c, TSR_ERR_FORMAT, "name", "missing (every layer needs a unique name)");
  const char *name = json_string_value(jn);
  if (!name || !*name) return fail(c, TSR_ERR_FORMAT, "name", "expected a non-empty string, got %s", GOT(jn));
  snprintf(c->where, sizeof c->where, "layers[%zu] ('%s')", i, name);
  const char *at = find_key(c->scan, "name", name);
  if (at) c->scan = at + 1, c->line = line_at(c->text, at);
  int first = layer_index(layers, name, 0, i);
  if (first >= 0)
    return fail(c, TSR_ERR_FORMAT, "name", "duplicate layer name '%s' (first used by layers[%d])", name, first);

  const json_t *jt = json_object_get(o, "type");
  if (!jt) return fail(c, TSR_ERR_FORMAT, "type", "missing (every layer needs a type)");
  tsr_layer_kind kind;
  if (!json_is_string(jt) || tsr_layer_kind_parse(json_string_value(jt), &kind) != TSR_OK) {
    char known[512] = "";
    size_t n = 0;
    for (int k = 0; k < _tsr_layer_kind_count() && n < sizeof known; k++)
      n += snprintf(known + n, sizeof known - n, "%s%s", k ? ", " : "", tsr_layer_kind_name((tsr_layer_kind)k));
    return fail(c, TSR_ERR_FORMAT, "type", "unknown layer type %s (expected one of: %s)", GOT(jt), known);
  }
  const struct _tsr_layer_ops *ops = _tsr_layer_ops_of((int)kind);
  TSR_TRY(check_fields(c, o, ops));
  tsr_layer_spec spec = tsr_layer_spec_default(kind);
  TSR_TRY(parse_spec(c, o, ops, &spec));

  const json_t *in = json_object_get(o, "input"), *ins = json_object_get(o, "inputs");
  if (in && ins) return fail(c, TSR_ERR_FORMAT, "inputs", "give either 'input' or 'inputs', not both");
  const char *field = ins ? "inputs" : "input";
  int n = ops->max_inputs == 0 ? 0 : ins ? (int)json_array_size(ins) : 1;
  if (ins && (!json_is_array(ins) || n == 0))
    return fail(c, TSR_ERR_FORMAT, "inputs", "expected a non-empty array of layer names, got %s", GOT(ins));
  if (in && !json_is_string(in))
    return fail(c, TSR_ERR_FORMAT, "input", "expected a layer name (string), got %s", GOT(in));
  if (!in && !ins && ops->max_inputs > 0 && i == 0)
    return fail(c, TSR_ERR_FORMAT, "input",
                "missing: the first layer has no previous layer to read (make it an input layer)");
  const char **names = calloc(n ? (size_t)n : 1, sizeof *names);
  if (!names) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", c->path);
  for (int k = 0; k < n; k++) {
    const json_t *x = ins ? json_array_get(ins, (size_t)k) : in;
    names[k] = x ? json_string_value(x) : json_string_value(json_object_get(json_array_get(layers, i - 1), "name"));
    if (!names[k]) {
      free(names);
      return fail(c, TSR_ERR_FORMAT, "inputs", "element %d: expected a layer name (string), got %s", k, GOT(x));
    }
  }
  tsr_status s = check_inputs(c, layers, i, field, names, n);
  if (s == TSR_OK) {
    s = tsr_model_add(m, name, &spec, names, n);
    if (s != TSR_OK) {
      char why[512];
      snprintf(why, sizeof why, "%s", tsr_last_error());
      s = fail(c, s == TSR_ERR_SHAPE || s == TSR_ERR_NOMEM ? s : TSR_ERR_FORMAT, NULL, "%s", why);
    }
  }
  free(names);
  return s;
}

/* Reads "gradient_groups": "layer" (one group per layer) or a size in bytes. */
static tsr_status parse_groups(jctx *c, tsr_model *m, const json_t *root) {
  char got[48];
  const json_t *jg = json_object_get(root, "gradient_groups");
  if (!jg) return TSR_OK;
  enter_section(c, "gradient_groups");
  c->where[0] = '\0';
  if (json_is_string(jg) && strcmp(json_string_value(jg), "layer") == 0) return tsr_model_set_group_bytes(m, -1);
  if (json_is_integer(jg) && json_integer_value(jg) > 0) return tsr_model_set_group_bytes(m, json_integer_value(jg));
  return fail(c, TSR_ERR_FORMAT, "gradient_groups", "expected \"layer\" or a positive size in bytes, got %s", GOT(jg));
}

/* Reads "output" and "loss" and sets them on the model. */
static tsr_status parse_output(jctx *c, tsr_model *m, const json_t *root) {
  char got[48];
  const json_t *jo = json_object_get(root, "output");
  const char *out = tsr_model_layer_name(m, tsr_model_num_layers(m) - 1);
  if (jo) {
    enter_section(c, "output");
    c->where[0] = '\0';
    out = json_string_value(jo);
    if (!out) return fail(c, TSR_ERR_FORMAT, "output", "expected a layer name (string), got %s", GOT(jo));
    if (tsr_model_layer_shape(m, out, NULL, NULL, NULL) != TSR_OK)
      return fail(c, TSR_ERR_FORMAT, "output", "unknown layer '%s'", out);
  }
  tsr_loss_kind loss = TSR_LOSS_MSE;
  float delta = 1.0f;
  const json_t *jl = json_object_get(root, "loss");
  if (jl) {
    enter_section(c, "loss");
    if (!json_is_object(jl)) return fail(c, TSR_ERR_FORMAT, NULL, "expected an object {\"type\": ...}, got %s", GOT(jl));
    const json_t *jt = json_object_get(jl, "type");
    if (!jt) return fail(c, TSR_ERR_FORMAT, "type", "missing");
    if (!json_is_string(jt) || tsr_loss_kind_parse(json_string_value(jt), &loss) != TSR_OK)
      return fail(c, TSR_ERR_FORMAT, "type", "unknown loss type %s (expected mse, l1, huber, softmax_cross_entropy)",
                  GOT(jt));
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)jl, key, v) {
      if (strcmp(key, "type") == 0) continue;
      if (strcmp(key, "delta") == 0 && loss == TSR_LOSS_HUBER) {
        TSR_TRY(get_num(c, v, "delta", R_POS, &delta));
        continue;
      }
      return fail(c, TSR_ERR_FORMAT, key, "unknown field for loss '%s'%s", tsr_loss_kind_name(loss),
                  loss == TSR_LOSS_HUBER ? " (valid fields: type, delta)" : " (valid fields: type)");
    }
  }
  tsr_status s = tsr_model_set_output(m, out, loss, delta);
  if (s != TSR_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", tsr_last_error());
    return fail(c, s == TSR_ERR_SHAPE ? s : TSR_ERR_FORMAT, NULL, "%s", why);
  }
  return TSR_OK;
}

/* Reads one hyperparameter into the spec, at the place and in the form its registry entry gives. */
static tsr_status parse_hyper(const jctx *c, const json_t *v, const struct _tsr_optim_hyper *h, tsr_optim_spec *o) {
  char got[48];
  float *x[2] = {(float *)((char *)o + h->offset[0]), (float *)((char *)o + h->offset[1])};
  switch (h->type) {
  case TSR_HYPER_POSITIVE: return get_num(c, v, h->key, R_POS, x[0]);
  case TSR_HYPER_NONNEG: return get_num(c, v, h->key, R_NONNEG, x[0]);
  case TSR_HYPER_PROB: return get_num(c, v, h->key, R_PROB, x[0]);
  case TSR_HYPER_BOOL: return get_bool(c, v, h->key, (int *)x[0]);
  case TSR_HYPER_PROB_PAIR: {
    const json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
    if (json_array_size(v) != 2 || !json_is_number(a) || !json_is_number(b) || !(json_number_value(a) >= 0) ||
        !(json_number_value(a) < 1) || !(json_number_value(b) >= 0) || !(json_number_value(b) < 1))
      return fail(c, TSR_ERR_FORMAT, h->key, "expected [%s, %s] with both in [0, 1), got %s", h->name[0], h->name[1],
                  GOT(v));
    *x[0] = (float)json_number_value(a);
    *x[1] = (float)json_number_value(b);
    return TSR_OK;
  }
  case TSR_HYPER_NAMES: { /* "a,b*" or ["a", "b*"]: one comma-separated string of non-empty names */
    char *out = (char *)o + h->offset[0];
    size_t len = 0, n = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < n; i++) {
      const json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
      const char *str = json_is_string(e) ? json_string_value(e) : NULL;
      if (!str || !str[0])
        return fail(c, TSR_ERR_FORMAT, h->key, "expected a non-empty string or an array of them (layer or tensor "
                    "name patterns), got %s", GOT(e));
      len += (size_t)snprintf(out + len, len < TSR_OPTIM_NAMES ? TSR_OPTIM_NAMES - len : 0, "%s%s", i ? "," : "", str);
      if (len >= TSR_OPTIM_NAMES)
        return fail(c, TSR_ERR_FORMAT, h->key, "longer than %d characters in all", TSR_OPTIM_NAMES - 1);
    }
    if (n == 0) return fail(c, TSR_ERR_FORMAT, h->key, "expected at least one name pattern, got an empty array");
    return TSR_OK;
  }
  }
  return fail(c, TSR_ERR_FORMAT, h->key, "hyperparameter type %d unknown to the reader", (int)h->type);
}

/* Reads the optimizer's "schedule" into *s: "type" names the kind, the other keys are its fields
 * (numbers, per_step true or false, milestones an array); src/optim's registry checks them. */
static tsr_status parse_schedule(jctx *c, const json_t *js, tsr_schedule_spec *s) {
  char got[48], why[512];
  enter_section(c, "schedule");
  snprintf(c->where, sizeof c->where, "optimizer: schedule");
  if (!json_is_object(js)) return fail(c, TSR_ERR_FORMAT, NULL, "expected an object {\"type\": ...}, got %s", GOT(js));
  const json_t *jt = json_object_get(js, "type");
  tsr_schedule_kind kind;
  if (!jt) return fail(c, TSR_ERR_FORMAT, "type", "missing");
  if (!json_is_string(jt) || tsr_schedule_kind_parse(json_string_value(jt), &kind) != TSR_OK)
    return fail(c, TSR_ERR_FORMAT, "type", "%s", json_is_string(jt) ? tsr_last_error() : "expected a string");
  *s = tsr_schedule_spec_default(kind);
  const char *key;
  const json_t *v, *e;
  json_object_foreach((json_t *)js, key, v) {
    if (strcmp(key, "type") == 0) continue;
    double x[TSR_SCHEDULE_MAX_MILESTONES];
    int n = 0, ok = json_is_number(v) || json_is_boolean(v) ||
                    (json_is_array(v) && json_array_size(v) <= TSR_SCHEDULE_MAX_MILESTONES);
    size_t i;
    if (ok && json_is_array(v))
      json_array_foreach(v, i, e) ok &= json_is_number(e), x[n++] = json_number_value(e);
    else
      x[n++] = json_is_boolean(v) ? json_is_true(v) : json_number_value(v);
    if (!ok) return fail(c, TSR_ERR_FORMAT, key, "expected a number, true or false, or an array of numbers, got %s", GOT(v));
    if (tsr_schedule_spec_set(s, key, x, n) != TSR_OK) {
      snprintf(why, sizeof why, "%s", tsr_last_error());
      return fail(c, TSR_ERR_FORMAT, key, "%s", why);
    }
  }
  return TSR_OK;
}

/* Reads "optimizer" into *o (Adam's defaults when the section is absent); which fields a type takes
 * comes from its registry entry (src/optim). Its "schedule" is checked here and returned by
 * tsr_model_load_json_schedule. */
static tsr_status parse_optimizer(jctx *c, const json_t *root, tsr_optim_spec *o) {
  char got[48], names[256];
  const json_t *jo = json_object_get(root, "optimizer");
  *o = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  if (!jo) return TSR_OK;
  enter_section(c, "optimizer");
  if (!json_is_object(jo)) return fail(c, TSR_ERR_FORMAT, NULL, "expected an object {\"type\": ...}, got %s", GOT(jo));
  const json_t *jt = json_object_get(jo, "type");
  if (!jt) return fail(c, TSR_ERR_FORMAT, "type", "missing");
  tsr_optim_kind kind;
  if (!json_is_string(jt) || tsr_optim_kind_parse(json_string_value(jt), &kind) != TSR_OK)
    return fail(c, TSR_ERR_FORMAT, "type", "unknown optimizer type %s (expected %s)", GOT(jt),
                _tsr_optim_names(names, sizeof names));
  *o = tsr_optim_spec_default(kind);
  const struct _tsr_optim_hyper *hyper = _tsr_optim_ops_of(kind)->hyper;
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)jo, key, v) {
    if (strcmp(key, "type") == 0) continue;
    tsr_schedule_spec sched;
    if (strcmp(key, "schedule") == 0) {
      TSR_TRY(parse_schedule(c, v, &sched));
      continue;
    }
    const struct _tsr_optim_hyper *h = hyper;
    while (h->key && strcmp(h->key, key) != 0) h++;
    if (h->key) {
      TSR_TRY(parse_hyper(c, v, h, o));
      continue;
    }
    char valid[256] = "type";
    size_t n = strlen(valid);
    for (h = hyper; h->key && n < sizeof valid; h++) n += snprintf(valid + n, sizeof valid - n, ", %s", h->key);
    if (n < sizeof valid) snprintf(valid + n, sizeof valid - n, ", schedule");
    return fail(c, TSR_ERR_FORMAT, key, "unknown field for optimizer '%s' (valid fields: %s)",
                tsr_optim_kind_name(kind), valid);
  }
  return TSR_OK;
}

/* Whole file into a NUL-terminated buffer. */
static tsr_status slurp(const char *path, char **text, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return _tsr_error(TSR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 14, n = 0, got;
  char *buf = malloc(cap);
  while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (cap - n - 1 == 0) {
      char *b = realloc(buf, cap *= 2);
      if (!b) free(buf);
      buf = b;
    }
  }
  int err = ferror(f);
  fclose(f);
  if (!buf) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
  if (err) {
    free(buf);
    return _tsr_error(TSR_ERR_IO, "%s: read error", path);
  }
  buf[n] = '\0';
  *text = buf, *len = n;
  return TSR_OK;
}

static tsr_status load(jctx *c, const json_t *root, tsr_model **pm, tsr_optim_spec *opt) {
  char got[48];
  if (!json_is_object(root)) return fail(c, TSR_ERR_FORMAT, NULL, "expected an object at the top level, got %s", GOT(root));
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)root, key, v) {
    static const char *const top[] = {"name", "layers", "output", "loss", "optimizer", "gradient_groups"};
    size_t i = 0;
    while (i < 6 && strcmp(key, top[i]) != 0) i++;
    if (i == 6) {
      enter_section(c, key);
      c->where[0] = '\0';
      return fail(c, TSR_ERR_FORMAT, key,
                  "unknown top-level field (valid fields: name, layers, output, loss, optimizer, gradient_groups)");
    }
  }
  const json_t *jname = json_object_get(root, "name");
  if (jname && !json_is_string(jname)) {
    enter_section(c, "name");
    c->where[0] = '\0';
    return fail(c, TSR_ERR_FORMAT, "name", "expected a string, got %s", GOT(jname));
  }
  const json_t *layers = json_object_get(root, "layers");
  enter_section(c, "layers");
  c->where[0] = '\0';
  if (!layers) return fail(c, TSR_ERR_FORMAT, "layers", "missing (a model needs at least one layer)");
  if (!json_is_array(layers) || json_array_size(layers) == 0)
    return fail(c, TSR_ERR_FORMAT, "layers", "expected a non-empty array of layer objects, got %s", GOT(layers));

  /* The default model name is the file's name without folder and extension. */
  char base[128];
  const char *slash = strrchr(c->path, '/');
  snprintf(base, sizeof base, "%s", slash ? slash + 1 : c->path);
  char *dot = strrchr(base, '.');
  if (dot && dot != base) *dot = '\0';
  tsr_model *m = NULL;
  TSR_TRY(tsr_model_create(&m, jname ? json_string_value(jname) : base));
  tsr_status s = TSR_OK;
  for (size_t i = 0; s == TSR_OK && i < json_array_size(layers); i++) s = add_layer(c, m, layers, i);
  if (s == TSR_OK) s = parse_output(c, m, root);
  if (s == TSR_OK) s = parse_groups(c, m, root);
  tsr_optim_spec o;
  if (s == TSR_OK) s = parse_optimizer(c, root, &o);
  if (s != TSR_OK) {
    tsr_model_destroy(m);
    return s;
  }
  if (opt) *opt = o;
  *pm = m;
  return TSR_OK;
}

/* Reads the model file: the model, the optimizer and, when sched is given, the optimizer's schedule. */
static tsr_status read_file(const char *path, tsr_model **m, tsr_optim_spec *opt, tsr_schedule_spec *sched,
                            int *found) {
  char *text = NULL;
  size_t len = 0;
  TSR_TRY(slurp(path, &text, &len));
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  tsr_status s;
  jctx c = {.path = path, .text = text, .scan = text};
  const json_t *js = json_object_get(json_object_get(root, "optimizer"), "schedule");
  if (!root)
    s = _tsr_error(TSR_ERR_FORMAT, "%s:%d:%d: JSON syntax error: %s", path, err.line, err.column, err.text);
  else
    s = load(&c, root, m, opt);
  if (s == TSR_OK && sched) {
    *sched = tsr_schedule_spec_default(TSR_SCHEDULE_CONSTANT);
    *found = js != NULL;
    if (js) s = parse_schedule(&c, js, sched); /* checked by load already */
    if (s != TSR_OK) tsr_model_destroy(*m), *m = NULL;
  }
  json_decref(root);
  free(text);
  return s;
}

tsr_status tsr_model_load_json(tsr_model **m, struct tsr_optim_spec *opt, const char *path) {
  if (!m || !path) return _tsr_error(TSR_ERR_ARG, "tsr_model_load_json: m and path are required");
  *m = NULL;
  return read_file(path, m, opt, NULL, NULL);
}

tsr_status tsr_model_load_json_schedule(tsr_model **m, struct tsr_optim_spec *opt, struct tsr_schedule_spec *sched,
                                        int *has_schedule, const char *path) {
  if (!m || !path || !sched || !has_schedule)
    return _tsr_error(TSR_ERR_ARG, "tsr_model_load_json_schedule: m, sched, has_schedule and path are required");
  *m = NULL;
  return read_file(path, m, opt, sched, has_schedule);
}

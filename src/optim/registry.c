/* The optimizer registry: every optimizer's table in one list. Kinds of the public enum are found
 * by their `kind`; the others get the values after TSR_OPTIM_KIND_COUNT in list order. Also the
 * public calls on optimizer specifications: defaults, names, and the report of changed
 * hyperparameters that a resumed run prints. */
#include <stdio.h>
#include <string.h>

#include "optim/optim.h"
#include "runtime/error.h"

extern const struct _tsr_optim_ops _tsr_optim_sgd[];  /* sgd.c */
extern const struct _tsr_optim_ops _tsr_optim_adam[]; /* adam.c: adam, adamw */
extern const struct _tsr_optim_ops _tsr_optim_lion[]; /* lion.c */
extern const struct _tsr_optim_ops _tsr_optim_lamb[]; /* lamb.c */

static const struct _tsr_optim_ops *const tables[] = {_tsr_optim_sgd, _tsr_optim_adam, _tsr_optim_lion,
                                                      _tsr_optim_lamb};
#define NTABLES (sizeof tables / sizeof tables[0])

/* The entry of kind `kind` (name NULL) or called `name`; its kind in *kind_out. */
static const struct _tsr_optim_ops *find(int kind, const char *name, int *kind_out) {
  int extra = TSR_OPTIM_KIND_COUNT;
  for (size_t i = 0; i < NTABLES; i++)
    for (const struct _tsr_optim_ops *e = tables[i]; e->name; e++) {
      int k = e->kind == TSR_OPTIM_REGISTERED ? extra++ : e->kind;
      if (name ? strcmp(name, e->name) == 0 : k == kind) {
        if (kind_out) *kind_out = k;
        return e;
      }
    }
  return NULL;
}

const struct _tsr_optim_ops *_tsr_optim_ops_of(int kind) { return kind >= 0 ? find(kind, NULL, NULL) : NULL; }

const char *_tsr_optim_names(char *buf, size_t cap) {
  size_t len = 0;
  if (cap) buf[0] = '\0';
  for (size_t i = 0; i < NTABLES; i++)
    for (const struct _tsr_optim_ops *e = tables[i]; e->name && len < cap; e++)
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", e->name);
  return buf;
}

static void set_defaults(tsr_optim_spec *s, const struct _tsr_optim_ops *e) {
  for (const struct _tsr_optim_hyper *h = e->hyper; h->key; h++)
    for (int k = 0; k < 1 + (h->type == TSR_HYPER_PROB_PAIR); k++) {
      char *field = (char *)s + h->offset[k];
      if (h->type == TSR_HYPER_NAMES)
        field[0] = '\0';
      else if (h->type == TSR_HYPER_BOOL)
        *(int *)field = h->def[k] != 0;
      else
        *(float *)field = h->def[k];
    }
}

/* Adam's defaults first (the default optimizer of model files), then the kind's: the fields a kind
 * does not use hold usable values if a caller changes the kind of a spec. */
tsr_optim_spec tsr_optim_spec_default(tsr_optim_kind kind) {
  tsr_optim_spec s;
  memset(&s, 0, sizeof s);
  set_defaults(&s, _tsr_optim_ops_of(TSR_OPTIM_ADAM));
  const struct _tsr_optim_ops *e = _tsr_optim_ops_of((int)kind);
  if (e) set_defaults(&s, e);
  s.kind = kind;
  return s;
}

const char *tsr_optim_kind_name(tsr_optim_kind kind) {
  const struct _tsr_optim_ops *e = _tsr_optim_ops_of((int)kind);
  return e ? e->name : "?";
}

tsr_status tsr_optim_kind_parse(const char *name, tsr_optim_kind *kind) {
  if (!kind) return _tsr_error(TSR_ERR_ARG, "tsr_optim_kind_parse: kind is NULL");
  int k;
  if (name && find(-1, name, &k)) {
    *kind = (tsr_optim_kind)k;
    return TSR_OK;
  }
  char names[256];
  return _tsr_error(TSR_ERR_ARG, "unknown optimizer '%s' (expected %s)", name ? name : "(null)",
                    _tsr_optim_names(names, sizeof names));
}

int tsr_optim_spec_diff(const tsr_optim_spec *from, const tsr_optim_spec *to, char *out, size_t cap) {
  int n = 0;
  size_t len = 0;
  if (cap) out[0] = '\0';
  const struct _tsr_optim_ops *e = _tsr_optim_ops_of(to->kind);
  for (const struct _tsr_optim_hyper *h = e ? e->hyper : NULL; h && h->key; h++)
    for (int k = 0; k < 1 + (h->type == TSR_HYPER_PROB_PAIR); k++) {
      const char *a = (const char *)from + h->offset[k], *b = (const char *)to + h->offset[k];
      if (h->type == TSR_HYPER_NAMES) {
        if (strcmp(a, b) == 0) continue;
        if (len < cap) len += (size_t)snprintf(out + len, cap - len, "%s%s '%s' -> '%s'", n ? ", " : "", h->name[k], a, b);
        n++;
        continue;
      }
      int is_int = h->type == TSR_HYPER_BOOL;
      double x = is_int ? *(const int *)a : *(const float *)a, y = is_int ? *(const int *)b : *(const float *)b;
      if (x == y) continue;
      if (len < cap)
        len += (size_t)snprintf(out + len, cap - len, "%s%s %.7g -> %.7g", n ? ", " : "", h->name[k], x, y);
      n++;
    }
  return n;
}

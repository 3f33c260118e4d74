/* The public calls on learning-rate schedules: defaults, names, fields by key (model files and
 * options), the comparison of two specs, and the rate of a step: the kind's rate (schedules.c) with
 * the scale and the linear warm-up that every kind composes with. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/schedule.h"
#include "runtime/error.h"

/* The fields every kind has. */
static const struct _tsr_sched_field common[] = {
    TSR_SCHED_FIELD(per_step, TSR_SCHED_BOOL, 0), TSR_SCHED_FIELD(scale, TSR_SCHED_POS, 1),
    TSR_SCHED_FIELD(warmup_steps, TSR_SCHED_COUNT, 0), TSR_SCHED_FIELD(warmup_start, TSR_SCHED_NONNEG, 1.0 / 3),
    {.key = NULL}};

static const struct _tsr_schedule_ops *ops_of(tsr_schedule_kind kind) {
  for (const struct _tsr_schedule_ops *e = _tsr_schedules; e->name; e++)
    if (e->kind == kind) return e;
  return NULL;
}

static double get(const tsr_schedule_spec *s, const struct _tsr_sched_field *f) {
  const char *p = (const char *)s + f->offset;
  switch (f->type) {
  case TSR_SCHED_COUNT:
  case TSR_SCHED_PERIOD: return (double)*(const int64_t *)p;
  case TSR_SCHED_BOOL: return *(const int *)p;
  case TSR_SCHED_LIST: return s->nmilestones;
  default: return *(const double *)p;
  }
}

static void put(tsr_schedule_spec *s, const struct _tsr_sched_field *f, double v) {
  char *p = (char *)s + f->offset;
  if (f->type == TSR_SCHED_COUNT || f->type == TSR_SCHED_PERIOD)
    *(int64_t *)p = (int64_t)v;
  else if (f->type == TSR_SCHED_BOOL)
    *(int *)p = v != 0;
  else if (f->type != TSR_SCHED_LIST)
    *(double *)p = v;
}

static int valid(enum _tsr_sched_type type, double v) {
  int whole = v == floor(v) && fabs(v) <= 9007199254740992.0; /* 2^53 */
  switch (type) {
  case TSR_SCHED_POS: return v > 0 && isfinite(v);
  case TSR_SCHED_NONNEG: return v >= 0 && isfinite(v);
  case TSR_SCHED_UNIT: return v > 0 && v < 1;
  case TSR_SCHED_COUNT:
  case TSR_SCHED_LIST: return whole && v >= 0;
  case TSR_SCHED_PERIOD: return whole && v >= 1;
  case TSR_SCHED_BOOL: return v == 0 || v == 1;
  }
  return 0;
}

static const char *expected(enum _tsr_sched_type type) {
  static const char *const what[] = {"a number > 0", "a number >= 0", "a number in (0, 1)", "an integer >= 0",
                                     "an integer >= 1", "0 or 1 (false or true)",
                                     "increasing integers >= 0 (at most 16)"};
  return what[type];
}

/* The field `key` of a kind (the common ones first), NULL if it has none. */
static const struct _tsr_sched_field *find_field(const struct _tsr_schedule_ops *e, const char *key) {
  for (const struct _tsr_sched_field *f = common; f->key; f++)
    if (strcmp(f->key, key) == 0) return f;
  for (const struct _tsr_sched_field *f = e->field; f->key; f++)
    if (strcmp(f->key, key) == 0) return f;
  return NULL;
}

tsr_schedule_spec tsr_schedule_spec_default(tsr_schedule_kind kind) {
  tsr_schedule_spec s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  const struct _tsr_schedule_ops *e = ops_of(kind);
  for (const struct _tsr_sched_field *f = common; f->key; f++) put(&s, f, f->def);
  for (const struct _tsr_sched_field *f = e ? e->field : NULL; f && f->key; f++) put(&s, f, f->def);
  s.per_step = e ? e->per_step : 0;
  return s;
}

const char *tsr_schedule_kind_name(tsr_schedule_kind kind) {
  const struct _tsr_schedule_ops *e = ops_of(kind);
  return e ? e->name : "?";
}

static const char *kind_names(char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (const struct _tsr_schedule_ops *e = _tsr_schedules; e->name && len < cap; e++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", e->name);
  return buf;
}

tsr_status tsr_schedule_kind_parse(const char *name, tsr_schedule_kind *kind) {
  if (!kind) return _tsr_error(TSR_ERR_ARG, "tsr_schedule_kind_parse: kind is NULL");
  for (const struct _tsr_schedule_ops *e = _tsr_schedules; name && e->name; e++)
    if (strcmp(e->name, name) == 0) {
      *kind = e->kind;
      return TSR_OK;
    }
  char names[160];
  return _tsr_error(TSR_ERR_ARG, "unknown learning-rate schedule '%s' (expected %s)", name ? name : "(null)",
                    kind_names(names, sizeof names));
}

tsr_status tsr_schedule_spec_set(tsr_schedule_spec *s, const char *key, const double *values, int n) {
  const struct _tsr_schedule_ops *e = s ? ops_of(s->kind) : NULL;
  if (!e || !key || (n > 0 && !values)) return _tsr_error(TSR_ERR_ARG, "tsr_schedule_spec_set: no spec, kind or key");
  const struct _tsr_sched_field *f = find_field(e, key);
  if (!f) {
    char valid_keys[256];
    size_t len = 0;
    for (const struct _tsr_sched_field *c = common; c->key; c++)
      len += (size_t)snprintf(valid_keys + len, sizeof valid_keys - len, "%s%s", len ? ", " : "", c->key);
    for (const struct _tsr_sched_field *c = e->field; c->key && len < sizeof valid_keys; c++)
      len += (size_t)snprintf(valid_keys + len, sizeof valid_keys - len, ", %s", c->key);
    return _tsr_error(TSR_ERR_ARG, "schedule %s has no field '%s' (fields: %s)", e->name, key, valid_keys);
  }
  int ok = f->type == TSR_SCHED_LIST ? n >= 0 && n <= TSR_SCHEDULE_MAX_MILESTONES : n == 1;
  for (int i = 0; ok && i < n; i++) ok = valid(f->type, values[i]) && (i == 0 || values[i] > values[i - 1]);
  if (!ok)
    return _tsr_error(TSR_ERR_ARG, "schedule %s: field '%s': %d value(s) starting with %g, expected %s", e->name, key, n,
                      n > 0 ? values[0] : NAN, expected(f->type));
  if (f->type == TSR_SCHED_LIST) {
    s->nmilestones = n;
    for (int i = 0; i < n; i++) s->milestones[i] = (int64_t)values[i];
  } else {
    put(s, f, values[0]);
  }
  return TSR_OK;
}

tsr_status tsr_schedule_spec_parse(tsr_schedule_spec *s, const char *text) {
  if (!s || !text) return _tsr_error(TSR_ERR_ARG, "tsr_schedule_spec_parse: spec and text are required");
  char buf[512], *save = NULL;
  if (strlen(text) >= sizeof buf) return _tsr_error(TSR_ERR_ARG, "schedule '%.40s...': longer than %zu bytes", text, sizeof buf - 1);
  strcpy(buf, text);
  tsr_schedule_kind kind;
  char *tok = strtok_r(buf, ",", &save);
  TSR_TRY(tsr_schedule_kind_parse(tok ? tok : "", &kind));
  *s = tsr_schedule_spec_default(kind);
  while ((tok = strtok_r(NULL, ",", &save))) {
    char *eq = strchr(tok, '=');
    if (!eq) return _tsr_error(TSR_ERR_ARG, "schedule '%s': '%s' is not key=value", text, tok);
    *eq = '\0';
    double v[TSR_SCHEDULE_MAX_MILESTONES + 1];
    int n = 0;
    for (char *p = eq + 1, *end; n <= TSR_SCHEDULE_MAX_MILESTONES; p = end + 1) {
      v[n++] = strtod(p, &end);
      if (end == p || (*end != ':' && *end != '\0'))
        return _tsr_error(TSR_ERR_ARG, "schedule '%s': field '%s': '%s' is not a number (a list: 30:80)", text, tok,
                          eq + 1);
      if (*end == '\0') break;
    }
    TSR_TRY(tsr_schedule_spec_set(s, tok, v, n));
  }
  return TSR_OK;
}

int tsr_schedule_spec_diff(const tsr_schedule_spec *from, const tsr_schedule_spec *to, char *out, size_t cap) {
  int n = 0;
  size_t len = 0;
  if (cap) out[0] = '\0';
  const struct _tsr_schedule_ops *e = ops_of(to->kind);
  if (from->kind != to->kind) {
    len += (size_t)snprintf(out, cap, "kind %s -> %s", tsr_schedule_kind_name(from->kind), e ? e->name : "?");
    n++;
  }
  for (int part = 0; part < 2 && e; part++)
    for (const struct _tsr_sched_field *f = part ? e->field : common; f->key; f++) {
      double x = get(from, f), y = get(to, f);
      int same = x == y || (isnan(x) && isnan(y));
      for (int i = 0; same && f->type == TSR_SCHED_LIST && i < to->nmilestones; i++)
        same = from->milestones[i] == to->milestones[i];
      if (same) continue;
      if (len < cap && f->type == TSR_SCHED_LIST)
        len += (size_t)snprintf(out + len, cap - len, "%s%s changed", n ? ", " : "", f->key);
      else if (len < cap)
        len += (size_t)snprintf(out + len, cap - len, "%s%s %.7g -> %.7g", n ? ", " : "", f->key, x, y);
      n++;
    }
  return n;
}

tsr_status tsr_schedule_init(tsr_schedule *s, const tsr_schedule_spec *spec, float base_lr) {
  if (!s || !spec) return _tsr_error(TSR_ERR_ARG, "tsr_schedule_init: schedule and spec are required");
  const struct _tsr_schedule_ops *e = ops_of(spec->kind);
  if (!e) return _tsr_error(TSR_ERR_ARG, "tsr_schedule_init: schedule kind %d unknown", (int)spec->kind);
  if (!(base_lr >= 0) || !isfinite(base_lr))
    return _tsr_error(TSR_ERR_ARG, "schedule %s: the optimizer's rate %g is not a finite number >= 0", e->name, base_lr);
  for (int part = 0; part < 2; part++)
    for (const struct _tsr_sched_field *f = part ? e->field : common; f->key; f++) {
      int ok = f->type != TSR_SCHED_LIST ? valid(f->type, get(spec, f))
                                         : spec->nmilestones >= 0 && spec->nmilestones <= TSR_SCHEDULE_MAX_MILESTONES;
      for (int i = 0; ok && f->type == TSR_SCHED_LIST && i < spec->nmilestones; i++)
        ok = spec->milestones[i] >= 0 && (i == 0 || spec->milestones[i] > spec->milestones[i - 1]);
      if (!ok)
        return _tsr_error(TSR_ERR_ARG, "schedule %s: field '%s' is %g, expected %s%s", e->name, f->key, get(spec, f),
                          expected(f->type), isnan(f->def) || (f->type == TSR_SCHED_PERIOD && f->def == 0)
                                                 ? " (required: it has no default)" : "");
    }
  if (e->check) TSR_TRY(e->check(spec));
  s->spec = *spec;
  s->base_lr = base_lr;
  s->state = (tsr_schedule_state){.lr = (double)base_lr * spec->scale, .best = INFINITY};
  return TSR_OK;
}

float tsr_schedule_lr(const tsr_schedule *s, int64_t step, int64_t epoch) {
  const tsr_schedule_spec *p = &s->spec;
  const struct _tsr_schedule_ops *e = ops_of(p->kind);
  int64_t t = p->per_step ? step : epoch;
  double lr = e ? e->lr(s, (double)s->base_lr * p->scale, t < 0 ? 0 : t) : s->base_lr;
  if (step < 0 || step >= p->warmup_steps) return (float)lr;
  /* In float, in this order: a constant schedule from warmup_start 1 then gives exactly the linear
   * scaling rule's warm-up as tessera-train computed it before schedules existed. */
  float b = s->base_lr, to = b > 0 ? (float)(lr / b) : 0.0f, from = (float)p->warmup_start;
  return b * (from + (to - from) * (float)step / (float)p->warmup_steps);
}

tsr_status tsr_schedule_observe(tsr_schedule *s, double metric, int *reduced) {
  if (reduced) *reduced = 0;
  const struct _tsr_schedule_ops *e = s ? ops_of(s->spec.kind) : NULL;
  if (!e) return _tsr_error(TSR_ERR_ARG, "tsr_schedule_observe: no schedule");
  int r = 0;
  if (e->observe) e->observe(s, metric, &r);
  s->state.epochs++;
  if (reduced) *reduced = r;
  return TSR_OK;
}

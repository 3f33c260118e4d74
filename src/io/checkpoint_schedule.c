/* The learning-rate schedule in a checkpoint: the group /schedule, present when the run has one,
 * with the kind by name and every field of tsr_schedule (spec, base rate, state) as an attribute
 * named after it (the milestones as "30:80"), all covered by the file's checksum. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint_h5.h"
#include "runtime/error.h"

enum { I32, I64, F32, F64 };
#define SPEC(f, type) {#f, offsetof(tsr_schedule, spec.f), type}
static const struct {
  const char *name;
  size_t offset;
  int type;
} fields[] = {SPEC(per_step, I32),      SPEC(scale, F64),        SPEC(warmup_steps, I64),
              SPEC(warmup_start, F64),  SPEC(gamma, F64),        SPEC(step_size, I64),
              SPEC(t0, I64),            SPEC(t_mult, I64),       SPEC(eta_min, F64),
              SPEC(total, I64),         SPEC(pct_start, F64),    SPEC(div_factor, F64),
              SPEC(final_div_factor, F64), SPEC(factor, F64),    SPEC(patience, I64),
              SPEC(threshold, F64),     SPEC(cooldown, I64),     SPEC(min_lr, F64),
              {"base_lr", offsetof(tsr_schedule, base_lr), F32},
              {"state_lr", offsetof(tsr_schedule, state.lr), F64},
              {"state_best", offsetof(tsr_schedule, state.best), F64},
              {"state_bad_epochs", offsetof(tsr_schedule, state.bad_epochs), I64},
              {"state_cooldown_left", offsetof(tsr_schedule, state.cooldown_left), I64},
              {"state_epochs", offsetof(tsr_schedule, state.epochs), I64}};
#define NFIELDS (sizeof fields / sizeof fields[0])

static const size_t type_size[] = {4, 8, 4, 8};

static hid_t file_type(int t) {
  return t == I32 ? H5T_STD_I32LE : t == I64 ? H5T_STD_I64LE : t == F32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
}

static hid_t mem_type(int t) {
  return t == I32 ? H5T_NATIVE_INT32 : t == I64 ? H5T_NATIVE_INT64 : t == F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
}

uint64_t _tsr_ck_schedule_hash(uint64_t h, const tsr_checkpoint_meta *m) {
  const tsr_schedule *s = &m->schedule;
  const char *kind = tsr_schedule_kind_name(s->spec.kind);
  h = _tsr_ck_hash(h, kind, strlen(kind) + 1);
  for (size_t i = 0; i < NFIELDS; i++) h = _tsr_ck_hash(h, (const char *)s + fields[i].offset, type_size[fields[i].type]);
  int64_t n = s->spec.nmilestones;
  h = _tsr_ck_hash(h, &n, sizeof n);
  return _tsr_ck_hash(h, s->spec.milestones, sizeof(int64_t) * (size_t)s->spec.nmilestones);
}

herr_t _tsr_ck_schedule_write(hid_t f, const tsr_checkpoint_meta *m) {
  const tsr_schedule *s = &m->schedule;
  char list[TSR_SCHEDULE_MAX_MILESTONES * 21 + 1] = "";
  for (int i = 0, len = 0; i < s->spec.nmilestones && i < TSR_SCHEDULE_MAX_MILESTONES; i++)
    len += snprintf(list + len, sizeof list - len, "%s%" PRId64, i ? ":" : "", s->spec.milestones[i]);
  hid_t g = H5Gcreate2(f, "schedule", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = g < 0 ? -1 : _tsr_ck_attr_write_str(g, "kind", tsr_schedule_kind_name(s->spec.kind));
  if (e >= 0) e = _tsr_ck_attr_write_str(g, "milestones", list);
  for (size_t i = 0; e >= 0 && i < NFIELDS; i++)
    e = _tsr_ck_attr_write(g, fields[i].name, file_type(fields[i].type), mem_type(fields[i].type),
                           (const char *)s + fields[i].offset);
  if (g >= 0 && H5Gclose(g) < 0) e = -1;
  return e;
}

tsr_status _tsr_ck_schedule_read(hid_t f, const char *file, tsr_checkpoint_meta *m) {
  tsr_schedule *s = &m->schedule;
  memset(s, 0, sizeof *s);
  m->has_schedule = H5Lexists(f, "schedule", H5P_DEFAULT) > 0;
  if (!m->has_schedule) return TSR_OK;
  hid_t g = H5Gopen2(f, "schedule", H5P_DEFAULT);
  if (g < 0) return _tsr_error(TSR_ERR_FORMAT, "%s: 'schedule' is not a group", file);
  char kind[32], list[TSR_SCHEDULE_MAX_MILESTONES * 21 + 1], why[512];
  tsr_status st = _tsr_ck_attr_read_str(g, file, "kind", kind, sizeof kind);
  if (st == TSR_OK && tsr_schedule_kind_parse(kind, &s->spec.kind) != TSR_OK)
    snprintf(why, sizeof why, "%s", tsr_last_error()), st = _tsr_error(TSR_ERR_FORMAT, "%s: %s", file, why);
  if (st == TSR_OK) st = _tsr_ck_attr_read_str(g, file, "milestones", list, sizeof list);
  for (const char *p = list; st == TSR_OK && *p;) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || (*end && *end != ':') || s->spec.nmilestones == TSR_SCHEDULE_MAX_MILESTONES)
      st = _tsr_error(TSR_ERR_FORMAT, "%s: schedule milestones '%s': at most %d integers separated by ':'", file, list,
                      TSR_SCHEDULE_MAX_MILESTONES);
    else
      s->spec.milestones[s->spec.nmilestones++] = v, p = *end ? end + 1 : end;
  }
  for (size_t i = 0; st == TSR_OK && i < NFIELDS; i++)
    st = _tsr_ck_attr_read(g, file, fields[i].name, mem_type(fields[i].type), (char *)s + fields[i].offset);
  H5Gclose(g);
  return st;
}

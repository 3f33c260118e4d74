/* Learning-rate schedules as an interface: one entry (struct _tsr_schedule_ops) per kind, defined
 * in schedules.c, with its fields (model-file keys, defaults, ranges: what tsr_schedule_spec_set,
 * model files, options and spec_diff read), its rate as a function of the clock and, optionally,
 * checks across fields and what it does with an epoch's metric. schedule.c holds the public calls:
 * the scale and warm-up that compose with every kind, parsing, defaults. */
#ifndef TSR_OPTIM_SCHEDULE_H
#define TSR_OPTIM_SCHEDULE_H

#include <stddef.h>
#include <tessera/schedule.h>

/* The form and range of a field. */
enum _tsr_sched_type {
  TSR_SCHED_POS,    /* double > 0 */
  TSR_SCHED_NONNEG, /* double >= 0 */
  TSR_SCHED_UNIT,   /* double in (0, 1) */
  TSR_SCHED_COUNT,  /* int64 >= 0 */
  TSR_SCHED_PERIOD, /* int64 >= 1 (0 in a default: required) */
  TSR_SCHED_BOOL,   /* int, 0 or 1 */
  TSR_SCHED_LIST    /* up to TSR_SCHEDULE_MAX_MILESTONES increasing int64 >= 0 (milestones) */
};

struct _tsr_sched_field {
  const char *key; /* the field's name in tsr_schedule_spec and model files; NULL ends a list */
  enum _tsr_sched_type type;
  size_t offset;
  double def;      /* NAN: required, no default */
};
#define TSR_SCHED_FIELD(field, type, def) {#field, type, offsetof(tsr_schedule_spec, field), def}

struct _tsr_schedule_ops {
  const char *name; /* NULL ends the table */
  tsr_schedule_kind kind;
  int per_step;     /* the default clock */
  const struct _tsr_sched_field *field;
  /* The rate before warm-up at clock time t >= 0; base: the optimizer's rate x scale. */
  double (*lr)(const tsr_schedule *s, double base, int64_t t);
  /* (optional) Checks across fields; TSR_ERR_ARG naming them. */
  tsr_status (*check)(const tsr_schedule_spec *s);
  /* (optional) An epoch's metric; *reduced = 1 when the rate went down. */
  void (*observe)(tsr_schedule *s, double metric, int *reduced);
};

/* schedules.c: every kind, in tsr_schedule_kind order. */
extern const struct _tsr_schedule_ops _tsr_schedules[];

#endif

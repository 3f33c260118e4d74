/* Learning-rate schedules with PyTorch's semantics (torch.optim.lr_scheduler): the rate of every
 * training step from the optimizer's rate, a scale (the linear scaling rule), an optional linear
 * warm-up and one schedule kind. The caller sets the rate (tsr_trainer_set_lr) before each step and
 * reports the validation loss after each epoch (reduce-on-plateau); checkpoints carry the schedule. */
#ifndef TESSERA_SCHEDULE_H
#define TESSERA_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>
#include <tessera/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds are entries of the library's schedule registry (names in model files, options and
 * checkpoints: "constant", "step", "exponential", "cosine", "one_cycle", "plateau"). */
typedef enum tsr_schedule_kind {
  TSR_SCHEDULE_CONSTANT,    /* the optimizer's rate x scale */
  TSR_SCHEDULE_STEP,        /* StepLR (step_size, gamma) or, with milestones, MultiStepLR */
  TSR_SCHEDULE_EXPONENTIAL, /* ExponentialLR (gamma) */
  TSR_SCHEDULE_COSINE,      /* CosineAnnealingWarmRestarts (t0, t_mult, eta_min) */
  TSR_SCHEDULE_ONE_CYCLE,   /* OneCycleLR, cosine annealing (total, pct_start, div_factor, final_div_factor) */
  TSR_SCHEDULE_PLATEAU,     /* ReduceLROnPlateau, mode min, relative threshold (factor, patience, ...) */
  TSR_SCHEDULE_KIND_COUNT
} tsr_schedule_kind;

#define TSR_SCHEDULE_MAX_MILESTONES 16

/* Every kind reads the first block and its own fields; the registry gives each field's model-file
 * key (the field's name), default and range. PyTorch's base_lr (OneCycleLR's max_lr) is the
 * optimizer's rate x scale. The schedule's clock t counts epochs (per_step 0: the epoch's index from
 * 0, the rate constant within an epoch, as scheduler.step() once per epoch) or training steps
 * (per_step 1: the step's index from 0 over the whole run). */
typedef struct tsr_schedule_spec {
  tsr_schedule_kind kind;
  int per_step;            /* the clock: 0 epochs (default; one_cycle: 1), 1 training steps */
  double scale;            /* multiplies the optimizer's rate (the number of ranks for the linear
                              scaling rule); 1 */
  int64_t warmup_steps;    /* the first warmup_steps training steps ramp linearly from warmup_start x
                              the optimizer's rate to the schedule's rate at that step; 0: none */
  double warmup_start;     /* 1/3 (LinearLR's start_factor) */
  double gamma;            /* step: 0.1; exponential: required */
  int64_t step_size;       /* step: the period in clock units (required without milestones) */
  int nmilestones;         /* step: MultiStepLR's increasing milestones (step_size then unused) */
  int64_t milestones[TSR_SCHEDULE_MAX_MILESTONES];
  int64_t t0;              /* cosine: the first period (required) */
  int64_t t_mult;          /* cosine: period growth factor, 1 */
  double eta_min;          /* cosine: the lowest rate, 0 */
  int64_t total;           /* one_cycle: clock units in the cycle (required); later ones keep its last rate */
  double pct_start, div_factor, final_div_factor; /* one_cycle: 0.3, 25, 1e4 */
  double factor;           /* plateau: 0.1 */
  int64_t patience;        /* plateau: 10 */
  double threshold;        /* plateau: 1e-4 (relative: better means below best x (1 - threshold)) */
  int64_t cooldown;        /* plateau: 0 */
  double min_lr;           /* plateau: 0 */
} tsr_schedule_spec;

/* What changes as a run goes on (only reduce-on-plateau keeps any). */
typedef struct tsr_schedule_state {
  double lr;               /* plateau: the rate now (before warm-up) */
  double best;             /* plateau: the best metric so far (+inf before the first) */
  int64_t bad_epochs;      /* plateau: epochs since the best, after cooldown */
  int64_t cooldown_left;   /* plateau: epochs of cooldown left */
  int64_t epochs;          /* metrics reported so far */
} tsr_schedule_state;

typedef struct tsr_schedule {
  tsr_schedule_spec spec;
  float base_lr;           /* the optimizer's rate */
  tsr_schedule_state state;
} tsr_schedule;

/* The kind's defaults (required fields 0, exponential's gamma NAN: tsr_schedule_init names them). */
tsr_schedule_spec tsr_schedule_spec_default(tsr_schedule_kind kind);
const char *tsr_schedule_kind_name(tsr_schedule_kind kind); /* "cosine"; "?" for none */
tsr_status tsr_schedule_kind_parse(const char *name, tsr_schedule_kind *kind);
/* Sets field `key` (its model-file key, e.g. "t0", or "per" with 0 = "epoch", 1 = "step"): a
 * number, or for "milestones" n numbers; TSR_ERR_ARG naming the key when the kind has no such field
 * or a value is out of its range. */
tsr_status tsr_schedule_spec_set(tsr_schedule_spec *s, const char *key, const double *values, int n);
/* Model files give a schedule in their optimizer section: tsr_model_load_json_schedule (model.h).
 * Reads "kind,key=value,key=value" (milestones: values separated by ':'), e.g.
 * "cosine,t0=10,t_mult=2" or "step,milestones=30:80,gamma=0.1", into *s (the kind's defaults
 * first). */
tsr_status tsr_schedule_spec_parse(tsr_schedule_spec *s, const char *text);
/* The fields of `to`'s kind that differ in `from` ("t0 10 -> 20, ..."; the kind first when it
 * differs), written to out (cap bytes); returns how many. */
int tsr_schedule_spec_diff(const tsr_schedule_spec *from, const tsr_schedule_spec *to, char *out, size_t cap);

/* Checks the spec (TSR_ERR_ARG naming the field) and starts the schedule at the optimizer's rate. */
tsr_status tsr_schedule_init(tsr_schedule *s, const tsr_schedule_spec *spec, float base_lr);
/* The rate of the training step with index `step` (from 0 over the whole run) in the epoch with
 * index `epoch` (from 0). A constant schedule with scale k gives base_lr x k, and during warm-up from
 * warmup_start 1 exactly the float value base_lr x (1 + (k - 1) step / warmup_steps). */
float tsr_schedule_lr(const tsr_schedule *s, int64_t step, int64_t epoch);
/* Reports the epoch's metric (the validation loss): reduce-on-plateau may lower its rate (*reduced
 * set to 1 then, if not NULL); other kinds only count it. */
tsr_status tsr_schedule_observe(tsr_schedule *s, double metric, int *reduced);

#ifdef __cplusplus
}
#endif
#endif

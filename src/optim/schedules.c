/* The schedule kinds, each the closed form of its torch.optim.lr_scheduler namesake in double: its
 * fields, its rate at clock time t and, for reduce-on-plateau, what an epoch's metric does. A new kind:
 * its functions and entry here (in tsr_schedule_kind order), its value and fields in
 * include/tessera/schedule.h, its test in tests/check_schedule.c. */
#include <math.h>
#include <stdint.h>

#include "optim/schedule.h"
#include "runtime/error.h"

static double constant_lr(const tsr_schedule *s, double base, int64_t t) {
  (void)s, (void)t;
  return base;
}

/* StepLR: base gamma^floor(t / step_size); MultiStepLR: base gamma^(milestones <= t). */
static double step_lr(const tsr_schedule *s, double base, int64_t t) {
  const tsr_schedule_spec *p = &s->spec;
  int64_t k = 0;
  if (p->nmilestones == 0) k = t / p->step_size;
  for (int i = 0; i < p->nmilestones; i++) k += p->milestones[i] <= t;
  return base * pow(p->gamma, (double)k);
}

static tsr_status step_check(const tsr_schedule_spec *p) {
  if (p->nmilestones == 0 && p->step_size < 1)
    return _tsr_error(TSR_ERR_ARG, "schedule step: step_size (a period >= 1) or milestones is required");
  return TSR_OK;
}

static double exponential_lr(const tsr_schedule *s, double base, int64_t t) {
  return base * pow(s->spec.gamma, (double)t);
}

/* CosineAnnealingWarmRestarts: periods t0, t0 t_mult, t0 t_mult^2, ...; t_cur is t's place in its
 * period (found by whole periods, where PyTorch takes a logarithm: the same for exact integers). */
static double cosine_lr(const tsr_schedule *s, double base, int64_t t) {
  const tsr_schedule_spec *p = &s->spec;
  int64_t ti = p->t0, tcur = t % p->t0;
  if (p->t_mult > 1) /* ti at least doubles each turn: at most 63 turns */
    for (tcur = t; tcur >= ti && ti <= INT64_MAX / p->t_mult;) tcur -= ti, ti *= p->t_mult;
  return p->eta_min + (base - p->eta_min) * (1 + cos(M_PI * (double)tcur / (double)ti)) / 2;
}

/* OneCycleLR with cosine annealing, two phases: base / div_factor up to base until
 * pct_start total - 1, then down to base / div_factor / final_div_factor at total - 1. */
static double anneal_cos(double start, double end, double pct) { return end + (start - end) / 2.0 * (cos(M_PI * pct) + 1); }

static double one_cycle_lr(const tsr_schedule *s, double base, int64_t t) {
  const tsr_schedule_spec *p = &s->spec;
  double initial = base / p->div_factor, min_lr = initial / p->final_div_factor;
  double end1 = p->pct_start * (double)p->total - 1, end2 = (double)(p->total - 1);
  double step = (double)(t < p->total ? t : p->total - 1);
  if (step <= end1) return anneal_cos(initial, base, step / end1);
  return anneal_cos(base, min_lr, (step - end1) / (end2 - end1));
}

static tsr_status one_cycle_check(const tsr_schedule_spec *p) {
  if (!(p->pct_start * (double)p->total > 1) || !(p->pct_start * (double)p->total - 1 < (double)(p->total - 1)))
    return _tsr_error(TSR_ERR_ARG, "schedule one_cycle: pct_start %g x total %lld leaves no room for both phases (the "
                      "rise ends at pct_start x total - 1, which must be in (0, total - 1))", p->pct_start,
                      (long long)p->total);
  return TSR_OK;
}

/* ReduceLROnPlateau, mode "min", threshold_mode "rel", eps 1e-8: the rate is state.lr. */
static double plateau_lr(const tsr_schedule *s, double base, int64_t t) {
  (void)base, (void)t;
  return s->state.lr;
}

static void plateau_observe(tsr_schedule *s, double metric, int *reduced) {
  const tsr_schedule_spec *p = &s->spec;
  tsr_schedule_state *st = &s->state;
  if (metric < st->best * (1 - p->threshold)) /* false for NaN, as in PyTorch */
    st->best = metric, st->bad_epochs = 0;
  else
    st->bad_epochs++;
  if (st->cooldown_left > 0) st->cooldown_left--, st->bad_epochs = 0;
  if (st->bad_epochs > p->patience) {
    double lr = fmax(st->lr * p->factor, p->min_lr);
    if (st->lr - lr > 1e-8) st->lr = lr, *reduced = 1;
    st->cooldown_left = p->cooldown, st->bad_epochs = 0;
  }
}

#define F TSR_SCHED_FIELD
static const struct _tsr_sched_field no_fields[] = {{.key = NULL}};
static const struct _tsr_sched_field step_fields[] = {
    F(gamma, TSR_SCHED_POS, 0.1), F(step_size, TSR_SCHED_COUNT, 0), F(milestones, TSR_SCHED_LIST, 0), {.key = NULL}};
static const struct _tsr_sched_field exponential_fields[] = {F(gamma, TSR_SCHED_POS, NAN), {.key = NULL}};
static const struct _tsr_sched_field cosine_fields[] = {
    F(t0, TSR_SCHED_PERIOD, 0), F(t_mult, TSR_SCHED_PERIOD, 1), F(eta_min, TSR_SCHED_NONNEG, 0), {.key = NULL}};
static const struct _tsr_sched_field one_cycle_fields[] = {
    F(total, TSR_SCHED_PERIOD, 0), F(pct_start, TSR_SCHED_UNIT, 0.3), F(div_factor, TSR_SCHED_POS, 25),
    F(final_div_factor, TSR_SCHED_POS, 1e4), {.key = NULL}};
static const struct _tsr_sched_field plateau_fields[] = {
    F(factor, TSR_SCHED_UNIT, 0.1),      F(patience, TSR_SCHED_COUNT, 10), F(threshold, TSR_SCHED_NONNEG, 1e-4),
    F(cooldown, TSR_SCHED_COUNT, 0), F(min_lr, TSR_SCHED_NONNEG, 0), {.key = NULL}};
#undef F

const struct _tsr_schedule_ops _tsr_schedules[] = {
    {"constant", TSR_SCHEDULE_CONSTANT, 0, no_fields, constant_lr, NULL, NULL},
    {"step", TSR_SCHEDULE_STEP, 0, step_fields, step_lr, step_check, NULL},
    {"exponential", TSR_SCHEDULE_EXPONENTIAL, 0, exponential_fields, exponential_lr, NULL, NULL},
    {"cosine", TSR_SCHEDULE_COSINE, 0, cosine_fields, cosine_lr, NULL, NULL},
    {"one_cycle", TSR_SCHEDULE_ONE_CYCLE, 1, one_cycle_fields, one_cycle_lr, one_cycle_check, NULL},
    {"plateau", TSR_SCHEDULE_PLATEAU, 0, plateau_fields, plateau_lr, NULL, plateau_observe},
    {.name = NULL}};

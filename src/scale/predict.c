/* tsr_scale_predict: loads a trace, picks its training steps (those with gradient-group markers),
 * replays them (replay.c) at one rank and at the asked rank count, and sums up time per step,
 * efficiency, the traced run's own time per step and, per group, the reduction's cost and the part
 * of it no worker hides. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "scale/replay.h"

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Time per step: from the end of step s[0] to the end of step s[n-1], over n-1 steps. `end` holds
 * each step's last end; filled from the graph's simulated times or the trace's own. */
static double per_step(const double *end, int n) { return (end[n - 1] - end[0]) / (n - 1); }

static int step_index(const int64_t *s, int n, int64_t step) {
  const int64_t *p = bsearch(&step, s, n, sizeof *s, cmp_i64);
  return p ? (int)(p - s) : -1;
}

static double simulated_step(struct _tsr_rgraph *g, const int64_t *s, int n, double *end) {
  for (int k = 0; k < n; k++) end[k] = -INFINITY;
  for (int i = 0; i < g->n; i++) {
    int k = step_index(s, n, g->v[i].step);
    if (k >= 0 && g->v[i].end > end[k]) end[k] = g->v[i].end;
  }
  return per_step(end, n);
}

static int cmp_iv(const void *a, const void *b) {
  const double *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Per group: mean over steps of the part of its reduction during which no worker computed. */
static tsr_status exposed(const struct _tsr_rgraph *g, int nsteps, tsr_scale_group *gr) {
  double *iv = malloc((2 * g->n + 2) * sizeof *iv);
  if (!iv) return _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
  int m = 0;
  for (int i = 0; i < g->n; i++)
    if (g->v[i].task >= 0 && g->v[i].end > g->v[i].start) iv[2 * m] = g->v[i].start, iv[2 * m + 1] = g->v[i].end, m++;
  qsort(iv, m, 2 * sizeof *iv, cmp_iv);
  int u = 0; /* merge into a union of disjoint intervals */
  for (int i = 0; i < m; i++) {
    if (u > 0 && iv[2 * i] <= iv[2 * u - 1]) {
      if (iv[2 * i + 1] > iv[2 * u - 1]) iv[2 * u - 1] = iv[2 * i + 1];
    } else {
      iv[2 * u] = iv[2 * i], iv[2 * u + 1] = iv[2 * i + 1], u++;
    }
  }
  for (int i = 0; i < g->nmarks; i++) {
    const struct _tsr_rnode *r = &g->v[i];
    double busy = 0;
    int lo = 0, hi = u; /* first interval ending after r->start */
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (iv[2 * mid + 1] <= r->start)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (int k = lo; k < u && iv[2 * k] < r->end; k++) busy += fmin(iv[2 * k + 1], r->end) - fmax(iv[2 * k], r->start);
    gr[r->group].exposed_us += (r->end - r->start - busy) / nsteps;
  }
  free(iv);
  return TSR_OK;
}

static tsr_status predict(const struct _tsr_tl *tl, const tsr_machine *m, const tsr_scale_opts *o, int rank,
                          tsr_scale_result *res, const int64_t *steps, int ns) {
  struct _tsr_rgraph g;
  TSR_TRY(_tsr_rgraph_build(&g, tl, rank, steps[0], steps[ns - 1]));
  int workers = m->workers_per_rank > 0 ? m->workers_per_rank : tl->nworkers[rank];
  double *end = malloc(ns * sizeof *end);
  int ngroups = 0;
  for (int i = 0; i < g.nmarks; i++) ngroups = g.v[i].group + 1 > ngroups ? g.v[i].group + 1 : ngroups;
  res->groups = calloc(ngroups + 1, sizeof *res->groups);
  tsr_status st = end && res->groups ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
  if (st == TSR_OK && workers < 1)
    st = _tsr_error(TSR_ERR_FORMAT, "trace rank %d lists no worker: give workers_per_rank in the machine file", rank);
  for (int i = 0; st == TSR_OK && i < g.n; i++) {
    struct _tsr_rnode *v = &g.v[i];
    if (v->task >= 0)
      v->dur = (tl->tasks[v->task].end - tl->tasks[v->task].start) * m->compute_scale + m->task_overhead_us;
  }
  for (int i = 0; st == TSR_OK && i < g.nmarks; i++) g.v[i].dur = 0;
  if (st == TSR_OK) st = _tsr_rgraph_simulate(&g, workers, NULL);
  if (st == TSR_OK) res->step1_us = simulated_step(&g, steps, ns, end);
  for (int i = 0; st == TSR_OK && i < g.nmarks; i++) {
    struct _tsr_rnode *v = &g.v[i];
    v->dur = _tsr_cost_us(m, o->algo, v->bytes, o->ranks, &v->algo);
    res->groups[v->group] = (tsr_scale_group){.group = v->group, .bytes = v->bytes, .cost_us = v->dur, .algo = v->algo};
  }
  struct _tsr_rnet net = {m, o->ranks};
  if (st == TSR_OK) st = _tsr_rgraph_simulate(&g, workers, &net);
  if (st == TSR_OK) {
    res->ngroups = ngroups, res->ranks = o->ranks, res->nsteps = ns, res->workers = workers, res->trace_rank = rank;
    res->step_us = simulated_step(&g, steps, ns, end);
    res->efficiency = res->step_us > 0 ? res->step1_us / res->step_us : 1;
    st = exposed(&g, ns, res->groups);
  }
  if (st == TSR_OK) { /* the traced run's own time per step, same definition */
    for (int k = 0; k < ns; k++) end[k] = -INFINITY;
    for (int i = 0; i < tl->ntasks; i++) {
      const struct _tsr_tev *e = &tl->tasks[i];
      int k = e->rank == rank ? step_index(steps, ns, e->step) : -1;
      if (k >= 0 && e->end > end[k]) end[k] = e->end;
    }
    res->measured_us = per_step(end, ns);
  }
  if (st == TSR_OK && o->out_dir) st = _tsr_rgraph_write(&g, tl, workers, o->ranks, o->out_ranks, o->out_dir);
  free(end);
  _tsr_rgraph_free(&g);
  return st;
}

tsr_status tsr_scale_predict(const char *dir, const tsr_machine *m, const tsr_scale_opts *opts, tsr_scale_result *res) {
  tsr_scale_opts def;
  tsr_scale_opts_default(&def);
  const tsr_scale_opts *o = opts ? opts : &def;
  if (!dir || !m || !res)
    return _tsr_error(TSR_ERR_ARG, "tsr_scale_predict: trace folder, machine and result are required");
  memset(res, 0, sizeof *res);
  if (o->ranks < 1 || o->out_ranks < 1)
    return _tsr_error(TSR_ERR_ARG, "tsr_scale_predict: ranks %d and out_ranks %d must be >= 1", o->ranks, o->out_ranks);
  TSR_TRY(_tsr_cost_check(o->algo));
  struct _tsr_tl *tl;
  TSR_TRY(_tsr_tl_load(&tl, dir));
  tsr_status st = TSR_OK;
  int64_t *steps = malloc((tl->ngroups + 1) * sizeof *steps);
  int ns = 0;
  if (!steps) st = _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
  int rank = o->trace_rank;
  double wait;
  if (st == TSR_OK && rank < 0) st = _tsr_scale_slowest_rank(tl, &rank, &wait);
  if (st == TSR_OK && rank >= tl->nranks)
    st = _tsr_error(TSR_ERR_ARG, "trace %s has ranks 0..%d, not rank %d", dir, tl->nranks - 1, rank);
  for (int i = 0; st == TSR_OK && i < tl->ngroups; i++)
    if (tl->groups[i].rank == rank) steps[ns++] = tl->groups[i].step;
  if (st == TSR_OK) {
    qsort(steps, ns, sizeof *steps, cmp_i64);
    int u = 0; /* unique, then keep [first, last]; by default the first traced step is left out */
    int64_t first = o->first_step >= 0 ? o->first_step : (ns ? steps[0] + 1 : 0);
    for (int i = 0; i < ns; i++) {
      int64_t s = steps[i];
      if ((u > 0 && steps[u - 1] == s) || s < first || (o->last_step >= 0 && s > o->last_step)) continue;
      steps[u++] = s;
    }
    ns = u;
    if (ns < 2)
      st = _tsr_error(TSR_ERR_FORMAT,
                      "trace %s: %d training step(s) with gradient-group markers in the range "
                      "(need at least 2: trace 3 or more training steps with a Tessera that records the markers)",
                      dir, ns);
  }
  if (st == TSR_OK) st = predict(tl, m, o, rank, res, steps, ns);
  if (st != TSR_OK) tsr_scale_result_free(res);
  free(steps);
  _tsr_tl_free(tl);
  return st;
}

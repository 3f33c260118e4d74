/* The replay behind tsr_scale_predict: one rank's traced tasks of several training steps become a
 * graph (their dependencies, their measured durations times the machine's compute scale); the
 * reductions the trace ran (tasks named allreduce_sum, wire packs) are taken out and each gradient
 * group's reduction becomes one node, priced by the cost table for the predicted rank count. The
 * group markers of the trace say where each group's reduction was submitted: it waits for what its
 * updates waited for before it, and its updates wait for it. Data parallelism makes ranks alike, so
 * one rank is simulated: list scheduling on its workers (ready tasks in submission order) and one
 * network queue for its reductions, in the order they become ready. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/error.h"
#include "scale/replay.h"

void tsr_scale_opts_default(tsr_scale_opts *o) {
  *o = (tsr_scale_opts){
      .ranks = 1, .algo = "f32", .trace_rank = -1, .first_step = -1, .last_step = -1, .out_dir = NULL, .out_ranks = 4};
}

void tsr_scale_result_free(tsr_scale_result *r) {
  if (r) free(r->groups), r->groups = NULL, r->ngroups = 0;
}

int _tsr_reduction_task(const struct _tsr_tev *e) {
  return !strcmp(e->name, "allreduce_sum") || !strncmp(e->op, "wire_", 5);
}
int _tsr_group_consumer(const struct _tsr_tev *e) {
  return !strncmp(e->op, "opt_update", 10) || !strcmp(e->op, "check_finite");
}

static int add_node(struct _tsr_rgraph *g, const struct _tsr_rnode *n) {
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 256;
    struct _tsr_rnode *v = realloc(g->v, cap * sizeof *v);
    if (!v) return -1;
    g->v = v, g->cap = cap;
  }
  g->v[g->n] = *n;
  return g->n++;
}

/* Appends x to the list (*a, *n) unless present. */
static int push_dep(int **a, int *n, int x) {
  for (int i = 0; i < *n; i++)
    if ((*a)[i] == x) return 0;
  int *b = realloc(*a, (*n + 1) * sizeof *b);
  if (!b) return -1;
  *a = b, b[(*n)++] = x;
  return 0;
}

void _tsr_rgraph_free(struct _tsr_rgraph *g) {
  for (int i = 0; i < g->n; i++) free(g->v[i].deps);
  free(g->v);
  free(g->marks);
  memset(g, 0, sizeof *g);
}

static int cmp_mark(const void *a, const void *b) {
  const struct _tsr_gev *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The group marker that covers task e: same step, the last marker submitted before it. */
static int mark_of(const struct _tsr_rgraph *g, const struct _tsr_tev *e) {
  int best = -1;
  for (int k = 0; k < g->nmarks; k++)
    if (g->marks[k].step == e->step && g->marks[k].seq <= e->seq) best = k;
  return best;
}

tsr_status _tsr_rgraph_build(struct _tsr_rgraph *g, const struct _tsr_tl *tl, int rank, int64_t first, int64_t last) {
  memset(g, 0, sizeof *g);
  for (int k = 0; k < tl->ngroups; k++) {
    const struct _tsr_gev *m = &tl->groups[k];
    if (m->rank != rank || m->step < first || (last >= 0 && m->step > last)) continue;
    struct _tsr_gev *v = realloc(g->marks, (g->nmarks + 1) * sizeof *v);
    if (!v) return _tsr_rgraph_free(g), _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
    g->marks = v, g->marks[g->nmarks++] = *m;
  }
  qsort(g->marks, g->nmarks, sizeof *g->marks, cmp_mark);
  int *map = malloc((tl->ntasks + 1) * sizeof *map), **splice = calloc(tl->ntasks + 1, sizeof *splice);
  int *nsplice = calloc(tl->ntasks + 1, sizeof *nsplice), *redn = malloc((g->nmarks + 1) * sizeof *redn);
  tsr_status st = map && splice && nsplice && redn ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
  /* The reductions first: nodes 0 .. nmarks-1. */
  for (int k = 0; st == TSR_OK && k < g->nmarks; k++) {
    struct _tsr_rnode n = {.task = -1,
                           .group = g->marks[k].group,
                           .consumer_of = -1,
                           .step = g->marks[k].step,
                           .seq = g->marks[k].seq,
                           .bytes = (double)g->marks[k].bytes};
    if ((redn[k] = add_node(g, &n)) < 0) st = _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
  }
  for (int i = 0; st == TSR_OK && i < tl->ntasks; i++) {
    const struct _tsr_tev *e = &tl->tasks[i];
    map[i] = -1;
    if (e->rank != rank || e->step < first || (last >= 0 && e->step > last)) continue;
    int *deps = NULL, nd = 0, oom = 0;
    for (int k = 0; k < e->ndeps && !oom; k++) {
      int d = e->deps[k];
      if (map[d] >= 0) oom = push_dep(&deps, &nd, map[d]);
      for (int j = 0; j < nsplice[d] && !oom; j++) oom = push_dep(&deps, &nd, splice[d][j]);
    }
    if (!oom && _tsr_reduction_task(e)) { /* its dependents inherit its dependencies */
      splice[i] = deps, nsplice[i] = nd;
      continue;
    }
    int mk = !oom && _tsr_group_consumer(e) ? mark_of(g, e) : -1;
    if (mk >= 0) oom = push_dep(&deps, &nd, redn[mk]);
    struct _tsr_rnode n = {.task = i,
                           .group = -1,
                           .step = e->step,
                           .seq = e->seq,
                           .dur = e->end - e->start,
                           .deps = deps,
                           .ndeps = nd,
                           .consumer_of = mk};
    if (oom || (map[i] = add_node(g, &n)) < 0) {
      free(deps);
      st = _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
    }
  }
  /* A reduction waits for what its consumers waited for, submitted before its marker. */
  for (int i = g->nmarks; st == TSR_OK && i < g->n; i++) {
    const struct _tsr_rnode *u = &g->v[i];
    if (u->consumer_of < 0) continue;
    struct _tsr_rnode *r = &g->v[redn[u->consumer_of]];
    for (int k = 0; k < u->ndeps && st == TSR_OK; k++) {
      const struct _tsr_rnode *d = &g->v[u->deps[k]];
      if (d->task >= 0 && d->step == r->step && d->seq < r->seq && d->consumer_of < 0 &&
          push_dep(&r->deps, &r->ndeps, u->deps[k]))
        st = _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
    }
  }
  for (int i = 0; splice && i < tl->ntasks; i++) free(splice[i]);
  free(splice), free(nsplice), free(map), free(redn);
  if (st != TSR_OK) _tsr_rgraph_free(g);
  return st;
}

/* ---- the predicted timeline ---- */

tsr_status _tsr_rgraph_write(const struct _tsr_rgraph *g, const struct _tsr_tl *tl, int workers, int ranks,
                             int out_ranks, const char *dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return _tsr_error(TSR_ERR_IO, "predicted trace folder %s: %s", dir, strerror(errno));
  int nr = out_ranks < ranks ? out_ranks : ranks, *idx = malloc((g->n + 1) * sizeof *idx), *deps = NULL;
  struct _tsr_tl *o = _tsr_tl_new(nr, workers);
  tsr_status st = o && idx ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
  for (int r = 0; st == TSR_OK && r < nr; r++) {
    for (int i = 0; st == TSR_OK && i < g->n; i++) {
      const struct _tsr_rnode *v = &g->v[i];
      if (v->task < 0) {
        for (int s = 0; s < 2 && ranks > 1; s++) {
          struct _tsr_xev x = {.step = v->step,
                               .tag = v->group,
                               .rank = r,
                               .peer = (r + (s ? 1 : ranks - 1)) % ranks,
                               .is_send = s,
                               .bytes = (uint64_t)v->bytes,
                               .post = v->start,
                               .done = v->end};
          if (_tsr_tl_add_xfer(o, &x) < 0) st = _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
        }
        struct _tsr_gev m = {.step = v->step, .rank = r, .group = v->group, .bytes = (uint64_t)v->bytes, .seq = v->seq};
        if (_tsr_tl_add_group(o, &m) < 0) st = _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
        continue;
      }
      struct _tsr_tev e = tl->tasks[v->task];
      e.rank = r, e.worker = v->worker, e.submit = e.start = v->start, e.end = v->end;
      int nd = 0, *d = realloc(deps, (v->ndeps + 1) * sizeof *d);
      if (!d) {
        st = _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
        break;
      }
      deps = d;
      for (int k = 0; k < v->ndeps; k++)
        if (g->v[v->deps[k]].task >= 0) deps[nd++] = idx[v->deps[k]];
      if ((idx[i] = _tsr_tl_add_task(o, &e, deps, nd)) < 0) st = _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
    }
  }
  if (st == TSR_OK) {
    _tsr_tl_finish(o);
    char path[4200];
    st = _tsr_tl_write_raw(o, dir);
    snprintf(path, sizeof path, "%s/trace.json", dir);
    if (st == TSR_OK) st = _tsr_tl_write_chrome(o, path);
    snprintf(path, sizeof path, "%s/trace.paje", dir);
    if (st == TSR_OK) st = _tsr_tl_write_paje(o, path);
  }
  _tsr_tl_free(o);
  free(idx), free(deps);
  return st;
}

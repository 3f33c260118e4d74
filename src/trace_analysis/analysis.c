/* Per-step analysis of a trace, per rank: computation (worker time in the step's tasks), worker time
 * in other steps' tasks (steps overlap: the trainer keeps several in flight), idle worker time (no
 * task of any step running), communication (union of the transfer intervals), the part of it hidden
 * behind computation (some worker of the rank running a task, of any step), and the critical path:
 * the longest chain of dependent tasks of the step weighted by their durations (what the step would
 * take on unlimited workers with free communication). The run's idle share is taken over its wall
 * time (first start to last end of the reported steps), so overlapping steps are not counted twice. */
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "trace_analysis/timeline.h"

struct ival {
  double a, b;
};

static int cmp_ival(const void *x, const void *y) {
  double a = ((const struct ival *)x)->a, b = ((const struct ival *)y)->a;
  return a < b ? -1 : a > b;
}

/* Sorts and merges intervals in place; returns the new count. */
static int merge(struct ival *v, int n) {
  qsort(v, n, sizeof *v, cmp_ival);
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (m && v[i].a <= v[m - 1].b) {
      if (v[i].b > v[m - 1].b) v[m - 1].b = v[i].b;
    } else {
      v[m++] = v[i];
    }
  }
  return m;
}

/* Length of the intersection of two merged interval lists. */
static double overlap(const struct ival *x, int nx, const struct ival *y, int ny) {
  double s = 0;
  for (int i = 0, j = 0; i < nx && j < ny;) {
    double a = x[i].a > y[j].a ? x[i].a : y[j].a, b = x[i].b < y[j].b ? x[i].b : y[j].b;
    if (b > a) s += b - a;
    if (x[i].b < y[j].b) i++; else j++;
  }
  return s;
}

/* Merged busy intervals of every worker (tasks of any step): worker w of rank r is k = wfirst[r] + w,
 * of nw[r] workers, and owns iv[ifirst[k] .. ifirst[k + 1]). */
struct workers {
  int *nw, *wfirst, *ifirst;
  struct ival *iv;
};

static void workers_free(struct workers *W) { free(W->nw), free(W->wfirst), free(W->ifirst), free(W->iv); }

static int workers_build(const struct _tsr_tl *tl, struct workers *W) {
  int nr = tl->nranks, nt = tl->ntasks;
  *W = (struct workers){calloc(nr + 1, sizeof(int)), calloc(nr + 1, sizeof(int)), NULL,
                        malloc((nt + 1) * sizeof *W->iv)};
  if (!W->nw || !W->wfirst || !W->iv) return -1;
  for (int r = 0; r < nr; r++) W->nw[r] = tl->nworkers[r];
  for (int i = 0; i < nt; i++)
    if (tl->tasks[i].worker >= W->nw[tl->tasks[i].rank]) W->nw[tl->tasks[i].rank] = tl->tasks[i].worker + 1;
  for (int r = 0; r < nr; r++) W->wfirst[r + 1] = W->wfirst[r] + W->nw[r];
  int nk = W->wfirst[nr], *pos = calloc(nk + 1, sizeof *pos);
  if (!pos || !(W->ifirst = calloc(nk + 1, sizeof(int)))) return free(pos), -1;
  /* bucket the tasks by worker, then merge each worker's intervals and close the gaps */
  for (int i = 0; i < nt; i++) W->ifirst[W->wfirst[tl->tasks[i].rank] + tl->tasks[i].worker + 1]++;
  for (int k = 0; k < nk; k++) W->ifirst[k + 1] += W->ifirst[k];
  memcpy(pos, W->ifirst, nk * sizeof *pos);
  for (int i = 0; i < nt; i++) {
    const struct _tsr_tev *e = &tl->tasks[i];
    W->iv[pos[W->wfirst[e->rank] + e->worker]++] = (struct ival){e->start, e->end};
  }
  free(pos);
  int m = 0;
  for (int k = 0, start = 0; k < nk; k++) {
    int end = W->ifirst[k + 1], n = merge(W->iv + start, end - start);
    memmove(W->iv + m, W->iv + start, n * sizeof *W->iv);
    W->ifirst[k] = m, m += n, start = end;
  }
  W->ifirst[nk] = m;
  return 0;
}

/* Worker time of rank r running tasks (of any step) within [a, b]. */
static double busy_within(const struct workers *W, int r, double a, double b) {
  double sum = 0;
  for (int k = W->wfirst[r]; k < W->wfirst[r + 1]; k++) {
    const struct ival *v = W->iv + W->ifirst[k];
    int n = W->ifirst[k + 1] - W->ifirst[k], lo = 0, hi = n;
    while (lo < hi) { /* first interval ending after a (merged: ends are sorted too) */
      int mid = (lo + hi) / 2;
      if (v[mid].b <= a)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (int i = lo; i < n && v[i].a < b; i++) sum += (v[i].b < b ? v[i].b : b) - (v[i].a > a ? v[i].a : a);
  }
  return sum;
}

static const struct _tsr_tl *sort_tl;
static int cmp_step_rank(const void *x, const void *y) {
  const struct _tsr_tev *a = &sort_tl->tasks[*(const int *)x], *b = &sort_tl->tasks[*(const int *)y];
  if (a->step != b->step) return a->step < b->step ? -1 : 1;
  if (a->rank != b->rank) return a->rank - b->rank;
  return *(const int *)x - *(const int *)y;
}

void _tsr_step_stats_free(struct _tsr_step_stats *s, int n) {
  for (int i = 0; s && i < n; i++) free(s[i].crit);
  free(s);
}

tsr_status _tsr_tl_step_stats(const struct _tsr_tl *tl, struct _tsr_step_stats **out, int *nout) {
  *out = NULL, *nout = 0;
  int nt = tl->ntasks;
  int *idx = malloc((nt + 1) * sizeof *idx), *pred = malloc((nt + 1) * sizeof *pred);
  double *dist = malloc((nt + 1) * sizeof *dist);
  int *instep = malloc((nt + 1) * sizeof *instep);
  struct ival *busy = malloc((nt + 1) * sizeof *busy), *comm = malloc((tl->nxfers + 1) * sizeof *comm);
  int *rfirst = calloc(tl->nranks + 1, sizeof *rfirst);
  struct _tsr_step_stats *st = NULL;
  struct workers W;
  int ns = 0;
  tsr_status ret = TSR_OK;
  if (workers_build(tl, &W) || !idx || !pred || !dist || !instep || !busy || !comm || !rfirst) goto oom;
  /* Computation intervals of each rank, merged: busy[rfirst[r] .. rfirst[r+1]). */
  int nb = 0;
  for (int r = 0; r < tl->nranks; r++) {
    int first = nb;
    for (int i = 0; i < nt; i++)
      if (tl->tasks[i].rank == r) busy[nb++] = (struct ival){tl->tasks[i].start, tl->tasks[i].end};
    nb = first + merge(busy + first, nb - first);
    rfirst[r] = first, rfirst[r + 1] = nb;
  }
  for (int i = 0; i < nt; i++) idx[i] = i, instep[i] = 0;
  sort_tl = tl;
  qsort(idx, nt, sizeof *idx, cmp_step_rank);
  for (int g = 0; g < nt;) {
    int h = g;
    const struct _tsr_tev *e0 = &tl->tasks[idx[g]];
    while (h < nt && tl->tasks[idx[h]].step == e0->step && tl->tasks[idx[h]].rank == e0->rank) h++;
    struct _tsr_step_stats *p = realloc(st, (ns + 1) * sizeof *st);
    if (!p) goto oom;
    st = p;
    struct _tsr_step_stats *s = &st[ns++];
    memset(s, 0, sizeof *s);
    s->step = e0->step, s->rank = e0->rank, s->ntasks = h - g;
    s->nworkers = W.nw[e0->rank];
    s->begin = 1e300, s->end = -1e300;
    for (int k = g; k < h; k++) {
      const struct _tsr_tev *e = &tl->tasks[idx[k]];
      s->begin = e->start < s->begin ? e->start : s->begin;
      s->end = e->end > s->end ? e->end : s->end;
      s->busy += e->end - e->start;
      instep[idx[k]] = ns; /* marks the group (ns >= 1) */
    }
    int nc = 0;
    for (int k = 0; k < tl->nxfers; k++) {
      const struct _tsr_xev *x = &tl->xfers[k];
      if (x->step != s->step || x->rank != s->rank) continue;
      comm[nc++] = (struct ival){x->post, x->done};
      s->end = x->done > s->end ? x->done : s->end;
    }
    nc = merge(comm, nc);
    for (int k = 0; k < nc; k++) s->comm += comm[k].b - comm[k].a;
    s->hidden = overlap(comm, nc, busy + rfirst[s->rank], rfirst[s->rank + 1] - rfirst[s->rank]);
    double any = busy_within(&W, s->rank, s->begin, s->end);
    s->idle = s->nworkers * (s->end - s->begin) - any;
    s->other = any - s->busy;
    if (s->idle < 0) s->idle = 0;
    if (s->other < 0) s->other = 0; /* (tasks overlapping on one worker: a broken trace) */
    /* Longest path: tasks of a rank are in submission order and depend only on earlier ones. */
    int last = -1;
    for (int k = g; k < h; k++) {
      int i = idx[k];
      const struct _tsr_tev *e = &tl->tasks[i];
      double best = 0;
      pred[i] = -1;
      for (int d = 0; d < e->ndeps; d++) {
        int j = e->deps[d];
        if (j >= 0 && j < i && instep[j] == ns && dist[j] > best) best = dist[j], pred[i] = j;
      }
      dist[i] = best + (e->end - e->start);
      if (last < 0 || dist[i] > dist[last]) last = i;
    }
    s->critical = last >= 0 ? dist[last] : 0;
    for (int i = last; i >= 0; i = pred[i]) s->ncrit++;
    if (!(s->crit = malloc((s->ncrit + 1) * sizeof *s->crit))) goto oom;
    int k = s->ncrit;
    for (int i = last; i >= 0; i = pred[i]) s->crit[--k] = i;
    g = h;
  }
  *out = st, *nout = ns;
  goto done;
oom:
  _tsr_step_stats_free(st, ns);
  ret = _tsr_error(TSR_ERR_NOMEM, "trace analysis: out of memory for %d tasks", nt);
done:
  free(idx), free(pred), free(dist), free(instep), free(busy), free(comm), free(rfirst);
  workers_free(&W);
  return ret;
}

tsr_status _tsr_tl_run_stats(const struct _tsr_tl *tl, const struct _tsr_step_stats *st, int n, int64_t first,
                             int64_t last, struct _tsr_run_stats *out) {
  struct workers W;
  if (workers_build(tl, &W)) {
    workers_free(&W);
    return _tsr_error(TSR_ERR_NOMEM, "trace analysis: out of memory for %d tasks", tl->ntasks);
  }
  for (int r = 0; r < tl->nranks; r++) {
    struct _tsr_run_stats *o = &out[r];
    *o = (struct _tsr_run_stats){.rank = r, .nworkers = W.nw[r]};
    double a = 1e300, b = -1e300;
    for (int i = 0; i < n; i++)
      if (st[i].rank == r && st[i].step >= first && (last < 0 || st[i].step <= last)) {
        a = st[i].begin < a ? st[i].begin : a, b = st[i].end > b ? st[i].end : b;
        o->nsteps++;
      }
    if (!o->nsteps) continue;
    o->wall = b - a;
    o->busy = busy_within(&W, r, a, b);
    o->idle = o->nworkers * o->wall - o->busy;
    if (o->idle < 0) o->idle = 0;
  }
  workers_free(&W);
  return TSR_OK;
}

/* ---- report ---- */

struct acc {
  char key[TSR_TRACE_NAME + TSR_TRACE_OP];
  double v;
};

static int add(struct acc **a, int *n, const char *key, double v) {
  for (int i = 0; i < *n; i++)
    if (!strcmp((*a)[i].key, key)) return (*a)[i].v += v, 0;
  struct acc *p = realloc(*a, (*n + 1) * sizeof **a);
  if (!p) return -1;
  *a = p;
  snprintf(p[*n].key, sizeof p[*n].key, "%s", key);
  p[(*n)++].v = v;
  return 0;
}

static int cmp_acc(const void *x, const void *y) {
  double a = ((const struct acc *)x)->v, b = ((const struct acc *)y)->v;
  return a > b ? -1 : a < b;
}

static void layer_of(const char *name, char *out, size_t len) {
  snprintf(out, len, "%s", name);
  out[strcspn(out, ".")] = 0;
}

static void print_breakdown(const struct _tsr_tl *tl, FILE *out, int64_t step, int rank, double busy) {
  struct acc *layers = NULL, *ops = NULL, *pairs = NULL;
  int nl = 0, no = 0, np = 0;
  for (int i = 0; i < tl->ntasks; i++) {
    const struct _tsr_tev *e = &tl->tasks[i];
    if (e->step != step || e->rank != rank) continue;
    char layer[TSR_TRACE_NAME], pair[TSR_TRACE_NAME + TSR_TRACE_OP];
    layer_of(e->name, layer, sizeof layer);
    snprintf(pair, sizeof pair, "%s\t%s", layer, e->op);
    double d = e->end - e->start;
    if (add(&layers, &nl, layer, d) || add(&ops, &no, e->op, d) || add(&pairs, &np, pair, d)) break;
  }
  qsort(layers, nl, sizeof *layers, cmp_acc);
  qsort(ops, no, sizeof *ops, cmp_acc);
  qsort(pairs, np, sizeof *pairs, cmp_acc);
  fprintf(out, "  %-24s %10s %6s  %s\n", "layer", "ms", "%", "operations (ms)");
  enum { TOP = 20 }; /* layers shown; the rest are summed on one line */
  double rest = 0;
  for (int i = TOP; i < nl; i++) rest += layers[i].v;
  for (int i = 0; i < nl && i < TOP; i++) {
    fprintf(out, "  %-24s %10.3f %6.1f  ", layers[i].key, layers[i].v / 1e3, 100 * layers[i].v / (busy > 0 ? busy : 1));
    size_t kl = strlen(layers[i].key);
    for (int k = 0, shown = 0; k < np; k++)
      if (!strncmp(pairs[k].key, layers[i].key, kl) && pairs[k].key[kl] == '\t')
        fprintf(out, "%s%s %.3f", shown++ ? ", " : "", pairs[k].key + kl + 1, pairs[k].v / 1e3);
    fputc('\n', out);
  }
  if (nl > TOP)
    fprintf(out, "  %-24s %10.3f %6.1f\n", "(other layers)", rest / 1e3, 100 * rest / (busy > 0 ? busy : 1));
  fprintf(out, "  %-24s %10s %6s\n", "operation", "ms", "%");
  for (int i = 0; i < no; i++)
    fprintf(out, "  %-24s %10.3f %6.1f\n", ops[i].key, ops[i].v / 1e3, 100 * ops[i].v / (busy > 0 ? busy : 1));
  free(layers), free(ops), free(pairs);
}

void _tsr_tl_report(const struct _tsr_tl *tl, FILE *out, int64_t first, int64_t last) {
  struct _tsr_step_stats *st;
  int n;
  if (_tsr_tl_step_stats(tl, &st, &n) != TSR_OK) {
    fprintf(out, "trace analysis: %s\n", tsr_last_error());
    return;
  }
  double sum_span = 0, sum_comm = 0, sum_hidden = 0, sum_crit = 0;
  int shown = 0;
  for (int i = 0; i < n; i++) {
    const struct _tsr_step_stats *s = &st[i];
    if (s->step < first || (last >= 0 && s->step > last)) continue;
    double span = s->end - s->begin, cap = s->nworkers * span;
    shown++;
    sum_span += span, sum_comm += s->comm, sum_hidden += s->hidden;
    sum_crit += s->critical;
    fprintf(out, "step %lld, rank %d: %.3f ms from first start to last end, %d tasks on %d workers\n",
            (long long)s->step, s->rank, span / 1e3, s->ntasks, s->nworkers);
    double pc = 100 / (cap > 0 ? cap : 1);
    fprintf(out, "  computation %.3f ms (%.1f%% of worker time)", s->busy / 1e3, pc * s->busy);
    if (s->other > 0) fprintf(out, ", other steps' tasks %.3f ms (%.1f%%)", s->other / 1e3, pc * s->other);
    fprintf(out, ", idle %.3f ms (%.1f%%)\n", s->idle / 1e3, pc * s->idle);
    if (s->comm > 0)
      fprintf(out, "  communication %.3f ms, %.1f%% hidden behind computation\n", s->comm / 1e3,
              100 * s->hidden / s->comm);
    else
      fprintf(out, "  communication: none recorded\n");
    fprintf(out, "  critical path %.3f ms (%.1f%% of the step), %d tasks:", s->critical / 1e3,
            100 * s->critical / (span > 0 ? span : 1), s->ncrit);
    for (int k = 0; k < s->ncrit; k++) {
      const struct _tsr_tev *e = &tl->tasks[s->crit[k]];
      if (s->ncrit > 12 && k == 5) {
        fprintf(out, " > ... (%d more)", s->ncrit - 10);
        k = s->ncrit - 6;
        continue;
      }
      fprintf(out, "%s %s:%s %.2f", k ? " >" : "", e->name, e->op, (e->end - e->start) / 1e3);
    }
    fputc('\n', out);
    print_breakdown(tl, out, s->step, s->rank, s->busy);
  }
  struct _tsr_run_stats *rs = shown > 1 ? malloc((tl->nranks + 1) * sizeof *rs) : NULL;
  if (shown > 1 && (!rs || _tsr_tl_run_stats(tl, st, n, first, last, rs) != TSR_OK)) {
    fprintf(out, "trace analysis: out of memory for the run summary\n");
  } else if (shown > 1) {
    double wall = 0, cap = 0, busy = 0, idle = 0;
    for (int r = 0; r < tl->nranks; r++)
      wall += rs[r].wall, cap += rs[r].nworkers * rs[r].wall, busy += rs[r].busy, idle += rs[r].idle;
    cap = cap > 0 ? cap : 1;
    fprintf(out,
            "\n%d step-ranks: mean %.3f ms from first start to last end per step, %.3f ms of wall time per "
            "step (steps overlap), critical path %.3f ms, communication %.3f ms per step "
            "(%.1f%% hidden)\nworkers over the steps' wall time: computing %.1f%%, idle %.1f%% (no task of any "
            "step running)\n",
            shown, sum_span / shown / 1e3, wall / shown / 1e3, sum_crit / shown / 1e3, sum_comm / shown / 1e3,
            sum_comm > 0 ? 100 * sum_hidden / sum_comm : 0.0, 100 * busy / cap, 100 * idle / cap);
  }
  free(rs);
  if (!shown) fprintf(out, "no traced step in %lld:%lld\n", (long long)first, (long long)last);
  _tsr_step_stats_free(st, n);
}

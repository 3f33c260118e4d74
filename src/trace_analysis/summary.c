/* The one-screen summary of a trace (tessera-trace's default; --detail prints every step, analysis.c):
 * per rank the wall time per step, critical path, computing and idle shares and the communication
 * with its hidden part; the slowest steps; where the task time went, by operation family, layer and
 * operation; and the critical path of the median step. Steps overlap, so the per-rank shares are
 * taken over the wall time of the reported steps (_tsr_tl_run_stats), each moment counted once. */
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "trace_analysis/timeline.h"

enum { TOP = 6, WIDTH = 100 };

struct kv {
  char key[TSR_TRACE_NAME];
  double v;
};

static int by_key(const void *a, const void *b) { return strcmp(((const struct kv *)a)->key, ((const struct kv *)b)->key); }
static int by_value(const void *a, const void *b) {
  double x = ((const struct kv *)a)->v, y = ((const struct kv *)b)->v;
  return x > y ? -1 : x < y;
}

/* Task time of the window per layer (the name up to its first '.') or per operation, largest first. */
static int totals(const struct _tsr_tl *tl, int64_t first, int64_t last, int by_layer, struct kv **out) {
  struct kv *v = malloc((tl->ntasks + 1) * sizeof *v);
  if (!(*out = v)) return -1;
  int n = 0;
  for (int i = 0; i < tl->ntasks; i++) {
    const struct _tsr_tev *e = &tl->tasks[i];
    if (e->step < first || (last >= 0 && e->step > last)) continue;
    snprintf(v[n].key, sizeof v[n].key, "%s", by_layer ? e->name : e->op);
    if (by_layer) v[n].key[strcspn(v[n].key, ".")] = 0;
    v[n++].v = e->end - e->start;
  }
  qsort(v, n, sizeof *v, by_key);
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (m && !strcmp(v[m - 1].key, v[i].key)) v[m - 1].v += v[i].v;
    else v[m++] = v[i];
  }
  qsort(v, m, sizeof *v, by_value);
  return m;
}

/* "label: a 12.3%, b 4.5%, ..." wrapped at WIDTH columns; at most `top` items, the rest summed. */
static void shares(FILE *out, const char *label, const struct kv *v, int n, int top, double total) {
  int col = fprintf(out, "%s:", label);
  double rest = 0;
  for (int i = 0; i < n; i++) {
    if (i >= top) {
      rest += v[i].v;
      continue;
    }
    char item[TSR_TRACE_NAME + 32];
    int len = snprintf(item, sizeof item, " %s %.1f%%%s", v[i].key, 100 * v[i].v / total, i + 1 < n ? "," : "");
    if (col + len > WIDTH) col = fprintf(out, "\n ");
    col += fprintf(out, "%s", item);
  }
  if (rest > 0) fprintf(out, "%s(%d more) %.1f%%", col + 20 > WIDTH ? "\n  " : " ", n - top, 100 * rest / total);
  fputc('\n', out);
}

static int by_span(const void *a, const void *b) {
  const struct _tsr_step_stats *x = *(const struct _tsr_step_stats *const *)a, *y = *(const struct _tsr_step_stats *const *)b;
  double p = x->end - x->begin, q = y->end - y->begin;
  if (p != q) return p > q ? -1 : 1;
  return x->step != y->step ? (x->step < y->step ? -1 : 1) : x->rank - y->rank; /* ties: a fixed order */
}

static void print_path(FILE *out, const struct _tsr_tl *tl, const struct _tsr_step_stats *s) {
  int col = fprintf(out, "critical path of step %lld (median span, rank %d): %.3f ms, %d tasks:", (long long)s->step,
                    s->rank, s->critical / 1e3, s->ncrit);
  for (int k = 0; k < s->ncrit; k++) {
    if (s->ncrit > 8 && k == 4) { /* the first four and the last three */
      col += fprintf(out, " > ... (%d more)", s->ncrit - 7);
      k = s->ncrit - 4;
      continue;
    }
    const struct _tsr_tev *e = &tl->tasks[s->crit[k]];
    char item[TSR_TRACE_NAME + TSR_TRACE_OP + 32];
    int len = snprintf(item, sizeof item, "%s%s:%s %.2f", k ? " > " : " ", e->name, e->op, (e->end - e->start) / 1e3);
    if (col + len > WIDTH) col = fprintf(out, "\n ");
    col += fprintf(out, "%s", item);
  }
  fputc('\n', out);
}

void _tsr_tl_summary(const struct _tsr_tl *tl, FILE *out, int64_t first, int64_t last) {
  struct _tsr_step_stats *st = NULL, **sel = NULL;
  struct _tsr_run_stats *rs = NULL;
  struct kv *layers = NULL, *ops = NULL;
  int n = 0, nsel = 0;
  if (_tsr_tl_step_stats(tl, &st, &n) != TSR_OK) {
    fprintf(out, "trace analysis: %s\n", tsr_last_error());
    return;
  }
  sel = malloc((n + 1) * sizeof *sel), rs = malloc((tl->nranks + 1) * sizeof *rs);
  if (!sel || !rs) goto oom;
  int64_t lo = INT64_MAX, hi = -1;
  for (int i = 0; i < n; i++)
    if (st[i].step >= first && (last < 0 || st[i].step <= last)) {
      sel[nsel++] = &st[i];
      lo = st[i].step < lo ? st[i].step : lo, hi = st[i].step > hi ? st[i].step : hi;
    }
  if (!nsel) {
    fprintf(out, "no traced step in %lld:%lld\n", (long long)first, (long long)last);
    goto done;
  }
  if (_tsr_tl_run_stats(tl, st, n, first, last, rs) != TSR_OK) goto oom;
  int maxw = 0;
  for (int r = 0; r < tl->nranks; r++) maxw = rs[r].nworkers > maxw ? rs[r].nworkers : maxw;
  fprintf(out, "steps %lld to %lld on %d rank(s) of up to %d workers; per rank, means over its steps:\n",
          (long long)lo, (long long)hi, tl->nranks, maxw);
  fprintf(out, "rank  steps  wall/step  critical path  computing   idle  communication  hidden\n");
  for (int r = 0; r < tl->nranks; r++) {
    const struct _tsr_run_stats *q = &rs[r];
    if (!q->nsteps) continue;
    double crit = 0, comm = 0, hidden = 0, cap = q->nworkers * q->wall > 0 ? q->nworkers * q->wall : 1;
    for (int i = 0; i < nsel; i++)
      if (sel[i]->rank == r) crit += sel[i]->critical, comm += sel[i]->comm, hidden += sel[i]->hidden;
    char hid[16] = "-";
    if (comm > 0) snprintf(hid, sizeof hid, "%.1f%%", 100 * hidden / comm);
    fprintf(out, "%4d %6d %7.3f ms %10.3f ms %9.1f%% %5.1f%% %10.3f ms %7s\n", r, q->nsteps,
            q->wall / q->nsteps / 1e3, crit / q->nsteps / 1e3, 100 * q->busy / cap, 100 * q->idle / cap,
            comm / q->nsteps / 1e3, hid);
  }
  qsort(sel, nsel, sizeof *sel, by_span);
  fprintf(out, "slowest steps (first start to last end):");
  for (int i = 0; i < nsel && i < 3; i++)
    fprintf(out, "%s step %lld rank %d %.3f ms", i ? "," : "", (long long)sel[i]->step, sel[i]->rank,
            (sel[i]->end - sel[i]->begin) / 1e3);
  fprintf(out, "; median %.3f ms\n", (sel[nsel / 2]->end - sel[nsel / 2]->begin) / 1e3);

  struct kv fam[TSR_TL_NFAMILIES];
  double total = 0;
  for (int k = 0; k < TSR_TL_NFAMILIES; k++) snprintf(fam[k].key, sizeof fam[k].key, "%s", _tsr_tl_family_name(k)), fam[k].v = 0;
  for (int i = 0; i < tl->ntasks; i++) {
    const struct _tsr_tev *e = &tl->tasks[i];
    if (e->step < first || (last >= 0 && e->step > last)) continue;
    fam[_tsr_tl_family(e->name, e->op)].v += e->end - e->start;
    total += e->end - e->start;
  }
  qsort(fam, TSR_TL_NFAMILIES, sizeof *fam, by_value);
  int nfam = 0;
  while (nfam < TSR_TL_NFAMILIES && fam[nfam].v > 0) nfam++;
  int nl = totals(tl, first, last, 1, &layers), no = totals(tl, first, last, 0, &ops);
  if (nl < 0 || no < 0) goto oom;
  total = total > 0 ? total : 1;
  fprintf(out, "task time %.3f ms in all, by\n", total / 1e3);
  shares(out, "  family", fam, nfam, TSR_TL_NFAMILIES, total);
  shares(out, "  layer", layers, nl, TOP, total);
  shares(out, "  operation", ops, no, TOP, total);
  /* the median step of rank 0 by span (sel is sorted by span, longest first) */
  for (int i = nsel / 2, k = 0; k < nsel; k++) {
    const struct _tsr_step_stats *s = sel[(i + k) % nsel];
    if (s->rank == 0) {
      print_path(out, tl, s);
      break;
    }
  }
  fprintf(out, "(--detail: every step by layer and operation with its whole critical path; --plots: the timeline)\n");
  goto done;
oom:
  fprintf(out, "trace analysis: out of memory for the summary\n");
done:
  free(sel), free(rs), free(layers), free(ops);
  _tsr_step_stats_free(st, n);
}

/* The timeline of a window of steps as plain-text data for a plotting program (tessera-trace draws it
 * with gnuplot): one lane per worker of each rank and two per rank for its MPI sends and receives,
 * each task with its operation family and whether it lies on its step's critical path, and each
 * step's span over all ranks (its boundaries). Blocks are separated by two blank lines and opened by
 * a comment naming them, so gnuplot selects them as index 'tasks:', 'transfers:' and 'steps:' (an
 * empty block would shift numbered indexes). */
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "trace_analysis/timeline.h"

static int in_window(int64_t step, int64_t first, int64_t last) { return step >= first && (last < 0 || step <= last); }

tsr_status _tsr_tl_write_plot_data(const struct _tsr_tl *tl, const char *path, int64_t first, int64_t last) {
  struct _tsr_step_stats *st;
  int ns;
  TSR_TRY(_tsr_tl_step_stats(tl, &st, &ns));
  int nr = tl->nranks;
  int *nw = calloc(nr + 1, sizeof *nw), *row0 = calloc(nr + 1, sizeof *row0);
  char *crit = calloc(tl->ntasks + 1, 1);
  FILE *f = nw && row0 && crit ? fopen(path, "w") : NULL;
  if (!f) {
    _tsr_step_stats_free(st, ns);
    free(nw), free(row0), free(crit);
    return nw && row0 && crit ? _tsr_error(TSR_ERR_IO, "trace: cannot write %s", path)
                              : _tsr_error(TSR_ERR_NOMEM, "trace: out of memory");
  }
  for (int r = 0; r < nr; r++) nw[r] = tl->nworkers[r];
  for (int i = 0; i < tl->ntasks; i++)
    if (tl->tasks[i].worker >= nw[tl->tasks[i].rank]) nw[tl->tasks[i].rank] = tl->tasks[i].worker + 1;
  for (int r = 0; r < nr; r++) row0[r + 1] = row0[r] + nw[r] + 2; /* workers, MPI send, MPI receive */
  double t0 = 1e300;
  for (int i = 0; i < ns; i++)
    if (in_window(st[i].step, first, last)) {
      t0 = st[i].begin < t0 ? st[i].begin : t0;
      for (int k = 0; k < st[i].ncrit; k++) crit[st[i].crit[k]] = 1;
    }
  if (t0 == 1e300) t0 = 0;

  fprintf(f, "# tessera timeline of steps %lld to %lld; times in ms\n# rows %d\n# ytics (", (long long)first,
          (long long)last, row0[nr]);
  const char *sep = "";
  for (int r = 0; r < nr; r++, sep = ", ") {
    for (int w = 0; w < nw[r]; w++, sep = ", ")
      fprintf(f, "%s\"r%d %s\" %d", sep, r,
              w < tl->nworkers[r] && tl->worker_names[r][w] ? tl->worker_names[r][w] : "worker", row0[r] + w);
    fprintf(f, "%s\"r%d MPI send\" %d, \"r%d MPI recv\" %d", sep, r, row0[r] + nw[r], r, row0[r] + nw[r] + 1);
  }
  fprintf(f, ")\n# families ");
  for (int k = 0; k < TSR_TL_NFAMILIES; k++) fprintf(f, "%s%s", k ? "|" : "", _tsr_tl_family_name(k));
  fprintf(f, "\n# tasks: start end row family critical step\n");
  for (int i = 0; i < tl->ntasks; i++) {
    const struct _tsr_tev *e = &tl->tasks[i];
    if (!in_window(e->step, first, last)) continue;
    fprintf(f, "%.4f %.4f %d %d %d %lld\n", (e->start - t0) / 1e3, (e->end - t0) / 1e3, row0[e->rank] + e->worker,
            _tsr_tl_family(e->name, e->op), crit[i], (long long)e->step);
  }
  fprintf(f, "\n\n# transfers: post done row send bytes peer\n");
  for (int i = 0; i < tl->nxfers; i++) {
    const struct _tsr_xev *x = &tl->xfers[i];
    if (!in_window(x->step, first, last)) continue;
    fprintf(f, "%.4f %.4f %d %d %llu %d\n", (x->post - t0) / 1e3, (x->done - t0) / 1e3,
            row0[x->rank] + nw[x->rank] + (x->is_send ? 0 : 1), x->is_send, (unsigned long long)x->bytes, x->peer);
  }
  fprintf(f, "\n\n# steps: begin end step (over all ranks)\n");
  for (int i = 0; i < ns;) { /* sorted by step, then rank */
    int j = i;
    double a = st[i].begin, b = st[i].end;
    for (; j < ns && st[j].step == st[i].step; j++) a = st[j].begin < a ? st[j].begin : a, b = st[j].end > b ? st[j].end : b;
    if (in_window(st[i].step, first, last)) fprintf(f, "%.4f %.4f %lld\n", (a - t0) / 1e3, (b - t0) / 1e3, (long long)st[i].step);
    i = j;
  }
  _tsr_step_stats_free(st, ns);
  free(nw), free(row0), free(crit);
  int err = ferror(f);
  if (fclose(f) != 0 || err) return _tsr_error(TSR_ERR_IO, "trace: error while writing %s", path);
  return TSR_OK;
}

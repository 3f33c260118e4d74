/* A trace in memory: the raw files of every rank read back, clocks shifted to rank 0's, dependencies
 * turned from sequence numbers into task indices. Also built by hand in the tests. The public
 * tsr_trace_merge and tsr_trace_report are thin wrappers over it. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "trace_analysis/timeline.h"

struct _tsr_tl *_tsr_tl_new(int nranks, int nworkers) {
  struct _tsr_tl *tl = calloc(1, sizeof *tl);
  if (!tl) return NULL;
  tl->nranks = nranks;
  tl->nworkers = calloc(nranks, sizeof *tl->nworkers);
  tl->worker_names = calloc(nranks, sizeof *tl->worker_names);
  tl->offset = calloc(nranks, sizeof *tl->offset);
  if (!tl->nworkers || !tl->worker_names || !tl->offset) return _tsr_tl_free(tl), NULL;
  for (int r = 0; r < nranks; r++) {
    tl->nworkers[r] = nworkers;
    tl->worker_names[r] = calloc(nworkers > 0 ? nworkers : 1, sizeof(char *));
    if (!tl->worker_names[r]) return _tsr_tl_free(tl), NULL;
    for (int w = 0; w < nworkers; w++) {
      char b[32];
      snprintf(b, sizeof b, "worker %d", w);
      if (!(tl->worker_names[r][w] = strdup(b))) return _tsr_tl_free(tl), NULL;
    }
  }
  return tl;
}

void _tsr_tl_free(struct _tsr_tl *tl) {
  if (!tl) return;
  for (int r = 0; tl->worker_names && r < tl->nranks; r++) {
    for (int w = 0; tl->worker_names[r] && w < tl->nworkers[r]; w++) free(tl->worker_names[r][w]);
    free(tl->worker_names[r]);
  }
  for (int i = 0; i < tl->ntasks; i++) free(tl->tasks[i].deps);
  free(tl->worker_names);
  free(tl->nworkers);
  free(tl->offset);
  free(tl->tasks);
  free(tl->xfers);
  free(tl->groups);
  free(tl);
}

int _tsr_tl_add_task(struct _tsr_tl *tl, const struct _tsr_tev *ev, const int *deps, int ndeps) {
  if ((tl->ntasks & (tl->ntasks - 1)) == 0) { /* capacity doubles at powers of two */
    struct _tsr_tev *t = realloc(tl->tasks, (tl->ntasks ? 2 * tl->ntasks : 1) * sizeof *t);
    if (!t) return -1;
    tl->tasks = t;
  }
  struct _tsr_tev *e = &tl->tasks[tl->ntasks];
  *e = *ev;
  e->ndeps = 0, e->deps = NULL;
  if (ndeps > 0) {
    if (!(e->deps = malloc(ndeps * sizeof *e->deps))) return -1;
    memcpy(e->deps, deps, ndeps * sizeof *deps);
    e->ndeps = ndeps;
  }
  return tl->ntasks++;
}

int _tsr_tl_add_xfer(struct _tsr_tl *tl, const struct _tsr_xev *ev) {
  if ((tl->nxfers & (tl->nxfers - 1)) == 0) {
    struct _tsr_xev *x = realloc(tl->xfers, (tl->nxfers ? 2 * tl->nxfers : 1) * sizeof *x);
    if (!x) return -1;
    tl->xfers = x;
  }
  tl->xfers[tl->nxfers] = *ev;
  return tl->nxfers++;
}

int _tsr_tl_add_group(struct _tsr_tl *tl, const struct _tsr_gev *ev) {
  if ((tl->ngroups & (tl->ngroups - 1)) == 0) {
    struct _tsr_gev *g = realloc(tl->groups, (tl->ngroups ? 2 * tl->ngroups : 1) * sizeof *g);
    if (!g) return -1;
    tl->groups = g;
  }
  tl->groups[tl->ngroups] = *ev;
  return tl->ngroups++;
}

void _tsr_tl_finish(struct _tsr_tl *tl) {
  double t0 = 1e300;
  for (int i = 0; i < tl->ntasks; i++) t0 = tl->tasks[i].submit < t0 ? tl->tasks[i].submit : t0;
  for (int i = 0; i < tl->nxfers; i++) t0 = tl->xfers[i].post < t0 ? tl->xfers[i].post : t0;
  tl->t0 = t0 < 1e300 ? t0 : 0;
  /* A transfer without a step belongs to the latest-started step of its rank running at its post. */
  for (int i = 0; i < tl->nxfers; i++) {
    struct _tsr_xev *x = &tl->xfers[i];
    if (x->step >= 0) continue;
    double best = -1e300;
    for (int k = 0; k < tl->ntasks; k++) {
      const struct _tsr_tev *e = &tl->tasks[k];
      if (e->rank == x->rank && e->start <= x->post && e->start > best) best = e->start, x->step = e->step;
    }
  }
}

/* ---- reading raw files ---- */

static tsr_status bad(const char *path, int line, const char *what) {
  return _tsr_error(TSR_ERR_FORMAT, "%s:%d: %s", path, line, what);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = ((const struct _tsr_tev *)b)->seq;
  return x < y ? -1 : x > y;
}

static tsr_status load_rank(struct _tsr_tl *tl, const char *path, int rank, int *size_out) {
  FILE *f = fopen(path, "r");
  if (!f) return _tsr_error(TSR_ERR_IO, "trace: cannot read %s: %s", path, strerror(errno));
  char *line = NULL, *sv;
  size_t cap = 0;
  int ln = 0, first = tl->ntasks;
  tsr_status st = TSR_OK;
  double off = 0;
  /* dependency sequence numbers, resolved once the rank's tasks are all in */
  uint64_t **dseq = NULL;
  int ndseq = 0;
  while (st == TSR_OK && getline(&line, &cap, f) > 0) {
    ln++;
    line[strcspn(line, "\n")] = 0;
    if (line[0] == '#' || !line[0]) continue;
    char *kind = strtok_r(line, "\t", &sv), *fld[12] = {0};
    int n = 0;
    while (n < 12 && (fld[n] = strtok_r(NULL, "\t", &sv))) n++;
    if (!strcmp(kind, "rank") && n >= 5) {
      int r = atoi(fld[0]);
      *size_out = atoi(fld[2]);
      off = strtod(fld[4], NULL);
      if (r != rank) st = bad(path, ln, "rank number differs from the file name");
      tl->offset[rank] = off;
    } else if (!strcmp(kind, "worker") && n >= 2) {
      int w = atoi(fld[0]);
      if (w < 0 || w > 4096) { st = bad(path, ln, "worker id out of range"); break; }
      if (w >= tl->nworkers[rank]) {
        char **p = realloc(tl->worker_names[rank], (w + 1) * sizeof *p);
        if (!p) { st = _tsr_error(TSR_ERR_NOMEM, "trace: out of memory"); break; }
        for (int k = tl->nworkers[rank]; k <= w; k++) p[k] = NULL;
        tl->worker_names[rank] = p, tl->nworkers[rank] = w + 1;
      }
      free(tl->worker_names[rank][w]);
      tl->worker_names[rank][w] = strdup(fld[1]);
    } else if (!strcmp(kind, "task") && n >= 10) {
      struct _tsr_tev e = {.seq = strtoull(fld[0], NULL, 10), .step = strtoll(fld[1], NULL, 10), .rank = rank,
                           .worker = atoi(fld[2]), .submit = strtod(fld[3], NULL) + off,
                           .start = strtod(fld[4], NULL) + off, .end = strtod(fld[5], NULL) + off,
                           .bytes = strtoull(fld[6], NULL, 10)};
      snprintf(e.name, sizeof e.name, "%s", fld[7]);
      snprintf(e.op, sizeof e.op, "%s", fld[8]);
      if (e.worker < 0 || e.worker > 4096 || e.end < e.start) {
        st = bad(path, ln, "task with a bad worker or end before start");
        break;
      }
      int idx = _tsr_tl_add_task(tl, &e, NULL, 0);
      uint64_t **d = realloc(dseq, (ndseq + 1) * sizeof *d);
      if (idx < 0 || !d) { st = _tsr_error(TSR_ERR_NOMEM, "trace: out of memory"); break; }
      dseq = d;
      int nd = strcmp(fld[9], "-") ? 1 : 0;
      for (const char *c = fld[9]; *c; c++) nd += *c == ',';
      dseq[ndseq] = malloc((nd + 1) * sizeof **dseq);
      if (!dseq[ndseq]) { st = _tsr_error(TSR_ERR_NOMEM, "trace: out of memory"); break; }
      dseq[ndseq][0] = nd;
      char *c = fld[9];
      for (int k = 1; k <= nd; k++) dseq[ndseq][k] = strtoull(c, &c, 10), c += *c == ',';
      ndseq++;
    } else if (!strcmp(kind, "xfer") && n >= 7) {
      struct _tsr_xev x = {.step = strtoll(fld[0], NULL, 10), .rank = rank, .peer = atoi(fld[1]),
                           .is_send = atoi(fld[2]), .bytes = strtoull(fld[3], NULL, 10),
                           .tag = strtoll(fld[4], NULL, 10), .post = strtod(fld[5], NULL) + off,
                           .done = strtod(fld[6], NULL) + off};
      if (_tsr_tl_add_xfer(tl, &x) < 0) st = _tsr_error(TSR_ERR_NOMEM, "trace: out of memory");
    } else if (!strcmp(kind, "group") && n >= 4) {
      struct _tsr_gev g = {.step = strtoll(fld[0], NULL, 10), .rank = rank, .group = atoi(fld[1]),
                           .bytes = strtoull(fld[2], NULL, 10), .seq = strtoull(fld[3], NULL, 10)};
      if (_tsr_tl_add_group(tl, &g) < 0) st = _tsr_error(TSR_ERR_NOMEM, "trace: out of memory");
    } else {
      st = bad(path, ln, "unknown or truncated line");
    }
  }
  free(line);
  fclose(f);
  for (int i = 0; i < ndseq; i++) {
    struct _tsr_tev *e = &tl->tasks[first + i];
    int nd = st == TSR_OK ? (int)dseq[i][0] : 0;
    if (nd && !(e->deps = malloc(nd * sizeof *e->deps))) st = _tsr_error(TSR_ERR_NOMEM, "trace: out of memory");
    for (int k = 0; st == TSR_OK && k < nd; k++) {
      const struct _tsr_tev *p = bsearch(&dseq[i][k + 1], tl->tasks + first, tl->ntasks - first, sizeof *p, cmp_u64);
      if (p) e->deps[e->ndeps++] = (int)(p - tl->tasks); /* a dependency outside the window is dropped */
    }
    free(dseq[i]);
  }
  free(dseq);
  return st;
}

tsr_status _tsr_tl_load(struct _tsr_tl **out, const char *dir) {
  *out = NULL;
  DIR *d = opendir(dir);
  if (!d) return _tsr_error(TSR_ERR_IO, "trace folder %s: %s", dir, strerror(errno));
  int maxrank = -1;
  struct dirent *de;
  while ((de = readdir(d))) {
    int r;
    char tail[8];
    if (sscanf(de->d_name, "rank-%d.%7s", &r, tail) == 2 && !strcmp(tail, "tsv") && r >= 0 && r < 1 << 20)
      maxrank = r > maxrank ? r : maxrank;
  }
  closedir(d);
  if (maxrank < 0) return _tsr_error(TSR_ERR_IO, "trace folder %s: no rank-N.tsv file (written by tsr_trace_stop)", dir);
  struct _tsr_tl *tl = _tsr_tl_new(maxrank + 1, 0);
  if (!tl) return _tsr_error(TSR_ERR_NOMEM, "trace: out of memory");
  int size = 0;
  for (int r = 0; r <= maxrank; r++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/rank-%d.tsv", dir, r);
    tsr_status st = load_rank(tl, path, r, &size);
    if (st != TSR_OK) return _tsr_tl_free(tl), st;
  }
  if (size != maxrank + 1) {
    _tsr_tl_free(tl);
    return _tsr_error(TSR_ERR_FORMAT, "trace folder %s: the run had %d ranks but rank files 0..%d were found", dir,
                      size, maxrank);
  }
  _tsr_tl_finish(tl);
  *out = tl;
  return TSR_OK;
}

/* ---- writing raw files (a timeline built elsewhere, e.g. a replay) ---- */

static tsr_status write_rank(const struct _tsr_tl *tl, int r, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return _tsr_error(TSR_ERR_IO, "trace: cannot write %s: %s", path, strerror(errno));
  fprintf(f, "# tessera trace 1\nrank\t%d\tsize\t%d\toffset_us\t0.000\n", r, tl->nranks);
  for (int w = 0; w < tl->nworkers[r]; w++)
    fprintf(f, "worker\t%d\t%s\n", w, tl->worker_names[r][w] ? tl->worker_names[r][w] : "worker");
  for (int i = 0; i < tl->ntasks; i++) {
    const struct _tsr_tev *e = &tl->tasks[i];
    if (e->rank != r) continue;
    fprintf(f, "task\t%llu\t%lld\t%d\t%.3f\t%.3f\t%.3f\t%llu\t%s\t%s\t", (unsigned long long)e->seq,
            (long long)e->step, e->worker, e->submit, e->start, e->end, (unsigned long long)e->bytes, e->name, e->op);
    int any = 0;
    for (int k = 0; k < e->ndeps; k++)
      if (tl->tasks[e->deps[k]].rank == r)
        fprintf(f, "%s%llu", any++ ? "," : "", (unsigned long long)tl->tasks[e->deps[k]].seq);
    fputs(any ? "\n" : "-\n", f);
  }
  for (int i = 0; i < tl->nxfers; i++) {
    const struct _tsr_xev *x = &tl->xfers[i];
    if (x->rank == r)
      fprintf(f, "xfer\t%lld\t%d\t%d\t%llu\t%lld\t%.3f\t%.3f\n", (long long)x->step, x->peer, x->is_send,
              (unsigned long long)x->bytes, (long long)x->tag, x->post, x->done);
  }
  for (int i = 0; i < tl->ngroups; i++) {
    const struct _tsr_gev *g = &tl->groups[i];
    if (g->rank == r)
      fprintf(f, "group\t%lld\t%d\t%llu\t%llu\n", (long long)g->step, g->group, (unsigned long long)g->bytes,
              (unsigned long long)g->seq);
  }
  int err = ferror(f);
  if (fclose(f) != 0 || err) return _tsr_error(TSR_ERR_IO, "trace: error while writing %s", path);
  return TSR_OK;
}

tsr_status _tsr_tl_write_raw(const struct _tsr_tl *tl, const char *dir) {
  for (int r = 0; r < tl->nranks; r++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/rank-%d.tsv", dir, r);
    TSR_TRY(write_rank(tl, r, path));
  }
  return TSR_OK;
}

/* ---- public wrappers ---- */

tsr_status tsr_trace_merge(const char *dir) {
  if (!dir) return _tsr_error(TSR_ERR_ARG, "tsr_trace_merge: folder is NULL");
  struct _tsr_tl *tl;
  TSR_TRY(_tsr_tl_load(&tl, dir));
  char path[4200];
  snprintf(path, sizeof path, "%s/trace.json", dir);
  tsr_status st = _tsr_tl_write_chrome(tl, path);
  snprintf(path, sizeof path, "%s/trace.paje", dir);
  if (st == TSR_OK) st = _tsr_tl_write_paje(tl, path);
  _tsr_tl_free(tl);
  return st;
}

void tsr_trace_report_opts_default(tsr_trace_report_opts *o) {
  o->first_step = 0;
  o->last_step = -1;
  o->timeline_data = NULL;
  o->detail = 0;
}

tsr_status tsr_trace_report(const char *dir, FILE *out, const tsr_trace_report_opts *o) {
  tsr_trace_report_opts def;
  tsr_trace_report_opts_default(&def);
  if (!o) o = &def;
  if (!dir || !out) return _tsr_error(TSR_ERR_ARG, "tsr_trace_report: folder and output are required");
  struct _tsr_tl *tl;
  TSR_TRY(_tsr_tl_load(&tl, dir));
  if (o->detail) _tsr_tl_report(tl, out, o->first_step, o->last_step);
  else _tsr_tl_summary(tl, out, o->first_step, o->last_step);
  tsr_status st = TSR_OK;
  if (o->timeline_data) st = _tsr_tl_write_plot_data(tl, o->timeline_data, o->first_step, o->last_step);
  _tsr_tl_free(tl);
  return st;
}

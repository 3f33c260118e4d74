/* Paje trace for ViTE: containers program > rank > worker, one state per task (its operation) on
 * its worker, MPI transfers as links between ranks (a send matched to the receive with the same
 * peer and tag where the receiving rank recorded it). Dates in milliseconds, sorted. */
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "trace_analysis/timeline.h"

static const char header[] =
    "%EventDef PajeDefineContainerType 0\n% Alias string\n% Type string\n% Name string\n%EndEventDef\n"
    "%EventDef PajeDefineStateType 1\n% Alias string\n% Type string\n% Name string\n%EndEventDef\n"
    "%EventDef PajeDefineEntityValue 2\n% Alias string\n% Type string\n% Name string\n% Color color\n%EndEventDef\n"
    "%EventDef PajeCreateContainer 3\n% Time date\n% Alias string\n% Type string\n% Container string\n"
    "% Name string\n%EndEventDef\n"
    "%EventDef PajeDestroyContainer 4\n% Time date\n% Type string\n% Name string\n%EndEventDef\n"
    "%EventDef PajeSetState 5\n% Time date\n% Type string\n% Container string\n% Value string\n%EndEventDef\n"
    "%EventDef PajeDefineLinkType 6\n% Alias string\n% Type string\n% StartContainerType string\n"
    "% EndContainerType string\n% Name string\n%EndEventDef\n"
    "%EventDef PajeStartLink 7\n% Time date\n% Type string\n% Container string\n% Value string\n"
    "% StartContainer string\n% Key string\n%EndEventDef\n"
    "%EventDef PajeEndLink 8\n% Time date\n% Type string\n% Container string\n% Value string\n"
    "% EndContainer string\n% Key string\n%EndEventDef\n";

struct pev {
  double t;
  int order;   /* at equal dates: ends (0) before starts (1) */
  int kind;    /* 0 idle, 1 task state, 2 link start, 3 link end */
  int rank, worker, op, key, peer;
};

static int cmp_pev(const void *a, const void *b) {
  const struct pev *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->order - y->order;
}

static int op_index(char (*ops)[TSR_TRACE_OP], int *nops, const char *op) {
  for (int i = 0; i < *nops; i++)
    if (!strcmp(ops[i], op)) return i;
  snprintf(ops[*nops], TSR_TRACE_OP, "%s", op);
  return (*nops)++;
}

tsr_status _tsr_tl_write_paje(const struct _tsr_tl *tl, const char *path) {
  size_t nev = 2 * (size_t)tl->ntasks + 2 * (size_t)tl->nxfers;
  struct pev *ev = malloc((nev + 1) * sizeof *ev);
  char(*ops)[TSR_TRACE_OP] = malloc(((size_t)tl->ntasks + 1) * sizeof *ops);
  if (!ev || !ops) {
    free(ev), free(ops);
    return _tsr_error(TSR_ERR_NOMEM, "trace: out of memory writing %s", path);
  }
  int nops = 0;
  size_t n = 0;
  double t0 = tl->t0, tend = 0;
  for (int i = 0; i < tl->ntasks; i++) {
    const struct _tsr_tev *e = &tl->tasks[i];
    int op = op_index(ops, &nops, e->op);
    ev[n++] = (struct pev){e->start - t0, 1, 1, e->rank, e->worker, op, 0, 0};
    ev[n++] = (struct pev){e->end - t0, 0, 0, e->rank, e->worker, 0, 0, 0};
    tend = e->end - t0 > tend ? e->end - t0 : tend;
  }
  int key = 0;
  for (int i = 0; i < tl->nxfers; i++) {
    const struct _tsr_xev *x = &tl->xfers[i];
    if (!x->is_send || x->peer < 0 || x->peer >= tl->nranks) continue;
    double done = x->done;
    for (int k = 0; k < tl->nxfers; k++) {
      const struct _tsr_xev *y = &tl->xfers[k];
      if (!y->is_send && y->rank == x->peer && y->peer == x->rank && y->tag == x->tag) {
        done = y->done > x->post ? y->done : x->done;
        break;
      }
    }
    ev[n++] = (struct pev){x->post - t0, 1, 2, x->rank, 0, 0, key, x->peer};
    ev[n++] = (struct pev){done - t0, 1, 3, x->peer, 0, 0, key, x->rank};
    key++;
    tend = done - t0 > tend ? done - t0 : tend;
  }
  qsort(ev, n, sizeof *ev, cmp_pev);

  FILE *f = fopen(path, "w");
  if (!f) {
    free(ev), free(ops);
    return _tsr_error(TSR_ERR_IO, "trace: cannot write %s", path);
  }
  fputs(header, f);
  fputs("0 P 0 \"Program\"\n0 R P \"Rank\"\n0 W R \"Worker\"\n1 S W \"Task\"\n6 L P R R \"MPI transfer\"\n", f);
  fputs("2 idle S \"idle\" \"0.9 0.9 0.9\"\n", f);
  for (int i = 0; i < nops; i++) {
    unsigned hsh = 2166136261u;
    for (const char *c = ops[i]; *c; c++) hsh = (hsh ^ (unsigned char)*c) * 16777619u;
    fprintf(f, "2 op%d S \"%s\" \"%.2f %.2f %.2f\"\n", i, ops[i], 0.2 + 0.7 * (hsh & 255) / 255.0,
            0.2 + 0.7 * ((hsh >> 8) & 255) / 255.0, 0.2 + 0.7 * ((hsh >> 16) & 255) / 255.0);
  }
  fputs("3 0 p P 0 \"tessera\"\n", f);
  for (int r = 0; r < tl->nranks; r++) {
    fprintf(f, "3 0 r%d R p \"rank %d\"\n", r, r);
    for (int w = 0; w < tl->nworkers[r]; w++) {
      fprintf(f, "3 0 r%dw%d W r%d \"", r, w, r);
      for (const char *c = tl->worker_names[r][w] ? tl->worker_names[r][w] : "worker"; *c; c++)
        fputc(*c == '"' ? '\'' : *c, f);
      fprintf(f, "\"\n5 0 S r%dw%d idle\n", r, w);
    }
  }
  for (size_t i = 0; i < n; i++) {
    const struct pev *e = &ev[i];
    double ms = e->t / 1e3;
    if (e->kind == 0) fprintf(f, "5 %.6f S r%dw%d idle\n", ms, e->rank, e->worker);
    if (e->kind == 1) fprintf(f, "5 %.6f S r%dw%d op%d\n", ms, e->rank, e->worker, e->op);
    if (e->kind == 2) fprintf(f, "7 %.6f L p \"mpi\" r%d k%d\n", ms, e->rank, e->key);
    if (e->kind == 3) fprintf(f, "8 %.6f L p \"mpi\" r%d k%d\n", ms, e->rank, e->key);
  }
  for (int r = 0; r < tl->nranks; r++) {
    for (int w = 0; w < tl->nworkers[r]; w++) fprintf(f, "4 %.6f W r%dw%d\n", tend / 1e3, r, w);
    fprintf(f, "4 %.6f R r%d\n", tend / 1e3, r);
  }
  fprintf(f, "4 %.6f P p\n", tend / 1e3);
  free(ev), free(ops);
  int err = ferror(f);
  if (fclose(f) != 0 || err) return _tsr_error(TSR_ERR_IO, "trace: error while writing %s", path);
  return TSR_OK;
}

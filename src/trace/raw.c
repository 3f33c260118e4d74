/* The raw trace file of one rank (DIR/rank-R.tsv): tab-separated lines, one per worker, task and
 * transfer. StarPU 1.3 does not expose a task's dependencies, so they are rebuilt here from the
 * handles each task accessed, in submission order, with StarPU's sequential-consistency rules: a
 * reader waits for the last writer(s), a writer for the readers since (or the last writer);
 * commutative accumulations (RW|COMMUTE, REDUX) wait for what preceded the group, not for each other. */
#include <stdlib.h>
#include <string.h>
#include <starpu.h>

#include "runtime/error.h"
#include "trace/record.h"

struct ivec {
  size_t *v;
  size_t n, cap;
};

static int ivec_push(struct ivec *a, size_t x) {
  if (a->n == a->cap) {
    size_t c = a->cap ? a->cap * 2 : 4;
    size_t *p = realloc(a->v, c * sizeof *p);
    if (!p) return -1;
    a->v = p, a->cap = c;
  }
  a->v[a->n++] = x;
  return 0;
}

static int ivec_append(struct ivec *a, const struct ivec *b) {
  for (size_t i = 0; i < b->n; i++)
    if (ivec_push(a, b->v[i])) return -1;
  return 0;
}

struct hstate {
  void *h;
  struct ivec writers, readers, pre; /* pre: what the current commutative group waits for */
  int commute;
};

struct hmap {
  struct hstate *s;
  size_t cap, n;
};

static struct hstate *lookup(struct hmap *m, void *h) {
  if (2 * (m->n + 1) > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    struct hstate *s = calloc(cap, sizeof *s);
    if (!s) return NULL;
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->s[i].h) continue;
      size_t j = ((uintptr_t)m->s[i].h >> 4) * 0x9E3779B97F4A7C15ull % cap;
      while (s[j].h) j = (j + 1) % cap;
      s[j] = m->s[i];
    }
    free(m->s);
    m->s = s, m->cap = cap;
  }
  size_t j = ((uintptr_t)h >> 4) * 0x9E3779B97F4A7C15ull % m->cap;
  while (m->s[j].h && m->s[j].h != h) j = (j + 1) % m->cap;
  if (!m->s[j].h) m->s[j].h = h, m->n++;
  return &m->s[j];
}

static void hmap_free(struct hmap *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->s[i].writers.v), free(m->s[i].readers.v), free(m->s[i].pre.v);
  free(m->s);
}

/* Adds the dependencies of task t's access (h, mode) to deps and updates h's state. */
static int access_dep(struct hmap *m, void *h, int mode, size_t t, struct ivec *deps) {
  if (!h || (mode & STARPU_SCRATCH) || !(mode & (STARPU_R | STARPU_W | STARPU_REDUX))) return 0;
  struct hstate *s = lookup(m, h);
  if (!s) return -1;
  int write = (mode & STARPU_W) || (mode & STARPU_REDUX);
  int commute = (mode & STARPU_REDUX) || ((mode & STARPU_W) && (mode & STARPU_COMMUTE));
  if (!write) {
    if (ivec_append(deps, &s->writers) || ivec_push(&s->readers, t)) return -1;
    return 0;
  }
  if (commute && s->commute && s->readers.n == 0) /* joins the running group */
    return ivec_append(deps, &s->pre) || ivec_push(&s->writers, t) ? -1 : 0;
  const struct ivec *before = s->readers.n ? &s->readers : &s->writers;
  if (ivec_append(deps, before)) return -1;
  if (commute) {
    s->pre.n = 0;
    if (ivec_append(&s->pre, before)) return -1;
  }
  s->writers.n = s->readers.n = 0;
  s->commute = commute;
  return ivec_push(&s->writers, t);
}

static int cmp_size(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  return x < y ? -1 : x > y;
}

/* Names go into tab-separated columns: no whitespace. */
static void put_name(FILE *f, const char *s) {
  for (; *s; s++) fputc(*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' ? '_' : *s, f);
}

tsr_status _tsr_trace_write_raw(const char *path, const struct _tsr_recs *r, int rank, int size, double offset) {
  FILE *f = fopen(path, "w");
  if (!f) return _tsr_error(TSR_ERR_IO, "trace: cannot write %s", path);
  fprintf(f, "# tessera trace 1\nrank\t%d\tsize\t%d\toffset_us\t%.3f\n", rank, size, offset);
  unsigned nw = starpu_worker_get_count();
  for (unsigned w = 0; w < nw; w++) {
    char name[128];
    starpu_worker_get_name((int)w, name, sizeof name);
    fprintf(f, "worker\t%u\t", w);
    put_name(f, name);
    fputc('\n', f);
  }
  struct hmap m = {0};
  struct ivec deps = {0};
  int oom = 0;
  for (size_t i = 0; i < r->nrecs && !oom; i++) {
    const struct _tsr_rec *e = &r->recs[i];
    deps.n = 0;
    for (int k = 0; k < e->nacc && !oom; k++) oom = access_dep(&m, r->acc[i][k].h, r->acc[i][k].mode, i, &deps);
    if (deps.n > 1) qsort(deps.v, deps.n, sizeof *deps.v, cmp_size);
    const char *op = strncmp(e->op, "tsr_", 4) == 0 ? e->op + 4 : e->op;
    fprintf(f, "task\t%llu\t%lld\t%d\t%.3f\t%.3f\t%.3f\t%llu\t", (unsigned long long)e->seq, (long long)e->step,
            e->worker, e->submit, e->start, e->end, (unsigned long long)e->bytes);
    put_name(f, e->name);
    fputc('\t', f);
    put_name(f, op);
    fputc('\t', f);
    int any = 0;
    for (size_t k = 0; k < deps.n; k++) {
      if (deps.v[k] == i || (k > 0 && deps.v[k] == deps.v[k - 1])) continue;
      fprintf(f, "%s%llu", any ? "," : "", (unsigned long long)r->recs[deps.v[k]].seq);
      any = 1;
    }
    fputs(any ? "\n" : "-\n", f);
  }
  for (size_t i = 0; i < r->nxfers; i++) {
    const struct _tsr_xrec *x = &r->xfers[i];
    fprintf(f, "xfer\t%lld\t%d\t%d\t%llu\t%lld\t%.3f\t%.3f\n", (long long)x->step, x->peer, x->is_send,
            (unsigned long long)x->bytes, (long long)x->tag, x->post, x->done);
  }
  for (size_t i = 0; i < r->ngroups; i++) {
    const struct _tsr_grec *g = &r->groups[i];
    fprintf(f, "group\t%lld\t%d\t%llu\t%llu\n", (long long)g->step, g->group, (unsigned long long)g->bytes,
            (unsigned long long)g->seq);
  }
  free(deps.v);
  hmap_free(&m);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) return _tsr_error(TSR_ERR_IO, "trace: error while writing %s", path);
  if (oom) return _tsr_error(TSR_ERR_NOMEM, "trace: out of memory rebuilding dependencies for %s", path);
  return TSR_OK;
}

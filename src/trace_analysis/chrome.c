/* Chrome trace format (JSON; opens in Perfetto and chrome://tracing): one process per rank, one
 * thread per worker, tasks as complete events named by layer with the operation as category,
 * transfers as async events on their own track per rank, dependencies as flow arrows. Written with
 * fprintf: a merged trace can hold millions of events, too many for a JSON tree in memory. */
#include <string.h>

#include "runtime/error.h"
#include "trace_analysis/timeline.h"

enum { MAX_FLOWS = 1 << 20 };

static void jstr(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

tsr_status _tsr_tl_write_chrome(const struct _tsr_tl *tl, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return _tsr_error(TSR_ERR_IO, "trace: cannot write %s", path);
  double t0 = tl->t0;
  fputs("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"tessera\"},\"traceEvents\":[\n", f);
  const char *sep = "";
  for (int r = 0; r < tl->nranks; r++) {
    fprintf(f, "%s{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d\"}}", sep, r, r);
    sep = ",\n";
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}}", r, r);
    for (int w = 0; w < tl->nworkers[r]; w++) {
      fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":", r, w);
      jstr(f, tl->worker_names[r][w] ? tl->worker_names[r][w] : "worker");
      fprintf(f, "}},\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%d}}",
              r, w, w);
    }
  }
  for (int i = 0; i < tl->ntasks; i++) {
    const struct _tsr_tev *e = &tl->tasks[i];
    fprintf(f, "%s{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"name\":", sep, e->rank, e->worker,
            e->start - t0, e->end - e->start);
    sep = ",\n";
    jstr(f, e->name);
    fputs(",\"cat\":", f);
    jstr(f, e->op);
    fprintf(f, ",\"args\":{\"op\":");
    jstr(f, e->op);
    fprintf(f, ",\"step\":%lld,\"seq\":%llu,\"bytes\":%llu,\"submit_us\":%.3f,\"wait_us\":%.3f,\"deps\":%d}}",
            (long long)e->step, (unsigned long long)e->seq, (unsigned long long)e->bytes, e->submit - t0,
            e->start - e->submit, e->ndeps);
  }
  for (int i = 0; i < tl->nxfers; i++) {
    const struct _tsr_xev *x = &tl->xfers[i];
    char name[64];
    snprintf(name, sizeof name, "%s %d", x->is_send ? "send to" : "recv from", x->peer);
    for (int k = 0; k < 2; k++) {
      fprintf(f, "%s{\"ph\":\"%s\",\"cat\":\"mpi\",\"id\":%d,\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"name\":", sep,
              k ? "e" : "b", i, x->rank, (k ? x->done : x->post) - t0);
      jstr(f, name);
      if (k == 0)
        fprintf(f, ",\"args\":{\"peer\":%d,\"bytes\":%llu,\"tag\":%lld,\"step\":%lld}", x->peer,
                (unsigned long long)x->bytes, (long long)x->tag, (long long)x->step);
      fputc('}', f);
    }
  }
  long flows = 0;
  for (int i = 0; i < tl->ntasks && flows < MAX_FLOWS; i++) {
    const struct _tsr_tev *e = &tl->tasks[i];
    for (int k = 0; k < e->ndeps && flows < MAX_FLOWS; k++, flows++) {
      const struct _tsr_tev *p = &tl->tasks[e->deps[k]];
      fprintf(f, "%s{\"ph\":\"s\",\"cat\":\"dep\",\"name\":\"dep\",\"id\":%ld,\"pid\":%d,\"tid\":%d,\"ts\":%.3f}", sep,
              flows, p->rank, p->worker, p->start - t0);
      fprintf(f, ",\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"dep\",\"name\":\"dep\",\"id\":%ld,\"pid\":%d,\"tid\":%d,"
                 "\"ts\":%.3f}", flows, e->rank, e->worker, e->start - t0);
    }
  }
  fputs("\n]}\n", f);
  int err = ferror(f);
  if (fclose(f) != 0 || err) return _tsr_error(TSR_ERR_IO, "trace: error while writing %s", path);
  return TSR_OK;
}

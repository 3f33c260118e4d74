/* Machine files (JSON, docs/scaling.md): links inside and between nodes, ranks per node, workers,
 * and the rates of the sums and packs of the reductions. Read with every field checked (the
 * message names the file and the field), written by tessera-scale --calibrate; the compute side
 * can be taken from a traced run (the reductions' own tasks). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "scale/scale.h"
#include "trace_analysis/timeline.h"

/* Open MPI's eager limits (TCP 64 KiB, shared memory 4 KiB) include its headers: a message of exactly
 * the limit already goes by rendezvous; 64 bytes are left for the headers. */
void tsr_machine_default(tsr_machine *m) {
  memset(m, 0, sizeof *m);
  snprintf(m->name, sizeof m->name, "default");
  m->ranks_per_node = 1;
  m->compute_scale = 1;
  m->intra = (tsr_link){.latency_us = 1, .bandwidth_gbit = 100, .shared = 0, .eager_bytes = 4096 - 64};
  m->inter = (tsr_link){.latency_us = 10, .bandwidth_gbit = 10, .shared = 1, .eager_bytes = 65536 - 64};
  m->reduce_gbit = 40;
  m->pack_gbit = 40;
  m->progress = TSR_MPI_PROGRESS_WORKER;
}

/* A number > 0 (or >= 0 when zero_ok) into *out; the message names what and field. */
static tsr_status num(const char *what, const char *field, const json_t *v, int zero_ok, double *out) {
  double x = json_is_number(v) ? json_number_value(v) : NAN;
  if (!isfinite(x) || x < 0 || (x == 0 && !zero_ok)) {
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    tsr_status st = _tsr_error(TSR_ERR_FORMAT, "%s: field '%s': expected a number %s 0, got %s", what, field,
                               zero_ok ? ">=" : ">", s ? s : "?");
    free(s);
    return st;
  }
  *out = x;
  return TSR_OK;
}

static tsr_status integer(const char *what, const char *field, const json_t *v, int min, int *out) {
  if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > 1 << 24)
    return _tsr_error(TSR_ERR_FORMAT, "%s: field '%s': expected an integer >= %d", what, field, min);
  *out = (int)json_integer_value(v);
  return TSR_OK;
}

static tsr_status link_of(const char *what, const char *name, const json_t *o, tsr_link *l) {
  char f[64];
  if (!json_is_object(o)) return _tsr_error(TSR_ERR_FORMAT, "%s: field '%s': expected an object", what, name);
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)o, key, v) {
    snprintf(f, sizeof f, "%s.%s", name, key);
    if (!strcmp(key, "latency_us"))
      TSR_TRY(num(what, f, v, 1, &l->latency_us));
    else if (!strcmp(key, "bandwidth_gbit"))
      TSR_TRY(num(what, f, v, 0, &l->bandwidth_gbit));
    else if (!strcmp(key, "rendezvous_us"))
      TSR_TRY(num(what, f, v, 1, &l->rendezvous_us));
    else if (!strcmp(key, "eager_bytes"))
      TSR_TRY(num(what, f, v, 1, &l->eager_bytes));
    else if (!strcmp(key, "exchange_gbit"))
      TSR_TRY(num(what, f, v, 1, &l->exchange_gbit));
    else if (!strcmp(key, "shared")) {
      if (!json_is_boolean(v)) return _tsr_error(TSR_ERR_FORMAT, "%s: field '%s': expected true or false", what, f);
      l->shared = json_is_true(v);
    } else
      return _tsr_error(TSR_ERR_FORMAT, "%s: unknown field '%s' (latency_us, bandwidth_gbit, shared, rendezvous_us, eager_bytes, exchange_gbit)", what, f);
  }
  return TSR_OK;
}

static tsr_status fields(const char *what, const json_t *root, tsr_machine *m) {
  if (!json_is_object(root)) return _tsr_error(TSR_ERR_FORMAT, "%s: expected a JSON object", what);
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)root, key, v) {
    if (!strcmp(key, "name")) {
      if (!json_is_string(v)) return _tsr_error(TSR_ERR_FORMAT, "%s: field 'name': expected a string", what);
      snprintf(m->name, sizeof m->name, "%s", json_string_value(v));
    } else if (!strcmp(key, "workers_per_rank"))
      TSR_TRY(integer(what, key, v, 0, &m->workers_per_rank));
    else if (!strcmp(key, "ranks_per_node"))
      TSR_TRY(integer(what, key, v, 1, &m->ranks_per_node));
    else if (!strcmp(key, "compute_scale"))
      TSR_TRY(num(what, key, v, 0, &m->compute_scale));
    else if (!strcmp(key, "task_overhead_us"))
      TSR_TRY(num(what, key, v, 1, &m->task_overhead_us));
    else if (!strcmp(key, "intra"))
      TSR_TRY(link_of(what, key, v, &m->intra));
    else if (!strcmp(key, "inter"))
      TSR_TRY(link_of(what, key, v, &m->inter));
    else if (!strcmp(key, "reduce_gbit"))
      TSR_TRY(num(what, key, v, 0, &m->reduce_gbit));
    else if (!strcmp(key, "pack_gbit"))
      TSR_TRY(num(what, key, v, 0, &m->pack_gbit));
    else if (!strcmp(key, "timeslice_us"))
      TSR_TRY(num(what, key, v, 1, &m->timeslice_us));
    else if (!strcmp(key, "ranks_per_core"))
      TSR_TRY(integer(what, key, v, 0, &m->ranks_per_core));
    else if (!strcmp(key, "progress")) {
      const char *p = json_is_string(v) ? json_string_value(v) : "";
      if (strcmp(p, "worker") && strcmp(p, "thread"))
        return _tsr_error(TSR_ERR_FORMAT, "%s: field 'progress': expected \"worker\" or \"thread\"", what);
      m->progress = !strcmp(p, "thread") ? TSR_MPI_PROGRESS_THREAD : TSR_MPI_PROGRESS_WORKER;
    }    else if (key[0] != '_') /* "_comment" and the like */
      return _tsr_error(TSR_ERR_FORMAT,
                        "%s: unknown field '%s' (name, workers_per_rank, ranks_per_node, compute_scale, "
                        "task_overhead_us, intra, inter, reduce_gbit, pack_gbit, timeslice_us, ranks_per_core, progress)",
                        what, key);
  }
  return TSR_OK;
}

tsr_status tsr_machine_parse(const char *text, const char *what, tsr_machine *m) {
  if (!text || !m) return _tsr_error(TSR_ERR_ARG, "tsr_machine_parse: text and machine are required");
  if (!what) what = "machine";
  json_error_t e;
  json_t *root = json_loads(text, 0, &e);
  if (!root) return _tsr_error(TSR_ERR_FORMAT, "%s:%d:%d: %s", what, e.line, e.column, e.text);
  tsr_machine tmp;
  tsr_machine_default(&tmp);
  tsr_status st = fields(what, root, &tmp);
  json_decref(root);
  if (st == TSR_OK) *m = tmp;
  return st;
}

tsr_status tsr_machine_load(const char *path, tsr_machine *m) {
  if (!path || !m) return _tsr_error(TSR_ERR_ARG, "tsr_machine_load: path and machine are required");
  FILE *f = fopen(path, "rb");
  if (!f) return _tsr_error(TSR_ERR_IO, "machine file %s: cannot open", path);
  char *buf = NULL;
  size_t len = 0, cap = 0, n;
  do {
    if (len + 4096 + 1 > cap) {
      char *b = realloc(buf, cap = 2 * cap + 4096 + 1);
      if (!b) return free(buf), fclose(f), _tsr_error(TSR_ERR_NOMEM, "machine file %s: out of memory", path);
      buf = b;
    }
    n = fread(buf + len, 1, 4096, f);
    len += n;
  } while (n > 0 && len < (1 << 20));
  fclose(f);
  buf[len] = 0;
  tsr_status st = tsr_machine_parse(buf, path, m);
  free(buf);
  return st;
}

tsr_status tsr_machine_save(const char *path, const tsr_machine *m) {
  if (!path || !m) return _tsr_error(TSR_ERR_ARG, "tsr_machine_save: path and machine are required");
  json_t *root = json_pack(
      "{s:s, s:i, s:i, s:f, s:f, s:{s:f, s:f, s:b, s:f, s:f, s:f}, s:{s:f, s:f, s:b, s:f, s:f, s:f}, s:f, s:f, s:f, s:i, s:s}", "name", m->name, "workers_per_rank",
      m->workers_per_rank, "ranks_per_node", m->ranks_per_node, "compute_scale", m->compute_scale, "task_overhead_us",
      m->task_overhead_us, "intra", "latency_us", m->intra.latency_us, "bandwidth_gbit", m->intra.bandwidth_gbit,
      "shared", m->intra.shared, "rendezvous_us", m->intra.rendezvous_us, "eager_bytes", m->intra.eager_bytes,
      "exchange_gbit", m->intra.exchange_gbit, "inter",
      "latency_us", m->inter.latency_us, "bandwidth_gbit", m->inter.bandwidth_gbit, "shared", m->inter.shared,
      "rendezvous_us", m->inter.rendezvous_us, "eager_bytes", m->inter.eager_bytes,
      "exchange_gbit", m->inter.exchange_gbit, "reduce_gbit", m->reduce_gbit, "pack_gbit", m->pack_gbit,
      "timeslice_us", m->timeslice_us, "ranks_per_core", m->ranks_per_core, "progress", m->progress == TSR_MPI_PROGRESS_THREAD ? "thread" : "worker");
  if (!root) return _tsr_error(TSR_ERR_NOMEM, "machine file %s: out of memory", path);
  int ret = json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
  json_decref(root);
  return ret ? _tsr_error(TSR_ERR_IO, "machine file %s: cannot write", path) : TSR_OK;
}

/* Rate (Gbit/s of task bytes) of the tasks named `name` (NULL: any) whose operation starts with
 * `op`, or 0 with none. */
static double op_rate(const struct _tsr_tl *tl, const char *name, const char *op) {
  double bytes = 0, us = 0;
  for (int i = 0; i < tl->ntasks; i++)
    if ((!name || !strcmp(tl->tasks[i].name, name)) && !strncmp(tl->tasks[i].op, op, strlen(op)))
      bytes += tl->tasks[i].bytes, us += tl->tasks[i].end - tl->tasks[i].start;
  return us > 0 && bytes > 0 ? bytes / us / 125.0 : 0;
}

static int cmp_worker_start(const void *a, const void *b) {
  const struct _tsr_tev *x = *(const struct _tsr_tev *const *)a, *y = *(const struct _tsr_tev *const *)b;
  if (x->worker != y->worker) return x->worker < y->worker ? -1 : 1;
  return x->start < y->start ? -1 : x->start > y->start;
}

/* Rank r's tasks: the sum of their durations (*busy), and the time per task a worker waited while
 * the task could have run (*wait): from the latest of its previous task's end, its dependencies'
 * ends and its submission, to its start. The trace lists no dependency on received data, so the
 * tasks that wait for a transfer (a reduction's own tasks and its group's consumers) would count the
 * time their messages took as dispatch time, and the replay, which models that time, would count it
 * twice: their waits are left out of the mean. */
static tsr_status rank_load(const struct _tsr_tl *tl, int r, double *busy, double *wait) {
  const struct _tsr_tev **v = malloc((tl->ntasks + 1) * sizeof *v);
  if (!v) return _tsr_error(TSR_ERR_NOMEM, "trace: out of memory");
  int n = 0, counted = 0;
  *busy = *wait = 0;
  for (int i = 0; i < tl->ntasks; i++)
    if (tl->tasks[i].rank == r) v[n++] = &tl->tasks[i], *busy += tl->tasks[i].end - tl->tasks[i].start;
  qsort(v, n, sizeof *v, cmp_worker_start);
  for (int i = 0; i < n; i++) {
    if (_tsr_reduction_task(v[i]) || _tsr_group_consumer(v[i])) continue;
    counted++;
    if (i == 0 || v[i]->worker != v[i - 1]->worker) continue;
    double ready = fmax(v[i - 1]->end, v[i]->submit);
    for (int k = 0; k < v[i]->ndeps; k++) ready = fmax(ready, tl->tasks[v[i]->deps[k]].end);
    if (v[i]->start > ready) *wait += v[i]->start - ready;
  }
  *wait = counted ? *wait / counted : 0;
  free(v);
  return TSR_OK;
}

tsr_status _tsr_scale_slowest_rank(const struct _tsr_tl *tl, int *rank, double *wait) {
  double best = -1;
  *rank = 0, *wait = 0;
  for (int r = 0; r < tl->nranks; r++) {
    double busy = 0, w = 0;
    int n = 0;
    TSR_TRY(rank_load(tl, r, &busy, &w));
    for (int i = 0; i < tl->ntasks; i++) n += tl->tasks[i].rank == r;
    if (busy + w * n > best) best = busy + w * n, *rank = r, *wait = w;
  }
  return TSR_OK;
}

tsr_status tsr_machine_from_trace(const char *trace_dir, tsr_machine *m) {
  if (!trace_dir || !m) return _tsr_error(TSR_ERR_ARG, "tsr_machine_from_trace: folder and machine are required");
  struct _tsr_tl *tl;
  TSR_TRY(_tsr_tl_load(&tl, trace_dir));
  int r;
  tsr_status st = _tsr_scale_slowest_rank(tl, &r, &m->task_overhead_us);
  m->workers_per_rank = tl->nworkers[r];
  /* A ring's sum task reads a received chunk into its own (half of its bytes is the input); a pack
   * or unpack task touches a float32 chunk and its half-size wire copy. */
  double s = op_rate(tl, "allreduce_sum", "accumulate") / 2, p = op_rate(tl, NULL, "wire_") / 1.5;
  if (s > 0) m->reduce_gbit = s;
  if (p > 0) m->pack_gbit = p;
  _tsr_tl_free(tl);
  return st;
}

/* Traces: the analysis on a hand-built timeline (overlap fraction, critical path, idle time), and a
 * real traced training run: trace.json parses and every task StarPU executed appears exactly once,
 * tasks on a worker do not overlap, rebuilt dependencies precede their tasks, trace.paje follows its
 * own event definitions, the step window limits what is recorded, and tessera-trace draws its PNGs
 * (skipped, exit status 77, without gnuplot). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <starpu.h>
#include <tessera.h>

#include "testutil.h"
#include "trace/trace.h"
#include "trace_analysis/timeline.h"

#define S 8

static double trace_began; /* _tsr_trace_now_us() when tracing started */

static int add_task(struct _tsr_tl *tl, int64_t step, int worker, double a, double b, const int *deps, int nd) {
  struct _tsr_tev e = {.seq = (uint64_t)tl->ntasks, .step = step, .rank = 0, .worker = worker, .submit = a, .start = a,
                       .end = b};
  snprintf(e.name, sizeof e.name, "t%d", tl->ntasks);
  snprintf(e.op, sizeof e.op, "op");
  return _tsr_tl_add_task(tl, &e, deps, nd);
}

/* Step 0 on two workers: A[0,10] w0, B[0,4] w1, C[10,30] w0 after A, D[12,15] w1 after A and B,
 * E[32,37] w1 after C and D; step 1: F[31,32] w0. Transfers of step 0: [25,34] and [28,31]. */
START_TEST(analysis_of_a_hand_built_timeline) {
  struct _tsr_tl *tl = _tsr_tl_new(1, 2);
  ck_assert_ptr_nonnull(tl);
  int A = add_task(tl, 0, 0, 0, 10, NULL, 0), B = add_task(tl, 0, 1, 0, 4, NULL, 0);
  int C = add_task(tl, 0, 0, 10, 30, (int[]){A}, 1);
  int D = add_task(tl, 0, 1, 12, 15, (int[]){A, B}, 2);
  int E = add_task(tl, 0, 1, 32, 37, (int[]){C, D}, 2);
  add_task(tl, 1, 0, 31, 32, NULL, 0);
  ck_assert_int_ge(_tsr_tl_add_xfer(tl, &(struct _tsr_xev){.step = 0, .peer = 1, .is_send = 1, .post = 25, .done = 34}), 0);
  ck_assert_int_ge(_tsr_tl_add_xfer(tl, &(struct _tsr_xev){.step = 0, .peer = 1, .post = 28, .done = 31}), 0);
  _tsr_tl_finish(tl);
  struct _tsr_step_stats *st;
  int n;
  ck_assert_int_eq(_tsr_tl_step_stats(tl, &st, &n), TSR_OK);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(st[0].step, 0);
  ck_assert_int_eq(st[0].ntasks, 5);
  const double eps = 1e-9;
  /* critical path A -> C -> E = 10 + 20 + 5 (A -> D -> E is 18, B -> D -> E 12) */
  ck_assert_msg(fabs(st[0].critical - 35) < eps, "critical path %g, expected 35", st[0].critical);
  ck_assert_int_eq(st[0].ncrit, 3);
  ck_assert_int_eq(st[0].crit[0], A);
  ck_assert_int_eq(st[0].crit[1], C);
  ck_assert_int_eq(st[0].crit[2], E);
  /* communication: union [25,34] = 9; computing (any step) during [25,30] and [31,34]: 8 */
  ck_assert_msg(fabs(st[0].comm - 9) < eps, "communication %g, expected 9", st[0].comm);
  ck_assert_msg(fabs(st[0].hidden - 8) < eps, "hidden %g, expected 8", st[0].hidden);
  /* span [0,37] on 2 workers = 74 worker-us, busy 10+4+20+3+5 = 42, step 1's F 1, idle 31 */
  ck_assert_msg(fabs(st[0].busy - 42) < eps && fabs(st[0].other - 1) < eps && fabs(st[0].idle - 31) < eps,
                "busy %g other %g idle %g", st[0].busy, st[0].other, st[0].idle);
  ck_assert_int_eq(st[1].step, 1);
  ck_assert_msg(fabs(st[1].critical - 1) < eps && st[1].comm == 0, "step 1: critical %g comm %g", st[1].critical,
                st[1].comm);
  _tsr_step_stats_free(st, n);
  _tsr_tl_free(tl);
}
END_TEST

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  for (int p = 0; p < S * S; p++) x[p] = sinf(0.37f * (p + 1) * (index + 1));
  for (int p = 0; p < S * S; p++) y[p] = 0.5f * x[p] * x[p];
  return 0;
}

/* Trains `steps` steps and one evaluation with tracing of steps first..last into dir; returns the
 * number of tasks StarPU's workers executed while tracing. */
static unsigned long traced_run(const char *dir, int steps, int64_t first, int64_t last) {
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.ncpus = 2, co.use_mpi = 0, co.verbose = 0;
  tsr_context *ctx;
  ck_assert_msg(tsr_context_create(&ctx, &co, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "tiny"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "in", 4, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r1", TSR_LAYER_RELU, "c1"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c2", "r1", 1, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_set_output(m, "c2", TSR_LOSS_MSE, 1), TSR_OK);
  tsr_optim_spec opt = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = 4, to.slices = 2;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &opt, &to) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_trace_start(ctx, dir, first, last) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_trace_start(ctx, dir, first, last), TSR_ERR_STATE);
  trace_began = _tsr_trace_now_us(); /* StarPU's clock counts from starpu_init: read it after */
  int64_t id;
  for (int i = 0; i < steps; i++) ck_assert_int_eq(tsr_trainer_step(t, fill, NULL, &id), TSR_OK);
  ck_assert_int_eq(tsr_trainer_eval(t, fill, NULL, 3, &id), TSR_OK);
  /* A transfer of step 1 as the communication code reports it (to this rank itself). */
  void *xs = _tsr_trace_xfer_arg(1, 0, 4096, 77, 1), *xr = _tsr_trace_xfer_arg(1, 0, 4096, 77, 0);
  ck_assert(xs && xr);
  /* until the clock has moved (1 us): its resolution, not the machine's speed, must not make the
   * transfer last 0 us (step 1's communication is asserted > 0 below) */
  for (double t0 = _tsr_trace_now_us(); _tsr_trace_now_us() < t0 + 1;) continue;
  _tsr_trace_xfer_done(xs);
  _tsr_trace_xfer_done(xr);
  ck_assert_int_eq(tsr_trainer_sync(t), TSR_OK);
  unsigned long executed = 0;
  for (unsigned w = 0; w < starpu_worker_get_count(); w++) {
    struct starpu_profiling_worker_info wi;
    ck_assert_int_eq(starpu_profiling_worker_get_info((int)w, &wi), 0);
    executed += (unsigned long)wi.executed_tasks;
  }
  ck_assert_msg(tsr_trace_stop(ctx) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_trace_active(), 0);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
  return executed;
}

struct xev {
  int pid, tid;
  double ts, dur;
};

static int cmp_xev(const void *a, const void *b) {
  const struct xev *x = a, *y = b;
  if (x->pid != y->pid) return x->pid - y->pid;
  if (x->tid != y->tid) return x->tid - y->tid;
  return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* Checks the Paje file against its own %EventDef header: known event ids, field counts, created
 * containers, dates never decreasing. Returns the number of events. */
static int check_paje(const char *path) {
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "%s missing", path);
  int nfields[16] = {0}, cur = -1, events = 0, ln = 0;
  char line[4096], containers[256][32];
  int nc = 0;
  double last = 0;
  strcpy(containers[nc++], "0");
  while (fgets(line, sizeof line, f)) {
    ln++;
    line[strcspn(line, "\n")] = 0;
    if (!strncmp(line, "%EventDef", 9)) {
      char name[64];
      ck_assert_int_eq(sscanf(line, "%%EventDef %63s %d", name, &cur), 2);
      ck_assert(cur >= 0 && cur < 16);
      continue;
    }
    if (!strncmp(line, "%EndEventDef", 12)) { cur = -1; continue; }
    if (line[0] == '%') { ck_assert_int_ge(cur, 0); nfields[cur]++; continue; }
    char *tok[16];
    int nt = 0;
    for (char *p = line; *p && nt < 16;) {
      while (*p == ' ') p++;
      if (!*p) break;
      if (*p == '"') {
        tok[nt++] = ++p;
        char *q = strchr(p, '"');
        ck_assert_msg(q != NULL, "%s:%d: unterminated string", path, ln);
        *q = 0, p = q + 1;
      } else {
        tok[nt++] = p;
        p += strcspn(p, " ");
        if (*p) *p++ = 0;
      }
    }
    int id = atoi(tok[0]);
    ck_assert_msg(id >= 0 && id < 16 && nfields[id] > 0, "%s:%d: undefined event %s", path, ln, tok[0]);
    ck_assert_msg(nt == 1 + nfields[id], "%s:%d: event %d has %d fields, its definition %d", path, ln, id, nt - 1,
                  nfields[id]);
    if (id == 3) { /* CreateContainer: Time Alias Type Container Name */
      int known = 0;
      for (int k = 0; k < nc; k++) known |= !strcmp(containers[k], tok[4]);
      ck_assert_msg(known, "%s:%d: parent container %s not created", path, ln, tok[4]);
      ck_assert(nc < 256);
      snprintf(containers[nc++], 32, "%s", tok[2]);
    }
    if (id == 5) {
      int known = 0;
      for (int k = 0; k < nc; k++) known |= !strcmp(containers[k], tok[3]);
      ck_assert_msg(known, "%s:%d: state on unknown container %s", path, ln, tok[3]);
    }
    if (id >= 3 && id != 6) {
      double t = atof(tok[1]);
      ck_assert_msg(t >= last, "%s:%d: date %g before %g", path, ln, t, last);
      last = t;
    }
    events++;
  }
  fclose(f);
  return events;
}

START_TEST(traced_run_writes_complete_consistent_traces) {
  char dir[128];
  snprintf(dir, sizeof dir, "%s/trace", tt_tmpdir());
  unsigned long executed = traced_run(dir, 3, 0, -1);
  uint64_t hooked = _tsr_trace_num_hooked();
  ck_assert_msg(hooked == executed, "%llu tasks traced, StarPU executed %lu", (unsigned long long)hooked, executed);
  char path[256];
  snprintf(path, sizeof path, "%s/trace.json", dir);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  ck_assert_msg(root != NULL, "%s:%d: %s", path, err.line, err.text);
  json_t *evs = json_object_get(root, "traceEvents");
  ck_assert(json_is_array(evs));
  size_t nx = 0, nflow_s = 0, nflow_f = 0, nmpi = 0;
  struct xev *xs = malloc(json_array_size(evs) * sizeof *xs);
  int *seen = calloc(hooked + 1, sizeof *seen);
  size_t i;
  json_t *e;
  json_array_foreach(evs, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    ck_assert_ptr_nonnull(ph);
    if (!strcmp(ph, "s")) nflow_s++;
    if (!strcmp(ph, "f")) nflow_f++;
    if (!strcmp(ph, "b") || !strcmp(ph, "e")) nmpi += !strcmp(json_string_value(json_object_get(e, "cat")), "mpi");
    if (strcmp(ph, "X")) continue;
    json_t *args = json_object_get(e, "args");
    json_int_t seq = json_integer_value(json_object_get(args, "seq"));
    json_int_t step = json_integer_value(json_object_get(args, "step"));
    ck_assert_msg(seq >= 0 && (uint64_t)seq < hooked, "seq %lld out of range", (long long)seq);
    seen[seq]++;
    ck_assert_msg(step >= 0 && step <= 3, "step %lld", (long long)step);
    xs[nx++] = (struct xev){(int)json_integer_value(json_object_get(e, "pid")),
                            (int)json_integer_value(json_object_get(e, "tid")),
                            json_number_value(json_object_get(e, "ts")), json_number_value(json_object_get(e, "dur"))};
    ck_assert(xs[nx - 1].ts >= 0 && xs[nx - 1].dur >= 0);
  }
  ck_assert_int_eq(nx, hooked);
  for (uint64_t k = 0; k < hooked; k++) ck_assert_msg(seen[k] == 1, "task %llu appears %d times", (unsigned long long)k, seen[k]);
  ck_assert_msg(nmpi == 4, "%zu MPI begin/end events, expected 4", nmpi);
  ck_assert_msg(nflow_s == nflow_f && nflow_s > 0, "%zu flow starts, %zu flow ends", nflow_s, nflow_f);
  qsort(xs, nx, sizeof *xs, cmp_xev);
  for (size_t k = 1; k < nx; k++)
    if (xs[k].pid == xs[k - 1].pid && xs[k].tid == xs[k - 1].tid)
      ck_assert_msg(xs[k - 1].ts + xs[k - 1].dur <= xs[k].ts + 0.002, "worker %d: task at %.3f ends after the next at %.3f",
                    xs[k].tid, xs[k - 1].ts, xs[k].ts);
  free(xs);
  free(seen);
  json_decref(root);

  /* Raw file read back: dependencies end before their task starts, on the trace clock. */
  struct _tsr_tl *tl;
  ck_assert_int_eq(_tsr_tl_load(&tl, dir), TSR_OK);
  ck_assert_int_eq(tl->ntasks, (int)hooked);
  int ndeps = 0;
  for (int k = 0; k < tl->ntasks; k++) {
    const struct _tsr_tev *t = &tl->tasks[k];
    ck_assert_msg(t->submit >= trace_began && t->submit <= t->start + 1e-3,
                  "task %d: submit %.1f start %.1f (tracing began %.1f)", k, t->submit, t->start, trace_began);
    for (int d = 0; d < t->ndeps; d++, ndeps++)
      ck_assert_msg(tl->tasks[t->deps[d]].end <= t->start + 1e-3, "%s:%s depends on %s:%s, which ended after it began",
                    t->name, t->op, tl->tasks[t->deps[d]].name, tl->tasks[t->deps[d]].op);
  }
  ck_assert_int_gt(ndeps, tl->ntasks / 2);
  struct _tsr_step_stats *st;
  int n;
  ck_assert_int_eq(_tsr_tl_step_stats(tl, &st, &n), TSR_OK);
  ck_assert_int_eq(n, 4);
  ck_assert_msg(st[1].comm > 0 && st[0].comm == 0, "communication of steps 0 and 1: %g, %g us", st[0].comm, st[1].comm);
  for (int k = 0; k < n; k++)
    ck_assert_msg(st[k].critical > 0 && st[k].critical <= st[k].end - st[k].begin + 1e-3 && st[k].ncrit >= 3,
                  "step %d: critical path %.1f us over %d tasks, step %.1f us", k, st[k].critical, st[k].ncrit,
                  st[k].end - st[k].begin);
  _tsr_step_stats_free(st, n);
  _tsr_tl_free(tl);

  snprintf(path, sizeof path, "%s/trace.paje", dir);
  ck_assert_int_gt(check_paje(path), (int)(2 * hooked));
  snprintf(path, sizeof path, "%s/report.txt", dir);
  FILE *f = fopen(path, "w");
  tsr_trace_report_opts ro;
  tsr_trace_report_opts_default(&ro);
  ro.detail = 1; /* every step (the default is the summary) */
  ck_assert_int_eq(tsr_trace_report(dir, f, &ro), TSR_OK);
  fclose(f);
  f = fopen(path, "r");
  char buf[1 << 16];
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  buf[len] = 0;
  fclose(f);
  ck_assert_msg(strstr(buf, "step 2, rank 0") && strstr(buf, "critical path") && strstr(buf, "conv2d_fwd"),
                "report lacks step 2, the critical path or conv2d_fwd:\n%s", buf);
}
END_TEST

START_TEST(step_window_limits_the_recorded_tasks) {
  char dir[128];
  snprintf(dir, sizeof dir, "%s/trace", tt_tmpdir());
  traced_run(dir, 3, 1, 1);
  struct _tsr_tl *tl;
  ck_assert_int_eq(_tsr_tl_load(&tl, dir), TSR_OK);
  ck_assert_int_gt(tl->ntasks, 10);
  for (int k = 0; k < tl->ntasks; k++) ck_assert_int_eq(tl->tasks[k].step, 1);
  _tsr_tl_free(tl);
}
END_TEST

START_TEST(tessera_trace_draws_png_plots) {
  int st = system("gnuplot --version > /dev/null 2>&1");
  if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 127) { /* the shell's "command not found" */
    tt_skip("tessera-trace --plots not checked: gnuplot not found in PATH (apt-get install gnuplot-nox)");
    return;
  }
  ck_assert_msg(st == 0, "gnuplot --version failed (status 0x%x)", st);
  const char *bd = getenv("TESSERA_BUILDDIR");
  char dir[128], cmd[1024], path[256];
  snprintf(dir, sizeof dir, "%s/trace", tt_tmpdir());
  traced_run(dir, 2, 0, -1);
  snprintf(path, sizeof path, "%s/log.csv", dir);
  FILE *f = fopen(path, "w");
  fprintf(f, "epoch,step,train_loss,val_loss,samples_per_s,elapsed_s\n1,10,0.5,0.6,100,1\n2,20,0.25,0.3,100,2\n");
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s/tessera-trace %s --merge --plots --log %s -q > /dev/null", bd ? bd : ".", dir, path);
  ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
  const char *pngs[] = {"timeline.png", "loss.png"};
  for (int k = 0; k < 2; k++) {
    snprintf(path, sizeof path, "%s/%s", dir, pngs[k]);
    f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s not written", path);
    unsigned char magic[8] = {0};
    ck_assert_int_eq(fread(magic, 1, 8, f), 8);
    fclose(f);
    ck_assert_msg(!memcmp(magic, "\x89PNG\r\n\x1a\n", 8), "%s is not a PNG file", path);
  }
}
END_TEST

static Suite *make_trace_suite(void) {
  Suite *s = suite_create("trace");
  TCase *tc = tcase_create("trace");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, analysis_of_a_hand_built_timeline);
  tcase_add_test(tc, traced_run_writes_complete_consistent_traces);
  tcase_add_test(tc, step_window_limits_the_recorded_tasks);
  tcase_add_test(tc, tessera_trace_draws_png_plots);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_trace_suite)

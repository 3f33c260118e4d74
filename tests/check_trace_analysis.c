/* Trace analysis of overlapping steps (the trainer keeps several in flight): a hand-built timeline on
 * which the old per-step idle time (workers x window - the step's own task time) counted the other
 * step's tasks as idle. Each step's window must split exactly into its own tasks, other steps' tasks
 * and idle time, and the run's idle time must count each worker's time with no task once. A raw
 * file's worker ids are bounded. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"
#include "trace/trace.h"
#include "trace_analysis/timeline.h"

static const double eps = 1e-9; /* the times are whole microseconds: every sum is exact */

static void add(struct _tsr_tl *tl, int64_t step, int rank, int worker, double a_ms, double b_ms) {
  struct _tsr_tev e = {.seq = (uint64_t)tl->ntasks,
                       .step = step,
                       .rank = rank,
                       .worker = worker,
                       .submit = a_ms * 1e3,
                       .start = a_ms * 1e3,
                       .end = b_ms * 1e3};
  snprintf(e.name, sizeof e.name, "layer%d", tl->ntasks);
  snprintf(e.op, sizeof e.op, "op");
  ck_assert_int_ge(_tsr_tl_add_task(tl, &e, NULL, 0), 0);
}

/* Rank 0, two workers, busy without a gap from 0 to 30 ms but for worker 1 in [25, 30]:
 *   step 1: w0 [0,10] [10,20], w1 [0,10]       window [0,20]
 *   step 2: w1 [10,20] [20,25], w0 [20,30]     window [10,30]
 *   step 3: w0 [40,50]                         window [40,50] (after a pause of both workers)
 * Rank 1, two workers: step 1: w0 [0,30]. */
static struct _tsr_tl *two_overlapping_steps(void) {
  struct _tsr_tl *tl = _tsr_tl_new(2, 2);
  ck_assert_ptr_nonnull(tl);
  add(tl, 1, 0, 0, 0, 10), add(tl, 1, 0, 1, 0, 10), add(tl, 1, 0, 0, 10, 20);
  add(tl, 2, 0, 1, 10, 20), add(tl, 2, 0, 0, 20, 30), add(tl, 2, 0, 1, 20, 25);
  add(tl, 3, 0, 0, 40, 50);
  add(tl, 1, 1, 0, 0, 30);
  _tsr_tl_finish(tl);
  return tl;
}

static void check_step(const struct _tsr_step_stats *s, int64_t step, int rank, double begin, double end, double busy,
                       double other, double idle) {
  ck_assert_int_eq(s->step, step);
  ck_assert_int_eq(s->rank, rank);
  ck_assert_int_eq(s->nworkers, 2);
  ck_assert_msg(fabs(s->begin - begin * 1e3) < eps && fabs(s->end - end * 1e3) < eps,
                "step %lld rank %d: window [%g, %g]", (long long)step, rank, s->begin, s->end);
  ck_assert_msg(fabs(s->busy - busy * 1e3) < eps && fabs(s->other - other * 1e3) < eps &&
                    fabs(s->idle - idle * 1e3) < eps,
                "step %lld rank %d: busy %g other %g idle %g us, expected %g %g %g ms", (long long)step, rank, s->busy,
                s->other, s->idle, busy, other, idle);
}

START_TEST(overlapping_steps_count_no_idle_time_twice) {
  struct _tsr_tl *tl = two_overlapping_steps();
  struct _tsr_step_stats *st;
  int n;
  ck_assert_int_eq(_tsr_tl_step_stats(tl, &st, &n), TSR_OK);
  ck_assert_int_eq(n, 4);
  /* the old idle times were 2 x 20 - 30 = 10 ms for step 1 and 2 x 20 - 25 = 15 ms for step 2 */
  check_step(&st[0], 1, 0, 0, 20, 30, 10, 0);  /* w1 runs step 2's task in [10,20] */
  check_step(&st[1], 1, 1, 0, 30, 30, 0, 30);  /* rank 1's worker 1 never works; rank 0's tasks do not count */
  check_step(&st[2], 2, 0, 10, 30, 25, 10, 5); /* w0 runs step 1's task in [10,20]; w1 idle in [25,30] */
  check_step(&st[3], 3, 0, 40, 50, 10, 0, 10);

  struct _tsr_run_stats rs[2];
  /* all steps: rank 0 from 0 to 50 ms on 2 workers = 100 ms, tasks 65 ms (the pause [30,40] is idle) */
  ck_assert_int_eq(_tsr_tl_run_stats(tl, st, n, 0, -1, rs), TSR_OK);
  ck_assert_int_eq(rs[0].nsteps, 3);
  ck_assert_msg(fabs(rs[0].wall - 50e3) < eps && fabs(rs[0].busy - 65e3) < eps && fabs(rs[0].idle - 35e3) < eps,
                "rank 0: wall %g busy %g idle %g", rs[0].wall, rs[0].busy, rs[0].idle);
  ck_assert_msg(rs[1].nsteps == 1 && fabs(rs[1].wall - 30e3) < eps && fabs(rs[1].idle - 30e3) < eps,
                "rank 1: %d steps, wall %g idle %g", rs[1].nsteps, rs[1].wall, rs[1].idle);
  /* steps 2..2: [10,30], tasks of step 1 in it count as work: w0 20 ms, w1 15 ms, idle 5 ms */
  ck_assert_int_eq(_tsr_tl_run_stats(tl, st, n, 2, 2, rs), TSR_OK);
  ck_assert_msg(rs[0].nsteps == 1 && fabs(rs[0].wall - 20e3) < eps && fabs(rs[0].busy - 35e3) < eps &&
                    fabs(rs[0].idle - 5e3) < eps,
                "steps 2..2, rank 0: %d steps, wall %g busy %g idle %g", rs[0].nsteps, rs[0].wall, rs[0].busy,
                rs[0].idle);
  ck_assert_msg(rs[1].nsteps == 0 && rs[1].wall == 0 && rs[1].idle == 0, "steps 2..2, rank 1: %d steps", rs[1].nsteps);
  _tsr_step_stats_free(st, n);
  _tsr_tl_free(tl);
}
END_TEST

START_TEST(report_prints_the_split_and_the_run_idle_share) {
  struct _tsr_tl *tl = two_overlapping_steps();
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  _tsr_tl_report(tl, f, 1, 2);
  fclose(f);
  /* steps 1..2: rank 0 over [0,30] (60 worker-ms, 55 in tasks), rank 1 over [0,30] (60, 30): 35 of 120 idle */
  const char *want[] = {
      "step 2, rank 0: 20.000 ms from first start to last end, 3 tasks on 2 workers\n"
      "  computation 25.000 ms (62.5% of worker time), other steps' tasks 10.000 ms (25.0%), idle 5.000 ms (12.5%)\n",
      "step 1, rank 1: 30.000 ms from first start to last end, 1 tasks on 2 workers\n"
      "  computation 30.000 ms (50.0% of worker time), idle 30.000 ms (50.0%)\n",
      "3 step-ranks: mean 23.333 ms from first start to last end per step, 20.000 ms of wall time per step",
      "workers over the steps' wall time: computing 70.8%, idle 29.2% (no task of any step running)\n"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    ck_assert_msg(strstr(text, want[i]) != NULL, "report lacks\n%s\nreport:\n%s", want[i], text);
  ck_assert_msg(strstr(text, "step 3,") == NULL, "step 3 is outside 1..2:\n%s", text);
  free(text);
  _tsr_tl_free(tl);
}
END_TEST

/* The analysis keeps one interval list per worker id: an id beyond any real machine's is refused
 * when the raw file is read (a corrupted file must not size an allocation). */
START_TEST(raw_file_with_an_absurd_worker_id_is_refused) {
  char dir[4096], path[4200];
  snprintf(dir, sizeof dir, "%s/trace", tt_tmpdir());
  ck_assert_int_eq(mkdir(dir, 0777), 0);
  snprintf(path, sizeof path, "%s/rank-0.tsv", dir);
  for (int k = 0; k < 2; k++) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "rank\t0\t-\t1\t-\t0\nworker\t0\tCPU 0\ntask\t0\t1\t%d\t0\t1\t2\t0\tlayer\top\t-\n",
            k ? 2000000000 : 4096);
    fclose(f);
    struct _tsr_tl *tl = NULL;
    tsr_status s = _tsr_tl_load(&tl, dir);
    if (!k) {
      ck_assert_msg(s == TSR_OK, "worker 4096: %s", tsr_last_error());
      _tsr_tl_free(tl);
    } else {
      ck_assert_int_eq(s, TSR_ERR_FORMAT);
      ck_assert_msg(strstr(tsr_last_error(), "rank-0.tsv:3: task with a bad worker") != NULL, "message: %s",
                    tsr_last_error());
    }
  }
}
END_TEST

static Suite *make_trace_analysis_suite(void) {
  Suite *s = suite_create("trace_analysis");
  TCase *tc = tcase_create("trace_analysis");
  tcase_add_test(tc, overlapping_steps_count_no_idle_time_twice);
  tcase_add_test(tc, report_prints_the_split_and_the_run_idle_share);
  tcase_add_test(tc, raw_file_with_an_absurd_worker_id_is_refused);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_trace_analysis_suite)

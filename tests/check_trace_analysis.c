/* Trace analysis of overlapping steps (the trainer keeps several in flight): a hand-built timeline on
 * which the old per-step idle time (workers x window - the step's own task time) counted the other
 * step's tasks as idle. Each step's window must split exactly into its own tasks, other steps' tasks
 * and idle time, and the run's idle time must count each worker's time with no task once. A raw
 * file's worker ids are bounded. The one-screen summary and the timeline data for plots (lanes,
 * operation families, critical path, transfers, step spans) on hand-built timelines. */
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

START_TEST(operations_fall_into_their_families) {
  const struct { const char *name, *op; int family; } cases[] = {
      {"load", "load", TSR_TL_LOAD},
      {"enc1", "conv2d_fwd", TSR_TL_HEAVY_FWD},
      {"dec1", "deconv2d_bwd_data", TSR_TL_HEAVY_BWD_DATA},
      {"fc", "dense_bwd_weights", TSR_TL_HEAVY_BWD_WEIGHTS},
      {"bn1", "bn_stats", TSR_TL_OTHER_FWD},
      {"pool1", "pool_bwd", TSR_TL_OTHER_BWD},
      {"enc1", "accumulate", TSR_TL_OTHER_BWD},          /* gradients of a layer with two consumers */
      {"allreduce_sum", "accumulate", TSR_TL_REDUCE},    /* the ring's sums */
      {"group0", "wire_pack", TSR_TL_REDUCE},
      {"loss", "loss_sum", TSR_TL_LOSS},
      {"enc1.weight", "opt_update_gated", TSR_TL_UPDATE},
      {"control_word", "fill", TSR_TL_OTHER}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    ck_assert_msg(_tsr_tl_family(cases[i].name, cases[i].op) == cases[i].family, "%s:%s is in family %d (%s), not %d",
                  cases[i].name, cases[i].op, _tsr_tl_family(cases[i].name, cases[i].op),
                  _tsr_tl_family_name(_tsr_tl_family(cases[i].name, cases[i].op)), cases[i].family);
}
END_TEST

static char *capture_summary(const struct _tsr_tl *tl, int64_t first, int64_t last) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  _tsr_tl_summary(tl, f, first, last);
  fclose(f);
  return text;
}

START_TEST(summary_fits_one_screen_and_gives_the_run_idle_share) {
  struct _tsr_tl *tl = two_overlapping_steps();
  char *text = capture_summary(tl, 0, -1);
  /* rank 0: steps 1..3 over [0,50] on 2 workers: 65 of 100 worker-ms in tasks, wall 50/3 ms per step */
  const char *want[] = {"steps 1 to 3 on 2 rank(s) of up to 2 workers",
                        "   0      3  16.667 ms",
                        "     65.0%  35.0%",
                        "slowest steps (first start to last end): step 1 rank 1 30.000 ms, step 1 rank 0 20.000 ms",
                        "task time 95.000 ms in all, by\n  family: other 100.0%\n",
                        "(--detail: "};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    ck_assert_msg(strstr(text, want[i]) != NULL, "summary lacks\n%s\nsummary:\n%s", want[i], text);
  int lines = 0;
  for (const char *c = text; *c; c++) lines += *c == '\n';
  ck_assert_msg(lines <= 24, "%d lines:\n%s", lines, text);
  free(text);
  text = capture_summary(tl, 7, 9);
  ck_assert_msg(strstr(text, "no traced step in 7:9") != NULL, "%s", text);
  free(text);
  _tsr_tl_free(tl);
}
END_TEST

/* Two ranks of 2 workers: step 5 is load -> conv (w0) -> update (w0) with a long unrelated
 * relu on w1; step 6 starts at 4 ms. Rank 0 sends 1 KB to rank 1 in step 5. */
START_TEST(plot_data_has_lanes_families_critical_path_transfers_and_steps) {
  struct _tsr_tl *tl = _tsr_tl_new(2, 2);
  ck_assert_ptr_nonnull(tl);
  struct _tsr_tev e[] = {{.step = 5, .rank = 0, .worker = 0, .start = 1000, .end = 2000, .name = "load", .op = "load"},
                         {.step = 5, .rank = 0, .worker = 0, .start = 2000, .end = 5000, .name = "c1", .op = "conv2d_fwd"},
                         {.step = 5, .rank = 0, .worker = 1, .start = 1000, .end = 4500, .name = "r1", .op = "act_fwd"},
                         {.step = 5, .rank = 0, .worker = 0, .start = 5000, .end = 5500, .name = "c1.weight", .op = "opt_update"},
                         {.step = 6, .rank = 1, .worker = 0, .start = 4000, .end = 6000, .name = "load", .op = "load"}};
  int d0 = 0, d1 = 1;
  for (int i = 0; i < 5; i++) {
    e[i].seq = (uint64_t)i, e[i].submit = e[i].start;
    ck_assert_int_ge(_tsr_tl_add_task(tl, &e[i], i == 1 ? &d0 : i == 3 ? &d1 : NULL, i == 1 || i == 3), 0);
  }
  struct _tsr_xev x = {.step = 5, .rank = 0, .peer = 1, .is_send = 1, .bytes = 1024, .post = 2500, .done = 3000};
  ck_assert_int_ge(_tsr_tl_add_xfer(tl, &x), 0);
  _tsr_tl_finish(tl);
  char path[4200];
  snprintf(path, sizeof path, "%s/timeline.dat", tt_tmpdir());
  ck_assert_int_eq(_tsr_tl_write_plot_data(tl, path, 5, 6), TSR_OK);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  /* lanes: rank 0's two workers, its sends and receives, then rank 1's; times from 1 ms */
  const char *want[] = {
      "# rows 8\n",
      "# ytics (\"r0 worker 0\" 0, \"r0 worker 1\" 1, \"r0 MPI send\" 2, \"r0 MPI recv\" 3, \"r1 worker 0\" 4, "
      "\"r1 worker 1\" 5, \"r1 MPI send\" 6, \"r1 MPI recv\" 7)\n",
      "# families data loading|conv/dense forward|",
      "0.0000 1.0000 0 0 1 5\n",   /* load, on the critical path */
      "1.0000 4.0000 0 1 1 5\n",   /* conv forward, on it */
      "0.0000 3.5000 1 4 0 5\n",   /* the relu is longer than the load but no task waits for it */
      "4.0000 4.5000 0 8 1 5\n",   /* the update ends the path */
      "3.0000 5.0000 4 0 1 6\n",   /* step 6 on rank 1: its own path */
      "\n\n# transfers: post done row send bytes peer\n1.5000 2.0000 2 1 1024 1\n",
      "\n\n# steps: begin end step (over all ranks)\n0.0000 4.5000 5\n3.0000 5.0000 6\n"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    ck_assert_msg(strstr(text, want[i]) != NULL, "timeline data lacks\n%s\ndata:\n%s", want[i], text);
  _tsr_tl_free(tl);
}
END_TEST

static Suite *make_trace_analysis_suite(void) {
  Suite *s = suite_create("trace_analysis");
  TCase *tc = tcase_create("trace_analysis");
  tcase_add_test(tc, overlapping_steps_count_no_idle_time_twice);
  tcase_add_test(tc, report_prints_the_split_and_the_run_idle_share);
  tcase_add_test(tc, raw_file_with_an_absurd_worker_id_is_refused);
  tcase_add_test(tc, operations_fall_into_their_families);
  tcase_add_test(tc, summary_fits_one_screen_and_gives_the_run_idle_share);
  tcase_add_test(tc, plot_data_has_lanes_families_critical_path_transfers_and_steps);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_trace_analysis_suite)

/* Scaling prediction: the cost models against their formulas worked by hand, machine files (every
 * bad field named), and the replay of a hand-made trace (two layers, two gradient groups, a ring
 * task to be replaced) whose predicted step time, one-rank time, exposed communication and traced
 * time are worked out by hand in the comments; the predicted timeline must read back as a trace. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera/scale.h>

#include "scale/scale.h"
#include "testutil.h"
#include "trace_analysis/timeline.h"

static const double eps = 1e-9;

/* inter: 10 us, 8 Gbit/s = 1000 bytes/us, shared; intra: 1 us, 100 Gbit/s = 12500 bytes/us;
 * sums at 8 Gbit/s = 1000 bytes/us; packs at 8 Gbit/s. */
static tsr_machine hand_machine(int per_node) {
  tsr_machine m;
  tsr_machine_default(&m);
  m.ranks_per_node = per_node;
  m.inter = (tsr_link){10, 8, 1};
  m.intra = (tsr_link){1, 100, 0};
  m.reduce_gbit = m.pack_gbit = 8;
  m.progress = TSR_MPI_PROGRESS_THREAD; /* messages move at once; worker_progress_* test the other mode */
  return m;
}

static double cost(const tsr_machine *m, const char *algo, double bytes, int ranks) {
  double us = -1;
  ck_assert_msg(tsr_scale_collective_us(m, algo, bytes, ranks, &us) == TSR_OK, "%s", tsr_last_error());
  return us;
}

START_TEST(ring_by_hand) {
  tsr_machine m = hand_machine(1);
  /* 4 ranks, 4000 bytes: chunks of 1000; 6 rounds of (10 + 1000/1000) and 3 sums of 1000/1000. */
  ck_assert_double_eq_tol(cost(&m, "f32", 4000, 4), 6 * 11.0 + 3 * 1.0, eps);
  /* bf16: half the bytes on the wire (6 x 10.5), the same sums, 6 packs of 1000 bytes of float32. */
  ck_assert_double_eq_tol(cost(&m, "bf16", 4000, 4), 6 * 10.5 + 3 * 1.0 + 6 * 1.0, eps);
  /* 2 ranks: chunks of 2000: 2 x (10 + 2) + 2 */
  ck_assert_double_eq_tol(cost(&m, "f32", 4000, 2), 26, eps);
  ck_assert_double_eq_tol(cost(&m, "f32", 4000, 1), 0, eps);
  /* 2 ranks per node, 4 ranks: the slowest hop of a round is the one between nodes. */
  tsr_machine m2 = hand_machine(2);
  ck_assert_double_eq_tol(cost(&m2, "f32", 4000, 4), 69, eps);
  /* A rendezvous of 100 us on every message above 1500 bytes: 2 ranks send chunks of 2000, two
   * rounds pay it; 4 ranks send chunks of 1000 and do not; a chunk equal to the limit is eager. */
  m.inter.rendezvous_us = 100, m.inter.eager_bytes = 1500;
  ck_assert_double_eq_tol(cost(&m, "f32", 4000, 2), 26 + 2 * 100.0, eps);
  ck_assert_double_eq_tol(cost(&m, "f32", 4000, 4), 6 * 11.0 + 3 * 1.0, eps);
  m.inter.eager_bytes = 2000;
  ck_assert_double_eq_tol(cost(&m, "f32", 4000, 2), 26, eps);
}
END_TEST

/* An exchange rate below the bandwidth slows the rounds in which ranks send and receive at once
 * (ring, recursive doubling, halving), not the binomial tree's one-way rounds nor the hand-over of
 * ranks beyond a power of two; one at or above the bandwidth (or 0) changes nothing. */
START_TEST(exchange_rate_by_hand) {
  tsr_machine m = hand_machine(1);
  m.inter.exchange_gbit = 4; /* 500 bytes/us each way with both directions busy */
  /* ring, 2 ranks, 4000 bytes: 2 rounds of (10 + 2000/500) and a sum of 2 */
  ck_assert_double_eq_tol(cost(&m, "f32", 4000, 2), 2 * 14.0 + 2, eps);
  /* recursive doubling, 4 ranks: 2 rounds of (10 + 4000/500) + a sum of 4 */
  ck_assert_double_eq_tol(cost(&m, "rd", 4000, 4), 2 * 22.0, eps);
  /* 3 ranks: fold in and out one way (2 x 14 + 4), then one exchange of 22 */
  ck_assert_double_eq_tol(cost(&m, "rd", 4000, 3), 32 + 22.0, eps);
  /* binomial tree: one way, as without it */
  ck_assert_double_eq_tol(cost(&m, "tree", 4000, 4), 2 * 18.0 + 2 * 14.0, eps);
  m.inter.exchange_gbit = 8;
  ck_assert_double_eq_tol(cost(&m, "f32", 4000, 2), 26, eps);
  m.inter.exchange_gbit = 16;
  ck_assert_double_eq_tol(cost(&m, "f32", 4000, 2), 26, eps);
}
END_TEST

/* Ranks of a node taking turns on one core (timeslice_us = 40): every round waits for the node's
 * ranks to have run, the rest of a rotation ((k - 1) slices less the round's wire time) but at least
 * (k - 1.5) slices beyond its messages: 20 us at 2 per node, 60 at 3; nothing at 1 per node, nor
 * with one rank, nor with the field at 0. ranks_per_core, where set, counts instead. */
START_TEST(timeslice_by_hand) {
  tsr_machine m2 = hand_machine(2);
  m2.timeslice_us = 40;
  /* ring, 4 ranks in 2 nodes: 6 rounds of (10 + 1 + (40 - 11)) and 3 sums of 1 */
  ck_assert_double_eq_tol(cost(&m2, "f32", 4000, 4), 6 * 40.0 + 3 * 1.0, eps);
  /* halving-doubling: 4 rounds, halves inside the node (wire 1.16, wait 38.84) and quarters across
   * it (12, 28), and their sums of 2 and 1: every round takes the rotation, 40, and 3 us of sums */
  ck_assert_double_eq_tol(cost(&m2, "rabenseifner", 4000, 4), 4 * 40 + 3, 1e-9);
  /* hierarchical: 2 tree rounds inside (1.32 + 38.68) and 2 ring rounds across the leaders (12 + 28),
   * sums of 4 and 2 */
  ck_assert_double_eq_tol(cost(&m2, "hier", 4000, 4), 4 * 40 + 4 + 2, 1e-9);
  /* 2 ranks on one node: one ring round inside each way, (1.16 + 38.84) twice, a sum of 2 */
  ck_assert_double_eq_tol(cost(&m2, "f32", 4000, 2), 2 * 40.0 + 2, 1e-9);
  /* a wire of more than half a slice leaves half a slice to wait: 48000 bytes over 2 nodes of 2,
   * chunks of 12000 at 1000 bytes/us across: ring rounds of (10 + 12 + 20), 3 sums of 12 */
  ck_assert_double_eq_tol(cost(&m2, "f32", 48000, 4), 6 * 42.0 + 3 * 12.0, 1e-9);
  tsr_machine m3 = hand_machine(3);
  m3.timeslice_us = 40;
  /* ring, 6 ranks in 2 nodes of 3: chunks of 4000/6; 10 rounds of (10 + 0.667 + (80 - 10.667)), 5
   * sums of 0.667 */
  ck_assert_double_eq_tol(cost(&m3, "f32", 4000, 6), 10 * 80.0 + 5 * 4.0 / 6, 1e-9);
  tsr_machine m1 = hand_machine(1);
  m1.timeslice_us = 40;
  ck_assert_double_eq_tol(cost(&m1, "f32", 4000, 4), 6 * 11.0 + 3 * 1.0, eps);
  /* one rank per node, 2 ranks per core (nodes sharing cores): the ring's 6 rounds wait 40 - 11 us
   * each; 3 per core on 2 ranks: at most the 2 ranks there are, 40 - 12 */
  m1.ranks_per_core = 2;
  ck_assert_double_eq_tol(cost(&m1, "f32", 4000, 4), 6 * 40.0 + 3 * 1.0, eps);
  m1.ranks_per_core = 3;
  ck_assert_double_eq_tol(cost(&m1, "f32", 4000, 2), 2 * 40.0 + 2, eps);
  /* set to 1 on nodes of 2: cores of their own, no wait */
  m2.ranks_per_core = 1;
  ck_assert_double_eq_tol(cost(&m2, "f32", 4000, 4), 69, eps);
  m2.ranks_per_core = 0;
  ck_assert_double_eq_tol(cost(&m2, "f32", 4000, 1), 0, eps);
  m2.timeslice_us = 0;
  ck_assert_double_eq_tol(cost(&m2, "f32", 4000, 4), 69, eps);
}
END_TEST

START_TEST(other_models_by_hand) {
  tsr_machine m = hand_machine(1);
  /* recursive doubling, 4 ranks: 2 rounds of (10 + 4000/1000) + a sum of 4 us */
  ck_assert_double_eq_tol(cost(&m, "rd", 4000, 4), 2 * 18.0, eps);
  /* 3 ranks: fold in and out (2 x 14 + 4), then one round of 18 */
  ck_assert_double_eq_tol(cost(&m, "rd", 4000, 3), 32 + 18.0, eps);
  /* binomial tree, 4 ranks: 2 rounds up with a sum (14 + 4) and 2 down (14) */
  ck_assert_double_eq_tol(cost(&m, "tree", 4000, 4), 2 * 18.0 + 2 * 14.0, eps);
  /* hierarchical, 2 per node, 4 ranks: inside, a tree round up (1 + 4000/12500, a sum of 4) and one
   * down (1.32); across the 2 leaders a ring of 2 rounds of 2000 (10 + 2) and a sum of 2 */
  tsr_machine m2 = hand_machine(2);
  ck_assert_double_eq_tol(cost(&m2, "hier", 4000, 4), 1.32 + 4 + 1.32 + 24 + 2, 1e-9);
  /* sign votes, 4 ranks, 32000 bytes: 6 rounds of (10 + 250/1000), 3 counts of 2000/1000, a pack of 32 */
  ck_assert_double_eq_tol(cost(&m, "sign1", 32000, 4), 6 * 10.25 + 3 * 2.0 + 32, eps);
  /* p-bit sums, 4 ranks: 4 bits (2P + 1 = 9 values), 1000 bytes per message: 6 x 11 + 6 + 32 */
  ck_assert_double_eq_tol(cost(&m, "signp", 32000, 4), 6 * 11.0 + 3 * 2.0 + 32, eps);
  /* halving-doubling, 4 ranks: halves of 2000 (2 x (10 + 2) + a sum of 2), quarters of 1000
   * (2 x 11 + 1) */
  ck_assert_double_eq_tol(cost(&m, "rabenseifner", 4000, 4), 26 + 23.0, eps);
  /* 2 per node, 4 ranks (halving.c pairs ranks 0-1 and 2-3 first: inside the nodes), halves of 2000
   * inside (2 x (1 + 0.16) + a sum of 2), then quarters of 1000 across with both ranks of a node on
   * its link at once (2 x (10 + 2 x 1) + a sum of 1) */
  ck_assert_double_eq_tol(cost(&m2, "rabenseifner", 4000, 4), 4.32 + 25, 1e-9);
  /* 2 per node, 3 ranks: rank 2 alone (node 1) hands its 4000 bytes to rank 0 and gets the result
   * back, one flow on the link (2 x (10 + 4) + a sum of 4), then ranks 0 and 1 inside node 0 (4.32) */
  ck_assert_double_eq_tol(cost(&m2, "rabenseifner", 4000, 3), 32 + 4.32, 1e-9);
  /* hier-rh, 3 nodes of 2: the ring inside on halves of 2000 (4.32); across, each half's halving over
   * 3 nodes: the third node's two members hand over at once (2 x (10 + 2 x 2) + a sum of 2), then
   * quarters across with 2 flows (2 x 12 + 1) */
  ck_assert_double_eq_tol(cost(&m2, "hier-rh", 4000, 6), 4.32 + 30 + 25, 1e-9);
  /* best: the cheapest exact model (here recursive doubling, 36 < 69) */
  ck_assert_double_eq_tol(cost(&m, "best", 4000, 4), 36, eps);
  double us;
  ck_assert_int_eq(tsr_scale_collective_us(&m, "nope", 4000, 4, &us), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "'nope'"));
}
END_TEST

/* Each model's rounds add up to its time; the ring at P ranks has 2(P-1) rounds, halving-doubling at
 * 4 ranks 4 (2 halving with a sum, 2 doubling without), recursive doubling at 3 ranks 3 (fold in,
 * one exchange, fold out); the ring's reduce-scatter rounds carry the sums. */
START_TEST(rounds_add_up) {
  tsr_machine m = hand_machine(2);
  struct _tsr_rounds r = {0};
  for (int i = 0; tsr_scale_algo_name(i, NULL); i++)
    for (int p = 2; p <= 9; p++) {
      const char *name = tsr_scale_algo_name(i, NULL);
      r.n = 0;
      double t = _tsr_cost_rounds(&m, name, 4000, p, &r), sum = 0;
      for (int k = 0; k < r.n; k++) sum += r.v[k].wire_us + r.v[k].work_us + r.v[k].wait_us;
      ck_assert_msg(fabs(t - cost(&m, name, 4000, p)) < 1e-9 && fabs(sum - t) < 1e-9, "%s at %d ranks", name, p);
    }
  r.n = 0;
  _tsr_cost_rounds(&m, "f32", 4000, 5, &r);
  ck_assert_int_eq(r.n, 8);
  ck_assert_double_eq_tol(r.v[0].work_us, 0.8, eps); /* a sum of 800 bytes at 1000 bytes/us */
  ck_assert_double_eq_tol(r.v[7].work_us, 0, eps);
  r.n = 0;
  _tsr_cost_rounds(&m, "rabenseifner", 4000, 4, &r);
  ck_assert_int_eq(r.n, 4);
  ck_assert_double_eq_tol(r.v[1].wire_us, 12, eps); /* quarters across the node link, 2 flows */
  ck_assert_double_eq_tol(r.v[1].work_us, 1, eps);
  ck_assert_double_eq_tol(r.v[2].wire_us, 12, eps);
  ck_assert_double_eq_tol(r.v[2].work_us, 0, eps);
  r.n = 0;
  tsr_machine m1 = hand_machine(1);
  _tsr_cost_rounds(&m1, "rd", 4000, 3, &r);
  ck_assert_int_eq(r.n, 3);
  /* turns (timeslice_us 40, 2 per node): each round's wait, the rotation less its wire, apart */
  m.timeslice_us = 40;
  r.n = 0;
  _tsr_cost_rounds(&m, "f32", 4000, 4, &r);
  ck_assert_int_eq(r.n, 6);
  for (int k = 0; k < r.n; k++) {
    ck_assert_double_eq_tol(r.v[k].wait_us, 29, eps);
    ck_assert_double_eq_tol(r.v[k].wire_us, 11, eps);
  }
  m.timeslice_us = 0;
  r.n = 0;
  ck_assert_double_eq(_tsr_cost_rounds(&m, "f32", 4000, 1, &r), 0);
  ck_assert_int_eq(r.n, 0);
  free(r.v);
}
END_TEST

static void bad_machine(const char *json, const char *needle) {
  tsr_machine m;
  tsr_status st = tsr_machine_parse(json, "m.json", &m);
  ck_assert_msg(st == TSR_ERR_FORMAT, "%s: accepted", json);
  ck_assert_msg(strstr(tsr_last_error(), needle) && strstr(tsr_last_error(), "m.json"), "%s: message '%s' lacks '%s'",
                json, tsr_last_error(), needle);
}

START_TEST(machine_files) {
  bad_machine("{\"inter\": {\"bandwidth_gbit\": 0}}", "'inter.bandwidth_gbit'");
  bad_machine("{\"intra\": {\"latency_us\": -1}}", "'intra.latency_us'");
  bad_machine("{\"inter\": {\"latency\": 3}}", "'inter.latency'");
  bad_machine("{\"inter\": {\"rendezvous_us\": -1}}", "'inter.rendezvous_us'");
  bad_machine("{\"intra\": {\"exchange_gbit\": -2}}", "'intra.exchange_gbit'");
  bad_machine("{\"intra\": {\"eager_bytes\": \"64k\"}}", "'intra.eager_bytes'");
  bad_machine("{\"inter\": {\"shared\": 1}}", "'inter.shared'");
  bad_machine("{\"inter\": 5}", "'inter'");
  bad_machine("{\"ranks_per_node\": 0}", "'ranks_per_node'");
  bad_machine("{\"workers_per_rank\": 1.5}", "'workers_per_rank'");
  bad_machine("{\"reduce_gbit\": \"fast\"}", "'reduce_gbit'");
  bad_machine("{\"bogus\": 1}", "'bogus'");
  bad_machine("{\"progress\": \"poll\"}", "'progress'");
  bad_machine("{\"timeslice_us\": -4000}", "'timeslice_us'");
  bad_machine("{\"ranks_per_core\": 1.5}", "'ranks_per_core'");
  bad_machine("{\"progress\": 1}", "'progress'");
  bad_machine("[1, 2]", "object");
  bad_machine("{\"inter\": ", "m.json:1:");
  tsr_machine m, back;
  ck_assert_int_eq(tsr_machine_load("/nonexistent/m.json", &m), TSR_ERR_IO);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "/nonexistent/m.json"));
  /* a file written by hand, fields left out keep their defaults; saved and read back unchanged */
  ck_assert_int_eq(tsr_machine_parse("{\"name\": \"two nodes\", \"_comment\": \"x\", \"ranks_per_node\": 6, "
                                     "\"inter\": {\"latency_us\": 1.5, \"bandwidth_gbit\": 200, \"shared\": true}}",
                                     "m.json", &m),
                   TSR_OK);
  ck_assert_str_eq(m.name, "two nodes");
  ck_assert_int_eq(m.progress, TSR_MPI_PROGRESS_WORKER); /* the default */
  ck_assert_int_eq(m.ranks_per_node, 6);
  ck_assert_double_eq(m.inter.bandwidth_gbit, 200);
  ck_assert_double_eq(m.intra.bandwidth_gbit, 100);
  ck_assert(m.inter.rendezvous_us == 0 && m.inter.eager_bytes == 65472 && m.intra.eager_bytes == 4032);
  ck_assert(m.inter.exchange_gbit == 0 && m.intra.exchange_gbit == 0 && m.timeslice_us == 0);
  ck_assert_int_eq(tsr_machine_parse("{\"inter\": {\"rendezvous_us\": 250.5, \"eager_bytes\": 12288, "
                                     "\"exchange_gbit\": 0.75}, \"timeslice_us\": 3978.5, \"ranks_per_core\": 2}",
                                     "m.json", &back),
                   TSR_OK);
  ck_assert_int_eq(m.ranks_per_core, 0); /* the default: the node's ranks */
  m.timeslice_us = back.timeslice_us, m.ranks_per_core = back.ranks_per_core;
  ck_assert(m.timeslice_us == 3978.5 && m.ranks_per_core == 2);
  m.inter.rendezvous_us = back.inter.rendezvous_us, m.inter.eager_bytes = back.inter.eager_bytes;
  m.inter.exchange_gbit = back.inter.exchange_gbit;
  ck_assert(m.inter.rendezvous_us == 250.5 && m.inter.eager_bytes == 12288 && m.inter.exchange_gbit == 0.75);
  const char *path = tt_path_in(tt_tmpdir(), "m.json");
  ck_assert_int_eq(tsr_machine_save(path, &m), TSR_OK);
  ck_assert_int_eq(tsr_machine_load(path, &back), TSR_OK);
  ck_assert_str_eq(back.name, m.name);
  ck_assert(back.ranks_per_node == m.ranks_per_node && back.inter.latency_us == m.inter.latency_us &&
            back.inter.bandwidth_gbit == m.inter.bandwidth_gbit && back.inter.shared == m.inter.shared &&
            back.intra.bandwidth_gbit == m.intra.bandwidth_gbit && back.reduce_gbit == m.reduce_gbit &&
            back.progress == m.progress && back.inter.rendezvous_us == m.inter.rendezvous_us &&
            back.inter.eager_bytes == m.inter.eager_bytes && back.intra.eager_bytes == m.intra.eager_bytes &&
            back.inter.exchange_gbit == m.inter.exchange_gbit && back.timeslice_us == m.timeslice_us &&
            back.ranks_per_core == m.ranks_per_core);
  ck_assert_int_eq(tsr_machine_parse("{\"progress\": \"thread\"}", "m.json", &m), TSR_OK);
  ck_assert_int_eq(m.progress, TSR_MPI_PROGRESS_THREAD);
  ck_assert_int_eq(tsr_machine_save(path, &m), TSR_OK);
  ck_assert_int_eq(tsr_machine_load(path, &back), TSR_OK);
  ck_assert_int_eq(back.progress, TSR_MPI_PROGRESS_THREAD);
}
END_TEST

/* The hand-made timeline tl, finished, as a trace folder (tl freed). */
static const char *written(struct _tsr_tl *tl) {
  _tsr_tl_finish(tl);
  const char *dir = tt_tmpdir();
  ck_assert_int_eq(_tsr_tl_write_raw(tl, dir), TSR_OK);
  _tsr_tl_free(tl);
  return dir;
}

/* One rank, two workers, steps 1..3 submitted as
 *   A fwd (10 us; waits for the previous step's U1, U2)   B bwd of layer 2 (20; A)
 *   [group 0 marker, 4000 bytes]   X allreduce_sum (100; B)   U1 update (5; X)
 *   C bwd of layer 1 (30; B)   [group 1 marker, 2000 bytes]   U2 update (5; C)
 * X is a ring task of the traced run: the replay drops it, so U1 waits for B and group 0. */
static void add(struct _tsr_tl *tl, uint64_t seq, int64_t step, const char *name, const char *op, double start,
                double dur, const int *deps, int nd) {
  struct _tsr_tev e = {.seq = seq,
                       .step = step,
                       .rank = 0,
                       .worker = 0,
                       .submit = start,
                       .start = start,
                       .end = start + dur,
                       .bytes = 4};
  snprintf(e.name, sizeof e.name, "%s", name);
  snprintf(e.op, sizeof e.op, "%s", op);
  ck_assert_int_ge(_tsr_tl_add_task(tl, &e, deps, nd), 0);
}

static const char *hand_trace(void) {
  struct _tsr_tl *tl = _tsr_tl_new(1, 2);
  int u1 = -1, u2 = -1;
  for (int s = 1; s <= 3; s++) {
    uint64_t q = 6 * (uint64_t)s;
    double t = 1000.0 * s; /* the traced run: one step every 1000 us */
    int a = tl->ntasks, dA[2] = {u1, u2};
    add(tl, q, s, "a", "conv_fwd", t, 10, dA, s > 1 ? 2 : 0);
    int b = tl->ntasks;
    add(tl, q + 1, s, "b", "conv_bwd", t + 10, 20, &a, 1);
    int x = tl->ntasks;
    add(tl, q + 2, s, "allreduce_sum", "accumulate", t + 30, 100, &b, 1);
    u1 = tl->ntasks;
    add(tl, q + 3, s, "b.weight", "opt_update", t + 130, 5, &x, 1);
    int c = tl->ntasks;
    add(tl, q + 4, s, "c", "conv_bwd", t + 30, 30, &b, 1);
    u2 = tl->ntasks;
    add(tl, q + 5, s, "c.weight", "opt_update", t + 140, 5, &c, 1);
    struct _tsr_gev g0 = {.step = s, .rank = 0, .group = 0, .bytes = 4000, .seq = q + 2};
    struct _tsr_gev g1 = {.step = s, .rank = 0, .group = 1, .bytes = 2000, .seq = q + 5};
    ck_assert_int_ge(_tsr_tl_add_group(tl, &g0), 0);
    ck_assert_int_ge(_tsr_tl_add_group(tl, &g1), 0);
  }
  return written(tl);
}

/* Replayed: steps 2 and 3 (the first traced step is left out). At 2 ranks group 0 costs
 * 2 x (10 + 2000/1000) + 2 = 26 us and group 1 2 x (10 + 1) + 1 = 23 us.
 *   step 2: A [0,10] B [10,30] C [30,60]; group 0 [30,56] (C runs: hidden); U1 [56,61];
 *           group 1 [60,83] (only U1 runs, till 61: 22 us exposed); U2 [83,88] -> ends at 88
 *   step 3: the same, 88 later                                             -> ends at 176
 * Time per step 88 us. One rank (reductions free): step 2 ends with U2 [60,65], step 3 at 130: 65.
 * The trace itself: steps end at 2145 and 3145: 1000 us. */
START_TEST(replay_by_hand) {
  const char *dir = hand_trace();
  tsr_machine m = hand_machine(1);
  tsr_scale_opts o;
  tsr_scale_opts_default(&o);
  o.ranks = 2;
  char *out = strdup(tt_path_in(dir, "predicted"));
  o.out_dir = out;
  tsr_scale_result r;
  ck_assert_msg(tsr_scale_predict(dir, &m, &o, &r) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(r.nsteps, 2);
  ck_assert_int_eq(r.workers, 2);
  ck_assert_double_eq_tol(r.step_us, 88, eps);
  ck_assert_double_eq_tol(r.step1_us, 65, eps);
  ck_assert_double_eq_tol(r.efficiency, 65.0 / 88, eps);
  ck_assert_double_eq_tol(r.measured_us, 1000, eps);
  ck_assert_int_eq(r.ngroups, 2);
  ck_assert_double_eq_tol(r.groups[0].cost_us, 26, eps);
  ck_assert_double_eq_tol(r.groups[1].cost_us, 23, eps);
  ck_assert_double_eq_tol(r.groups[0].exposed_us, 0, eps);
  ck_assert_double_eq_tol(r.groups[1].exposed_us, 22, eps);
  tsr_scale_result_free(&r);
  /* The predicted timeline reads back as a trace: 2 ranks alike, 5 tasks per step (X dropped),
   * one send and one receive per reduction. */
  struct _tsr_tl *p;
  ck_assert_msg(_tsr_tl_load(&p, out) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(p->nranks, 2);
  ck_assert_int_eq(p->ntasks, 2 * 2 * 5);
  ck_assert_int_eq(p->nxfers, 2 * 2 * 2 * 2);
  ck_assert_int_eq(p->ngroups, 2 * 2 * 2);
  double last = 0;
  for (int i = 0; i < p->ntasks; i++) last = fmax(last, p->tasks[i].end);
  ck_assert_double_eq_tol(last, 176, 1e-3);
  _tsr_tl_free(p);
  /* Fewer than 2 steps in range: refused, saying why. */
  o.out_dir = NULL, o.first_step = 3;
  ck_assert_int_eq(tsr_scale_predict(dir, &m, &o, &r), TSR_ERR_FORMAT);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "at least 2"));
  free(out);
}
END_TEST

/* The dispatch time per task from a trace: one worker runs a [0,10], b [15,25] (waited 5 after a),
 * the group's sum x [300,320] and update u [525,530], which waited for the reduction's messages (275
 * and 205 us after their task dependencies: communication, which the replay models, so not counted),
 * and the next step's c [532,542] (waited 2). Mean over a, b, c: 7/3 us. */
START_TEST(dispatch_from_trace) {
  struct _tsr_tl *tl = _tsr_tl_new(1, 1);
  const char *names[] = {"a", "b", "allreduce_sum", "b.weight", "c"};
  const char *ops[] = {"conv_fwd", "conv_bwd", "accumulate", "opt_update", "conv_fwd"};
  const double start[] = {0, 15, 300, 525, 532}, dur[] = {10, 10, 20, 5, 10};
  for (int i = 0; i < 5; i++) {
    struct _tsr_tev e = {.seq = i, .step = i < 4 ? 1 : 2, .worker = 0, .submit = 0, .start = start[i],
                         .end = start[i] + dur[i], .bytes = 4};
    snprintf(e.name, sizeof e.name, "%s", names[i]);
    snprintf(e.op, sizeof e.op, "%s", ops[i]);
    int dep = i - 1;
    ck_assert_int_ge(_tsr_tl_add_task(tl, &e, &dep, i > 0), 0);
  }
  const char *dir = written(tl);
  tsr_machine m;
  tsr_machine_default(&m);
  ck_assert_msg(tsr_machine_from_trace(dir, &m) == TSR_OK, "%s", tsr_last_error());
  ck_assert_double_eq_tol(m.task_overhead_us, 7.0 / 3, 1e-6);
  ck_assert_int_eq(m.workers_per_rank, 1);
}
END_TEST

/* The predicted time per step of the trace in dir on m at `ranks`; group 0's cost checked where
 * cost0 >= 0. */
static double predicted_step(const char *dir, const tsr_machine *m, int ranks, double cost0) {
  tsr_scale_opts o;
  tsr_scale_opts_default(&o);
  o.ranks = ranks;
  tsr_scale_result r;
  ck_assert_msg(tsr_scale_predict(dir, m, &o, &r) == TSR_OK, "%s", tsr_last_error());
  if (cost0 >= 0) ck_assert_double_eq_tol(r.groups[0].cost_us, cost0, eps);
  double us = r.step_us;
  tsr_scale_result_free(&r);
  return us;
}

/* Progress by worker 0. Steps 1..3 of one rank, each submitted as
 *   A fwd (10 us; the previous step's U, and its C or D)   B bwd (20; A)
 *   shape 2 only, before B: D (3000; A), a long task beside B
 *   [group 0 marker, 2000 bytes]   shape 1 only: C (3000; B), a long task after B   U update (5; B)
 * At 2 ranks, one per node, the ring has two rounds of one 1000-byte message (10 + 1 = 11 us), the
 * first followed by a sum of 1 us: 23 us at once (progress `thread`). */
static const char *progress_trace(int shape) {
  struct _tsr_tl *tl = _tsr_tl_new(1, 2);
  int u = -1, d = -1;
  for (int s = 1; s <= 3; s++) {
    uint64_t q = 6 * (uint64_t)s;
    double t = 10000.0 * s;
    int a = tl->ntasks, dA[2] = {u, d};
    add(tl, q, s, "a", "conv_fwd", t, 10, dA, s == 1 ? 0 : shape ? 2 : 1);
    if (shape == 2) d = tl->ntasks, add(tl, q + 1, s, "d", "conv_bwd", t + 10, 3000, &a, 1);
    int b = tl->ntasks;
    add(tl, q + 2, s, "b", "conv_bwd", t + 10, 20, &a, 1);
    if (shape == 1) d = tl->ntasks, add(tl, q + 3, s, "c", "conv_bwd", t + 30, 3000, &b, 1);
    u = tl->ntasks;
    add(tl, q + 4, s, "b.weight", "opt_update", t + 3030, 5, &b, 1);
    struct _tsr_gev g0 = {.step = s, .rank = 0, .group = 0, .bytes = 2000, .seq = q + 3};
    ck_assert_int_ge(_tsr_tl_add_group(tl, &g0), 0);
  }
  return written(tl);
}

static double progress_step(int shape, int workers, tsr_mpi_progress mode) {
  tsr_machine m = hand_machine(1);
  m.workers_per_rank = workers, m.progress = mode;
  return predicted_step(progress_trace(shape), &m, 2, 23);
}

/* The message is posted at 30, when B ends and C starts on worker 0 (between tasks), and arrives at
 * 41 while C runs: seen at C's end, 3030, even with worker 1 free; the sum [3030, 3031], the second
 * round posted at 3031 and seen at 3042 (worker 0 idle); U [3042, 3047]: 3047 per step with one
 * worker or two, not before C's end. Progress `thread`: the reduction [30, 53]; with one worker U
 * [3030, 3035] after C (3035 per step), with two U [53, 58] on worker 1 and the step ends with C. */
START_TEST(worker_progress_busy) {
  for (int w = 1; w <= 2; w++) ck_assert_double_eq_tol(progress_step(1, w, TSR_MPI_PROGRESS_WORKER), 3047, eps);
  ck_assert_double_eq_tol(progress_step(1, 1, TSR_MPI_PROGRESS_THREAD), 3035, eps);
  ck_assert_double_eq_tol(progress_step(1, 2, TSR_MPI_PROGRESS_THREAD), 3030, eps);
}
END_TEST

/* Two workers; D [10, 3010] on worker 0, B [10, 30] on worker 1. The reduction is ready at 30, but
 * worker 0 runs D: the message is posted at D's end, 3010, seen at 3021 (worker 0 idle); the sum
 * [3021, 3022], the second round [3022, 3033]; U [3033, 3038]: 3038 per step. Progress `thread`:
 * the reduction [30, 53], U [53, 58], the step ends with D: 3010. */
START_TEST(worker_progress_post) {
  ck_assert_double_eq_tol(progress_step(2, 2, TSR_MPI_PROGRESS_WORKER), 3038, eps);
  ck_assert_double_eq_tol(progress_step(2, 2, TSR_MPI_PROGRESS_THREAD), 3010, eps);
}
END_TEST

/* Worker 0 idle while the messages fly: A [0, 10], B [10, 30], the rounds [30, 41], sum [41, 42],
 * [42, 53], U [53, 58]: 58 per step in both modes, as with one worker or two. */
START_TEST(worker_progress_idle) {
  for (int w = 1; w <= 2; w++) {
    ck_assert_double_eq_tol(progress_step(0, w, TSR_MPI_PROGRESS_WORKER), 58, eps);
    ck_assert_double_eq_tol(progress_step(0, w, TSR_MPI_PROGRESS_THREAD), 58, eps);
  }
}
END_TEST

/* Ranks taking turns on one core in the replay. One rank of 4 (2 nodes of 2, timeslice_us 40: each
 * round waits 20 us for the turns), one worker; steps 1..3 submitted as
 *   A fwd (10 us; the previous step's updates)   B bwd (20; A)
 *   with cdur > 0: C (cdur; B), a task after B
 *   [group 0 marker, 2000 bytes] U0 update (5; B)   two: [group 1 marker, 2000 bytes] U1 update (5; B)
 * A group's ring: 6 rounds of one 500-byte message (10 + 0.5 us across the node link), the first 3
 * followed by a sum of 0.5 us. */
static const char *turns_trace(int two, double cdur) {
  struct _tsr_tl *tl = _tsr_tl_new(1, 1);
  int prev[3], nprev = 0;
  for (int s = 1; s <= 3; s++) {
    uint64_t q = 6 * (uint64_t)s;
    double t = 10000.0 * s;
    int a = tl->ntasks, b;
    add(tl, q, s, "a", "conv_fwd", t, 10, prev, nprev);
    nprev = 0;
    b = tl->ntasks;
    add(tl, q + 1, s, "b", "conv_bwd", t + 10, 20, &a, 1);
    if (cdur > 0) prev[nprev++] = tl->ntasks, add(tl, q + 2, s, "c", "conv_bwd", t + 30, cdur, &b, 1);
    prev[nprev++] = tl->ntasks;
    add(tl, q + 3, s, "b.weight", "opt_update", t + 3030, 5, &b, 1);
    struct _tsr_gev g0 = {.step = s, .rank = 0, .group = 0, .bytes = 2000, .seq = q + 3};
    ck_assert_int_ge(_tsr_tl_add_group(tl, &g0), 0);
    if (two) {
      prev[nprev++] = tl->ntasks;
      add(tl, q + 4, s, "a.weight", "opt_update", t + 3035, 5, &b, 1);
      struct _tsr_gev g1 = {.step = s, .rank = 0, .group = 1, .bytes = 2000, .seq = q + 4};
      ck_assert_int_ge(_tsr_tl_add_group(tl, &g1), 0);
    }
  }
  return written(tl);
}

static double turns_step(int two, double cdur, double slice) {
  tsr_machine m = hand_machine(2);
  m.workers_per_rank = 1, m.progress = TSR_MPI_PROGRESS_WORKER, m.timeslice_us = slice;
  return predicted_step(turns_trace(two, cdur), &m, 4, -1);
}

/* One group, the worker idle while the messages fly: A [0, 10], B [10, 30]; each round's message
 * arrives 10.5 after its post and is seen 29.5 later (the turns: the rotation, 40, less the wire):
 * 6 x 40 + 3 sums of 0.5 = 241.5, U0 [271.5, 276.5]: 276.5 per step; without turns
 * 30 + 64.5 + 5 = 99.5.
 * Round 0 arriving while C runs (posted at 30, there at 40.5): seen at C's end with no turns to wait
 * for (C's traced time holds them); the 5 other rounds wait. C of 3000 us: 3030 + 5 x 40 + 3 x 0.5
 * + 5 = 3236.5; C of 15 us, ending before the turns would (70): 45 + 200 + 1.5 + 5 = 251.5.
 * Two groups share the turns: group 0's round 0 arrives at 40.5 with the worker idle, so the turns
 * run till 70 and group 0 frees the queue; group 1's round 0 arrives at 51, before they end: both
 * are seen at 70. Group 0 (the older) takes the queue back: sum [70, 70.5], round 1 there at 81,
 * turns till 110.5; group 1 meanwhile: sum [81, 81.5], round 1 at 92, seen at 110.5 too; and so on,
 * each round of both groups in one set of turns: group 0's last round seen at 30 + 6 x 40 + 1.5 =
 * 271.5, group 1's the same moment; U0 [271.5, 276.5], U1 [276.5, 281.5]: 281.5 per step, where one
 * after the other (every round waiting its own turns) would take 276.5 + 241.5 = 518. */
START_TEST(turns_shared_by_groups) {
  ck_assert_double_eq_tol(turns_step(0, 0, 40), 276.5, eps);
  ck_assert_double_eq_tol(turns_step(0, 0, 0), 99.5, eps);
  ck_assert_double_eq_tol(turns_step(0, 3000, 40), 3236.5, eps);
  ck_assert_double_eq_tol(turns_step(0, 15, 40), 251.5, eps);
  ck_assert_double_eq_tol(turns_step(1, 0, 40), 281.5, eps);
}
END_TEST

static Suite *make_scale_suite(void) {
  Suite *s = suite_create("scale");
  TCase *tc = tcase_create("scale");
  tcase_add_test(tc, ring_by_hand);
  tcase_add_test(tc, exchange_rate_by_hand);
  tcase_add_test(tc, timeslice_by_hand);
  tcase_add_test(tc, other_models_by_hand);
  tcase_add_test(tc, rounds_add_up);
  tcase_add_test(tc, machine_files);
  tcase_add_test(tc, replay_by_hand);
  tcase_add_test(tc, dispatch_from_trace);
  tcase_add_test(tc, worker_progress_busy);
  tcase_add_test(tc, worker_progress_post);
  tcase_add_test(tc, worker_progress_idle);
  tcase_add_test(tc, turns_shared_by_groups);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_scale_suite)

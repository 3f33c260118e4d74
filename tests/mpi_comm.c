/* Sub-communicators and the collectives on them, for tests/mpi_comm.sh (under mpirun, any number
 * of ranks). The world is split by colour as MPI_Comm_split does: pairs {0,2},{1,3}; the same
 * pairs with the order reversed by key; neighbours {0,1},{2,3}; and a split some ranks stay out
 * of. Each communicator gets its own buffer of small integers (exact in float32, bf16 and fp16),
 * and every reduction of every communicator is submitted for the same step before any is waited
 * for, so communicators sharing ranks run concurrently with identical group and message numbers:
 * only their tag spaces keep them apart. Each rank then compares its buffers bitwise with a 1-rank
 * computation of the sum over the members of each communicator, for every algorithm (the ring,
 * recursive doubling, the binomial tree, the hierarchical one over nodes of 2 world ranks,
 * recursive halving-doubling, the hierarchical one with halving-doubling across nodes, auto) and
 * wire format, and the bytes it sent with the algorithm's count of messages; hier-rh on a
 * communicator whose nodes differ in size is refused by every member, naming it. Then sums of
 * values that float32 cannot add exactly (check_rounding). Last, a receive whose message arrived
 * before it was posted completes with 0 and the bytes sent (check_early_message). Exit 0: every
 * check held. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <starpu_mpi.h>
#include <tessera.h>

#include "comm/groups.h"
#include "runtime/communicator.h"
#include "runtime/progress.h"

#define NALGOS 7

#define KEEP 16
#define NT 6
#define NCOMM 5
#define NODE 2 /* TESSERA_NODE_SIZE: world ranks [2i, 2i + 2) form a node */

static const size_t sizes[NT] = {37, 100, 3, 64, 250, 20};
static const int layers[NT] = {5, 4, 4, 3, 2, 1}, trainable[NT] = {1, 1, 1, 0, 1, 1};
static int failures;

static void check(int ok, int rank, const char *what) {
  if (!ok) failures++, fprintf(stderr, "rank %d: FAIL: %s\n", rank, what);
}

/* Value i of world rank r's buffer for communicator c: the kept word 257 + r (not a bf16 or fp16
 * value, so a kept word reduced in half precision would show), then integers in [-12, 24]. */
static float value(int c, int r, size_t i) {
  return i < KEEP ? 257.0f + r : (float)((r + 1) * (int)(i % 5) + 3 * c - 12);
}

static size_t padded(size_t n) { return (n + 15) & ~(size_t)15; }

/* The view: KEEP floats, then the trainable tensors padded to 16 floats. */
static size_t make_view(struct _tsr_grad_view *v, struct _tsr_grad_tensor *t, float *buf) {
  size_t off = KEEP;
  for (int i = 0; i < NT; i++) {
    t[i] = (struct _tsr_grad_tensor){.name = "t", .off = trainable[i] ? off : 0, .n = sizes[i], .layer = layers[i],
                                     .trainable = trainable[i]};
    if (trainable[i]) off += padded(sizes[i]);
  }
  *v = (struct _tsr_grad_view){.buf = buf, .keep = KEEP, .ntensors = NT, .tensors = t};
  return off;
}

/* Whole-group messages member me of p sends in recursive doubling: a member beyond the largest
 * power of two p2 hands its values over; the others exchange log2 p2 times and hand the result
 * back to one of those. */
static int rd_messages(int me, int p) {
  int p2 = 1, rounds = 0;
  while (2 * p2 <= p) p2 *= 2, rounds++;
  return me >= p2 ? 1 : rounds + (me < p - p2);
}

/* In a binomial tree member j > 0 has parent j - (lowest set bit of j); each member sends once to
 * its parent in the reduction (the root excepted) and once to each child in the broadcast. */
static int tree_messages(int me, int p) {
  int n = me != 0;
  for (int j = me + 1; j < p; j++) n += j - (j & -j) == me;
  return n;
}

/* Bytes of len floats, `keep` of them float32, in wire format f. */
static int64_t wire(size_t len, size_t keep, int f) { return f == 0 ? 4 * (int64_t)len : 2 * (int64_t)(len + keep); }

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Halving-doubling of len floats (the first `keep` float32) by member me of p: a member beyond
 * the largest power of two p2 sends its vector once; the others send the half they give away in
 * each halving round (halves: the first ceil(len / 2), then the rest; member me keeps the upper one
 * in round l when bit l of me is 1) and the half they keep in the doubling round that retraces it,
 * and the whole result to the member beyond p2 paired with them, if any. */
static int64_t halving_bytes(int me, int p, size_t len, size_t keep, int f) {
  int p2 = 1;
  while (2 * p2 <= p) p2 *= 2;
  if (me >= p2) return wire(len, keep, f);
  int64_t b = me < p - p2 ? wire(len, keep, f) : 0;
  for (int l = 0; 1 << l < p2; l++) {
    size_t lo = (len + 1) / 2, hi = len / 2, klo = min_size(keep, lo), khi = keep - klo;
    b += wire(lo, klo, f) + wire(hi, khi, f);
    if (me >> l & 1) len = hi, keep = khi;
    else len = lo, keep = klo;
  }
  return b;
}

/* The node (world rank / NODE) of member m of c: its index in it, its size, and the nodes of c; 1
 * when every node of c has as many members. */
static int nodes_of(const struct _tsr_comm *c, int m, int *local, int *size, int *nodes) {
  int count[64] = {0};
  *local = *size = *nodes = 0;
  for (int k = 0; k < c->size; k++) {
    int node = c->ranks[k] / NODE;
    *nodes += count[node]++ == 0;
    if (node == c->ranks[m] / NODE) *size += 1, *local += k < m;
  }
  for (int k = 0; k < c->size; k++)
    if (count[c->ranks[k] / NODE] != *size) return 0;
  return 1;
}

/* hier-rh's bytes for group gr by member me of c (nodes of equal size): the float32 ring inside
 * its node (with 2 members: both chunks, the whole group), then the halving-doubling of the chunk
 * it owns ((local + 1) mod size: the ring's chunks of n / size floats, the first n % size one
 * more) among the members of its index in the nodes (in c's order). */
static int64_t hier_rh_bytes(const struct _tsr_comm *c, int me, const struct _tsr_group *gr, int f) {
  int local, size, nodes;
  nodes_of(c, me, &local, &size, &nodes);
  if (size > 2) return -1;
  int64_t b = size == 2 ? 4 * (int64_t)gr->n : 0;
  size_t len = gr->n, keep = gr->keep;
  if (size == 2) {
    size_t c0 = (gr->n + 1) / 2;
    if (local == 0) len = gr->n - c0, keep = gr->keep > c0 ? gr->keep - c0 : 0; /* owns chunk 1 */
    else len = c0, keep = min_size(gr->keep, c0);
  }
  int column = 0, lk, sk, nk; /* my index among the members of my index in their nodes */
  for (int k = 0; k < me; k++) nodes_of(c, k, &lk, &sk, &nk), column += lk == local;
  return b + (nodes > 1 ? halving_bytes(column, nodes, len, keep, f) : 0);
}

/* Bytes member `me` of communicator c sends for the whole buffer of n floats with algorithm a in
 * wire format f (half formats: the kept word as float32), or -1 where the test has no formula. */
static int64_t expected_bytes(const struct _tsr_comm *c, const char *a, int f, size_t n,
                              const struct _tsr_groups *gs) {
  if (!strcmp(a, "rabenseifner") || !strcmp(a, "hier-rh")) {
    int64_t b = 0;
    for (int g = 0; g < gs->n; g++) {
      int64_t one = a[0] == 'r' ? halving_bytes(c->index, c->size, gs->g[g].n, gs->g[g].keep, f)
                                : hier_rh_bytes(c, c->index, &gs->g[g], f);
      if (one < 0) return -1;
      b += one;
    }
    return b;
  }
  int64_t whole = f == 0 ? 4 * (int64_t)n : 2 * (int64_t)(n + KEEP);
  int p = c->size, me = c->index;
  if (!strcmp(a, "rd")) return rd_messages(me, p) * whole;
  if (!strcmp(a, "tree")) return tree_messages(me, p) * whole;
  if (!strcmp(a, "ring") && p == 2) return whole; /* each member sends half of every group twice */
  if (strcmp(a, "hier")) return -1;
  int local = 0, size = 0, nodes = 0; /* the node: members of equal world rank / NODE, in order */
  for (int m = 0; m < p; m++) {
    int mine = c->ranks[m] / NODE == c->ranks[me] / NODE, first = 1;
    for (int k = 0; k < m; k++) first &= c->ranks[k] / NODE != c->ranks[m] / NODE;
    nodes += first, size += mine, local += mine && m < me;
  }
  if (nodes > 2) return -1;
  return tree_messages(local, size) * 4 * (int64_t)n + (local == 0 && nodes == 2 ? whole : 0);
}

static void check_split_order(int rank) {
  int colour[6] = {1, 0, 1, -1, 0, 1}, key[6] = {0, 5, 0, 9, 5, -1}, out[6];
  int n = _tsr_comm_split_order(6, colour, key, 0, out);
  check(n == 3 && out[0] == 5 && out[1] == 0 && out[2] == 2, rank, "split order: by key, then by parent index");
  check(_tsr_comm_split_order(6, colour, key, 3, out) == 0, rank, "split order: a negative colour joins none");
  n = _tsr_comm_split_order(6, colour, key, 4, out);
  check(n == 2 && out[0] == 1 && out[1] == 4, rank, "split order: equal keys keep the parent order");
}

/* Rank 1 sends two messages, A then B; rank 0 receives B first, then A (starpu_mpi_irecv and
 * _tsr_mpi_wait, as the link calibration's streams). StarPU-MPI reads envelopes in the order they
 * were sent, so when B's receive has completed A's envelope has been read with no receive posted for
 * it: A arrives first, whatever the timing, and its receive completes through StarPU-MPI's copy of
 * an early message, where StarPU-MPI 1.3's starpu_mpi_wait returns -1 (issues 13 and 19: the
 * calibration's rank 1 stopped there and rank 0 waited for ever). _tsr_mpi_wait must return 0, and A
 * hold its bytes. */
static void check_early_message(const struct _tsr_comm *world, int rank) {
  if (world->size < 2 || rank > 1) return;
  int64_t tag = _tsr_comm_tag(world, ((int64_t)1 << 42) | 77);
  int a[3] = {11, 12, 13}, b[5] = {21, 22, 23, 24, 25};
  if (rank == 0) memset(a, 0, sizeof a), memset(b, 0, sizeof b);
  starpu_data_handle_t ha, hb;
  starpu_mpi_req ra, rb;
  starpu_vector_data_register(&ha, STARPU_MAIN_RAM, (uintptr_t)a, 3, sizeof *a);
  starpu_vector_data_register(&hb, STARPU_MAIN_RAM, (uintptr_t)b, 5, sizeof *b);
  if (rank == 1) {
    /* both posted before either is waited for: neither send waits for a receive posted after it */
    int reta = starpu_mpi_isend(ha, &ra, 0, tag, MPI_COMM_WORLD),
        retb = starpu_mpi_isend(hb, &rb, 0, tag + 1, MPI_COMM_WORLD);
    check(reta == 0 && retb == 0, rank, "early message: A and B posted");
    if (!reta) _tsr_mpi_wait(&ra);
    if (!retb) _tsr_mpi_wait(&rb);
  } else {
    int ret = starpu_mpi_irecv(hb, &rb, 1, tag + 1, MPI_COMM_WORLD);
    if (!ret) ret = _tsr_mpi_wait(&rb);
    check(ret == 0, rank, "early message: B received");
    ret = starpu_mpi_irecv(ha, &ra, 1, tag, MPI_COMM_WORLD);
    if (!ret) ret = _tsr_mpi_wait(&ra);
    char what[160];
    snprintf(what, sizeof what, "early message: A, arrived before its receive, completes with 0 (got %d)", ret);
    check(ret == 0, rank, what);
  }
  starpu_data_unregister(ha);
  starpu_data_unregister(hb);
  if (rank == 0)
    check(a[0] == 11 && a[1] == 12 && a[2] == 13 && b[0] == 21 && b[4] == 25, rank,
          "early message: A and B hold the bytes sent");
}

/* Value i of world rank r for the rounding check: in (-1.5, 1.5) times 1 .. 7, with all 24 bits of
 * the significand in use, so float32 sums depend on their order. */
static float noisy(int r, size_t i) {
  uint32_t h = (uint32_t)(r * 7919 + 1) * 2654435761u ^ (uint32_t)i * 2246822519u;
  h ^= h >> 15, h *= 2654435761u, h ^= h >> 13;
  return ((float)(h & 0xFFFFFF) / 16777216.0f * 3.0f - 1.5f) * (float)(1 + i % 7);
}

/* Float32 sums over the world of values no order adds exactly, by the ring, recursive doubling,
 * halving-doubling and hier-rh (where the nodes are even): within (p - 1) 2^-24 sum_r |x_r| of the
 * float64 sum (the bound of any order of p - 1 float32 additions), the same bits on every rank
 * (rank 0 receives each rank's result), and halving-doubling bitwise equal to recursive doubling
 * (its tree of sums is recursive doubling's). */
static void check_rounding(const struct _tsr_comm *world, int rank) {
  const char *algos[4] = {"ring", "rd", "rabenseifner", "hier-rh"};
  float *out[4] = {0};
  size_t n = 0;
  int p = world->size, local, size, nodes, even = nodes_of(world, world->index, &local, &size, &nodes);
  for (int a = 0; a < 4; a++) {
    if (p < 2 || (a == 3 && !even)) continue;
    struct _tsr_grad_tensor t[NT];
    struct _tsr_grad_view v;
    struct _tsr_groups gs;
    memset(&gs, 0, sizeof gs);
    out[a] = calloc(1024, sizeof(float));
    n = make_view(&v, t, out[a]);
    for (size_t i = 0; i < n; i++) out[a][i] = noisy(rank, i);
    gs.algo = algos[a];
    if (_tsr_groups_build(&gs, &v, world, 512, "f32", NULL) || _tsr_groups_start(&gs)) {
      fprintf(stderr, "rank %d: groups: %s\n", rank, tsr_last_error());
      failures++;
      return;
    }
    for (int g = 0; g < gs.n; g++) check(_tsr_group_allreduce(&gs, g, 9) == 0, rank, "rounding: posted");
    starpu_task_wait_for_all();
    _tsr_groups_destroy(&gs);
    int within = 1, same = 1;
    for (size_t i = 0; i < n; i++) {
      double sum = 0, mag = 0;
      for (int r = 0; r < p; r++) sum += (double)noisy(r, i), mag += fabs((double)noisy(r, i));
      within &= fabs((double)out[a][i] - sum) <= (p - 1) * 0x1p-24 * mag;
    }
    float *theirs = malloc(n * sizeof(float));
    for (int r = 1; theirs && r < p; r++) { /* each rank's result to rank 0 */
      int64_t tag = _tsr_comm_tag(world, ((int64_t)1 << 42) + 16 * a + r);
      if (rank == r) check(_tsr_comm_xfer(out[a], n * sizeof(float), 0, 1, tag) == 0, rank, "rounding: sent");
      if (rank == 0) {
        check(_tsr_comm_xfer(theirs, n * sizeof(float), r, 0, tag) == 0, rank, "rounding: received");
        same &= memcmp(theirs, out[a], n * sizeof(float)) == 0;
      }
    }
    free(theirs);
    char what[200];
    snprintf(what, sizeof what, "rounding, %s over %d ranks: within (p - 1) 2^-24 sum |x| of the float64 sum",
             algos[a], p);
    check(within, rank, what);
    snprintf(what, sizeof what, "rounding, %s over %d ranks: the same bits on every rank", algos[a], p);
    check(same, rank, what);
  }
  if (out[1] && out[2])
    check(memcmp(out[1], out[2], n * sizeof(float)) == 0, rank, "rounding: rabenseifner bitwise equal to rd");
  if (p >= 3 && out[0] && out[1])
    check(memcmp(out[0], out[1], n * sizeof(float)) != 0, rank, "rounding: the values do depend on the order of sums");
  for (int a = 0; a < 4; a++) free(out[a]);
}

int main(int argc, char **argv) {
  setenv("TESSERA_NODE_SIZE", "2", 1); /* NODE */
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.deterministic = 1, co.verbose = 0;
  tsr_context *ctx;
  if (tsr_context_create(&ctx, &co, &argc, &argv)) return fprintf(stderr, "context: %s\n", tsr_last_error()), 2;
  int rank = tsr_context_rank(ctx), size = tsr_context_size(ctx);
  check_split_order(rank);

  struct _tsr_comm comm[NCOMM];
  const char *label[NCOMM] = {"world", "pairs {0,2},{1,3}", "pairs reversed by key", "neighbours {0,1},{2,3}",
                              "ranks >= 2 only"};
  int ok = _tsr_comm_world(&comm[0], rank, size) == TSR_OK;
  ok = ok && _tsr_comm_split(&comm[0], rank % 2, rank, &comm[1]) == TSR_OK;
  ok = ok && _tsr_comm_split(&comm[0], rank % 2, -rank, &comm[2]) == TSR_OK;
  ok = ok && _tsr_comm_split(&comm[0], rank / 2, 0, &comm[3]) == TSR_OK;
  ok = ok && _tsr_comm_split(&comm[0], rank >= 2 ? 7 : -1, 0, &comm[4]) == TSR_OK;
  if (!ok) return fprintf(stderr, "rank %d: split: %s\n", rank, tsr_last_error()), 2;

  /* membership as MPI_Comm_split gives it */
  int mine = (size - 1 - rank % 2) / 2 + 1; /* ranks of my parity */
  check(comm[1].size == mine && comm[1].ranks[comm[1].index] == rank && comm[1].ranks[0] == rank % 2, rank,
        "pairs: members of my parity in rank order");
  check(comm[2].size == mine && comm[2].ranks[comm[2].index] == rank && comm[2].ranks[mine - 1] == rank % 2, rank,
        "pairs reversed: the lowest rank last");
  check(rank >= 2 ? comm[4].index == rank - 2 : comm[4].size == 0 && comm[4].index == -1, rank,
        "a negative colour joins no communicator");
  for (int a = 0; a < NCOMM; a++)
    for (int b = a + 1; b < NCOMM; b++)
      check(comm[a].id != comm[b].id, rank, "communicators of one process have distinct tag spaces");

  const char *names[3] = {"f32", "bf16", "fp16"},
             *algos[NALGOS] = {"ring", "rd", "tree", "hier", "rabenseifner", "hier-rh", "auto"};
  for (int a = 0; a < NALGOS; a++)
    for (int f = 0; f < 3; f++) {
      struct _tsr_groups gs[NCOMM];
      struct _tsr_grad_tensor t[NCOMM][NT];
      float *buf[NCOMM];
      size_t n = 0;
      int refused[NCOMM] = {0};
      memset(gs, 0, sizeof gs);
      for (int c = 0; c < NCOMM; c++) {
        if (comm[c].size == 0) continue;
        struct _tsr_grad_view v;
        buf[c] = calloc(1024, sizeof(float));
        n = make_view(&v, t[c], buf[c]);
        for (size_t i = 0; i < n; i++) buf[c][i] = value(c, rank, i);
        gs[c].algo = algos[a];
        if (_tsr_groups_build(&gs[c], &v, &comm[c], 512, names[f], NULL))
          return fprintf(stderr, "rank %d: groups: %s\n", rank, tsr_last_error()), 2;
        int local, size, nodes, even = nodes_of(&comm[c], comm[c].index, &local, &size, &nodes);
        tsr_status st = _tsr_groups_start(&gs[c]);
        if (!strcmp(algos[a], "hier-rh") && !even && comm[c].size > 1) { /* nodes {0,1} and {2} */
          check(st != TSR_OK && strstr(tsr_last_error(), "hier-rh") && strstr(tsr_last_error(), "same number"), rank,
                "hier-rh on nodes of unequal size: refused, naming it");
          refused[c] = 1;
          continue;
        }
        if (st != TSR_OK) return fprintf(stderr, "rank %d: groups: %s\n", rank, tsr_last_error()), 2;
        check(gs[c].n >= 3, rank, "several gradient groups");
      }
      for (int c = 0; c < NCOMM; c++) /* all at once, all for step 5 */
        for (int g = 0; comm[c].size && !refused[c] && g < gs[c].n; g++)
          if (_tsr_group_allreduce(&gs[c], g, 5)) return fprintf(stderr, "rank %d: %s\n", rank, tsr_last_error()), 2;
      starpu_task_wait_for_all();
      for (int c = 0; c < NCOMM; c++) {
        if (comm[c].size == 0) continue;
        if (refused[c]) {
          _tsr_groups_destroy(&gs[c]);
          free(buf[c]);
          continue;
        }
        int64_t bytes = gs[c].bytes, want = comm[c].size > 1 ? expected_bytes(&comm[c], algos[a], f, n, &gs[c]) : 0;
        _tsr_groups_destroy(&gs[c]); /* the data back home */
        int same = 1;
        for (size_t i = 0; i < n; i++) {
          float sum = 0;
          for (int m = 0; m < comm[c].size; m++) sum += value(c, comm[c].ranks[m], i);
          same &= memcmp(&sum, &buf[c][i], sizeof sum) == 0;
        }
        char what[200];
        snprintf(what, sizeof what, "%s, %s by %s: the sum over its %d member(s) only, bitwise", label[c], names[f],
                 algos[a], comm[c].size);
        check(same, rank, what);
        snprintf(what, sizeof what, "%s, %s by %s: %lld bytes sent, the algorithm's count is %lld", label[c],
                 names[f], algos[a], (long long)bytes, (long long)want);
        check(want < 0 || bytes == want, rank, what);
        free(buf[c]);
      }
    }
  check_rounding(&comm[0], rank);
  check_early_message(&comm[0], rank);
  for (int c = 0; c < NCOMM; c++) _tsr_comm_free(&comm[c]);
  tsr_context_destroy(ctx);
  if (failures == 0) printf("rank %d of %d: every check held\n", rank, size);
  return failures != 0;
}

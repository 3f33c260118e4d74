/* Sub-communicators and the collectives on them, for tests/mpi_comm.sh (under mpirun, any number
 * of ranks). The world is split by colour as MPI_Comm_split does: pairs {0,2},{1,3}; the same
 * pairs with the order reversed by key; neighbours {0,1},{2,3}; and a split some ranks stay out
 * of. Each communicator gets its own buffer of small integers (exact in float32, bf16 and fp16),
 * and every reduction of every communicator is submitted for the same step before any is waited
 * for, so communicators sharing ranks run concurrently with identical group and message numbers:
 * only their tag spaces keep them apart. Each rank then compares its buffers bitwise with a 1-rank
 * computation of the sum over the members of each communicator, for every algorithm (the ring,
 * recursive doubling, the binomial tree, the hierarchical one over nodes of 2 world ranks, auto)
 * and wire format, and the bytes it sent with the algorithm's count of whole-group messages. Exit
 * 0: every check held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>

#include "comm/groups.h"
#include "runtime/communicator.h"

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

/* Bytes member `me` of communicator c sends for the whole buffer of n floats with algorithm a in
 * wire format f (half formats: the kept word as float32), or -1 where the test has no formula. */
static int64_t expected_bytes(const struct _tsr_comm *c, const char *a, int f, size_t n) {
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

  const char *names[3] = {"f32", "bf16", "fp16"}, *algos[5] = {"ring", "rd", "tree", "hier", "auto"};
  for (int a = 0; a < 5; a++)
    for (int f = 0; f < 3; f++) {
      struct _tsr_groups gs[NCOMM];
      struct _tsr_grad_tensor t[NCOMM][NT];
      float *buf[NCOMM];
      size_t n = 0;
      memset(gs, 0, sizeof gs);
      for (int c = 0; c < NCOMM; c++) {
        if (comm[c].size == 0) continue;
        struct _tsr_grad_view v;
        buf[c] = calloc(1024, sizeof(float));
        n = make_view(&v, t[c], buf[c]);
        for (size_t i = 0; i < n; i++) buf[c][i] = value(c, rank, i);
        gs[c].algo = algos[a];
        if (_tsr_groups_build(&gs[c], &v, &comm[c], 512, names[f], NULL) || _tsr_groups_start(&gs[c]))
          return fprintf(stderr, "rank %d: groups: %s\n", rank, tsr_last_error()), 2;
        check(gs[c].n >= 3, rank, "several gradient groups");
      }
      for (int c = 0; c < NCOMM; c++) /* all at once, all for step 5 */
        for (int g = 0; comm[c].size && g < gs[c].n; g++)
          if (_tsr_group_allreduce(&gs[c], g, 5)) return fprintf(stderr, "rank %d: %s\n", rank, tsr_last_error()), 2;
      starpu_task_wait_for_all();
      for (int c = 0; c < NCOMM; c++) {
        if (comm[c].size == 0) continue;
        int64_t bytes = gs[c].bytes, want = comm[c].size > 1 ? expected_bytes(&comm[c], algos[a], f, n) : 0;
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
  for (int c = 0; c < NCOMM; c++) _tsr_comm_free(&comm[c]);
  tsr_context_destroy(ctx);
  if (failures == 0) printf("rank %d of %d: every check held\n", rank, size);
  return failures != 0;
}

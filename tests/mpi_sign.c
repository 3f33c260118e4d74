/* The sign reductions on their own, for tests/mpi_sign.sh (under mpirun, any number of ranks): each
 * rank fills a gradient-buffer view with its own directions in {-1, 0, 1} (zeros and, at even rank
 * counts, ties included) and a control word 257 + rank, and reduces every group with sign1, signp and
 * signp_mean. The directions of every rank are a function of (rank, index), so each rank computes the
 * reference from all ranks' directions itself (the gather a debug mode would do) and compares bitwise:
 * sign1 the 1-bit majority (with value i's coin c at the step: a 0 votes -c, a tie gives c), signp
 * sign(sum) (0 on a tie), signp_mean
 * sum / N. The control word must sum exactly, and the bytes counted must equal the formula:
 *   sign1: sum over the other members' chunks of ceil(len/8) + (N - 1) ceil(len_own/8)
 *   signp: sum over the 2 (N - 1) ring sends of ceil(len p / 8), p = ceil(log2(2N + 1))
 * plus (N - 1) * 64 bytes of control word for group 0. Exit 0: every check held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>

#include "comm/groups.h"
#include "runtime/communicator.h"
#include "sign_wire.h"

#define KEEP 16
#define NT 6

static const size_t sizes[NT] = {37, 100, 3, 64, 251, 21};
static const int layers[NT] = {5, 4, 4, 3, 2, 1}, trainable[NT] = {1, 1, 1, 0, 1, 1};
static int failures;

static void check(int ok, int rank, const char *what) {
  if (!ok) failures++, fprintf(stderr, "rank %d: FAIL: %s\n", rank, what);
}

/* Rank r's direction i: about a third each of -1, 0 and +1, different on every rank. */
static float value(int r, size_t i) {
  if (i < KEEP) return 257.0f + r;
  uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + 17u);
  h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
  return (float)((int)(h % 3) - 1);
}

#define STEP 3

static float reference(const char *name, int nranks, size_t i) {
  if (i < KEEP) {
    float s = 0;
    for (int r = 0; r < nranks; r++) s += value(r, i);
    return s;
  }
  int sum = 0, set = 0, c = _tsr_sign_coin(i, STEP);
  for (int r = 0; r < nranks; r++) sum += (int)value(r, i), set += value(r, i) != 0 ? value(r, i) > 0 : c < 0;
  if (!strcmp(name, "sign1")) return 2 * set > nranks ? 1.0f : 2 * set < nranks ? -1.0f : (float)c;
  if (!strcmp(name, "signp")) return (float)((sum > 0) - (sum < 0));
  return (float)sum / (float)nranks;
}

static size_t padded(size_t n) { return (n + 15) & ~(size_t)15; }

/* The formula of the header, from the groups' sizes. */
static int64_t formula(const struct _tsr_groups *gs, int one_bit) {
  int r = gs->comm->size, me = gs->comm->index, p = one_bit ? 1 : _tsr_sign_bits(r);
  int64_t b = 0;
  for (int g = 0; g < gs->n; g++) {
    size_t len = gs->g[g].n - gs->g[g].keep;
    size_t own = _tsr_packed_bytes(len / r + ((size_t)me < len % r), p), all = 0;
    for (int c = 0; c < r; c++) all += _tsr_packed_bytes(len / r + ((size_t)c < len % r), p);
    if (one_bit)
      b += (int64_t)(all - own) + (int64_t)(r - 1) * own;
    else
      for (int k = 0; k < r - 1; k++) {
        int s1 = ((me - k) % r + r) % r, s2 = ((me + 1 - k) % r + r) % r;
        b += (int64_t)_tsr_packed_bytes(len / r + ((size_t)s1 < len % r), p) +
             (int64_t)_tsr_packed_bytes(len / r + ((size_t)s2 < len % r), p);
      }
    if (gs->g[g].keep) b += (int64_t)(r - 1) * (int64_t)(gs->g[g].keep * sizeof(float));
  }
  return b;
}

int main(int argc, char **argv) {
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.deterministic = 1, co.verbose = 0;
  tsr_context *ctx;
  if (tsr_context_create(&ctx, &co, &argc, &argv)) return fprintf(stderr, "context: %s\n", tsr_last_error()), 2;
  int rank = tsr_context_rank(ctx), size = tsr_context_size(ctx);
  struct _tsr_comm world;
  if (_tsr_comm_world(&world, rank, size)) return fprintf(stderr, "world: %s\n", tsr_last_error()), 2;
  const char *names[3] = {"sign1", "signp", "signp_mean"};
  for (int f = 0; f < 3; f++) {
    struct _tsr_grad_tensor t[NT];
    float *buf = calloc(1024, sizeof(float));
    size_t off = KEEP;
    for (int i = 0; i < NT; i++) {
      t[i] = (struct _tsr_grad_tensor){
          .name = "t", .off = trainable[i] ? off : 0, .n = sizes[i], .layer = layers[i], .trainable = trainable[i]};
      if (trainable[i]) off += padded(sizes[i]);
    }
    struct _tsr_grad_view v = {.buf = buf, .keep = KEEP, .ntensors = NT, .tensors = t};
    for (size_t i = 0; i < off; i++) buf[i] = value(rank, i);
    struct _tsr_groups gs;
    memset(&gs, 0, sizeof gs);
    if (_tsr_groups_build(&gs, &v, &world, 512, names[f], NULL) || _tsr_groups_start(&gs))
      return fprintf(stderr, "rank %d: groups: %s\n", rank, tsr_last_error()), 2;
    check(gs.n >= 3, rank, "several groups");
    for (int g = 0; g < gs.n; g++)
      if (_tsr_group_allreduce(&gs, g, STEP)) return fprintf(stderr, "rank %d: %s\n", rank, tsr_last_error()), 2;
    starpu_task_wait_for_all();
    int64_t want_bytes = size > 1 ? formula(&gs, f == 0) : 0, bytes = gs.bytes;
    _tsr_groups_destroy(&gs);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < off; i++) {
      float want = size > 1 ? reference(names[f], size, i) : value(rank, i);
      if (memcmp(&want, &buf[i], sizeof want) != 0 && bad++ == 0) first = i;
    }
    char what[200];
    snprintf(what, sizeof what,
             "%s: %zu of %zu values differ from the reference of all ranks' directions (first %zu: "
             "%g vs %g)",
             names[f], bad, off, first, buf[first], size > 1 ? reference(names[f], size, first) : 0.0);
    check(bad == 0, rank, what);
    snprintf(what, sizeof what, "%s: %lld bytes counted, the formula says %lld", names[f], (long long)bytes,
             (long long)want_bytes);
    check(bytes == want_bytes, rank, what);
    free(buf);
  }
  _tsr_comm_free(&world);
  tsr_context_destroy(ctx);
  if (failures == 0) printf("rank %d of %d: every check held\n", rank, size);
  return failures != 0;
}

/* Sign reductions (Lion Cub, Ishikawa et al., arXiv 2411.16462): the ranks combine update directions
 * in {-1, 0, 1} (each rank's optimizer wrote its own into the gradient buffer) instead of summing
 * gradients. Three entries of the collective table:
 *   sign1:      majority vote in 1-bit messages. Each member packs the chunks the others own and
 *               sends each to its owner (a 1-bit reduce-scatter), the owner votes on its chunk, then
 *               sends the voted bits to every other member (a 1-bit allgather). One bit cannot carry
 *               0: every value has a coin c in {-1, +1} drawn from (its index in the gradient
 *               buffer, the step), the same on every member without a message (_tsr_sign_coin); a
 *               direction 0 votes -c and a tie (an even split) gives c. Every member ends with the
 *               same directions in {-1, +1}, and neither sign is favoured.
 *   signp:      a ring on p-bit partial sums, p = ceil(log2(2N + 1)) for N members, so a sum of N
 *               directions cannot overflow: the owner of a chunk turns its exact sum into the vote
 *               sign(sum) (0 on a tie, and when every direction is 0) and passes the sums on.
 *   signp_mean: the same ring; the result is the exact average sum / N.
 * The control word (group 0's kept floats) goes to every member in float32 and is summed in member
 * order, so it stays exact. Tags are unique per (communicator, step, group, phase). */
#include <stdlib.h>
#include <starpu_mpi.h>

#include "comm/collective.h"
#include "comm/groups.h"
#include "runtime/communicator.h"
#include "runtime/error.h"
#include "runtime/submit.h"
#include "sign_wire.h"
#include "trace/trace.h"

#define ONE_BIT (-1) /* variant of sign1; the p-bit ones carry their _tsr_sign_mode */

/* A group's parts (the kept word in group 0, then one chunk per member) and their wire buffers. */
struct sign {
  int r, lead, p;              /* members; 1 when the kept word leads the group; bits per value */
  starpu_data_handle_t *parts; /* lead + r children of the group's handle */
  uint32_t *part_len;
  starpu_data_handle_t *tx, *rx; /* per chunk: packed send and receive buffers */
  void **txbuf, **rxbuf;
  size_t *packed;             /* bytes of chunk c packed */
  uint64_t *base;             /* chunk c's first value's index in the gradient buffer (the coins') */
  starpu_data_handle_t *word; /* the other members' control words (group 0) */
  float **wordbuf;
};

static int variant_bits(int variant, int r) { return variant == ONE_BIT ? 1 : _tsr_sign_bits(r); }

static tsr_status check(const struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++)
    if (gs->g[g].n - gs->g[g].keep < (size_t)gs->comm->size)
      return _tsr_error(TSR_ERR_ARG, "gradient group %d has %zu values, fewer than the %d ranks", g,
                        gs->g[g].n - gs->g[g].keep, gs->comm->size);
  return TSR_OK;
}

static starpu_data_handle_t register_bytes(void **buf, size_t n) {
  starpu_data_handle_t h = NULL;
  if ((*buf = malloc(n ? n : 1))) starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)*buf, (uint32_t)n, 1);
  return h;
}

static int setup_group(struct _tsr_group *g, int r, int me, int p) {
  struct sign *q = calloc(1, sizeof *q);
  if (!q) return -1;
  g->priv = q;
  q->r = r, q->lead = g->keep > 0, q->p = p;
  int np = q->lead + r;
  q->parts = calloc(np, sizeof *q->parts);
  q->part_len = calloc(np, sizeof *q->part_len);
  q->tx = calloc(r, sizeof *q->tx), q->rx = calloc(r, sizeof *q->rx);
  q->txbuf = calloc(r, sizeof *q->txbuf), q->rxbuf = calloc(r, sizeof *q->rxbuf);
  q->packed = calloc(r, sizeof *q->packed), q->base = calloc(r, sizeof *q->base);
  q->word = calloc(r, sizeof *q->word), q->wordbuf = calloc(r, sizeof *q->wordbuf);
  if (!q->parts || !q->part_len || !q->tx || !q->rx || !q->txbuf || !q->rxbuf || !q->packed || !q->base || !q->word ||
      !q->wordbuf)
    return -1;
  size_t len = g->n - g->keep;
  if (q->lead) q->part_len[0] = (uint32_t)g->keep;
  for (int c = 0; c < r; c++) {
    q->part_len[q->lead + c] = (uint32_t)(len / r + ((size_t)c < len % r));
    q->packed[c] = _tsr_packed_bytes(q->part_len[q->lead + c], p);
    q->base[c] = c ? q->base[c - 1] + q->part_len[q->lead + c - 1] : g->off + g->keep;
  }
  for (int c = 0; c < r; c++) {
    /* 1-bit: rx[c] receives member c's bits of the chunk this member owns; the ring: chunk c */
    q->tx[c] = register_bytes(&q->txbuf[c], q->packed[c]);
    q->rx[c] = register_bytes(&q->rxbuf[c], q->packed[p == 1 ? me : c]);
    if (!q->tx[c] || !q->rx[c]) return -1;
    if (!q->lead) continue;
    if (!(q->wordbuf[c] = malloc(g->keep * sizeof(float)))) return -1;
    q->word[c] = _tsr_register_floats(q->wordbuf[c], g->keep);
  }
  struct starpu_data_filter f = {
      .filter_func = starpu_vector_filter_list, .nchildren = (unsigned)np, .filter_arg_ptr = q->part_len};
  starpu_data_partition_plan(g->h, &f, q->parts);
  return 0;
}

static tsr_status setup(struct _tsr_groups *gs) {
  int p = variant_bits(gs->ops->variant, gs->comm->size);
  for (int g = 0; g < gs->n; g++)
    if (setup_group(&gs->g[g], gs->comm->size, gs->comm->index, p) != 0)
      return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory for the gradient group of %zu floats", gs->g[g].n);
  return TSR_OK;
}

static void teardown(struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++) {
    struct sign *q = gs->g[g].priv;
    if (!q) continue;
    if (q->parts && q->parts[0]) starpu_data_partition_clean(gs->g[g].h, q->lead + q->r, q->parts);
    for (int c = 0; q->tx && q->rx && q->word && c < q->r; c++) {
      if (q->tx[c]) starpu_data_unregister(q->tx[c]);
      if (q->rx[c]) starpu_data_unregister(q->rx[c]);
      if (q->word[c]) starpu_data_unregister(q->word[c]);
      free(q->txbuf[c]), free(q->rxbuf[c]), free(q->wordbuf[c]);
    }
    free(q->parts), free(q->part_len), free(q->tx), free(q->rx), free(q->txbuf), free(q->rxbuf), free(q->packed);
    free(q->base), free(q->word), free(q->wordbuf), free(q);
    gs->g[g].priv = NULL;
  }
}

static int send_to(const struct _tsr_comm *cm, starpu_data_handle_t h, int peer, int64_t tag, int64_t step) {
  void *a = _tsr_trace_xfer_arg(step, cm->ranks[peer], starpu_data_get_size(h), tag, 1);
  return starpu_mpi_isend_detached_prio(h, cm->ranks[peer], tag, STARPU_MAX_PRIO, MPI_COMM_WORLD,
                                        a ? _tsr_trace_xfer_done : NULL, a);
}

static int recv_from(const struct _tsr_comm *cm, starpu_data_handle_t h, int peer, int64_t tag, int64_t step) {
  void *a = _tsr_trace_xfer_arg(step, cm->ranks[peer], starpu_data_get_size(h), tag, 0);
  return starpu_mpi_irecv_detached(h, cm->ranks[peer], tag, MPI_COMM_WORLD, a ? _tsr_trace_xfer_done : NULL, a);
}

/* Unique per (communicator, step, group, phase) among messages in flight; phases < 2048. */
static int64_t tag_of(const struct _tsr_comm *cm, int64_t step, int g, int phase) {
  return _tsr_comm_tag(cm, ((((int64_t)(step & 0xFFFFF)) * 4096 + g) * 2048) + phase);
}
#define WORD_PHASE 2047

static int mod(int a, int r) { return (a % r + r) % r; }

static int64_t wire_bytes(const struct _tsr_groups *gs, int g) {
  const struct sign *q = gs->g[g].priv;
  int r = q->r, me = gs->comm->index;
  int64_t b = (int64_t)q->lead * (r - 1) * (int64_t)(gs->g[g].keep * sizeof(float));
  for (int k = 0; k < r - 1; k++) /* each member sends r - 1 chunks in each phase */
    b += gs->ops->variant == ONE_BIT ? (int64_t)(q->packed[mod(me + 1 + k, r)] + q->packed[me])
                                     : (int64_t)(q->packed[mod(me - k, r)] + q->packed[mod(me + 1 - k, r)]);
  return b;
}

/* The control word to every other member, summed in member order. */
static int word_sum(const struct _tsr_comm *cm, struct sign *q, int g, int64_t step) {
  int r = q->r, me = cm->index, ret = 0, n = 0;
  starpu_data_handle_t in[r];
  for (int c = 0; !ret && c < r; c++) {
    if (c == me) continue;
    ret = send_to(cm, q->parts[0], c, tag_of(cm, step, g, WORD_PHASE), step);
    if (!ret) ret = recv_from(cm, q->word[c], c, tag_of(cm, step, g, WORD_PHASE), step);
    in[n++] = q->word[c];
  }
  return ret ? ret : _tsr_insert_sum_ordered(q->parts[0], n, in, me, STARPU_MAX_PRIO);
}

/* 1-bit: member c owns chunk c. */
static int vote_1bit(const struct _tsr_comm *cm, struct sign *q, int g, int64_t step) {
  int r = q->r, me = cm->index, prio = STARPU_MAX_PRIO, ret = 0, n = 0;
  starpu_data_handle_t *chunk = q->parts + q->lead, in[r];
  for (int k = 1; !ret && k < r; k++) { /* starting at the next member spreads the load */
    int c = mod(me + k, r);
    ret = _tsr_insert_sign_pack1(chunk[c], q->tx[c], q->base[c], step, prio);
    if (!ret) ret = send_to(cm, q->tx[c], c, tag_of(cm, step, g, 0), step);
  }
  for (int k = 1; !ret && k < r; k++) {
    int c = mod(me - k, r);
    ret = recv_from(cm, q->rx[c], c, tag_of(cm, step, g, 0), step);
    in[n++] = q->rx[c];
  }
  if (!ret) ret = _tsr_insert_sign_vote1(chunk[me], q->tx[me], q->base[me], step, n, in, prio);
  for (int k = 1; !ret && k < r; k++) {
    int c = mod(me + k, r), from = mod(me - k, r);
    ret = send_to(cm, q->tx[me], c, tag_of(cm, step, g, 1), step);
    if (!ret) ret = recv_from(cm, q->tx[from], from, tag_of(cm, step, g, 1), step); /* sent in phase 0 */
    if (!ret) ret = _tsr_insert_sign_unpack1(chunk[from], q->tx[from], prio);
  }
  return ret;
}

/* p-bit ring: after the reduce-scatter this member holds the exact sum of chunk me + 1, finishes it
 * (vote or mean) as it packs it, and the sums travel on unchanged. */
static int ring_pbit(const struct _tsr_comm *cm, struct sign *q, enum _tsr_sign_mode mode, int g, int64_t step) {
  int r = q->r, me = cm->index, next = mod(me + 1, r), prev = mod(me - 1, r), prio = STARPU_MAX_PRIO, ret = 0;
  starpu_data_handle_t *chunk = q->parts + q->lead;
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = mod(me - k, r), recv = mod(me - k - 1, r);
    ret = _tsr_insert_sign_packp(chunk[send], q->tx[send], q->p, r, TSR_SIGN_ADD, prio);
    if (!ret) ret = send_to(cm, q->tx[send], next, tag_of(cm, step, g, k), step);
    if (!ret) ret = recv_from(cm, q->rx[recv], prev, tag_of(cm, step, g, k), step);
    if (!ret) ret = _tsr_insert_sign_unpackp(chunk[recv], q->rx[recv], q->p, r, TSR_SIGN_ADD, prio);
  }
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = mod(me + 1 - k, r), recv = mod(me - k, r);
    int64_t tag = tag_of(cm, step, g, r - 1 + k);
    if (k == 0) {
      ret = _tsr_insert_sign_packp(chunk[send], q->tx[send], q->p, r, mode, prio);
      if (!ret) ret = send_to(cm, q->tx[send], next, tag, step);
    } else {
      ret = send_to(cm, q->rx[send], next, tag, step); /* received in round k - 1 */
    }
    if (!ret) ret = recv_from(cm, q->rx[recv], prev, tag, step);
    if (!ret) ret = _tsr_insert_sign_unpackp(chunk[recv], q->rx[recv], q->p, r, mode, prio);
  }
  return ret;
}

static int submit(struct _tsr_groups *gs, int g, int64_t step) {
  struct _tsr_group *gr = &gs->g[g];
  struct sign *q = gr->priv;
  starpu_data_unpartition_submit(gr->h, gr->nchild, gr->tensors, STARPU_MAIN_RAM);
  starpu_data_partition_submit(gr->h, q->lead + q->r, q->parts);
  int ret = q->lead ? word_sum(gs->comm, q, g, step) : 0;
  if (!ret)
    ret = gs->ops->variant == ONE_BIT ? vote_1bit(gs->comm, q, g, step)
                                      : ring_pbit(gs->comm, q, gs->ops->variant, g, step);
  starpu_data_unpartition_submit(gr->h, q->lead + q->r, q->parts, STARPU_MAIN_RAM);
  starpu_data_partition_submit(gr->h, gr->nchild, gr->tensors);
  if (ret)
    _tsr_error(TSR_ERR_RUNTIME, "gradient group %d, step %lld: posting the sign reduction failed (%d)", g,
               (long long)step, ret);
  return ret;
}

#define SIGN(name_, variant_)                                                                                          \
  {                                                                                                                    \
    .name = name_, .impl = "sign", .variant = variant_, .signs = 1, .check = check, .setup = setup,                    \
    .teardown = teardown, .submit = submit, .wire_bytes = wire_bytes                                                   \
  }
const struct _tsr_collective_ops _tsr_sign_1bit = SIGN("sign1", ONE_BIT);
const struct _tsr_collective_ops _tsr_sign_pbit = SIGN("signp", TSR_SIGN_VOTE);
const struct _tsr_collective_ops _tsr_sign_pbit_mean = SIGN("signp_mean", TSR_SIGN_MEAN);

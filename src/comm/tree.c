/* The latency-oriented allreduces: whole-group messages instead of the ring's 2 (p - 1) chunks.
 * "tree": a binomial-tree sum to the first member, then a binomial-tree broadcast (2 ceil(log2 p)
 * rounds); "rd": recursive doubling, partners at distance 1, 2, 4, ... exchange and add (log2 p
 * rounds), where the members beyond the largest power of two first hand their values to a partner
 * and get the result back at the end (2 rounds more). Both for float32, bf16 and fp16 wire formats;
 * the tree's helpers (tree.h) also serve the hierarchical allreduce inside a node. Every rank ends
 * with the same bits: the tree's root computes the sum alone, and recursive-doubling partners add
 * the same two values (in half formats each first rounds its own values to what it sends). */
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "comm/collective.h"
#include "comm/groups.h"
#include "comm/net.h"
#include "comm/p2p.h"
#include "comm/ring.h"
#include "comm/tree.h"
#include "convert.h"
#include "runtime/communicator.h"
#include "runtime/error.h"
#include "runtime/submit.h"

#define PRIO STARPU_MAX_PRIO
#define BCAST_K 64 /* message numbers of the broadcast: after the reduction's */

int _tsr_hops_init(struct _tsr_hops *b, size_t n, size_t keep, int fmt, int rounds) {
  memset(b, 0, sizeof *b);
  b->fmt = fmt, b->rounds = rounds, b->n = n, b->keep = keep;
  b->tmp = calloc(rounds, sizeof *b->tmp);
  b->tmpbuf = calloc(rounds, sizeof *b->tmpbuf);
  if (!b->tmp || !b->tmpbuf) return -1;
  size_t halves = n + keep; /* the kept floats travel as two halves each */
  for (int r = 0; r < rounds; r++) {
    if (fmt == TSR_WIRE_F32) {
      if (!(b->tmpbuf[r] = malloc((n + 1) * sizeof(float)))) return -1;
      b->tmp[r] = _tsr_register_floats(b->tmpbuf[r], n);
      continue;
    }
    if (!(b->tmpbuf[r] = malloc((halves + 2) * sizeof(uint16_t)))) return -1;
    starpu_vector_data_register(&b->tmp[r], STARPU_MAIN_RAM, (uintptr_t)b->tmpbuf[r], (uint32_t)halves,
                                sizeof(uint16_t));
  }
  if (fmt != TSR_WIRE_F32) {
    if (!(b->wirebuf = malloc((halves + 2) * sizeof(uint16_t)))) return -1;
    starpu_vector_data_register(&b->wire, STARPU_MAIN_RAM, (uintptr_t)b->wirebuf, (uint32_t)halves, sizeof(uint16_t));
  }
  return 0;
}

void _tsr_hops_free(struct _tsr_hops *b) {
  for (int r = 0; b->tmp && b->tmpbuf && r < b->rounds; r++) {
    if (b->tmp[r]) starpu_data_unregister(b->tmp[r]);
    free(b->tmpbuf[r]);
  }
  if (b->wire) starpu_data_unregister(b->wire);
  free(b->tmp), free(b->tmpbuf), free(b->wirebuf);
  memset(b, 0, sizeof *b);
}

int _tsr_tree_depth(int p) {
  int d = 0;
  while (1 << d < p) d++;
  return d;
}

int _tsr_hops_send(const struct _tsr_comm *cm, starpu_data_handle_t x, struct _tsr_hops *b, int peer, int64_t tag,
                     int64_t step, int round_own) {
  if (b->fmt == TSR_WIRE_F32) return _tsr_p2p_send(cm, x, peer, tag, step);
  int ret = _tsr_insert_wire_pack(x, b->wire, b->fmt, b->keep, round_own, PRIO);
  return ret ? ret : _tsr_p2p_send(cm, b->wire, peer, tag, step);
}

int _tsr_hops_recv_add(const struct _tsr_comm *cm, starpu_data_handle_t x, struct _tsr_hops *b, int r, int peer,
                    int64_t tag, int64_t step) {
  int ret = _tsr_p2p_recv(cm, b->tmp[r], peer, tag, step);
  if (ret) return ret;
  if (b->fmt == TSR_WIRE_F32) return _tsr_insert_accumulate_prio(x, b->tmp[r], "allreduce_sum", PRIO);
  return _tsr_insert_wire_unpack(x, b->tmp[r], b->fmt, b->keep, 1, PRIO);
}

int _tsr_hops_recv_final(const struct _tsr_comm *cm, starpu_data_handle_t x, struct _tsr_hops *b, int peer, int64_t tag,
                      int64_t step) {
  if (b->fmt == TSR_WIRE_F32) return _tsr_p2p_recv(cm, x, peer, tag, step);
  int ret = _tsr_p2p_recv(cm, b->tmp[0], peer, tag, step);
  return ret ? ret : _tsr_insert_wire_unpack(x, b->tmp[0], b->fmt, b->keep, 0, PRIO);
}

int _tsr_tree_reduce(const struct _tsr_comm *cm, starpu_data_handle_t x, struct _tsr_hops *b, int gi, int64_t step,
                     int k0) {
  int p = cm->size, me = cm->index, ret = 0;
  for (int k = 0, mask = 1; !ret && mask < p; mask <<= 1, k++) {
    int64_t tag = _tsr_p2p_tag(cm, step, gi, k0 + k);
    if (me & mask) return _tsr_hops_send(cm, x, b, me - mask, tag, step, 0);
    if (me + mask < p) ret = _tsr_hops_recv_add(cm, x, b, k, me + mask, tag, step);
  }
  return ret;
}

/* Member me's parent gap: the lowest set bit of me (the root: the power of two above p - 1). */
static int low_bit(int me, int p) { return me ? me & -me : 1 << _tsr_tree_depth(p); }

static int log2i(int v) { return _tsr_tree_depth(v); } /* v a power of two */

int _tsr_tree_bcast(const struct _tsr_comm *cm, starpu_data_handle_t x, struct _tsr_hops *b, int gi, int64_t step,
                    int k0) {
  int p = cm->size, me = cm->index, low = low_bit(me, p), ret = 0;
  starpu_data_handle_t out = b->fmt == TSR_WIRE_F32 ? x : me ? b->tmp[0] : b->wire;
  if (me) ret = _tsr_hops_recv_final(cm, x, b, me - low, _tsr_p2p_tag(cm, step, gi, k0 + log2i(low)), step);
  else if (b->fmt != TSR_WIRE_F32) ret = _tsr_insert_wire_pack(x, b->wire, b->fmt, b->keep, 1, PRIO);
  for (int mask = low >> 1; !ret && mask >= 1; mask >>= 1)
    if (me + mask < p) ret = _tsr_p2p_send(cm, out, me + mask, _tsr_p2p_tag(cm, step, gi, k0 + log2i(mask)), step);
  return ret;
}

int _tsr_tree_messages(int me, int p) {
  int n = me != 0;
  for (int mask = low_bit(me, p) >> 1; mask >= 1; mask >>= 1) n += me + mask < p;
  return n;
}

/* Recursive doubling over cm; messages 0 (hand-over), 1 .. log2 p2 (exchanges), 2047 (hand-back). */
static int rd_sum(const struct _tsr_comm *cm, starpu_data_handle_t x, struct _tsr_hops *b, int gi, int64_t step) {
  int p = cm->size, me = cm->index, p2 = 1, ret = 0;
  while (p2 * 2 <= p) p2 *= 2;
  int extra = p - p2;
  int64_t first = _tsr_p2p_tag(cm, step, gi, 0), last = _tsr_p2p_tag(cm, step, gi, 2047);
  if (me >= p2) {
    ret = _tsr_hops_send(cm, x, b, me - p2, first, step, 0);
    return ret ? ret : _tsr_hops_recv_final(cm, x, b, me - p2, last, step);
  }
  if (me < extra) ret = _tsr_hops_recv_add(cm, x, b, 0, me + p2, first, step);
  for (int k = 1, mask = 1; !ret && mask < p2; mask <<= 1, k++) {
    int64_t tag = _tsr_p2p_tag(cm, step, gi, k);
    ret = _tsr_hops_send(cm, x, b, me ^ mask, tag, step, 1); /* half formats: both add the same two roundings */
    if (!ret) ret = _tsr_hops_recv_add(cm, x, b, k, me ^ mask, tag, step);
  }
  if (ret || !extra) return ret;
  if (b->fmt != TSR_WIRE_F32) { /* every member rounds its result to what the extra members receive */
    ret = _tsr_insert_wire_pack(x, b->wire, b->fmt, b->keep, 1, PRIO);
    return ret || me >= extra ? ret : _tsr_p2p_send(cm, b->wire, me + p2, last, step);
  }
  return me < extra ? _tsr_p2p_send(cm, x, me + p2, last, step) : 0;
}

static int rd_messages(int me, int p) {
  int p2 = 1, rounds = 0;
  while (p2 * 2 <= p) p2 *= 2, rounds++;
  return me >= p2 ? 1 : rounds + (me < p - p2);
}

static int is_rd(const struct _tsr_groups *gs) { return strcmp(gs->ops->impl, "rd") == 0; }

static tsr_status setup(struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++) {
    struct _tsr_group *gr = &gs->g[g];
    if (gr->ops != gs->ops) continue;
    struct _tsr_hops *b = calloc(1, sizeof *b);
    gr->priv = b;
    if (!b || _tsr_hops_init(b, gr->n, gr->keep, gs->ops->variant, _tsr_tree_depth(gs->comm->size) + 1))
      return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory for the gradient group of %zu floats", gr->n);
  }
  return TSR_OK;
}

static void teardown(struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++) {
    if (gs->g[g].ops != gs->ops || !gs->g[g].priv) continue;
    _tsr_hops_free(gs->g[g].priv);
    free(gs->g[g].priv);
    gs->g[g].priv = NULL;
  }
}

static int submit(struct _tsr_groups *gs, int g, int64_t step) {
  struct _tsr_group *gr = &gs->g[g];
  starpu_data_unpartition_submit(gr->h, gr->nchild, gr->tensors, STARPU_MAIN_RAM);
  int ret = is_rd(gs) ? rd_sum(gs->comm, gr->h, gr->priv, g, step)
                      : _tsr_tree_reduce(gs->comm, gr->h, gr->priv, g, step, 0);
  if (!ret && !is_rd(gs)) ret = _tsr_tree_bcast(gs->comm, gr->h, gr->priv, g, step, BCAST_K);
  starpu_data_partition_submit(gr->h, gr->nchild, gr->tensors);
  if (ret) _tsr_error(TSR_ERR_RUNTIME, "gradient group %d, step %lld: posting the %s allreduce failed (%d)", g,
                      (long long)step, gs->ops->impl, ret);
  return ret;
}

static int64_t wire_bytes(const struct _tsr_groups *gs, int g) {
  int me = gs->comm->index, p = gs->comm->size;
  int msgs = is_rd(gs) ? rd_messages(me, p) : _tsr_tree_messages(me, p);
  return (int64_t)msgs * (int64_t)_tsr_wire_size(&gs->g[g], gs->ops->variant);
}

static double cost(const struct _tsr_groups *gs, int g) {
  double bytes = _tsr_wire_size(&gs->g[g], gs->ops->variant);
  return is_rd(gs) ? _tsr_cost_rd(gs->comm->size, bytes, gs->net.remote)
                   : _tsr_cost_tree(gs->comm->size, bytes, gs->net.remote);
}

#define LATENCY(impl_name, fmt_name, fmt)                                                                              \
  {.name = fmt_name, .impl = impl_name, .variant = fmt, .setup = setup, .teardown = teardown, .submit = submit,        \
   .wire_bytes = wire_bytes, .cost = cost}
const struct _tsr_collective_ops _tsr_rd_f32 = LATENCY("rd", "f32", TSR_WIRE_F32);
const struct _tsr_collective_ops _tsr_rd_bf16 = LATENCY("rd", "bf16", TSR_WIRE_BF16);
const struct _tsr_collective_ops _tsr_rd_fp16 = LATENCY("rd", "fp16", TSR_WIRE_FP16);
const struct _tsr_collective_ops _tsr_tree_f32 = LATENCY("tree", "f32", TSR_WIRE_F32);
const struct _tsr_collective_ops _tsr_tree_bf16 = LATENCY("tree", "bf16", TSR_WIRE_BF16);
const struct _tsr_collective_ops _tsr_tree_fp16 = LATENCY("tree", "fp16", TSR_WIRE_FP16);

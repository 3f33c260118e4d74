/* Rabenseifner's allreduce as StarPU tasks: a reduce-scatter by recursive halving, then an
 * allgather by recursive doubling, each log2 p' rounds (p' the largest power of two <= p).
 * Halving round l pairs the members that differ in bit l of their index (distance 1 first: the
 * largest messages go to the nearest ranks): each splits its part of the vector in two halves
 * (a nested partition of the handle), sends the one its partner keeps and adds what the partner
 * sends into the one it keeps (the lower half when bit l is 0). After the last round each member
 * holds the full sum of its slice; the doubling rounds retrace the halving ones in reverse, each
 * member sending what it holds and receiving its partner's part. Members beyond p' first hand their
 * vector to member index - p', which adds it in, and get the result back at the end, as recursive
 * doubling does (tree.c).
 *
 * Every element is summed by one member along a fixed tree, so every member ends with the same
 * bits and runs repeat them. In float32 that tree is recursive doubling's (the hand-over first,
 * then partners 1, 2, 4... apart; a float32 sum of two values does not depend on which of them
 * holds it), so the result equals "rd"'s bitwise; it differs from the ring's, which adds in
 * another order, in the last bits from 3 ranks on. In bf16/fp16 the halves travel packed and are
 * added in float32 on receipt; the owner of a slice rounds it to the wire format before the
 * doubling rounds, so what every member unpacks, and the hand-back, are those same values. */
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "comm/collective.h"
#include "comm/groups.h"
#include "comm/halving.h"
#include "comm/net.h"
#include "comm/p2p.h"
#include "comm/ring.h"
#include "comm/tree.h"
#include "convert.h"
#include "runtime/communicator.h"
#include "runtime/error.h"

#define PRIO STARPU_MAX_PRIO
#define MAX_LEVELS 31
#define HAND_BACK 2047 /* the last message number of a group (p2p.h) */

/* One halving round: the part held before it (`node`) split in two. */
struct level {
  starpu_data_handle_t node, kids[2];
  uint32_t len[2];
  size_t keep[2];           /* leading floats of each half that stay float32 */
  int mine;                 /* the half this member keeps */
  starpu_data_handle_t in;  /* receives the partner's part of my half (float32 or packed); half
                               formats: also packs my half for the doubling round */
  starpu_data_handle_t out; /* half formats: packs the half I send; receives the partner's half */
  void *inbuf, *outbuf;
  int planned;
};

struct _tsr_halving {
  int fmt, p, me, p2, levels;
  starpu_data_handle_t x;
  size_t n, keep;
  struct level lev[MAX_LEVELS];
  struct _tsr_hops fold; /* the whole vector, handed over and back (members in a pair across p') */
};

/* A buffer for len floats in format fmt (half formats: the kept floats as two halves each). */
static int buffer(void **buf, starpu_data_handle_t *h, size_t len, size_t keep, int fmt) {
  if (fmt == TSR_WIRE_F32) {
    if (!(*buf = malloc((len + 1) * sizeof(float)))) return -1;
    *h = _tsr_register_floats(*buf, len);
    return 0;
  }
  size_t halves = len + keep;
  if (!(*buf = malloc((halves + 2) * sizeof(uint16_t)))) return -1;
  starpu_vector_data_register(h, STARPU_MAIN_RAM, (uintptr_t)*buf, (uint32_t)halves, sizeof(uint16_t));
  return 0;
}

static size_t overlap_keep(size_t keep, size_t start, size_t len) {
  return start >= keep ? 0 : keep - start < len ? keep - start : len;
}

struct _tsr_halving *_tsr_halving_plan(starpu_data_handle_t x, size_t n, size_t keep, int fmt, int p, int me) {
  struct _tsr_halving *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  h->fmt = fmt, h->p = p, h->me = me, h->x = x, h->n = n, h->keep = keep, h->p2 = 1;
  while (h->p2 * 2 <= p && h->levels < MAX_LEVELS) h->p2 *= 2, h->levels++;
  if (me >= h->p2 || me < p - h->p2) /* in a pair across p': the whole vector travels once */
    if (_tsr_hops_init(&h->fold, n, keep, fmt, 1)) return _tsr_halving_free(h), NULL;
  if (me >= h->p2) {
    h->levels = 0; /* hands over and waits */
    return h;
  }
  starpu_data_handle_t node = x;
  size_t start = 0, len = n;
  for (int l = 0; l < h->levels; l++) {
    struct level *v = &h->lev[l];
    v->node = node;
    v->len[0] = (uint32_t)((len + 1) / 2), v->len[1] = (uint32_t)(len / 2);
    v->keep[0] = overlap_keep(keep, start, v->len[0]);
    v->keep[1] = overlap_keep(keep, start + v->len[0], v->len[1]);
    v->mine = (me >> l) & 1;
    struct starpu_data_filter f = {.filter_func = starpu_vector_filter_list, .nchildren = 2, .filter_arg_ptr = v->len};
    starpu_data_partition_plan(node, &f, v->kids);
    v->planned = 1;
    int mine = v->mine, other = 1 - mine;
    if (buffer(&v->inbuf, &v->in, v->len[mine], v->keep[mine], fmt)) return _tsr_halving_free(h), NULL;
    if (fmt != TSR_WIRE_F32 && buffer(&v->outbuf, &v->out, v->len[other], v->keep[other], fmt))
      return _tsr_halving_free(h), NULL;
    if (mine) start += v->len[0];
    len = v->len[mine];
    node = v->kids[mine];
  }
  return h;
}

void _tsr_halving_free(struct _tsr_halving *h) {
  if (!h) return;
  for (int l = MAX_LEVELS - 1; l >= 0; l--) { /* the deepest partition first */
    struct level *v = &h->lev[l];
    if (v->in) starpu_data_unregister(v->in);
    if (v->out) starpu_data_unregister(v->out);
    if (v->planned) starpu_data_partition_clean(v->node, 2, v->kids);
    free(v->inbuf), free(v->outbuf);
  }
  _tsr_hops_free(&h->fold);
  free(h);
}

static int64_t wire(size_t len, size_t keep, int fmt) {
  return fmt == TSR_WIRE_F32 ? 4 * (int64_t)len : 2 * (int64_t)(len + keep);
}

int64_t _tsr_halving_bytes(const struct _tsr_halving *h) {
  int64_t b = h->me >= h->p2 || h->me < h->p - h->p2 ? wire(h->n, h->keep, h->fmt) : 0;
  for (int l = 0; l < h->levels; l++) { /* the other half while halving, mine while doubling */
    const struct level *v = &h->lev[l];
    b += wire(v->len[0], v->keep[0], h->fmt) + wire(v->len[1], v->keep[1], h->fmt);
  }
  return b;
}

/* Halving round l: my half += the partner's part of it; the other half goes to the partner. */
static int halve(const struct _tsr_comm *cm, struct _tsr_halving *h, struct level *v, int l, int gi, int64_t step) {
  int peer = h->me ^ (1 << l), mine = v->mine, other = 1 - mine, fmt = h->fmt, ret;
  int64_t tag = _tsr_p2p_tag(cm, step, gi, 1 + l);
  if (fmt == TSR_WIRE_F32) {
    ret = _tsr_p2p_send(cm, v->kids[other], peer, tag, step);
    if (!ret) ret = _tsr_p2p_recv(cm, v->in, peer, tag, step);
    return ret ? ret : _tsr_insert_accumulate_prio(v->kids[mine], v->in, "allreduce_sum", PRIO);
  }
  ret = _tsr_insert_wire_pack(v->kids[other], v->out, fmt, v->keep[other], 0, PRIO);
  if (!ret) ret = _tsr_p2p_send(cm, v->out, peer, tag, step);
  if (!ret) ret = _tsr_p2p_recv(cm, v->in, peer, tag, step);
  return ret ? ret : _tsr_insert_wire_unpack(v->kids[mine], v->in, fmt, v->keep[mine], 1, PRIO);
}

/* Doubling round l: my half to the partner, its half from it (half formats: the slice's owner
 * rounds it as it packs it in the first doubling round; later rounds pack values already rounded). */
static int twice(const struct _tsr_comm *cm, struct _tsr_halving *h, struct level *v, int l, int gi, int64_t step) {
  int peer = h->me ^ (1 << l), mine = v->mine, other = 1 - mine, fmt = h->fmt, ret;
  int64_t tag = _tsr_p2p_tag(cm, step, gi, 1 + h->levels + l);
  if (fmt == TSR_WIRE_F32) {
    ret = _tsr_p2p_send(cm, v->kids[mine], peer, tag, step);
    return ret ? ret : _tsr_p2p_recv(cm, v->kids[other], peer, tag, step);
  }
  ret = _tsr_insert_wire_pack(v->kids[mine], v->in, fmt, v->keep[mine], l == h->levels - 1, PRIO);
  if (!ret) ret = _tsr_p2p_send(cm, v->in, peer, tag, step);
  if (!ret) ret = _tsr_p2p_recv(cm, v->out, peer, tag, step);
  return ret ? ret : _tsr_insert_wire_unpack(v->kids[other], v->out, fmt, v->keep[other], 0, PRIO);
}

int _tsr_halving_sum(const struct _tsr_comm *cm, struct _tsr_halving *h, int gi, int64_t step) {
  int me = h->me, extra = h->p - h->p2, ret = 0, parts = 0;
  int64_t first = _tsr_p2p_tag(cm, step, gi, 0), last = _tsr_p2p_tag(cm, step, gi, HAND_BACK);
  if (me >= h->p2) {
    ret = _tsr_hops_send(cm, h->x, &h->fold, me - h->p2, first, step, 0);
    return ret ? ret : _tsr_hops_recv_final(cm, h->x, &h->fold, me - h->p2, last, step);
  }
  if (me < extra) ret = _tsr_hops_recv_add(cm, h->x, &h->fold, 0, me + h->p2, first, step);
  for (int l = 0; !ret && l < h->levels; l++, parts++) {
    starpu_data_partition_submit(h->lev[l].node, 2, h->lev[l].kids);
    ret = halve(cm, h, &h->lev[l], l, gi, step);
  }
  for (int l = parts - 1; l >= 0; l--) { /* every partition made is undone, also after an error */
    if (!ret) ret = twice(cm, h, &h->lev[l], l, gi, step);
    starpu_data_unpartition_submit(h->lev[l].node, 2, h->lev[l].kids, STARPU_MAIN_RAM);
  }
  /* half formats: x holds values of the wire format already, so packing them loses nothing */
  if (!ret && me < extra) ret = _tsr_hops_send(cm, h->x, &h->fold, me + h->p2, last, step, 0);
  return ret;
}

/* The "rabenseifner" entries: each group's whole handle over the communicator. */
static tsr_status setup(struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++) {
    struct _tsr_group *gr = &gs->g[g];
    if (gr->ops == gs->ops &&
        !(gr->priv = _tsr_halving_plan(gr->h, gr->n, gr->keep, gs->ops->variant, gs->comm->size, gs->comm->index)))
      return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory for the gradient group of %zu floats", gr->n);
  }
  return TSR_OK;
}

static void teardown(struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++)
    if (gs->g[g].ops == gs->ops) _tsr_halving_free(gs->g[g].priv), gs->g[g].priv = NULL;
}

static int submit(struct _tsr_groups *gs, int g, int64_t step) {
  struct _tsr_group *gr = &gs->g[g];
  starpu_data_unpartition_submit(gr->h, gr->nchild, gr->tensors, STARPU_MAIN_RAM);
  int ret = _tsr_halving_sum(gs->comm, gr->priv, g, step);
  starpu_data_partition_submit(gr->h, gr->nchild, gr->tensors);
  if (ret)
    _tsr_error(TSR_ERR_RUNTIME,
               "gradient group %d, step %lld: posting the halving-doubling allreduce failed "
               "(%d)",
               g, (long long)step, ret);
  return ret;
}

static int64_t wire_bytes(const struct _tsr_groups *gs, int g) { return _tsr_halving_bytes(gs->g[g].priv); }

static double cost(const struct _tsr_groups *gs, int g) {
  return _tsr_cost_rabenseifner(gs->comm->size, _tsr_wire_size(&gs->g[g], gs->ops->variant), gs->net.remote);
}

#define HALVING(fmt_name, fmt)                                                                                         \
  {                                                                                                                    \
    .name = fmt_name, .impl = "rabenseifner", .variant = fmt, .check = _tsr_ring_check, .setup = setup,                \
    .teardown = teardown, .submit = submit, .wire_bytes = wire_bytes, .cost = cost                                     \
  }
const struct _tsr_collective_ops _tsr_rabenseifner_f32 = HALVING("f32", TSR_WIRE_F32);
const struct _tsr_collective_ops _tsr_rabenseifner_bf16 = HALVING("bf16", TSR_WIRE_BF16);
const struct _tsr_collective_ops _tsr_rabenseifner_fp16 = HALVING("fp16", TSR_WIRE_FP16);

/* The ring allreduce as StarPU tasks (reduce-scatter then allgather over one chunk per member of
 * the communicator: StarPU-MPI detached sends and receives plus sum tasks), with chunks on the wire
 * in float32, or packed to bf16/fp16 for each hop and summed in float32 on receipt. Three entries
 * of the collective table, one per wire format. Tags are unique per (communicator, step, group,
 * ring step), so rings on communicators that share ranks cannot take each other's messages. The
 * chunked sum itself (ring.h) also serves the hierarchical allreduce across node leaders. */
#include <stdlib.h>
#include <starpu.h>

#include "codelets.h"
#include "comm/collective.h"
#include "comm/groups.h"
#include "comm/net.h"
#include "comm/p2p.h"
#include "comm/ring.h"
#include "convert.h"
#include "runtime/communicator.h"
#include "runtime/error.h"

/* A group's chunks (a second partition of its handle) and their buffers. */
struct _tsr_ring {
  int r;                        /* chunks: one per member */
  starpu_data_handle_t *chunks;
  uint32_t *chunk_len;
  starpu_data_handle_t *tmp;    /* receive buffers, one per chunk (in the wire format) */
  void **tmpbuf;
  starpu_data_handle_t *wire;   /* send buffers in the wire format (half formats only) */
  void **wirebuf;
  uint32_t *chunk_keep;         /* per chunk: values at its start that stay float32 (the kept word) */
};

tsr_status _tsr_ring_check(const struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++)
    if (gs->g[g].n < (size_t)gs->comm->size)
      return _tsr_error(TSR_ERR_ARG, "gradient group %d has %zu values, fewer than the %d ranks", g, gs->g[g].n,
                        gs->comm->size);
  return TSR_OK;
}

struct _tsr_ring *_tsr_ring_plan(struct _tsr_group *g, int r, int fmt) {
  struct _tsr_ring *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->r = r;
  q->chunks = calloc(r, sizeof *q->chunks);
  q->chunk_len = calloc(r, sizeof *q->chunk_len);
  q->tmp = calloc(r, sizeof *q->tmp);
  q->tmpbuf = calloc(r, sizeof *q->tmpbuf);
  q->wire = calloc(r, sizeof *q->wire);
  q->wirebuf = calloc(r, sizeof *q->wirebuf);
  q->chunk_keep = calloc(r, sizeof *q->chunk_keep);
  if (!q->chunks || !q->chunk_len || !q->tmp || !q->tmpbuf || !q->wire || !q->wirebuf || !q->chunk_keep)
    return _tsr_ring_free(g, q), NULL;
  size_t start = 0;
  for (int c = 0; c < r; c++) {
    uint32_t len = (uint32_t)(g->n / r + ((size_t)c < g->n % r));
    q->chunk_len[c] = len;
    if (start < g->keep) /* the kept word's part of this chunk stays float32 */
      q->chunk_keep[c] = (uint32_t)(g->keep - start < len ? g->keep - start : len);
    start += len;
    if (fmt == TSR_WIRE_F32) {
      q->tmpbuf[c] = malloc(((size_t)len + 1) * sizeof(float));
      if (!q->tmpbuf[c]) return _tsr_ring_free(g, q), NULL;
      q->tmp[c] = _tsr_register_floats(q->tmpbuf[c], len);
      continue;
    }
    size_t wn = (size_t)len + q->chunk_keep[c];
    q->tmpbuf[c] = malloc((wn + 2) * sizeof(uint16_t));
    q->wirebuf[c] = malloc((wn + 2) * sizeof(uint16_t));
    if (!q->tmpbuf[c] || !q->wirebuf[c]) return _tsr_ring_free(g, q), NULL;
    starpu_vector_data_register(&q->tmp[c], STARPU_MAIN_RAM, (uintptr_t)q->tmpbuf[c], (uint32_t)wn, sizeof(uint16_t));
    starpu_vector_data_register(&q->wire[c], STARPU_MAIN_RAM, (uintptr_t)q->wirebuf[c], (uint32_t)wn,
                                sizeof(uint16_t));
  }
  struct starpu_data_filter fc = {.filter_func = starpu_vector_filter_list, .nchildren = (unsigned)r,
                                  .filter_arg_ptr = q->chunk_len};
  starpu_data_partition_plan(g->h, &fc, q->chunks);
  return q;
}

void _tsr_ring_free(struct _tsr_group *g, struct _tsr_ring *q) {
  if (!q) return;
  if (q->chunks && q->chunks[0]) starpu_data_partition_clean(g->h, q->r, q->chunks);
  for (int c = 0; q->tmp && q->tmpbuf && q->wire && q->wirebuf && c < q->r; c++) {
    if (q->tmp[c]) starpu_data_unregister(q->tmp[c]);
    if (q->wire[c]) starpu_data_unregister(q->wire[c]);
    free(q->tmpbuf[c]), free(q->wirebuf[c]);
  }
  free(q->chunks), free(q->chunk_len), free(q->tmp), free(q->tmpbuf), free(q->wire), free(q->wirebuf);
  free(q->chunk_keep), free(q);
}

/* The groups whose collective is this entry (gs->ops while it runs): with "auto" the others may
 * belong to other entries. */
static tsr_status setup(struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++)
    if (gs->g[g].ops == gs->ops && !(gs->g[g].priv = _tsr_ring_plan(&gs->g[g], gs->comm->size, gs->ops->variant)))
      return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory for the gradient group of %zu floats", gs->g[g].n);
  return TSR_OK;
}

static void teardown(struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++)
    if (gs->g[g].ops == gs->ops) _tsr_ring_free(&gs->g[g], gs->g[g].priv), gs->g[g].priv = NULL;
}

static int mod(int a, int r) { return (a % r + r) % r; }

/* Bytes chunk c takes on the wire. */
static int64_t chunk_bytes(const struct _tsr_ring *q, int fmt, int c) {
  if (fmt == TSR_WIRE_F32) return (int64_t)q->chunk_len[c] * 4;
  return ((int64_t)q->chunk_len[c] + q->chunk_keep[c]) * 2;
}

/* What the rounds below send: chunk me - k in the reduce-scatter, me + 1 - k in the allgather. */
int64_t _tsr_ring_bytes(const struct _tsr_ring *q, int fmt, int me) {
  int r = q->r;
  int64_t b = 0;
  for (int k = 0; k < r - 1; k++) b += chunk_bytes(q, fmt, mod(me - k, r)) + chunk_bytes(q, fmt, mod(me + 1 - k, r));
  return b;
}

static int64_t wire_bytes(const struct _tsr_groups *gs, int g) {
  return _tsr_ring_bytes(gs->g[g].priv, gs->ops->variant, gs->comm->index);
}

/* 2 (p - 1) messages of about a p-th of the group each. */
static double cost(const struct _tsr_groups *gs, int g) {
  return _tsr_cost_ring(gs->comm->size, _tsr_wire_size(&gs->g[g], gs->ops->variant), gs->net.remote);
}

/* Float32: chunks travel as they are. Reduce-scatter: after r-1 rounds this member holds the full
 * sum of chunk (me + 1) mod r. */
static int scatter_f32(const struct _tsr_comm *cm, struct _tsr_ring *q, int g, int64_t step) {
  int r = cm->size, me = cm->index, next = mod(me + 1, r), prev = mod(me - 1, r), prio = STARPU_MAX_PRIO, ret = 0;
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = mod(me - k, r), recv = mod(me - k - 1, r);
    ret = _tsr_p2p_send(cm, q->chunks[send], next, _tsr_p2p_tag(cm, step, g, k), step);
    if (!ret) ret = _tsr_p2p_recv(cm, q->tmp[recv], prev, _tsr_p2p_tag(cm, step, g, k), step);
    if (!ret) ret = _tsr_insert_accumulate_prio(q->chunks[recv], q->tmp[recv], "allreduce_sum", prio);
  }
  return ret;
}

/* Allgather: pass the reduced chunks around the ring. */
static int gather_f32(const struct _tsr_comm *cm, struct _tsr_ring *q, int g, int64_t step) {
  int r = cm->size, me = cm->index, next = mod(me + 1, r), prev = mod(me - 1, r), ret = 0;
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = mod(me + 1 - k, r), recv = mod(me - k, r);
    int64_t tag = _tsr_p2p_tag(cm, step, g, r - 1 + k);
    ret = _tsr_p2p_send(cm, q->chunks[send], next, tag, step);
    if (!ret) ret = _tsr_p2p_recv(cm, q->chunks[recv], prev, tag, step);
  }
  return ret;
}

/* Half formats: packed for each hop, summed in float32 on receipt. In the allgather the owner
 * rounds its reduced chunk as it packs it and the others unpack the same halves, then forward what
 * they received unchanged: every member ends with identical values. */
static int scatter_half(const struct _tsr_comm *cm, struct _tsr_ring *q, int fmt, int g, int64_t step) {
  int r = cm->size, me = cm->index, next = mod(me + 1, r), prev = mod(me - 1, r), prio = STARPU_MAX_PRIO, ret = 0;
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = mod(me - k, r), recv = mod(me - k - 1, r);
    ret = _tsr_insert_wire_pack(q->chunks[send], q->wire[send], fmt, q->chunk_keep[send], 0, prio);
    if (!ret) ret = _tsr_p2p_send(cm, q->wire[send], next, _tsr_p2p_tag(cm, step, g, k), step);
    if (!ret) ret = _tsr_p2p_recv(cm, q->tmp[recv], prev, _tsr_p2p_tag(cm, step, g, k), step);
    if (!ret) ret = _tsr_insert_wire_unpack(q->chunks[recv], q->tmp[recv], fmt, q->chunk_keep[recv], 1, prio);
  }
  return ret;
}

static int gather_half(const struct _tsr_comm *cm, struct _tsr_ring *q, int fmt, int g, int64_t step) {
  int r = cm->size, me = cm->index, next = mod(me + 1, r), prev = mod(me - 1, r), prio = STARPU_MAX_PRIO, ret = 0;
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = mod(me + 1 - k, r), recv = mod(me - k, r);
    int64_t tag = _tsr_p2p_tag(cm, step, g, r - 1 + k);
    if (k == 0) {
      ret = _tsr_insert_wire_pack(q->chunks[send], q->wire[send], fmt, q->chunk_keep[send], 1, prio);
      if (!ret) ret = _tsr_p2p_send(cm, q->wire[send], next, tag, step);
    } else {
      ret = _tsr_p2p_send(cm, q->tmp[send], next, tag, step); /* received in round k - 1 */
    }
    if (!ret) ret = _tsr_p2p_recv(cm, q->tmp[recv], prev, tag, step);
    if (!ret) ret = _tsr_insert_wire_unpack(q->chunks[recv], q->tmp[recv], fmt, q->chunk_keep[recv], 0, prio);
  }
  return ret;
}

int _tsr_ring_scatter(const struct _tsr_comm *cm, struct _tsr_ring *q, int fmt, int g, int64_t step) {
  return fmt == TSR_WIRE_F32 ? scatter_f32(cm, q, g, step) : scatter_half(cm, q, fmt, g, step);
}

int _tsr_ring_gather(const struct _tsr_comm *cm, struct _tsr_ring *q, int fmt, int g, int64_t step) {
  return fmt == TSR_WIRE_F32 ? gather_f32(cm, q, g, step) : gather_half(cm, q, fmt, g, step);
}

void _tsr_ring_partition(struct _tsr_group *gr, struct _tsr_ring *q, int on) {
  if (on) starpu_data_partition_submit(gr->h, q->r, q->chunks);
  else starpu_data_unpartition_submit(gr->h, q->r, q->chunks, STARPU_MAIN_RAM);
}

int _tsr_ring_owned(const struct _tsr_ring *q, int me) { return mod(me + 1, q->r); }

starpu_data_handle_t _tsr_ring_chunk(const struct _tsr_ring *q, int c, size_t *n, size_t *keep) {
  *n = q->chunk_len[c], *keep = q->chunk_keep[c];
  return q->chunks[c];
}

int _tsr_ring_sum(const struct _tsr_comm *cm, struct _tsr_group *gr, struct _tsr_ring *q, int fmt, int g,
                  int64_t step) {
  _tsr_ring_partition(gr, q, 1);
  int ret = _tsr_ring_scatter(cm, q, fmt, g, step);
  if (!ret) ret = _tsr_ring_gather(cm, q, fmt, g, step);
  _tsr_ring_partition(gr, q, 0);
  return ret;
}

static int submit(struct _tsr_groups *gs, int g, int64_t step) {
  struct _tsr_group *gr = &gs->g[g];
  starpu_data_unpartition_submit(gr->h, gr->nchild, gr->tensors, STARPU_MAIN_RAM);
  int ret = _tsr_ring_sum(gs->comm, gr, gr->priv, gs->ops->variant, g, step);
  starpu_data_partition_submit(gr->h, gr->nchild, gr->tensors);
  if (ret) _tsr_error(TSR_ERR_RUNTIME, "gradient group %d, step %lld: posting the ring allreduce failed (%d)", g,
                      (long long)step, ret);
  return ret;
}

#define RING(fmt_name, fmt)                                                                                    \
  {.name = fmt_name, .impl = "ring", .variant = fmt, .check = _tsr_ring_check, .setup = setup,                         \
   .teardown = teardown, .submit = submit, .wire_bytes = wire_bytes, .cost = cost}
const struct _tsr_collective_ops _tsr_ring_f32 = RING("f32", TSR_WIRE_F32);
const struct _tsr_collective_ops _tsr_ring_bf16 = RING("bf16", TSR_WIRE_BF16);
const struct _tsr_collective_ops _tsr_ring_fp16 = RING("fp16", TSR_WIRE_FP16);

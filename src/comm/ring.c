/* The ring allreduce as StarPU tasks (reduce-scatter then allgather over one chunk per member of
 * the communicator: StarPU-MPI detached sends and receives plus sum tasks), with chunks on the wire
 * in float32, or packed to bf16/fp16 for each hop and summed in float32 on receipt. Three entries
 * of the collective table, one per wire format. Tags are unique per (communicator, step, group,
 * ring step), so rings on communicators that share ranks cannot take each other's messages. */
#include <stdlib.h>
#include <starpu_mpi.h>

#include "codelets.h"
#include "comm/collective.h"
#include "comm/groups.h"
#include "convert.h"
#include "runtime/communicator.h"
#include "runtime/error.h"
#include "trace/trace.h"

#define WIRE_F32 0 /* else TSR_WIRE_BF16 or TSR_WIRE_FP16 */

/* A group's chunks (a second partition of its handle) and their buffers. */
struct ring {
  int r;                        /* chunks: one per member */
  starpu_data_handle_t *chunks;
  uint32_t *chunk_len;
  starpu_data_handle_t *tmp;    /* receive buffers, one per chunk (in the wire format) */
  void **tmpbuf;
  starpu_data_handle_t *wire;   /* send buffers in the wire format (half formats only) */
  void **wirebuf;
  uint32_t *chunk_keep;         /* per chunk: values at its start that stay float32 (the kept word) */
};

static tsr_status check(const struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++)
    if (gs->g[g].n < (size_t)gs->comm->size)
      return _tsr_error(TSR_ERR_ARG, "gradient group %d has %zu values, fewer than the %d ranks", g, gs->g[g].n,
                        gs->comm->size);
  return TSR_OK;
}

static int setup_group(struct _tsr_group *g, int r, int fmt) {
  struct ring *q = calloc(1, sizeof *q);
  if (!q) return -1;
  g->priv = q;
  q->r = r;
  q->chunks = calloc(r, sizeof *q->chunks);
  q->chunk_len = calloc(r, sizeof *q->chunk_len);
  q->tmp = calloc(r, sizeof *q->tmp);
  q->tmpbuf = calloc(r, sizeof *q->tmpbuf);
  q->wire = calloc(r, sizeof *q->wire);
  q->wirebuf = calloc(r, sizeof *q->wirebuf);
  q->chunk_keep = calloc(r, sizeof *q->chunk_keep);
  if (!q->chunks || !q->chunk_len || !q->tmp || !q->tmpbuf || !q->wire || !q->wirebuf || !q->chunk_keep) return -1;
  size_t start = 0;
  for (int c = 0; c < r; c++) {
    uint32_t len = (uint32_t)(g->n / r + ((size_t)c < g->n % r));
    q->chunk_len[c] = len;
    if (start < g->keep) /* the kept word's part of this chunk stays float32 */
      q->chunk_keep[c] = (uint32_t)(g->keep - start < len ? g->keep - start : len);
    start += len;
    if (fmt == WIRE_F32) {
      q->tmpbuf[c] = malloc(((size_t)len + 1) * sizeof(float));
      if (!q->tmpbuf[c]) return -1;
      q->tmp[c] = _tsr_register_floats(q->tmpbuf[c], len);
      continue;
    }
    size_t wn = (size_t)len + q->chunk_keep[c];
    q->tmpbuf[c] = malloc((wn + 2) * sizeof(uint16_t));
    q->wirebuf[c] = malloc((wn + 2) * sizeof(uint16_t));
    if (!q->tmpbuf[c] || !q->wirebuf[c]) return -1;
    starpu_vector_data_register(&q->tmp[c], STARPU_MAIN_RAM, (uintptr_t)q->tmpbuf[c], (uint32_t)wn, sizeof(uint16_t));
    starpu_vector_data_register(&q->wire[c], STARPU_MAIN_RAM, (uintptr_t)q->wirebuf[c], (uint32_t)wn,
                                sizeof(uint16_t));
  }
  struct starpu_data_filter fc = {.filter_func = starpu_vector_filter_list, .nchildren = (unsigned)r,
                                  .filter_arg_ptr = q->chunk_len};
  starpu_data_partition_plan(g->h, &fc, q->chunks);
  return 0;
}

static tsr_status setup(struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++)
    if (setup_group(&gs->g[g], gs->comm->size, gs->ops->variant) != 0)
      return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory for the gradient group of %zu floats", gs->g[g].n);
  return TSR_OK;
}

static void teardown(struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++) {
    struct ring *q = gs->g[g].priv;
    if (!q) continue;
    if (q->chunks && q->chunks[0]) starpu_data_partition_clean(gs->g[g].h, q->r, q->chunks);
    for (int c = 0; q->tmp && q->tmpbuf && q->wire && q->wirebuf && c < q->r; c++) {
      if (q->tmp[c]) starpu_data_unregister(q->tmp[c]);
      if (q->wire[c]) starpu_data_unregister(q->wire[c]);
      free(q->tmpbuf[c]), free(q->wirebuf[c]);
    }
    free(q->chunks), free(q->chunk_len), free(q->tmp), free(q->tmpbuf), free(q->wire), free(q->wirebuf);
    free(q->chunk_keep), free(q);
    gs->g[g].priv = NULL;
  }
}

/* Detached send/receive of one chunk to/from member `peer`; the trace (when on) records its post
 * and completion with the peer's world rank. */
static int send_chunk(const struct _tsr_comm *cm, starpu_data_handle_t h, int peer, int64_t tag, int64_t step) {
  void *a = _tsr_trace_xfer_arg(step, cm->ranks[peer], starpu_data_get_size(h), tag, 1);
  return starpu_mpi_isend_detached_prio(h, cm->ranks[peer], tag, STARPU_MAX_PRIO, MPI_COMM_WORLD,
                                        a ? _tsr_trace_xfer_done : NULL, a);
}

static int recv_chunk(const struct _tsr_comm *cm, starpu_data_handle_t h, int peer, int64_t tag, int64_t step) {
  void *a = _tsr_trace_xfer_arg(step, cm->ranks[peer], starpu_data_get_size(h), tag, 0);
  return starpu_mpi_irecv_detached(h, cm->ranks[peer], tag, MPI_COMM_WORLD, a ? _tsr_trace_xfer_done : NULL, a);
}

/* Unique per (communicator, step, group, ring step) among messages in flight. */
static int64_t ring_tag(const struct _tsr_comm *cm, int64_t step, int g, int k) {
  return _tsr_comm_tag(cm, ((((int64_t)(step & 0xFFFFF)) * 4096 + g) * 2048) + k);
}

static int mod(int a, int r) { return (a % r + r) % r; }

/* Bytes chunk c takes on the wire. */
static int64_t chunk_bytes(const struct ring *q, int fmt, int c) {
  if (fmt == WIRE_F32) return (int64_t)q->chunk_len[c] * 4;
  return ((int64_t)q->chunk_len[c] + q->chunk_keep[c]) * 2;
}

/* What the rounds below send: chunk me - k in the reduce-scatter, me + 1 - k in the allgather. */
static int64_t wire_bytes(const struct _tsr_groups *gs, int g) {
  const struct ring *q = gs->g[g].priv;
  int r = gs->comm->size, me = gs->comm->index;
  int64_t b = 0;
  for (int k = 0; k < r - 1; k++)
    b += chunk_bytes(q, gs->ops->variant, mod(me - k, r)) + chunk_bytes(q, gs->ops->variant, mod(me + 1 - k, r));
  return b;
}

/* Float32: chunks travel as they are. */
static int ring_f32(const struct _tsr_comm *cm, struct ring *q, int g, int64_t step) {
  int r = cm->size, me = cm->index, next = mod(me + 1, r), prev = mod(me - 1, r), prio = STARPU_MAX_PRIO, ret = 0;
  /* Reduce-scatter: after r-1 rounds this member holds the full sum of chunk (me + 1) mod r. */
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = mod(me - k, r), recv = mod(me - k - 1, r);
    ret = send_chunk(cm, q->chunks[send], next, ring_tag(cm, step, g, k), step);
    if (!ret) ret = recv_chunk(cm, q->tmp[recv], prev, ring_tag(cm, step, g, k), step);
    if (!ret) ret = _tsr_insert_accumulate_prio(q->chunks[recv], q->tmp[recv], "allreduce_sum", prio);
  }
  /* Allgather: pass the reduced chunks around the ring. */
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = mod(me + 1 - k, r), recv = mod(me - k, r);
    int64_t tag = ring_tag(cm, step, g, r - 1 + k);
    ret = send_chunk(cm, q->chunks[send], next, tag, step);
    if (!ret) ret = recv_chunk(cm, q->chunks[recv], prev, tag, step);
  }
  return ret;
}

/* Half formats: packed for each hop, summed in float32 on receipt. In the allgather the owner
 * rounds its reduced chunk as it packs it and the others unpack the same halves, then forward what
 * they received unchanged: every member ends with identical values. */
static int ring_half(const struct _tsr_comm *cm, struct ring *q, int fmt, int g, int64_t step) {
  int r = cm->size, me = cm->index, next = mod(me + 1, r), prev = mod(me - 1, r), prio = STARPU_MAX_PRIO, ret = 0;
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = mod(me - k, r), recv = mod(me - k - 1, r);
    ret = _tsr_insert_wire_pack(q->chunks[send], q->wire[send], fmt, q->chunk_keep[send], 0, prio);
    if (!ret) ret = send_chunk(cm, q->wire[send], next, ring_tag(cm, step, g, k), step);
    if (!ret) ret = recv_chunk(cm, q->tmp[recv], prev, ring_tag(cm, step, g, k), step);
    if (!ret) ret = _tsr_insert_wire_unpack(q->chunks[recv], q->tmp[recv], fmt, q->chunk_keep[recv], 1, prio);
  }
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = mod(me + 1 - k, r), recv = mod(me - k, r);
    int64_t tag = ring_tag(cm, step, g, r - 1 + k);
    if (k == 0) {
      ret = _tsr_insert_wire_pack(q->chunks[send], q->wire[send], fmt, q->chunk_keep[send], 1, prio);
      if (!ret) ret = send_chunk(cm, q->wire[send], next, tag, step);
    } else {
      ret = send_chunk(cm, q->tmp[send], next, tag, step); /* received in round k - 1 */
    }
    if (!ret) ret = recv_chunk(cm, q->tmp[recv], prev, tag, step);
    if (!ret) ret = _tsr_insert_wire_unpack(q->chunks[recv], q->tmp[recv], fmt, q->chunk_keep[recv], 0, prio);
  }
  return ret;
}

static int submit(struct _tsr_groups *gs, int g, int64_t step) {
  struct _tsr_group *gr = &gs->g[g];
  struct ring *q = gr->priv;
  int fmt = gs->ops->variant;
  starpu_data_unpartition_submit(gr->h, gr->nchild, gr->tensors, STARPU_MAIN_RAM);
  starpu_data_partition_submit(gr->h, q->r, q->chunks);
  int ret = fmt == WIRE_F32 ? ring_f32(gs->comm, q, g, step) : ring_half(gs->comm, q, fmt, g, step);
  starpu_data_unpartition_submit(gr->h, q->r, q->chunks, STARPU_MAIN_RAM);
  starpu_data_partition_submit(gr->h, gr->nchild, gr->tensors);
  if (ret) _tsr_error(TSR_ERR_RUNTIME, "gradient group %d, step %lld: posting the ring allreduce failed (%d)", g,
                      (long long)step, ret);
  return ret;
}

#define RING(fmt_name, fmt)                                                                                    \
  {.name = fmt_name, .impl = "ring", .variant = fmt, .check = check, .setup = setup, .teardown = teardown,      \
   .submit = submit, .wire_bytes = wire_bytes}
const struct _tsr_collective_ops _tsr_ring_f32 = RING("f32", WIRE_F32);
const struct _tsr_collective_ops _tsr_ring_bf16 = RING("bf16", TSR_WIRE_BF16);
const struct _tsr_collective_ops _tsr_ring_fp16 = RING("fp16", TSR_WIRE_FP16);

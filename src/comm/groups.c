/* Gradient groups over the contiguous gradient buffer and their ring allreduce as StarPU tasks:
 * every rank submits the same sends, receives and sums in the same order, so the order of
 * communication follows from the graph and needs no coordinator. Each group's reduction starts
 * when its last gradient is final and the group's updates wait only for it. */
#include <stdlib.h>
#include <string.h>
#include <starpu_mpi.h>

#include "comm/groups.h"
#include "convert.h"
#include "comm/nccl.h"
#include "trace/trace.h"
#include "train/trainer.h"
#include "runtime/error.h"

int _tsr_group_of(const tsr_trainer *t, int tensor) {
  for (int g = 0; g < t->ngroups; g++)
    if (tensor >= t->groups[g].first && tensor < t->groups[g].end) return g;
  return -1;
}

static size_t padded(size_t n) { return (n + 15) & ~(size_t)15; }

/* Trainable tensors in layout order, cut at layer boundaries once a group holds `bytes`. */
static int cut(tsr_trainer *t, long long bytes, int *starts) {
  int ng = 0;
  size_t acc = 0;
  int prev_layer = -1;
  for (int i = 0; i < t->ntensors; i++) {
    const struct _tsr_ptensor *p = &t->tensors[i];
    if (!p->trainable) continue;
    int boundary = p->layer != prev_layer && (bytes < 0 || acc >= (size_t)bytes);
    if (ng == 0 || boundary) {
      starts[ng++] = i;
      acc = 0;
    }
    acc += padded(p->n) * sizeof(float);
    prev_layer = p->layer;
  }
  return ng;
}

#define NOMEM(g) _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory for the gradient group of %zu floats", (g)->n)

/* Group 0 (lead = 1) also holds the control word at the start of the gradient buffer. */
static tsr_status register_group(tsr_trainer *t, struct _tsr_group *g, int last, int lead) {
  g->count = 0;
  g->end = last;
  for (int i = g->first; i < last; i++) g->count += t->tensors[i].trainable;
  g->nchild = g->count + lead;
  g->off = (size_t)(t->tensors[g->first].g - t->grads) - (lead ? TSR_CTL_FLOATS : 0);
  g->n = lead ? TSR_CTL_FLOATS : 0;
  for (int i = g->first; i < last; i++) g->n += t->tensors[i].trainable ? padded(t->tensors[i].n) : 0;
  if (g->n > UINT32_MAX) /* a StarPU vector's length is a uint32_t */
    return _tsr_error(TSR_ERR_ARG, "gradient group of %s .. %s: %zu floats, more than a StarPU vector holds (%u); "
                      "use a smaller group size", t->tensors[g->first].name, t->tensors[last - 1].name, g->n, UINT32_MAX);
  g->tensors = calloc(g->nchild, sizeof *g->tensors);
  g->tensor_len = calloc(g->nchild, sizeof *g->tensor_len);
  if (!g->tensors || !g->tensor_len) return NOMEM(g);
  if (lead) g->tensor_len[0] = TSR_CTL_FLOATS;
  for (int i = g->first, k = lead; i < last; i++)
    if (t->tensors[i].trainable) g->tensor_len[k++] = (uint32_t)padded(t->tensors[i].n);
  starpu_vector_data_register(&g->h, STARPU_MAIN_RAM, (uintptr_t)(t->grads + g->off), (uint32_t)g->n, sizeof(float));
  struct starpu_data_filter f = {.filter_func = starpu_vector_filter_list, .nchildren = (unsigned)g->nchild,
                                 .filter_arg_ptr = g->tensor_len};
  starpu_data_partition_plan(g->h, &f, g->tensors);
  if (lead) t->ctl = g->tensors[0];
  for (int i = g->first, k = lead; i < last; i++)
    if (t->tensors[i].trainable) t->tensors[i].hg = g->tensors[k++];
  if (t->size > 1) {
    int r = t->size;
    g->chunks = calloc(r, sizeof *g->chunks);
    g->chunk_len = calloc(r, sizeof *g->chunk_len);
    g->tmp = calloc(r, sizeof *g->tmp);
    g->tmpbuf = calloc(r, sizeof *g->tmpbuf);
    g->wire = calloc(r, sizeof *g->wire);
    g->wirebuf = calloc(r, sizeof *g->wirebuf);
    g->chunk_keep = calloc(r, sizeof *g->chunk_keep);
    if (!g->chunks || !g->chunk_len || !g->tmp || !g->tmpbuf || !g->wire || !g->wirebuf || !g->chunk_keep) return NOMEM(g);
    size_t start = 0;
    for (int c = 0; c < r; c++) {
      uint32_t len = (uint32_t)(g->n / r + ((size_t)c < g->n % r));
      g->chunk_len[c] = len;
      if (lead && start < TSR_CTL_FLOATS) /* the control word's part of this chunk stays float32 */
        g->chunk_keep[c] = (uint32_t)(TSR_CTL_FLOATS - start < len ? TSR_CTL_FLOATS - start : len);
      start += len;
      if (t->grad_reduce == TSR_REDUCE_F32) {
        g->tmpbuf[c] = malloc(((size_t)len + 1) * sizeof(float));
        if (!g->tmpbuf[c]) return NOMEM(g);
        g->tmp[c] = _tsr_register_floats(g->tmpbuf[c], len);
        continue;
      }
      size_t wn = (size_t)len + g->chunk_keep[c];
      g->tmpbuf[c] = malloc((wn + 2) * sizeof(uint16_t));
      g->wirebuf[c] = malloc((wn + 2) * sizeof(uint16_t));
      if (!g->tmpbuf[c] || !g->wirebuf[c]) return NOMEM(g);
      starpu_vector_data_register(&g->tmp[c], STARPU_MAIN_RAM, (uintptr_t)g->tmpbuf[c], (uint32_t)wn, sizeof(uint16_t));
      starpu_vector_data_register(&g->wire[c], STARPU_MAIN_RAM, (uintptr_t)g->wirebuf[c], (uint32_t)wn,
                                  sizeof(uint16_t));
    }
    struct starpu_data_filter fc = {.filter_func = starpu_vector_filter_list, .nchildren = (unsigned)r,
                                    .filter_arg_ptr = g->chunk_len};
    starpu_data_partition_plan(g->h, &fc, g->chunks);
  }
  starpu_data_partition_submit(g->h, g->nchild, g->tensors);
  return TSR_OK;
}

static void log_layout(const tsr_trainer *t, long long bytes) {
  if (t->rank != 0) return;
  _tsr_log(1, "gradient groups: %d (%s), reduced over %d rank(s) in %s", t->ngroups,
           bytes < 0 ? "one per layer" : "layers merged up to the byte threshold", t->size,
           tsr_reduce_precision_name(t->grad_reduce));
  for (int g = 0; g < t->ngroups; g++) {
    const struct _tsr_group *gr = &t->groups[g];
    _tsr_log(1, "  group %d: %6.1f KiB, tensors %s .. %s", g, gr->n * 4 / 1024.0, t->tensors[gr->first].name,
             t->tensors[gr->end - 1].name);
  }
}

tsr_status _tsr_groups_build(tsr_trainer *t, long long bytes) {
  int *starts = calloc(t->ntensors + 1, sizeof(int));
  if (!starts) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  t->ngroups = cut(t, bytes, starts);
  t->groups = calloc(t->ngroups ? t->ngroups : 1, sizeof *t->groups);
  if (!t->groups) {
    free(starts);
    return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  }
  for (int g = 0; g < t->ngroups; g++) {
    t->groups[g].first = starts[g];
    int last = g + 1 < t->ngroups ? starts[g + 1] : t->ntensors;
    tsr_status st = register_group(t, &t->groups[g], last, g == 0);
    if (st != TSR_OK) {
      free(starts);
      return st;
    }
  }
  free(starts);
  if (t->ngroups == 0) t->ctl = _tsr_register_floats(t->grads, TSR_CTL_FLOATS), t->ctl_own = 1;
  for (int g = 0; g < t->ngroups; g++)
    if (t->groups[g].n < (size_t)t->size)
      return _tsr_error(TSR_ERR_ARG, "gradient group %d has %zu values, fewer than the %d ranks", g, t->groups[g].n,
                        t->size);
  log_layout(t, bytes);
  return TSR_OK;
}

void _tsr_groups_destroy(tsr_trainer *t) {
  for (int g = 0; t->groups && g < t->ngroups; g++) {
    struct _tsr_group *gr = &t->groups[g];
    if (gr->h) {
      starpu_data_unpartition_submit(gr->h, gr->nchild, gr->tensors, STARPU_MAIN_RAM);
      starpu_data_partition_clean(gr->h, gr->nchild, gr->tensors);
      if (gr->chunks) starpu_data_partition_clean(gr->h, t->size, gr->chunks);
      starpu_data_unregister(gr->h);
    }
    for (int c = 0; gr->tmp && c < t->size; c++) {
      if (gr->tmp[c]) starpu_data_unregister(gr->tmp[c]);
      if (gr->wire && gr->wire[c]) starpu_data_unregister(gr->wire[c]);
      free(gr->tmpbuf[c]);
      if (gr->wirebuf) free(gr->wirebuf[c]);
    }
    free(gr->tensors), free(gr->tensor_len), free(gr->chunks), free(gr->chunk_len), free(gr->tmp), free(gr->tmpbuf);
    free(gr->wire), free(gr->wirebuf), free(gr->chunk_keep);
  }
  free(t->groups);
  if (t->ctl_own && t->ctl) starpu_data_unregister(t->ctl);
  t->ctl = NULL, t->ctl_own = 0;
  t->groups = NULL;
  t->ngroups = 0;
}

int tsr_trainer_num_groups(const tsr_trainer *t) { return t ? t->ngroups : 0; }

tsr_status tsr_trainer_group_info(const tsr_trainer *t, int g, int *first, int *count, size_t *bytes) {
  if (!t || g < 0 || g >= t->ngroups)
    return _tsr_error(TSR_ERR_ARG, "gradient group %d out of range [0, %d)", g, t ? t->ngroups : 0);
  if (first) *first = t->groups[g].first;
  if (count) *count = t->groups[g].end - t->groups[g].first;
  if (bytes) *bytes = t->groups[g].n * sizeof(float);
  return TSR_OK;
}

/* Detached send/receive of one chunk; the trace (when on) records its post and completion. */
static int send_chunk(starpu_data_handle_t h, int peer, starpu_mpi_tag_t tag, int prio, int64_t step) {
  void *a = _tsr_trace_xfer_arg(step, peer, starpu_data_get_size(h), tag, 1);
  return starpu_mpi_isend_detached_prio(h, peer, tag, prio, MPI_COMM_WORLD, a ? _tsr_trace_xfer_done : NULL, a);
}

static int recv_chunk(starpu_data_handle_t h, int peer, starpu_mpi_tag_t tag, int64_t step) {
  void *a = _tsr_trace_xfer_arg(step, peer, starpu_data_get_size(h), tag, 0);
  return starpu_mpi_irecv_detached(h, peer, tag, MPI_COMM_WORLD, a ? _tsr_trace_xfer_done : NULL, a);
}

/* Tags are unique per (step, group, ring step) among messages in flight. */
static starpu_mpi_tag_t ring_tag(int64_t step, int g, int k) {
  return ((((starpu_mpi_tag_t)(step & 0xFFFFF)) * 4096 + g) * 2048) + k;
}

/* Bytes chunk c takes on the wire. */
static int64_t wire_bytes(const tsr_trainer *t, const struct _tsr_group *gr, int c) {
  if (t->grad_reduce == TSR_REDUCE_F32) return (int64_t)gr->chunk_len[c] * 4;
  return ((int64_t)gr->chunk_len[c] + gr->chunk_keep[c]) * 2;
}

/* The ring in float32: chunks travel as they are. */
static int ring_f32(tsr_trainer *t, struct _tsr_group *gr, int g, int64_t step) {
  int r = t->size, me = t->rank, next = (me + 1) % r, prev = (me + r - 1) % r, prio = STARPU_MAX_PRIO, ret = 0;
  /* Reduce-scatter: after r-1 rounds this rank holds the full sum of chunk (me + 1) mod r. */
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = ((me - k) % r + r) % r, recv = ((me - k - 1) % r + r) % r;
    ret = send_chunk(gr->chunks[send], next, ring_tag(step, g, k), prio, step);
    if (!ret) ret = recv_chunk(gr->tmp[recv], prev, ring_tag(step, g, k), step);
    if (!ret) ret = _tsr_insert_accumulate_prio(gr->chunks[recv], gr->tmp[recv], "allreduce_sum", prio);
    t->reduce_bytes += wire_bytes(t, gr, send);
  }
  /* Allgather: pass the reduced chunks around the ring. */
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = ((me + 1 - k) % r + r) % r, recv = ((me - k) % r + r) % r;
    starpu_mpi_tag_t tag = ring_tag(step, g, r - 1 + k);
    ret = send_chunk(gr->chunks[send], next, tag, prio, step);
    if (!ret) ret = recv_chunk(gr->chunks[recv], prev, tag, step);
    t->reduce_bytes += wire_bytes(t, gr, send);
  }
  return ret;
}

/* The same ring with chunks packed to bf16/fp16 for each hop and summed in float32 on receipt. In
 * the allgather the owner rounds its reduced chunk as it packs it and the others unpack the same
 * halves, then forward what they received unchanged: every rank ends with identical values. */
static int ring_half(tsr_trainer *t, struct _tsr_group *gr, int g, int64_t step) {
  int r = t->size, me = t->rank, next = (me + 1) % r, prev = (me + r - 1) % r, prio = STARPU_MAX_PRIO, ret = 0;
  int fmt = t->grad_reduce;
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = ((me - k) % r + r) % r, recv = ((me - k - 1) % r + r) % r;
    ret = _tsr_insert_wire_pack(gr->chunks[send], gr->wire[send], fmt, gr->chunk_keep[send], 0, prio);
    if (!ret) ret = send_chunk(gr->wire[send], next, ring_tag(step, g, k), prio, step);
    if (!ret) ret = recv_chunk(gr->tmp[recv], prev, ring_tag(step, g, k), step);
    if (!ret) ret = _tsr_insert_wire_unpack(gr->chunks[recv], gr->tmp[recv], fmt, gr->chunk_keep[recv], 1, prio);
    t->reduce_bytes += wire_bytes(t, gr, send);
  }
  for (int k = 0; !ret && k < r - 1; k++) {
    int send = ((me + 1 - k) % r + r) % r, recv = ((me - k) % r + r) % r;
    starpu_mpi_tag_t tag = ring_tag(step, g, r - 1 + k);
    if (k == 0) {
      ret = _tsr_insert_wire_pack(gr->chunks[send], gr->wire[send], fmt, gr->chunk_keep[send], 1, prio);
      if (!ret) ret = send_chunk(gr->wire[send], next, tag, prio, step);
    } else {
      ret = send_chunk(gr->tmp[send], next, tag, prio, step); /* received in round k - 1 */
    }
    if (!ret) ret = recv_chunk(gr->tmp[recv], prev, tag, step);
    if (!ret) ret = _tsr_insert_wire_unpack(gr->chunks[recv], gr->tmp[recv], fmt, gr->chunk_keep[recv], 0, prio);
    t->reduce_bytes += wire_bytes(t, gr, send);
  }
  return ret;
}

int _tsr_group_allreduce(tsr_trainer *t, int g, int64_t step) {
  if (t->size < 2 || t->skip_reduce) return 0;
  if (t->nccl) return _tsr_nccl_allreduce(t, g);
  struct _tsr_group *gr = &t->groups[g];
  starpu_data_unpartition_submit(gr->h, gr->nchild, gr->tensors, STARPU_MAIN_RAM);
  starpu_data_partition_submit(gr->h, t->size, gr->chunks);
  int ret = t->grad_reduce == TSR_REDUCE_F32 ? ring_f32(t, gr, g, step) : ring_half(t, gr, g, step);
  starpu_data_unpartition_submit(gr->h, t->size, gr->chunks, STARPU_MAIN_RAM);
  starpu_data_partition_submit(gr->h, gr->nchild, gr->tensors);
  if (ret) _tsr_error(TSR_ERR_RUNTIME, "gradient group %d, step %lld: posting the ring allreduce failed (%d)", g,
                      (long long)step, ret);
  return ret;
}

int64_t tsr_trainer_reduce_bytes(const tsr_trainer *t) { return t ? t->reduce_bytes : 0; }

static const char *const reduce_names[] = {[TSR_REDUCE_F32] = "f32", [TSR_REDUCE_BF16] = "bf16",
                                           [TSR_REDUCE_FP16] = "fp16"};

const char *tsr_reduce_precision_name(int p) {
  return p >= 0 && p <= TSR_REDUCE_FP16 ? reduce_names[p] : "unknown";
}

tsr_status tsr_reduce_precision_parse(const char *name, int *p) {
  for (int i = 0; name && p && i <= TSR_REDUCE_FP16; i++)
    if (strcmp(name, reduce_names[i]) == 0) return *p = i, TSR_OK;
  return _tsr_error(TSR_ERR_ARG, "gradient reduction precision '%s' (f32, bf16 or fp16)", name ? name : "(null)");
}

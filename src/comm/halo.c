/* Halo exchanges, block gathers and ordered group sums of spatially split layers (halo.h): box
 * copies (codelets/box_copy.c) around detached StarPU-MPI messages tagged by (group, step, layer,
 * slice, message). */
#include <stdlib.h>

#include "comm/halo.h"
#include "comm/p2p.h"
#include "runtime/submit.h"
#include "runtime/communicator.h"
#include "runtime/error.h"

/* Message kinds in tags: forward halo slabs 0..5 (axis * 2 + direction, direction 0 towards the
 * higher member), backward 8..13, gathers 16, group sums 32 + kind. */
enum { MSG_FWD = 0, MSG_BWD = 8, MSG_GATHER = 16, MSG_SUM = 32 };

static int failed(int ret, const char *what, const char *name) {
  if (ret) _tsr_error(TSR_ERR_RUNTIME, "layer '%s': %s failed (%d)", name, what, ret);
  return ret;
}

static int64_t ext(const struct _tsr_halo *h, int a) { return (int64_t)h->lo[a] + h->own[a] + h->hi[a]; }

int64_t _tsr_halo_count(const struct _tsr_halo *h) {
  int64_t n = h->outer;
  for (int a = 0; a < h->nd; a++) n *= ext(h, a);
  return n;
}

/* The slab of axis a on side s (0 below, 1 above) in halo'd coordinates: the part of the block
 * that neighbour s needs (send = 1) or the halo that neighbour s fills (send = 0). Axes before a
 * span their halos, later ones only the block. */
static struct _tsr_box_desc slab(const struct _tsr_halo *h, int a, int s, int send) {
  struct _tsr_box_desc d = {.outer = h->outer, .nd = h->nd, .scale = 1.0f};
  for (int b = 0; b < h->nd; b++) {
    d.src_ext[b] = (int)ext(h, b);
    d.src_lo[b] = b < a ? 0 : h->lo[b];
    d.len[b] = b < a ? (int)ext(h, b) : h->own[b];
  }
  if (send)
    d.src_lo[a] = s ? h->own[a] : h->lo[a], d.len[a] = s ? h->lo[a] : h->hi[a];
  else
    d.src_lo[a] = s ? h->lo[a] + h->own[a] : 0, d.len[a] = s ? h->hi[a] : h->lo[a];
  for (int b = 0; b < h->nd; b++) d.dst_ext[b] = d.len[b], d.dst_lo[b] = 0;
  return d;
}

/* The same box the other way: from a contiguous slab buffer into the halo'd array. */
static struct _tsr_box_desc unslab(struct _tsr_box_desc d, int add) {
  for (int b = 0; b < d.nd; b++) {
    int e = d.src_ext[b], lo = d.src_lo[b];
    d.src_ext[b] = d.dst_ext[b], d.src_lo[b] = 0;
    d.dst_ext[b] = e, d.dst_lo[b] = lo;
  }
  d.add = add;
  return d;
}

static int64_t slab_count(const struct _tsr_box_desc *d) {
  int64_t n = d->outer;
  for (int b = 0; b < d->nd; b++) n *= d->len[b];
  return n;
}

tsr_status _tsr_halo_init(struct _tsr_halo *h) {
  for (int a = 0; a < h->nd; a++)
    for (int s = 0; s < 2; s++) {
      h->out[a][s] = h->in[a][s] = NULL, h->outbuf[a][s] = h->inbuf[a][s] = NULL;
      if (h->nb[a][s] < 0) continue;
      struct _tsr_box_desc o = slab(h, a, s, 1), i = slab(h, a, s, 0);
      int64_t no = slab_count(&o), ni = slab_count(&i); /* 0 when the kernel reaches one way only */
      if ((no && !(h->outbuf[a][s] = malloc((size_t)no * sizeof(float)))) ||
          (ni && !(h->inbuf[a][s] = malloc((size_t)ni * sizeof(float)))))
        return _tsr_error(TSR_ERR_NOMEM, "halo buffers: out of memory");
      if (no) h->out[a][s] = _tsr_register_floats(h->outbuf[a][s], (size_t)no);
      if (ni) h->in[a][s] = _tsr_register_floats(h->inbuf[a][s], (size_t)ni);
    }
  return TSR_OK;
}

void _tsr_halo_free(struct _tsr_halo *h) {
  for (int a = 0; a < h->nd; a++)
    for (int s = 0; s < 2; s++) {
      if (h->out[a][s]) starpu_data_unregister(h->out[a][s]);
      if (h->in[a][s]) starpu_data_unregister(h->in[a][s]);
      free(h->outbuf[a][s]), free(h->inbuf[a][s]);
      h->out[a][s] = h->in[a][s] = NULL, h->outbuf[a][s] = h->inbuf[a][s] = NULL;
    }
}

static int64_t tag(const struct _tsr_halo *h, int64_t step, int base, int a, int dir) {
  return _tsr_p2p_layer_tag(h->comm, step, h->layer, h->slice, base + 2 * a + dir);
}

/* One axis of an exchange. Forward, for each neighbour s: the slab it needs is packed into out[a][s]
 * and sent, and in[a][s] is received into the halo. Backward the other way: the halo slab is packed
 * into in[a][s] and sent back, and out[a][s] is received and added to the boundary slab. */
static int exchange_axis(const struct _tsr_halo *h, int a, starpu_data_handle_t arr, int fwd, int64_t step,
                         const char *name) {
  int base = fwd ? MSG_FWD : MSG_BWD, ret = 0;
  for (int s = 0; !ret && s < 2; s++) {
    starpu_data_handle_t go = fwd ? h->out[a][s] : h->in[a][s], come = fwd ? h->in[a][s] : h->out[a][s];
    /* direction 0 travels towards the higher member: what comes from side s travels towards this one */
    if (come)
      ret = failed(_tsr_p2p_recv(h->comm, come, h->nb[a][s], tag(h, step, base, a, s), step), "halo receive", name);
    if (!go || ret) continue;
    struct _tsr_box_desc pack = slab(h, a, s, fwd);
    ret = _tsr_insert_box_copy(&pack, arr, go, name);
    if (!ret)
      ret = failed(_tsr_p2p_send(h->comm, go, h->nb[a][s], tag(h, step, base, a, 1 - s), step), "halo send", name);
  }
  for (int s = 0; !ret && s < 2; s++) {
    starpu_data_handle_t come = fwd ? h->in[a][s] : h->out[a][s];
    if (!come) continue;
    struct _tsr_box_desc put = unslab(slab(h, a, s, !fwd), !fwd);
    ret = _tsr_insert_box_copy(&put, come, arr, name);
  }
  return ret;
}

/* The block inside the halo'd array. */
static struct _tsr_box_desc middle(const struct _tsr_halo *h) {
  struct _tsr_box_desc d = {.outer = h->outer, .nd = h->nd, .scale = 1.0f};
  for (int a = 0; a < h->nd; a++) {
    d.src_ext[a] = (int)ext(h, a), d.src_lo[a] = h->lo[a], d.len[a] = h->own[a];
    d.dst_ext[a] = h->own[a], d.dst_lo[a] = 0;
  }
  return d;
}

int _tsr_halo_forward(const struct _tsr_halo *h, starpu_data_handle_t block, starpu_data_handle_t halo, int64_t step,
                      const char *name) {
  struct _tsr_box_desc place = unslab(middle(h), 0);
  place.fill = 1, place.value = h->pad;
  int ret = _tsr_insert_box_copy(&place, block, halo, name);
  for (int a = 0; !ret && a < h->nd; a++) ret = exchange_axis(h, a, halo, 1, step, name);
  return ret;
}

int _tsr_halo_backward(const struct _tsr_halo *h, starpu_data_handle_t dhalo, starpu_data_handle_t dblock, int64_t step,
                       const char *name) {
  int ret = 0;
  for (int a = h->nd - 1; !ret && a >= 0; a--) ret = exchange_axis(h, a, dhalo, 0, step, name);
  struct _tsr_box_desc take = middle(h);
  return ret ? ret : _tsr_insert_box_copy(&take, dhalo, dblock, name);
}

/* Edge slabs. Regions are boxes in block coordinates: the block is [0, own) along each axis, its
 * halos [-lo, 0) and [own, own + hi). An edge axis has halos; the plan gives them equal widths. */
struct region {
  int lo[TSR_BOX_AXES], len[TSR_BOX_AXES];
};

static int edge_axis(const struct _tsr_halo *h, int a) { return h->lo[a] > 0 || h->hi[a] > 0; }

/* Along axis b: the block, or with its halos where `span`. */
static void along(const struct _tsr_halo *h, struct region *r, int b, int span) {
  r->lo[b] = span ? -h->lo[b] : 0, r->len[b] = span ? (int)ext(h, b) : h->own[b];
}

/* The block, and edge slab (a, side): along a its halo and the lo + hi block planes next to it, along
 * earlier edge axes their halos too, along the others the block. */
static struct region block_region(const struct _tsr_halo *h) {
  struct region r;
  for (int b = 0; b < h->nd; b++) along(h, &r, b, 0);
  return r;
}

static struct region edge_region(const struct _tsr_halo *h, int a, int side) {
  struct region r;
  for (int b = 0; b < h->nd; b++) along(h, &r, b, b < a && edge_axis(h, b));
  int lo = h->lo[a], hi = h->hi[a];
  r.lo[a] = side ? h->own[a] - lo - hi : -lo, r.len[a] = (side ? hi : lo) + lo + hi;
  return r;
}

/* The message of axis a to or from neighbour `side`: the block's planes it needs (send) or the halo
 * it fills (receive), spanning the halos of earlier axes (as slab() does). */
static struct region msg_region(const struct _tsr_halo *h, int a, int side, int send) {
  struct region r;
  for (int b = 0; b < h->nd; b++) along(h, &r, b, b < a && edge_axis(h, b));
  if (send)
    r.lo[a] = side ? h->own[a] - h->lo[a] : 0, r.len[a] = side ? h->lo[a] : h->hi[a];
  else
    r.lo[a] = side ? h->own[a] : -h->lo[a], r.len[a] = side ? h->hi[a] : h->lo[a];
  return r;
}

/* Box r from a buffer holding region `from` into one holding region `to` (added where `add`). */
static int xfer(const struct _tsr_halo *h, struct region r, struct region from, starpu_data_handle_t src,
                struct region to, starpu_data_handle_t dst, int add, const char *name) {
  struct _tsr_box_desc d = {.outer = h->outer, .nd = h->nd, .scale = 1.0f, .add = add};
  for (int b = 0; b < h->nd; b++) {
    d.src_ext[b] = from.len[b], d.src_lo[b] = r.lo[b] - from.lo[b];
    d.dst_ext[b] = to.len[b], d.dst_lo[b] = r.lo[b] - to.lo[b];
    d.len[b] = r.len[b];
  }
  return _tsr_insert_box_copy(&d, src, dst, name);
}

/* Region r (block along axes >= a, possibly halos along earlier edge axes) between buffer `buf`
 * (holding region br) and where its parts live: the block, or for a part in the halos of some
 * earlier axes the edge slab of the last of them on that side (which spans the halos before it).
 * gather: the parts into buf; else buf's parts added to them, skipping parts that no buffer holds
 * (the gradient of padding). */
static int route(const struct _tsr_halo *h, int a, struct region r, starpu_data_handle_t buf, struct region br,
                 starpu_data_handle_t block, const starpu_data_handle_t e[][2], int gather, const char *name) {
  int axes[TSR_BOX_AXES], k = 0, combos = 1, ret = 0;
  for (int b = 0; b < a; b++)
    if (edge_axis(h, b)) axes[k++] = b, combos *= 3;
  for (int c = 0; c < combos && !ret; c++) {
    struct region p = r;
    int top = -1, top_side = 0, code = c, empty = 0;
    for (int i = 0; i < k; i++, code /= 3) { /* part 0: below the block, 1: in it, 2: above */
      int b = axes[i], part = code % 3;
      int plo = part == 0 ? -h->lo[b] : part == 1 ? 0 : h->own[b];
      int phi = part == 0 ? 0 : part == 1 ? h->own[b] : h->own[b] + h->hi[b];
      int lo = r.lo[b] > plo ? r.lo[b] : plo, hi = r.lo[b] + r.len[b] < phi ? r.lo[b] + r.len[b] : phi;
      if (hi <= lo) empty = 1;
      p.lo[b] = lo, p.len[b] = hi - lo;
      if (part != 1) top = b, top_side = part == 2;
    }
    if (empty) continue;
    starpu_data_handle_t place = top < 0 ? block : e[top][top_side];
    struct region pr = top < 0 ? block_region(h) : edge_region(h, top, top_side);
    if (!place) continue;
    ret = gather ? xfer(h, p, pr, place, br, buf, 0, name) : xfer(h, p, br, buf, pr, place, 1, name);
  }
  return ret;
}

int64_t _tsr_halo_edge_count(const struct _tsr_halo *h, int a, int side) {
  struct region r = edge_region(h, a, side);
  int64_t n = h->outer;
  for (int b = 0; b < h->nd; b++) n *= r.len[b];
  return n;
}

int _tsr_halo_edges_forward(const struct _tsr_halo *h, starpu_data_handle_t block, const starpu_data_handle_t edge[][2],
                            int64_t step, const char *name) {
  int ret = 0;
  for (int a = 0; !ret && a < h->nd; a++) {
    if (!edge_axis(h, a)) continue;
    for (int s = 0; !ret && s < 2; s++) { /* as exchange_axis: side s's neighbour needs planes next to it */
      if (h->nb[a][s] < 0) continue;
      if (h->in[a][s])
        ret = failed(_tsr_p2p_recv(h->comm, h->in[a][s], h->nb[a][s], tag(h, step, MSG_FWD, a, s), step),
                     "halo receive", name);
      if (ret || !h->out[a][s]) continue;
      struct region m = msg_region(h, a, s, 1);
      ret = route(h, a, m, h->out[a][s], m, block, edge, 1, name);
      if (!ret)
        ret = failed(_tsr_p2p_send(h->comm, h->out[a][s], h->nb[a][s], tag(h, step, MSG_FWD, a, 1 - s), step),
                     "halo send", name);
    }
    for (int s = 0; !ret && s < 2; s++) {
      struct region e = edge_region(h, a, s), mine = e;
      int w = s ? h->hi[a] : h->lo[a];
      mine.lo[a] = s ? e.lo[a] : 0, mine.len[a] = e.len[a] - w; /* the block's planes in the slab */
      ret = route(h, a, mine, edge[a][s], e, block, edge, 1, name);
      if (!ret && h->nb[a][s] >= 0 && h->in[a][s])
        ret = xfer(h, msg_region(h, a, s, 0), msg_region(h, a, s, 0), h->in[a][s], e, edge[a][s], 0, name);
    }
  }
  return ret;
}

int _tsr_halo_edges_backward(const struct _tsr_halo *h, const starpu_data_handle_t dedge[][2],
                             starpu_data_handle_t dblock, int64_t step, const char *name) {
  int ret = 0;
  for (int a = h->nd - 1; !ret && a >= 0; a--) {
    if (!edge_axis(h, a)) continue;
    for (int s = 0; !ret && s < 2; s++) {
      if (h->nb[a][s] < 0) continue;
      if (h->out[a][s])
        ret = failed(_tsr_p2p_recv(h->comm, h->out[a][s], h->nb[a][s], tag(h, step, MSG_BWD, a, s), step),
                     "halo receive", name);
      if (ret || !h->in[a][s]) continue;
      struct region m = msg_region(h, a, s, 0);
      ret = xfer(h, m, edge_region(h, a, s), dedge[a][s], m, h->in[a][s], 0, name);
      if (!ret)
        ret = failed(_tsr_p2p_send(h->comm, h->in[a][s], h->nb[a][s], tag(h, step, MSG_BWD, a, 1 - s), step),
                     "halo send", name);
    }
    for (int s = 0; !ret && s < 2; s++) {
      if (h->nb[a][s] < 0 || !h->out[a][s]) continue;
      struct region m = msg_region(h, a, s, 1);
      ret = route(h, a, m, h->out[a][s], m, dblock, dedge, 0, name);
    }
  }
  return ret;
}

int _tsr_gather_blocks(const struct _tsr_comm *comm, const struct _tsr_box_desc *place, starpu_data_handle_t block,
                       const starpu_data_handle_t *recv, starpu_data_handle_t whole, int layer, int slice, int64_t step,
                       const char *name) {
  int me = comm->index, ret = 0;
  int64_t t = _tsr_p2p_layer_tag(comm, step, layer, slice, MSG_GATHER);
  for (int q = 0; !ret && q < comm->size; q++)
    if (q != me) {
      ret = failed(_tsr_p2p_recv(comm, recv[q], q, t, step), "gather receive", name);
      if (!ret) ret = failed(_tsr_p2p_send(comm, block, q, t, step), "gather send", name);
    }
  for (int q = 0; !ret && q < comm->size; q++)
    ret = _tsr_insert_box_copy(&place[q], q == me ? block : recv[q], whole, name);
  return ret;
}

int _tsr_group_sum(const struct _tsr_comm *comm, starpu_data_handle_t acc, const starpu_data_handle_t *recv, int layer,
                   int kind, int64_t step, const char *name) {
  int me = comm->index, ret = 0;
  int64_t t = _tsr_p2p_layer_tag(comm, step, layer, 0, MSG_SUM + kind);
  starpu_data_handle_t parts[comm->size];
  for (int q = 0; !ret && q < comm->size; q++) {
    parts[q] = q == me ? acc : recv[q];
    if (q == me) continue;
    ret = failed(_tsr_p2p_recv(comm, recv[q], q, t, step), "group sum receive", name);
    if (!ret) ret = failed(_tsr_p2p_send(comm, acc, q, t, step), "group sum send", name);
  }
  return ret ? ret : _tsr_insert_sum_doubles(comm->size, me, parts, name);
}

/* Spatial partitioning in the trainer: the plan (which layers run on blocks, their halos and
 * gathers; shapes that cannot be split are refused naming the layer), the spatial group and the
 * replicas, the halo and gather buffers, and each layer's view of its blocks. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "train/trainer.h"
#include "runtime/error.h"

int _tsr_spatial_extents(const struct _tsr_layer *L, int *ext) {
  if (L->d > 0) {
    ext[0] = L->d, ext[1] = L->h, ext[2] = L->w;
    return 3;
  }
  ext[0] = L->h, ext[1] = L->w;
  return 2;
}

/* The shape of c channels of extents ext along nd axes ((D,) H, W). */
static struct _tsr_chw chw(int c, int nd, const int *ext) {
  return nd == 3 ? (struct _tsr_chw){c, ext[1], ext[2], ext[0]} : (struct _tsr_chw){c, ext[0], ext[1], 0};
}

static int64_t chw_size(const struct _tsr_chw *s) { return (int64_t)s->c * _tsr_chw_depth(s) * s->h * s->w; }

static const char *axis_name(int nd, int a) {
  static const char *const names[TSR_BOX_AXES] = {"depth", "height", "width"};
  return names[TSR_BOX_AXES - nd + a];
}

/* Kernel, stride, padding and dilation of a window layer along spatial axis a (of nd). */
static void window(tsr_layer_spec *s, int nd, int a, int *k, int *st, int **pad, int *dil) {
  switch (TSR_BOX_AXES - nd + a) {
  case 0: *k = s->kernel_d, *st = s->stride_d, *pad = &s->pad_d, *dil = s->dilation_d; break;
  case 1: *k = s->kernel_h, *st = s->stride_h, *pad = &s->pad_h, *dil = s->dilation_h; break;
  default: *k = s->kernel_w, *st = s->stride_w, *pad = &s->pad_w, *dil = s->dilation_w;
  }
}

void _tsr_spatial_coords(int nd, const int *grid, int part, int *coord) {
  for (int a = nd - 1; a >= 0; a--) coord[a] = part % grid[a], part /= grid[a];
}

int _tsr_spatial_neighbour(int nd, const int *grid, int part, int a, int dir) {
  int coord[TSR_BOX_AXES], stride = 1;
  _tsr_spatial_coords(nd, grid, part, coord);
  for (int b = a + 1; b < nd; b++) stride *= grid[b];
  int c = coord[a] + dir;
  return c < 0 || c >= grid[a] ? -1 : part + dir * stride;
}

/* Halos of a window layer whose input blocks have n values along axis a: the block of outputs
 * [b m, (b + 1) m), m = n / stride, reads inputs [b n - pad, (b + 1) n - stride - pad + (k - 1) dil]. */
static tsr_status plan_window(const struct _tsr_layer *L, int nd, const int *grid, const int *in_own,
                              const int *out_ext, const int *in_ext, struct _tsr_sp_layer *P) {
  P->window = 1;
  P->spec = L->spec;
  for (int a = 0; a < nd; a++) {
    int k, s, d, *pad;
    window(&P->spec, nd, a, &k, &s, &pad, &d);
    if (grid[a] == 1) continue;
    int n = in_own[a], lo = *pad, hi = (k - 1) * d - *pad - s + 1;
    if (hi < 0) hi = 0;
    if (n % s || (int64_t)out_ext[a] * s != in_ext[a] || (lo + n + hi - (k - 1) * d - 1) / s + 1 != n / s)
      return _tsr_error(TSR_ERR_SHAPE,
                        "%s '%s': %s %d in %d blocks of %d with kernel %d, stride %d, padding %d: the blocks' "
                        "outputs do not align (each block must be a multiple of the stride and the output %d / %d)",
                        L->ops->name, L->name, axis_name(nd, a), in_ext[a], grid[a], n, k, s, *pad, in_ext[a], s);
    if (lo > n || hi > n)
      return _tsr_error(TSR_ERR_SHAPE, "%s '%s': halos of %d and %d along %s exceed its blocks of %d", L->ops->name,
                        L->name, lo, hi, axis_name(nd, a), n);
    P->lo[a] = lo, P->hi[a] = hi, *pad = 0;
  }
  int ext[TSR_BOX_AXES] = {0, 0, 0};
  for (int a = 0; a < nd; a++) ext[a] = P->lo[a] + in_own[a] + P->hi[a];
  P->in = chw(P->in.c, nd, ext);
  return TSR_OK;
}

/* How a window layer with halos P->lo / P->hi runs: on the block itself where it has none
 * (direct); from the block and two edge slabs per axis with halos where its entry can
 * (split_edges), the halos have equal widths with stride 1 along each such axis, the blocks there
 * have more than 2 lo planes (so the interior has outputs of its own), on CPU workers only (the CUDA
 * kernels take whole buffers), and the slabs with their gradients take no more memory than a halo'd
 * copy and its gradient; else on a halo'd copy. Slab (a, side) has 3 lo planes along a, the block
 * and its halos along earlier axes with halos, the block along the others (comm/halo.h). */
static void plan_edges(const struct _tsr_layer *L, int nd, const int *grid, const int *coord, const int *in_own,
                       struct _tsr_sp_layer *P) {
  int axes = 0, ok = L->ops->split_edges && !(starpu_is_initialized() && starpu_cuda_worker_get_count() > 0);
  int64_t copy = 2 * (int64_t)P->in.c, slabs = 0;
  for (int a = 0; a < nd; a++) {
    copy *= P->lo[a] + in_own[a] + P->hi[a];
    if (!P->lo[a] && !P->hi[a]) continue;
    int k, st, dil, *pad;
    window(&P->spec, nd, a, &k, &st, &pad, &dil);
    axes++, ok = ok && P->lo[a] == P->hi[a] && st == 1 && in_own[a] > 2 * P->lo[a];
  }
  if (axes == 0) {
    P->direct = 1;
    return;
  }
  if (!ok) return;
  for (int a = 0; a < nd; a++) {
    if (!P->lo[a]) continue;
    int64_t plane = P->in.c;
    for (int b = 0; b < nd; b++)
      if (b != a) plane *= b < a && P->lo[b] ? in_own[b] + 2 * P->lo[b] : in_own[b];
    for (int side = 0; side < 2; side++) {
      int c = coord[a] + (side ? 1 : -1);
      P->edge_len[a][side] = plane * 3 * P->lo[a];
      P->edge_nb[a][side] = c >= 0 && c < grid[a];
      P->dedge_len[a][side] = P->edge_nb[a][side] ? P->edge_len[a][side] : 0;
      slabs += P->edge_len[a][side] + P->dedge_len[a][side];
    }
  }
  if (slabs <= copy)
    P->edges = 1;
  else
    memset(P->edge_len, 0, sizeof P->edge_len), memset(P->dedge_len, 0, sizeof P->dedge_len),
        memset(P->edge_nb, 0, sizeof P->edge_nb);
}

/* An upscaling layer (TSR_SPATIAL_UPSCALE) along split axis a: output position o comes from input
 * o / f alone when its windows do not overlap (stride f, effective kernel at most f, no padding), so
 * a block of outputs is f times its block of inputs and needs nothing from its neighbours. */
static tsr_status plan_upscale(const struct _tsr_layer *L, int nd, int a, int in_ext, int out_ext) {
  tsr_layer_spec s = L->spec;
  int k = 1, st = s.scale_factor, d = 1, *pad = NULL, none = 0;
  if (st <= 0) window(&s, nd, a, &k, &st, &pad, &d);
  else pad = &none;
  int reach = (k - 1) * d + 1;
  if (st <= 0 || *pad != 0 || reach > st || (int64_t)in_ext * st != out_ext)
    return _tsr_error(TSR_ERR_SHAPE,
                      "%s '%s': %s %d from %d with kernel %d, stride %d, padding %d, dilation %d: a split needs "
                      "windows that do not overlap (stride = output / input, kernel at most the stride, no padding)",
                      L->ops->name, L->name, axis_name(nd, a), out_ext, in_ext, k, st, *pad, d);
  return TSR_OK;
}

tsr_status _tsr_spatial_plan(const tsr_model *m, int nd, const int *grid, int part, struct _tsr_sp_layer *out) {
  int coord[TSR_BOX_AXES];
  _tsr_spatial_coords(nd, grid, part, coord);
  for (int l = 0; l < m->n; l++) {
    const struct _tsr_layer *L = &m->layers[l];
    struct _tsr_sp_layer *P = &out[l];
    memset(P, 0, sizeof *P);
    int ext[TSR_BOX_AXES], in_ext[TSR_BOX_AXES], lnd = _tsr_spatial_extents(L, ext);
    P->out = (struct _tsr_chw){L->c, L->h, L->w, L->d};
    int nsplit = 0;
    for (int k = 0; k < L->ninputs; k++) nsplit += out[L->inputs[k]].split;
    if (L->spec.kind != TSR_LAYER_INPUT && nsplit == 0) continue;
    if (L->spec.kind != TSR_LAYER_INPUT && L->ops->spatial == TSR_SPATIAL_WHOLE) {
      if (L->ninputs != 1)
        return _tsr_error(TSR_ERR_SHAPE, "%s '%s' needs whole samples: only layers of one input gather split ones",
                          L->ops->name, L->name);
      const struct _tsr_layer *I = &m->layers[L->inputs[0]];
      P->gather = 1, P->in = (struct _tsr_chw){I->c, I->h, I->w, I->d};
      continue;
    }
    if (lnd != nd)
      return _tsr_error(TSR_ERR_SHAPE, "%s '%s': spatial split over %d axes of a layer with %d", L->ops->name, L->name,
                        nd, lnd);
    if (nsplit != L->ninputs)
      return _tsr_error(TSR_ERR_SHAPE, "%s '%s' has spatially split and whole inputs", L->ops->name, L->name);
    for (int a = 0; a < nd; a++)
      if (ext[a] % grid[a])
        return _tsr_error(TSR_ERR_SHAPE, "%s '%s': output %s %d does not split into %d equal blocks", L->ops->name,
                          L->name, axis_name(nd, a), ext[a], grid[a]);
    P->split = 1;
    for (int a = 0; a < nd; a++) P->own[a] = ext[a] / grid[a], P->first[a] = coord[a] * P->own[a];
    P->out = chw(L->c, nd, P->own);
    if (L->ops->spatial == TSR_SPATIAL_UPSCALE) {
      _tsr_spatial_extents(&m->layers[L->inputs[0]], in_ext);
      for (int a = 0; a < nd; a++)
        if (grid[a] > 1) TSR_TRY(plan_upscale(L, nd, a, in_ext[a], ext[a]));
      continue;
    }
    if (L->ops->spatial != TSR_SPATIAL_WINDOW && L->ops->spatial != TSR_SPATIAL_WINDOW_MAX) continue;
    const struct _tsr_layer *I = &m->layers[L->inputs[0]];
    _tsr_spatial_extents(I, in_ext);
    P->in.c = I->c;
    TSR_TRY(plan_window(L, nd, grid, out[L->inputs[0]].own, ext, in_ext, P));
    plan_edges(L, nd, grid, coord, out[L->inputs[0]].own, P);
  }
  return TSR_OK; /* a split output is gathered whole for the loss (_tsr_spatial_output) */
}

#define ALLOC(ptr, n) ((ptr) = calloc((size_t)(n), sizeof *(ptr)))

static float *zfloats(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* Slice s's edge slabs (zeros: padding where no neighbour sends a halo) and their gradients. */
static tsr_status edge_buffers(struct _tsr_sp_layer *P, int nd, int s, int n, const char *name) {
  for (int a = 0; a < nd; a++)
    for (int side = 0; side < 2 && P->edge_len[a][0]; side++) {
      int64_t e = n * P->edge_len[a][side], de = n * P->dedge_len[a][side];
      if (!(P->edgebuf[a][side][s] = zfloats(e)) || (de && !(P->dedgebuf[a][side][s] = zfloats(de))))
        return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory for its edge slabs", name);
      P->edge[a][side][s] = _tsr_register_floats(P->edgebuf[a][side][s], (size_t)e);
      if (de) P->dedge[a][side][s] = _tsr_register_floats(P->dedgebuf[a][side][s], (size_t)de);
    }
  return TSR_OK;
}

/* The per-slice buffers of layer l: halo'd or whole input and its gradient, halo messages, blocks
 * of the other members. */
static tsr_status alloc_layer(tsr_trainer *t, int l) {
  struct _tsr_spatial *sp = t->sp;
  struct _tsr_sp_layer *P = &sp->l[l];
  const struct _tsr_layer *L = &t->model->layers[l];
  if ((!P->window && !P->gather) || P->direct) return TSR_OK;
  int S = t->slices, me = sp->comm.index;
  for (int a = 0; P->edges && a < sp->nd; a++)
    for (int side = 0; side < 2 && P->edge_len[a][0]; side++)
      if (!ALLOC(P->edge[a][side], S) || !ALLOC(P->edgebuf[a][side], S) || !ALLOC(P->dedge[a][side], S) ||
          !ALLOC(P->dedgebuf[a][side], S))
        return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory for spatial buffers", L->name);
  if (!ALLOC(P->x, S) || !ALLOC(P->dx, S) || !ALLOC(P->xbuf, S) || !ALLOC(P->dxbuf, S) ||
      (P->window && !ALLOC(P->halo, S)) ||
      (P->gather && (!ALLOC(P->recv, S * sp->parts) || !ALLOC(P->recvbuf, S * sp->parts))))
    return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory for spatial buffers", L->name);
  const struct _tsr_sp_layer *I = &sp->l[L->inputs[0]];
  for (int s = 0; s < S; s++) {
    int64_t n = t->slice_n[s] * chw_size(&P->in);
    if (P->window) {
      struct _tsr_halo *h = &P->halo[s];
      *h = (struct _tsr_halo){.comm = &sp->comm,
                              .nd = sp->nd,
                              .outer = (int64_t)t->slice_n[s] * P->in.c,
                              .pad = L->ops->spatial == TSR_SPATIAL_WINDOW_MAX ? -FLT_MAX : 0.0f,
                              .layer = l,
                              .slice = s};
      for (int a = 0; a < sp->nd; a++) {
        h->own[a] = I->own[a], h->lo[a] = P->lo[a], h->hi[a] = P->hi[a];
        for (int side = 0; side < 2; side++)
          h->nb[a][side] = sp->grid[a] > 1 ? _tsr_spatial_neighbour(sp->nd, sp->grid, me, a, side ? 1 : -1) : -1;
      }
      TSR_TRY(_tsr_halo_init(h));
      n = _tsr_halo_count(h);
    }
    if (P->edges) {
      TSR_TRY(edge_buffers(P, sp->nd, s, t->slice_n[s], L->name));
      continue; /* no halo'd copy */
    }
    for (int q = 0; P->gather && q < sp->parts; q++) {
      if (q == me) continue;
      int64_t nb = t->slice_n[s] * chw_size(&I->out);
      if (!(P->recvbuf[s * sp->parts + q] = zfloats(nb)))
        return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory for gathered blocks", L->name);
      P->recv[s * sp->parts + q] = _tsr_register_floats(P->recvbuf[s * sp->parts + q], (size_t)nb);
    }
    if (!(P->xbuf[s] = zfloats(n)) || !(P->dxbuf[s] = zfloats(n)))
      return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory for its %s input", L->name,
                        P->window ? "halo'd" : "gathered");
    P->x[s] = _tsr_register_floats(P->xbuf[s], (size_t)n);
    P->dx[s] = _tsr_register_floats(P->dxbuf[s], (size_t)n);
  }
  return TSR_OK;
}

/* A split output: the whole output and its gradient per slice for the loss, and the other members'
 * blocks. */
static tsr_status alloc_output(tsr_trainer *t) {
  struct _tsr_spatial *sp = t->sp;
  const struct _tsr_layer *O = &t->model->layers[t->output_layer];
  int S = t->slices;
  if (!sp->l[t->output_layer].split) return TSR_OK;
  if (!ALLOC(sp->y, S) || !ALLOC(sp->dy, S) || !ALLOC(sp->ybuf, S) || !ALLOC(sp->dybuf, S) ||
      !ALLOC(sp->yrecv, S * sp->parts) || !ALLOC(sp->yrecvbuf, S * sp->parts))
    return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory for the gathered output", O->name);
  for (int s = 0; s < S; s++) {
    int64_t n = t->slice_n[s] * _tsr_layer_elems(O), nb = t->slice_n[s] * chw_size(&sp->l[t->output_layer].out);
    if (!(sp->ybuf[s] = zfloats(n)) || !(sp->dybuf[s] = zfloats(n)))
      return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory for the gathered output", O->name);
    sp->y[s] = _tsr_register_floats(sp->ybuf[s], (size_t)n);
    sp->dy[s] = _tsr_register_floats(sp->dybuf[s], (size_t)n);
    for (int q = 0; q < sp->parts; q++) {
      if (q == sp->comm.index) continue;
      if (!(sp->yrecvbuf[s * sp->parts + q] = zfloats(nb)))
        return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory for gathered blocks", O->name);
      sp->yrecv[s * sp->parts + q] = _tsr_register_floats(sp->yrecvbuf[s * sp->parts + q], (size_t)nb);
    }
  }
  return TSR_OK;
}

/* The parts along each spatial axis from the options; the product, or 0 after an error. */
static int grid_of(const tsr_trainer_opts *o, int nd, int *grid) {
  int parts = 1;
  for (int a = 0; a < TSR_SPATIAL_MAX_AXES; a++) {
    int g = o->spatial[a] > 1 ? o->spatial[a] : 1;
    if (o->spatial[a] < 0 || (a >= nd && g > 1))
      return _tsr_error(TSR_ERR_ARG, "tsr_trainer_create: spatial parts [%d, %d, %d] for samples of %d spatial axes",
                        o->spatial[0], o->spatial[1], o->spatial[2], nd),
             0;
    if (a < nd) grid[a] = g;
    parts *= g;
  }
  return parts;
}

tsr_status _tsr_spatial_blocks(const tsr_trainer *t, const tsr_trainer_opts *o, struct _tsr_sp_layer **plan,
                               int *parts) {
  int grid[TSR_BOX_AXES] = {1, 1, 1}, ext[TSR_BOX_AXES];
  int nd = _tsr_spatial_extents(&t->model->layers[t->input_layer], ext);
  *plan = NULL, *parts = grid_of(o, nd, grid);
  if (*parts == 0) return TSR_ERR_ARG;
  if (*parts == 1) return TSR_OK;
  if (!ALLOC(*plan, t->model->n)) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  tsr_status st = _tsr_spatial_plan(t->model, nd, grid, t->rank % *parts, *plan);
  if (st != TSR_OK) free(*plan), *plan = NULL;
  /* the edge slabs' gradients go back to the neighbours' input gradients: none where the input
   * needs no gradient (a first convolution), whose backward computes no data gradient */
  for (int l = 0; st == TSR_OK && l < t->model->n; l++)
    if ((*plan)[l].edges && !t->ls[t->model->layers[l].inputs[0]].needs_grad)
      memset((*plan)[l].dedge_len, 0, sizeof (*plan)[l].dedge_len);
  return st;
}

int64_t _tsr_spatial_block_elems(const struct _tsr_chw *s) { return chw_size(s); }

tsr_status _tsr_spatial_setup(tsr_trainer *t, const tsr_trainer_opts *o) {
  struct _tsr_sp_layer *plan;
  int parts;
  TSR_TRY(_tsr_spatial_blocks(t, o, &plan, &parts));
  if (parts == 1) return _tsr_dist_batch(&t->batch_dist, &t->world, 0, 0); /* data parallelism over every rank */
  struct _tsr_spatial *sp = t->sp = calloc(1, sizeof *sp);
  if (!sp) {
    free(plan);
    return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  }
  sp->l = plan; /* freed by _tsr_spatial_teardown from here on */
  if (t->size % parts)
    return _tsr_error(TSR_ERR_ARG, "tsr_trainer_create: %d spatial parts do not divide the %d ranks", parts, t->size);
  if (t->model->n > 1024 || t->slices > 64) /* the message tags' fields (comm/p2p.h) */
    return _tsr_error(TSR_ERR_ARG,
                      "tsr_trainer_create: spatial parallelism takes at most 1024 layers and 64 slices "
                      "(model '%s' has %d layers, %d slices)",
                      t->model->name, t->model->n, t->slices);
  int ext[TSR_BOX_AXES];
  sp->nd = _tsr_spatial_extents(&t->model->layers[t->input_layer], ext);
  sp->grid[0] = sp->grid[1] = sp->grid[2] = 1;
  grid_of(o, sp->nd, sp->grid);
  sp->parts = parts, sp->slices = t->slices, sp->nlayers = t->model->n;
  /* ranks [r P, r P + P) are replica r: one spatial group each, the batch split over the replicas */
  int replica = t->rank / parts;
  TSR_TRY(_tsr_comm_split(&t->world, replica, t->rank % parts, &sp->comm));
  TSR_TRY(_tsr_dist_batch(&t->batch_dist, NULL, replica, t->size / parts));
  for (int l = 0; l < t->model->n; l++) TSR_TRY(alloc_layer(t, l));
  return alloc_output(t);
}

static void unreg(starpu_data_handle_t *h, void **buf, int n) {
  for (int i = 0; h && i < n; i++) {
    if (h[i]) starpu_data_unregister(h[i]);
    if (buf) free(buf[i]);
  }
  free(h), free(buf);
}

void _tsr_spatial_teardown(tsr_trainer *t) {
  struct _tsr_spatial *sp = t->sp;
  if (!sp) return;
  for (int l = 0; sp->l && l < sp->nlayers; l++) {
    struct _tsr_sp_layer *P = &sp->l[l];
    for (int s = 0; P->halo && s < sp->slices; s++) _tsr_halo_free(&P->halo[s]);
    free(P->halo);
    for (int a = 0; a < TSR_BOX_AXES; a++)
      for (int side = 0; side < 2; side++) {
        unreg(P->edge[a][side], (void **)P->edgebuf[a][side], sp->slices);
        unreg(P->dedge[a][side], (void **)P->dedgebuf[a][side], sp->slices);
      }
    unreg(P->x, (void **)P->xbuf, sp->slices);
    unreg(P->dx, (void **)P->dxbuf, sp->slices);
    unreg(P->recv, (void **)P->recvbuf, sp->slices * sp->parts);
    unreg(P->sum, P->sumbuf, sp->parts);
  }
  unreg(sp->y, (void **)sp->ybuf, sp->slices);
  unreg(sp->dy, (void **)sp->dybuf, sp->slices);
  unreg(sp->yrecv, (void **)sp->yrecvbuf, sp->slices * sp->parts);
  free(sp->l);
  _tsr_comm_free(&sp->comm);
  free(sp);
  t->sp = NULL;
}

void _tsr_spatial_view(const tsr_trainer *t, int l, struct _tsr_layer_view *v) {
  const struct _tsr_spatial *sp = t->sp;
  if (!sp) return;
  const struct _tsr_sp_layer *P = &sp->l[l];
  const struct _tsr_layer *L = &t->model->layers[l];
  v->out = P->out;
  for (int k = 0; k < L->ninputs; k++) v->in[k] = sp->l[L->inputs[k]].out;
  if (P->window || P->gather) v->in[0] = P->in;
  if (P->window) v->spec = &P->spec;
}

/* Member q's block of layer j's output (slice of n samples) inside the whole map. */
static struct _tsr_box_desc block_box(const tsr_trainer *t, int j, int n, int q) {
  const struct _tsr_spatial *sp = t->sp;
  const struct _tsr_layer *J = &t->model->layers[j];
  struct _tsr_box_desc d = {.outer = (int64_t)n * J->c, .nd = sp->nd, .scale = 1.0f};
  int coord[TSR_BOX_AXES], ext[TSR_BOX_AXES];
  _tsr_spatial_coords(sp->nd, sp->grid, q, coord);
  _tsr_spatial_extents(J, ext);
  for (int a = 0; a < sp->nd; a++) {
    int own = sp->l[j].own[a];
    d.src_ext[a] = own, d.src_lo[a] = 0, d.len[a] = own;
    d.dst_ext[a] = ext[a], d.dst_lo[a] = coord[a] * own;
  }
  return d;
}

/* The other way: this rank's block out of the whole map, times `scale`. */
static struct _tsr_box_desc unblock(struct _tsr_box_desc d, float scale) {
  for (int a = 0; a < d.nd; a++) {
    int e = d.src_ext[a];
    d.src_ext[a] = d.dst_ext[a], d.src_lo[a] = d.dst_lo[a];
    d.dst_ext[a] = e, d.dst_lo[a] = 0;
  }
  d.scale = scale;
  return d;
}

int _tsr_spatial_before(tsr_trainer *t, int l, int s, starpu_data_handle_t x, int64_t step) {
  struct _tsr_spatial *sp = t->sp;
  const struct _tsr_sp_layer *P = &sp->l[l];
  const char *nm = t->model->layers[l].name;
  if (P->direct) return 0;
  if (P->edges) {
    starpu_data_handle_t edge[TSR_BOX_AXES][2] = {{NULL}};
    for (int a = 0; a < sp->nd; a++)
      for (int side = 0; side < 2 && P->edge[a][side]; side++) edge[a][side] = P->edge[a][side][s];
    return _tsr_halo_edges_forward(&P->halo[s], x, (const starpu_data_handle_t(*)[2])edge, step, nm);
  }
  if (P->window) return _tsr_halo_forward(&P->halo[s], x, P->x[s], step, nm);
  if (!P->gather) return 0;
  struct _tsr_box_desc place[sp->parts];
  for (int q = 0; q < sp->parts; q++) place[q] = block_box(t, t->model->layers[l].inputs[0], t->slice_n[s], q);
  return _tsr_gather_blocks(&sp->comm, place, x, P->recv + s * sp->parts, P->x[s], l, s, step, nm);
}

int _tsr_spatial_dx(tsr_trainer *t, int l, int s, starpu_data_handle_t target, int64_t step) {
  struct _tsr_spatial *sp = t->sp;
  const struct _tsr_sp_layer *P = &sp->l[l];
  const char *nm = t->model->layers[l].name;
  if (P->direct) return 0;
  if (P->edges) {
    starpu_data_handle_t dedge[TSR_BOX_AXES][2] = {{NULL}};
    for (int a = 0; a < sp->nd; a++)
      for (int side = 0; side < 2; side++)
        if (P->dedge_len[a][side]) dedge[a][side] = P->dedge[a][side][s];
    return _tsr_halo_edges_backward(&P->halo[s], (const starpu_data_handle_t(*)[2])dedge, target, step, nm);
  }
  if (P->window) return _tsr_halo_backward(&P->halo[s], P->dx[s], target, step, nm);
  /* Every member computed the same gradient of the whole map from the loss scaled by 1 / parts
   * (_tsr_spatial_share), so that the layers after the gather, run by each, add up to their
   * gradient once over the group; the block's gradient is its part of that, times parts. */
  struct _tsr_box_desc d =
      unblock(block_box(t, t->model->layers[l].inputs[0], t->slice_n[s], sp->comm.index), (float)sp->parts);
  return _tsr_insert_box_copy(&d, P->dx[s], target, nm);
}

int _tsr_spatial_sum(tsr_trainer *t, int l, starpu_data_handle_t acc, int kind, int64_t step) {
  struct _tsr_spatial *sp = t->sp;
  struct _tsr_sp_layer *P = &sp->l[l];
  const char *nm = t->model->layers[l].name;
  if (!P->sum) { /* the first sum of this layer: buffers of acc's size, for every later one */
    size_t nx = starpu_vector_get_nx(acc), elem = starpu_vector_get_elemsize(acc);
    if (!ALLOC(P->sum, sp->parts) || !ALLOC(P->sumbuf, sp->parts))
      return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory for group sums", nm), -1;
    for (int q = 0; q < sp->parts; q++) {
      if (q == sp->comm.index) continue;
      if (!(P->sumbuf[q] = calloc(nx, elem))) return _tsr_error(TSR_ERR_NOMEM, "layer '%s': out of memory", nm), -1;
      starpu_vector_data_register(&P->sum[q], STARPU_MAIN_RAM, (uintptr_t)P->sumbuf[q], (uint32_t)nx, elem);
    }
  }
  return _tsr_group_sum(&sp->comm, acc, P->sum, l, kind, step, nm);
}

int _tsr_spatial_share(tsr_trainer *t, starpu_data_handle_t dy) {
  /* a gathered output: no layer runs on whole samples, each member's gradient is its block's */
  if (!t->sp || t->sp->y) return 0;
  return _tsr_insert_scale_grad(dy, NULL, 1.0 / t->sp->parts, "spatial_share");
}

int _tsr_spatial_output(tsr_trainer *t, int s, int64_t step, starpu_data_handle_t *y, starpu_data_handle_t *dy) {
  struct _tsr_spatial *sp = t->sp;
  int o = t->output_layer;
  if (!sp || !sp->y) return 0;
  struct _tsr_box_desc place[sp->parts];
  for (int q = 0; q < sp->parts; q++) place[q] = block_box(t, o, t->slice_n[s], q);
  *y = sp->y[s], *dy = sp->dy[s];
  return _tsr_gather_blocks(&sp->comm, place, t->ls[o].y[s], sp->yrecv + s * sp->parts, sp->y[s], o, s, step,
                            t->model->layers[o].name);
}

int _tsr_spatial_output_grad(tsr_trainer *t, int s) {
  struct _tsr_spatial *sp = t->sp;
  int o = t->output_layer;
  if (!sp || !sp->y) return 0;
  struct _tsr_box_desc d = unblock(block_box(t, o, t->slice_n[s], sp->comm.index), 1.0f);
  return _tsr_insert_box_copy(&d, sp->dy[s], t->ls[o].g[s], t->model->layers[o].name);
}

struct _tsr_box_desc _tsr_spatial_input_box(const tsr_trainer *t) {
  struct _tsr_box_desc d = block_box(t, t->input_layer, 1, t->sp->comm.index);
  return unblock(d, 1.0f);
}

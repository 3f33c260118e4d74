/* Gradient groups over a gradient-buffer view, and the dispatch of their reductions to the chosen
 * collective. Every rank submits the same reductions in the same order, so the order of
 * communication follows from the graph and needs no coordinator. Each group's reduction starts
 * when its last gradient is final and the group's updates wait only for it. */
#include <stdlib.h>
#include <string.h>

#include "comm/collective.h"
#include "comm/groups.h"
#include "runtime/communicator.h"
#include "runtime/error.h"
#include "runtime/submit.h"
#include "trace/trace.h"

static size_t padded(size_t n) { return (n + 15) & ~(size_t)15; }

/* Trainable tensors in buffer order, cut at layer boundaries once a group holds `bytes`, and
 * wherever the buffer has a gap (a view of some of the tensors: a group is one contiguous run). */
static int cut(const struct _tsr_grad_view *v, long long bytes, int *starts) {
  int ng = 0;
  size_t acc = 0, next = 0;
  int prev_layer = -1;
  for (int i = 0; i < v->ntensors; i++) {
    const struct _tsr_grad_tensor *p = &v->tensors[i];
    if (!p->trainable) continue;
    int boundary = (p->layer != prev_layer && (bytes < 0 || acc >= (size_t)bytes)) || p->off != next;
    if (ng == 0 || boundary) {
      starts[ng++] = i;
      acc = 0;
    }
    acc += padded(p->n) * sizeof(float);
    next = p->off + padded(p->n);
    prev_layer = p->layer;
  }
  return ng;
}

/* Group 0 (lead = 1) also holds the kept word at the start of the buffer. */
static tsr_status register_group(struct _tsr_groups *gs, const struct _tsr_grad_view *v, struct _tsr_group *g, int last,
                                 int lead) {
  g->count = 0;
  g->end = last;
  for (int i = g->first; i < last; i++) g->count += v->tensors[i].trainable;
  g->nchild = g->count + lead;
  g->keep = lead ? v->keep : 0;
  g->off = v->tensors[g->first].off - g->keep;
  g->n = g->keep;
  for (int i = g->first; i < last; i++) g->n += v->tensors[i].trainable ? padded(v->tensors[i].n) : 0;
  if (g->n > UINT32_MAX) /* a StarPU vector's length is a uint32_t */
    return _tsr_error(TSR_ERR_ARG, "gradient group of %s .. %s: %zu floats, more than a StarPU vector holds (%u); "
                      "use a smaller group size", v->tensors[g->first].name, v->tensors[last - 1].name, g->n, UINT32_MAX);
  g->tensors = calloc(g->nchild, sizeof *g->tensors);
  g->tensor_len = calloc(g->nchild, sizeof *g->tensor_len);
  if (!g->tensors || !g->tensor_len)
    return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory for the gradient group of %zu floats", g->n);
  if (lead) g->tensor_len[0] = (uint32_t)g->keep;
  for (int i = g->first, k = lead; i < last; i++)
    if (v->tensors[i].trainable) g->tensor_len[k++] = (uint32_t)padded(v->tensors[i].n);
  starpu_vector_data_register(&g->h, STARPU_MAIN_RAM, (uintptr_t)(v->buf + g->off), (uint32_t)g->n, sizeof(float));
  struct starpu_data_filter f = {.filter_func = starpu_vector_filter_list, .nchildren = (unsigned)g->nchild,
                                 .filter_arg_ptr = g->tensor_len};
  starpu_data_partition_plan(g->h, &f, g->tensors);
  if (lead) gs->head = g->tensors[0];
  for (int i = g->first, k = lead; i < last; i++)
    if (v->tensors[i].trainable) gs->grad[i] = g->tensors[k++];
  starpu_data_partition_submit(g->h, g->nchild, g->tensors);
  return TSR_OK;
}

static void log_layout(const struct _tsr_groups *gs, const struct _tsr_grad_view *v, long long bytes) {
  if (gs->comm->index != 0) return;
  _tsr_log(2, "gradient groups: %d (%s), reduced over %d rank(s) in %s", gs->n,
           bytes < 0 ? "one per layer" : "layers merged up to the byte threshold", gs->comm->size, gs->name);
  for (int g = 0; g < gs->n; g++) {
    const struct _tsr_group *gr = &gs->g[g];
    _tsr_log(2, "  group %d: %6.1f KiB, tensors %s .. %s", g, gr->n * 4 / 1024.0, v->tensors[gr->first].name,
             v->tensors[gr->end - 1].name);
  }
}

/* The entry each group uses (with "auto": the candidates, chosen among in _tsr_groups_start). No
 * messages: the ranks have not agreed on their layout yet. */
static tsr_status choose(struct _tsr_groups *gs, const char *skip_impl) {
  if (gs->comm->size < 2) return TSR_OK;
  int automatic = gs->algo && strcmp(gs->algo, "auto") == 0, max = (int)(sizeof gs->cand / sizeof gs->cand[0]);
  const struct _tsr_collective_ops *c[8];
  int n = _tsr_collective_usable(gs->name, automatic ? NULL : gs->algo, gs->comm, skip_impl, c, max);
  if (n == 0) {
    char names[256];
    if (!gs->algo) return _tsr_error(TSR_ERR_ARG, "gradient reduction '%s' (%s) cannot run here", gs->name,
                                     _tsr_collective_names(names, sizeof names));
    return _tsr_error(TSR_ERR_ARG, "gradient reduction '%s' by collective '%s' (%s) cannot run here", gs->name,
                      gs->algo, _tsr_collective_algos(names, sizeof names));
  }
  gs->ncand = 0;
  for (int i = 0; automatic && c[0]->cost && i < n && i < max; i++) { /* NCCL, where it runs, stays first */
    gs->ops = c[i];
    if (c[i]->cost && (!c[i]->check || c[i]->check(gs) == TSR_OK)) gs->cand[gs->ncand++] = c[i];
  }
  gs->ops = c[0];
  for (int g = 0; g < gs->n; g++) gs->g[g].ops = c[0];
  if (gs->ncand) return TSR_OK;
  return gs->ops->check ? gs->ops->check(gs) : TSR_OK;
}

/* "auto": the candidate of least cost for each group (the first on a tie), the same on every rank
 * since the links' values come from one rank. */
static tsr_status choose_auto(struct _tsr_groups *gs) {
  TSR_TRY(_tsr_net_measure(&gs->net, gs->comm));
  for (int g = 0; g < gs->n; g++) {
    double best = 0;
    for (int i = 0; i < gs->ncand; i++) {
      gs->ops = gs->cand[i];
      double t = gs->ops->cost(gs, g);
      if (i == 0 || t < best) best = t, gs->g[g].ops = gs->ops;
    }
    if (gs->comm->index == 0)
      _tsr_log(1, "  group %d: %s (%.1f us by the link model)", g, gs->g[g].ops->impl, 1e6 * best);
  }
  return TSR_OK;
}

/* Calls setup (or teardown) of every entry the groups use, once each, in order of first use. */
static tsr_status each_entry(struct _tsr_groups *gs, int setup) {
  for (int g = 0; g < gs->n; g++) {
    const struct _tsr_collective_ops *o = gs->g[g].ops;
    int first = 1;
    for (int h = 0; h < g; h++) first &= gs->g[h].ops != o;
    if (!first || !o) continue;
    gs->ops = o;
    if (setup && o->setup) TSR_TRY(o->setup(gs));
    if (!setup && o->teardown) o->teardown(gs);
  }
  return TSR_OK;
}

tsr_status _tsr_groups_build(struct _tsr_groups *gs, const struct _tsr_grad_view *v, const struct _tsr_comm *comm,
                             long long bytes, const char *name, const char *skip_impl) {
  gs->comm = comm, gs->name = name;
  int *starts = calloc(v->ntensors + 1, sizeof(int));
  gs->grad = calloc(v->ntensors ? v->ntensors : 1, sizeof *gs->grad);
  if (!starts || !gs->grad) {
    free(starts);
    return _tsr_error(TSR_ERR_NOMEM, "gradient groups: out of memory");
  }
  gs->n = cut(v, bytes, starts);
  gs->g = calloc(gs->n ? gs->n : 1, sizeof *gs->g);
  if (!gs->g) {
    free(starts);
    return _tsr_error(TSR_ERR_NOMEM, "gradient groups: out of memory");
  }
  for (int g = 0; g < gs->n; g++) {
    gs->g[g].first = starts[g];
    int last = g + 1 < gs->n ? starts[g + 1] : v->ntensors;
    tsr_status st = register_group(gs, v, &gs->g[g], last, g == 0 && v->keep > 0);
    if (st != TSR_OK) {
      free(starts);
      return st;
    }
  }
  free(starts);
  if (gs->n == 0 && v->keep) gs->head = _tsr_register_floats(v->buf, v->keep), gs->head_own = 1;
  TSR_TRY(choose(gs, skip_impl));
  log_layout(gs, v, bytes);
  return TSR_OK;
}

tsr_status _tsr_groups_start(struct _tsr_groups *gs) {
  if (!gs->ops) return TSR_OK;
  if (gs->ncand) TSR_TRY(choose_auto(gs));
  return each_entry(gs, 1);
}

tsr_status _tsr_groups_start_as(struct _tsr_groups *gs, const struct _tsr_groups *like) {
  if (!gs->ops) return TSR_OK;
  if (gs->n != like->n) return _tsr_error(TSR_ERR_RUNTIME, "gradient groups: %d groups, the first set has %d", gs->n, like->n);
  for (int g = 0; g < gs->n; g++) gs->g[g].ops = like->g[g].ops;
  return each_entry(gs, 1);
}

void _tsr_groups_destroy(struct _tsr_groups *gs) {
  for (int g = 0; gs->g && g < gs->n; g++)
    if (gs->g[g].h) starpu_data_unpartition_submit(gs->g[g].h, gs->g[g].nchild, gs->g[g].tensors, STARPU_MAIN_RAM);
  if (gs->ops) each_entry(gs, 0); /* their partitions go while none is active */
  _tsr_net_free(&gs->net);
  for (int g = 0; gs->g && g < gs->n; g++) {
    struct _tsr_group *gr = &gs->g[g];
    if (gr->h) {
      starpu_data_partition_clean(gr->h, gr->nchild, gr->tensors);
      starpu_data_unregister(gr->h);
    }
    free(gr->tensors), free(gr->tensor_len);
  }
  free(gs->g), free(gs->grad);
  if (gs->head_own && gs->head) starpu_data_unregister(gs->head);
  gs->g = NULL, gs->grad = NULL, gs->head = NULL, gs->head_own = 0, gs->n = 0, gs->ops = NULL;
}

int _tsr_group_allreduce(struct _tsr_groups *gs, int g, int64_t step) {
  _tsr_trace_group(step, g, gs->g[g].n * sizeof(float));
  if (!gs->ops) return 0;
  gs->ops = gs->g[g].ops;
  gs->bytes += gs->ops->wire_bytes(gs, g);
  return gs->ops->submit(gs, g, step);
}

/* The hierarchical allreduce with halving-doubling across nodes ("hier-rh"): the ring's
 * reduce-scatter inside each node of k ranks (float32: the node's shared memory is cheap), after
 * which member j of a node holds the node's sum of one k-th of the group; then k halving-doubling
 * reductions at once across the N nodes (halving.c), the one of index j among the members of index
 * j in their nodes (the node split's column), each on its slice and in the reduction's wire format
 * (that is the network); then the ring's allgather inside the node. Latency log2 N across nodes
 * instead of the "hier" ring's N, with the ring's bytes. On one node it is the ring, with one rank
 * per node the halving-doubling over all ranks. Nodes come from the communicator's node split
 * (net.h: host names, or TESSERA_NODE_SIZE); they must all have the same number of ranks (else the
 * set-up says so, and "auto" never picks it). Every rank ends with the same bits: each slice's
 * column ends with identical values (halving.c) and the allgather copies them. */
#include <math.h>
#include <stdlib.h>

#include "comm/collective.h"
#include "comm/groups.h"
#include "comm/halving.h"
#include "comm/net.h"
#include "comm/ring.h"
#include "convert.h"
#include "runtime/communicator.h"
#include "runtime/error.h"

struct hier_rh {
  struct _tsr_ring *ring;      /* inside the node (NULL with one rank per node) */
  struct _tsr_halving *across; /* on this member's slice across the nodes (NULL on one node) */
};

static tsr_status setup(struct _tsr_groups *gs) {
  TSR_TRY(_tsr_net_split(&gs->net, gs->comm));
  const struct _tsr_net *net = &gs->net;
  if (!net->uniform)
    return _tsr_error(TSR_ERR_ARG,
                      "collective hier-rh: the nodes do not all have the same number of ranks (this "
                      "rank's node has %d of the %d ranks); use hier or rabenseifner",
                      net->node.size, gs->comm->size);
  for (int g = 0; g < gs->n; g++) {
    struct _tsr_group *gr = &gs->g[g];
    if (gr->ops != gs->ops) continue;
    struct hier_rh *h = calloc(1, sizeof *h);
    gr->priv = h;
    int bad = !h;
    starpu_data_handle_t slice = gr->h;
    size_t n = gr->n, keep = gr->keep;
    if (!bad && net->node.size > 1) {
      bad = !(h->ring = _tsr_ring_plan(gr, net->node.size, TSR_WIRE_F32));
      if (!bad) slice = _tsr_ring_chunk(h->ring, _tsr_ring_owned(h->ring, net->node.index), &n, &keep);
    }
    if (!bad && net->column.size > 1)
      bad = !(h->across = _tsr_halving_plan(slice, n, keep, gs->ops->variant, net->column.size, net->column.index));
    if (bad) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory for the gradient group of %zu floats", gr->n);
  }
  if (gs->comm->index == 0)
    _tsr_log(1, "hierarchical halving-doubling reductions: %d node(s) of %d rank(s)", gs->comm->size / net->node.size,
             net->node.size);
  return TSR_OK;
}

static void teardown(struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++) {
    struct hier_rh *h = gs->g[g].priv;
    if (gs->g[g].ops != gs->ops || !h) continue;
    _tsr_halving_free(h->across); /* its partitions are of a ring chunk: before the ring's */
    _tsr_ring_free(&gs->g[g], h->ring);
    free(h);
    gs->g[g].priv = NULL;
  }
}

static int submit(struct _tsr_groups *gs, int g, int64_t step) {
  struct _tsr_group *gr = &gs->g[g];
  struct hier_rh *h = gr->priv;
  const struct _tsr_net *net = &gs->net;
  starpu_data_unpartition_submit(gr->h, gr->nchild, gr->tensors, STARPU_MAIN_RAM);
  int ret = 0;
  if (h->ring) _tsr_ring_partition(gr, h->ring, 1), ret = _tsr_ring_scatter(&net->node, h->ring, TSR_WIRE_F32, g, step);
  if (!ret && h->across) ret = _tsr_halving_sum(&net->column, h->across, g, step);
  if (!ret && h->ring) ret = _tsr_ring_gather(&net->node, h->ring, TSR_WIRE_F32, g, step);
  if (h->ring) _tsr_ring_partition(gr, h->ring, 0);
  starpu_data_partition_submit(gr->h, gr->nchild, gr->tensors);
  if (ret)
    _tsr_error(TSR_ERR_RUNTIME, "gradient group %d, step %lld: posting the hier-rh allreduce failed (%d)", g,
               (long long)step, ret);
  return ret;
}

/* The float32 ring's chunks inside the node, the halving-doubling's halves across nodes. */
static int64_t wire_bytes(const struct _tsr_groups *gs, int g) {
  const struct hier_rh *h = gs->g[g].priv;
  return (h->ring ? _tsr_ring_bytes(h->ring, TSR_WIRE_F32, gs->net.node.index) : 0) +
         (h->across ? _tsr_halving_bytes(h->across) : 0);
}

/* Nodes of unequal size: it cannot run, so "auto" must not pick it. */
static double cost(const struct _tsr_groups *gs, int g) {
  const struct _tsr_net *net = &gs->net;
  if (!net->uniform) return INFINITY;
  return _tsr_cost_hier_rh(net->node_size, net->nodes, 4.0 * gs->g[g].n, _tsr_wire_size(&gs->g[g], gs->ops->variant),
                           net->local, net->remote);
}

#define HIER_RH(fmt_name, fmt)                                                                                         \
  {                                                                                                                    \
    .name = fmt_name, .impl = "hier-rh", .variant = fmt, .check = _tsr_ring_check, .setup = setup,                     \
    .teardown = teardown, .submit = submit, .wire_bytes = wire_bytes, .cost = cost                                     \
  }
const struct _tsr_collective_ops _tsr_hier_rh_f32 = HIER_RH("f32", TSR_WIRE_F32);
const struct _tsr_collective_ops _tsr_hier_rh_bf16 = HIER_RH("bf16", TSR_WIRE_BF16);
const struct _tsr_collective_ops _tsr_hier_rh_fp16 = HIER_RH("fp16", TSR_WIRE_FP16);

/* The hierarchical allreduce, for ranks that share nodes: a binomial-tree sum inside each node to
 * its first member (float32: the node's shared memory is cheap), the ring across those node
 * leaders (in the reduction's wire format: that is the network), and a binomial-tree broadcast
 * inside each node. Nodes come from the communicator's node split (net.h: host names, or
 * TESSERA_NODE_SIZE to emulate nodes on one machine). On one node it is the tree, with one rank per
 * node the ring. Every rank ends with the same bits: the leaders' ring gives them identical values
 * and the broadcasts copy them. */
#include <stdlib.h>

#include "comm/collective.h"
#include "comm/groups.h"
#include "comm/net.h"
#include "comm/ring.h"
#include "comm/tree.h"
#include "convert.h"
#include "runtime/communicator.h"
#include "runtime/error.h"

#define BCAST_K 64 /* message numbers of the broadcast inside the node */

struct hier {
  struct _tsr_hops local;  /* inside the node, float32 */
  struct _tsr_ring *ring;  /* across the node leaders (leaders only, with several nodes) */
};

static tsr_status setup(struct _tsr_groups *gs) {
  TSR_TRY(_tsr_net_split(&gs->net, gs->comm));
  const struct _tsr_net *net = &gs->net;
  for (int g = 0; g < gs->n; g++) {
    struct _tsr_group *gr = &gs->g[g];
    if (gr->ops != gs->ops) continue;
    struct hier *h = calloc(1, sizeof *h);
    gr->priv = h;
    int bad = !h || _tsr_hops_init(&h->local, gr->n, gr->keep, TSR_WIRE_F32, _tsr_tree_depth(net->node.size) + 1);
    if (!bad && net->leaders.size > 1) bad = !(h->ring = _tsr_ring_plan(gr, net->leaders.size, gs->ops->variant));
    if (bad) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory for the gradient group of %zu floats", gr->n);
  }
  if (gs->comm->index == 0)
    _tsr_log(1, "hierarchical reductions: %d node(s) here, %d rank(s) on the first", gs->net.leaders.size,
             gs->net.node.size);
  return TSR_OK;
}

static void teardown(struct _tsr_groups *gs) {
  for (int g = 0; g < gs->n; g++) {
    struct hier *h = gs->g[g].priv;
    if (gs->g[g].ops != gs->ops || !h) continue;
    _tsr_ring_free(&gs->g[g], h->ring);
    _tsr_hops_free(&h->local);
    free(h);
    gs->g[g].priv = NULL;
  }
}

static int submit(struct _tsr_groups *gs, int g, int64_t step) {
  struct _tsr_group *gr = &gs->g[g];
  struct hier *h = gr->priv;
  starpu_data_unpartition_submit(gr->h, gr->nchild, gr->tensors, STARPU_MAIN_RAM);
  int ret = _tsr_tree_reduce(&gs->net.node, gr->h, &h->local, g, step, 0);
  if (!ret && h->ring) ret = _tsr_ring_sum(&gs->net.leaders, gr, h->ring, gs->ops->variant, g, step);
  if (!ret) ret = _tsr_tree_bcast(&gs->net.node, gr->h, &h->local, g, step, BCAST_K);
  starpu_data_partition_submit(gr->h, gr->nchild, gr->tensors);
  if (ret) _tsr_error(TSR_ERR_RUNTIME, "gradient group %d, step %lld: posting the hierarchical allreduce failed (%d)",
                      g, (long long)step, ret);
  return ret;
}

/* Whole float32 groups inside the node, the ring's chunks across nodes. */
static int64_t wire_bytes(const struct _tsr_groups *gs, int g) {
  const struct hier *h = gs->g[g].priv;
  int64_t b = (int64_t)_tsr_tree_messages(gs->net.node.index, gs->net.node.size) * (int64_t)gs->g[g].n * 4;
  return b + (h->ring ? _tsr_ring_bytes(h->ring, gs->ops->variant, gs->net.leaders.index) : 0);
}

static double cost(const struct _tsr_groups *gs, int g) {
  const struct _tsr_group *gr = &gs->g[g];
  return _tsr_cost_tree(gs->net.node_size, 4.0 * gr->n, gs->net.local) +
         _tsr_cost_ring(gs->net.nodes, _tsr_wire_size(gr, gs->ops->variant), gs->net.remote);
}

#define HIER(fmt_name, fmt)                                                                                            \
  {.name = fmt_name, .impl = "hier", .variant = fmt, .check = _tsr_ring_check, .setup = setup,                         \
   .teardown = teardown, .submit = submit, .wire_bytes = wire_bytes, .cost = cost}
const struct _tsr_collective_ops _tsr_hier_f32 = HIER("f32", TSR_WIRE_F32);
const struct _tsr_collective_ops _tsr_hier_bf16 = HIER("bf16", TSR_WIRE_BF16);
const struct _tsr_collective_ops _tsr_hier_fp16 = HIER("fp16", TSR_WIRE_FP16);

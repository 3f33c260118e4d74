/* The network under the collectives (net.h): the node split, the link measured once at start-up by
 * a ping-pong of the communicator's first member (or taken from TESSERA_LINK) and sent to every
 * member, so that "auto" makes the same choice everywhere; and the alpha-beta cost formulas. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/groups.h"
#include "comm/net.h"
#include "comm/ring.h"
#include "runtime/env.h"
#include "runtime/error.h"

/* Start-up messages: in the control part of the communicator's tag space. */
#define NET_TAG (((int64_t)1 << (TSR_COMM_TAG_BITS - 1)) | 0x4E7000)
#define SMALL 8
#define BIG (1 << 20)

tsr_status _tsr_net_split(struct _tsr_net *n, const struct _tsr_comm *comm) {
  if (n->split) return TSR_OK;
  TSR_TRY(_tsr_comm_split_node(comm, &n->node));
  n->split = 1;
  TSR_TRY(_tsr_comm_split(comm, n->node.index == 0 ? 0 : -1, 0, &n->leaders));
  TSR_TRY(_tsr_comm_split(comm, n->node.index, 0, &n->column));
  struct _tsr_comm same; /* the members whose node is as large as mine: all of them, on every member, or
                            fewer on every member */
  TSR_TRY(_tsr_comm_split(comm, n->node.size, 0, &same));
  n->uniform = same.size == comm->size;
  _tsr_comm_free(&same);
  return TSR_OK;
}

void _tsr_net_free(struct _tsr_net *n) {
  _tsr_comm_free(&n->node), _tsr_comm_free(&n->leaders), _tsr_comm_free(&n->column);
  memset(n, 0, sizeof *n);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Seconds one way for `bytes`, from `reps` round trips after one untimed (initiator's view). */
static int pingpong(char *buf, size_t bytes, int peer, int initiator, int reps, int64_t tag, double *one_way) {
  int ret = 0;
  double t0 = 0;
  for (int i = 0; !ret && i <= reps; i++) {
    if (i == 1) t0 = now();
    ret = _tsr_comm_xfer(buf, bytes, peer, initiator, tag);
    if (!ret) ret = _tsr_comm_xfer(buf, bytes, peer, !initiator, tag);
  }
  *one_way = (now() - t0) / reps / 2;
  return ret;
}

static int measure_link(int peer, int initiator, int64_t tag, struct _tsr_link *l) {
  char *buf = calloc(BIG, 1);
  if (!buf) return -1;
  double small, big;
  int ret = pingpong(buf, SMALL, peer, initiator, 20, tag, &small);
  if (!ret) ret = pingpong(buf, BIG, peer, initiator, 4, tag + 1, &big);
  free(buf);
  l->alpha = small;
  l->beta = big > small ? (big - small) / (BIG - SMALL) : 1e-12;
  return ret;
}

/* From the first member to every other (blocking, start-up only). */
static int broadcast(const struct _tsr_comm *comm, void *buf, size_t bytes, int64_t tag) {
  int ret = 0;
  for (int r = 1; !ret && r < comm->size; r++)
    ret = comm->index == 0   ? _tsr_comm_xfer(buf, bytes, comm->ranks[r], 1, tag)
          : comm->index == r ? _tsr_comm_xfer(buf, bytes, comm->ranks[0], 0, tag)
                             : 0;
  return ret;
}

tsr_status _tsr_net_parse_link(const char *text, struct _tsr_link *remote, struct _tsr_link *local) {
  double v[4];
  int k = 0;
  const char *p = text;
  while (k < 4) {
    char *end;
    v[k] = strtod(p, &end);
    if (end == p || !(v[k] > 0) || !isfinite(v[k])) break;
    k++, p = end;
    if (*p != ',') break;
    p++;
  }
  if ((k != 2 && k != 4) || *p)
    return _tsr_error(TSR_ERR_ARG,
                      "TESSERA_LINK '%s': expected latency_us,gbit_per_s (between nodes) and "
                      "optionally latency_us,gbit_per_s inside a node, each > 0",
                      text);
  *remote = (struct _tsr_link){v[0] * 1e-6, 8 / (v[1] * 1e9)};
  *local = k == 4 ? (struct _tsr_link){v[2] * 1e-6, 8 / (v[3] * 1e9)} : *remote;
  return TSR_OK;
}

tsr_status _tsr_net_measure(struct _tsr_net *n, const struct _tsr_comm *comm) {
  if (n->measured) return TSR_OK;
  TSR_TRY(_tsr_net_split(n, comm));
  /* the first member says whether it measures, so every member takes part in the same exchanges */
  const char *text = _tsr_env_link();
  int measure = comm->index == 0 && !text;
  double v[6] = {0};
  int ret = broadcast(comm, &measure, sizeof measure, NET_TAG);
  tsr_status st = TSR_OK;
  if (!ret && comm->index == 0 && text) {
    struct _tsr_link r, l;
    st = _tsr_net_parse_link(text, &r, &l);
    v[2] = l.alpha, v[3] = l.beta, v[4] = r.alpha, v[5] = r.beta;
  }
  struct _tsr_link local = {0}, remote = {0};
  int on_first_node = n->node.ranks[0] == comm->ranks[0];
  if (!ret && measure && on_first_node && n->node.size > 1 && n->node.index <= 1)
    ret = measure_link(n->node.ranks[1 - n->node.index], n->node.index == 0, NET_TAG + 2, &local);
  if (!ret && measure && n->leaders.size > 1 && n->leaders.index <= 1)
    ret = measure_link(n->leaders.ranks[1 - n->leaders.index], n->leaders.index == 0, NET_TAG + 4, &remote);
  if (comm->index == 0) {
    v[0] = st == TSR_OK ? n->leaders.size : 0; /* 0 nodes: the others fail too */
    v[1] = n->node.size;
    if (measure) {
      if (n->node.size < 2) local = remote; /* one rank per node: a single kind of link */
      if (n->leaders.size < 2) remote = local;
      v[2] = local.alpha, v[3] = local.beta, v[4] = remote.alpha, v[5] = remote.beta;
    }
  }
  if (!ret) ret = broadcast(comm, v, sizeof v, NET_TAG + 6);
  if (ret)
    return _tsr_error(TSR_ERR_RUNTIME, "measuring the links between ranks: StarPU-MPI transfer failed (%d)", ret);
  if (st != TSR_OK) return st;
  if (v[0] < 1) return _tsr_error(TSR_ERR_ARG, "TESSERA_LINK on the first rank cannot be read (see its message)");
  n->nodes = (int)v[0], n->node_size = (int)v[1];
  n->local = (struct _tsr_link){v[2], v[3]}, n->remote = (struct _tsr_link){v[4], v[5]};
  n->measured = 1;
  if (comm->index == 0)
    _tsr_log(1,
             "links: %d node(s) of %d rank(s); inside a node %.1f us + %.2f Gbit/s, between nodes "
             "%.1f us + %.2f Gbit/s (%s)",
             n->nodes, n->node_size, 1e6 * n->local.alpha, 8e-9 / n->local.beta, 1e6 * n->remote.alpha,
             8e-9 / n->remote.beta, measure ? "measured" : "TESSERA_LINK");
  return TSR_OK;
}

double _tsr_wire_size(const struct _tsr_group *g, int fmt) {
  return fmt == TSR_WIRE_F32 ? 4.0 * g->n : 2.0 * ((double)g->n + g->keep);
}

double _tsr_cost_ring(int p, double bytes, struct _tsr_link l) {
  return p < 2 ? 0 : 2.0 * (p - 1) * (l.alpha + bytes / p * l.beta);
}

double _tsr_cost_rd(int p, double bytes, struct _tsr_link l) {
  int rounds = 0;
  while (2 << rounds <= p) rounds++; /* log2 of the largest power of two <= p */
  return (rounds + ((1 << rounds) < p ? 2 : 0)) * (l.alpha + bytes * l.beta);
}

double _tsr_cost_tree(int p, double bytes, struct _tsr_link l) {
  int depth = 0;
  while (1 << depth < p) depth++;
  return 2.0 * depth * (l.alpha + bytes * l.beta);
}

double _tsr_cost_rabenseifner(int p, double bytes, struct _tsr_link l) {
  if (p < 2) return 0;
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  double t = p2 < p ? 2 * (l.alpha + bytes * l.beta) : 0, m = bytes;
  for (int d = 1; d < p2; d *= 2) m /= 2, t += 2 * (l.alpha + m * l.beta);
  return t;
}

double _tsr_cost_hier_rh(int k, int nodes, double f32_bytes, double wire, struct _tsr_link local,
                         struct _tsr_link remote) {
  return _tsr_cost_ring(k, f32_bytes, local) + _tsr_cost_rabenseifner(nodes, wire / (k > 0 ? k : 1), remote);
}

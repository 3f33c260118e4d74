/* The network as the collectives see it: the communicator split into nodes (ranks that share
 * memory) and their leaders, the link inside a node and between nodes as alpha (seconds per
 * message) and beta (seconds per byte), agreed by every rank, and the alpha-beta cost of each
 * algorithm, from which "auto" picks one per gradient group. */
#ifndef TSR_COMM_NET_H
#define TSR_COMM_NET_H

#include <stddef.h>
#include <tessera/status.h>

#include "runtime/communicator.h"

struct _tsr_group;

struct _tsr_link {
  double alpha; /* seconds per message */
  double beta;  /* seconds per byte */
};

struct _tsr_net {
  int split;                      /* 1 once node and leaders are made */
  struct _tsr_comm node;          /* the members of this rank's node, by index in the parent */
  struct _tsr_comm leaders;       /* every node's first member (size 0 on the others) */
  struct _tsr_comm column;        /* the members of the same index in their nodes, one per node that
                                     has that many (leaders: the column of index 0) */
  int uniform;                    /* agreed by every rank: 1 when all nodes have the same size */
  int nodes, node_size;           /* agreed by every rank: nodes, and members of the first one */
  int measured;                   /* 1 once the links are known (and agreed) */
  struct _tsr_link local, remote; /* inside a node, between nodes (remote = local on one node) */
};

/* Splits comm into nodes (runtime/communicator.h, _tsr_comm_split_node), their leaders and the
 * columns of equal index in the nodes, and agrees whether the nodes are of one size; collective
 * over comm. */
tsr_status _tsr_net_split(struct _tsr_net *n, const struct _tsr_comm *comm);
/* The links, from TESSERA_LINK when set, else from a short ping-pong of comm's first member with
 * a member of its node and one of another node; the first member's values reach every member, so
 * every decision made from them is the same on all. Collective over comm; splits first if needed. */
tsr_status _tsr_net_measure(struct _tsr_net *n, const struct _tsr_comm *comm);
void _tsr_net_free(struct _tsr_net *n);
/* Parses "alpha_us,gbit_s[,alpha_us,gbit_s]" (between nodes, then inside a node; the second pair
 * defaults to the first) into remote and local; TSR_ERR_ARG naming the text when malformed. */
tsr_status _tsr_net_parse_link(const char *text, struct _tsr_link *remote, struct _tsr_link *local);

/* Bytes of one whole-group message of group g in wire format fmt (float32 values, or halves with
 * the kept word as float32). */
double _tsr_wire_size(const struct _tsr_group *g, int fmt);
/* Alpha-beta time of one allreduce of `bytes` over p members on link l. */
double _tsr_cost_ring(int p, double bytes, struct _tsr_link l); /* 2(p-1) messages of bytes/p */
double _tsr_cost_rd(int p, double bytes, struct _tsr_link l);   /* log2 rounds, +2 for non-powers of 2 */
double _tsr_cost_tree(int p, double bytes, struct _tsr_link l); /* binomial reduce + broadcast */
/* recursive halving then doubling: 2 log2 p' messages of bytes/2, bytes/4..., +2 whole ones when p
 * is not a power of two */
double _tsr_cost_rabenseifner(int p, double bytes, struct _tsr_link l);
/* k members per node (float32 ring inside, `local`), halving-doubling across `nodes` on a k-th of
 * the group each (`wire` bytes in all, `remote`) */
double _tsr_cost_hier_rh(int k, int nodes, double f32_bytes, double wire, struct _tsr_link local,
                         struct _tsr_link remote);

#endif

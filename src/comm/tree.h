/* Whole-group messages for the latency-oriented collectives: a binomial-tree sum to a
 * communicator's first member and a binomial-tree broadcast from it (tree.c), used by the tree and
 * recursive-doubling entries and, inside a node, by the hierarchical one (hier.c). */
#ifndef TSR_COMM_TREE_H
#define TSR_COMM_TREE_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>

struct _tsr_comm;

/* A group's buffers for whole-group messages in wire format fmt (ring.h): one receive buffer per
 * round, so that every receive of a reduction is posted at once, and the packed values to send
 * (half formats). */
struct _tsr_hops {
  int fmt, rounds;
  size_t n, keep; /* floats of the group; leading ones that stay float32 */
  starpu_data_handle_t *tmp, wire;
  void **tmpbuf, *wirebuf;
};

/* 0, or -1 when out of memory (_tsr_hops_free also frees a half-made one). */
int _tsr_hops_init(struct _tsr_hops *b, size_t n, size_t keep, int fmt, int rounds);
void _tsr_hops_free(struct _tsr_hops *b);
/* Whole-group messages of x (a group's whole handle) with `peer` of cm: x sent as it is (float32)
 * or packed (round_own: x becomes what it sends); x += what peer sends, received into buffer r;
 * x = the final values peer sends (half formats: through buffer 0, kept packed in it). 0 or
 * StarPU-MPI's error. */
int _tsr_hops_send(const struct _tsr_comm *cm, starpu_data_handle_t x, struct _tsr_hops *b, int peer, int64_t tag,
                   int64_t step, int round_own);
int _tsr_hops_recv_add(const struct _tsr_comm *cm, starpu_data_handle_t x, struct _tsr_hops *b, int r, int peer,
                       int64_t tag, int64_t step);
int _tsr_hops_recv_final(const struct _tsr_comm *cm, starpu_data_handle_t x, struct _tsr_hops *b, int peer,
                         int64_t tag, int64_t step);
/* Rounds of a binomial tree over p members: ceil(log2 p). */
int _tsr_tree_depth(int p);
/* Submits the sum of x (a group's whole handle) over cm into member 0's x; messages k0 .. k0 +
 * depth - 1 of (step, group gi). Other members' x are left partial. */
int _tsr_tree_reduce(const struct _tsr_comm *cm, starpu_data_handle_t x, struct _tsr_hops *b, int gi, int64_t step,
                     int k0);
/* Submits the broadcast of member 0's x to every member's x (half formats: member 0 rounds x to
 * the wire format first, so all end with the same values); messages k0 .. k0 + depth - 1. */
int _tsr_tree_bcast(const struct _tsr_comm *cm, starpu_data_handle_t x, struct _tsr_hops *b, int gi, int64_t step,
                    int k0);
/* Messages member me sends in one reduce + broadcast over p members. */
int _tsr_tree_messages(int me, int p);

#endif

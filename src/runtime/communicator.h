/* Communicators: an ordered list of world ranks (the world, or a sub-group split off by colour as
 * MPI_Comm_split does) and this process's index in it. Messages travel over MPI_COMM_WORLD through
 * StarPU-MPI, addressed by world rank; each communicator has its own tag space, so collectives on
 * communicators that share ranks (the world and a sub-group) never take each other's messages. */
#ifndef TSR_RUNTIME_COMMUNICATOR_H
#define TSR_RUNTIME_COMMUNICATOR_H

#include <stddef.h>
#include <stdint.h>
#include <tessera/status.h>

struct _tsr_comm {
  int size;   /* members */
  int index;  /* this process's index among them */
  int *ranks; /* world rank of each member, in order */
  int id;     /* tag space: 0 for the world; distinct among the communicators of any one process */
};

/* Bits of a tag a communicator's collectives choose (their "local" tag); the id goes above them.
 * The top local bit is left to the runtime's own control messages (splits). */
#define TSR_COMM_TAG_BITS 44
#define TSR_COMM_MAX_ID 4095

/* The world: every rank, in rank order. */
tsr_status _tsr_comm_world(struct _tsr_comm *c, int rank, int size);
/* Collective over the parent's members, like MPI_Comm_split: the members with the same colour form
 * one communicator, ordered by key, then by their index in the parent. A negative colour joins
 * none (out->size is then 0 and out->index -1). */
tsr_status _tsr_comm_split(const struct _tsr_comm *parent, int colour, int key, struct _tsr_comm *out);
void _tsr_comm_free(struct _tsr_comm *c);
/* The parent's members that share this process's node (memory), ordered by parent index: those
 * with the same host name, or, when TESSERA_NODE_SIZE is k > 0, world ranks [k i, k i + k) (nodes
 * emulated on one machine, for tests). Collective over the parent. */
tsr_status _tsr_comm_split_node(const struct _tsr_comm *parent, struct _tsr_comm *out);

/* The members of colour colour[me] among n parent members, in split order, into out (parent
 * indices); returns their count. The arithmetic of _tsr_comm_split, without the messages. */
int _tsr_comm_split_order(int n, const int *colour, const int *key, int me, int *out);

/* The tag a local tag (< 2^(TSR_COMM_TAG_BITS - 1)) of communicator c travels with. */
int64_t _tsr_comm_tag(const struct _tsr_comm *c, int64_t local);

/* Blocking send (send = 1) or receive of `bytes` bytes with world rank `peer`: 0 or StarPU-MPI's
 * error. For start-up exchanges, not for the step's traffic. */
int _tsr_comm_xfer(void *buf, size_t bytes, int peer, int send, int64_t tag);

#endif

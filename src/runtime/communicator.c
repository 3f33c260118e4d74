/* Communicators as lists of world ranks with their own tag spaces. A split is a gather of every
 * parent member's (colour, key, last id) to the parent's first member and a broadcast of the table
 * back, through StarPU-MPI point-to-point messages (no raw MPI call beside its progress thread). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <starpu_mpi.h>

#include "runtime/communicator.h"
#include "runtime/env.h"
#include "runtime/error.h"

/* The highest communicator id this process has taken part in. A new communicator takes one more
 * than the highest among the parent's members, so a process's communicators have increasing ids:
 * two communicators sharing a process (hence any pair of ranks) never share a tag space. */
static int last_id;

#define CONTROL_BIT ((int64_t)1 << (TSR_COMM_TAG_BITS - 1))
#define SPLIT_TAG 0x5B117

tsr_status _tsr_comm_world(struct _tsr_comm *c, int rank, int size) {
  if (!c || size < 1 || rank < 0 || rank >= size)
    return _tsr_error(TSR_ERR_ARG, "world communicator: rank %d of %d", rank, size);
  c->ranks = malloc(sizeof *c->ranks * size);
  if (!c->ranks) return _tsr_error(TSR_ERR_NOMEM, "world communicator: out of memory for %d ranks", size);
  for (int r = 0; r < size; r++) c->ranks[r] = r;
  c->size = size, c->index = rank, c->id = 0;
  return TSR_OK;
}

void _tsr_comm_free(struct _tsr_comm *c) {
  if (!c) return;
  free(c->ranks);
  memset(c, 0, sizeof *c);
}

int64_t _tsr_comm_tag(const struct _tsr_comm *c, int64_t local) {
  return ((int64_t)c->id << TSR_COMM_TAG_BITS) | local;
}

int _tsr_comm_xfer(void *buf, size_t bytes, int peer, int send, int64_t tag) {
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)buf, (uint32_t)bytes, 1);
  int ret = send ? starpu_mpi_send(h, peer, tag, MPI_COMM_WORLD)
                 : starpu_mpi_recv(h, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  starpu_data_unregister(h);
  return ret;
}

int _tsr_comm_split_order(int n, const int *colour, const int *key, int me, int *out) {
  if (colour[me] < 0) return 0;
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (colour[i] != colour[me]) continue;
    int j = m++; /* insertion by (key, index): i is the largest index so far, so ties stay behind */
    while (j > 0 && key[out[j - 1]] > key[i]) out[j] = out[j - 1], j--;
    out[j] = i;
  }
  return m;
}

/* Every parent member's (colour, key, last id), in parent order, on every member. */
static int exchange(const struct _tsr_comm *p, int *table) {
  int64_t tag = _tsr_comm_tag(p, CONTROL_BIT | SPLIT_TAG);
  size_t row = 3 * sizeof(int);
  int ret = 0;
  if (p->index != 0) {
    ret = _tsr_comm_xfer(table + 3 * p->index, row, p->ranks[0], 1, tag);
    if (!ret) ret = _tsr_comm_xfer(table, row * p->size, p->ranks[0], 0, tag + 1);
    return ret;
  }
  for (int i = 1; !ret && i < p->size; i++) ret = _tsr_comm_xfer(table + 3 * i, row, p->ranks[i], 0, tag);
  for (int i = 1; !ret && i < p->size; i++) ret = _tsr_comm_xfer(table, row * p->size, p->ranks[i], 1, tag + 1);
  return ret;
}

tsr_status _tsr_comm_split(const struct _tsr_comm *parent, int colour, int key, struct _tsr_comm *out) {
  if (!parent || !out || parent->index < 0 || parent->index >= parent->size)
    return _tsr_error(TSR_ERR_ARG, "communicator split: the parent and the result are required, and this "
                                   "process must be a member of the parent");
  memset(out, 0, sizeof *out);
  out->index = -1;
  int n = parent->size, *table = calloc(3 * (size_t)n, sizeof *table), *colours = calloc(n, sizeof *colours),
      *keys = calloc(n, sizeof *keys), *order = calloc(n, sizeof *order);
  tsr_status st = table && colours && keys && order ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "communicator split: out of memory");
  if (st == TSR_OK) {
    int *mine = table + 3 * parent->index;
    mine[0] = colour < 0 ? -1 : colour, mine[1] = key, mine[2] = last_id;
    int ret = exchange(parent, table);
    if (ret) st = _tsr_error(TSR_ERR_RUNTIME, "communicator split: StarPU-MPI transfer failed (%d)", ret);
  }
  int id = 0;
  for (int i = 0; st == TSR_OK && i < n; i++) {
    colours[i] = table[3 * i], keys[i] = table[3 * i + 1];
    if (table[3 * i + 2] > id) id = table[3 * i + 2];
  }
  if (st == TSR_OK && ++id > TSR_COMM_MAX_ID)
    st = _tsr_error(TSR_ERR_RUNTIME, "communicator split: more than %d communicators in one process", TSR_COMM_MAX_ID);
  if (st == TSR_OK) {
    last_id = id;
    int m = _tsr_comm_split_order(n, colours, keys, parent->index, order);
    out->ranks = malloc(sizeof *out->ranks * (m ? m : 1));
    if (!out->ranks) st = _tsr_error(TSR_ERR_NOMEM, "communicator split: out of memory");
    for (int j = 0; st == TSR_OK && j < m; j++) {
      out->ranks[j] = parent->ranks[order[j]];
      if (order[j] == parent->index) out->index = j;
    }
    out->size = m, out->id = id;
  }
  free(table), free(colours), free(keys), free(order);
  if (st != TSR_OK) _tsr_comm_free(out), out->index = -1;
  return st;
}

/* FNV-1a of the host name from `seed`, as a non-negative colour. */
static int host_colour(const char *host, uint32_t seed) {
  uint32_t h = seed;
  for (const char *c = host; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
  return (int)(h & 0x7FFFFFFF);
}

tsr_status _tsr_comm_split_node(const struct _tsr_comm *parent, struct _tsr_comm *out) {
  int k = _tsr_env_node_size();
  if (k > 0) return _tsr_comm_split(parent, parent->ranks[parent->index] / k, 0, out);
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return _tsr_error(TSR_ERR_RUNTIME, "node split: no host name");
  /* two splits by independent hashes: hosts merge only if both 31-bit hashes collide */
  struct _tsr_comm first;
  TSR_TRY(_tsr_comm_split(parent, host_colour(host, 2166136261u), 0, &first));
  tsr_status st = _tsr_comm_split(&first, host_colour(host, 0x9E3779B9u), 0, out);
  _tsr_comm_free(&first);
  return st;
}

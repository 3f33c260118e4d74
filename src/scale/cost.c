/* Cost models of the reductions, one entry per algorithm: the time of one group's sum over P ranks
 * from the links of a machine (latency + bytes / bandwidth per message, a node's shared link divided
 * among the flows that cross it at once) and the rates of the sums and packs on receipt. Ranks sit
 * k to a node, consecutive ranks together, so a ring crosses each node boundary once per direction.
 * Each model is written as the sequence of its rounds, a message followed by the work on what
 * arrived, and its time is their sum: the replay under progress `worker` plays the rounds one by one.
 * Ranks that take turns on one core (the machine's timeslice_us, ranks_per_core) add to every round
 * the wait for each of them to have run (turn_wait; the replay counts it where the rank is idle;
 * simulate.c).
 * A new collective is one entry here (docs/scaling.md gives each formula). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "scale/scale.h"

static double rate(double gbit) { return gbit * 125.0; } /* Gbit/s -> bytes per us */
static int per_node(const tsr_machine *mc, int p) { return mc->ranks_per_node < p ? mc->ranks_per_node : p; }

/* Ranks taking turns on one core (timeslice_us; ranks_per_core, else the node's ranks): a round
 * ends once every rank on the core has run after its message arrived. The rank running then finishes
 * its slice (half of it left on average), the others follow one whole slice each: (c - 1.5) slices
 * beyond the last arrival. But a rank's next turn comes a whole rotation, (c - 1) slices, after its
 * last one, when it sent its message: a message that spends less than half a slice on the wire
 * waits for the rest of that rotation, (c - 1) slices less the wire time. */
static double turn_wait(const tsr_machine *mc, int p, double wire) {
  int c = mc->ranks_per_core > 0 ? (mc->ranks_per_core < p ? mc->ranks_per_core : p) : per_node(mc, p);
  if (!(mc->timeslice_us > 0 && c > 1)) return 0;
  double after = (c - 1.5) * mc->timeslice_us, rotation = (c - 1) * mc->timeslice_us - wire;
  return rotation > after ? rotation : after;
}

/* `count` rounds over p ranks of one message (wire us, then the wait for the ranks' turns) followed
 * by work (us) on what arrived: their time, and appended to r when the rounds are wanted. */
static double rounds(const tsr_machine *mc, int p, struct _tsr_rounds *r, int count, double wire, double work) {
  double wait = turn_wait(mc, p, wire);
  for (int i = 0; r && i < count; i++) {
    if (r->n == r->cap) {
      int cap = r->cap ? 2 * r->cap : 64;
      struct _tsr_round *v = realloc(r->v, cap * sizeof *v);
      if (!v) {
        r->oom = 1;
        break;
      }
      r->v = v, r->cap = cap;
    }
    r->v[r->n++] = (struct _tsr_round){wire, work, wait};
  }
  return count > 0 ? count * (wire + wait + work) : 0;
}

/* One message of m bytes over link l while `flows` messages share it (when it is shared); above the
 * eager limit MPI waits for the receiver's answer to a rendezvous before the bulk of the data. In an
 * exchange (ex: the round's ranks send and receive at once, both directions of the link busy) the
 * bytes move at the link's exchange rate when it has one below its bandwidth. */
static double hop_ex(const tsr_link *l, double m, int flows, int ex) {
  double bw = ex && l->exchange_gbit > 0 && l->exchange_gbit < l->bandwidth_gbit ? l->exchange_gbit : l->bandwidth_gbit;
  return l->latency_us + (m > l->eager_bytes ? l->rendezvous_us : 0) + m * (l->shared && flows > 1 ? flows : 1) / rate(bw);
}
/* The rounds of every model are exchanges but the binomial tree's and the hand-overs of ranks beyond a
 * power of two (one way). */
static double hop(const tsr_link *l, double m, int flows) { return hop_ex(l, m, flows, 1); }
static double sum_us(const tsr_machine *mc, double b) { return b / rate(mc->reduce_gbit); }
static double pack_us(const tsr_machine *mc, double b) { return b / rate(mc->pack_gbit); }
/* One round in which every rank sends m bytes to its ring neighbour: the slowest hop. */
static double ring_round(const tsr_machine *mc, int p, double m) {
  int k = per_node(mc, p), nodes = (p + k - 1) / k;
  double a = k > 1 ? hop(&mc->intra, m, 1) : 0, b = nodes > 1 ? hop(&mc->inter, m, 1) : 0;
  return a > b ? a : b;
}

/* Ring (ring.c): reduce-scatter then allgather, 2(P-1) rounds of n/P; a sum per reduce-scatter
 * round; half formats halve the bytes and pack/unpack each round. */
static double ring(const tsr_machine *mc, double n, int p, double wire, struct _tsr_rounds *r) {
  double c = n / p, w = ring_round(mc, p, c * wire), pk = wire < 1 ? pack_us(mc, c) : 0;
  return rounds(mc, p, r, p - 1, w, sum_us(mc, c) + pk) + rounds(mc, p, r, p - 1, w, pk);
}
static double ring_f32(const tsr_machine *mc, double n, int p, struct _tsr_rounds *r) { return ring(mc, n, p, 1.0, r); }
static double ring_half(const tsr_machine *mc, double n, int p, struct _tsr_rounds *r) { return ring(mc, n, p, 0.5, r); }

/* Recursive doubling: log2(P') rounds exchanging the whole vector with the rank at distance
 * 1, 2, 4...; from distance k on, all k ranks of a node cross its link at once. P not a power of
 * two: the P - P' extra ranks fold into partners first and get the result back (two more rounds). */
static double recdouble(const tsr_machine *mc, double n, int p, struct _tsr_rounds *r) {
  int k = per_node(mc, p), p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  double t = 0, fold = hop_ex(p > k ? &mc->inter : &mc->intra, n, 1, 0); /* one way */
  if (p2 < p) t += rounds(mc, p, r, 1, fold, sum_us(mc, n));
  for (int d = 1; d < p2; d *= 2)
    t += rounds(mc, p, r, 1, d < k ? hop(&mc->intra, n, 1) : hop(&mc->inter, n, k), sum_us(mc, n));
  if (p2 < p) t += rounds(mc, p, r, 1, fold, 0);
  return t;
}

/* Binomial tree: ceil(log2 P) rounds summing whole groups towards the first member (up), or as many
 * broadcasting the result (down; partners 1, 2, 4... apart: inside a node while closer than k). */
static double tree_half(const tsr_machine *mc, double n, int p, int up, struct _tsr_rounds *r) {
  int k = per_node(mc, p), levels = 0;
  double h[32], t = 0;
  for (int d = 1; d < p; d *= 2) h[levels++] = hop_ex(d < k ? &mc->intra : &mc->inter, n, 1, 0); /* one way */
  for (int i = 0; i < levels; i++)
    t += up ? rounds(mc, p, r, 1, h[i], sum_us(mc, n)) : rounds(mc, p, r, 1, h[levels - 1 - i], 0);
  return t;
}
static double tree(const tsr_machine *mc, double n, int p, struct _tsr_rounds *r) {
  return tree_half(mc, n, p, 1, r) + tree_half(mc, n, p, 0, r);
}

/* Hierarchical (hier.c): a binomial-tree sum inside each node to its first member, the float32
 * ring across the N node leaders (2(N-1) rounds of n/N, one flow per node link), a binomial-tree
 * broadcast inside each node. */
static double hier(const tsr_machine *mc, double n, int p, struct _tsr_rounds *r) {
  int k = per_node(mc, p), nodes = (p + k - 1) / k;
  double t = tree_half(mc, n, k, 1, r), w = hop(&mc->inter, n / nodes, 1);
  if (nodes > 1) t += rounds(mc, p, r, nodes - 1, w, sum_us(mc, n / nodes)) + rounds(mc, p, r, nodes - 1, w, 0);
  return t + tree_half(mc, n, k, 0, r);
}

/* Recursive halving then doubling (Rabenseifner, halving.c) over p members `stride` ranks apart (1: neighbours,
 * k: one rank per node): halving rounds send n/2, n/4... to partners at distances 1, 2, 4... members,
 * summing what they receive, and the allgather retraces them. A round whose partners are k or more
 * ranks apart crosses the node link with `flows` messages at once. P not a power of two: the P - P'
 * members beyond P' first hand their whole vector to member index - P' and get the result back;
 * `fold` of those messages cross a node link at once. */
static double halving(const tsr_machine *mc, double n, int p, int stride, int flows, int fold, struct _tsr_rounds *r) {
  int k = per_node(mc, p * stride), p2 = 1, levels = 0;
  while (p2 * 2 <= p) p2 *= 2;
  double t = 0, m = n, h[32], f = hop_ex(p * stride > k ? &mc->inter : &mc->intra, n, fold, 0); /* one way */
  if (p2 < p) t += rounds(mc, p * stride, r, 1, f, sum_us(mc, n));
  for (int d = 1; d < p2; d *= 2) {
    m /= 2;
    h[levels++] = d * stride < k ? hop(&mc->intra, m, 1) : hop(&mc->inter, m, flows);
    t += rounds(mc, p * stride, r, 1, h[levels - 1], sum_us(mc, m));
  }
  for (int i = levels - 1; i >= 0; i--) t += rounds(mc, p * stride, r, 1, h[i], 0);
  if (p2 < p) t += rounds(mc, p * stride, r, 1, f, 0);
  return t;
}
/* Over all ranks: in a round between nodes every rank of a node sends across at once (k flows); the
 * hand-over is made by the P - P' last ranks only, at most k of them on one node. */
static double rabenseifner(const tsr_machine *mc, double n, int p, struct _tsr_rounds *r) {
  int k = per_node(mc, p), p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  return halving(mc, n, p, 1, k, p - p2 < k ? p - p2 : k, r);
}

/* Hierarchical with halving/doubling across nodes (hier_rh.c): the ring reduce-scatter inside each node, k
 * concurrent Rabenseifner reductions across the N nodes (one per slice of n/k), allgather inside; every
 * slice's reduction hands over at once when N is not a power of two (k flows). */
static double hier_rh(const tsr_machine *mc, double n, int p, struct _tsr_rounds *r) {
  int k = per_node(mc, p), nodes = (p + k - 1) / k;
  double s = n / k, w = hop(&mc->intra, s, 1), t = rounds(mc, p, r, k - 1, w, sum_us(mc, s));
  if (nodes > 1) t += halving(mc, s, nodes, k, k, k, r);
  return t + rounds(mc, p, r, k - 1, w, 0);
}

/* 1-bit sign votes (sign.c, "sign1"): a reduce-scatter and an allgather of packed signs, one bit
 * per float32 value (n/32 bytes in all, n/32P per message), P-1 rounds each; the owner of a chunk
 * counts the P-1 votes it receives (n/4P values each, costed like float32 sums of a quarter); the
 * packing of n values is counted as work of the last round. */
static double sign_ring(const tsr_machine *mc, double n, int p, double msg, struct _tsr_rounds *r) {
  double w = ring_round(mc, p, msg);
  return rounds(mc, p, r, p - 1, w, sum_us(mc, n / 4 / p)) + rounds(mc, p, r, p - 2, w, 0) +
         rounds(mc, p, r, 1, w, pack_us(mc, n));
}
static double sign1(const tsr_machine *mc, double n, int p, struct _tsr_rounds *r) {
  return sign_ring(mc, n, p, n / 32 / p, r);
}

/* p-bit partial sums of signs (sign.c, "signp"): the ring on ceil(log2(2P + 1)) bits per value. */
static double signp(const tsr_machine *mc, double n, int p, struct _tsr_rounds *r) {
  int bits = 0;
  while ((1 << bits) < 2 * p + 1) bits++;
  return sign_ring(mc, n, p, n / 32 * bits / p, r);
}

static const struct _tsr_cost_model models[] = {
    {"f32", "ring", 1, "ring allreduce, float32 chunks (ring.c)", ring_f32},
    {"bf16", "ring", 0, "ring allreduce, bf16 chunks summed in float32 (ring.c)", ring_half},
    {"fp16", "ring", 0, "ring allreduce, fp16 chunks summed in float32 (ring.c)", ring_half},
    {"rd", "recursive doubling", 1, "recursive doubling, float32: log2(P) rounds of the whole group", recdouble},
    {"tree", "binomial tree", 1, "binomial-tree sum then broadcast, float32: 2 log2(P) rounds", tree},
    {"hier", "hierarchical", 1, "tree inside nodes, float32 ring across node leaders (hier.c)", hier},
    {"rabenseifner", "halving-doubling", 1, "recursive halving reduce-scatter + doubling allgather, float32 (halving.c)",
     rabenseifner},
    {"hier-rh", "hierarchical", 1, "ring inside nodes, k concurrent halving-doublings across nodes, float32 (hier_rh.c)",
     hier_rh},
    {"sign1", "sign votes", 0, "1-bit sign votes: reduce-scatter and allgather of packed signs (sign.c)", sign1},
    {"signp", "sign votes", 0, "ring of p-bit partial sums of signs, p = ceil(log2(2P+1)) (sign.c)", signp},
};
enum { NMODELS = sizeof models / sizeof *models };

const struct _tsr_cost_model *_tsr_cost_model(const char *name) {
  for (int i = 0; i < NMODELS; i++)
    if (!strcmp(models[i].name, name)) return &models[i];
  return NULL;
}

const char *tsr_scale_algo_name(int i, const char **about) {
  if (i < 0 || i >= NMODELS) return NULL;
  if (about) *about = models[i].about;
  return models[i].name;
}

double _tsr_cost_us(const tsr_machine *mc, const char *algo, double bytes, int ranks, const char **used) {
  if (ranks <= 1) return *used = algo, 0;
  const struct _tsr_cost_model *c = _tsr_cost_model(algo);
  if (c) return *used = c->name, c->time_us(mc, bytes, ranks, NULL);
  double best = INFINITY; /* "best": the cheapest exact model */
  for (int i = 0; i < NMODELS; i++) {
    double t = models[i].exact ? models[i].time_us(mc, bytes, ranks, NULL) : INFINITY;
    if (t < best) best = t, *used = models[i].name;
  }
  return best;
}

double _tsr_cost_rounds(const tsr_machine *mc, const char *name, double bytes, int ranks, struct _tsr_rounds *r) {
  const struct _tsr_cost_model *c = _tsr_cost_model(name);
  if (ranks <= 1 || !c) return 0;
  double t = c->time_us(mc, bytes, ranks, r);
  return r->oom ? -1 : t;
}

tsr_status _tsr_cost_check(const char *algo) {
  if (algo && (!strcmp(algo, "best") || _tsr_cost_model(algo))) return TSR_OK;
  char list[256] = "";
  for (int i = 0; i < NMODELS; i++) strcat(strcat(list, models[i].name), ", ");
  return _tsr_error(TSR_ERR_ARG, "reduction cost model '%s' is not one of %sbest", algo ? algo : "(null)", list);
}

tsr_status tsr_scale_collective_us(const tsr_machine *m, const char *algo, double bytes, int ranks, double *us) {
  if (!m || !us) return _tsr_error(TSR_ERR_ARG, "tsr_scale_collective_us: machine and result are required");
  if (ranks < 1 || !(bytes >= 0))
    return _tsr_error(TSR_ERR_ARG, "tsr_scale_collective_us: %d ranks, %g bytes (need >= 1 and >= 0)", ranks, bytes);
  TSR_TRY(_tsr_cost_check(algo));
  const char *used;
  *us = _tsr_cost_us(m, algo, bytes, ranks, &used);
  return TSR_OK;
}

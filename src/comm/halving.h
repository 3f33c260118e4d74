/* Recursive halving and doubling (Rabenseifner's allreduce) of one vector handle over any
 * communicator, for the "rabenseifner" entries and, across nodes on one slice each, the "hier-rh"
 * ones (halving.c, hier_rh.c). */
#ifndef TSR_COMM_HALVING_H
#define TSR_COMM_HALVING_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>

struct _tsr_comm;
struct _tsr_halving;

/* The plan of member me of p for x (n floats, whole, no partition active; its first `keep` stay
 * float32 in half formats) in wire format fmt (ring.h): its halves, quarters... down to its own
 * slice (nested partitions of x) and its buffers. Needs n >= p. NULL when out of memory;
 * _tsr_halving_free also frees a half-made plan. */
struct _tsr_halving *_tsr_halving_plan(starpu_data_handle_t x, size_t n, size_t keep, int fmt, int p, int me);
void _tsr_halving_free(struct _tsr_halving *h);
/* Submits the sum of x over cm (the plan's p and me): x is whole again afterwards and holds the
 * same bits on every member. Messages 0 .. 2 log2 p' and 2047 of (step, group gi). 0 or
 * StarPU-MPI's error. */
int _tsr_halving_sum(const struct _tsr_comm *cm, struct _tsr_halving *h, int gi, int64_t step);
/* Bytes this member sends in one _tsr_halving_sum. */
int64_t _tsr_halving_bytes(const struct _tsr_halving *h);

#endif

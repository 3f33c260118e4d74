/* Per-channel statistics of samples in float64 (stats.c): the loader's input statistics over a
 * file's samples, and a pool's over its producer's samples 0..n-1. loader.c is its only user. */
#ifndef TSR_DATA_STATS_H
#define TSR_DATA_STATS_H

#include <stddef.h>
#include <stdint.h>

#include <tessera/status.h>

struct _tsr_pool;

/* Adds one sample [nc, plane]: per channel, the values to s1 and their squares to s2, in order. */
void _tsr_stats_add(const float *v, int nc, size_t plane, double *s1, double *s2);
/* From the sums over n values per channel: mean s1 / n and std sqrt(s2 / n - mean^2), or 1 where
 * that variance is not above 1e-24 (a constant channel is shifted, not scaled). */
void _tsr_stats_finish(const double *s1, const double *s2, double n, int nc, double *mean, double *std);

/* The producer's samples 0..max(n_in, n_t)-1 by index (not by a rank's stream position: the same on
 * every rank and for any number of ranks), each produced once: the inputs ([c, plane]) of the
 * first n_in give in_mean and in_std (as _tsr_stats_finish), the targets ([tc, tplane]) of the
 * first n_t, held in memory, give t_mean and the population std t_std in two passes (mean, then
 * squared deviations; 0 for a constant channel). Arrays of c and tc entries; n = 0 skips either. */
tsr_status _tsr_pool_stats(struct _tsr_pool *p, int c, size_t plane, int tc, size_t tplane, int n_in, int n_t,
                           double *in_mean, double *in_std, double *t_mean, double *t_std);

#endif

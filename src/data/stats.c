/* Per-channel statistics of samples in float64 (stats.h). A pool's come from its producer's samples
 * 0..n-1 by index, so every rank of a run, whatever their number, standardises alike. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/pool.h"
#include "data/stats.h"
#include "runtime/error.h"

void _tsr_stats_add(const float *v, int nc, size_t plane, double *s1, double *s2) {
  for (int c = 0; c < nc; c++)
    for (size_t p = 0; p < plane; p++) {
      double x = v[c * plane + p];
      s1[c] += x, s2[c] += x * x;
    }
}

void _tsr_stats_finish(const double *s1, const double *s2, double n, int nc, double *mean, double *std) {
  for (int c = 0; c < nc; c++) {
    mean[c] = s1[c] / n;
    double var = s2[c] / n - mean[c] * mean[c];
    std[c] = var > 1e-24 ? sqrt(var) : 1.0;
  }
}

tsr_status _tsr_pool_stats(struct _tsr_pool *p, int c, size_t plane, int tc, size_t tplane, int n_in, int n_t,
                           double *in_mean, double *in_std, double *t_mean, double *t_std) {
  int k = n_in > n_t ? n_in : n_t;
  size_t ye = (size_t)tc * tplane;
  float *x = malloc(sizeof(float) * c * plane), *held = malloc(sizeof(float) * ye * (n_t + 1));
  double *s1 = calloc(c, sizeof(double)), *s2 = calloc(c, sizeof(double)), *sq = calloc(tc, sizeof(double));
  tsr_status st = x && held && s1 && s2 && sq ? TSR_OK
                  : _tsr_error(TSR_ERR_NOMEM, "pool: out of memory for the statistics of %d samples (%d targets held)",
                               k, n_t);
  for (int i = 0; i < k && st == TSR_OK; i++) {
    st = _tsr_pool_produce_index(p, i, x, held + ye * (i < n_t ? i : n_t)); /* entry n_t: not used */
    if (st == TSR_OK && i < n_in) _tsr_stats_add(x, c, plane, s1, s2);
  }
  if (st == TSR_OK && n_in > 0) _tsr_stats_finish(s1, s2, (double)n_in * plane, c, in_mean, in_std);
  if (st == TSR_OK && n_t > 0) {
    double n = (double)n_t * tplane;
    memset(t_mean, 0, sizeof(double) * tc);
    for (int i = 0; i < n_t; i++)
      for (int ch = 0; ch < tc; ch++)
        for (size_t q = 0; q < tplane; q++) t_mean[ch] += held[ye * i + ch * tplane + q];
    for (int ch = 0; ch < tc; ch++) t_mean[ch] /= n;
    for (int i = 0; i < n_t; i++)
      for (int ch = 0; ch < tc; ch++)
        for (size_t q = 0; q < tplane; q++) {
          double d = held[ye * i + ch * tplane + q] - t_mean[ch];
          sq[ch] += d * d;
        }
    for (int ch = 0; ch < tc; ch++) t_std[ch] = sqrt(sq[ch] / n);
  }
  free(x), free(held), free(s1), free(s2), free(sq);
  return st;
}

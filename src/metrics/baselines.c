/* The reference predictors a trained model is compared with: the per-pixel mean of the training
 * targets, and the target of the training sample nearest (L2) to each input. Both read samples
 * through the loader, each training sample once. */
#include <math.h>
#include <stdlib.h>

#include <tessera/metrics.h>

#include "runtime/error.h"

static tsr_status check_range(const char *fn, const tsr_loader *l, int64_t first, int64_t n) {
  if (!l) return _tsr_error(TSR_ERR_ARG, "%s: the loader is required", fn);
  if (first < 0 || n <= 0 || first + n > tsr_loader_size(l))
    return _tsr_error(TSR_ERR_ARG, "%s: samples [%lld, %lld) of a loader of %lld (a non-empty range inside it)", fn,
                      (long long)first, (long long)(first + n), (long long)tsr_loader_size(l));
  return TSR_OK;
}

tsr_status tsr_baseline_mean_target(tsr_loader *train, int64_t first, int64_t n, float *mean) {
  TSR_TRY(check_range("tsr_baseline_mean_target", train, first, n));
  if (!mean) return _tsr_error(TSR_ERR_ARG, "tsr_baseline_mean_target: the output is required");
  int c, h, w;
  tsr_loader_target_shape(train, &c, &h, &w);
  size_t ye = (size_t)c * h * w;
  float *y = malloc(sizeof(float) * ye);
  double *sum = calloc(ye, sizeof(double));
  tsr_status st = y && sum ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "tsr_baseline_mean_target: out of memory");
  for (int64_t i = 0; st == TSR_OK && i < n; i++) {
    st = tsr_loader_read(train, first + i, NULL, y);
    for (size_t j = 0; st == TSR_OK && j < ye; j++) sum[j] += y[j];
  }
  for (size_t j = 0; st == TSR_OK && j < ye; j++) mean[j] = (float)(sum[j] / (double)n);
  free(y), free(sum);
  return st;
}

tsr_status tsr_baseline_nearest(tsr_loader *train, int64_t first, int64_t n, const float *queries, int64_t nq,
                                int64_t *idx, double *dist2) {
  TSR_TRY(check_range("tsr_baseline_nearest", train, first, n));
  if (!queries || !idx || nq <= 0)
    return _tsr_error(TSR_ERR_ARG, "tsr_baseline_nearest: %lld queries (at least one), and the outputs", (long long)nq);
  int c, h, w;
  tsr_loader_input_shape(train, &c, &h, &w);
  size_t xe = (size_t)c * h * w;
  float *x = malloc(sizeof(float) * xe);
  double *best = malloc(sizeof(double) * nq);
  tsr_status st = x && best ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "tsr_baseline_nearest: out of memory");
  for (int64_t q = 0; st == TSR_OK && q < nq; q++) best[q] = INFINITY, idx[q] = first;
  for (int64_t i = 0; st == TSR_OK && i < n; i++) {
    st = tsr_loader_read(train, first + i, x, NULL);
    for (int64_t q = 0; st == TSR_OK && q < nq; q++) {
      const float *a = queries + (size_t)q * xe;
      double d = 0;
      for (size_t j = 0; j < xe && d < best[q]; j += 256) /* partial sums: stop once it cannot win */
        for (size_t k = j; k < j + 256 && k < xe; k++) d += ((double)a[k] - x[k]) * ((double)a[k] - x[k]);
      if (d < best[q]) best[q] = d, idx[q] = first + i;
    }
  }
  for (int64_t q = 0; st == TSR_OK && dist2 && q < nq; q++) dist2[q] = best[q];
  free(x), free(best);
  return st;
}

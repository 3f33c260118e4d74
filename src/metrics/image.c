/* Image metrics: PSNR, SSIM (Wang et al. 2004, Gaussian window) and their sums over a set of
 * predicted images (tsr_metrics), with the atom columns of columns.c. Everything in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tessera/metrics.h>

#include "runtime/error.h"

double tsr_metric_psnr(const float *truth, const float *pred, size_t n, double range) {
  double se = 0;
  for (size_t i = 0; i < n; i++) se += ((double)pred[i] - truth[i]) * ((double)pred[i] - truth[i]);
  return 10 * log10(range * range / (se / (double)n));
}

/* One pass of the normalised 11-tap Gaussian along rows ("valid": w - 10 outputs per row) over the
 * five local moments x, y, x^2, y^2, xy; then the same along columns. */
enum { K = TSR_SSIM_WINDOW, MOMENTS = 5 };

static void gaussian(double g[K]) {
  double sum = 0, sigma = 1.5;
  for (int k = 0; k < K; k++) g[k] = exp(-(k - K / 2) * (k - K / 2) / (2 * sigma * sigma)), sum += g[k];
  for (int k = 0; k < K; k++) g[k] /= sum;
}

tsr_status tsr_metric_ssim(const float *truth, const float *pred, int h, int w, double range, double *ssim) {
  if (!truth || !pred || !ssim) return _tsr_error(TSR_ERR_ARG, "tsr_metric_ssim: images and result are required");
  if (h < K || w < K || !(range > 0))
    return _tsr_error(TSR_ERR_ARG, "tsr_metric_ssim: a %d x %d image with data range %g (at least %d x %d, range > 0)",
                      h, w, range, K, K);
  int ow = w - K + 1, oh = h - K + 1;
  double g[K], *rows = malloc(sizeof(double) * MOMENTS * h * ow);
  if (!rows) return _tsr_error(TSR_ERR_NOMEM, "tsr_metric_ssim: out of memory for a %d x %d image", h, w);
  gaussian(g);
  for (int i = 0; i < h; i++)
    for (int j = 0; j < ow; j++) {
      double s[MOMENTS] = {0};
      for (int k = 0; k < K; k++) {
        double x = truth[(size_t)i * w + j + k], y = pred[(size_t)i * w + j + k];
        s[0] += g[k] * x, s[1] += g[k] * y, s[2] += g[k] * x * x, s[3] += g[k] * y * y, s[4] += g[k] * x * y;
      }
      for (int m = 0; m < MOMENTS; m++) rows[((size_t)m * h + i) * ow + j] = s[m];
    }
  double c1 = (0.01 * range) * (0.01 * range), c2 = (0.03 * range) * (0.03 * range), sum = 0;
  for (int i = 0; i < oh; i++)
    for (int j = 0; j < ow; j++) {
      double s[MOMENTS] = {0};
      for (int k = 0; k < K; k++)
        for (int m = 0; m < MOMENTS; m++) s[m] += g[k] * rows[((size_t)m * h + i + k) * ow + j];
      double mx = s[0], my = s[1], vx = s[2] - mx * mx, vy = s[3] - my * my, cxy = s[4] - mx * my;
      sum += (2 * mx * my + c1) * (2 * cxy + c2) / ((mx * mx + my * my + c1) * (vx + vy + c2));
    }
  free(rows);
  *ssim = sum / ((double)oh * ow);
  return TSR_OK;
}

void tsr_metrics_init(tsr_metrics *m) {
  memset(m, 0, sizeof *m);
  m->columns = 1;
}

tsr_status tsr_metrics_add(tsr_metrics *m, const float *truth, const float *pred, int c, int h, int w, double px,
                           double py, const tsr_columns_opts *o) {
  if (!m || !truth || !pred || c <= 0)
    return _tsr_error(TSR_ERR_ARG, "tsr_metrics_add: sums, images and channels are required");
  size_t plane = (size_t)h * w;
  for (int ch = 0; ch < c; ch++) {
    const float *t = truth + ch * plane, *p = pred + ch * plane;
    double lo = INFINITY, hi = -INFINITY, se = 0;
    for (size_t i = 0; i < plane; i++) {
      lo = fmin(lo, t[i]), hi = fmax(hi, t[i]);
      se += ((double)p[i] - t[i]) * ((double)p[i] - t[i]);
    }
    double range = hi > lo ? hi - lo : 1, ssim;
    if (h >= K && w >= K) {
      TSR_TRY(tsr_metric_ssim(t, p, h, w, range, &ssim));
      m->ssim += ssim, m->ssim_images++;
    }
    if (se > 0)
      m->psnr += tsr_metric_psnr(t, p, plane, range);
    else
      m->psnr_inf++;
    m->se += se, m->values += (int64_t)plane, m->images++;
    if (px > 0 && py > 0 && h >= 3 && w >= 3)
      TSR_TRY(tsr_columns_match(t, p, h, w, px, py, o, NULL, 0, &m->col));
    else
      m->columns = 0;
  }
  return TSR_OK;
}

double tsr_metrics_mse(const tsr_metrics *m) { return m->values ? m->se / (double)m->values : NAN; }

double tsr_metrics_psnr(const tsr_metrics *m) {
  int64_t finite = m->images - m->psnr_inf;
  return !m->images ? NAN : finite ? m->psnr / (double)finite : INFINITY;
}

double tsr_metrics_ssim(const tsr_metrics *m) { return m->ssim_images ? m->ssim / (double)m->ssim_images : NAN; }

double tsr_metrics_detection(const tsr_metrics *m) {
  return m->images && m->columns && m->col.ntrue ? (double)m->col.nmatched / (double)m->col.ntrue : NAN;
}

double tsr_metrics_position_error(const tsr_metrics *m) {
  return m->images && m->columns && m->col.nmatched ? m->col.err_sum / (double)m->col.nmatched : NAN;
}

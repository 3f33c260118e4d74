/* The detector: the simulated diffraction intensity (piecewise constant over simulation pixels of
 * lambda / L rad) integrated exactly over square detector pixels of a fixed angle, so that every
 * sample has the same angular pixel whatever its cell (binning when the simulation's pixels are
 * finer, area-weighted sharing when coarser); Poisson counting of a finite dose; and a Gaussian
 * point-spread function (MTF exp(-2 pi^2 sigma^2 q^2)) applied to the counts, as the scintillator of
 * a camera spreads each electron's signal. */
#include <math.h>
#include <string.h>

#include "sim/cbed/cbed.h"

/* Adds weight f(i, u) src[i] to dst[u] along one axis: f = the fraction of simulation pixel i
 * (centred at (i - n/2) s) inside detector pixel u (centred at (u - p/2) d), s and d in one unit. */
static void rebin(const double *src, int sstride, int n, double s, int p, double d, double weight, double *dst,
                  int dstride) {
  for (int i = 0; i < n; i++) {
    double v = src[(size_t)i * sstride];
    if (v == 0) continue;
    double a = (i - n / 2 - 0.5) * s / d + p / 2 + 0.5, b = (i - n / 2 + 0.5) * s / d + p / 2 + 0.5;
    for (int u = a < 0 ? 0 : (int)floor(a); u < b && u < p; u++) {
      double lo = fmax(a, u), hi = fmin(b, u + 1);
      if (hi > lo) dst[(size_t)u * dstride] += weight * v * (hi - lo) / (b - a);
    }
  }
}

void _tsr_cbed_detect(const double *img, int n, double lx, double ly, double lambda, int p, double det_mrad,
                      double weight, double *scratch, double *out) {
  if (det_mrad <= 0) { /* the centre p x p simulation pixels */
    int off = (n - p) / 2;
    for (int j = 0; j < p; j++)
      for (int i = 0; i < p; i++) out[(size_t)j * p + i] += weight * img[(size_t)(j + off) * n + off + i];
    return;
  }
  /* separable: each row onto the detector's columns (scratch [n][p]), then each column onto rows */
  double sx = lambda / lx * 1e3, sy = lambda / ly * 1e3;
  memset(scratch, 0, sizeof(double) * n * p);
  for (int j = 0; j < n; j++) rebin(img + (size_t)j * n, 1, n, sx, p, det_mrad, 1.0, scratch + (size_t)j * p, 1);
  for (int u = 0; u < p; u++) rebin(scratch + u, p, n, sy, p, det_mrad, weight, out + u, p);
}

double _tsr_cbed_poisson(double mean, double (*uniform)(void *), void *rng) {
  if (!(mean > 0)) return 0;
  if (mean < 10) { /* inversion: P(k) by the recurrence p_k = p_{k-1} mean / k; bounded by the tail */
    double u = uniform(rng), pk = exp(-mean), cdf = pk;
    int k = 0;
    while (u > cdf && k < 1000) k++, pk *= mean / k, cdf += pk;
    return k;
  }
  /* PTRS, transformed rejection with squeeze (W. Hoermann, Insurance: Mathematics and Economics 12,
   * 39-45, 1993); accepts about 90% of tries, so 1000 tries never run out in practice */
  double slam = sqrt(mean), loglam = log(mean), b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
  double inv_alpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2);
  for (int t = 0; t < 1000; t++) {
    double u = uniform(rng) - 0.5, v = uniform(rng), us = 0.5 - fabs(u);
    double k = floor((2 * a / us + b) * u + mean + 0.43);
    if (us >= 0.07 && v <= vr) return k;
    if (k < 0 || (us < 0.013 && v > us)) continue;
    if (log(v) + log(inv_alpha) - log(a / (us * us) + b) <= -mean + k * loglam - lgamma(k + 1)) return k;
  }
  return floor(mean + 0.5);
}

void _tsr_cbed_dose(double *in, size_t m, double dose, double (*uniform)(void *), void *rng) {
  if (!(dose > 0)) return;
  for (size_t i = 0; i < m; i++) in[i] = _tsr_cbed_poisson(dose * in[i], uniform, rng) / dose;
}

void _tsr_cbed_psf(double *img, int p, double sigma, double *scratch) {
  if (!(sigma > 0)) return;
  int r = (int)ceil(4 * sigma);
  r = r > p ? p : r > 256 ? 256 : r; /* sigma <= 64 (tsr_cbed_opts_check) */
  double k[2 * 256 + 1], sum = 0;
  for (int i = -r; i <= r; i++) sum += k[i + r] = exp(-0.5 * i * i / (sigma * sigma));
  for (int i = 0; i <= 2 * r; i++) k[i] /= sum;
  /* rows into scratch, then columns back into img; zero outside the detector */
  for (int j = 0; j < p; j++)
    for (int i = 0; i < p; i++) {
      double s = 0;
      for (int d = -r; d <= r; d++)
        if (i + d >= 0 && i + d < p) s += k[d + r] * img[(size_t)j * p + i + d];
      scratch[(size_t)j * p + i] = s;
    }
  for (int j = 0; j < p; j++)
    for (int i = 0; i < p; i++) {
      double s = 0;
      for (int d = -r; d <= r; d++)
        if (j + d >= 0 && j + d < p) s += k[d + r] * scratch[(size_t)(j + d) * p + i];
      img[(size_t)j * p + i] = s;
    }
}

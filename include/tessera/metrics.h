/* How good a predicted image is against the true one: PSNR, SSIM and, for projected potentials,
 * the atom columns found at the right places; and the two reference predictors a model must beat:
 * the mean training target and the nearest neighbour on the inputs. */
#ifndef TESSERA_METRICS_H
#define TESSERA_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <tessera/status.h>
#include <tessera/loader.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Peak signal-to-noise ratio in dB of n values: 10 log10(range^2 / MSE); +inf when pred equals
 * truth. `range` is the data range (max - min of the true values, say); it must be positive. */
double tsr_metric_psnr(const float *truth, const float *pred, size_t n, double range);

/* Structural similarity of Wang, Bovik, Sheikh and Simoncelli (2004) as their reference code:
 * local means, variances (not sample-corrected) and covariance under an 11 x 11 Gaussian window of
 * sigma 1.5 (normalised to sum 1), C1 = (0.01 range)^2, C2 = (0.03 range)^2; the mean of the SSIM
 * map over the positions where the whole window fits in the h x w image (row-major). h and w must be
 * at least 11 and range positive. */
#define TSR_SSIM_WINDOW 11
tsr_status tsr_metric_ssim(const float *truth, const float *pred, int h, int w, double range, double *ssim);

/* Atom columns in a projected potential: local maxima over their 8 neighbours, above
 * min + threshold x (max - min) of the image and at least one pixel from its edge, refined to
 * sub-pixel positions by a parabola through each axis's three values; taken by decreasing value,
 * a peak closer than `separation` to one taken already is dropped. */
typedef struct tsr_columns_opts {
  double threshold;  /* fraction of the image's range (default 0.3) */
  double separation; /* A (default 1.0) */
  double radius;     /* a predicted column within this distance of a true one finds it, A (default 0.2) */
} tsr_columns_opts;

void tsr_columns_opts_default(tsr_columns_opts *o);

/* The columns of an h x w image of px x py A pixels (x along w): their positions in A from the
 * centre of pixel (0, 0), xy[2k] and xy[2k + 1], at most `cap` of them (the highest); *n is how
 * many there are, which may exceed cap. */
tsr_status tsr_columns_find(const float *img, int h, int w, double px, double py, const tsr_columns_opts *o, double *xy,
                            int cap, int *n);

typedef struct tsr_columns_result {
  int64_t ntrue;    /* true columns */
  int64_t nfound;   /* columns found in the prediction */
  int64_t nmatched; /* pairs (true, found) closer than radius, each column in one pair at most,
                       closest pairs first */
  double err_sum;   /* the matched pairs' distances summed, A */
} tsr_columns_result;

/* Columns of the prediction matched to the true columns, given (true_xy: ntrue positions in A as
 * tsr_columns_find writes them) or, when true_xy is NULL, found in the true image the same way.
 * The counts are added to *r. */
tsr_status tsr_columns_match(const float *truth, const float *pred, int h, int w, double px, double py,
                             const tsr_columns_opts *o, const double *true_xy, int ntrue, tsr_columns_result *r);

/* Sums over images, each channel of a sample an image: PSNR and SSIM with the true image's
 * max - min as the data range (1 when that image is constant), and the columns when a pixel size
 * is given (images of at least 11 x 11 for SSIM, 3 x 3 for columns). */
typedef struct tsr_metrics {
  int64_t images;
  double se; /* squared errors, summed over every value */
  int64_t values;
  double psnr;      /* summed over images */
  int64_t psnr_inf; /* images predicted exactly (PSNR +inf, left out of the sum and the mean) */
  double ssim;      /* summed over the ssim_images large enough */
  int64_t ssim_images;
  int columns; /* 1 when every image added had a pixel size */
  tsr_columns_result col;
} tsr_metrics;

void tsr_metrics_init(tsr_metrics *m);
/* Adds sample (c x h x w values, channels first); px, py: its pixel size in A, or 0 for no columns. */
tsr_status tsr_metrics_add(tsr_metrics *m, const float *truth, const float *pred, int c, int h, int w, double px,
                           double py, const tsr_columns_opts *o);
double tsr_metrics_mse(const tsr_metrics *m);
double tsr_metrics_psnr(const tsr_metrics *m);           /* mean over the images (dB); +inf if all exact */
double tsr_metrics_ssim(const tsr_metrics *m);           /* mean over the images; NaN when too small */
double tsr_metrics_detection(const tsr_metrics *m);      /* nmatched / ntrue; NaN without columns */
double tsr_metrics_position_error(const tsr_metrics *m); /* err_sum / nmatched, A; NaN when none */

/* Reference predictors from training samples [first, first + n) of a loader (inputs and targets
 * as the loader reads them). The mean target: the per-pixel mean of the targets (c' h' w' floats,
 * accumulated in double). */
tsr_status tsr_baseline_mean_target(tsr_loader *train, int64_t first, int64_t n, float *mean);
/* Nearest neighbour on the inputs: for each of nq inputs (queries, nq x c h w floats), the index of
 * the training sample whose input is closest in L2 (the lowest index on ties), and its squared
 * distance (dist2 may be NULL). Each training input is read once. */
tsr_status tsr_baseline_nearest(tsr_loader *train, int64_t first, int64_t n, const float *queries, int64_t nq,
                                int64_t *idx, double *dist2);

#ifdef __cplusplus
}
#endif
#endif

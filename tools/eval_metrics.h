/* A model's predictions on held-out samples against two baselines computed alongside: the mean
 * training target and the nearest neighbour on the inputs (the target of the training sample whose
 * input is closest in L2). PSNR, SSIM and, with a pixel size, atom columns (tsr_metrics). Used by
 * tessera-train (per epoch, on validation data) and tessera-predict (on a test set). Errors end the
 * run (run_fail.h). */
#ifndef TSR_TOOLS_EVAL_METRICS_H
#define TSR_TOOLS_EVAL_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include <tessera.h>

struct eval_opts {
  double px, py;        /* --pixel-size (A, x and y); 0: from the data's metadata */
  tsr_columns_opts col; /* --column-threshold, --column-separation, --column-radius */
};

struct eval {
  tsr_loader *data; /* the evaluated samples [first, first + n) */
  int64_t first, n;
  int c, h, w;
  size_t ye;
  double *px, *py;  /* [n] pixel sizes; NULL: none known (no column metrics) */
  char px_why[512]; /* why there are none */
  tsr_columns_opts col;
  tsr_metrics mean, nn; /* the baselines' metrics (nn.images 0: not computed) */
  float *y, *ybase;     /* scratch: a true target, a baseline's prediction */
};

/* Sets up the evaluation of samples [first, first + n) of `data`: pixel sizes, and the baselines:
 * the mean target of `mean_src` [mfirst, mfirst + mn) and the nearest neighbour among training
 * samples [tfirst, tfirst + tn) of `nn_src` (NULL: no nearest-neighbour baseline). */
void eval_init(struct eval *e, const struct eval_opts *o, tsr_loader *data, int64_t first, int64_t n,
               tsr_loader *mean_src, int64_t mfirst, int64_t mn, tsr_loader *nn_src, int64_t tfirst, int64_t tn);
void eval_free(struct eval *e);
/* Adds the prediction `pred` of sample `first + i` to m. */
void eval_add(struct eval *e, tsr_metrics *m, int64_t i, const float *pred);

/* --pixel-size X[:Y] into *px, *py (Y = X when left out; NULL arg: 0, from the data); ends the run
 * with a usage error naming `what` on a bad value. And its text for the effective configuration
 * (returns 0 when not set). */
void eval_parse_pixel_size(const char *what, const char *arg, double *px, double *py);
int eval_pixel_size_text(double px, double py, char *buf, size_t cap);

/* One line of figures after "label: " (PSNR, SSIM, columns; "-" for what was not computed). */
void eval_print(FILE *f, const char *label, const tsr_metrics *m);
/* The conditions behind the figures: data range, SSIM window, column rule, where the true columns
 * and the pixel size come from. */
void eval_describe(FILE *f, const struct eval *e);
/* CSV: the header of the model's and the baselines' columns (prefixes val_/test_ for the model,
 * mean_ and nn_ for the baselines; no leading comma) and a row's fields. */
void eval_csv_header(FILE *f, const char *model_prefix);
void eval_csv_fields(FILE *f, const struct eval *e, const tsr_metrics *m);

#endif

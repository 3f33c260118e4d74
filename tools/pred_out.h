/* tessera-predict's output: an HDF5 file with the dataset 'predictions' [N, C, H, W] (float32)
 * written block by block, the error sums behind MSE and PSNR as attributes, and the merge of the
 * per-rank part files into one file in rank order. */
#ifndef TSR_PRED_OUT_H
#define TSR_PRED_OUT_H

#include <stddef.h>
#include <stdint.h>

struct pred_metrics {
  double sse;    /* sum of squared errors */
  int64_t count; /* values summed */
  double lo, hi; /* the targets' smallest and largest value */
};

void pred_metrics_init(struct pred_metrics *m);
void pred_metrics_add(struct pred_metrics *m, const float *target, const float *pred, size_t n);
double pred_metrics_mse(const struct pred_metrics *m);
/* 10 log10((hi - lo)^2 / MSE) */
double pred_metrics_psnr(const struct pred_metrics *m);

struct pred_out {
  long long file, dset; /* hid_t */
  int64_t n;
  int c, h, w;
  char path[4200];
};

/* Each returns 0, or -1 with the reason (naming the file) in err. */
int pred_out_create(struct pred_out *o, const char *path, int64_t n, int c, int h, int w, char *err, size_t cap);
int pred_out_write(struct pred_out *o, int64_t first, int count, const float *pred, char *err, size_t cap);
/* Stores m's sums (and MSE and PSNR) as attributes when m is not NULL, then closes. */
int pred_out_close(struct pred_out *o, const struct pred_metrics *m, char *err, size_t cap);
/* Copies OUT.part-0 .. OUT.part-(nparts - 1) into OUT (through OUT.tmp) in order and removes them;
 * with m, sums their metrics into *m (reset first). */
int pred_out_merge(const char *out, int nparts, int64_t n, int c, int h, int w, struct pred_metrics *m, char *err,
                   size_t cap);

#endif

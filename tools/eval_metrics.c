/* Model and baseline metrics on held-out samples (eval_metrics.h). The baselines are computed once,
 * at set-up: the nearest-neighbour search reads the training inputs once per block of held-out
 * inputs held in memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "data_meta.h"
#include "eval_metrics.h"
#include "run_fail.h"

enum { QUERY_BLOCK = 1024 }; /* held-out inputs searched together */

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) fail("out of memory (%zu bytes for the metrics)", bytes);
  return p;
}

static void add(struct eval *e, tsr_metrics *m, int64_t i, const float *truth, const float *pred) {
  double px = e->px ? e->px[i] : 0, py = e->py ? e->py[i] : 0;
  check(tsr_metrics_add(m, truth, pred, e->c, e->h, e->w, px, py, &e->col));
}

static void baseline_nn(struct eval *e, tsr_loader *src, int64_t tfirst, int64_t tn) {
  int c, h, w;
  tsr_loader_input_shape(e->data, &c, &h, &w);
  size_t xe = (size_t)c * h * w;
  int64_t block = e->n < QUERY_BLOCK ? e->n : QUERY_BLOCK;
  float *x = xmalloc(sizeof(float) * xe * block);
  int64_t *idx = xmalloc(sizeof(int64_t) * block);
  tsr_metrics_init(&e->nn);
  for (int64_t b = 0; b < e->n; b += block) {
    int64_t k = e->n - b < block ? e->n - b : block;
    for (int64_t i = 0; i < k; i++) check(tsr_loader_read(e->data, e->first + b + i, x + xe * i, NULL));
    check(tsr_baseline_nearest(src, tfirst, tn, x, k, idx, NULL));
    for (int64_t i = 0; i < k; i++) {
      check(tsr_loader_read(e->data, e->first + b + i, NULL, e->y));
      check(tsr_loader_read(src, idx[i], NULL, e->ybase));
      add(e, &e->nn, b + i, e->y, e->ybase);
    }
  }
  free(x), free(idx);
}

void eval_init(struct eval *e, const struct eval_opts *o, tsr_loader *data, int64_t first, int64_t n,
               tsr_loader *mean_src, int64_t mfirst, int64_t mn, tsr_loader *nn_src, int64_t tfirst, int64_t tn) {
  memset(e, 0, sizeof *e);
  e->data = data, e->first = first, e->n = n, e->col = o->col;
  tsr_loader_target_shape(data, &e->c, &e->h, &e->w);
  e->ye = (size_t)e->c * e->h * e->w;
  e->y = xmalloc(sizeof(float) * e->ye), e->ybase = xmalloc(sizeof(float) * e->ye);
  e->px = xmalloc(sizeof(double) * n), e->py = xmalloc(sizeof(double) * n);
  if (o->px > 0) {
    for (int64_t i = 0; i < n; i++) e->px[i] = o->px, e->py[i] = o->py > 0 ? o->py : o->px;
  } else if (!data_pixel_sizes(data, first, n, e->px, e->py, e->px_why, sizeof e->px_why)) {
    free(e->px), free(e->py);
    e->px = e->py = NULL;
  }
  check(tsr_baseline_mean_target(mean_src, mfirst, mn, e->ybase));
  tsr_metrics_init(&e->mean);
  for (int64_t i = 0; i < n; i++) {
    check(tsr_loader_read(data, first + i, NULL, e->y));
    add(e, &e->mean, i, e->y, e->ybase);
  }
  if (nn_src) baseline_nn(e, nn_src, tfirst, tn);
}

void eval_free(struct eval *e) {
  free(e->px), free(e->py), free(e->y), free(e->ybase);
  memset(e, 0, sizeof *e);
}

void eval_add(struct eval *e, tsr_metrics *m, int64_t i, const float *pred) {
  check(tsr_loader_read(e->data, e->first + i, NULL, e->y));
  add(e, m, i, e->y, pred);
}

void eval_print(FILE *f, const char *label, const tsr_metrics *m) {
  if (!m->images) {
    fprintf(f, "%s: not computed\n", label);
    return;
  }
  fprintf(f, "%s: MSE %.5g, PSNR %.2f dB, SSIM %.4f", label, tsr_metrics_mse(m), tsr_metrics_psnr(m),
          tsr_metrics_ssim(m));
  if (m->columns)
    fprintf(f, ", columns found %.1f%% (%lld of %lld; %lld peaks predicted), position error %.3f A",
            100 * tsr_metrics_detection(m), (long long)m->col.nmatched, (long long)m->col.ntrue,
            (long long)m->col.nfound, tsr_metrics_position_error(m));
  fprintf(f, "\n");
}

void eval_describe(FILE *f, const struct eval *e) {
  fprintf(f,
          "metrics: PSNR and SSIM per image (data range: the true image's max - min; SSIM of Wang et al. 2004, "
          "11x11 Gaussian window, sigma 1.5, K1 0.01, K2 0.03), averaged over %lld images\n",
          (long long)e->n * e->c);
  if (!e->px) {
    fprintf(f, "atom columns: not computed: %s; give --pixel-size\n", e->px_why);
    return;
  }
  fprintf(f,
          "atom columns: peaks above %g of each image's range, at least %g A apart, one pixel from the edge, "
          "sub-pixel by parabola; found when a predicted peak lies within %g A of a true one (one-to-one). True "
          "columns: the peaks of the true potential (the data hold no column positions). Pixel size %.4g x %.4g A "
          "(sample 0)\n",
          e->col.threshold, e->col.separation, e->col.radius, e->px[0], e->py[0]);
}

void eval_parse_pixel_size(const char *what, const char *arg, double *px, double *py) {
  *px = *py = 0;
  if (!arg) return;
  char *end;
  *px = strtod(arg, &end);
  *py = *end == ':' ? strtod(end + 1, &end) : *px;
  if (*end || !(*px > 0 && *px < 1e6) || !(*py > 0 && *py < 1e6))
    cli_usage_error("%s '%s': expected X or X:Y, positive sizes in angstrom", what, arg);
}

int eval_pixel_size_text(double px, double py, char *buf, size_t cap) {
  if (!(px > 0)) return 0;
  snprintf(buf, cap, "%.17g:%.17g", px, py);
  return 1;
}

static const char *const fields[] = {"mse", "psnr_db", "ssim", "columns_found", "column_error_A"};

void eval_csv_header(FILE *f, const char *model_prefix) {
  const char *prefix[] = {model_prefix, "mean_", "nn_"};
  for (int p = 0; p < 3; p++)
    for (int k = 0; k < 5; k++) fprintf(f, "%s%s%s", p || k ? "," : "", prefix[p], fields[k]);
}

static void row(FILE *f, const tsr_metrics *m, int first) {
  double v[5] = {NAN, NAN, NAN, NAN, NAN};
  if (m->images)
    v[0] = tsr_metrics_mse(m), v[1] = tsr_metrics_psnr(m), v[2] = tsr_metrics_ssim(m), v[3] = tsr_metrics_detection(m),
    v[4] = tsr_metrics_position_error(m);
  for (int k = 0; k < 5; k++) fprintf(f, "%s%.9g", first && !k ? "" : ",", v[k]);
}

void eval_csv_fields(FILE *f, const struct eval *e, const tsr_metrics *m) {
  row(f, m, 1);
  row(f, &e->mean, 0);
  row(f, &e->nn, 0);
}

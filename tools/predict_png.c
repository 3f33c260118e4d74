/* Predicted-against-true targets as PNG images, one per sample, channel 0 of the target, three panels
 * (true | predicted | difference): drawn by gnuplot with titles, axes in pixels and colour bars (true
 * and predicted on one scale, the difference on a symmetric one); without gnuplot, the same panels
 * as bare pixels (4x enlarged, libpng). */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gnuplot.h"
#include "predict_png.h"

enum { ZOOM = 4, GAP = 4 };

static int write_png(const char *path, const unsigned char *rgb, int w, int h) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, info ? &info : NULL);
    fclose(f);
    return -1;
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; y++) png_write_row(png, (png_const_bytep)(rgb + (size_t)y * w * 3));
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  return fclose(f);
}

/* Panel p of an image: value v mapped from [lo, hi] to grey (difference panel: blue-white-red). */
static void panel(unsigned char *rgb, int W, int p, const float *v, int h, int w, double lo, double hi, int diverging) {
  for (int y = 0; y < h * ZOOM; y++)
    for (int x = 0; x < w * ZOOM; x++) {
      double t = (v[(size_t)(y / ZOOM) * w + x / ZOOM] - lo) / (hi - lo);
      t = t < 0 ? 0 : t > 1 ? 1 : t;
      unsigned char *px = rgb + ((size_t)y * W + p * (w * ZOOM + GAP) + x) * 3;
      if (!diverging) {
        px[0] = px[1] = px[2] = (unsigned char)lround(255 * t);
      } else { /* 0 -> blue, 0.5 -> white, 1 -> red */
        double r = t < 0.5 ? 2 * t : 1, b = t > 0.5 ? 2 * (1 - t) : 1, g = fmin(r, b);
        px[0] = (unsigned char)lround(255 * r), px[1] = (unsigned char)lround(255 * g), px[2] = (unsigned char)lround(255 * b);
      }
    }
}

/* Writes one sample's image; returns 0 or -1. */
static int plain_png(const char *path, const float *yt, const float *yp, float *d, int th, int tw, double lo, double hi,
                     double dm) {
  int W = 3 * tw * ZOOM + 2 * GAP, H = th * ZOOM;
  unsigned char *rgb = malloc((size_t)W * H * 3);
  if (!rgb) return -1;
  memset(rgb, 255, (size_t)W * H * 3);
  panel(rgb, W, 0, yt, th, tw, lo, hi, 0);
  panel(rgb, W, 1, yp, th, tw, lo, hi, 0);
  panel(rgb, W, 2, d, th, tw, -dm, dm, 1);
  int rc = write_png(path, rgb, W, H);
  free(rgb);
  return rc;
}

static void datablock(FILE *s, const char *name, const float *v, int h, int w) {
  fprintf(s, "$%s << EOD\n", name);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) fprintf(s, "%.6g%c", v[(size_t)y * w + x], x + 1 < w ? ' ' : '\n');
  fprintf(s, "EOD\n");
}

/* One gnuplot page: the three panels of one sample, each with its title and colour bar. */
static void gnuplot_page(FILE *s, const char *path, int64_t index, const float *yt, const float *yp, const float *d,
                         int th, int tw, double lo, double hi, double dm, double rms, double target_range,
                         const char *units) {
  char q[8600], u[600];
  gp_quote(units, u, sizeof u);
  datablock(s, "T", yt, th, tw), datablock(s, "P", yp, th, tw), datablock(s, "D", d, th, tw);
  fprintf(s, "set output %s\n", gp_quote(path, q, sizeof q));
  fprintf(s, "set multiplot layout 1,3 title 'sample %lld: target channel 0, %d x %d pixels; RMS error %.4g, "
             "%.1f%% of the target range'\n", (long long)index, th, tw, rms, 100 * rms / target_range);
  fprintf(s, "set size ratio -1\nset xrange [-0.5:%g]\nset yrange [%g:-0.5]\nset xlabel 'x (pixels)'\n"
             "set ylabel 'y (pixels)'\nset tics out nomirror\n", tw - 0.5, th - 0.5);
  fprintf(s, "set palette defined (0 '#440154', 0.25 '#3b528b', 0.5 '#21918c', 0.75 '#5ec962', 1 '#fde725')\n"
             "set cbrange [%.9g:%.9g]\nset cblabel %s\n", lo, hi, u);
  fprintf(s, "set title 'true'\nplot $T matrix with image notitle\n");
  fprintf(s, "set title 'predicted'\nplot $P matrix with image notitle\n");
  fprintf(s, "set palette defined (0 '#2166ac', 0.5 '#f7f7f7', 1 '#b2182b')\nset cbrange [%.9g:%.9g]\n"
             "set cblabel %s\nset title 'difference, predicted - true (red: too high, blue: too low)'\n"
             "plot $D matrix with image notitle\nunset multiplot\n", -dm, dm, u);
}

/* Predicts and draws the samples: with gnuplot (use_gp; returns 1 when it is missing) or bare. */
static int draw(tsr_trainer *t, tsr_loader *l, int64_t first, int count, const char *units, const char *dir, char *err,
                size_t errlen, int use_gp) {
  int c, h, w, tc, th, tw;
  tsr_loader_input_shape(l, &c, &h, &w);
  tsr_loader_target_shape(l, &tc, &th, &tw);
  if (first + count > tsr_loader_size(l)) count = (int)(tsr_loader_size(l) - first);
  int batch = tsr_trainer_batch(t);
  size_t xe = (size_t)c * h * w, ye = (size_t)tc * th * tw;
  float *x = malloc(sizeof(float) * xe * batch), *y = malloc(sizeof(float) * ye * batch),
        *p = malloc(sizeof(float) * ye * batch), *d = malloc(sizeof(float) * th * tw);
  struct gp g = {0};
  int rc = 0, have_gp = 0;
  if (!x || !y || !p || !d) snprintf(err, errlen, "out of memory"), rc = -1;
  if (rc == 0 && cli_mkdirs(dir, err, errlen)) rc = -1;
  if (rc == 0 && use_gp && gp_open(&g, 1500, 520) != 0) snprintf(err, errlen, "out of memory"), rc = -1;
  have_gp = rc == 0 && use_gp;
  for (int b = 0; rc == 0 && b < count; b += batch) {
    int n = count - b < batch ? count - b : batch;
    for (int i = 0; rc == 0 && i < n; i++)
      if (tsr_loader_read(l, first + b + i, x + xe * i, y + ye * i) != TSR_OK) snprintf(err, errlen, "%s", tsr_last_error()), rc = -1;
    if (rc == 0 && tsr_trainer_predict(t, x, n, p) != TSR_OK) snprintf(err, errlen, "%s", tsr_last_error()), rc = -1;
    for (int i = 0; rc == 0 && i < n; i++) {
      const float *yt = y + ye * i, *yp = p + ye * i;
      /* one colour scale over both images, so that a prediction beyond the target's values shows */
      double lo = INFINITY, hi = -INFINITY, tlo = INFINITY, thi = -INFINITY, dm = 0, se = 0;
      for (size_t k = 0; k < (size_t)th * tw; k++) {
        tlo = fmin(tlo, yt[k]), thi = fmax(thi, yt[k]);
        lo = fmin(lo, fmin(yt[k], yp[k])), hi = fmax(hi, fmax(yt[k], yp[k]));
        d[k] = yp[k] - yt[k];
        dm = fmax(dm, fabs(d[k])), se += (double)d[k] * d[k];
      }
      if (!(hi > lo)) hi = lo + 1;
      dm = dm > 0 ? dm : 1;
      char path[4200];
      snprintf(path, sizeof path, "%s/sample_%05lld.png", dir, (long long)(first + b + i));
      if (have_gp) {
        gnuplot_page(g.f, path, first + b + i, yt, yp, d, th, tw, lo, hi, dm, sqrt(se / ((double)th * tw)),
                     thi > tlo ? thi - tlo : 1, units && *units ? units : "units of the targets");
      } else if (plain_png(path, yt, yp, d, th, tw, lo, hi, dm) != 0) {
        snprintf(err, errlen, "%s: cannot write the PNG", path), rc = -1;
      }
    }
  }
  if (have_gp && rc == 0) rc = gp_run(&g, dir, err, errlen);
  else if (have_gp) fclose(g.f), free(g.buf);
  free(x), free(y), free(p), free(d);
  return rc;
}

int predict_png(tsr_trainer *t, tsr_loader *l, int64_t first, int count, const char *units, const char *dir, char *err,
                size_t errlen) {
  int rc = draw(t, l, first, count, units, dir, err, errlen, 1);
  if (rc == 1) { /* no gnuplot: bare pictures instead, saying why they have no labels */
    fprintf(stderr, "%s: %s: PNGs without titles or colour bars\n", cli_program(), err);
    rc = draw(t, l, first, count, units, dir, err, errlen, 0);
  }
  return rc;
}

/* Predicted-against-true potentials as PNG images (libpng): one image per sample, three panels
 * (true | predicted | difference), each 4x enlarged, channel 0 of the target. */
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
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

int predict_png(tsr_trainer *t, tsr_loader *l, int64_t first, int count, const char *dir, char *err, size_t errlen) {
  int c, h, w, tc, th, tw;
  tsr_loader_input_shape(l, &c, &h, &w);
  tsr_loader_target_shape(l, &tc, &th, &tw);
  if (first + count > tsr_loader_size(l)) count = (int)(tsr_loader_size(l) - first);
  int batch = tsr_trainer_batch(t);
  size_t xe = (size_t)c * h * w, ye = (size_t)tc * th * tw;
  float *x = malloc(sizeof(float) * xe * batch), *y = malloc(sizeof(float) * ye * batch),
        *p = malloc(sizeof(float) * ye * batch), *d = malloc(sizeof(float) * th * tw);
  int W = 3 * tw * ZOOM + 2 * GAP, H = th * ZOOM;
  unsigned char *rgb = malloc((size_t)W * H * 3);
  int rc = 0;
  if (!x || !y || !p || !d || !rgb) snprintf(err, errlen, "out of memory"), rc = -1;
  if (rc == 0 && cli_mkdirs(dir, err, errlen)) rc = -1;
  for (int b = 0; rc == 0 && b < count; b += batch) {
    int n = count - b < batch ? count - b : batch;
    for (int i = 0; rc == 0 && i < n; i++)
      if (tsr_loader_read(l, first + b + i, x + xe * i, y + ye * i) != TSR_OK) snprintf(err, errlen, "%s", tsr_last_error()), rc = -1;
    if (rc == 0 && tsr_trainer_predict(t, x, n, p) != TSR_OK) snprintf(err, errlen, "%s", tsr_last_error()), rc = -1;
    for (int i = 0; rc == 0 && i < n; i++) {
      const float *yt = y + ye * i, *yp = p + ye * i;
      double lo = INFINITY, hi = -INFINITY, dm = 0;
      for (size_t k = 0; k < (size_t)th * tw; k++) {
        lo = fmin(lo, yt[k]), hi = fmax(hi, yt[k]);
        d[k] = yp[k] - yt[k];
        dm = fmax(dm, fabs(d[k]));
      }
      if (!(hi > lo)) hi = lo + 1;
      dm = dm > 0 ? dm : 1;
      memset(rgb, 255, (size_t)W * H * 3);
      panel(rgb, W, 0, yt, th, tw, lo, hi, 0);
      panel(rgb, W, 1, yp, th, tw, lo, hi, 0);
      panel(rgb, W, 2, d, th, tw, -dm, dm, 1);
      char path[4200];
      snprintf(path, sizeof path, "%s/sample_%05lld.png", dir, (long long)(first + b + i));
      if (write_png(path, rgb, W, H) != 0) snprintf(err, errlen, "%s: cannot write the PNG", path), rc = -1;
    }
  }
  free(x), free(y), free(p), free(d), free(rgb);
  return rc;
}

/* Atom columns of a projected potential: peaks above a threshold, refined to sub-pixel positions,
 * thinned to a minimum separation; and their one-to-one matching to the true columns within a
 * radius (closest pairs first), which gives the detection rate and the position error. */
#include <math.h>
#include <stdlib.h>

#include <tessera/metrics.h>

#include "runtime/error.h"

void tsr_columns_opts_default(tsr_columns_opts *o) {
  o->threshold = 0.3;
  o->separation = 1.0;
  o->radius = 0.2;
}

struct peak {
  double x, y, v;
};

static int by_value(const void *a, const void *b) {
  const struct peak *p = a, *q = b;
  return p->v < q->v ? 1 : p->v > q->v ? -1 : 0;
}

/* Offset of the maximum of the parabola through (-1, a), (0, b), (1, c), within half a pixel. */
static double vertex(double a, double b, double c) {
  double d = a - 2 * b + c;
  if (!(d < 0)) return 0;
  double t = 0.5 * (a - c) / d;
  return t < -0.5 ? -0.5 : t > 0.5 ? 0.5 : t;
}

/* The peaks of img, highest first, thinned; *out malloc'ed (NULL when there are none). */
static tsr_status peaks(const float *img, int h, int w, double px, double py, const tsr_columns_opts *o,
                        struct peak **out, int *n) {
  *out = NULL, *n = 0;
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < (size_t)h * w; i++) lo = fmin(lo, img[i]), hi = fmax(hi, img[i]);
  double thr = lo + o->threshold * (hi - lo);
  int count = 0, cap = 0;
  struct peak *p = NULL;
  for (int i = 1; i + 1 < h; i++)
    for (int j = 1; j + 1 < w; j++) {
      const float *c = img + (size_t)i * w + j;
      double v = *c;
      if (!(v > thr)) continue;
      /* strictly above the neighbours before it, at least the ones after: one peak per plateau */
      int top = v > c[-w - 1] && v > c[-w] && v > c[-w + 1] && v > c[-1] && v >= c[1] && v >= c[w - 1] && v >= c[w] &&
                v >= c[w + 1];
      if (!top) continue;
      if (count == cap) {
        cap = cap ? 2 * cap : 64;
        struct peak *np = realloc(p, sizeof *p * cap);
        if (!np) {
          free(p);
          return _tsr_error(TSR_ERR_NOMEM, "atom columns: out of memory for %d peaks", cap);
        }
        p = np;
      }
      p[count++] = (struct peak){(j + vertex(c[-1], v, c[1])) * px, (i + vertex(c[-w], v, c[w])) * py, v};
    }
  if (count) qsort(p, count, sizeof *p, by_value);
  int kept = 0;
  double s2 = o->separation * o->separation;
  for (int k = 0; k < count; k++) {
    int far = 1;
    for (int m = 0; m < kept && far; m++) {
      double dx = p[k].x - p[m].x, dy = p[k].y - p[m].y;
      far = dx * dx + dy * dy >= s2;
    }
    if (far) p[kept++] = p[k];
  }
  if (!kept) free(p), p = NULL;
  *out = p, *n = kept;
  return TSR_OK;
}

static tsr_status check_args(const char *fn, const float *img, int h, int w, double px, double py,
                             const tsr_columns_opts *o) {
  if (!img || !o || h < 3 || w < 3 || !(px > 0) || !(py > 0))
    return _tsr_error(TSR_ERR_ARG, "%s: a %d x %d image (at least 3 x 3) with pixels %g x %g A (positive) and options",
                      fn, h, w, px, py);
  if (!(o->threshold >= 0 && o->threshold < 1) || !(o->separation >= 0) || !(o->radius > 0))
    return _tsr_error(TSR_ERR_ARG, "%s: threshold %g (in [0, 1)), separation %g A (>= 0), radius %g A (> 0)", fn,
                      o->threshold, o->separation, o->radius);
  return TSR_OK;
}

tsr_status tsr_columns_find(const float *img, int h, int w, double px, double py, const tsr_columns_opts *o, double *xy,
                            int cap, int *n) {
  TSR_TRY(check_args("tsr_columns_find", img, h, w, px, py, o));
  if (!n || (cap > 0 && !xy)) return _tsr_error(TSR_ERR_ARG, "tsr_columns_find: positions and count are required");
  struct peak *p;
  TSR_TRY(peaks(img, h, w, px, py, o, &p, n));
  for (int k = 0; k < *n && k < cap; k++) xy[2 * k] = p[k].x, xy[2 * k + 1] = p[k].y;
  free(p);
  return TSR_OK;
}

struct pair {
  double d;
  int t, f;
};

static int by_distance(const void *a, const void *b) {
  const struct pair *p = a, *q = b;
  return p->d < q->d ? -1 : p->d > q->d ? 1 : p->t != q->t ? p->t - q->t : p->f - q->f;
}

tsr_status tsr_columns_match(const float *truth, const float *pred, int h, int w, double px, double py,
                             const tsr_columns_opts *o, const double *true_xy, int ntrue, tsr_columns_result *r) {
  TSR_TRY(check_args("tsr_columns_match", pred, h, w, px, py, o));
  if (!r || (!true_xy && !truth) || ntrue < 0)
    return _tsr_error(TSR_ERR_ARG, "tsr_columns_match: the true image or columns and the result are required");
  struct peak *t = NULL, *f = NULL;
  int nt = ntrue, nf = 0;
  tsr_status st = true_xy ? TSR_OK : peaks(truth, h, w, px, py, o, &t, &nt);
  if (st == TSR_OK) st = peaks(pred, h, w, px, py, o, &f, &nf);
  struct pair *pairs = st == TSR_OK && nt && nf ? malloc(sizeof *pairs * nt * nf) : NULL;
  char *used_t = pairs ? calloc(nt + nf, 1) : NULL;
  if (st == TSR_OK && nt && nf && !used_t)
    st = _tsr_error(TSR_ERR_NOMEM, "atom columns: out of memory for %d x %d pairs", nt, nf);
  int np = 0;
  for (int i = 0; used_t && i < nt; i++)
    for (int k = 0; k < nf; k++) {
      double tx = true_xy ? true_xy[2 * i] : t[i].x, ty = true_xy ? true_xy[2 * i + 1] : t[i].y;
      double d = hypot(f[k].x - tx, f[k].y - ty);
      if (d <= o->radius) pairs[np++] = (struct pair){d, i, k};
    }
  if (np) qsort(pairs, np, sizeof *pairs, by_distance);
  char *used_f = used_t ? used_t + nt : NULL;
  for (int k = 0; k < np; k++) {
    if (used_t[pairs[k].t] || used_f[pairs[k].f]) continue;
    used_t[pairs[k].t] = used_f[pairs[k].f] = 1;
    r->nmatched++, r->err_sum += pairs[k].d;
  }
  if (st == TSR_OK) r->ntrue += nt, r->nfound += nf;
  free(t), free(f), free(pairs), free(used_t);
  return st;
}

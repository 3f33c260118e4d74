/* CosmoFlow-style samples: parameters drawn from (seed, index), the linear field at z = 0 as a
 * Gaussian random field of P(k) = A (k / k_p)^n exp(-(k / k_c)^2) with A set by sigma, and per
 * channel the field at redshift z: D(z) delta (linear) or the lognormal density exp(D delta - D^2
 * sigma^2 / 2) - 1; D from the growth integral of flat LambdaCDM. Segmentation samples put halo and
 * void spheres (periodic) into the z = 0 field and label each voxel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/rng.h"
#include "sim/cosmo.h"

/* Stream salts: parameters and spheres, and the noise, are separate streams of (seed, index). */
#define SALT_PARAMS 0x3C6EF372FE94F82Bull
#define SALT_NOISE 0xA54FF53A5F1D36F1ull

static const char *const param_names[TSR_COSMO_PARAMS] = {"omega_m", "sigma", "n_s", "k_c"};
static const char *const param_units[TSR_COSMO_PARAMS] = {"1", "1", "1", "h/Mpc"};

const char *tsr_cosmo_param_name(int i) { return i >= 0 && i < TSR_COSMO_PARAMS ? param_names[i] : "?"; }
const char *tsr_cosmo_param_unit(int i) { return i >= 0 && i < TSR_COSMO_PARAMS ? param_units[i] : "?"; }

void tsr_cosmo_opts_default(tsr_cosmo_opts *o) {
  *o = (tsr_cosmo_opts){.task = TSR_COSMO_REGRESSION, .size = 32, .cell = 4.0, .pivot = 0.1,
                        .lo = {0.2, 0.5, -2.0, 0.2}, .hi = {0.4, 1.0, -1.0, 0.5},
                        .nz = 4, .z = {3, 2, 1, 0}, .transform = TSR_COSMO_LOGNORMAL,
                        .blobs_min = 2, .blobs_max = 6, .radius_min = 3, .radius_max = 7, .contrast = 1.5,
                        .seed = 1, .first = 0, .chunk = 0, .workers = 1};
}

/* The allowed range of each parameter's values. */
static const double param_min[TSR_COSMO_PARAMS] = {1e-3, 1e-3, -4.0, 1e-4};
static const double param_max[TSR_COSMO_PARAMS] = {1.0, 10.0, 2.0, 1e4};

tsr_status tsr_cosmo_opts_check(const tsr_cosmo_opts *o) {
  if (!o) return _tsr_error(TSR_ERR_ARG, "cosmo: options are NULL");
  if (o->task != TSR_COSMO_REGRESSION && o->task != TSR_COSMO_SEGMENTATION)
    return _tsr_error(TSR_ERR_ARG, "cosmo: task %d is neither regression nor segmentation", (int)o->task);
  if (o->size < 4 || o->size > 1024) return _tsr_error(TSR_ERR_ARG, "cosmo: size %d is not in [4, 1024]", o->size);
  if (!(o->cell > 0 && o->cell < 1e6)) return _tsr_error(TSR_ERR_ARG, "cosmo: cell %g Mpc/h is not in (0, 1e6)", o->cell);
  if (!(o->pivot > 0 && o->pivot < 1e6)) return _tsr_error(TSR_ERR_ARG, "cosmo: pivot %g h/Mpc is not in (0, 1e6)", o->pivot);
  for (int i = 0; i < TSR_COSMO_PARAMS; i++) {
    if (!(o->lo[i] >= param_min[i] && o->hi[i] <= param_max[i]))
      return _tsr_error(TSR_ERR_ARG, "cosmo: %s range %g:%g is not inside [%g, %g]", param_names[i], o->lo[i],
                        o->hi[i], param_min[i], param_max[i]);
    if (!(o->lo[i] <= o->hi[i]))
      return _tsr_error(TSR_ERR_ARG, "cosmo: %s range %g:%g has its low end above its high end", param_names[i],
                        o->lo[i], o->hi[i]);
  }
  if (o->nz < 1 || o->nz > TSR_COSMO_MAX_CHANNELS)
    return _tsr_error(TSR_ERR_ARG, "cosmo: %d redshifts, expected 1 to %d", o->nz, TSR_COSMO_MAX_CHANNELS);
  for (int c = 0; c < o->nz; c++)
    if (!(o->z[c] >= 0 && o->z[c] <= 1000))
      return _tsr_error(TSR_ERR_ARG, "cosmo: redshift %g (channel %d) is not in [0, 1000]", o->z[c], c);
  if (o->transform != TSR_COSMO_LOGNORMAL && o->transform != TSR_COSMO_LINEAR)
    return _tsr_error(TSR_ERR_ARG, "cosmo: transform %d is neither lognormal nor linear", (int)o->transform);
  if (o->first < 0) return _tsr_error(TSR_ERR_ARG, "cosmo: first index %lld is negative", (long long)o->first);
  if (o->chunk < 0 || o->chunk > o->size)
    return _tsr_error(TSR_ERR_ARG, "cosmo: chunk %d is not in [0, size = %d] (0 = size)", o->chunk, o->size);
  if (o->workers < 0 || o->workers > 4096)
    return _tsr_error(TSR_ERR_ARG, "cosmo: workers %d is not in [0, 4096]", o->workers);
  if (o->task == TSR_COSMO_REGRESSION) return TSR_OK; /* the rest is segmentation's */
  if (o->blobs_min < 0 || o->blobs_max < o->blobs_min || o->blobs_max > 100000)
    return _tsr_error(TSR_ERR_ARG, "cosmo: blobs %d:%d is not a range inside [0, 100000]", o->blobs_min, o->blobs_max);
  if (!(o->radius_min > 0 && o->radius_max >= o->radius_min && o->radius_max <= o->size / 2.0))
    return _tsr_error(TSR_ERR_ARG, "cosmo: radius %g:%g is not a range inside (0, size / 2 = %g]", o->radius_min,
                      o->radius_max, o->size / 2.0);
  if (!(o->contrast >= 0 && o->contrast <= 1e6))
    return _tsr_error(TSR_ERR_ARG, "cosmo: contrast %g is not in [0, 1e6]", o->contrast);
  return TSR_OK;
}

void tsr_cosmo_shapes(const tsr_cosmo_opts *o, int *c, int *s, int *tc, int *th) {
  int seg = o->task == TSR_COSMO_SEGMENTATION;
  *c = seg ? 1 : o->nz;
  *s = o->size;
  *tc = seg ? TSR_COSMO_CLASSES : TSR_COSMO_PARAMS;
  *th = seg ? o->size : 1;
}

/* E(a)^2 = omega_m / a^3 + 1 - omega_m (flat, radiation neglected). */
static double hubble(double om, double a) { return sqrt(om / (a * a * a) + 1 - om); }

/* D(a) = 5/2 omega_m E(a) int_0^a da' / (a' E(a'))^3 (Heath 1977), by Simpson's rule; the
 * integrand goes as a'^(3/2) at 0. */
static double growth_unnormalised(double om, double a) {
  enum { STEPS = 2048 };
  double h = a / STEPS, sum = 0;
  for (int i = 0; i <= STEPS; i++) {
    double x = i * h, f = 0;
    if (x > 0) {
      double ae = x * hubble(om, x);
      f = 1.0 / (ae * ae * ae);
    }
    sum += (i == 0 || i == STEPS ? 1 : i % 2 ? 4 : 2) * f;
  }
  return 2.5 * om * hubble(om, a) * sum * h / 3;
}

double tsr_cosmo_growth(double omega_m, double z) {
  return growth_unnormalised(omega_m, 1 / (1 + z)) / growth_unnormalised(omega_m, 1);
}

tsr_status _tsr_cosmo_work_init(struct _tsr_cosmo_work *w, const tsr_cosmo_opts *o) {
  size_t n3 = (size_t)o->size * o->size * o->size;
  *w = (struct _tsr_cosmo_work){0};
  TSR_TRY(_tsr_grf_init(&w->grf, o->size, o->cell));
  w->delta = malloc(sizeof(double) * n3);
  w->label = o->task == TSR_COSMO_SEGMENTATION ? malloc(n3) : NULL;
  if (!w->delta || (o->task == TSR_COSMO_SEGMENTATION && !w->label)) {
    _tsr_cosmo_work_free(w);
    return _tsr_error(TSR_ERR_NOMEM, "cosmo: out of memory for %d^3 cells", o->size);
  }
  return TSR_OK;
}

void _tsr_cosmo_work_free(struct _tsr_cosmo_work *w) {
  _tsr_grf_free(&w->grf);
  free(w->delta);
  free(w->label);
  *w = (struct _tsr_cosmo_work){0};
}

/* Spheres drawn from r: class 1 (halo) or 2 (void), radius, centre; a later sphere covers an
 * earlier one. Distances are periodic, like the field. */
static void draw_spheres(const tsr_cosmo_opts *o, struct _tsr_rng *r, unsigned char *label) {
  int n = o->size;
  memset(label, 0, (size_t)n * n * n);
  int count = o->blobs_min + (int)(_tsr_rng_uniform(r) * (o->blobs_max - o->blobs_min + 1));
  for (int b = 0; b < count; b++) {
    unsigned char cls = _tsr_rng_uniform(r) < 0.5 ? 1 : 2;
    double rad = o->radius_min + _tsr_rng_uniform(r) * (o->radius_max - o->radius_min), c[3];
    for (int a = 0; a < 3; a++) c[a] = _tsr_rng_uniform(r) * n;
    int lo[3], hi[3];
    for (int a = 0; a < 3; a++) lo[a] = (int)floor(c[a] - rad), hi[a] = (int)ceil(c[a] + rad);
    for (int i = lo[0]; i <= hi[0]; i++)
      for (int j = lo[1]; j <= hi[1]; j++)
        for (int k = lo[2]; k <= hi[2]; k++) {
          /* voxel centres at integer + 1/2; (i mod n) folds the box onto the torus */
          double di = i + 0.5 - c[0], dj = j + 0.5 - c[1], dk = k + 0.5 - c[2];
          if (di * di + dj * dj + dk * dk >= rad * rad) continue;
          int ii = ((i % n) + n) % n, jj = ((j % n) + n) % n, kk = ((k % n) + n) % n;
          label[((size_t)ii * n + jj) * n + kk] = cls;
        }
  }
}

void _tsr_cosmo_generate(const tsr_cosmo_opts *o, struct _tsr_cosmo_work *w, int64_t index, float *x, float *y,
                         double *params, double *amp) {
  size_t n3 = (size_t)o->size * o->size * o->size;
  struct _tsr_rng r = _tsr_rng_stream(o->seed, (uint64_t)index + SALT_PARAMS);
  struct _tsr_rng noise = _tsr_rng_stream(o->seed, (uint64_t)index + SALT_NOISE);
  double p[TSR_COSMO_PARAMS];
  for (int i = 0; i < TSR_COSMO_PARAMS; i++) p[i] = o->lo[i] + _tsr_rng_uniform(&r) * (o->hi[i] - o->lo[i]);
  double sigma = p[TSR_COSMO_SIGMA];
  struct _tsr_spectrum s = {1.0, p[TSR_COSMO_N_S], o->pivot, p[TSR_COSMO_K_C]};
  s.amp = sigma * sigma / _tsr_spectrum_variance(&s, o->size, o->cell);
  _tsr_grf_make(&w->grf, &noise, &s, w->delta);
  if (params) memcpy(params, p, sizeof p);
  if (amp) *amp = s.amp;
  if (o->task == TSR_COSMO_SEGMENTATION) {
    draw_spheres(o, &r, w->label);
    const double shift[TSR_COSMO_CLASSES] = {0, o->contrast * sigma, -o->contrast * sigma};
    for (size_t i = 0; i < n3; i++) {
      x[i] = (float)(w->delta[i] + shift[w->label[i]]);
      for (int c = 0; c < TSR_COSMO_CLASSES; c++) y[c * n3 + i] = w->label[i] == c;
    }
    return;
  }
  for (int c = 0; c < o->nz; c++) {
    double g = tsr_cosmo_growth(p[TSR_COSMO_OMEGA_M], o->z[c]), half = 0.5 * g * g * sigma * sigma;
    float *xc = x + c * n3;
    if (o->transform == TSR_COSMO_LINEAR)
      for (size_t i = 0; i < n3; i++) xc[i] = (float)(g * w->delta[i]);
    else
      for (size_t i = 0; i < n3; i++) xc[i] = (float)expm1(g * w->delta[i] - half);
  }
  for (int i = 0; i < TSR_COSMO_PARAMS; i++)
    y[i] = o->hi[i] > o->lo[i] ? (float)(2 * (p[i] - o->lo[i]) / (o->hi[i] - o->lo[i]) - 1) : 0.0f;
}

tsr_status tsr_cosmo_sample(const tsr_cosmo_opts *o, int64_t index, float *x, float *y, double *params) {
  TSR_TRY(tsr_cosmo_opts_check(o));
  if (!x || !y) return _tsr_error(TSR_ERR_ARG, "tsr_cosmo_sample: %s is NULL", x ? "y" : "x");
  if (index < 0) return _tsr_error(TSR_ERR_ARG, "tsr_cosmo_sample: index %lld is negative", (long long)index);
  struct _tsr_cosmo_work w;
  TSR_TRY(_tsr_cosmo_work_init(&w, o));
  _tsr_cosmo_generate(o, &w, index, x, y, params, NULL);
  _tsr_cosmo_work_free(&w);
  return TSR_OK;
}

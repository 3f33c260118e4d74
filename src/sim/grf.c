/* Gaussian random fields (grf.h): real white noise, its FFT scaled by sqrt(P(k) / cell^3), back to
 * real space; then <|delta_k|^2> = V P(k) exactly, and the field is real by construction (the noise
 * is). Sums over modes walk the r2c half-grid, each entry weighted by the modes of the whole grid it
 * stands for. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "sim/grf.h"

static pthread_mutex_t plan_mutex = PTHREAD_MUTEX_INITIALIZER; /* FFTW's planner is not thread-safe */

double _tsr_spectrum_at(const struct _tsr_spectrum *s, double k) {
  if (!(k > 0)) return 0;
  double q = k / s->cutoff;
  return s->amp * pow(k / s->pivot, s->index) * exp(-q * q);
}

/* Frequency of FFT index i: 0, 1, ..., -1. */
static int freq(int i, int n) { return i < (n + 1) / 2 ? i : i - n; }

/* Calls visit(user, entry, |k| in units of kf, weight) for every entry of the r2c half-grid, weight
 * being the number of whole-grid modes it stands for (its conjugate is not stored unless it lies in
 * the planes l = 0 or l = n/2). */
static void walk(int n, void (*visit)(void *, size_t, double, int), void *user) {
  int nh = n / 2 + 1;
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      for (int c = 0; c < nh; c++) {
        int ka = freq(a, n), kb = freq(b, n);
        double q = sqrt((double)ka * ka + (double)kb * kb + (double)c * c);
        int weight = c == 0 || (n % 2 == 0 && c == n / 2) ? 1 : 2;
        visit(user, ((size_t)a * n + b) * nh + c, q, weight);
      }
}

struct sum_arg {
  const struct _tsr_spectrum *s;
  double kf, sum;
};

static void add_power(void *user, size_t at, double q, int weight) {
  struct sum_arg *a = user;
  a->sum += weight * _tsr_spectrum_at(a->s, q * a->kf);
}

double _tsr_spectrum_variance(const struct _tsr_spectrum *s, int n, double cell) {
  double box = n * cell;
  struct sum_arg a = {s, 2 * M_PI / box, 0};
  walk(n, add_power, &a);
  return a.sum / (box * box * box);
}

tsr_status _tsr_grf_init(struct _tsr_grf *g, int n, double cell) {
  size_t nr = (size_t)n * n * n, nc = (size_t)n * n * (n / 2 + 1);
  *g = (struct _tsr_grf){.n = n, .cell = cell};
  g->real = fftw_alloc_real(nr);
  g->freq = fftw_alloc_complex(nc);
  if (g->real && g->freq) {
    pthread_mutex_lock(&plan_mutex);
    g->fwd = fftw_plan_dft_r2c_3d(n, n, n, g->real, g->freq, FFTW_ESTIMATE);
    g->back = fftw_plan_dft_c2r_3d(n, n, n, g->freq, g->real, FFTW_ESTIMATE);
    pthread_mutex_unlock(&plan_mutex);
  }
  if (!g->fwd || !g->back) {
    _tsr_grf_free(g);
    return _tsr_error(TSR_ERR_NOMEM, "random field: out of memory for %d^3 cells", n);
  }
  return TSR_OK;
}

void _tsr_grf_free(struct _tsr_grf *g) {
  pthread_mutex_lock(&plan_mutex);
  if (g->fwd) fftw_destroy_plan(g->fwd);
  if (g->back) fftw_destroy_plan(g->back);
  pthread_mutex_unlock(&plan_mutex);
  fftw_free(g->real);
  fftw_free(g->freq);
  *g = (struct _tsr_grf){0};
}

struct colour_arg {
  const struct _tsr_spectrum *s;
  fftw_complex *f;
  double kf, vcell;
};

static void colour(void *user, size_t at, double q, int weight) {
  struct colour_arg *a = user;
  double m = sqrt(_tsr_spectrum_at(a->s, q * a->kf) / a->vcell); /* 0 at k = 0 */
  a->f[at][0] *= m;
  a->f[at][1] *= m;
}

void _tsr_grf_make(struct _tsr_grf *g, struct _tsr_rng *r, const struct _tsr_spectrum *s, double *out) {
  int n = g->n;
  size_t nr = (size_t)n * n * n;
  for (size_t i = 0; i < nr; i += 2) { /* Box-Muller: two normals from two uniforms */
    double u = 1.0 - _tsr_rng_uniform(r), v = _tsr_rng_uniform(r), rad = sqrt(-2 * log(u));
    g->real[i] = rad * cos(2 * M_PI * v);
    if (i + 1 < nr) g->real[i + 1] = rad * sin(2 * M_PI * v);
  }
  fftw_execute(g->fwd);
  struct colour_arg a = {s, g->freq, 2 * M_PI / (n * g->cell), g->cell * g->cell * g->cell};
  walk(n, colour, &a);
  fftw_execute(g->back); /* unnormalised: divide by n^3 */
  for (size_t i = 0; i < nr; i++) out[i] = g->real[i] / (double)nr;
}

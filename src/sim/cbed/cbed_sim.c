/* The multislice method (Kirkland ch. 6): each slice's projected potential is summed in Fourier space
 * from the atoms' scattering factors (exact for the periodic cell, no real-space singularity), turned
 * into a transmission function exp(i sigma V) and band-limited to 2/3 of Nyquist; the wave is
 * multiplied by it and carried to the next slice by the Fresnel propagator exp(-i pi lambda dz k^2).
 * Grids are n x n, row y, column x; FFTW's planner is not thread-safe, so plans are made under a lock. */
/* cbed.h first: fftw_complex stays double[2] here as in the other files; complex.h after it */
#include "sim/cbed/cbed.h"

#include <complex.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* 2 pi a0 e in V A^2 (Bohr radius 0.529177 A, e = 14.39964 V A): v(q) = 2 pi a0 e f_e(q) / area. */
#define TWO_PI_A0_E (2 * M_PI * 0.529177210903 * 14.399645)

static pthread_mutex_t plan_mutex = PTHREAD_MUTEX_INITIALIZER;

static int freq(int i, int n) { return i < (n + 1) / 2 ? i : i - n; }

int _tsr_cbed_work_init(struct cbed_work *w, int n) {
  *w = (struct cbed_work){.n = n};
  size_t nn = (size_t)n * n;
  w->psi = fftw_alloc_complex(nn);
  w->tmp = fftw_alloc_complex(nn);
  w->vq = fftw_alloc_complex(nn);
  w->prop = fftw_alloc_complex(nn);
  w->img = malloc(sizeof(double) * nn);
  if (!w->psi || !w->tmp || !w->vq || !w->prop || !w->img) return -1;
  pthread_mutex_lock(&plan_mutex);
  w->fwd = fftw_plan_dft_2d(n, n, w->psi, w->tmp, FFTW_FORWARD, FFTW_ESTIMATE);
  w->bwd = fftw_plan_dft_2d(n, n, w->tmp, w->psi, FFTW_BACKWARD, FFTW_ESTIMATE);
  pthread_mutex_unlock(&plan_mutex);
  return w->fwd && w->bwd ? 0 : -1;
}

int _tsr_cbed_work_resize(struct cbed_work *w, int n) {
  if (w->n == n && w->fwd) return 0;
  double *acc = w->acc;
  size_t cap = w->cap_acc;
  w->acc = NULL; /* the accumulators do not depend on n: kept */
  _tsr_cbed_work_free(w);
  int rc = _tsr_cbed_work_init(w, n);
  w->acc = acc, w->cap_acc = cap;
  return rc;
}

void _tsr_cbed_work_free(struct cbed_work *w) {
  pthread_mutex_lock(&plan_mutex);
  if (w->fwd) fftw_destroy_plan(w->fwd);
  if (w->bwd) fftw_destroy_plan(w->bwd);
  pthread_mutex_unlock(&plan_mutex);
  fftw_free(w->psi);
  fftw_free(w->tmp);
  fftw_free(w->vq);
  fftw_free(w->prop);
  fftw_free(w->trans);
  free(w->fe);
  free(w->img);
  free(w->acc);
  *w = (struct cbed_work){0};
}

static void kvec(const struct cbed_work *w, int i, int j, double *kx, double *ky) {
  *kx = freq(i, w->n) / w->lx;
  *ky = freq(j, w->n) / w->ly;
}

int _tsr_cbed_in_band(const struct cbed_work *w, int i, int j) {
  double kx, ky, kmax = fmin(w->n / (2 * w->lx), w->n / (2 * w->ly)) * (2.0 / 3.0);
  kvec(w, i, j, &kx, &ky);
  return kx * kx + ky * ky < kmax * kmax;
}

/* Adds the Fourier coefficients of every atom of slice `s` to w->tmp (zeroed by the caller). */
static void slice_potential(struct cbed_work *w, const struct cbed_atoms *a, int s, double complex *ex,
                            double complex *ey, const int *zslot) {
  int n = w->n;
  size_t nn = (size_t)n * n;
  double complex *t = (double complex *)w->tmp;
  for (int k = 0; k < a->n; k++) {
    int sl = (int)(a->z[k] / w->dz);
    if (sl >= w->nslices) sl = w->nslices - 1;
    if (sl != s) continue;
    for (int i = 0; i < n; i++) ex[i] = cexp(-2 * M_PI * I * freq(i, n) * a->x[k] / w->lx);
    for (int j = 0; j < n; j++) ey[j] = cexp(-2 * M_PI * I * freq(j, n) * a->y[k] / w->ly);
    const double *fe = w->fe + nn * zslot[a->zn[k]];
    for (int j = 0; j < n; j++) {
      double complex *row = t + (size_t)j * n;
      const double *frow = fe + (size_t)j * n;
      for (int i = 0; i < n; i++) row[i] += frow[i] * ey[j] * ex[i];
    }
  }
}

int _tsr_cbed_prepare(struct cbed_work *w, const struct cbed_atoms *a, double kv, double slice) {
  int n = w->n;
  size_t nn = (size_t)n * n;
  w->lx = a->lx, w->ly = a->ly;
  w->lambda = tsr_cbed_wavelength(kv);
  w->sigma = tsr_cbed_sigma(kv);
  w->nslices = (int)lround(a->lz / slice);
  w->nslices = w->nslices < 1 ? 1 : w->nslices;
  w->dz = a->lz / w->nslices;
  if (w->nslices > w->cap_slices) {
    fftw_free(w->trans);
    w->trans = fftw_alloc_complex(nn * w->nslices);
    w->cap_slices = w->trans ? w->nslices : 0;
    if (!w->trans) return -1;
  }
  /* f_e(|k|) x 2 pi a0 e / area on the grid, for each element present (zeroed out of band) */
  int zslot[128], nz = 0;
  for (int z = 0; z < 128; z++) zslot[z] = -1;
  for (int k = 0; k < a->n; k++)
    if (a->zn[k] > 0 && a->zn[k] < 128 && zslot[a->zn[k]] < 0) zslot[a->zn[k]] = nz++;
  free(w->fe);
  w->fe = malloc(sizeof(double) * nn * (nz ? nz : 1));
  double complex *ex = malloc(sizeof *ex * n), *ey = malloc(sizeof *ey * n);
  if (!w->fe || !ex || !ey) {
    free(ex);
    free(ey);
    return -1;
  }
  double scale = TWO_PI_A0_E / (w->lx * w->ly);
  for (int z = 0; z < 128; z++) {
    if (zslot[z] < 0) continue;
    double *fe = w->fe + nn * zslot[z];
    for (int j = 0; j < n; j++)
      for (int i = 0; i < n; i++) {
        double kx, ky;
        kvec(w, i, j, &kx, &ky);
        fe[(size_t)j * n + i] = _tsr_cbed_in_band(w, i, j) ? scale * _tsr_cbed_fe(z, sqrt(kx * kx + ky * ky)) : 0;
      }
  }
  memset(w->vq, 0, sizeof(fftw_complex) * nn);
  double norm = 1.0 / nn;
  for (int s = 0; s < w->nslices; s++) {
    memset(w->tmp, 0, sizeof(fftw_complex) * nn);
    slice_potential(w, a, s, ex, ey, zslot);
    for (size_t p = 0; p < nn; p++) w->vq[p][0] += w->tmp[p][0], w->vq[p][1] += w->tmp[p][1];
    fftw_execute(w->bwd); /* psi = V(r), real up to rounding */
    for (size_t p = 0; p < nn; p++) {
      double ph = w->sigma * w->psi[p][0];
      w->psi[p][0] = cos(ph), w->psi[p][1] = sin(ph);
    }
    fftw_execute(w->fwd); /* band-limit the transmission function */
    for (int j = 0; j < n; j++)
      for (int i = 0; i < n; i++) {
        size_t p = (size_t)j * n + i;
        double m = _tsr_cbed_in_band(w, i, j) ? norm : 0;
        w->tmp[p][0] *= m, w->tmp[p][1] *= m;
      }
    fftw_execute(w->bwd);
    memcpy(w->trans + nn * s, w->psi, sizeof(fftw_complex) * nn);
  }
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++) {
      double kx, ky;
      kvec(w, i, j, &kx, &ky);
      /* Fresnel propagator, tilted by the specimen tilt (Kirkland eq. 6.99) */
      double ph = -M_PI * w->lambda * w->dz * (kx * kx + ky * ky) +
                  2 * M_PI * w->dz * (kx * tan(a->tilt[0]) + ky * tan(a->tilt[1]));
      double m = _tsr_cbed_in_band(w, i, j) ? norm : 0;
      w->prop[(size_t)j * n + i][0] = m * cos(ph);
      w->prop[(size_t)j * n + i][1] = m * sin(ph);
    }
  free(ex);
  free(ey);
  return 0;
}

void _tsr_cbed_propagate(struct cbed_work *w, int slices) {
  size_t nn = (size_t)w->n * w->n;
  double complex *psi = (double complex *)w->psi, *tmp = (double complex *)w->tmp,
                 *prop = (double complex *)w->prop;
  for (int s = 0; s < slices; s++) {
    const double complex *t = (const double complex *)w->trans + nn * (s % w->nslices);
    for (size_t q = 0; q < nn; q++) psi[q] *= t[q];
    fftw_execute(w->fwd);
    for (size_t q = 0; q < nn; q++) tmp[q] *= prop[q];
    if (s < slices - 1) fftw_execute(w->bwd);
  }
}

void _tsr_cbed_intensity(const struct cbed_work *w, double *out) {
  int n = w->n;
  double nn = (double)n * n;
  for (int j = 0; j < n; j++) {
    double *row = out + (size_t)((j + n / 2) % n) * n;
    for (int i = 0; i < n; i++) {
      const double *t = w->tmp[(size_t)j * n + i];
      row[(i + n / 2) % n] = nn * (t[0] * t[0] + t[1] * t[1]);
    }
  }
}

int _tsr_cbed_window_potential(const struct cbed_work *w, int m, double x0, double y0, double wx, double wy,
                               double blur, double *out) {
  /* V(x, y) = sum_k c(k) exp(2 pi i k.r), separable: rows of ky summed over kx at the m x positions,
   * then over ky at the m y positions; only the n_b frequencies in band carry anything */
  int n = w->n, nb = 0;
  int *f = malloc(sizeof(int) * n);
  double complex *ex = malloc(sizeof *ex * (size_t)m * n), *ey = malloc(sizeof *ey * (size_t)m * n),
                 *rows = malloc(sizeof *rows * (size_t)n * m), *cg = malloc(sizeof *cg * n);
  if (!f || !ex || !ey || !rows || !cg) {
    free(f), free(ex), free(ey), free(rows), free(cg);
    return -1;
  }
  for (int i = 0; i < n; i++)
    if (3 * abs(freq(i, n)) < n) f[nb++] = i; /* |f| < n / 3 holds every in-band frequency */
  for (int a = 0; a < m; a++)
    for (int b = 0; b < nb; b++) {
      double x = x0 + wx * a / m, y = y0 + wy * a / m;
      ex[(size_t)a * nb + b] = cexp(2 * M_PI * I * freq(f[b], n) * x / w->lx);
      ey[(size_t)a * nb + b] = cexp(2 * M_PI * I * freq(f[b], n) * y / w->ly);
    }
  for (int bj = 0; bj < nb; bj++) {
    int j = f[bj];
    double ky = freq(j, n) / w->ly;
    for (int bi = 0; bi < nb; bi++) { /* this row's blurred coefficients, in cg */
      double kx = freq(f[bi], n) / w->lx, g = exp(-2 * M_PI * M_PI * blur * blur * (kx * kx + ky * ky));
      const double *c = w->vq[(size_t)j * n + f[bi]];
      cg[bi] = g * (c[0] + I * c[1]);
    }
    for (int a = 0; a < m; a++) {
      double complex s = 0;
      for (int bi = 0; bi < nb; bi++) s += cg[bi] * ex[(size_t)a * nb + bi];
      rows[(size_t)bj * m + a] = s;
    }
  }
  for (int b = 0; b < m; b++)
    for (int a = 0; a < m; a++) {
      double complex s = 0;
      for (int bj = 0; bj < nb; bj++) s += rows[(size_t)bj * m + a] * ey[(size_t)b * nb + bj];
      out[(size_t)b * m + a] = creal(s);
    }
  free(f), free(ex), free(ey), free(rows), free(cg);
  return 0;
}

/* Phase-object diffraction generator: a projected potential V made of Gaussian atoms, the exit
 * wave psi = P exp(i sigma V) under a defocused convergent probe P (or a plane wave), and the input
 * log(1 + I) with I = |FFT(psi)|^2 normalised to mean 1 (inside the aperture disc for a probe) and
 * the zero frequency centred; the target is V. The defocus phase chi(k) = pi m |k|^2 / size makes a
 * ray through aperture pixel k cross the specimen at offset m k, so the disc shows a shadow image of
 * V at magnification m. Every random number is a function of (seed, index, draw number), so any
 * sample can be regenerated alone, in any order, on any rank. Also writes such samples to HDF5. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fftw3.h>
#include <hdf5.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "runtime/error.h"
#include "runtime/files.h"
#include <tessera/data.h>

/* From dataset.c: the process-wide HDF5 lock and the innermost HDF5 error message. */
#include "runtime/hdf5_lock.h"
#include "runtime/rng.h"

#define GEN_NAME "tessera phase_gen"
#define GEN_VERSION 2
/* Atom peak heights are drawn in [AMP_MIN, AMP_MAX]: sigma alone sets the phase scale. */
#define AMP_MIN 0.5
#define AMP_MAX 1.0

static pthread_mutex_t plan_mutex = PTHREAD_MUTEX_INITIALIZER; /* FFTW's planner is not thread-safe */

void tsr_phase_gen_opts_default(tsr_phase_gen_opts *o) {
  *o = (tsr_phase_gen_opts){.size = 64, .atoms_min = 4, .atoms_max = 12, .sigma = 0.8f,
                            .width_min = 1.5f, .width_max = 3.0f, .seed = 1, .aperture = 0.6f,
                            .magnification = 1.0f, .workers = 1};
}

static tsr_status check_opts(const tsr_phase_gen_opts *o) {
  if (!o) return _tsr_error(TSR_ERR_ARG, "phase_gen: options are NULL");
  if (o->size < 2 || o->size > 8192) return _tsr_error(TSR_ERR_ARG, "phase_gen: size %d is not in [2, 8192]", o->size);
  if (o->workers < 0 || o->workers > 4096)
    return _tsr_error(TSR_ERR_ARG, "phase_gen: workers %d is not in [0, 4096]", o->workers);
  if (o->atoms_min < 1) return _tsr_error(TSR_ERR_ARG, "phase_gen: atoms_min %d is below 1", o->atoms_min);
  if (o->atoms_max < o->atoms_min)
    return _tsr_error(TSR_ERR_ARG, "phase_gen: atoms_max %d is below atoms_min %d", o->atoms_max, o->atoms_min);
  if (!(o->sigma > 0) || !isfinite(o->sigma))
    return _tsr_error(TSR_ERR_ARG, "phase_gen: sigma %g is not a positive number", o->sigma);
  if (!(o->width_min > 0) || !isfinite(o->width_min))
    return _tsr_error(TSR_ERR_ARG, "phase_gen: width_min %g is not a positive number", o->width_min);
  if (!(o->width_max >= o->width_min) || !isfinite(o->width_max))
    return _tsr_error(TSR_ERR_ARG, "phase_gen: width_max %g is below width_min %g", o->width_max, o->width_min);
  if (!(o->aperture >= 0 && o->aperture <= 1))
    return _tsr_error(TSR_ERR_ARG, "phase_gen: aperture %g is not in [0, 1] (fraction of Nyquist)", o->aperture);
  if (o->aperture > 0 && !(o->magnification > 0 && o->magnification * o->aperture <= 1))
    return _tsr_error(TSR_ERR_ARG, "phase_gen: magnification %g must be positive and at most 1/aperture = %g",
                      o->magnification, 1.0 / o->aperture);
  return TSR_OK;
}

/* Counter-based stream (runtime/rng.h): the draws of sample (seed, index) depend on nothing else. */
static struct _tsr_rng rng_for(uint64_t seed, int64_t index) {
  return _tsr_rng_stream(seed, (uint64_t)index + 0x632BE59BD9B4E019ull);
}

/* Adds a periodic Gaussian (minimum-image distance) so V, like the FFT, lives on a torus. */
static void add_atom(float *v, int s, double px, double py, double width, double amp, double *gx, double *gy) {
  double k = -0.5 / (width * width);
  for (int i = 0; i < s; i++) {
    double dx = fabs(i - px), dy = fabs(i - py);
    dx = fmin(dx, s - dx);
    dy = fmin(dy, s - dy);
    gx[i] = exp(k * dx * dx);
    gy[i] = amp * exp(k * dy * dy);
  }
  for (int y = 0; y < s; y++)
    for (int x = 0; x < s; x++) v[(size_t)y * s + x] += (float)(gy[y] * gx[x]);
}

struct work {
  int s;
  fftw_complex *t, *f; /* double precision: the build links libfftw3, and the cost is small */
  fftw_complex *probe; /* real-space probe, NULL for a plane wave */
  fftw_plan plan;
  double *gx, *gy;
  double disc;         /* pixels inside the aperture */
};

/* Frequency index of FFT bin i (0, 1, ..., s/2 - 1, -s/2, ..., -1). */
static int freq(int i, int s) { return i < (s + 1) / 2 ? i : i - s; }

/* P = IFFT(A(k) exp(-i chi(k))), centred in the cell, normalised to unit mean intensity over the cell. */
static tsr_status make_probe(struct work *w, const tsr_phase_gen_opts *o) {
  int s = w->s;
  size_t n = (size_t)s * s;
  double kap = o->aperture * s / 2.0, c = M_PI * o->magnification / s;
  w->probe = fftw_alloc_complex(n);
  if (!w->probe) return _tsr_error(TSR_ERR_NOMEM, "phase_gen: out of memory for the probe");
  pthread_mutex_lock(&plan_mutex);
  fftw_plan back = fftw_plan_dft_2d(s, s, w->f, w->probe, FFTW_BACKWARD, FFTW_ESTIMATE);
  pthread_mutex_unlock(&plan_mutex);
  if (!back) return _tsr_error(TSR_ERR_NOMEM, "phase_gen: cannot plan the probe transform");
  w->disc = 0;
  for (int y = 0; y < s; y++)
    for (int x = 0; x < s; x++) {
      int ky = freq(y, s), kx = freq(x, s);
      double k2 = (double)kx * kx + (double)ky * ky;
      /* the (-1)^(kx+ky) factor moves the probe from the origin to the cell centre */
      double a = k2 <= kap * kap ? (((kx + ky) & 1) ? -1.0 : 1.0) : 0.0, chi = c * k2;
      w->disc += a != 0;
      w->f[(size_t)y * s + x][0] = a * cos(chi);
      w->f[(size_t)y * s + x][1] = -a * sin(chi);
    }
  fftw_execute(back);
  pthread_mutex_lock(&plan_mutex);
  fftw_destroy_plan(back);
  pthread_mutex_unlock(&plan_mutex);
  double e = 0;
  for (size_t i = 0; i < n; i++) e += w->probe[i][0] * w->probe[i][0] + w->probe[i][1] * w->probe[i][1];
  double scale = e > 0 ? sqrt((double)n / e) : 0;
  for (size_t i = 0; i < n; i++) w->probe[i][0] *= scale, w->probe[i][1] *= scale;
  return TSR_OK;
}

static tsr_status work_init(struct work *w, const tsr_phase_gen_opts *o) {
  int s = o->size;
  size_t n = (size_t)s * s;
  *w = (struct work){.s = s};
  w->t = fftw_alloc_complex(n);
  w->f = fftw_alloc_complex(n);
  w->gx = malloc(sizeof(double) * s);
  w->gy = malloc(sizeof(double) * s);
  if (w->t && w->f) {
    pthread_mutex_lock(&plan_mutex);
    w->plan = fftw_plan_dft_2d(s, s, w->t, w->f, FFTW_FORWARD, FFTW_ESTIMATE);
    pthread_mutex_unlock(&plan_mutex);
  }
  if (!w->plan || !w->gx || !w->gy) return _tsr_error(TSR_ERR_NOMEM, "phase_gen: out of memory for size %d", s);
  return o->aperture > 0 ? make_probe(w, o) : TSR_OK;
}

static void work_free(struct work *w) {
  pthread_mutex_lock(&plan_mutex);
  if (w->plan) fftw_destroy_plan(w->plan);
  pthread_mutex_unlock(&plan_mutex);
  fftw_free(w->t);
  fftw_free(w->f);
  fftw_free(w->probe);
  free(w->gx);
  free(w->gy);
}

static void generate(const tsr_phase_gen_opts *o, struct work *w, int64_t index, float *x, float *v) {
  int s = w->s;
  size_t n = (size_t)s * s;
  struct _tsr_rng r = rng_for(o->seed, index);
  int natoms = o->atoms_min + (int)(_tsr_rng_uniform(&r) * (o->atoms_max - o->atoms_min + 1));
  memset(v, 0, sizeof(float) * n);
  /* Under a probe, atoms lie inside the region its shadow image covers. */
  double reach = o->aperture > 0 ? 0.85 * o->aperture * o->magnification * s / 2.0 : 0;
  for (int a = 0; a < natoms; a++) {
    double px = _tsr_rng_uniform(&r) * s, py = _tsr_rng_uniform(&r) * s;
    if (reach > 0) {
      double rad = reach * sqrt(_tsr_rng_uniform(&r)), ang = 2 * M_PI * _tsr_rng_uniform(&r);
      px = s / 2.0 + rad * cos(ang), py = s / 2.0 + rad * sin(ang);
    }
    double width = o->width_min + _tsr_rng_uniform(&r) * (o->width_max - o->width_min);
    double amp = AMP_MIN + _tsr_rng_uniform(&r) * (AMP_MAX - AMP_MIN);
    add_atom(v, s, px, py, width, amp, w->gx, w->gy);
  }
  for (size_t i = 0; i < n; i++) {
    double ph = (double)o->sigma * v[i];
    double re = cos(ph), im = sin(ph);
    if (w->probe) {
      const double *p = w->probe[i];
      w->t[i][0] = p[0] * re - p[1] * im;
      w->t[i][1] = p[0] * im + p[1] * re;
    } else {
      w->t[i][0] = re;
      w->t[i][1] = im;
    }
  }
  fftw_execute(w->plan);
  /* Mean intensity 1 over the cell (plane wave) or the disc (probe: sum |F|^2 = n^2 by Parseval,
   * since the probe has unit mean intensity and |exp(i sigma V)| = 1); (k + s/2) mod s is
   * fftshift's destination. */
  double norm = w->probe ? w->disc / ((double)n * n) : 1.0 / ((double)s * s);
  for (int ky = 0; ky < s; ky++) {
    float *row = x + (size_t)((ky + s / 2) % s) * s;
    for (int kx = 0; kx < s; kx++) {
      const double *f = w->f[(size_t)ky * s + kx];
      int dst = kx + s / 2;
      row[dst < s ? dst : dst - s] = (float)log1p((f[0] * f[0] + f[1] * f[1]) * norm);
    }
  }
}

tsr_status tsr_phase_gen_sample(const tsr_phase_gen_opts *o, int64_t index, float *x, float *v) {
  TSR_TRY(check_opts(o));
  if (!x || !v) return _tsr_error(TSR_ERR_ARG, "tsr_phase_gen_sample: %s is NULL", x ? "v" : "x");
  if (index < 0) return _tsr_error(TSR_ERR_ARG, "tsr_phase_gen_sample: index %lld is negative", (long long)index);
  struct work w;
  tsr_status s = work_init(&w, o);
  if (s == TSR_OK) generate(o, &w, index, x, v);
  work_free(&w);
  return s;
}

/* ---- HDF5 writer ---- */

static int write_attrs(hid_t file, const tsr_phase_gen_opts *o, int64_t n) {
  int version = GEN_VERSION;
  long long samples = n;
  return _tsr_h5_attr_str(file, "generator", GEN_NAME) && _tsr_h5_attr(file, "generator_version", H5T_NATIVE_INT, &version) &&
         _tsr_h5_attr(file, "samples", H5T_NATIVE_LLONG, &samples) &&
         _tsr_h5_attr(file, "size", H5T_NATIVE_INT, &o->size) &&
         _tsr_h5_attr(file, "atoms_min", H5T_NATIVE_INT, &o->atoms_min) &&
         _tsr_h5_attr(file, "atoms_max", H5T_NATIVE_INT, &o->atoms_max) &&
         _tsr_h5_attr(file, "sigma", H5T_NATIVE_FLOAT, &o->sigma) &&
         _tsr_h5_attr(file, "width_min", H5T_NATIVE_FLOAT, &o->width_min) &&
         _tsr_h5_attr(file, "width_max", H5T_NATIVE_FLOAT, &o->width_max) &&
         _tsr_h5_attr(file, "aperture", H5T_NATIVE_FLOAT, &o->aperture) &&
         _tsr_h5_attr(file, "magnification", H5T_NATIVE_FLOAT, &o->magnification) &&
         _tsr_h5_attr(file, "seed", H5T_NATIVE_UINT64, &o->seed);
}

/* One [n, 1, s, s] float32 dataset, chunked per sample so a training read touches one chunk. */
static hid_t create_dset(hid_t file, const char *name, int64_t n, int s) {
  hsize_t dims[4] = {(hsize_t)n, 1, (hsize_t)s, (hsize_t)s}, chunk[4] = {1, 1, (hsize_t)s, (hsize_t)s};
  hid_t sp = H5Screate_simple(4, dims, NULL);
  hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(pl, 4, chunk);
  hid_t d = H5Dcreate2(file, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
  H5Pclose(pl);
  H5Sclose(sp);
  return d;
}

static int write_block(hid_t d, int64_t first, int64_t count, int s, const float *buf) {
  hsize_t start[4] = {(hsize_t)first, 0, 0, 0}, cnt[4] = {(hsize_t)count, 1, (hsize_t)s, (hsize_t)s};
  hid_t fs = H5Dget_space(d);
  hid_t ms = H5Screate_simple(4, cnt, NULL);
  int ok = fs >= 0 && ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL) >= 0 &&
           H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf) >= 0;
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  return ok;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

enum { BLOCK = 64 }; /* samples generated between two HDF5 writes */

/* Samples [first, first + count) into xb and vb, on o->workers threads with one work area each (a
 * sample depends on (seed, index) only, so the data do not depend on the number of threads). */
static void generate_block(const tsr_phase_gen_opts *o, struct work *w, int nw, int64_t first, int64_t count,
                           float *xb, float *vb) {
  size_t per = (size_t)o->size * o->size;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nw) schedule(static, 1)
#endif
  for (int64_t i = 0; i < count; i++) {
#ifdef _OPENMP
    struct work *tw = &w[omp_get_thread_num()];
#else
    struct work *tw = w;
#endif
    generate(o, tw, first + i, xb + per * i, vb + per * i);
  }
}

/* Creates both datasets and the attributes, then generates and writes every sample in blocks. */
static tsr_status fill_file(const tsr_phase_gen_opts *o, int64_t n, const char *tmp, hid_t file, struct work *w,
                            int nw, void (*progress)(void *, int64_t, int64_t), void *user) {
  size_t per = (size_t)o->size * o->size;
  char why[256];
  float *xb = malloc(sizeof(float) * per * BLOCK), *vb = malloc(sizeof(float) * per * BLOCK);
  if (!xb || !vb) {
    free(xb);
    free(vb);
    return _tsr_error(TSR_ERR_NOMEM, "phase_gen: out of memory");
  }
  tsr_status st = TSR_OK;
  _tsr_hdf5_lock();
  hid_t din = create_dset(file, "inputs", n, o->size), dtg = create_dset(file, "targets", n, o->size);
  if (din < 0 || dtg < 0 || !write_attrs(file, o, n))
    st = _tsr_error(TSR_ERR_IO, "%s: cannot create datasets (%s)", tmp, _tsr_hdf5_reason(why));
  _tsr_hdf5_unlock();
  double last = now_s();
  if (progress && st == TSR_OK) progress(user, 0, n);
  for (int64_t first = 0; first < n && st == TSR_OK; first += BLOCK) {
    int64_t count = n - first < BLOCK ? n - first : BLOCK;
    generate_block(o, w, nw, first, count, xb, vb);
    _tsr_hdf5_lock();
    if (!write_block(din, first, count, o->size, xb) || !write_block(dtg, first, count, o->size, vb))
      st = _tsr_error(TSR_ERR_IO, "%s: cannot write samples %lld..%lld (%s)", tmp, (long long)first,
                      (long long)(first + count - 1), _tsr_hdf5_reason(why));
    _tsr_hdf5_unlock();
    double t = now_s();
    if (progress && st == TSR_OK && (t - last >= 0.1 || first + count == n)) {
      progress(user, first + count, n);
      last = t;
    }
  }
  _tsr_hdf5_lock();
  if (din >= 0) H5Dclose(din);
  if (dtg >= 0) H5Dclose(dtg);
  _tsr_hdf5_unlock();
  free(xb);
  free(vb);
  return st;
}

tsr_status tsr_phase_gen_write(const tsr_phase_gen_opts *o, int64_t n, const char *path,
                               void (*progress)(void *user, int64_t done, int64_t total), void *user) {
  TSR_TRY(check_opts(o));
  if (!path) return _tsr_error(TSR_ERR_ARG, "tsr_phase_gen_write: path is NULL");
  if (n < 1) return _tsr_error(TSR_ERR_ARG, "tsr_phase_gen_write: %lld samples requested, need at least 1", (long long)n);
  char *tmp = _tsr_tmp_path(path);
  if (!tmp) return _tsr_error(TSR_ERR_NOMEM, "phase_gen: out of memory");

#ifdef _OPENMP
  int nw = o->workers > 1 ? o->workers : 1;
#else
  int nw = 1;
#endif
  struct work *w = calloc(nw, sizeof *w);
  tsr_status st = w ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "phase_gen: out of memory");
  int ready = 0;
  while (st == TSR_OK && ready < nw) st = work_init(&w[ready++], o);
  char why[256];
  hid_t file = -1;
  if (st == TSR_OK) {
    _tsr_hdf5_lock();
    file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) st = _tsr_error(TSR_ERR_IO, "%s: cannot create (%s)", tmp, _tsr_hdf5_reason(why));
    _tsr_hdf5_unlock();
  }
  if (st == TSR_OK) st = fill_file(o, n, tmp, file, w, nw, progress, user);
  if (file >= 0) {
    _tsr_hdf5_lock();
    if (H5Fclose(file) < 0 && st == TSR_OK)
      st = _tsr_error(TSR_ERR_IO, "%s: cannot close (%s)", tmp, _tsr_hdf5_reason(why));
    _tsr_hdf5_unlock();
  }
  for (int i = 0; i < ready; i++) work_free(&w[i]);
  free(w);
  if (st == TSR_OK && rename(tmp, path) != 0)
    st = _tsr_error(TSR_ERR_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
  if (st != TSR_OK && file >= 0) remove(tmp);
  free(tmp);
  return st;
}

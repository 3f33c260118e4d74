/* The loader: a concatenation of sources (HDF5 files read one sample, or one box of a sample, at a
 * time through tsr_dataset, or .npy pairs held in memory) or a stream from a pool of produced
 * samples (pool.c), input
 * standardisation with per-channel statistics, the per-epoch sharded order, and what the trainer's
 * load tasks ask of a loader (loader_tasks.h). Errors name the file; NaN and Inf are caught on read
 * (HDF5) or at open (.npy). */
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/rng.h"
#include "data/box.h"
#include "data/loader_tasks.h"
#include "data/pool.h"
#include "data/stats.h"
#include "tensor/dist.h"
#include <tessera/data.h>
#include <tessera/loader.h>
#include <tessera/params.h>

struct source {
  char *path;          /* for messages */
  tsr_dataset *d;      /* HDF5, or NULL */
  float *x, *y;        /* .npy data in memory */
  int64_t n, first;    /* samples, index of the first in the concatenation */
};

struct tsr_loader {
  struct source *src;
  int nsrc, cap;
  int64_t n;
  tsr_shape xs, ys;   /* per-sample shapes: [C, H, W] or [C, D, H, W] */
  double *mean, *std; /* [C] or NULL */
  double *tmean, *tstd; /* a pool's target statistics (tsr_pool_opts.target_stats_samples), or NULL */
  struct _tsr_pool *pool; /* a stream: no sources, n unbounded */
};

void tsr_loader_opts_default(tsr_loader_opts *o) {
  *o = (tsr_loader_opts){.input_name = NULL, .target_name = NULL, .standardize = 1, .stats_samples = 256};
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

static tsr_status add_source(tsr_loader *l, struct source s) {
  if (l->nsrc == l->cap) {
    int cap = l->cap ? 2 * l->cap : 8;
    struct source *ns = realloc(l->src, sizeof *ns * cap);
    if (!ns) return _tsr_error(TSR_ERR_NOMEM, "loader: out of memory");
    l->src = ns, l->cap = cap;
  }
  s.first = l->n;
  l->src[l->nsrc++] = s;
  l->n += s.n;
  return TSR_OK;
}

static void source_free(struct source *s) {
  tsr_dataset_close(s->d);
  free(s->x);
  free(s->y);
  free(s->path);
}

static int same_shape(const tsr_shape *a, const tsr_shape *b) {
  return a->ndim == b->ndim && !memcmp(a->dims, b->dims, sizeof(int64_t) * a->ndim);
}

/* Checks one source's per-sample shapes against the first source's. */
static tsr_status check_shapes(tsr_loader *l, const char *path, const tsr_shape *xs, const tsr_shape *ys) {
  if (l->nsrc == 0) {
    l->xs = *xs, l->ys = *ys;
    return TSR_OK;
  }
  if (!same_shape(xs, &l->xs) || !same_shape(ys, &l->ys)) {
    char a[96], b[96], c[96], d[96];
    return _tsr_error(TSR_ERR_SHAPE, "%s: per-sample shapes inputs %s, targets %s differ from %s's %s, %s", path,
                      tsr_shape_str(xs, a, sizeof a), tsr_shape_str(ys, b, sizeof b), l->src[0].path,
                      tsr_shape_str(&l->xs, c, sizeof c), tsr_shape_str(&l->ys, d, sizeof d));
  }
  return TSR_OK;
}

static tsr_status open_h5(tsr_loader *l, const char *path, const tsr_loader_opts *o) {
  struct source s = {0};
  TSR_TRY(tsr_dataset_open_names(&s.d, path, o->input_name, o->target_name));
  tsr_shape xs, ys;
  tsr_dataset_input_dims(s.d, &xs);
  tsr_dataset_target_dims(s.d, &ys);
  s.n = tsr_dataset_size(s.d);
  s.path = strdup(path);
  tsr_status st = s.path ? check_shapes(l, path, &xs, &ys) : _tsr_error(TSR_ERR_NOMEM, "loader: out of memory");
  if (st == TSR_OK) st = add_source(l, s);
  if (st != TSR_OK) source_free(&s);
  return st;
}

static tsr_status finite_npy(const char *path, const float *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(v[i]))
      return _tsr_error(TSR_ERR_NUMERIC, "%s: holds %s at element %zu", path, isnan(v[i]) ? "NaN" : "Inf", i);
  return TSR_OK;
}

static tsr_status open_npy(tsr_loader *l, const char *xpath, const char *ypath) {
  struct source s = {0};
  tsr_shape xs, ys;
  TSR_TRY(tsr_npy_read(xpath, &xs, &s.x));
  tsr_status st = tsr_npy_read(ypath, &ys, &s.y);
  if (st == TSR_OK && (xs.ndim != 4 || ys.ndim != 4))
    st = _tsr_error(TSR_ERR_SHAPE, "%s: has %d dimensions, expected 4 [N, C, H, W]", xs.ndim != 4 ? xpath : ypath,
                    xs.ndim != 4 ? xs.ndim : ys.ndim);
  if (st == TSR_OK && xs.dims[0] != ys.dims[0])
    st = _tsr_error(TSR_ERR_SHAPE, "%s holds %lld samples but %s holds %lld", xpath, (long long)xs.dims[0], ypath,
                    (long long)ys.dims[0]);
  if (st == TSR_OK && xs.dims[0] == 0) st = _tsr_error(TSR_ERR_FORMAT, "%s: no samples", xpath);
  if (st == TSR_OK) st = finite_npy(xpath, s.x, (size_t)xs.dims[0] * xs.dims[1] * xs.dims[2] * xs.dims[3]);
  if (st == TSR_OK) st = finite_npy(ypath, s.y, (size_t)ys.dims[0] * ys.dims[1] * ys.dims[2] * ys.dims[3]);
  if (st == TSR_OK) { /* per-sample shapes: drop N */
    tsr_shape xper = {.ndim = 3, .dims = {xs.dims[1], xs.dims[2], xs.dims[3]}};
    tsr_shape yper = {.ndim = 3, .dims = {ys.dims[1], ys.dims[2], ys.dims[3]}};
    st = check_shapes(l, xpath, &xper, &yper);
  }
  if (st == TSR_OK) {
    s.n = xs.dims[0];
    s.path = strdup(xpath);
    st = s.path ? add_source(l, s) : _tsr_error(TSR_ERR_NOMEM, "loader: out of memory");
  }
  if (st != TSR_OK) source_free(&s);
  return st;
}

/* A folder: inputs.npy/targets.npy, or cbed.npy/potential.npy. */
static tsr_status open_dir(tsr_loader *l, const char *dir) {
  static const char *pairs[2][2] = {{"inputs.npy", "targets.npy"}, {"cbed.npy", "potential.npy"}};
  char x[4096], y[4096];
  struct stat st;
  for (int i = 0; i < 2; i++) {
    snprintf(x, sizeof x, "%s/%s", dir, pairs[i][0]);
    snprintf(y, sizeof y, "%s/%s", dir, pairs[i][1]);
    if (stat(x, &st) == 0) return open_npy(l, x, y);
  }
  return _tsr_error(TSR_ERR_IO, "%s: a data folder needs inputs.npy and targets.npy (or cbed.npy and potential.npy)", dir);
}

static tsr_status open_item(tsr_loader *l, const char *item, const tsr_loader_opts *o) {
  const char *colon = strchr(item, ':');
  if (colon && ends_with(item, ".npy")) {
    char *x = strndup(item, colon - item);
    if (!x) return _tsr_error(TSR_ERR_NOMEM, "loader: out of memory");
    tsr_status st = open_npy(l, x, colon + 1);
    free(x);
    return st;
  }
  if (ends_with(item, ".npy"))
    return _tsr_error(TSR_ERR_ARG, "%s: a .npy source is a pair X.npy:Y.npy (inputs and targets) or a folder", item);
  if (strpbrk(item, "*?[")) {
    glob_t g;
    int rc = glob(item, 0, NULL, &g);
    if (rc != 0) {
      if (rc != GLOB_NOMATCH) globfree(&g);
      return _tsr_error(TSR_ERR_IO, "%s: no file matches", item);
    }
    tsr_status st = TSR_OK;
    for (size_t i = 0; i < g.gl_pathc && st == TSR_OK; i++) st = open_item(l, g.gl_pathv[i], o);
    globfree(&g);
    return st;
  }
  struct stat st;
  if (stat(item, &st) == 0 && S_ISDIR(st.st_mode)) return open_dir(l, item);
  return open_h5(l, item, o);
}

/* Per-channel mean and std of the inputs over up to k samples spread evenly (float64 sums). */
static tsr_status compute_stats(tsr_loader *l, int k) {
  int nc = (int)l->xs.dims[0];
  size_t xe = (size_t)tsr_shape_numel(&l->xs), plane = xe / nc;
  float *x = malloc(sizeof(float) * xe);
  double *s1 = calloc(nc, sizeof(double)), *s2 = calloc(nc, sizeof(double));
  l->mean = calloc(nc, sizeof(double)), l->std = calloc(nc, sizeof(double));
  if (!x || !s1 || !s2 || !l->mean || !l->std) {
    free(x), free(s1), free(s2);
    return _tsr_error(TSR_ERR_NOMEM, "loader: out of memory");
  }
  if (k > l->n) k = (int)l->n;
  tsr_status st = TSR_OK;
  double *keep_mean = l->mean;
  l->mean = NULL; /* raw reads while the statistics are gathered */
  for (int i = 0; i < k && st == TSR_OK; i++) {
    st = tsr_loader_read(l, (int64_t)i * l->n / k, x, NULL);
    if (st == TSR_OK) _tsr_stats_add(x, nc, plane, s1, s2);
  }
  l->mean = keep_mean;
  _tsr_stats_finish(s1, s2, (double)k * plane, nc, l->mean, l->std);
  free(x), free(s1), free(s2);
  return st;
}

/* The epoch order of n samples (tsr_loader_epoch_indices) takes 8 bytes per sample, and a caller's
 * shard as many again: a file declaring 2^40 samples is refused here, not at the first epoch. */
static tsr_status check_order_size(const char *what, int64_t n) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s: the order of its %lld samples", what, (long long)n);
  return _tsr_memory_check(_tsr_mul_sat((uint64_t)n, 2 * sizeof(int64_t)), msg, NULL);
}

tsr_status tsr_loader_open(tsr_loader **out, const char *spec, const tsr_loader_opts *opts) {
  if (!out || !spec || !*spec) return _tsr_error(TSR_ERR_ARG, "tsr_loader_open: %s is missing", out ? "the data spec" : "l");
  *out = NULL;
  tsr_loader_opts o;
  if (opts) o = *opts;
  else tsr_loader_opts_default(&o);
  tsr_loader *l = calloc(1, sizeof *l);
  char *copy = strdup(spec), *save = NULL;
  if (!l || !copy) {
    free(l), free(copy);
    return _tsr_error(TSR_ERR_NOMEM, "loader: out of memory");
  }
  tsr_status st = TSR_OK;
  for (char *t = strtok_r(copy, ",", &save); t && st == TSR_OK; t = strtok_r(NULL, ",", &save)) st = open_item(l, t, &o);
  free(copy);
  if (st == TSR_OK && l->n == 0) st = _tsr_error(TSR_ERR_ARG, "'%s': no data", spec);
  if (st == TSR_OK) st = check_order_size(spec, l->n);
  if (st == TSR_OK && o.standardize) st = compute_stats(l, o.stats_samples > 0 ? o.stats_samples : 256);
  if (st != TSR_OK) {
    tsr_loader_close(l);
    return st;
  }
  *out = l;
  return TSR_OK;
}

void tsr_loader_close(tsr_loader *l) {
  if (!l) return;
  _tsr_pool_destroy(l->pool, 1);
  for (int i = 0; i < l->nsrc; i++) source_free(&l->src[i]);
  free(l->src);
  free(l->mean);
  free(l->std);
  free(l->tmean);
  free(l->tstd);
  free(l);
}

int64_t tsr_loader_size(const tsr_loader *l) { return l->n; }
int tsr_loader_num_files(const tsr_loader *l) { return l->nsrc; }
const char *tsr_loader_file(const tsr_loader *l, int i) { return i >= 0 && i < l->nsrc ? l->src[i].path : NULL; }
int tsr_loader_is_stream(const tsr_loader *l) { return l && l->pool; }

/* [C, H, W], or [C, D*H, W] for [C, D, H, W] */
static void chw(const tsr_shape *s, int *c, int *h, int *w) {
  *c = (int)s->dims[0];
  *h = (int)(s->ndim == 4 ? s->dims[1] * s->dims[2] : s->dims[1]);
  *w = (int)s->dims[s->ndim - 1];
}

void tsr_loader_input_shape(const tsr_loader *l, int *c, int *h, int *w) { chw(&l->xs, c, h, w); }
void tsr_loader_target_shape(const tsr_loader *l, int *c, int *h, int *w) { chw(&l->ys, c, h, w); }
void tsr_loader_input_dims(const tsr_loader *l, tsr_shape *s) { *s = l->xs; }
void tsr_loader_target_dims(const tsr_loader *l, tsr_shape *s) { *s = l->ys; }

void tsr_loader_stats(const tsr_loader *l, const double **mean, const double **std) {
  *mean = l->mean;
  *std = l->std;
}

void tsr_loader_target_stats(const tsr_loader *l, const double **mean, const double **std) {
  *mean = l->tmean;
  *std = l->tstd;
}

tsr_status tsr_loader_set_stats(tsr_loader *l, const double *mean, const double *std, int channels) {
  if (!l || !mean != !std) return _tsr_error(TSR_ERR_ARG, "tsr_loader_set_stats: NULL loader, or mean without std");
  if (!mean) {
    free(l->mean), free(l->std);
    l->mean = l->std = NULL;
    return TSR_OK;
  }
  int nc = (int)l->xs.dims[0];
  if (channels != nc)
    return _tsr_error(TSR_ERR_SHAPE, "%s: inputs have %d channels, the statistics %d", l->pool ? "pool" : l->src[0].path,
                      nc, channels);
  if (!l->mean) l->mean = malloc(sizeof(double) * nc), l->std = malloc(sizeof(double) * nc);
  if (!l->mean || !l->std) return _tsr_error(TSR_ERR_NOMEM, "loader: out of memory");
  memcpy(l->mean, mean, sizeof(double) * nc);
  memcpy(l->std, std, sizeof(double) * nc);
  return TSR_OK;
}

/* Per-channel standardisation of one input sample or box (`plane` values per channel), when enabled. */
static void standardize(const tsr_loader *l, float *x, size_t plane) {
  if (x && l->mean)
    for (int c = 0; c < l->xs.dims[0]; c++) {
      float m = (float)l->mean[c], r = (float)(1.0 / l->std[c]);
      for (size_t p = 0; p < plane; p++) x[c * plane + p] = (x[c * plane + p] - m) * r;
    }
}

static size_t per_channel(const tsr_shape *s) { return (size_t)(tsr_shape_numel(s) / s->dims[0]); }

/* The source holding sample `index` of the concatenation, and the sample's index in it. */
static struct source *find_source(tsr_loader *l, int64_t index, int64_t *k) {
  int lo = 0, hi = l->nsrc - 1; /* the last source whose first index is <= index */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (l->src[mid].first <= index) lo = mid;
    else hi = mid - 1;
  }
  *k = index - l->src[lo].first;
  return &l->src[lo];
}

static tsr_status check_read(const tsr_loader *l, int64_t index) {
  if (!l) return _tsr_error(TSR_ERR_ARG, "tsr_loader_read: loader is NULL");
  if (index < 0 || index >= l->n)
    return _tsr_error(TSR_ERR_ARG, "sample %lld is out of range (the data hold %lld)", (long long)index, (long long)l->n);
  return TSR_OK;
}

tsr_status tsr_loader_read(tsr_loader *l, int64_t index, float *x, float *y) {
  TSR_TRY(check_read(l, index));
  if (l->pool) {
    TSR_TRY(_tsr_pool_produce_now(l->pool, index, x, y));
    standardize(l, x, per_channel(&l->xs));
    return TSR_OK;
  }
  int64_t k;
  struct source *s = find_source(l, index, &k);
  size_t xe = (size_t)tsr_shape_numel(&l->xs), ye = (size_t)tsr_shape_numel(&l->ys);
  if (s->d) {
    TSR_TRY(tsr_dataset_read(s->d, k, x, y));
  } else {
    if (x) memcpy(x, s->x + xe * k, sizeof(float) * xe);
    if (y) memcpy(y, s->y + ye * k, sizeof(float) * ye);
  }
  standardize(l, x, per_channel(&l->xs));
  return TSR_OK;
}

tsr_status tsr_loader_read_box(tsr_loader *l, int64_t index, const int64_t *start, const int64_t *extent, float *x,
                               float *y) {
  TSR_TRY(check_read(l, index));
  TSR_TRY(_tsr_box_check(l->pool ? "pool" : l->src[0].path, &l->xs, start, extent));
  /* the targets share the box when they have the inputs' spatial shape */
  int same = l->xs.ndim == l->ys.ndim && !memcmp(l->xs.dims + 1, l->ys.dims + 1, sizeof(int64_t) * (l->xs.ndim - 1));
  size_t box = (size_t)(_tsr_box_numel(&l->xs, extent) / l->xs.dims[0]);
  int64_t k = index;
  struct source *s = l->pool ? NULL : find_source(l, index, &k);
  if (s && s->d) {
    TSR_TRY(tsr_dataset_read_box(s->d, k, start, extent, x, y));
    standardize(l, x, box);
    return TSR_OK;
  }
  /* in memory (.npy) or produced whole: cut the box out of the sample */
  size_t xe = (size_t)tsr_shape_numel(&l->xs), ye = (size_t)tsr_shape_numel(&l->ys);
  float *wx = s ? s->x + xe * k : NULL, *wy = s ? s->y + ye * k : NULL, *buf = NULL;
  if (!s) {
    buf = malloc(sizeof(float) * (xe + ye));
    if (!buf) return _tsr_error(TSR_ERR_NOMEM, "loader: out of memory for one sample");
    tsr_status st = _tsr_pool_produce_now(l->pool, index, buf, buf + xe);
    if (st != TSR_OK) {
      free(buf);
      return st;
    }
    wx = buf, wy = buf + xe;
  }
  if (x) _tsr_box_cut(&l->xs, start, extent, wx, x);
  if (y && same) _tsr_box_cut(&l->ys, start, extent, wy, y);
  else if (y) memcpy(y, wy, sizeof(float) * ye);
  free(buf);
  standardize(l, x, box);
  return TSR_OK;
}

/* ---- a pool of produced samples ---- */

tsr_status tsr_loader_open_pool(tsr_loader **out, const tsr_sample_producer *p, const tsr_pool_opts *o) {
  if (!out) return _tsr_error(TSR_ERR_ARG, "tsr_loader_open_pool: l is NULL");
  *out = NULL;
  tsr_loader *l = calloc(1, sizeof *l);
  if (!l) return _tsr_error(TSR_ERR_NOMEM, "loader: out of memory");
  tsr_status st = _tsr_pool_create(&l->pool, p, o);
  if (st != TSR_OK) {
    free(l);
    return st;
  }
  l->n = INT64_MAX;
  l->xs = (tsr_shape){.ndim = 3, .dims = {p->c, p->h, p->w}};
  l->ys = (tsr_shape){.ndim = 3, .dims = {p->tc, p->th, p->tw}};
  tsr_pool_opts d;
  tsr_pool_opts_default(&d);
  int nin = o ? o->stats_samples : d.stats_samples, nt = o ? o->target_stats_samples : d.target_stats_samples;
  int c = p->c, tc = p->tc;
  if (nin > 0) l->mean = calloc(c, sizeof(double)), l->std = calloc(c, sizeof(double));
  if (nt > 0) l->tmean = calloc(tc, sizeof(double)), l->tstd = calloc(tc, sizeof(double));
  if ((nin > 0 && (!l->mean || !l->std)) || (nt > 0 && (!l->tmean || !l->tstd)))
    st = _tsr_error(TSR_ERR_NOMEM, "loader: out of memory");
  else if (nin > 0 || nt > 0)
    st = _tsr_pool_stats(l->pool, c, (size_t)p->h * p->w, tc, (size_t)p->th * p->tw, nin, nt, l->mean, l->std,
                         l->tmean, l->tstd);
  if (st != TSR_OK) {
    _tsr_pool_destroy(l->pool, 0); /* the caller keeps its producer when the open fails */
    l->pool = NULL;
    tsr_loader_close(l);
    return st;
  }
  *out = l;
  return TSR_OK;
}

void tsr_loader_pool_counts(const tsr_loader *l, int64_t *produced, int *filled, const char **error) {
  if (l && l->pool) _tsr_pool_counts(l->pool, produced, filled, error);
  else {
    if (produced) *produced = 0;
    if (filled) *filled = 0;
    if (error) *error = "";
  }
}

/* ---- the trainer's load tasks (loader_tasks.h) ---- */

int _tsr_loader_stream_slots(const tsr_loader *l) { return l->pool ? _tsr_pool_slots(l->pool) : 0; }

tsr_status _tsr_loader_task_deps(tsr_loader *l, int64_t index, starpu_data_handle_t h[2]) {
  if (index < 0 || index >= l->n)
    return _tsr_error(TSR_ERR_ARG, "sample %lld is out of range (the data hold %lld)", (long long)index, (long long)l->n);
  return l->pool ? _tsr_pool_acquire(l->pool, index, h) : TSR_OK;
}

tsr_status _tsr_loader_task_submitted(tsr_loader *l, int64_t index) {
  return l->pool ? _tsr_pool_read_submitted(l->pool, index) : TSR_OK;
}

tsr_status _tsr_loader_task_read(tsr_loader *l, int64_t index, const float *bx, const float *by, float *x, float *y) {
  if (!l->pool) return tsr_loader_read(l, index, x, y);
  TSR_TRY(_tsr_pool_check(l->pool, index));
  size_t xe = (size_t)tsr_shape_numel(&l->xs), ye = (size_t)tsr_shape_numel(&l->ys);
  memcpy(x, bx, xe * sizeof(float));
  memcpy(y, by, ye * sizeof(float));
  standardize(l, x, per_channel(&l->xs));
  return TSR_OK;
}

/* ---- epoch order ---- */

/* An epoch's samples are split along the batch over the ranks: rank r of P takes r, r + P, ... */
int64_t tsr_loader_shard_size(int64_t n, int rank, int size) {
  struct _tsr_dist d;
  if (n <= 0 || _tsr_dist_batch(&d, NULL, rank, size) != TSR_OK) return 0;
  return _tsr_dist_batch_count(&d, n);
}

tsr_status tsr_loader_epoch_indices(int64_t n, uint64_t seed, int epoch, int rank, int size, int64_t *out) {
  struct _tsr_dist d;
  if (n <= 0 || !out || _tsr_dist_batch(&d, NULL, rank, size) != TSR_OK)
    return _tsr_error(TSR_ERR_ARG, "tsr_loader_epoch_indices: n %lld, rank %d of %d", (long long)n, rank, size);
  TSR_TRY(check_order_size("tsr_loader_epoch_indices", n));
  int64_t *perm = malloc(sizeof *perm * n);
  if (!perm) return _tsr_error(TSR_ERR_NOMEM, "loader: out of memory for %lld indices", (long long)n);
  /* Fisher-Yates with a stream depending only on (seed, epoch) (the same stream tessera-train used) */
  struct _tsr_rng r = _tsr_rng_stream(seed, 0x5DEECE66Dull + (uint64_t)epoch);
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(_tsr_rng_next(&r) % (uint64_t)(i + 1));
    int64_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  for (int64_t k = 0, m = _tsr_dist_batch_count(&d, n); k < m; k++) out[k] = perm[_tsr_dist_batch_index(&d, k)];
  free(perm);
  return TSR_OK;
}

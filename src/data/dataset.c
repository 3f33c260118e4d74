/* HDF5 datasets: `inputs` [N,C,H,W] or [N,C,D,H,W] and `targets` of either rank (or `cbed` and
 * `potential`, or any names given) of any float type (float16 included), read one sample, or one
 * box of a sample's spatial axes, at a time as float32 through a hyperslab. The serial HDF5
 * library is not thread-safe and samples are read inside StarPU tasks on several workers, so every
 * HDF5 call after the open checks goes through one process-wide lock (shared with the generator's
 * writer, see _tsr_hdf5_lock). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hdf5.h>

#include "data/box.h"
#include "runtime/hdf5_lock.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include <tessera/data.h>

enum { MAXD = 5 }; /* dataset dimensions: the sample index and up to 4 per sample */

struct part {
  char name[256];   /* "inputs", "targets", "cbed", "potential" or the caller's */
  hid_t dset, fspace;
  int nd;            /* 4 [N, C, H, W] or 5 [N, C, D, H, W] */
  hsize_t dims[MAXD]; /* dims[0] is N */
  hsize_t chunk[MAXD]; /* chunk dimensions; chunk[0] == 0: not chunked */
  hsize_t chunk_bytes;
  int nfilters;      /* filters in the chunks' pipeline: their stored size then varies */
  int scanned;       /* every record of the chunk index was checked at open */
};

struct tsr_dataset {
  char *path;
  hsize_t bytes;     /* file size: no stored data may lie past it */
  hid_t file;
  int64_t n;
  struct part in, tg;
};

static pthread_mutex_t hdf5_mutex = PTHREAD_MUTEX_INITIALIZER;
static H5E_auto2_t saved_func;
static void *saved_data;

/* Takes the HDF5 lock and silences HDF5's own error printing: callers report errors themselves. */
void _tsr_hdf5_lock(void) {
  pthread_mutex_lock(&hdf5_mutex);
  H5Eget_auto2(H5E_DEFAULT, &saved_func, &saved_data);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void _tsr_hdf5_unlock(void) {
  H5Eset_auto2(H5E_DEFAULT, saved_func, saved_data);
  pthread_mutex_unlock(&hdf5_mutex);
}

static herr_t first_desc(unsigned n, const H5E_error2_t *e, void *out) {
  if (n == 0 && e->desc) snprintf(out, 256, "%s", e->desc);
  return 0;
}

/* The innermost message of HDF5's error stack ("truncated file: eof = ..."), or "" (lock held). */
const char *_tsr_hdf5_reason(char buf[256]) {
  buf[0] = '\0';
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_desc, buf);
  return buf;
}

static const char *class_name(H5T_class_t c) {
  switch (c) {
  case H5T_INTEGER: return "integer";
  case H5T_FLOAT: return "float";
  case H5T_STRING: return "string";
  case H5T_COMPOUND: return "compound";
  case H5T_ENUM: return "enum";
  case H5T_ARRAY: return "array";
  default: return "non-numeric";
  }
}

static herr_t list_name(hid_t g, const char *name, const H5L_info_t *info, void *out) {
  char *buf = out;
  size_t len = strlen(buf);
  if (len + strlen(name) + 5 < 200) {
    if (len) memcpy(buf + len, ", ", 2), len += 2;
    buf[len] = '\'';
    memcpy(buf + len + 1, name, strlen(name));
    len += strlen(name) + 1;
    buf[len] = '\'', buf[len + 1] = '\0';
  }
  return 0;
}

/* "[a, b, c, d]" of an HDF5 coordinate, in buf (96 bytes). */
static const char *coords(int nd, const hsize_t *o, char *buf) {
  int at = snprintf(buf, 96, "[");
  for (int i = 0; i < nd && at < 96; i++) at += snprintf(buf + at, 96 - at, "%s%llu", i ? ", " : "", (unsigned long long)o[i]);
  if (at < 96) snprintf(buf + at, 96 - at, "]");
  return buf;
}

/* ---- storage checks. HDF5 trusts the type, layout and chunk index it reads from the file, and
 * corrupted ones (found by fuzzing: chunk records with sizes and addresses that mean nothing) make
 * H5Dread copy past its own buffers. What its API shows is checked against the file size and the
 * data space before anything is read. ---- */

/* Floats laid out as IEEE ones are (mantissa from bit 0, then exponent, then sign in the top bit):
 * float16, bfloat16, float32, float64 pass; HDF5 converts other layouts unreliably. */
static tsr_status check_float_type(const tsr_dataset *d, const struct part *p, hid_t type, size_t *size) {
  size_t sz = H5Tget_size(type), spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  int ok = (sz == 2 || sz == 4 || sz == 8) && H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) >= 0 &&
           H5Tget_offset(type) == 0 && H5Tget_precision(type) == 8 * sz && mpos == 0 && epos == msize &&
           spos == epos + esize && spos == 8 * sz - 1 && esize >= 2 && esize <= 15 &&
           H5Tget_ebias(type) == ((size_t)1 << (esize - 1)) - 1;
  if (!ok)
    return _tsr_error(TSR_ERR_FORMAT,
                      "%s: dataset '%s' has a %zu-byte float type with an unusual layout (sign bit %zu, %zu exponent "
                      "bits at %zu, %zu mantissa bits at %zu); expected float16, bfloat16, float32 or float64",
                      d->path, p->name, sz, spos, esize, epos, msize, mpos);
  *size = sz;
  return TSR_OK;
}

static const char *layout_name(H5D_layout_t l) {
  switch (l) {
  case H5D_COMPACT: return "compact";
  case H5D_CONTIGUOUS: return "contiguous";
  case H5D_CHUNKED: return "chunked";
  case H5D_VIRTUAL: return "virtual";
  default: return "unknown";
  }
}

enum { FULL_SCAN_CHUNKS = 1024 }; /* HDF5 1.10 finds the i-th chunk record in O(i): scan small indexes only */

static int cmp_hsize(const void *a, const void *b) {
  hsize_t x = *(const hsize_t *)a, y = *(const hsize_t *)b;
  return (x > y) - (x < y);
}

/* The chunk index as a whole: as many records as the data space has room for, unfiltered ones
 * adding up to whole chunks, and (small indexes) each record inside the file, of a chunk's size,
 * at a chunk's offset, no chunk twice. A fuzzed file whose records were wrong only in these ways
 * (sizes 0 at address 0 beside a valid one) made H5Dread copy past a 0-byte buffer, although
 * H5Dget_chunk_info_by_coord found the valid record for the sample read. */
static tsr_status check_chunk_index(const tsr_dataset *d, struct part *p, hsize_t stored) {
  const hsize_t *dims = p->dims;
  hsize_t room = 1, n = 0;
  for (int i = 0; i < p->nd; i++) room *= (dims[i] + p->chunk[i] - 1) / p->chunk[i];
  char why[256];
  if (H5Dget_num_chunks(p->dset, p->fspace, &n) < 0)
    return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s': cannot read its chunk index (%s)", d->path, p->name,
                      _tsr_hdf5_reason(why));
  if (n > room)
    return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s': its chunk index lists %llu chunks where %llu fit", d->path,
                      p->name, (unsigned long long)n, (unsigned long long)room);
  if (p->nfilters == 0 && stored != n * p->chunk_bytes)
    return _tsr_error(TSR_ERR_FORMAT,
                      "%s: dataset '%s': its chunk index lists %llu unfiltered chunks holding %llu bytes, not %llu "
                      "bytes each",
                      d->path, p->name, (unsigned long long)n, (unsigned long long)stored,
                      (unsigned long long)p->chunk_bytes);
  hsize_t seen[FULL_SCAN_CHUNKS]; /* linear chunk numbers: no chunk may be listed twice */
  for (hsize_t k = 0; n <= FULL_SCAN_CHUNKS && k < n; k++) {
    hsize_t o[MAXD] = {0}, size = 0, linear = 0;
    unsigned mask = 0;
    haddr_t at = HADDR_UNDEF;
    int ok = H5Dget_chunk_info(p->dset, p->fspace, k, o, &mask, &at, &size) >= 0 && at != HADDR_UNDEF && at > 0 &&
             at < d->bytes && size > 0 && size <= d->bytes - at && (p->nfilters > 0 || size == p->chunk_bytes);
    for (int i = 0; ok && i < p->nd; i++) {
      ok = o[i] % p->chunk[i] == 0 && o[i] < dims[i];
      linear = linear * ((dims[i] + p->chunk[i] - 1) / p->chunk[i]) + o[i] / p->chunk[i];
    }
    if (!ok)
      return _tsr_error(TSR_ERR_FORMAT,
                        "%s: dataset '%s': chunk record %llu of the index is corrupt (%llu bytes at byte %llu, "
                        "offset %s)",
                        d->path, p->name, (unsigned long long)k, (unsigned long long)size, (unsigned long long)at,
                        coords(p->nd, o, (char[96]){0}));
    seen[k] = linear;
  }
  if (n <= FULL_SCAN_CHUNKS) {
    qsort(seen, n, sizeof *seen, cmp_hsize);
    for (hsize_t k = 1; k < n; k++)
      if (seen[k] == seen[k - 1])
        return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s': its chunk index lists chunk %llu twice", d->path, p->name,
                          (unsigned long long)seen[k]);
  }
  p->scanned = n <= FULL_SCAN_CHUNKS;
  return TSR_OK;
}

/* The layout's storage against the data's size (`bytes`) and the file's; notes chunking in p. */
static tsr_status check_layout(const tsr_dataset *d, struct part *p, hid_t dcpl, hsize_t bytes, size_t tsize) {
  H5D_layout_t layout = H5Pget_layout(dcpl);
  hsize_t stored = H5Dget_storage_size(p->dset);
  if (layout == H5D_COMPACT) {
    if (stored != bytes)
      return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' stores %llu bytes of compact data for %llu bytes of values",
                        d->path, p->name, (unsigned long long)stored, (unsigned long long)bytes);
    return TSR_OK;
  }
  if (layout == H5D_CONTIGUOUS) {
    if (H5Pget_external_count(dcpl) != 0)
      return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' keeps its values in external files (not supported)",
                        d->path, p->name);
    haddr_t at = H5Dget_offset(p->dset);
    if (stored != 0 && stored != bytes)
      return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' stores %llu bytes for %llu bytes of values", d->path,
                        p->name, (unsigned long long)stored, (unsigned long long)bytes);
    if (stored != 0 && (at == HADDR_UNDEF || at > d->bytes || stored > d->bytes - at))
      return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s': %llu bytes at byte %llu reach past the end of the file (%llu bytes)",
                        d->path, p->name, (unsigned long long)stored, (unsigned long long)at,
                        (unsigned long long)d->bytes);
    return TSR_OK;
  }
  if (layout != H5D_CHUNKED)
    return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' has %s layout; expected compact, contiguous or chunked",
                      d->path, p->name, layout_name(layout));
  if (H5Pget_chunk(dcpl, p->nd, p->chunk) != p->nd)
    return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s': chunks without %d dimensions", d->path, p->name, p->nd);
  p->chunk_bytes = tsize;
  for (int i = 0; i < p->nd; i++) {
    if (p->chunk[i] == 0 || p->chunk[i] > (1u << 30))
      return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s': chunk dimension %d is %llu", d->path, p->name, i,
                        (unsigned long long)p->chunk[i]);
    p->chunk_bytes *= p->chunk[i];
    if (p->chunk_bytes > UINT32_MAX) /* HDF5's own limit */
      return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s': chunks of more than 4 GiB", d->path, p->name);
  }
  if (stored > d->bytes)
    return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s': its chunk index lists %llu bytes in all, past the end of the "
                      "file (%llu bytes)", d->path, p->name, (unsigned long long)stored, (unsigned long long)d->bytes);
  p->nfilters = H5Pget_nfilters(dcpl);
  for (int i = 0; i < p->nfilters; i++) {
    unsigned flags, conf;
    size_t nv = 0;
    char fname[64] = "";
    H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nv, NULL, sizeof fname, fname, &conf);
    if (id < 0 || H5Zfilter_avail(id) <= 0)
      return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' needs HDF5 filter %d ('%s'), which is not available",
                        d->path, p->name, (int)id, fname);
  }
  return check_chunk_index(d, p, stored);
}

/* Every written chunk a sample touches must lie inside the file and, unless a filter changed it,
 * hold exactly one chunk's bytes (H5Dread copies a chunk's bytes trusting that). Indexes too
 * large to scan at open only. Lock held. */
static tsr_status check_chunks(const tsr_dataset *d, const struct part *p, int64_t index) {
  if (!p->chunk[0] || p->scanned) return TSR_OK;
  const hsize_t *cd = p->chunk;
  unsigned all = p->nfilters >= 32 ? ~0u : (1u << p->nfilters) - 1;
  hsize_t o[MAXD] = {(hsize_t)index / cd[0] * cd[0]};
  for (;;) { /* every chunk offset of the sample, the last axis fastest */
    unsigned mask = 0;
    haddr_t at = HADDR_UNDEF;
    hsize_t size = 0;
    char why[256], where[96];
    if (H5Dget_chunk_info_by_coord(p->dset, o, &mask, &at, &size) < 0)
      return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s': cannot look up the chunk of sample %lld (%s)", d->path,
                        p->name, (long long)index, _tsr_hdf5_reason(why));
    if (at != HADDR_UNDEF && (at > d->bytes || size > d->bytes - at)) /* HADDR_UNDEF: never written, fill value */
      return _tsr_error(TSR_ERR_FORMAT,
                        "%s: dataset '%s': the chunk at %s (%llu bytes at byte %llu) lies past the end of the file "
                        "(%llu bytes)",
                        d->path, p->name, coords(p->nd, o, where), (unsigned long long)size, (unsigned long long)at,
                        (unsigned long long)d->bytes);
    if (at != HADDR_UNDEF && (p->nfilters == 0 || (mask & all) == all) && size != p->chunk_bytes)
      return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s': the unfiltered chunk at %s has stored size %llu, expected %llu",
                        d->path, p->name, coords(p->nd, o, where), (unsigned long long)size,
                        (unsigned long long)p->chunk_bytes);
    int i = p->nd - 1;
    while (i >= 1 && (o[i] += cd[i]) >= p->dims[i]) o[i--] = 0;
    if (i < 1) return TSR_OK;
  }
}

/* Opens one of the two datasets and checks it is 4-D or 5-D float; *n gets its first dimension. */
static tsr_status open_part(tsr_dataset *d, struct part *p, const char *name, int64_t *n) {
  snprintf(p->name, sizeof p->name, "%s", name);
  htri_t ex = H5Lexists(d->file, name, H5P_DEFAULT);
  if (ex <= 0) {
    char names[200] = "";
    H5Literate(d->file, H5_INDEX_NAME, H5_ITER_INC, NULL, list_name, names);
    return _tsr_error(TSR_ERR_FORMAT,
                      "%s: dataset '%s' not found (the file holds %s; expected 'inputs' and 'targets', or 'cbed' "
                      "and 'potential', or the names given)",
                      d->path, name, *names ? names : "nothing");
  }
  p->dset = H5Dopen2(d->file, name, H5P_DEFAULT);
  if (p->dset < 0) return _tsr_error(TSR_ERR_FORMAT, "%s: '%s' is not a dataset", d->path, name);
  hid_t type = H5Dget_type(p->dset);
  H5T_class_t cls = type < 0 ? H5T_NO_CLASS : H5Tget_class(type);
  size_t tsize = 0;
  tsr_status s = cls == H5T_FLOAT ? check_float_type(d, p, type, &tsize) : TSR_OK;
  if (type >= 0) H5Tclose(type);
  if (cls != H5T_FLOAT)
    return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' has %s values, expected float", d->path, name,
                      class_name(cls));
  TSR_TRY(s);
  p->fspace = H5Dget_space(p->dset);
  int nd = p->fspace < 0 ? -1 : H5Sget_simple_extent_ndims(p->fspace);
  if (nd != 4 && nd != 5)
    return _tsr_error(TSR_ERR_FORMAT,
                      "%s: dataset '%s' has %d dimensions, expected 4 [N, C, H, W] or 5 [N, C, D, H, W]", d->path,
                      name, nd);
  p->nd = nd;
  hsize_t *dims = p->dims;
  H5Sget_simple_extent_dims(p->fspace, dims, NULL);
  for (int i = 1; i < nd; i++)
    if (dims[i] == 0 || dims[i] > (1u << 30))
      return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' has dimension %d of size %llu", d->path, name, i,
                        (unsigned long long)dims[i]);
  *n = (int64_t)dims[0];
  hsize_t bytes = tsize;
  for (int i = 0; i < nd; i++)
    if (__builtin_mul_overflow(bytes, dims[i], &bytes) || bytes > ((hsize_t)1 << 62))
      return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' of %llu samples would hold more than 2^62 bytes", d->path,
                        name, (unsigned long long)dims[0]);
  /* a reader holds at least one sample as float32: a declared shape may ask for more than exists */
  char what[512], shape[96];
  snprintf(what, sizeof what, "%s: dataset '%s' of shape %s: one sample as float32", d->path, name,
           coords(nd, dims, shape));
  uint64_t sample = sizeof(float);
  for (int i = 1; i < nd; i++) sample = _tsr_mul_sat(sample, dims[i]);
  TSR_TRY(_tsr_memory_check(sample, what, NULL));
  hid_t dcpl = H5Dget_create_plist(p->dset);
  if (dcpl < 0) return _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s': cannot read its storage layout", d->path, name);
  s = check_layout(d, p, dcpl, bytes, tsize);
  H5Pclose(dcpl);
  return s;
}

static void close_part(struct part *p) {
  if (p->fspace > 0) H5Sclose(p->fspace);
  if (p->dset > 0) H5Dclose(p->dset);
}

static void dataset_free(tsr_dataset *d) {
  _tsr_hdf5_lock();
  close_part(&d->in);
  close_part(&d->tg);
  if (d->file > 0) H5Fclose(d->file);
  _tsr_hdf5_unlock();
  free(d->path);
  free(d);
}

/* Opens the file after checking it exists and is HDF5, so each failure gets its own message. */
static tsr_status open_file(tsr_dataset *d) {
  struct stat st;
  if (stat(d->path, &st) != 0) return _tsr_error(TSR_ERR_IO, "%s: cannot open: %s", d->path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return _tsr_error(TSR_ERR_IO, "%s: not a regular file", d->path);
  d->bytes = (hsize_t)st.st_size;
  htri_t is = H5Fis_hdf5(d->path);
  if (is == 0) return _tsr_error(TSR_ERR_FORMAT, "%s: not an HDF5 file", d->path);
  char why[256];
  if (is < 0)
    return _tsr_error(TSR_ERR_IO, "%s: cannot read as HDF5 (%s)", d->path, _tsr_hdf5_reason(why));
  d->file = H5Fopen(d->path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (d->file < 0)
    return _tsr_error(TSR_ERR_FORMAT, "%s: corrupt or truncated HDF5 file (%s)", d->path, _tsr_hdf5_reason(why));
  return TSR_OK;
}

/* `name` if given, else the first of the two defaults that exists (else the first, for the message). */
static const char *pick(hid_t file, const char *name, const char *a, const char *b) {
  if (name) return name;
  return H5Lexists(file, a, H5P_DEFAULT) > 0 || H5Lexists(file, b, H5P_DEFAULT) <= 0 ? a : b;
}

tsr_status tsr_dataset_open(tsr_dataset **out, const char *path) { return tsr_dataset_open_names(out, path, NULL, NULL); }

tsr_status tsr_dataset_open_names(tsr_dataset **out, const char *path, const char *inputs, const char *targets) {
  if (!out || !path) return _tsr_error(TSR_ERR_ARG, "tsr_dataset_open: %s is NULL", out ? "path" : "d");
  *out = NULL;
  tsr_dataset *d = calloc(1, sizeof *d);
  if (!d || !(d->path = strdup(path))) {
    free(d);
    return _tsr_error(TSR_ERR_NOMEM, "tsr_dataset_open: out of memory");
  }
  d->file = d->in.dset = d->in.fspace = d->tg.dset = d->tg.fspace = -1;
  _tsr_hdf5_lock();
  int64_t nin = 0, ntg = 0;
  tsr_status s = open_file(d);
  if (s == TSR_OK) s = open_part(d, &d->in, pick(d->file, inputs, "inputs", "cbed"), &nin);
  if (s == TSR_OK) s = open_part(d, &d->tg, pick(d->file, targets, "targets", "potential"), &ntg);
  _tsr_hdf5_unlock();
  if (s == TSR_OK && nin != ntg)
    s = _tsr_error(TSR_ERR_FORMAT, "%s: dataset '%s' has %lld samples but '%s' has %lld", path, d->in.name,
                   (long long)nin, d->tg.name, (long long)ntg);
  if (s == TSR_OK && nin == 0)
    s = _tsr_error(TSR_ERR_FORMAT, "%s: datasets '%s' and '%s' are empty", path, d->in.name, d->tg.name);
  if (s != TSR_OK) {
    dataset_free(d);
    return s;
  }
  d->n = nin;
  *out = d;
  return TSR_OK;
}

void tsr_dataset_close(tsr_dataset *d) {
  if (d) dataset_free(d);
}

int64_t tsr_dataset_size(const tsr_dataset *d) { return d->n; }

/* Per-sample shape [C, H, W] or [C, D, H, W]; the three-value form folds D into H. */
static void part_dims(const struct part *p, tsr_shape *s) {
  s->ndim = p->nd - 1;
  for (int i = 1; i < p->nd; i++) s->dims[i - 1] = (int64_t)p->dims[i];
}

static void part_chw(const struct part *p, int *c, int *h, int *w) {
  *c = (int)p->dims[1];
  *h = (int)(p->nd == 5 ? p->dims[2] * p->dims[3] : p->dims[2]);
  *w = (int)p->dims[p->nd - 1];
}

void tsr_dataset_input_shape(const tsr_dataset *d, int *c, int *h, int *w) { part_chw(&d->in, c, h, w); }
void tsr_dataset_target_shape(const tsr_dataset *d, int *c, int *h, int *w) { part_chw(&d->tg, c, h, w); }
void tsr_dataset_input_dims(const tsr_dataset *d, tsr_shape *s) { part_dims(&d->in, s); }
void tsr_dataset_target_dims(const tsr_dataset *d, tsr_shape *s) { part_dims(&d->tg, s); }

/* Sample `index`, or the box [start, start + extent) of its spatial axes (start NULL: all of it),
 * into out as [C, extent...]. */
static tsr_status read_part(tsr_dataset *d, struct part *p, int64_t index, const int64_t *box_start,
                            const int64_t *box_extent, float *out) {
  hsize_t start[MAXD] = {(hsize_t)index}, count[MAXD] = {1, p->dims[1]};
  hsize_t numel = p->dims[1];
  for (int i = 2; i < p->nd; i++) {
    start[i] = box_start ? (hsize_t)box_start[i - 2] : 0;
    count[i] = box_start ? (hsize_t)box_extent[i - 2] : p->dims[i];
    numel *= count[i];
  }
  char why[256] = "";
  _tsr_hdf5_lock();
  /* memory space of the selection's own shape: HDF5 then maps chunks without visiting each element */
  hid_t mspace = H5Screate_simple(p->nd, count, NULL);
  tsr_status s = check_chunks(d, p, index);
  herr_t e = s != TSR_OK || mspace < 0 ? -1 : H5Sselect_hyperslab(p->fspace, H5S_SELECT_SET, start, NULL, count, NULL);
  if (e >= 0) e = H5Dread(p->dset, H5T_NATIVE_FLOAT, mspace, p->fspace, H5P_DEFAULT, out);
  if (e < 0) _tsr_hdf5_reason(why);
  if (mspace >= 0) H5Sclose(mspace);
  _tsr_hdf5_unlock();
  if (s != TSR_OK) return s;
  if (e < 0)
    return _tsr_error(TSR_ERR_IO, "%s: dataset '%s': cannot read sample %lld (%s)", d->path, p->name,
                      (long long)index, why);
  for (hsize_t i = 0; i < numel; i++)
    if (!isfinite(out[i]))
      return _tsr_error(TSR_ERR_NUMERIC, "%s: dataset '%s' sample %lld holds %s at element %llu%s", d->path,
                        p->name, (long long)index, isnan(out[i]) ? "NaN" : "Inf", (unsigned long long)i,
                        box_start ? " of the box read" : "");
  return TSR_OK;
}

static tsr_status check_index(const tsr_dataset *d, int64_t index) {
  if (!d) return _tsr_error(TSR_ERR_ARG, "tsr_dataset_read: dataset is NULL");
  if (index < 0 || index >= d->n)
    return _tsr_error(TSR_ERR_ARG, "%s: sample %lld is out of range (the file holds %lld)", d->path,
                      (long long)index, (long long)d->n);
  return TSR_OK;
}

/* x or y may be NULL to read only the other one. */
tsr_status tsr_dataset_read(tsr_dataset *d, int64_t index, float *x, float *y) {
  TSR_TRY(check_index(d, index));
  if (x) TSR_TRY(read_part(d, &d->in, index, NULL, NULL, x));
  if (y) TSR_TRY(read_part(d, &d->tg, index, NULL, NULL, y));
  return TSR_OK;
}

tsr_status tsr_dataset_read_box(tsr_dataset *d, int64_t index, const int64_t *start, const int64_t *extent, float *x,
                                float *y) {
  TSR_TRY(check_index(d, index));
  tsr_shape xs, ys;
  part_dims(&d->in, &xs);
  part_dims(&d->tg, &ys);
  TSR_TRY(_tsr_box_check(d->path, &xs, start, extent));
  int same = xs.ndim == ys.ndim && !memcmp(xs.dims + 1, ys.dims + 1, sizeof(int64_t) * (xs.ndim - 1));
  if (x) TSR_TRY(read_part(d, &d->in, index, start, extent, x));
  if (y) TSR_TRY(read_part(d, &d->tg, index, same ? start : NULL, extent, y));
  return TSR_OK;
}

int _tsr_h5_attr(hid_t obj, const char *name, hid_t type, const void *value) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
  int ok = a >= 0 && H5Awrite(a, type, value) >= 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  return ok;
}

int _tsr_h5_attr_str(hid_t obj, const char *name, const char *value) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, strlen(value) + 1);
  int ok = _tsr_h5_attr(obj, name, t, value);
  H5Tclose(t);
  return ok;
}

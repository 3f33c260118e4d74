/* NumPy .npy files: writes version 1.0 ('<f4', C order) and reads versions 1.0 to 3.0 with dtype
 * '<f4' or '<f8' (converted to float). The header is a Python dict literal; only the three keys
 * numpy writes are accepted. Errors name the file and what is wrong with it. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <tessera/params.h>

#include "runtime/error.h"
#include "runtime/files.h"
#include "runtime/memory.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c reads and writes little-endian data with memcpy: port it before using a big-endian host"
#endif

static const char magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

tsr_status tsr_npy_write(const char *path, const tsr_shape *shape, const float *data) {
  if (!path || !shape || !data)
    return _tsr_error(TSR_ERR_ARG, "tsr_npy_write: path, shape and data are required");
  if (shape->ndim < 0 || shape->ndim > TSR_MAX_DIMS)
    return _tsr_error(TSR_ERR_ARG, "tsr_npy_write: %s: ndim %d is outside [0, %d]", path, shape->ndim, TSR_MAX_DIMS);
  char dict[256];
  int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
  int64_t numel = 1;
  for (int i = 0; i < shape->ndim; i++) {
    if (shape->dims[i] < 0) return _tsr_error(TSR_ERR_ARG, "tsr_npy_write: %s: dimension %d is negative", path, i);
    numel *= shape->dims[i];
    n += snprintf(dict + n, sizeof dict - n, "%s%lld", i ? ", " : "", (long long)shape->dims[i]);
  }
  n += snprintf(dict + n, sizeof dict - n, "%s), }", shape->ndim == 1 ? "," : "");
  /* numpy pads the header with spaces and a newline so the data starts 64-byte aligned. */
  int total = (10 + n + 1 + 63) / 64 * 64;
  int hlen = total - 10;
  char head[320];
  memcpy(head, magic, 6);
  head[6] = 1, head[7] = 0;
  head[8] = (char)(hlen & 0xff), head[9] = (char)(hlen >> 8);
  memcpy(head + 10, dict, (size_t)n);
  memset(head + 10 + n, ' ', (size_t)(hlen - n - 1));
  head[total - 1] = '\n';

  /* Written next to the target and renamed, so a reader never sees half a file. */
  char *tmp = _tsr_tmp_path(path);
  if (!tmp) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    tsr_status s = _tsr_error(TSR_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    free(tmp);
    return s;
  }
  int ok = fwrite(head, 1, (size_t)total, f) == (size_t)total &&
           fwrite(data, sizeof *data, (size_t)numel, f) == (size_t)numel;
  int err = errno;
  if (fclose(f) != 0 && ok) ok = 0, err = errno;
  if (ok && rename(tmp, path) != 0) ok = 0, err = errno;
  tsr_status s = TSR_OK;
  if (!ok) {
    remove(tmp);
    s = _tsr_error(TSR_ERR_IO, "%s: cannot write: %s", path, strerror(err));
  }
  free(tmp);
  return s;
}

/* A tiny reader for the header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } */
typedef struct hparse {
  const char *p, *end;
} hparse;

static void skip_ws(hparse *h) {
  while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r')) h->p++;
}

static int eat(hparse *h, char ch) {
  skip_ws(h);
  if (h->p < h->end && *h->p == ch) return h->p++, 1;
  return 0;
}

/* A quoted string into buf; 0 on failure. */
static int get_str(hparse *h, char *buf, size_t len) {
  skip_ws(h);
  if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return 0;
  char q = *h->p++;
  size_t n = 0;
  while (h->p < h->end && *h->p != q) {
    if (n + 1 >= len) return 0;
    buf[n++] = *h->p++;
  }
  if (h->p >= h->end) return 0;
  h->p++;
  buf[n] = '\0';
  return 1;
}

static int get_word(hparse *h, const char *w) {
  skip_ws(h);
  size_t n = strlen(w);
  if ((size_t)(h->end - h->p) >= n && strncmp(h->p, w, n) == 0) return h->p += n, 1;
  return 0;
}

/* A tuple of non-negative ints: (), (5,), (2, 3). Returns ndim, or -1 on a syntax error, or
 * TSR_MAX_DIMS + 1 when there are too many dimensions. */
static int get_shape(hparse *h, int64_t *dims) {
  if (!eat(h, '(')) return -1;
  int nd = 0;
  for (;;) {
    if (eat(h, ')')) return nd;
    skip_ws(h);
    if (h->p >= h->end || *h->p < '0' || *h->p > '9') return -1;
    int64_t v = 0;
    while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
      if (v > (INT64_MAX - 9) / 10) return -1;
      v = v * 10 + (*h->p++ - '0');
    }
    if (nd == TSR_MAX_DIMS) return TSR_MAX_DIMS + 1;
    dims[nd++] = v;
    if (!eat(h, ',')) return eat(h, ')') ? nd : -1;
  }
}

/* Parses the header into dtype size (4 or 8) and shape. */
static tsr_status parse_header(const char *path, const char *text, size_t len, int *itemsize, tsr_shape *shape) {
  hparse h = {text, text + len};
  char key[32], descr[32] = "";
  int have = 0, fortran = 0;
  if (!eat(&h, '{')) return _tsr_error(TSR_ERR_FORMAT, "%s: header is not a dict: %.60s", path, text);
  while (!eat(&h, '}')) {
    if (!get_str(&h, key, sizeof key) || !eat(&h, ':'))
      return _tsr_error(TSR_ERR_FORMAT, "%s: malformed header: %.80s", path, text);
    if (strcmp(key, "descr") == 0) {
      if (!get_str(&h, descr, sizeof descr))
        return _tsr_error(TSR_ERR_FORMAT, "%s: header field 'descr' is not a simple dtype string", path);
      have |= 1;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (get_word(&h, "True"))
        fortran = 1;
      else if (!get_word(&h, "False"))
        return _tsr_error(TSR_ERR_FORMAT, "%s: header field 'fortran_order' is neither True nor False", path);
      have |= 2;
    } else if (strcmp(key, "shape") == 0) {
      int nd = get_shape(&h, shape->dims);
      if (nd > TSR_MAX_DIMS)
        return _tsr_error(TSR_ERR_FORMAT, "%s: more than %d dimensions are not supported", path, TSR_MAX_DIMS);
      if (nd < 0) return _tsr_error(TSR_ERR_FORMAT, "%s: header field 'shape' is not a tuple of integers", path);
      shape->ndim = nd;
      have |= 4;
    } else {
      return _tsr_error(TSR_ERR_FORMAT, "%s: unexpected header field '%s'", path, key);
    }
    if (!eat(&h, ',')) {
      if (eat(&h, '}')) break;
      return _tsr_error(TSR_ERR_FORMAT, "%s: malformed header: %.80s", path, text);
    }
  }
  if (have != 7)
    return _tsr_error(TSR_ERR_FORMAT, "%s: header lacks '%s'", path,
                      !(have & 1) ? "descr" : !(have & 2) ? "fortran_order" : "shape");
  if (fortran) return _tsr_error(TSR_ERR_FORMAT, "%s: fortran_order is True; only C-order arrays are supported", path);
  if (strcmp(descr, "<f4") == 0)
    *itemsize = 4;
  else if (strcmp(descr, "<f8") == 0)
    *itemsize = 8;
  else
    return _tsr_error(TSR_ERR_FORMAT, "%s: dtype '%s' is not supported (expected '<f4' or '<f8')", path, descr);
  return TSR_OK;
}

static tsr_status read_data(FILE *f, const char *path, const tsr_shape *shape, int itemsize, float **data) {
  int64_t numel = 1;
  for (int i = 0; i < shape->ndim; i++) {
    if (shape->dims[i] && numel > INT64_MAX / 8 / shape->dims[i])
      return _tsr_error(TSR_ERR_FORMAT, "%s: shape is too large", path);
    numel *= shape->dims[i];
  }
  size_t n = (size_t)numel, bytes = n * (size_t)itemsize;
  /* a header can promise any size: compare it with the file and the memory before allocating */
  struct stat st;
  long at = ftell(f);
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && at >= 0 && st.st_size >= at &&
      (uint64_t)(st.st_size - at) < bytes)
    return _tsr_error(TSR_ERR_FORMAT, "%s: truncated: the header promises %zu data bytes, the file holds %llu", path,
                      bytes, (unsigned long long)st.st_size - (unsigned long long)at);
  char what[512];
  snprintf(what, sizeof what, "%s: %lld values as float32", path, (long long)numel);
  TSR_TRY(_tsr_memory_check((uint64_t)n * sizeof(float) + (itemsize == 4 ? 0 : bytes), what, NULL));
  float *out = malloc(n ? n * sizeof *out : 1);
  void *raw = itemsize == 4 ? (void *)out : malloc(n ? bytes : 1);
  if (!out || !raw) {
    free(out);
    if (raw != out) free(raw);
    return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory for %zu values", path, n);
  }
  size_t got = fread(raw, 1, bytes, f);
  tsr_status s = TSR_OK;
  if (got < bytes)
    s = _tsr_error(TSR_ERR_FORMAT, "%s: truncated: the header promises %zu data bytes, the file holds %zu", path, bytes,
                   got);
  else if (fgetc(f) != EOF)
    s = _tsr_error(TSR_ERR_FORMAT, "%s: the file is longer than its header says (%zu data bytes)", path, bytes);
  if (s == TSR_OK && itemsize == 8)
    for (size_t i = 0; i < n; i++) out[i] = (float)((const double *)raw)[i];
  if (raw != out) free(raw);
  if (s != TSR_OK) {
    free(out);
    return s;
  }
  *data = out;
  return TSR_OK;
}

tsr_status tsr_npy_read(const char *path, tsr_shape *shape, float **data) {
  if (!path || !shape || !data) return _tsr_error(TSR_ERR_ARG, "tsr_npy_read: path, shape and data are required");
  FILE *f = fopen(path, "rb");
  if (!f) return _tsr_error(TSR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  unsigned char pre[12];
  size_t got = fread(pre, 1, 10, f);
  tsr_status s = TSR_OK;
  size_t hlen = 0;
  if (got < 10 || memcmp(pre, magic, 6) != 0) {
    s = _tsr_error(TSR_ERR_FORMAT, "%s: not a .npy file (bad magic)", path);
  } else if (pre[6] == 1) {
    hlen = pre[8] | (size_t)pre[9] << 8;
  } else if (pre[6] == 2 || pre[6] == 3) {
    if (fread(pre + 10, 1, 2, f) < 2)
      s = _tsr_error(TSR_ERR_FORMAT, "%s: truncated header", path);
    else
      hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  } else {
    s = _tsr_error(TSR_ERR_FORMAT, "%s: unsupported .npy version %d.%d", path, pre[6], pre[7]);
  }
  if (s == TSR_OK && hlen > (1u << 20)) s = _tsr_error(TSR_ERR_FORMAT, "%s: header length %zu is implausible", path, hlen);
  char *head = s == TSR_OK ? malloc(hlen + 1) : NULL;
  if (s == TSR_OK && !head) s = _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", path);
  if (s == TSR_OK && fread(head, 1, hlen, f) < hlen) s = _tsr_error(TSR_ERR_FORMAT, "%s: truncated header", path);
  int itemsize = 0;
  tsr_shape sh;
  memset(&sh, 0, sizeof sh);
  if (s == TSR_OK) {
    head[hlen] = '\0';
    s = parse_header(path, head, hlen, &itemsize, &sh);
  }
  free(head);
  if (s == TSR_OK) s = read_data(f, path, &sh, itemsize, data);
  fclose(f);
  if (s == TSR_OK) *shape = sh;
  return s;
}

/* A checkpoint's own digest file (<path>.sum: digest and size of its bytes), checked before HDF5
 * parses the file: fuzzing found corrupted files that crash Debian's libhdf5 (in H5Dread/H5Aexists)
 * before the datasets' checksum (checkpoint.c) can be computed. Also the hash both use and fsync. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint_int.h"
#include "runtime/error.h"

/* FNV-1a over 64-bit words with an extra shift-xor so high bits reach low ones; a corruption check,
 * not a cryptographic one. */
uint64_t _tsr_ck_hash(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ w) * 0x100000001B3ull;
    h ^= h >> 31;
  }
  for (; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
  return h;
}

tsr_status _tsr_ck_fsync(const char *path, int dir) {
  int fd = open(path, dir ? O_RDONLY | O_DIRECTORY : O_RDWR);
  if (fd < 0) return _tsr_error(TSR_ERR_IO, "%s: cannot open to sync: %s", path, strerror(errno));
  int r = fsync(fd);
  int err = errno;
  close(fd);
  if (r != 0 && !(dir && err == EINVAL)) return _tsr_error(TSR_ERR_IO, "%s: fsync failed: %s", path, strerror(err));
  return TSR_OK;
}

static tsr_status file_digest(const char *path, uint64_t *h, long long *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return _tsr_error(TSR_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  static _Thread_local unsigned char buf[1 << 16];
  *h = 1469598103934665603ull, *size = 0;
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) *h = _tsr_ck_hash(*h, buf, n), *size += (long long)n;
  int bad = ferror(f);
  fclose(f);
  return bad ? _tsr_error(TSR_ERR_IO, "%s: read error", path) : TSR_OK;
}

/* Writes "<path>.sum" (digest and size of the bytes now in `file`) through a temporary and rename. */
tsr_status _tsr_ck_write_sum_of(const char *path, const char *file) {
  uint64_t h;
  long long size;
  TSR_TRY(file_digest(file, &h, &size));
  char sum[4096], tmp[4100];
  snprintf(sum, sizeof sum, "%s.sum", path);
  snprintf(tmp, sizeof tmp, "%s.tmp", sum);
  FILE *f = fopen(tmp, "w");
  if (!f) return _tsr_error(TSR_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
  int ok = fprintf(f, "tessera-checkpoint-digest 1 %016llx %lld\n", (unsigned long long)h, size) > 0;
  ok = fclose(f) == 0 && ok;
  tsr_status s = ok ? _tsr_ck_fsync(tmp, 0) : _tsr_error(TSR_ERR_IO, "%s: cannot write", tmp);
  if (s == TSR_OK && rename(tmp, sum) != 0) s = _tsr_error(TSR_ERR_IO, "%s: cannot rename: %s", tmp, strerror(errno));
  if (s != TSR_OK) remove(tmp);
  return s;
}

tsr_status _tsr_ck_write_sum(const char *path) { return _tsr_ck_write_sum_of(path, path); }

/* Compares path's bytes with path.sum. A checkpoint without one is refused: every checkpoint Tessera
 * writes has one, and HDF5 must not parse a file whose bytes nothing vouches for. */
tsr_status _tsr_ck_check_sum(const char *path) {
  char sum[4096];
  snprintf(sum, sizeof sum, "%s.sum", path);
  FILE *f = fopen(sum, "r");
  if (!f)
    return _tsr_error(TSR_ERR_FORMAT, "%s: no digest file %s (%s): Tessera writes one beside every checkpoint; "
                      "without it the file is not read, since a damaged HDF5 file can crash libhdf5",
                      path, sum, strerror(errno));
  unsigned long long want;
  long long want_size;
  int n = fscanf(f, "tessera-checkpoint-digest 1 %llx %lld", &want, &want_size);
  fclose(f);
  if (n != 2) return _tsr_error(TSR_ERR_FORMAT, "%s: unreadable digest file", sum);
  uint64_t h;
  long long size;
  TSR_TRY(file_digest(path, &h, &size));
  if (size != want_size)
    return _tsr_error(TSR_ERR_FORMAT, "%s: %lld bytes, but %lld were written (truncated or corrupted)", path, size,
                      want_size);
  if (h != want)
    return _tsr_error(TSR_ERR_FORMAT, "%s: the file's digest %016llx differs from the one written, %016llx: the file "
                      "is corrupted", path, (unsigned long long)h, want);
  return TSR_OK;
}

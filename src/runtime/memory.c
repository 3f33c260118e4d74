/* The memory limit of this process: set through the API, else TESSERA_MEMORY_LIMIT, else the smaller
 * of physical memory and the cgroup limit (a container's or a Slurm job's is often far below the
 * machine's). Read at each check (a few small files), so no state but the API's value is kept. */
#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/memory.h"

static _Atomic int64_t api_limit;

tsr_status tsr_memory_set_limit(int64_t bytes) {
  if (bytes < 0) return _tsr_error(TSR_ERR_ARG, "tsr_memory_set_limit: %lld bytes (0 = detect)", (long long)bytes);
  atomic_store(&api_limit, bytes);
  return TSR_OK;
}

const char *_tsr_bytes_str(uint64_t bytes, char buf[48]) {
  static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes == TSR_BYTES_OVERFLOW) return strcpy(buf, "more than 2^64 bytes");
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, u++;
  snprintf(buf, 48, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

/* A limit file's value: a number, or "max" (none: UINT64_MAX); UINT64_MAX also when unreadable. */
static uint64_t read_limit(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return UINT64_MAX;
  char line[64] = "";
  char *ok = fgets(line, sizeof line, f);
  fclose(f);
  if (!ok || !isdigit((unsigned char)line[0])) return UINT64_MAX;
  errno = 0;
  unsigned long long v = strtoull(line, NULL, 10);
  return errno || v == 0 ? UINT64_MAX : (uint64_t)v;
}

/* The cgroup at `dir` + `path` and each of its parents up to `dir` itself. */
static void walk_up(const char *dir, const char *path, const char *file, uint64_t *best, char *source, size_t len) {
  char p[4096];
  snprintf(p, sizeof p, "%s", path);
  for (;;) {
    size_t n = strlen(p);
    while (n > 0 && p[n - 1] == '/') p[--n] = '\0';
    char f[4096 + 512];
    snprintf(f, sizeof f, "%s%s/%s", dir, p, file);
    uint64_t v = read_limit(f);
    if (v < *best) {
      *best = v;
      snprintf(source, len, "cgroup limit %s", f);
    }
    char *slash = strrchr(p, '/');
    if (!slash) break;
    *slash = '\0';
  }
}

uint64_t _tsr_cgroup_limit(const char *proc_cgroup, const char *root, char *source, size_t len) {
  uint64_t best = UINT64_MAX;
  char dir[1024], line[4096];
  FILE *f = fopen(proc_cgroup, "r");
  while (f && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *ctl = strchr(line, ':'), *path = ctl ? strchr(ctl + 1, ':') : NULL;
    if (!path) continue;
    *path++ = '\0', ctl++;
    if (!*ctl) { /* v2: the unified hierarchy, mounted alone or beside v1 ones */
      walk_up(root, path, "memory.max", &best, source, len);
      snprintf(dir, sizeof dir, "%s/unified", root);
      walk_up(dir, path, "memory.max", &best, source, len);
      continue;
    }
    for (char *save = NULL, *c = strtok_r(ctl, ",", &save); c; c = strtok_r(NULL, ",", &save))
      if (strcmp(c, "memory") == 0) {
        snprintf(dir, sizeof dir, "%s/memory", root);
        walk_up(dir, path, "memory.limit_in_bytes", &best, source, len);
      }
  }
  if (f) fclose(f);
  return best;
}

/* "64G", "1.5T" (powers of 1024), "1000000". */
static tsr_status parse_env(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  double mul = 1;
  const char *units = "KMGT";
  const char *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
  if (u && *end) {
    for (const char *k = units; k <= u; k++) mul *= 1024;
    end++;
    if (toupper((unsigned char)*end) == 'I') end++;
    if (toupper((unsigned char)*end) == 'B') end++;
  }
  if (errno || end == s || *end || !(v * mul >= 1) || v * mul >= 0x1p63)
    return _tsr_error(TSR_ERR_ARG,
                      "TESSERA_MEMORY_LIMIT='%s': expected a positive number of bytes, optionally with "
                      "K, M, G or T (powers of 1024)",
                      s);
  *out = (uint64_t)(v * mul);
  return TSR_OK;
}

static tsr_status limit(uint64_t *bytes, char *source, size_t len) {
  int64_t api = atomic_load(&api_limit);
  if (api > 0) {
    *bytes = (uint64_t)api;
    snprintf(source, len, "tsr_memory_set_limit");
    return TSR_OK;
  }
  const char *env = _tsr_env_memory_limit();
  if (env) {
    snprintf(source, len, "TESSERA_MEMORY_LIMIT");
    return parse_env(env, bytes);
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  *bytes = pages > 0 && page > 0 ? _tsr_mul_sat((uint64_t)pages, (uint64_t)page) : UINT64_MAX;
  snprintf(source, len, "physical memory");
  uint64_t cg = _tsr_cgroup_limit("/proc/self/cgroup", "/sys/fs/cgroup", source, len);
  if (cg < *bytes)
    *bytes = cg;
  else
    snprintf(source, len, "physical memory");
  return TSR_OK;
}

tsr_status tsr_memory_limit(int64_t *bytes, char *source, size_t len) {
  if (!bytes) return _tsr_error(TSR_ERR_ARG, "tsr_memory_limit: bytes is NULL");
  char src[512];
  uint64_t b;
  TSR_TRY(limit(&b, src, sizeof src));
  *bytes = b > INT64_MAX ? INT64_MAX : (int64_t)b;
  if (source && len) snprintf(source, len, "%s", src);
  return TSR_OK;
}

tsr_status _tsr_memory_check(uint64_t bytes, const char *what, const char *detail) {
  char src[512], need[48], have[48];
  uint64_t avail;
  TSR_TRY(limit(&avail, src, sizeof src));
  if (bytes <= avail) return TSR_OK;
  if (bytes == TSR_BYTES_OVERFLOW)
    return _tsr_error(TSR_ERR_NOMEM,
                      "%s needs more than 2^64 bytes (its size overflows 64-bit arithmetic); %llu bytes "
                      "(%s) are available (%s)%s",
                      what, (unsigned long long)avail, _tsr_bytes_str(avail, have), src, detail ? detail : "");
  return _tsr_error(TSR_ERR_NOMEM, "%s needs %llu bytes (%s), more than the %llu bytes (%s) available (%s)%s", what,
                    (unsigned long long)bytes, _tsr_bytes_str(bytes, need), (unsigned long long)avail,
                    _tsr_bytes_str(avail, have), src, detail ? detail : "");
}

/* Sizes against the memory limit (include/tessera/memory.h): saturating byte arithmetic, so a size
 * that overflows 64 bits stays "too large" instead of wrapping, and the check that refuses a size
 * before anything is allocated. */
#ifndef TSR_RUNTIME_MEMORY_H
#define TSR_RUNTIME_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include <tessera/memory.h>

/* A byte count that overflowed: larger than any limit. */
#define TSR_BYTES_OVERFLOW UINT64_MAX

static inline uint64_t _tsr_mul_sat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? TSR_BYTES_OVERFLOW : r;
}
static inline uint64_t _tsr_add_sat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? TSR_BYTES_OVERFLOW : r;
}

/* "1.5 GiB"; "more than 2^64 bytes" for TSR_BYTES_OVERFLOW. */
const char *_tsr_bytes_str(uint64_t bytes, char buf[48]);
/* TSR_OK when `bytes` fit the limit. Else TSR_ERR_NOMEM with "<what> needs N bytes (1.5 GiB), more
 * than the M bytes (...) available (<source>)<detail>"; TSR_ERR_ARG for a bad TESSERA_MEMORY_LIMIT. */
tsr_status _tsr_memory_check(uint64_t bytes, const char *what, const char *detail);
/* The smallest memory limit of the cgroups listed in `proc_cgroup` (a /proc/PID/cgroup file) and their
 * parents, under the cgroup mount `root` (v2 at root and root/unified, v1 at root/memory); UINT64_MAX
 * when none is set. `source` gets the file it came from. Parameters for tests. */
uint64_t _tsr_cgroup_limit(const char *proc_cgroup, const char *root, char *source, size_t len);

#endif

/* Memory this process may use. Trainers, datasets and loaders compute the bytes a request needs
 * before allocating and refuse with TSR_ERR_NOMEM, naming the layer or the file, what exceeds it. */
#ifndef TESSERA_MEMORY_H
#define TESSERA_MEMORY_H

#include <stddef.h>
#include <stdint.h>
#include <tessera/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Process-wide: `bytes` > 0 is the limit from now on; 0 goes back to the environment's
 * TESSERA_MEMORY_LIMIT (bytes, or with a K, M, G or T suffix in powers of 1024), else to the smaller
 * of physical memory and the cgroup limit (v2 memory.max, v1 memory.limit_in_bytes, of this process's
 * cgroup and its parents). */
tsr_status tsr_memory_set_limit(int64_t bytes);
/* The limit in force; `source` (may be NULL) gets where it comes from ("physical memory",
 * "cgroup limit /sys/fs/cgroup/memory.max", ...). TSR_ERR_ARG for a malformed TESSERA_MEMORY_LIMIT. */
tsr_status tsr_memory_limit(int64_t *bytes, char *source, size_t len);

#ifdef __cplusplus
}
#endif
#endif

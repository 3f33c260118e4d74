/* Helpers shared by the CPU kernels: oneDNN engine/stream per thread, a per-thread cache of
 * objects (primitives) keyed by descriptor bytes, per-thread scratch memory, and error checks.
 * Kernels run inside StarPU workers: every object here is per thread, so no locks. */
#ifndef TSR_KERNEL_UTIL_H
#define TSR_KERNEL_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <dnnl.h>

/* oneDNN failures inside a kernel are programming errors (shapes are validated by the graph
 * before any task runs): report the call and abort the task's process with a clear message. */
#define TSR_DNNL_CHECK(call)                                                                       \
  do {                                                                                             \
    dnnl_status_t _st = (call);                                                                    \
    if (_st != dnnl_success) _tsr_kernel_fail(__FILE__, __LINE__, #call, (int)_st);                \
  } while (0)

void _tsr_kernel_fail(const char *file, int line, const char *call, int status) __attribute__((noreturn));

dnnl_engine_t _tsr_dnnl_engine(void);
dnnl_stream_t _tsr_dnnl_stream(void);

/* Thread-local cache. `tag` separates kinds of objects; key is compared bytewise. */
void *_tsr_cache_get(int tag, const void *key, size_t keylen);
/* Takes ownership of obj; destroy is called when the thread ends. */
void _tsr_cache_put(int tag, const void *key, size_t keylen, void *obj, void (*destroy)(void *));

/* Per-thread scratch buffer number `slot` (0..7) of at least `bytes` bytes, 64-byte aligned. */
void *_tsr_scratch(int slot, size_t bytes);

/* Runs a primitive with (arg, memory) pairs and waits for it. */
void _tsr_dnnl_run(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args);
/* Creates a memory object with a plain layout (tag) over user memory (ptr may be NULL: set later
 * with dnnl_memory_set_data_handle). */
dnnl_memory_t _tsr_dnnl_mem(const dnnl_memory_desc_t *md, void *ptr);

#endif

/* Helpers shared by the CPU kernels: oneDNN engine/stream per thread, a per-thread cache of
 * objects (primitives) keyed by descriptor bytes, per-thread scratch memory, and error checks.
 * Kernels run inside StarPU workers: every object here is per thread, so no locks. */
#ifndef TSR_KERNEL_UTIL_H
#define TSR_KERNEL_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <dnnl.h>

/* oneDNN failures inside a kernel should not happen (the graph validates shapes before any task
 * runs), but one must not end the process either: the failed call ends the kernel early (a jump
 * back to its _tsr_kernel_guard), the first failure is kept process-wide with the op, call and
 * oneDNN status, and the trainer returns it as a tsr_status from its next call. */
#define TSR_DNNL_CHECK(call)                                                                       \
  do {                                                                                             \
    dnnl_status_t _st = (call);                                                                    \
    if (_st != dnnl_success) _tsr_kernel_fail(__FILE__, __LINE__, #call, (int)_st);                \
  } while (0)

/* status: a dnnl_status_t, or -1 for a failed allocation. Jumps to the innermost guard. */
void _tsr_kernel_fail(const char *file, int line, const char *call, int status);

/* Runs body(arg); every entry point into the kernels below runs under one. Returns 1 when the
 * body completed, 0 when it failed: then the failure is recorded and, inside a StarPU task, the
 * task's write-only buffers are zeroed so that nothing downstream reads garbage. */
int _tsr_kernel_guard(const char *op, void (*body)(void *), void *arg);
/* Records a failure found outside oneDNN (the CUDA codelets: `what` names the failed call) as the
 * same first failure; no jump. */
void _tsr_kernel_record(const char *op, const char *what);
/* 1 and the message of the first kernel failure since the last clear, else 0. */
int _tsr_kernel_error(char *msg, size_t cap);
void _tsr_kernel_error_clear(void);

dnnl_engine_t _tsr_dnnl_engine(void);
dnnl_stream_t _tsr_dnnl_stream(void);

/* Thread-local cache. `tag` separates kinds of objects; key is compared bytewise. */
void *_tsr_cache_get(int tag, const void *key, size_t keylen);
/* Takes ownership of obj; destroy is called when the thread ends. */
void _tsr_cache_put(int tag, const void *key, size_t keylen, void *obj, void (*destroy)(void *));

/* Per-thread scratch buffer number `slot` (0..7) of at least `bytes` bytes, 64-byte aligned. */
void *_tsr_scratch(int slot, size_t bytes);

/* The channel block of oneDNN's blocked activation layout on this CPU: 16 (nChw16c) with AVX-512,
 * 8 (nChw8c) with AVX2, else 0 (plain layouts only). */
int _tsr_act_block(void);
/* 1 where the CPU runs a 512-bit FMA as two 256-bit halves, so that oneDNN's AVX2 kernels (blocks of
 * 8) have the FMA peak of its AVX-512 ones: AMD family 0x19 (Zen 4). 0 elsewhere: Zen 5 (0x1a) and
 * Intel's AVX-512 cores run them at full width. _tsr_avx512_half_width_of decides from cpuid's vendor
 * string and family (base + extended); _tsr_avx512_half_width asks this CPU, unless tests set an
 * answer with _tsr_set_avx512_half_width (0 or 1; -1 asks the CPU again). */
int _tsr_avx512_half_width_of(const char *vendor, unsigned family);
int _tsr_avx512_half_width(void);
void _tsr_set_avx512_half_width(int v);
/* oneDNN's format tag of an activation [n, c, h, w] with channel block blk (0: nchw). */
dnnl_format_tag_t _tsr_act_tag(int blk);
/* Zeroes the padding channels [c, c rounded up to blk) of one sample of hw pixels in layout blk,
 * es bytes each (nothing for a plain layout or c a multiple of blk): gradients share memory
 * (src/train/grad_share.c) with others of other element sizes, whose bits there could read as NaN
 * in the bf16 kernels. */
void _tsr_zero_pad_channels(int blk, size_t hw, size_t es, void *sample, int c);

/* Runs a primitive with (arg, memory) pairs and waits for it. */
void _tsr_dnnl_run(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args);
/* Creates a memory object with a plain layout (tag) over user memory (ptr may be NULL: set later
 * with dnnl_memory_set_data_handle). */
dnnl_memory_t _tsr_dnnl_mem(const dnnl_memory_desc_t *md, void *ptr);

#endif

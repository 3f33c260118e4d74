/* Per-thread oneDNN engine/stream, object cache and scratch memory for the CPU kernels, and the
 * guard that turns a failure inside a kernel (or a CUDA codelet's launcher) into a recorded error
 * instead of an abort. */
#include <cpuid.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <dnnl_debug.h>
#include <starpu.h>

#include "codelets.h"
#include "cuda_util.h"
#include "kernel_util.h"

struct cache_entry {
  int tag;
  size_t keylen;
  void *key;
  void *obj;
  void (*destroy)(void *);
  struct cache_entry *next;
};

struct thread_state {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  struct cache_entry *cache;
  void *scratch[8];
  size_t scratch_size[8];
};

static pthread_key_t state_key;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;

static void state_free(void *p) {
  struct thread_state *s = p;
  for (struct cache_entry *e = s->cache, *n; e; e = n) {
    n = e->next;
    if (e->destroy) e->destroy(e->obj);
    free(e->key);
    free(e);
  }
  for (int i = 0; i < 8; i++) free(s->scratch[i]);
  if (s->stream) dnnl_stream_destroy(s->stream);
  if (s->engine) dnnl_engine_destroy(s->engine);
  free(s);
}

static void state_key_init(void) { pthread_key_create(&state_key, state_free); }

static struct thread_state *state(void) {
  pthread_once(&state_once, state_key_init);
  struct thread_state *s = pthread_getspecific(state_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) _tsr_kernel_fail(__FILE__, __LINE__, "calloc(thread_state)", -1);
    pthread_setspecific(state_key, s);
  }
  return s;
}

/* ---- failures ---- */

struct guard {
  jmp_buf jump;
  const char *op;
  struct guard *outer;
};

static _Thread_local struct guard *guard_top;
static atomic_int failed; /* 0, 1 while the message is written, 2 once it is readable */
static char failure[512];

void _tsr_kernel_fail(const char *file, int line, const char *call, int status) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&failed, &expected, 1)) {
    const char *why = status == -1 ? "out of memory" : dnnl_status2str((dnnl_status_t)status);
    snprintf(failure, sizeof failure, "kernel '%s': %s failed (%s) at %s:%d", guard_top ? guard_top->op : "?", call,
             why, file, line);
    atomic_store(&failed, 2);
  }
  /* Every entry point runs under a guard; without one (a bug in this library, not bad input) the
   * failure stays recorded and the caller goes on. */
  if (guard_top) longjmp(guard_top->jump, 1);
}

void _tsr_kernel_record(const char *op, const char *what) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&failed, &expected, 1)) {
    snprintf(failure, sizeof failure, "kernel '%s': %s", op, what);
    atomic_store(&failed, 2);
  }
}

/* Zeroes the write-only buffers of the task this worker runs, if any (StarPU's per-thread task
 * key exists only once StarPU runs: a kernel called directly, as by the tests, has no task). */
static void zero_task_outputs(void) {
  if (!starpu_is_initialized() || starpu_worker_get_id() < 0) return;
  struct starpu_task *task = starpu_task_get_current();
  if (!task) return;
  for (unsigned i = 0; i < STARPU_TASK_GET_NBUFFERS(task); i++) {
    starpu_data_handle_t h = STARPU_TASK_GET_HANDLE(task, i);
    if (STARPU_TASK_GET_MODE(task, i) != STARPU_W || starpu_data_get_interface_id(h) != STARPU_VECTOR_INTERFACE_ID)
      continue;
    struct starpu_vector_interface *v = starpu_data_get_interface_on_node(h, STARPU_MAIN_RAM);
    if (v && v->ptr) memset((void *)v->ptr, 0, (size_t)v->nx * v->elemsize);
  }
}

int _tsr_kernel_guard(const char *op, void (*body)(void *), void *arg) {
  struct guard g = {.op = op, .outer = guard_top};
  guard_top = &g;
  if (setjmp(g.jump) != 0) {
    guard_top = g.outer;
    zero_task_outputs();
    return 0;
  }
  body(arg);
  guard_top = g.outer;
  return 1;
}

#ifdef TSR_CUDA_CODELETS
/* A failed launcher in a codelet's CUDA function: the guard's work for the CUDA side (the buffers
 * are on the device, so they are zeroed on the worker's stream). */
void _tsr_cuda_task_failed(const char *codelet, void *buffers[]) {
  _tsr_kernel_record(codelet, _tsr_cuda_last_report());
  struct starpu_task *task = starpu_task_get_current();
  for (unsigned i = 0; task && i < STARPU_TASK_GET_NBUFFERS(task); i++)
    if (STARPU_TASK_GET_MODE(task, i) == STARPU_W &&
        starpu_data_get_interface_id(STARPU_TASK_GET_HANDLE(task, i)) == STARPU_VECTOR_INTERFACE_ID)
      /* a failure here is printed; the first one is already recorded */
      (void)_tsr_zero_bytes_cuda((void *)STARPU_VECTOR_GET_PTR(buffers[i]),
                                 (size_t)STARPU_VECTOR_GET_NX(buffers[i]) * STARPU_VECTOR_GET_ELEMSIZE(buffers[i]),
                                 TSR_CUDA_STREAM);
}
#endif

int _tsr_kernel_error(char *msg, size_t cap) {
  if (atomic_load(&failed) != 2) return 0;
  if (msg && cap) snprintf(msg, cap, "%s", failure);
  return 1;
}

void _tsr_kernel_error_clear(void) {
  int expected = 2;
  atomic_compare_exchange_strong(&failed, &expected, 0);
}

dnnl_engine_t _tsr_dnnl_engine(void) {
  struct thread_state *s = state();
  if (!s->engine) TSR_DNNL_CHECK(dnnl_engine_create(&s->engine, dnnl_cpu, 0));
  return s->engine;
}

dnnl_stream_t _tsr_dnnl_stream(void) {
  struct thread_state *s = state();
  if (!s->stream) TSR_DNNL_CHECK(dnnl_stream_create(&s->stream, _tsr_dnnl_engine(), dnnl_stream_default_flags));
  return s->stream;
}

void *_tsr_cache_get(int tag, const void *key, size_t keylen) {
  for (struct cache_entry *e = state()->cache; e; e = e->next)
    if (e->tag == tag && e->keylen == keylen && memcmp(e->key, key, keylen) == 0) return e->obj;
  return NULL;
}

void _tsr_cache_put(int tag, const void *key, size_t keylen, void *obj, void (*destroy)(void *)) {
  struct thread_state *s = state();
  struct cache_entry *e = malloc(sizeof *e);
  void *k = malloc(keylen);
  if (!e || !k) _tsr_kernel_fail(__FILE__, __LINE__, "malloc(cache_entry)", -1);
  memcpy(k, key, keylen);
  *e = (struct cache_entry){tag, keylen, k, obj, destroy, s->cache};
  s->cache = e;
}

void *_tsr_scratch(int slot, size_t bytes) {
  struct thread_state *s = state();
  if (s->scratch_size[slot] < bytes) {
    free(s->scratch[slot]);
    size_t sz = (bytes + 63) & ~(size_t)63;
    s->scratch[slot] = aligned_alloc(64, sz);
    if (!s->scratch[slot]) _tsr_kernel_fail(__FILE__, __LINE__, "aligned_alloc(scratch)", -1);
    s->scratch_size[slot] = sz;
  }
  return s->scratch[slot];
}

void _tsr_dnnl_run(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args) {
  dnnl_stream_t st = _tsr_dnnl_stream();
  TSR_DNNL_CHECK(dnnl_primitive_execute(p, st, nargs, args));
  TSR_DNNL_CHECK(dnnl_stream_wait(st));
}

dnnl_memory_t _tsr_dnnl_mem(const dnnl_memory_desc_t *md, void *ptr) {
  dnnl_memory_t m;
  TSR_DNNL_CHECK(dnnl_memory_create(&m, md, _tsr_dnnl_engine(), ptr ? ptr : DNNL_MEMORY_NONE));
  return m;
}

void _tsr_worker_enter(void) {
  static _Thread_local int done;
  if (done) return;
  done = 1;
#ifdef _OPENMP
  omp_set_num_threads(1);
#endif
}

int _tsr_act_block(void) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  /* the values are sets of feature bits */
  if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core) return 16;
  return (isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2 ? 8 : 0;
}

int _tsr_avx512_half_width_of(const char *vendor, unsigned family) {
  return strcmp(vendor, "AuthenticAMD") == 0 && family == 0x19;
}

static atomic_int half_width_set = -1;

void _tsr_set_avx512_half_width(int v) { atomic_store(&half_width_set, v); }

int _tsr_avx512_half_width(void) {
  int set = atomic_load(&half_width_set);
  if (set >= 0) return set;
  unsigned a, b, c, d;
  char vendor[13] = {0};
  if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
  memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  unsigned base = (a >> 8) & 0xf, family = base == 0xf ? base + ((a >> 20) & 0xff) : base;
  return _tsr_avx512_half_width_of(vendor, family);
}

dnnl_format_tag_t _tsr_act_tag(int blk) { return blk == 16 ? dnnl_nChw16c : blk == 8 ? dnnl_nChw8c : dnnl_nchw; }

void _tsr_zero_pad_channels(int blk, size_t hw, size_t es, void *sample, int c) {
  if (!blk || c % blk == 0) return;
  char *p = (char *)sample + ((size_t)(c / blk) * hw * blk + c % blk) * es;
  for (size_t k = 0; k < hw; k++) memset(p + k * blk * es, 0, (size_t)(blk - c % blk) * es);
}

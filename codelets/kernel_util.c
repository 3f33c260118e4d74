/* Per-thread oneDNN engine/stream, object cache and scratch memory for the CPU kernels. */
#include <pthread.h>
#include <string.h>

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

void _tsr_kernel_fail(const char *file, int line, const char *call, int status) {
  fprintf(stderr, "tessera: kernel failure at %s:%d: %s returned %d\n", file, line, call, status);
  abort();
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

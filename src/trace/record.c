/* Recording: a callback on every traced task copies StarPU's profiling times into a buffer owned by
 * the thread that ran it (no lock on the hot path: a thread takes the registry lock once, to add its
 * buffer). tsr_trace_stop waits for the tasks, aligns clocks across ranks, writes the raw file of
 * this rank (raw.c) and, on rank 0, the merged Chrome and Paje traces. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <starpu.h>

#include "runtime/error.h"
#include "runtime/submit.h"
#include "trace/record.h"

atomic_int _tsr_trace_active;
static atomic_llong cur_step;
static atomic_ullong next_seq;
static int64_t win_first, win_last;
static char trace_dir[4096];

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct _tsr_tbuf *bufs; /* every thread's buffer of this recording */
static atomic_int generation;
static struct _tsr_grec *grecs; /* group markers (host thread, under reg_lock) */
static size_t ngrecs, gcap;
static _Thread_local struct _tsr_tbuf *my;
static _Thread_local int my_gen = -1;

struct cbarg {
  struct starpu_task *task;
  uint64_t seq;
  int64_t step;
  void (*orig)(void *);
  void *orig_arg;
  int orig_free;
};

void _tsr_trace_set_step(int64_t step) { atomic_store(&cur_step, step); }
int64_t _tsr_trace_get_step(void) { return atomic_load(&cur_step); }
double _tsr_trace_now_us(void) { return starpu_timing_now(); }
uint64_t _tsr_trace_num_hooked(void) { return atomic_load(&next_seq); }
int tsr_trace_active(void) { return atomic_load(&_tsr_trace_active); }

static struct _tsr_tbuf *thread_buf(void) {
  int g = atomic_load(&generation);
  if (my && my_gen == g) return my;
  struct _tsr_tbuf *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  pthread_mutex_lock(&reg_lock);
  b->next = bufs;
  bufs = b;
  pthread_mutex_unlock(&reg_lock);
  my = b, my_gen = g;
  return b;
}

/* Grows *p (elements of size sz) to hold n + 1; returns 0 or -1. */
static int reserve(void **p, size_t *cap, size_t n, size_t sz) {
  if (n < *cap) return 0;
  size_t c = *cap ? *cap * 2 : 256;
  void *q = realloc(*p, c * sz);
  if (!q) return -1;
  *p = q, *cap = c;
  return 0;
}

void _tsr_trace_group(int64_t step, int g, uint64_t bytes) {
  if (!atomic_load_explicit(&_tsr_trace_active, memory_order_relaxed)) return;
  if (step < win_first || (win_last >= 0 && step > win_last)) return;
  pthread_mutex_lock(&reg_lock);
  if (reserve((void **)&grecs, &gcap, ngrecs, sizeof *grecs) == 0)
    grecs[ngrecs++] = (struct _tsr_grec){step, g, bytes, atomic_load(&next_seq)};
  pthread_mutex_unlock(&reg_lock);
}

static void record_task(struct cbarg *a) {
  struct starpu_task *task = a->task;
  struct _tsr_tbuf *b = thread_buf();
  int nb = STARPU_TASK_GET_NBUFFERS(task);
  if (!b || reserve((void **)&b->recs, &b->rcap, b->nrecs, sizeof *b->recs)) return;
  while (b->nacc + nb > b->acap)
    if (reserve((void **)&b->acc, &b->acap, b->acap, sizeof *b->acc)) return;
  struct _tsr_rec *r = &b->recs[b->nrecs++];
  r->seq = a->seq, r->step = a->step;
  struct starpu_profiling_task_info *pi = task->profiling_info;
  double now = starpu_timing_now();
  if (pi) {
    r->submit = starpu_timing_timespec_to_us(&pi->submit_time);
    r->start = starpu_timing_timespec_to_us(&pi->start_time);
    r->end = starpu_timing_timespec_to_us(&pi->end_time);
    r->worker = pi->workerid;
  } else { /* profiling was off when the task was submitted */
    r->submit = r->start = r->end = now;
    r->worker = starpu_worker_get_id();
  }
  snprintf(r->name, sizeof r->name, "%s", task->name ? task->name : "?");
  r->op = task->cl && task->cl->name ? task->cl->name : "none";
  r->bytes = 0, r->afirst = b->nacc, r->nacc = nb;
  for (int i = 0; i < nb; i++) {
    starpu_data_handle_t h = STARPU_TASK_GET_HANDLE(task, i);
    b->acc[b->nacc++] = (struct _tsr_access){h, (int)STARPU_TASK_GET_MODE(task, i)};
    r->bytes += starpu_data_get_size(h);
  }
}

static void record_cb(void *arg) {
  struct cbarg *a = arg;
  if (atomic_load_explicit(&_tsr_trace_active, memory_order_relaxed)) record_task(a);
  if (a->orig) a->orig(a->orig_arg);
  if (a->orig_free) free(a->orig_arg);
}

void _tsr_trace_task_hook(struct starpu_task *task) {
  int64_t step = atomic_load_explicit(&cur_step, memory_order_relaxed);
  if (step < win_first || (win_last >= 0 && step > win_last)) return;
  /* a task that runs nowhere (an ordering task: asynchronous slices' gates) has no times to record */
  if (task->cl && task->cl->where == STARPU_NOWHERE) return;
  struct cbarg *a = malloc(sizeof *a);
  if (!a) return; /* the task runs untraced */
  *a = (struct cbarg){task, atomic_fetch_add(&next_seq, 1), step, task->callback_func, task->callback_arg,
                      task->callback_arg_free};
  task->callback_func = record_cb;
  task->callback_arg = a;
  task->callback_arg_free = 1;
}

void _tsr_trace_transfer_step(int64_t step, int peer, size_t bytes, int64_t tag, double post_us, double done_us,
                              int is_send) {
  if (!atomic_load_explicit(&_tsr_trace_active, memory_order_relaxed)) return;
  struct _tsr_tbuf *b = thread_buf();
  if (!b || reserve((void **)&b->xfers, &b->xcap, b->nxfers, sizeof *b->xfers)) return;
  b->xfers[b->nxfers++] = (struct _tsr_xrec){step, tag, peer, is_send, bytes, post_us, done_us};
}

struct xarg {
  int64_t step, tag;
  int peer, is_send;
  size_t bytes;
  double post;
};

void *_tsr_trace_xfer_arg(int64_t step, int peer, size_t bytes, int64_t tag, int is_send) {
  if (!atomic_load_explicit(&_tsr_trace_active, memory_order_relaxed)) return NULL;
  struct xarg *a = malloc(sizeof *a);
  if (a) *a = (struct xarg){step, tag, peer, is_send, bytes, starpu_timing_now()};
  return a;
}

void _tsr_trace_xfer_done(void *arg) {
  struct xarg *a = arg;
  if (!a) return;
  _tsr_trace_transfer_step(a->step, a->peer, a->bytes, a->tag, a->post, starpu_timing_now(), a->is_send);
  free(a);
}

void _tsr_trace_transfer(int peer, size_t bytes, int64_t tag, double post_us, double done_us, int is_send) {
  _tsr_trace_transfer_step(-1, peer, bytes, tag, post_us, done_us, is_send);
}

static tsr_status mkdirs(const char *dir) {
  char p[sizeof trace_dir];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1;; s++) {
    if (*s == '/' || !*s) {
      char c = *s;
      *s = 0;
      if (mkdir(p, 0777) != 0 && errno != EEXIST)
        return _tsr_error(TSR_ERR_IO, "trace folder %s: cannot create %s: %s", dir, p, strerror(errno));
      *s = c;
      if (!c) break;
    }
  }
  return TSR_OK;
}

tsr_status tsr_trace_start(tsr_context *ctx, const char *dir, int64_t first_step, int64_t last_step) {
  if (!ctx || !dir || !*dir) return _tsr_error(TSR_ERR_ARG, "tsr_trace_start: context and folder are required");
  if (first_step < 0 || (last_step >= 0 && last_step < first_step))
    return _tsr_error(TSR_ERR_ARG, "tsr_trace_start: step window %lld:%lld is empty", (long long)first_step,
                      (long long)last_step);
  if (atomic_load(&_tsr_trace_active)) return _tsr_error(TSR_ERR_STATE, "tsr_trace_start: already tracing to %s", trace_dir);
  if (strlen(dir) + 32 >= sizeof trace_dir) return _tsr_error(TSR_ERR_ARG, "tsr_trace_start: folder name too long");
  TSR_TRY(mkdirs(dir));
  snprintf(trace_dir, sizeof trace_dir, "%s", dir);
  win_first = first_step, win_last = last_step;
  atomic_store(&next_seq, 0);
  starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
  _tsr_submit_set_hook(_tsr_trace_task);
  atomic_store(&_tsr_trace_active, 1);
  return TSR_OK;
}

static int cmp_rec(const void *a, const void *b) {
  uint64_t x = ((const struct _tsr_rec *)a)->seq, y = ((const struct _tsr_rec *)b)->seq;
  return x < y ? -1 : x > y;
}

tsr_status tsr_trace_stop(tsr_context *ctx) {
  if (!ctx) return _tsr_error(TSR_ERR_ARG, "tsr_trace_stop: context is NULL");
  if (!atomic_load(&_tsr_trace_active)) return _tsr_error(TSR_ERR_STATE, "tsr_trace_stop: not tracing");
  int rank = tsr_context_rank(ctx), size = tsr_context_size(ctx);
  tsr_status st = _tsr_trace_quiesce(size);
  atomic_store(&_tsr_trace_active, 0);
  starpu_profiling_status_set(STARPU_PROFILING_DISABLE);
  double offset = 0;
  if (st == TSR_OK && size > 1) st = _tsr_trace_clock_offset(rank, size, &offset);

  /* Gather this rank's buffers: records by submission order, with their handle accesses. */
  pthread_mutex_lock(&reg_lock);
  struct _tsr_tbuf *list = bufs;
  struct _tsr_grec *marks = grecs;
  size_t nmarks = ngrecs;
  bufs = NULL, grecs = NULL, ngrecs = gcap = 0;
  atomic_fetch_add(&generation, 1);
  pthread_mutex_unlock(&reg_lock);
  struct _tsr_recs all = {.groups = marks, .ngroups = nmarks};
  for (struct _tsr_tbuf *b = list; b; b = b->next) all.nrecs += b->nrecs, all.nxfers += b->nxfers;
  all.recs = malloc((all.nrecs + 1) * sizeof *all.recs);
  all.xfers = malloc((all.nxfers + 1) * sizeof *all.xfers);
  all.acc = malloc((all.nrecs + 1) * sizeof *all.acc);
  if (!all.recs || !all.xfers || !all.acc) {
    if (st == TSR_OK) st = _tsr_error(TSR_ERR_NOMEM, "tsr_trace_stop: out of memory for %zu events", all.nrecs);
  } else {
    size_t k = 0, x = 0;
    for (struct _tsr_tbuf *b = list; b; b = b->next) {
      if (b->nxfers) memcpy(all.xfers + x, b->xfers, b->nxfers * sizeof *b->xfers), x += b->nxfers;
      for (size_t i = 0; i < b->nrecs; i++, k++) {
        all.recs[k] = b->recs[i];
        all.recs[k].afirst = k; /* index into all.acc after sorting: see below */
        all.acc[k] = b->acc + b->recs[i].afirst;
      }
    }
    /* Sort records with their access lists: sort indices through afirst. */
    qsort(all.recs, all.nrecs, sizeof *all.recs, cmp_rec);
    const struct _tsr_access **acc = malloc((all.nrecs + 1) * sizeof *acc);
    if (acc) {
      for (size_t i = 0; i < all.nrecs; i++) acc[i] = all.acc[all.recs[i].afirst];
      memcpy(all.acc, acc, all.nrecs * sizeof *acc);
      free(acc);
      char path[sizeof trace_dir + 32];
      snprintf(path, sizeof path, "%s/rank-%d.tsv", trace_dir, rank);
      tsr_status w = _tsr_trace_write_raw(path, &all, rank, size, offset);
      if (st == TSR_OK) st = w;
    } else if (st == TSR_OK) {
      st = _tsr_error(TSR_ERR_NOMEM, "tsr_trace_stop: out of memory");
    }
  }
  /* Every rank has written its file before rank 0 merges them. */
  if (size > 1) {
    tsr_status b = _tsr_trace_barrier(rank, size);
    if (st == TSR_OK) st = b;
  }
  if (st == TSR_OK && rank == 0) st = tsr_trace_merge(trace_dir);
  free(all.recs);
  free(all.xfers);
  free(all.acc);
  free(marks);
  while (list) {
    struct _tsr_tbuf *n = list->next;
    free(list->recs);
    free(list->acc);
    free(list->xfers);
    free(list);
    list = n;
  }
  return st;
}

/* The simulation of a replay graph (replay.h). Data parallelism makes ranks alike, so one rank is
 * simulated: list scheduling on its workers (ready tasks in submission order) and one network queue
 * for its reductions, one at a time, in the order they become ready.
 *
 * Progress `thread` (a progress thread of its own moves StarPU-MPI's messages): a reduction holds the
 * queue for its cost model's time. Progress `worker` (the default: StarPU-MPI's progress loop is CPU
 * worker 0 itself and passes over its requests only between two of that worker's tasks): the
 * reduction is played round by round (cost.c gives the rounds). A round's message is posted when
 * the rank's worker 0 is between tasks: at once if it is idle or starts or ends a task at that
 * moment, else at the end of the task it runs; it crosses the link (the round's wire time), and its
 * arrival is seen at the next such moment. The work on what arrived (the sum, a half format's
 * unpack) is then a task, ready at once and scheduled like the others (in the reduction's
 * submission order), with the machine's dispatch time; the next round's message follows it, under
 * the same rule. The tasks that wait for the reduction become ready when its last round is seen.
 * The ranks being alike, the receiver's worker 0 is the simulated rank's own: its replayed tasks,
 * not an average.
 * Ranks that take turns on one core (the rounds' wait_us, from the machine's timeslice_us and
 * ranks_per_core): a message that arrives while the rank has no task running is seen only once the
 * core's ranks have had their turns, wait_us later; one that arrives while a task runs is seen at a
 * task's end as above (the traced durations already hold the turns taken while the tasks ran). The
 * turns are the core's, not a message's: every message that arrives before they end is seen when
 * they end, and meanwhile the reduction gives up the network queue, so the next one (a group of its
 * own) plays its round in the same turns. A reduction whose turns have ended takes the queue back
 * before a new one starts (the oldest first). Without turns, a reduction holds the queue from its
 * first message to its last. Times in microseconds. */
#include <stdlib.h>

#include "runtime/error.h"
#include "scale/replay.h"

struct hent {
  double t;
  uint64_t k;
  int id;
};
struct heap {
  struct hent *a;
  int n;
};
static int less(const struct hent *x, const struct hent *y) { return x->t < y->t || (x->t == y->t && x->k < y->k); }
static void hpush(struct heap *h, struct hent e) {
  int i = h->n++;
  while (i > 0 && less(&e, &h->a[(i - 1) / 2])) h->a[i] = h->a[(i - 1) / 2], i = (i - 1) / 2;
  h->a[i] = e;
}
static struct hent hpop(struct heap *h) {
  struct hent top = h->a[0], last = h->a[--h->n];
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && less(&h->a[c + 1], &h->a[c])) c++;
    if (!less(&h->a[c], &last)) break;
    h->a[i] = h->a[c], i = c;
  }
  if (h->n > 0) h->a[i] = last;
  return top;
}

enum { SUM_END = -1, ARRIVE = -2, TURNED = -3 }; /* event ids besides nodes' ends */

struct sim {
  struct _tsr_rgraph *g;
  int n, workers, *indeg, *soff, *succ, *freew, *fifo, nfree, qhead, qtail, net_busy, done;
  struct heap ready, ev; /* ready: the active reduction's work task has id n */
  const struct _tsr_rnet *net;
  int rounds_mode;
  int w0_busy; /* worker 0's task, [w0_start, w0_end) */
  double w0_start, w0_end;
  int act, round, pend_post, pend_vis, sum_worker; /* the reduction being played round by round */
  struct _tsr_rounds rs;
  double sum_dur;
  double turns_end; /* the core's ranks have had their turns (-1: none pending) */
  struct parked { /* a reduction waiting for the turns to end at `until`, then for the queue */
    int id, round;
    double until;
  } *parked;
  int nparked;
};

static void release(struct sim *s, int id) {
  for (int k = s->soff[id]; k < s->soff[id + 1]; k++) {
    int x = s->succ[k];
    if (--s->indeg[x]) continue;
    if (s->g->v[x].task < 0)
      s->fifo[s->qtail++] = x;
    else
      hpush(&s->ready, (struct hent){0, s->g->v[x].seq, x});
  }
}

/* Worker 0 runs a task at t, so its progress loop does not run now. */
static int w0_runs(const struct sim *s, double t) { return s->w0_busy && s->w0_start < t && t < s->w0_end; }

static void post(struct sim *s, double t) {
  hpush(&s->ev, (struct hent){t + s->rs.v[s->round].wire_us, (uint64_t)s->n + 1, ARRIVE});
}

static void next_round(struct sim *s, double t) {
  if (s->round < s->rs.n) {
    if (w0_runs(s, t))
      s->pend_post = 1;
    else
      post(s, t);
    return;
  }
  struct _tsr_rnode *v = &s->g->v[s->act]; /* all rounds seen: done */
  v->end = t, s->act = -1, s->net_busy = 0, s->done++;
  release(s, (int)(v - s->g->v));
}

static void visible(struct sim *s, double t) {
  double work = s->rs.v[s->round++].work_us;
  if (work > 0) {
    s->sum_dur = work + s->net->m->task_overhead_us;
    hpush(&s->ready, (struct hent){0, s->g->v[s->act].seq, s->n});
  } else
    next_round(s, t);
}

/* The round's message is there at t (after the turns it waited for): seen now, or at the end of the
 * task worker 0 runs. */
static void seen(struct sim *s, double t) {
  if (w0_runs(s, t))
    s->pend_vis = 1;
  else
    visible(s, t);
}

/* The round's message arrives at t. Before the core's pending turns end, or with no task running
 * (then the turns start now), the reduction waits for them aside and frees the queue. */
static void arrived(struct sim *s, double t) {
  double wait = s->rs.v[s->round].wait_us;
  if (wait > 0 && t >= s->turns_end && s->nfree == s->workers) {
    s->turns_end = t + wait;
    hpush(&s->ev, (struct hent){s->turns_end, (uint64_t)s->n + 1, TURNED});
  }
  if (wait > 0 && t < s->turns_end) {
    s->parked[s->nparked++] = (struct parked){s->act, s->round, s->turns_end};
    s->act = -1, s->net_busy = 0;
  } else
    seen(s, t);
}

/* At t, with the queue free: the oldest parked reduction whose turns have ended takes it back and
 * sees its round's message. Returns whether one did. */
static tsr_status resume(struct sim *s, double t, int *resumed) {
  int best = -1;
  *resumed = 0;
  for (int i = 0; i < s->nparked; i++)
    if (s->parked[i].until <= t && (best < 0 || s->g->v[s->parked[i].id].seq < s->g->v[s->parked[best].id].seq))
      best = i;
  if (best < 0) return TSR_OK;
  struct parked p = s->parked[best];
  s->parked[best] = s->parked[--s->nparked];
  struct _tsr_rnode *v = &s->g->v[p.id];
  s->rs.n = 0, s->act = p.id, s->round = p.round, s->net_busy = 1, *resumed = 1;
  if (_tsr_cost_rounds(s->net->m, v->algo, v->bytes, s->net->ranks, &s->rs) < 0)
    return _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
  seen(s, t);
  return TSR_OK;
}

/* Worker 0 ends a task at t: its progress loop posts and sees what waited for it. */
static void w0_done(struct sim *s, double t) {
  s->w0_busy = 0;
  if (s->pend_post) s->pend_post = 0, post(s, t);
  if (s->pend_vis) s->pend_vis = 0, visible(s, t);
}

static void start_task(struct sim *s, int id, double t) {
  int w = s->freew[--s->nfree];
  double end;
  if (id == s->n) {
    s->sum_worker = w, end = t + s->sum_dur;
    hpush(&s->ev, (struct hent){end, (uint64_t)s->n, SUM_END});
  } else {
    struct _tsr_rnode *v = &s->g->v[id];
    v->worker = w, v->start = t, v->end = end = t + v->dur;
    hpush(&s->ev, (struct hent){end, (uint64_t)id, id});
  }
  if (w == 0) s->w0_busy = 1, s->w0_start = t, s->w0_end = end;
}

static tsr_status start_reduction(struct sim *s, int id, double t) {
  struct _tsr_rnode *v = &s->g->v[id];
  v->worker = -1, v->start = t, s->net_busy = 1;
  if (!s->rounds_mode) {
    v->end = t + v->dur;
    hpush(&s->ev, (struct hent){v->end, (uint64_t)id, id});
    return TSR_OK;
  }
  s->rs.n = 0, s->act = id, s->round = 0;
  if (_tsr_cost_rounds(s->net->m, v->algo, v->bytes, s->net->ranks, &s->rs) < 0)
    return _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
  next_round(s, t);
  return TSR_OK;
}

tsr_status _tsr_rgraph_simulate(struct _tsr_rgraph *g, int workers, const struct _tsr_rnet *net) {
  int n = g->n;
  struct sim s = {.g = g,
                  .n = n,
                  .workers = workers,
                  .indeg = calloc(n + 1, sizeof(int)),
                  .soff = calloc(n + 2, sizeof(int)),
                  .freew = malloc((workers + 1) * sizeof(int)),
                  .fifo = malloc((n + 1) * sizeof(int)),
                  .ready = {malloc((n + 2) * sizeof(struct hent)), 0},
                  .ev = {malloc((n + 3) * sizeof(struct hent)), 0},
                  .net = net,
                  .rounds_mode = net && net->ranks > 1 && net->m->progress != TSR_MPI_PROGRESS_THREAD,
                  .act = -1,
                  .turns_end = -1,
                  .parked = malloc((g->nmarks + 1) * sizeof(struct parked))};
  tsr_status st = TSR_OK;
  if (!s.indeg || !s.soff || !s.freew || !s.fifo || !s.ready.a || !s.ev.a || !s.parked) {
    st = _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
    goto out;
  }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < g->v[i].ndeps; k++) s.soff[g->v[i].deps[k] + 2]++;
  for (int i = 0; i < n; i++) s.soff[i + 2] += s.soff[i + 1];
  if (!(s.succ = malloc((s.soff[n + 1] + 1) * sizeof *s.succ))) {
    st = _tsr_error(TSR_ERR_NOMEM, "replay: out of memory");
    goto out;
  }
  for (int i = 0; i < n; i++) {
    s.indeg[i] = g->v[i].ndeps;
    for (int k = 0; k < g->v[i].ndeps; k++) s.succ[s.soff[g->v[i].deps[k] + 1]++] = i;
  }
  s.nfree = workers;
  for (int w = 0; w < workers; w++) s.freew[w] = workers - 1 - w; /* worker 0 is taken first */
  for (int i = 0; i < n; i++)
    if (!s.indeg[i]) {
      if (g->v[i].task < 0)
        s.fifo[s.qtail++] = i;
      else
        hpush(&s.ready, (struct hent){0, g->v[i].seq, i});
    }
  double t = 0;
  while (st == TSR_OK && s.done < n) {
    for (int again = 1; again && st == TSR_OK;) {
      again = 0;
      while (s.nfree > 0 && s.ready.n > 0) start_task(&s, hpop(&s.ready).id, t), again = 1;
      int resumed = 0;
      if (!s.net_busy) st = resume(&s, t, &resumed), again |= resumed;
      if (st == TSR_OK && !s.net_busy && s.qhead < s.qtail) st = start_reduction(&s, s.fifo[s.qhead++], t), again = 1;
    }
    if (st != TSR_OK || s.done == n) break;
    if (s.ev.n == 0) {
      st = _tsr_error(TSR_ERR_FORMAT, "replay: %d of %d tasks can never run (a dependency cycle)", n - s.done, n);
      break;
    }
    struct hent e = hpop(&s.ev);
    t = e.t;
    if (e.id == ARRIVE)
      arrived(&s, t);
    else if (e.id == TURNED)
      continue; /* parked reductions take the queue back above */
    else if (e.id == SUM_END) {
      s.freew[s.nfree++] = s.sum_worker;
      if (s.sum_worker == 0) w0_done(&s, t);
      next_round(&s, t);
    } else {
      struct _tsr_rnode *v = &g->v[e.id];
      s.done++;
      if (v->task < 0)
        s.net_busy = 0;
      else {
        s.freew[s.nfree++] = v->worker;
        if (v->worker == 0) w0_done(&s, t);
      }
      release(&s, e.id);
    }
  }
out:
  free(s.indeg), free(s.soff), free(s.succ), free(s.freew), free(s.fifo), free(s.ready.a), free(s.ev.a), free(s.rs.v),
      free(s.parked);
  return st;
}

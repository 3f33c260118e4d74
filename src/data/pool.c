/* A bounded pool of produced samples (see tsr_loader_open_pool). Slot s of P holds, during pass q
 * = pos / P over the pool, generation g = (q + s % R) / R of its samples: local sample g P + s,
 * producer index (g P + s) size + rank. The host submits one production task per generation into
 * the slot's handles (STARPU_W) right after the last read of the previous generation is submitted,
 * so StarPU orders it after those reads and before the next ones: a sample is never read while it
 * is written, and the pool never holds more than P samples. Production runs below training's
 * priority; its failures are kept per slot and seen by the reads of that slot. */
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/pool.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/submit.h"

struct slot {
  float *x, *y;
  starpu_data_handle_t hx, hy;
  int64_t gen;  /* generation last submitted; -1: none */
  int failed;   /* written by the slot's production task, read by tasks that read the slot */
};

struct _tsr_pool {
  tsr_sample_producer prod;
  tsr_pool_opts o;
  size_t xe, ye;
  struct slot *slots;
  struct _tsr_spill *spill;
  int64_t spill_rows;   /* production tasks submitted: a spilled sample's row */
  int64_t submitted;
  atomic_llong produced; /* production tasks finished */
  atomic_int failed;
  char error[1024];
};

void tsr_pool_opts_default(tsr_pool_opts *o) {
  *o = (tsr_pool_opts){.slots = 64, .reuse = 1, .rank = 0, .size = 1, .stats_samples = 8, .target_stats_samples = 0, .spill = NULL,
                       .delay_ms = 0, .fail_at = -1};
}

int _tsr_pool_slots(const struct _tsr_pool *p) { return p->o.slots; }

/* Slot, pass and generation of stream position pos. */
static void locate(const struct _tsr_pool *p, int64_t pos, int *slot, int64_t *pass, int64_t *gen) {
  int P = p->o.slots, R = p->o.reuse;
  *slot = (int)(pos % P);
  *pass = pos / P;
  *gen = (*pass + *slot % R) / R;
}

static int64_t producer_index(const struct _tsr_pool *p, int slot, int64_t gen) {
  return (gen * p->o.slots + slot) * p->o.size + p->o.rank;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (ms > 0 && nanosleep(&ts, &ts) != 0) {
  }
}

/* Whether msg names sample `index` ("sample N" not followed by a digit). */
static int names_sample(const char *msg, int64_t index) {
  char tag[40];
  int n = snprintf(tag, sizeof tag, "sample %lld", (long long)index);
  for (const char *at = strstr(msg, tag); at; at = strstr(at + 1, tag))
    if (!isdigit((unsigned char)at[n])) return 1;
  return 0;
}

/* Producer sample `index`. A failure's message names the rank and the producer once, then the
 * producer's own text, which names the sample (the simulator's does: "cbed: sample N: ..."); the
 * sample is added only when that text does not name it. */
static tsr_status produce(struct _tsr_pool *p, int64_t index, float *x, float *y) {
  tsr_status st = p->o.fail_at >= 0 && index == p->o.fail_at
                      ? _tsr_error(TSR_ERR_RUNTIME, "sample %lld: injected failure (tsr_pool_opts.fail_at or "
                                   "TESSERA_SIM_FAIL_AT)", (long long)index)
                      : p->prod.produce(p->prod.user, index, x, y);
  if (st == TSR_OK) return st;
  char why[900];
  snprintf(why, sizeof why, "%s", tsr_last_error());
  if (names_sample(why, index)) return _tsr_error(st, "rank %d, producer %s: %s", p->o.rank, p->prod.name, why);
  return _tsr_error(st, "rank %d, producer %s: sample %lld: %s", p->o.rank, p->prod.name, (long long)index, why);
}

struct prod_arg {
  struct _tsr_pool *p;
  int slot;
  int64_t index, row;
};

static void produce_cpu(void *buffers[], void *cl_arg) {
  const struct prod_arg *a = cl_arg;
  struct _tsr_pool *p = a->p;
  float *x = TSR_BUF(buffers, 0), *y = TSR_BUF(buffers, 1);
  sleep_ms(p->o.delay_ms / 2);
  tsr_status st = produce(p, a->index, x, y);
  sleep_ms(p->o.delay_ms - p->o.delay_ms / 2);
  if (st == TSR_OK && p->spill) st = _tsr_spill_write(p->spill, a->row, a->index, x, y);
  p->slots[a->slot].failed = st != TSR_OK;
  int expected = 0;
  if (st != TSR_OK && atomic_compare_exchange_strong(&p->failed, &expected, 1))
    snprintf(p->error, sizeof p->error, "%s", tsr_last_error());
  atomic_fetch_add(&p->produced, 1);
}

static struct starpu_perfmodel produce_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_pool_produce"};
static struct starpu_codelet produce_cl = {.cpu_funcs = {produce_cpu}, .cpu_funcs_name = {"produce_cpu"},
                                           .nbuffers = STARPU_VARIABLE_NBUFFERS, .name = "tsr_simulate",
                                           .model = &produce_model};

/* Submits the production of generation gen into slot s. */
static tsr_status submit_production(struct _tsr_pool *p, int s, int64_t gen) {
  struct slot *sl = &p->slots[s];
  struct prod_arg a = {p, s, producer_index(p, s, gen), p->spill_rows++};
  struct _tsr_buf b[2] = {{sl->hx, STARPU_W}, {sl->hy, STARPU_W}};
  if (_tsr_submit(&produce_cl, &a, sizeof a, STARPU_MIN_PRIO, p->prod.name, 2, b) != 0) return TSR_ERR_RUNTIME;
  sl->gen = gen;
  p->submitted++;
  return TSR_OK;
}

static tsr_status check_opts(const tsr_sample_producer *prod, const tsr_pool_opts *o) {
  if (!prod || !prod->produce || !prod->name)
    return _tsr_error(TSR_ERR_ARG, "tsr_loader_open_pool: the producer %s is missing", !prod ? "" : prod->produce ? "name" : "function");
  const int sh[6] = {prod->c, prod->h, prod->w, prod->tc, prod->th, prod->tw};
  for (int i = 0; i < 6; i++)
    if (sh[i] < 1) return _tsr_error(TSR_ERR_ARG, "tsr_loader_open_pool: producer '%s' has shape [%d, %d, %d] -> [%d, %d, %d]",
                                     prod->name, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
  if (o->slots < 1) return _tsr_error(TSR_ERR_ARG, "pool: slots %d is not a positive number of samples", o->slots);
  if (o->reuse < 1) return _tsr_error(TSR_ERR_ARG, "pool: reuse %d is not a positive number of reads per sample", o->reuse);
  if (o->size < 1 || o->rank < 0 || o->rank >= o->size)
    return _tsr_error(TSR_ERR_ARG, "pool: rank %d of %d ranks", o->rank, o->size);
  if (o->stats_samples < 0) return _tsr_error(TSR_ERR_ARG, "pool: stats_samples %d is negative", o->stats_samples);
  if (o->target_stats_samples < 0)
    return _tsr_error(TSR_ERR_ARG, "pool: target_stats_samples %d is negative", o->target_stats_samples);
  if (o->delay_ms < 0) return _tsr_error(TSR_ERR_ARG, "pool: delay_ms %d is negative", o->delay_ms);
  return TSR_OK;
}

tsr_status _tsr_pool_create(struct _tsr_pool **out, const tsr_sample_producer *prod, const tsr_pool_opts *opts) {
  tsr_pool_opts o;
  if (opts) o = *opts;
  else tsr_pool_opts_default(&o);
  TSR_TRY(check_opts(prod, &o));
  if (!o.delay_ms) o.delay_ms = _tsr_env_sim_delay_ms();
  if (o.fail_at < 0) _tsr_env_sim_fail_at(&o.fail_at);
  struct _tsr_pool *p = calloc(1, sizeof *p);
  if (!p) return _tsr_error(TSR_ERR_NOMEM, "pool: out of memory");
  p->prod = *prod, p->o = o;
  p->o.spill = NULL; /* the caller's string need not outlive the call */
  p->xe = (size_t)prod->c * prod->h * prod->w, p->ye = (size_t)prod->tc * prod->th * prod->tw;
  p->slots = calloc(o.slots, sizeof *p->slots);
  tsr_status st = p->slots ? TSR_OK : _tsr_error(TSR_ERR_NOMEM, "pool: out of memory for %d slots", o.slots);
  for (int s = 0; st == TSR_OK && s < o.slots; s++) {
    struct slot *sl = &p->slots[s];
    sl->gen = -1;
    sl->x = calloc(p->xe, sizeof(float)), sl->y = calloc(p->ye, sizeof(float));
    if (!sl->x || !sl->y) {
      st = _tsr_error(TSR_ERR_NOMEM, "pool: out of memory for slot %d of %d (%zu floats each)", s, o.slots, p->xe + p->ye);
      break;
    }
    sl->hx = _tsr_register_floats(sl->x, p->xe);
    sl->hy = _tsr_register_floats(sl->y, p->ye);
  }
  const int shape[6] = {prod->c, prod->h, prod->w, prod->tc, prod->th, prod->tw};
  if (st == TSR_OK && o.spill) st = _tsr_spill_open(&p->spill, o.spill, prod->name, shape);
  if (st != TSR_OK) {
    _tsr_pool_destroy(p, 0);
    return st;
  }
  *out = p;
  return TSR_OK;
}

tsr_status _tsr_pool_destroy(struct _tsr_pool *p, int destroy_producer) {
  if (!p) return TSR_OK;
  for (int s = 0; p->slots && s < p->o.slots; s++) {
    /* unregistering waits for the slot's tasks */
    if (p->slots[s].hx) starpu_data_unregister(p->slots[s].hx);
    if (p->slots[s].hy) starpu_data_unregister(p->slots[s].hy);
    free(p->slots[s].x), free(p->slots[s].y);
  }
  tsr_status st = _tsr_spill_close(p->spill, !atomic_load(&p->failed));
  if (destroy_producer && p->prod.destroy) p->prod.destroy(p->prod.user);
  free(p->slots);
  free(p);
  return st;
}

tsr_status _tsr_pool_produce_now(struct _tsr_pool *p, int64_t pos, float *x, float *y) {
  int s;
  int64_t q, g;
  locate(p, pos, &s, &q, &g);
  float *tx = x ? NULL : malloc(sizeof(float) * p->xe), *ty = y ? NULL : malloc(sizeof(float) * p->ye);
  tsr_status st = (x || tx) && (y || ty) ? produce(p, producer_index(p, s, g), x ? x : tx, y ? y : ty)
                                         : _tsr_error(TSR_ERR_NOMEM, "pool: out of memory");
  free(tx), free(ty);
  return st;
}

tsr_status _tsr_pool_produce_index(struct _tsr_pool *p, int64_t index, float *x, float *y) {
  return produce(p, index, x, y);
}

tsr_status _tsr_pool_acquire(struct _tsr_pool *p, int64_t pos, starpu_data_handle_t h[2]) {
  if (pos < 0) return _tsr_error(TSR_ERR_ARG, "pool: stream position %lld is negative", (long long)pos);
  int s;
  int64_t q, g;
  locate(p, pos, &s, &q, &g);
  if (p->slots[s].gen != g) TSR_TRY(submit_production(p, s, g)); /* the first read, or a jump (resume, skip) */
  h[0] = p->slots[s].hx, h[1] = p->slots[s].hy;
  return TSR_OK;
}

tsr_status _tsr_pool_read_submitted(struct _tsr_pool *p, int64_t pos) {
  int s;
  int64_t q, g;
  locate(p, pos, &s, &q, &g);
  int R = p->o.reuse;
  if ((q + s % R) % R == R - 1 && p->slots[s].gen == g) return submit_production(p, s, g + 1);
  return TSR_OK;
}

tsr_status _tsr_pool_check(struct _tsr_pool *p, int64_t pos) {
  if (!p->slots[pos % p->o.slots].failed) return TSR_OK;
  return _tsr_error(TSR_ERR_RUNTIME, "%s", atomic_load(&p->failed) ? p->error : "production failed");
}

void _tsr_pool_counts(const struct _tsr_pool *p, int64_t *produced, int *filled, const char **error) {
  int64_t done = atomic_load(&p->produced);
  if (produced) *produced = done;
  if (filled) {
    int64_t pending = p->submitted - done;
    *filled = pending >= p->o.slots ? 0 : (int)(p->o.slots - pending);
  }
  if (error) *error = atomic_load(&((struct _tsr_pool *)p)->failed) ? p->error : "";
}

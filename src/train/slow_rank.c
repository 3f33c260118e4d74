/* A benchmark aid: TESSERA_SLOW_RANK=R:MS makes rank R sleep MS milliseconds in every training step,
 * TESSERA_SLOW_RANK=jitter:MS every rank in about half of the steps (which ones follows from a hash
 * of rank and step: reproducible, different on each rank), to show what staleness
 * (tsr_trainer_opts.staleness) buys against a slow rank and against transient stragglers. The sleep
 * is a task holding slice 0's input between its load and its forward. TESSERA_SLOW_RANK=slices:MS
 * makes one slice of every step on every rank sleep, the slice chosen by a hash of rank and step, to
 * show what asynchronous slices (tsr_trainer_opts.async_slices) buy against transient stragglers
 * inside a rank. Nothing happens without the variable; the values computed are those of an unslowed
 * run. */
#include <stdint.h>
#include <unistd.h>

#include "train/trainer.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/submit.h"

static void sleep_cpu(void *buffers[], void *cl_arg) {
  (void)buffers;
  usleep((useconds_t)(*(const double *)cl_arg * 1000.0));
}

static struct starpu_codelet sleep_cl = {
    .cpu_funcs = {sleep_cpu}, .cpu_funcs_name = {"sleep_cpu"}, .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_slow_rank"};

tsr_status _tsr_slow_setup(tsr_trainer *t) {
  int rank;
  double ms;
  int r = _tsr_env_slow_rank(&rank, &ms);
  if (r < 0)
    return _tsr_error(TSR_ERR_ARG, "TESSERA_SLOW_RANK: expected R:MS, jitter:MS or slices:MS (a rank, milliseconds in [0, 60000])");
  t->slow_ms = r > 0 && (rank == t->rank || rank < 0) ? ms : 0;
  t->slow_jitter = r > 0 && rank == -1;
  t->slow_slices = r > 0 && rank == -2;
  if (t->slow_ms > 0)
    _tsr_log(1, "rank %d: TESSERA_SLOW_RANK: sleeping %g ms in %s training step", t->rank, ms,
             t->slow_jitter ? "about every second" : t->slow_slices ? "one slice of every" : "every");
  return TSR_OK;
}

/* splitmix64's finaliser: the jitter's coin for (rank, step). */
static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int _tsr_slow_submit(tsr_trainer *t, int p, int64_t step) {
  uint64_t coin = mix((uint64_t)step * 0x9e3779b97f4a7c15ull + (uint64_t)t->rank + 1);
  if (t->slow_jitter && (coin & 1)) return 0;
  struct _tsr_buf b = {t->x[p][t->slow_slices ? (int)(coin % (uint64_t)t->slices) : 0], STARPU_RW};
  return _tsr_submit(&sleep_cl, &t->slow_ms, sizeof t->slow_ms, STARPU_DEFAULT_PRIO, "slow_rank", 1, &b);
}

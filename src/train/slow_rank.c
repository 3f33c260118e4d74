/* A benchmark aid: TESSERA_SLOW_RANK=R:MS makes rank R sleep MS milliseconds in every training step
 * (a task holding slice 0's input between its load and its forward), to show what staleness
 * (tsr_trainer_opts.staleness) buys when one rank is slower than the others. Nothing happens
 * without the variable; the results are those of an unslowed run. */
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
  if (r < 0) return _tsr_error(TSR_ERR_ARG, "TESSERA_SLOW_RANK: expected R:MS (a rank and milliseconds in [0, 60000])");
  t->slow_ms = r > 0 && rank == t->rank ? ms : 0;
  if (t->slow_ms > 0) _tsr_log(1, "rank %d: TESSERA_SLOW_RANK: sleeping %g ms in every training step", t->rank, ms);
  return TSR_OK;
}

int _tsr_slow_submit(tsr_trainer *t, starpu_data_handle_t h) {
  struct _tsr_buf b = {h, STARPU_RW};
  return _tsr_submit(&sleep_cl, &t->slow_ms, sizeof t->slow_ms, STARPU_DEFAULT_PRIO, "slow_rank", 1, &b);
}

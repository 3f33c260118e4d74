/* tessera-train and tessera-predict: what a failing run must release, and how it ends after an error
 * (run_fail.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <tessera.h>

#include "cli.h"
#include "run_fail.h"

/* Everything a failure must release before exiting. */
struct train_live live;

void release(void) {
  tsr_trainer_destroy(live.t);
  tsr_model_destroy(live.m);
  tsr_loader_close(live.train);
  if (live.val != live.train) tsr_loader_close(live.val);
  tsr_context_destroy(live.ctx);
  live.t = NULL, live.m = NULL, live.train = live.val = NULL, live.ctx = NULL;
}

/* Ends the run after an error. One rank cannot shut StarPU-MPI down alone (the shutdown is a barrier,
 * and tasks waiting for a peer's data never end), so a rank of a multi-rank run exits at once and the
 * launcher stops the others (mpirun within seconds; a rank left alone stops at its step deadline). */
void fail(const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (live.ctx && tsr_context_size(live.ctx) > 1) {
    if (strncmp(msg, "rank ", 5) == 0) /* the library named the rank already */
      fprintf(stderr, "%s: %s\n", cli_program(), msg);
    else
      fprintf(stderr, "%s: rank %d: %s\n", cli_program(), tsr_context_rank(live.ctx), msg);
    fflush(NULL);
    _exit(1);
  }
  release();
  cli_die("%s", msg);
}

void check(tsr_status s) {
  if (s != TSR_OK) fail("%s (%s)", tsr_last_error(), tsr_status_name(s));
}

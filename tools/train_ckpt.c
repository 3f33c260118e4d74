/* tessera-train's checkpoint side (see train_ckpt.h). Signals only set a flag; the training loop
 * sends it with every step through the trainer's control word and acts on the sum over ranks, read
 * at the same step on every rank, so all ranks stop after the same step from a synchronised trainer.
 * A SIGINT while a stop is pending (Ctrl-C pressed twice) exits at once, without the checkpoint. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "train_ckpt.h"

static volatile sig_atomic_t got_signal;
static char int_first[160], int_again[120]; /* written by the handler (snprintf is not async-signal-safe) */

static void say(const char *msg) {
  ssize_t r = write(STDERR_FILENO, msg, strlen(msg));
  (void)r;
}

static void on_signal(int sig) {
  if (sig == SIGINT && got_signal) {
    say(int_again);
    _exit(128 + SIGINT);
  }
  if (sig == SIGINT) say(int_first);
  got_signal = sig;
}

void ckpt_init(struct ckpt *ck) {
  memset(ck, 0, sizeof *ck);
  ck->bad = -1;
  for (int i = 0; i < CKPT_IDMAP; i++) ck->ids[i] = -1;
}

void ckpt_signals_install(void) {
  static int installed, catch_int;
  if (!installed) {
    /* a SIGINT ignored from the start (a background job of a script) stays ignored */
    struct sigaction old;
    catch_int = sigaction(SIGINT, NULL, &old) == 0 && old.sa_handler != SIG_IGN;
    const char *nl = isatty(STDERR_FILENO) ? "\n" : ""; /* below the progress line */
    snprintf(int_first, sizeof int_first,
             "%s%s: SIGINT received: stopping after a checkpoint (Ctrl-C again to exit without one)\n", nl,
             cli_program());
    snprintf(int_again, sizeof int_again, "%s%s: second SIGINT: exiting without a checkpoint\n", nl, cli_program());
    installed = 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART; /* a signal must not fail a blocking call (read, open of a FIFO) with EINTR */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  if (catch_int) sigaction(SIGINT, &sa, NULL);
}

int ckpt_signal(void) { return got_signal; }

const char *ckpt_signal_name(int sig) { return sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT" : "SIGTERM"; }

float ckpt_flag_value(const struct ckpt *ck) { return (got_signal ? 1.0f : 0.0f) + (ck->bad >= 0 ? CKPT_NAN_UNIT : 0.0f); }

int ckpt_due(const struct ckpt *ck, int64_t gstep) {
  return ck->dir && ((ck->every > 0 && gstep % ck->every == 0) || ck->stop);
}

int ckpt_open_step_log(struct ckpt *ck) {
  if (!ck->step_log_path) return 0;
  ck->step_log = fopen(ck->step_log_path, "a");
  if (!ck->step_log) return 1;
  fseek(ck->step_log, 0, SEEK_END);
  if (ftell(ck->step_log) == 0) fprintf(ck->step_log, "step,epoch,train_loss\n");
  return 0;
}

void ckpt_submitted(struct ckpt *ck, int64_t id, int64_t gstep) {
  ck->ids[id % CKPT_IDMAP] = id;
  ck->gsteps[id % CKPT_IDMAP] = gstep;
}

static void mark_bad(struct ckpt *ck, int64_t gstep, const char *what) {
  if (ck->bad >= 0 && ck->bad <= gstep) return;
  ck->bad = gstep;
  snprintf(ck->msg, sizeof ck->msg, "training step %lld: %s", (long long)gstep, what);
}

/* The trainer's report of a non-finite gradient with its step id replaced by the training step. */
static int64_t gradient_report(const struct ckpt *ck, int64_t bad_id, int64_t fallback, char *out, size_t cap) {
  int64_t g = ck->ids[bad_id % CKPT_IDMAP] == bad_id ? ck->gsteps[bad_id % CKPT_IDMAP] : fallback;
  const char *e = tsr_last_error(), *colon = strstr(e, ": ");
  snprintf(out, cap, "%s (training step %lld)", colon ? colon + 2 : e, (long long)g);
  return g;
}

void ckpt_step_done(struct ckpt *ck, tsr_trainer *t, int64_t id, int64_t gstep, int epoch, double loss) {
  double flags = 0;
  if (tsr_trainer_flag(t, id, &flags) == TSR_OK) { /* waited already: the loss came with it */
    ck->stop_nan |= flags >= CKPT_NAN_UNIT;
    ck->stop |= fmod(flags, CKPT_NAN_UNIT) > 0;
  }
  /* %.17g prints a double that reads back bitwise */
  if (ck->step_log) fprintf(ck->step_log, "%lld,%d,%.17g\n", (long long)gstep, epoch, loss), fflush(ck->step_log);
  char what[1200];
  if (!isfinite(loss)) {
    snprintf(what, sizeof what, "the training loss is %g", loss);
    mark_bad(ck, gstep, what);
  }
  int64_t bad_id;
  if (tsr_trainer_check_finite(t, &bad_id) != TSR_OK) {
    int64_t g = gradient_report(ck, bad_id, gstep, what, sizeof what);
    mark_bad(ck, g, what);
  }
}

int ckpt_nonfinite(struct ckpt *ck, tsr_trainer *t) {
  int64_t bad_id;
  /* gradients are reduced: every rank finds the same first bad one once every step has finished */
  if (tsr_trainer_check_finite(t, &bad_id) != TSR_OK && ck->ids[bad_id % CKPT_IDMAP] == bad_id) {
    char what[600];
    mark_bad(ck, gradient_report(ck, bad_id, -1, what, sizeof what), what);
  }
  if (ck->bad < 0 && !ck->stop_nan) return 0;
  ck->stop_nan = 0;
  if (ck->bad < 0) {
    snprintf(ck->msg, sizeof ck->msg, "another rank saw a non-finite training loss");
    return 1;
  }
  /* every step up to now has finished: name the layer when a gradient was the first victim */
  if (tsr_trainer_check_finite(t, &bad_id) != TSR_OK && !strstr(ck->msg, "gradient")) {
    char what[600];
    gradient_report(ck, bad_id, ck->bad, what, sizeof what);
    size_t n = strlen(ck->msg);
    snprintf(ck->msg + n, sizeof ck->msg - n, "; first non-finite gradient: %s", what);
  } else if (!strstr(ck->msg, "gradient")) {
    size_t n = strlen(ck->msg);
    snprintf(ck->msg + n, sizeof ck->msg - n, "; every gradient was finite (the forward pass or the loss overflowed)");
  }
  return 1;
}

int ckpt_is_skipped(const struct ckpt *ck, int64_t gstep) {
  for (int i = 0; i < ck->nskipped; i++)
    if (ck->skipped[i] == gstep) return 1;
  return 0;
}

tsr_status ckpt_save(struct ckpt *ck, tsr_trainer *t, int epoch, int64_t position, int64_t gstep, double loss_sum,
                     int nranks, int batch, char *path, size_t cap) {
  tsr_checkpoint_meta m = {.step = gstep, .epoch = epoch, .position = position, .nranks = nranks, .batch = batch,
                           .loss_sum = loss_sum, .has_schedule = ck->sched != NULL,
                           .run_config = ck->run_config};
  if (ck->sched) m.schedule = *ck->sched;
  return tsr_checkpoint_save_rotating(t, ck->dir, ck->keep, &m, path, cap);
}

tsr_status ckpt_save_as(const struct ckpt *ck, tsr_trainer *t, int epoch, int64_t position, int64_t gstep,
                        double loss_sum, int nranks, int batch, const char *path) {
  tsr_checkpoint_meta m = {.step = gstep, .epoch = epoch, .position = position, .nranks = nranks, .batch = batch,
                           .loss_sum = loss_sum, .has_schedule = ck->sched != NULL,
                           .run_config = ck->run_config};
  if (ck->sched) m.schedule = *ck->sched;
  return tsr_checkpoint_save(t, path, &m);
}

int ckpt_load_latest(struct ckpt *ck, tsr_trainer *t, int nranks, int batch, int64_t steps_per_epoch, int *found,
                     int *epoch, int64_t *position, double *loss_sum, char *path, size_t cap) {
  tsr_checkpoint_meta m;
  *found = 0;
  tsr_status s = tsr_checkpoint_find_latest(ck->dir, path, cap, &m);
  if (s == TSR_ERR_IO) return 0; /* no checkpoint yet (or no folder): a fresh start */
  if (s == TSR_OK && m.position > 0 && (m.nranks != nranks || m.batch != batch || m.position > steps_per_epoch)) {
    snprintf(ck->msg, sizeof ck->msg,
             "%s: taken inside epoch %lld (%lld steps done) by a run on %d rank(s) with batch %d; this run has %d "
             "rank(s), batch %d and %lld steps per epoch. A checkpoint taken inside an epoch continues only with "
             "the ranks and batch that wrote it; one taken at an epoch end (position 0) continues with any",
             path, (long long)m.epoch, (long long)m.position, m.nranks, m.batch, nranks, batch,
             (long long)steps_per_epoch);
    return 1;
  }
  if (s == TSR_OK) s = tsr_checkpoint_load(t, path, &m);
  if (s != TSR_OK) {
    snprintf(ck->msg, sizeof ck->msg, "%s (%s)", tsr_last_error(), tsr_status_name(s));
    return 1;
  }
  *found = 1, *epoch = (int)m.epoch, *position = m.position, *loss_sum = m.loss_sum;
  ck->from_nranks = m.nranks, ck->from_batch = m.batch;
  ck->steps_before = m.step - (m.epoch - 1) * steps_per_epoch - m.position;
  ck->sched_diff[0] = '\0';
  if (ck->sched && m.has_schedule) {
    if (m.schedule.spec.kind == ck->sched->spec.kind) ck->sched->state = m.schedule.state;
    tsr_schedule_spec_diff(&m.schedule.spec, &ck->sched->spec, ck->sched_diff, sizeof ck->sched_diff);
  }
  return 0;
}

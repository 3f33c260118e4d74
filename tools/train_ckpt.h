/* tessera-train's checkpoints, resume, signals and NaN/Inf handling: periodic and final checkpoints
 * in a rotating folder, SIGTERM/SIGINT/SIGUSR1 turned into "checkpoint, then exit", a per-step loss log, and
 * on a non-finite loss or gradient either a stop naming the step and the layer or a roll-back to the
 * last checkpoint that then skips the bad batch. */
#ifndef TSR_TRAIN_CKPT_H
#define TSR_TRAIN_CKPT_H

#include <stdint.h>
#include <stdio.h>
#include <tessera.h>

enum { CKPT_IDMAP = 64, CKPT_MAX_SKIPS = 32 };

struct ckpt {
  /* options */
  const char *dir, *step_log_path;
  int64_t every;        /* checkpoint every N training steps (0: only at epoch ends) */
  int keep, resume, skip_nan;
  tsr_schedule *sched;  /* the run's learning-rate schedule: saved in checkpoints, its state restored */
  const char *run_config; /* the effective options, stored in every checkpoint */
  /* state */
  FILE *step_log;
  int64_t bad;          /* first training step with a non-finite loss or gradient; -1: none */
  char msg[1400];       /* what was non-finite */
  char sched_diff[512]; /* after a load: how this run's schedule differs from the checkpoint's ("" none) */
  int64_t skipped[CKPT_MAX_SKIPS];
  int nskipped;
  int64_t ids[CKPT_IDMAP], gsteps[CKPT_IDMAP]; /* trainer step id -> training step */
  /* agreed by every rank through the trainer's control word, read at the same step ids */
  int stop;             /* some rank received SIGTERM/SIGINT/SIGUSR1 */
  int stop_nan;         /* some rank saw a non-finite loss or gradient */
  /* set by ckpt_load_latest: the layout the checkpoint was written with, and the training steps
   * before epoch 1 in this run's numbering (0 unless an epoch-boundary checkpoint is resumed with
   * another rank count or batch: step numbers, which name the files, then go on from the file's) */
  int from_nranks, from_batch;
  int64_t steps_before;
};

/* Control value of a rank (tsr_trainer_set_flag): 1 once it received a signal to stop, plus
 * CKPT_NAN_UNIT once it saw a non-finite value; the sum over ranks counts both (< 4096 ranks). */
#define CKPT_NAN_UNIT 4096.0f

void ckpt_init(struct ckpt *ck);
/* Installs the SIGTERM/SIGINT/SIGUSR1 handlers (only with a checkpoint folder; SIGINT unless it was
 * ignored at the first call). Call again after StarPU starts: it catches SIGINT itself. */
void ckpt_signals_install(void);
/* The signal received (SIGTERM, SIGINT or SIGUSR1), 0 if none. */
int ckpt_signal(void);
/* "SIGUSR1", "SIGINT", else "SIGTERM". */
const char *ckpt_signal_name(int sig);
/* This rank's control value for the next training step (see CKPT_NAN_UNIT). */
float ckpt_flag_value(const struct ckpt *ck);
/* A checkpoint is due after training step `gstep` (periodic, or a signal agreed by all ranks). */
int ckpt_due(const struct ckpt *ck, int64_t gstep);
/* Opens the per-step log (rank 0 only); returns nonzero on failure. */
int ckpt_open_step_log(struct ckpt *ck);

/* Record of a submitted training step and, later, of its loss (logs it, checks it and the
 * gradients for NaN/Inf, and reads the step's control word sum into stop / stop_nan). */
void ckpt_submitted(struct ckpt *ck, int64_t id, int64_t gstep);
void ckpt_step_done(struct ckpt *ck, tsr_trainer *t, int64_t id, int64_t gstep, int epoch, double loss);
/* After a sync: 1 (and ck->msg) when a non-finite loss or gradient was seen here or (stop_nan) on
 * some rank, else 0. */
int ckpt_nonfinite(struct ckpt *ck, tsr_trainer *t);
int ckpt_is_skipped(const struct ckpt *ck, int64_t gstep);

tsr_status ckpt_save(struct ckpt *ck, tsr_trainer *t, int epoch, int64_t position, int64_t gstep, double loss_sum,
                     int nranks, int batch, char *path, size_t cap);
/* The same checkpoint as ckpt_save's, written to `path` outside the rotation (--keep-best). */
tsr_status ckpt_save_as(const struct ckpt *ck, tsr_trainer *t, int epoch, int64_t position, int64_t gstep,
                        double loss_sum, int nranks, int batch, const char *path);
/* Loads the newest valid checkpoint: *found = 0 when the folder has none. One taken at an epoch
 * boundary (position 0) continues with any rank count and batch: each epoch's order is drawn from
 * (seed, epoch) alone and split over this run's ranks (tsr_loader_epoch_indices). One taken inside
 * an epoch needs this run's ranks and batch (and no more steps done than an epoch has). Restores the
 * schedule's state when the checkpoint's is of the same kind (the run's own spec applies;
 * ck->sched_diff says what changed). Returns nonzero (message in ck->msg) on failure. */
int ckpt_load_latest(struct ckpt *ck, tsr_trainer *t, int nranks, int batch, int64_t steps_per_epoch, int *found,
                     int *epoch, int64_t *position, double *loss_sum, char *path, size_t cap);

#endif

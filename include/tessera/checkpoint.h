/* Checkpoints: everything a training run needs to continue exactly (parameters, batch-norm running
 * statistics, optimizer kind, hyperparameters and moments, loss scaler, input normalisation, step
 * counters, seed, epoch and position in it, tensor layout) in one HDF5 file with a checksum, written
 * atomically (temporary file, fsync, rename) into a folder that keeps the newest K. Under MPI rank 0
 * writes (parameters are identical on every rank) and every rank reads. */
#ifndef TESSERA_CHECKPOINT_H
#define TESSERA_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <tessera/schedule.h>
#include <tessera/status.h>
#include <tessera/train.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_checkpoint_meta {
  int64_t step;       /* training steps done in the whole run (names the file: ckpt-<step>.h5) */
  int64_t epoch;      /* epoch to continue (1-based) */
  int64_t position;   /* training steps of that epoch already done */
  uint64_t seed;      /* the run's seed: a resumed run must use the same */
  int32_t nranks;     /* ranks the run was trained on (the data each rank reads depends on it) */
  int32_t batch;      /* samples per step on each rank */
  double loss_sum;    /* sum of this epoch's training losses so far (to report the epoch's mean) */
  int64_t trainer_steps, trainer_updates; /* tsr_trainer_counters; filled by tsr_checkpoint_save */
  /* the dynamic loss scaler's state (tsr_trainer_loss_scale_get), filled by tsr_checkpoint_save;
   * loss_scale 0: the run had none (a run with dynamic scaling that loads it keeps its own scaler) */
  double loss_scale;
  int64_t loss_scale_good_steps, loss_scale_steps, loss_scale_skipped;
  /* Filled by tsr_checkpoint_save (format version 2); version-1 files predate them and read with
   * recorded = 0. The optimizer as given to tsr_trainer_create (lr: the base rate, not a rate set
   * later by tsr_trainer_set_lr) and the loss-scaling options (tsr_trainer_opts.loss_scale; for
   * dynamic scaling, the initial scale and growth interval in effect, else 0). */
  int32_t recorded;
  tsr_optim_spec optim;
  double loss_scale_option, loss_scale_init;
  int32_t loss_scale_interval;
  /* The learning-rate schedule (spec, base rate and state), given to tsr_checkpoint_save by the
   * caller and filled by load, verify and find_latest; has_schedule 0: the run had none. */
  int32_t has_schedule;
  tsr_schedule schedule;
  /* Text stored with the file as the root attribute "run_config" when not NULL (tessera-train: its
   * effective options as JSON; read it with h5dump -a run_config). Not read back: NULL on load. */
  const char *run_config;
} tsr_checkpoint_meta;

/* Writes the trainer's state and *meta to `path` (through `path`.tmp, fsync, rename). Waits for
 * every submitted step first. */
tsr_status tsr_checkpoint_save(tsr_trainer *t, const char *path, const tsr_checkpoint_meta *meta);

/* Reads a checkpoint, verifies its digest file (`path`.sum, written by tsr_checkpoint_save; a file
 * without one is refused, before HDF5 parses it), its checksum and that its tensors match the trainer's (names, shapes,
 * order), then sets the trainer's tensors, moments, counters, loss scaler state and input
 * normalisation and fills *meta. A file that fails any check leaves the trainer unchanged; the error
 * names the file and what is wrong. A checkpoint of another optimizer kind is refused
 * (TSR_ERR_MISMATCH naming both: its moments mean something else); other hyperparameters and the
 * loss-scaling options may differ: the trainer's own apply from now on, and a line on stderr names
 * each change (old -> new). A version-1 file (no optimizer record) loads with a line saying its
 * optimizer cannot be checked, and keeps the trainer's input normalisation. */
tsr_status tsr_checkpoint_load(tsr_trainer *t, const char *path, tsr_checkpoint_meta *meta);

/* Reads and verifies a checkpoint without a trainer: metadata and checksum only (and the file's
 * tensor count in *ntensors if not NULL). TSR_ERR_FORMAT/TSR_ERR_IO when it is not a valid one. */
tsr_status tsr_checkpoint_verify(const char *path, tsr_checkpoint_meta *meta, int *ntensors);

/* Saves into folder `dir` (created if absent) as dir/ckpt-<step, 12 digits>.h5 and removes all but
 * the newest `keep` checkpoints there (keep <= 0: keep all). The written path goes to `path_out`
 * (if not NULL, `cap` bytes). */
tsr_status tsr_checkpoint_save_rotating(tsr_trainer *t, const char *dir, int keep, const tsr_checkpoint_meta *meta,
                                        char *path_out, size_t cap);

/* Finds the newest valid checkpoint in `dir`: checkpoints are tried newest first, and one that is
 * truncated or fails its checksum is reported on stderr (naming the file and why) and skipped.
 * TSR_ERR_IO when `dir` holds no valid checkpoint. */
tsr_status tsr_checkpoint_find_latest(const char *dir, char *path_out, size_t cap, tsr_checkpoint_meta *meta);

#ifdef __cplusplus
}
#endif
#endif

/* tessera-train's options: the table of a run's options (data, model, schedule, precision, tracing,
 * checkpoints, stopping) with their defaults, read from a run file and the command line and checked
 * before any start-up work; --help lists them. Errors name the option and exit with status 2. */
#ifndef TSR_TRAIN_OPTS_H
#define TSR_TRAIN_OPTS_H

#include <stdint.h>

#include <tessera.h>

#include "eval_metrics.h"
#include "train_ckpt.h"

struct train_opts {
  const char *model, *data, *val, *log, *export_path, *import_path;
  const char *input_dataset, *target_dataset, *predict_png; /* data: dataset names; PNG folder */
  int no_standardize, standardize_targets, predict_count;
  double val_fraction; /* < 0: not given */
  int epochs, batch, slices, workers, gpu_only, deterministic, quiet, verbose;
  int precision;       /* tsr_precision */
  int grad_reduce;     /* tsr_reduce_precision of the gradient reductions across ranks */
  const char *collective; /* --collective: the reductions' algorithm (NULL: the library's default) */
  int msync_every;     /* --momentum-sync-every: Lion's momentum_sync_every; < 0: the model file's */
  const char *msync_layers; /* --momentum-sync-layers: Lion's momentum_sync_layers; NULL: the model file's */
  int spatial[TSR_SPATIAL_MAX_AXES]; /* --spatial: parts per spatial axis (0: not split) */
  int staleness;       /* --staleness: stale-synchronous parallel (0: synchronous) */
  int async_slices;    /* --async-slices: slices update the shared parameters without waiting for each other */
  int separate_grads;  /* --separate-grads: no activation gradients share memory */
  int act_block;       /* --act-block: index in auto, 8, 16 */
  double loss_scale;   /* 0 off, > 0 static, TSR_LOSS_SCALE_DYNAMIC; NAN: not given */
  float lr;            /* < 0: the model file's */
  int lr_linear;       /* --lr-scaling linear: lr x ranks (Goyal et al.), reached after warmup steps */
  int64_t warmup;      /* --warmup-steps; < 0: not given */
  tsr_schedule_spec schedule; /* --lr-schedule, when have_schedule */
  int have_schedule;
  const char *schedule_text; /* --lr-schedule as given (for the effective configuration) */
  uint64_t seed;
  const char *trace;   /* --trace or TESSERA_TRACE: trace folder */
  int64_t trace_first, trace_last;
  struct ckpt ck;      /* --checkpoint-dir, --checkpoint-every, --keep, --resume, --on-nan, --step-log */
  int patience;        /* early stopping: epochs without improvement (0: never stop early) */
  double min_delta;    /* an improvement is a decrease by more than this */
  int keep_best;       /* keep the best epoch's checkpoint as <checkpoint-dir>/best.h5 */
  const char *config;  /* --config: the run file read */
  /* in-situ training: --simulate cbed.json instead of --data (samples simulated in the task graph) */
  const char *simulate, *spill;
  int pool, reuse;     /* pool size in samples (0: 4 x batch); reads per simulated sample */
  int input_stats;     /* with --simulate: simulated samples 0..N-1 give the input statistics */
  int target_stats;    /* with --simulate --standardize-targets: simulated samples 0..N-1 give the statistics */
  int64_t epoch_steps; /* steps per epoch with --simulate (0: pool x reuse / batch) */
  struct eval_opts eval; /* --pixel-size and the atom-column rule of the validation metrics */
};

/* The effective configuration (every option, as JSON) of parsed options; malloc'ed. */
char *train_opts_json(const struct train_opts *o);

/* Fills *o from the defaults, the run file (--config), the command line and TESSERA_TRACE, in that
 * order; --help prints the options and --version the version, and both exit with 0. */
void train_opts_parse(int argc, char **argv, struct train_opts *o);
/* Ranks that share each sample: the product of --spatial (1 without it). */
int train_spatial_parts(const struct train_opts *o);

#endif

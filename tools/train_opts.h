/* tessera-train's command line: the options of a run (data, model, schedule, precision, tracing,
 * checkpoints) with their defaults, parsed and checked before any start-up work; --help lists them.
 * Errors name the option and exit with status 2. */
#ifndef TSR_TRAIN_OPTS_H
#define TSR_TRAIN_OPTS_H

#include <stdint.h>

#include "train_ckpt.h"

struct train_opts {
  const char *model, *data, *val, *log, *export_path, *import_path;
  const char *input_dataset, *target_dataset, *predict_png; /* data: dataset names; PNG folder */
  int no_standardize, predict_count;
  double val_fraction; /* < 0: not given */
  int epochs, batch, slices, workers, deterministic, quiet;
  int precision;       /* tsr_precision */
  int grad_reduce;     /* tsr_reduce_precision of the gradient reductions across ranks */
  double loss_scale;   /* 0 off, > 0 static, TSR_LOSS_SCALE_DYNAMIC; NAN: not given */
  float lr;            /* < 0: the model file's */
  int lr_linear;       /* --lr-scaling linear: lr x ranks (Goyal et al.), reached after warmup steps */
  int64_t warmup;
  uint64_t seed;
  const char *trace;   /* --trace or TESSERA_TRACE: trace folder */
  int64_t trace_first, trace_last;
  struct ckpt ck;      /* --checkpoint-dir, --checkpoint-every, --keep, --resume, --on-nan, --step-log */
  /* in-situ training: --simulate cbed.json instead of --data (samples simulated in the task graph) */
  const char *simulate, *spill;
  int pool, reuse;     /* pool size in samples (0: 4 x batch); reads per simulated sample */
  int64_t epoch_steps; /* steps per epoch with --simulate (0: pool x reuse / batch) */
};

/* Fills *o from the command line (TESSERA_TRACE too); --help prints the options and exits with 0. */
void train_opts_parse(int argc, char **argv, struct train_opts *o);

#endif

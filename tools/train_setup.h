/* tessera-train's set-up and per-epoch helpers; each ends the run on error (run_fail.h). */
#ifndef TSR_TOOLS_TRAIN_SETUP_H
#define TSR_TOOLS_TRAIN_SETUP_H

#include <stdint.h>

#include <tessera.h>

#include "train_opts.h"

/* The optimizer options of the command line over the model file's: --lr, and Lion's
 * --momentum-sync-every (momentum_sync_every, tsr_optim_spec.extra[0]; 0 also drops the file's
 * layers) and --momentum-sync-layers;
 * ends the run naming the flag when the optimizer is not Lion or the layers have no period. */
void apply_optim_opts(const struct train_opts *o, tsr_optim_spec *opt);
/* tsr_trainer_create's status, a refusal of the momentum synchronisation naming the flag that set it. */
void check_trainer_created(const struct train_opts *o, tsr_status s);
/* Ends the run unless the data file `path`'s per-sample input and target shapes are the model's. */
void check_shapes(const char *path, const tsr_loader *d, const tsr_trainer *t, const tsr_model *m);
/* Loss (MSE) of predicting the mean training target image for validation samples vfirst..+nval;
 * *mean_out: that image's average value. */
double baseline_mse(tsr_loader *train, int64_t ntrain, tsr_loader *val, int64_t vfirst, int64_t nval,
                    double *mean_out);
/* Moves the loader's input statistics into the trainer (checkpoints and exports carry them);
 * simulated > 0: a pool's, from the simulator's samples 0..simulated-1, checked alike on every rank. */
void standardize_in_trainer(tsr_loader *train, int simulated, tsr_trainer *t, tsr_context *ctx, int talk);
/* --standardize-targets: the per-channel mean and std of the training targets into the trainer
 * (samples as the mean-target baseline reads them). */
void standardize_targets(tsr_loader *train, int64_t ntrain, tsr_trainer *t, tsr_context *ctx, int talk);
/* --standardize-targets with --simulate: the same from the simulator's samples 0..n-1, which the
 * pool `train` simulated at open (tsr_pool_opts.target_stats_samples = n); alike on every rank. */
void standardize_simulated_targets(const tsr_loader *train, int64_t n, tsr_trainer *t, tsr_context *ctx, int talk);
/* The run's schedule from the model file's spec and the options (--lr-schedule, --warmup-steps,
 * --lr-scaling); `steps` per epoch; plateau needs validation data. */
void make_schedule(const struct train_opts *o, tsr_schedule_spec spec, float lr, int nranks, int64_t steps,
                   int has_val, tsr_schedule *sched);
/* An epoch's validation loss to the schedule (ranks must agree on a plateau's rate). */
void epoch_end_schedule(tsr_context *ctx, tsr_schedule *sched, int ep, double val, int talk);

#endif

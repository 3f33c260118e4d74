/* tessera-train's options (see train_opts.h): one table entry per option (name, letter, type, field,
 * default, range, help; its run-file key is the name with '_' for '-'), the parsers of the options
 * that are not plain numbers or names, and the checks of options that need or exclude each other.
 * Adding an option is adding an entry (and its field in train_opts.h). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "cli.h"
#include "opt_table.h"
#include "train_opts.h"

/* --trace-steps A:B (B empty: no end) or A. */
static void parse_trace_steps(void *opts, const char *what, const char *arg) {
  struct train_opts *o = opts;
  o->trace_first = 0, o->trace_last = -1;
  if (!arg) return;
  char *end;
  const char *colon = strchr(arg, ':');
  o->trace_first = strtoll(arg, &end, 10);
  o->trace_last = colon ? (colon[1] ? strtoll(colon + 1, NULL, 10) : -1) : o->trace_first;
  if (end == arg || o->trace_first < 0 || (colon ? end != colon : *end != 0) ||
      (o->trace_last >= 0 && o->trace_last < o->trace_first))
    cli_usage_error("%s '%s': expected A:B with 0 <= A <= B (or A: or A)", what, arg);
}

static int text_trace_steps(const void *opts, char *buf, size_t cap) {
  const struct train_opts *o = opts;
  if (o->trace_first == 0 && o->trace_last < 0) return 0;
  if (o->trace_last < 0) snprintf(buf, cap, "%lld:", (long long)o->trace_first);
  else snprintf(buf, cap, "%lld:%lld", (long long)o->trace_first, (long long)o->trace_last);
  return 1;
}

static void parse_grad_reduce(void *opts, const char *what, const char *arg) {
  struct train_opts *o = opts;
  if (tsr_reduce_precision_parse(arg ? arg : "f32", &o->grad_reduce)) cli_usage_error("%s: %s", what, tsr_last_error());
}

static int text_grad_reduce(const void *opts, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", tsr_reduce_precision_name(((const struct train_opts *)opts)->grad_reduce));
  return 1;
}

/* --spatial N (along the first spatial axis) or NxM[xK] (along each). */
static void parse_spatial(void *opts, const char *what, const char *arg) {
  struct train_opts *o = opts;
  memset(o->spatial, 0, sizeof o->spatial);
  for (int a = 0; arg && *arg; a++) {
    char *end;
    long v = strtol(arg, &end, 10);
    if (a == TSR_SPATIAL_MAX_AXES || end == arg || v < 1 || v > 4096 || (*end && *end != 'x'))
      cli_usage_error("%s '%s': expected N or NxM (parts along the spatial axes, up to %d axes)", what, arg,
                      TSR_SPATIAL_MAX_AXES);
    o->spatial[a] = (int)v;
    arg = *end ? end + 1 : end;
  }
}

static int text_spatial(const void *opts, char *buf, size_t cap) {
  const int *g = ((const struct train_opts *)opts)->spatial;
  if (g[0] <= 1 && g[1] <= 1 && g[2] <= 1) return 0;
  snprintf(buf, cap, "%d", g[0] > 0 ? g[0] : 1);
  for (int a = 1; a < TSR_SPATIAL_MAX_AXES && g[a] > 0; a++) snprintf(buf + strlen(buf), cap - strlen(buf), "x%d", g[a]);
  return 1;
}

/* Ranks that share each sample (the product of --spatial). */
int train_spatial_parts(const struct train_opts *o) {
  int p = 1;
  for (int a = 0; a < TSR_SPATIAL_MAX_AXES; a++) p *= o->spatial[a] > 1 ? o->spatial[a] : 1;
  return p;
}

static void parse_loss_scale(void *opts, const char *what, const char *arg) {
  struct train_opts *o = opts;
  o->loss_scale = !arg                       ? NAN
                  : !strcmp(arg, "off")     ? 0
                  : !strcmp(arg, "dynamic") ? TSR_LOSS_SCALE_DYNAMIC
                                            : cli_parse_double(what, arg, 1e-30, 1.7e38);
}

static int text_loss_scale(const void *opts, char *buf, size_t cap) {
  double s = ((const struct train_opts *)opts)->loss_scale;
  if (isnan(s)) return 0;
  if (s == 0 || s == TSR_LOSS_SCALE_DYNAMIC) snprintf(buf, cap, "%s", s == 0 ? "off" : "dynamic");
  else snprintf(buf, cap, "%.17g", s);
  return 1;
}

/* --lr-schedule KIND[,key=value...]: parsed into o->schedule; the text kept for the effective
 * configuration. */
static void parse_schedule(void *opts, const char *what, const char *arg) {
  struct train_opts *o = opts;
  o->have_schedule = arg != NULL, o->schedule_text = arg ? strdup(arg) : NULL; /* lives as long as the run */
  if (arg && tsr_schedule_spec_parse(&o->schedule, arg)) cli_usage_error("%s: %s", what, tsr_last_error());
}

static int text_schedule(const void *opts, char *buf, size_t cap) {
  const struct train_opts *o = opts;
  if (!o->have_schedule) return 0;
  snprintf(buf, cap, "%s", o->schedule_text);
  return 1;
}

static void parse_pixel_size(void *opts, const char *what, const char *arg) {
  struct train_opts *o = opts;
  eval_parse_pixel_size(what, arg, &o->eval.px, &o->eval.py);
}

static int text_pixel_size(const void *opts, char *buf, size_t cap) {
  const struct train_opts *o = opts;
  return eval_pixel_size_text(o->eval.px, o->eval.py, buf, cap);
}

static const char *const precisions[] = {"f32", "bf16", "fp16", NULL}; /* tsr_precision order */
static const char *const lr_scalings[] = {"none", "linear", NULL};
static const char *const act_blocks[] = {"auto", "8", "16", NULL}; /* tsr_trainer_opts.act_block 0, 8, 16 */
static const char *const on_nans[] = {"stop", "skip", NULL};

/* entries give the leading fields in order and the others by name; the rest stay zero */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define F(field) offsetof(struct train_opts, field)
#define SECTION(title) {.name = title, .type = OPT_SECTION}
static const struct opt_def defs[] = {
    SECTION("Data"),
    {"model", 'm', OPT_STR, F(model), "FILE", NULL, "model file (layers, loss, optimizer); required"},
    {"data", 'd', OPT_STR, F(data), "FILE", NULL, "training data; required unless --simulate"},
    {"val", 0, OPT_STR, F(val), "FILE", NULL, "validation data"},
    {"val-fraction", 0, OPT_DOUBLE, F(val_fraction), "F", NULL,
     "hold out the last fraction F of the training data for validation (0 = no validation)", 0, 0.99, -1,
     "0.1 without --val"},
    {"input-dataset", 0, OPT_STR, F(input_dataset), "N", NULL, "HDF5 dataset of the inputs", .deftext = "inputs, else cbed"},
    {"target-dataset", 0, OPT_STR, F(target_dataset), "N", NULL, "HDF5 dataset of the targets",
     .deftext = "targets, else potential"},
    {"no-standardize", 0, OPT_FLAG, F(no_standardize), NULL, NULL,
     "feed the inputs as stored (default: per-channel mean 0, std 1)"},
    {"standardize-targets", 0, OPT_FLAG, F(standardize_targets), NULL, NULL,
     "train on targets standardised per channel (mean and std of the training targets; with --simulate, of "
     "--target-stats simulated samples; not the default); predictions, metrics and losses stay in the targets' units"},
    {"simulate", 0, OPT_STR, F(simulate), "FILE", NULL,
     "in-situ training: no --data; samples simulated by the multislice CBED simulator (settings: tessera-cbed's "
     "options as a JSON object) in the training task graph, into a pool, below training's priority"},
    {"pool", 0, OPT_INT, F(pool), "N", NULL, "with --simulate: samples held (at least --batch)", 1, 1 << 24, 0,
     "4 x --batch"},
    {"reuse", 0, OPT_INT, F(reuse), "R", NULL, "with --simulate: reads of each simulated sample before it is replaced",
     1, 1 << 24, 0, "1"},
    {"epoch-steps", 0, OPT_INT64, F(epoch_steps), "N", NULL, "with --simulate: steps per epoch", 1,
     (double)(INT64_C(1) << 40), 0, "pool x reuse / batch"},
    {"input-stats", 0, OPT_INT, F(input_stats), "N", "8",
     "with --simulate: the input statistics (standardisation) come from the simulator's samples 0..N-1 (the same "
     "on every rank and number of ranks), simulated at start-up on one core of each rank, once for both with "
     "--target-stats", 1, 1 << 20},
    {"target-stats", 0, OPT_INT, F(target_stats), "N", "64",
     "with --simulate and --standardize-targets: the target statistics come from the simulator's samples 0..N-1 "
     "(the same on every rank), simulated at start-up on one core of each rank (each once, its target held)",
     1, 1 << 20},
    {"spill", 0, OPT_STR, F(spill), "FILE", NULL,
     "with --simulate: also write every simulated sample to FILE (HDF5, inputs/targets/index; FILE.rankR.h5 per "
     "rank under mpirun)"},
    SECTION("Training"),
    {"epochs", 'e', OPT_INT, F(epochs), "N", "5", "passes over the training data", 1, 1000000},
    {"batch", 'b', OPT_INT, F(batch), "N", "32", "samples per step; the last partial batch is dropped", 1, 1 << 20},
    {"slices", 0, OPT_INT, F(slices), "N", "0", "micro-batch slices per step (0 = one per worker)", 0, 4096},
    {"lr", 0, OPT_FLOAT, F(lr), "X", NULL, "learning rate (overrides the model file)", 0, 1e3, -1, "the model file's"},
    {"lr-scaling", 0, OPT_CHOICE, F(lr_linear), "none|linear", "none",
     "multiply the learning rate by the number of ranks", .choices = lr_scalings},
    {"warmup-steps", 0, OPT_INT64, F(warmup), "N", NULL,
     "ramp the learning rate up over the first N steps: with linear scaling from the one-rank rate, else from "
     "warmup_start x it (default 1/3)", 0, (double)(INT64_C(1) << 40), -1, "0, or the model file's schedule's"},
    {"lr-schedule", 0, OPT_CUSTOM, 0, "S", NULL,
     "learning-rate schedule (overrides the model file's), PyTorch's semantics: KIND[,key=value...] with KIND "
     "constant, step (step_size or milestones=30:80, gamma), exponential (gamma), cosine (warm restarts: t0, "
     "t_mult, eta_min), one_cycle (total, pct_start, div_factor, final_div_factor) or plateau (on the validation "
     "loss: factor, patience, threshold, cooldown, min_lr); per_step=1 counts steps instead of epochs; t0 and "
     "total default to the whole run", .deftext = "the model file's, else constant", .parse = parse_schedule,
     .text = text_schedule},
    {"seed", 0, OPT_U64, F(seed), "S", "1",
     "seed of initialisation, dropout and shuffling"},
    {"deterministic", 0, OPT_FLAG, F(deterministic), NULL, NULL, "bitwise-reproducible runs for one seed"},
    {"precision", 0, OPT_CHOICE, F(precision), "P", "f32",
     "f32, or bf16: convolutions in bf16 (strided transposed ones' forward and weight gradient in float32), "
     "activations stored in bf16 between the layers that take it "
     "(AVX-512 CPUs), float32 weights; fp16 on GPUs only (cuDNN; refused without a CUDA worker)", .choices = precisions},
    {"act-block", 0, OPT_CHOICE, F(act_block), "auto|8|16", "auto",
     "CPUs: activations between layers in blocks of 8 or 16 channels (oneDNN's nChw8c, nChw16c; 16 needs "
     "AVX-512, bf16 needs 16); auto: TESSERA_ACT_BLOCK, else the CPU's widest (16 on AVX-512), except in f32 on "
     "CPUs that run 512-bit FMAs as two halves (AMD Zen 4): 8 where blocks of 16 would pad the convolutions' "
     "channels into 5% more work or more (-v says which and why)",
     .choices = act_blocks},
    {"grad-reduce", 0, OPT_CUSTOM, 0, "P", "f32",
     "f32, bf16 or fp16: gradients cross ranks in that format (half the bytes), summed in float32; with Lion, "
     "sign1, signp or signp_mean: ranks combine update signs (Lion Cub: 1-bit vote, p-bit vote or mean; not with "
     "--spatial)",
     .parse = parse_grad_reduce, .text = text_grad_reduce},
    {"momentum-sync-every", 0, OPT_INT, F(msync_every), "K", NULL,
     "Lion with a sign --grad-reduce: average the momenta over the ranks in float32 every K steps (the model "
     "file's momentum_sync_every; 0 = never, and the model file's momentum_sync_layers are dropped); refused with "
     "another optimizer or without a sign --grad-reduce", 0, 1 << 30, -1,
     "the model file's, else 0"},
    {"momentum-sync-layers", 0, OPT_STR, F(msync_layers), "PATTERNS", NULL,
     "with --momentum-sync-every (or the model file's period): average only the momenta of these layers, "
     "comma-separated shell patterns matched against layer and tensor names (conv*,final.weight; the model "
     "file's momentum_sync_layers); refused without a period, with another optimizer than Lion, or when no "
     "tensor with parameters matches", .deftext = "the model file's, else every layer"},
    {"collective", 0, OPT_STR, F(collective), "A", NULL,
     "how gradients are summed across ranks: ring, rd (recursive doubling), tree, hier (inside nodes, then a ring "
     "across them), rabenseifner (recursive halving then doubling), hier-rh (a ring inside nodes, halving-doubling "
     "across them; nodes of equal size), nccl, or auto (per group, the fastest on links measured at start-up)",
     .deftext = "NCCL with CUDA workers, else ring (TESSERA_COLLECTIVE)"},
    {"spatial", 0, OPT_CUSTOM, 0, "N", NULL,
     "spatial parallelism: split every sample into N blocks along its first spatial axis (height of [C, H, W], depth of [C, D, H, W]), "
     "or NxM along the first two, over N (x M) ranks exchanging halos; with more ranks, ranks [r N, r N + N) "
     "form replica r and the batch is split over the replicas (hybrid); N must divide the ranks",
     .deftext = "1 (no split)", .parse = parse_spatial, .text = text_spatial},
    {"staleness", 0, OPT_INT, F(staleness), "S", "0",
     "stale-synchronous parallel: step k's updates are applied after step k + S is submitted, so a rank runs up to "
     "S steps ahead of the slowest reduction it needs (0 = synchronous; not with --deterministic, dynamic "
     "--loss-scale, sign --grad-reduce or --spatial; checkpoints and validation apply the pending updates first)",
     0, TSR_MAX_STALENESS},
    {"async-slices", 0, OPT_FLAG, F(async_slices), NULL, NULL,
     "asynchronous updates inside the rank: each slice updates the shared parameters right after its own "
     "backward, without waiting for the other slices (Hogwild style; one rank only; not with --deterministic, "
     "--loss-scale, --staleness > 0 or --spatial); batchnorm layers then normalise each slice with its own "
     "statistics (batch / slices samples, not the batch's)"},
    {"separate-grads", 0, OPT_FLAG, F(separate_grads), NULL, NULL,
     "every activation gradient, and every later consumer's contribution to one, in a buffer of its own (by "
     "default gradients whose lifetimes in a step do not overlap share memory, and batch normalisation adds its "
     "contribution in its own task; the results are the same, bitwise)"},
    {"loss-scale", 0, OPT_CUSTOM, 0, "S", NULL,
     "off, dynamic (halve and skip the step on overflow, double after 2000 good steps) or a fixed scale",
     .deftext = "dynamic with fp16, else off", .parse = parse_loss_scale, .text = text_loss_scale},
    {"workers", 0, OPT_INT, F(workers), "N", NULL, "CPU workers", 1, 4096, -1, "StarPU's choice"},
    {"gpu-only", 0, OPT_FLAG, F(gpu_only), NULL, NULL,
     "every task that has a CUDA kernel runs on a GPU; CPU workers run the rest (reading samples, the NaN check "
     "of gradients, summing losses); refused without a CUDA worker"},
    {"patience", 0, OPT_INT, F(patience), "N", "0",
     "early stopping: stop after N epochs in a row without improvement of the validation loss (the training "
     "loss without validation) by more than --min-delta; 0 = never", 0, 1000000},
    {"min-delta", 0, OPT_DOUBLE, F(min_delta), "D", "0", "smallest decrease of the loss that counts as an improvement",
     0, 1e300},
    SECTION("Checkpoints"),
    {"checkpoint-dir", 0, OPT_STR, F(ck.dir), "D", NULL,
     "write checkpoints into folder D (at the start, at every epoch end, every --checkpoint-every steps, and on "
     "SIGTERM, SIGINT (Ctrl-C) or SIGUSR1, then exit: status 0 after SIGUSR1, 130 after SIGINT, 143 after "
     "SIGTERM; a second Ctrl-C exits at once, without the checkpoint; under mpirun every rank stops after the "
     "same step, a few steps after the first rank got it: send SIGUSR1 to mpirun, or raise its --mca "
     "odls_base_sigkill_timeout for Ctrl-C); D/config.json receives the effective configuration"},
    {"checkpoint-every", 0, OPT_INT64, F(ck.every), "N", "0", "also checkpoint every N training steps (0 = never)", 0,
     (double)(INT64_C(1) << 62)},
    {"keep", 0, OPT_INT, F(ck.keep), "K", "3", "keep the newest K checkpoints (0 = all)", 0, 1 << 20},
    {"keep-best", 0, OPT_FLAG, F(keep_best), NULL, NULL,
     "also keep the checkpoint of the epoch with the lowest validation loss (the --patience metric) as D/best.h5"},
    {"resume", 0, OPT_FLAG, F(ck.resume), NULL, NULL,
     "continue from the newest valid checkpoint in --checkpoint-dir (a fresh start when there is none)"},
    {"on-nan", 0, OPT_CHOICE, F(ck.skip_nan), "stop|skip", "stop",
     "on a NaN/Inf loss or gradient: stop naming the step and layer, or roll back to the last checkpoint and skip "
     "that batch", .choices = on_nans},
    SECTION("Output"),
    {"log", 0, OPT_STR, F(log), "FILE", NULL,
     "append one CSV row per epoch; FILE without its extension + .config.json receives the effective "
     "configuration"},
    {"step-log", 0, OPT_STR, F(ck.step_log_path), "FILE", NULL,
     "append one CSV row per training step (step, epoch, loss; exact digits)"},
    {"import-params", 0, OPT_STR, F(import_path), "P", NULL, "start from parameters (.h5 file or folder of .npy files)"},
    {"export-params", 0, OPT_STR, F(export_path), "P", NULL,
     "write the trained parameters (.h5 file or folder of .npy files); tessera-predict applies them"},
    {"predict-png", 0, OPT_STR, F(predict_png), "DIR", NULL,
     "after training, write true | predicted | difference PNGs of the first validation samples to DIR"},
    {"predict-count", 0, OPT_INT, F(predict_count), "N", "4", "samples drawn by --predict-png", 1, 100000},
    SECTION("Validation metrics"),
    {"pixel-size", 0, OPT_CUSTOM, 0, "X[:Y]", NULL,
     "the targets' pixel size in angstrom (x along the width, y along the height) for the atom-column metrics",
     .deftext = "per sample from the data (dataset or attribute pixel_size_A), else no column metrics",
     .parse = parse_pixel_size, .text = text_pixel_size},
    {"column-threshold", 0, OPT_DOUBLE, F(eval.col.threshold), "F", "0.3",
     "an atom column is a peak above min + F (max - min) of its image", 0, 0.999},
    {"column-separation", 0, OPT_DOUBLE, F(eval.col.separation), "A", "1.0",
     "atom columns are at least A angstrom apart (the lower of two closer peaks is dropped)", 0, 1e6},
    {"column-radius", 0, OPT_DOUBLE, F(eval.col.radius), "A", "0.2",
     "a predicted column within A angstrom of a true one has found it", 1e-6, 1e6},
    {"trace", 0, OPT_STR, F(trace), "DIR", NULL,
     "record a performance trace into DIR (also TESSERA_TRACE=DIR); read it with tessera-trace DIR or open "
     "DIR/trace.json in ui.perfetto.dev"},
    {"trace-steps", 0, OPT_CUSTOM, 0, "A:B", NULL, "trace only step ids A to B (training and validation steps count)",
     .deftext = "all", .parse = parse_trace_steps, .text = text_trace_steps},
    {"quiet", 'q', OPT_FLAG, F(quiet), NULL, NULL, "only errors"},
    {"verbose", 'v', OPT_FLAG, F(verbose), NULL, NULL,
     "also the library's details (gradient groups, workers) and StarPU's messages"},
    SECTION("Program"),
    {"config", 0, OPT_CONFIG, F(config), "FILE", NULL,
     "read options from a JSON run file ({\"epochs\": 20, \"checkpoint_dir\": \"ck\", ...}: the long options "
     "with '_' for '-'); the command line overrides it"},
    {"version", 'V', OPT_VERSION, 0, NULL, NULL, "print the version"},
    {"help", 'h', OPT_HELP, 0, NULL, NULL, "this text"},
};

static const struct opt_table table = {
    defs, sizeof defs / sizeof *defs, "--model MODEL.json --data TRAIN.h5 [options]",
    "Trains the model on HDF5 data (datasets 'inputs' [N,C,H,W] and 'targets', or 'cbed' and 'potential';\n"
    "--data takes one file, a list a.h5,b.h5, a glob, X.npy:Y.npy or a folder of .npy files).",
    "Every option can come from a run file (--config); the effective configuration of a run is written\n"
    "next to its log and checkpoints and into each checkpoint (attribute run_config)."};

char *train_opts_json(const struct train_opts *o) { return opt_effective_json(&table, o); }

void train_opts_parse(int argc, char **argv, struct train_opts *o) {
  memset(o, 0, sizeof *o);
  ckpt_init(&o->ck);
  opt_parse(&table, o, argc, argv);
  if (!o->model) cli_usage_error("--model is required");
  if (!o->data && !o->simulate) cli_usage_error("--data (or --simulate) is required");
  if (o->data && o->simulate) cli_usage_error("--data and --simulate exclude each other");
  if (!o->simulate && (o->pool || o->reuse || o->epoch_steps || o->spill))
    cli_usage_error("--pool, --reuse, --epoch-steps and --spill need --simulate");
  if (o->simulate && o->val_fraction >= 0) cli_usage_error("--val-fraction needs --data (with --simulate, give --val)");
  if (o->simulate && o->pool && o->pool < o->batch)
    cli_usage_error("--pool %d holds fewer samples than a --batch of %d", o->pool, o->batch);
  if (o->simulate) {
    if (!o->pool) o->pool = 4 * o->batch;
    if (!o->reuse) o->reuse = 1;
    if (!o->epoch_steps) o->epoch_steps = (int64_t)o->pool * o->reuse / o->batch;
  }
  if (o->val && o->val_fraction >= 0) cli_usage_error("--val and --val-fraction exclude each other");
  if (!o->val && o->val_fraction < 0) o->val_fraction = o->simulate ? 0 : 0.1;
  if (!o->ck.dir && (o->ck.resume || o->ck.every || o->ck.skip_nan || o->keep_best))
    cli_usage_error("--resume, --checkpoint-every, --on-nan skip and --keep-best need --checkpoint-dir");
  if (o->quiet && o->verbose) cli_usage_error("--quiet and --verbose exclude each other");
  if (!o->trace && getenv("TESSERA_TRACE") && *getenv("TESSERA_TRACE")) o->trace = getenv("TESSERA_TRACE");
}

/* tessera-train's command line (see train_opts.h): --help text, getopt_long table and the checks of
 * values and of options that need or exclude each other. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "cli.h"
#include "train_opts.h"

static void usage(void) {
  printf("Usage: %s --model MODEL.json --data TRAIN.h5 [options]\n"
         "       %s --model MODEL.json --simulate CBED.json [--val VAL.h5] [options]\n"
         "Trains the model on HDF5 data (datasets 'inputs' [N,C,H,W] and 'targets', or 'cbed' and 'potential';\n"
         "--data takes one file, a list a.h5,b.h5, a glob, X.npy:Y.npy or a folder of .npy files).\n\n"
         "  -m, --model FILE        model file (layers, loss, optimizer)\n"
         "  -d, --data FILE         training data\n"
         "      --val FILE          validation data\n"
         "      --val-fraction F    hold out the last fraction F of the training file for validation\n"
         "                          (default 0.1 without --val; 0 = no validation)\n"
         "  -e, --epochs N          passes over the training data (default 5)\n"
         "  -b, --batch N           samples per step (default 32); the last partial batch is dropped\n"
         "      --slices N          micro-batch slices per step (default 0 = one per worker)\n"
         "      --lr X              learning rate (overrides the model file)\n"
         "      --lr-scaling none|linear  multiply the learning rate by the number of ranks (default none)\n"
         "      --warmup-steps N    with linear scaling, ramp up to it over N steps (default 0)\n"
         "      --seed S            seed of initialisation, dropout and shuffling (default 1)\n"
         "      --deterministic     bitwise-reproducible runs for one seed\n"
         "      --precision P       f32 (default) or bf16: convolutions in bf16, float32 weights; fp16 on\n"
         "                          GPUs only (cuDNN; refused without a CUDA worker)\n"
         "      --grad-reduce P     f32 (default), bf16 or fp16: gradients cross ranks in that format (half\n"
         "                          the bytes), summed in float32\n"
         "      --loss-scale S      off, dynamic (halve and skip the step on overflow, double after 2000\n"
         "                          good steps; default with fp16) or a fixed scale\n"
         "      --workers N         CPU workers (default: StarPU's choice)\n"
         "      --log FILE          append one CSV row per epoch\n"
         "      --import-params P   start from parameters (.h5 file or folder of .npy files)\n"
         "      --export-params P   write the trained parameters (.h5 file or folder of .npy files)\n"
         "      --trace DIR         record a performance trace into DIR (also TESSERA_TRACE=DIR); read it\n"
         "                          with tessera-trace DIR or open DIR/trace.json in ui.perfetto.dev\n"
         "      --trace-steps A:B   trace only step ids A to B (training and validation steps count)\n"
         "      --checkpoint-dir D  write checkpoints into folder D (at the start, at every epoch end, every\n"
         "                          --checkpoint-every steps, and on SIGTERM, SIGINT (Ctrl-C) or SIGUSR1, then\n"
         "                          exit: status 0 after SIGUSR1, 130 after SIGINT, 143 after SIGTERM; a second\n"
         "                          Ctrl-C exits at once, without the checkpoint; under mpirun every rank stops\n"
         "                          after the same step, a few steps after the first rank got it: send SIGUSR1\n"
         "                          to mpirun, or raise its --mca odls_base_sigkill_timeout for Ctrl-C)\n"
         "      --checkpoint-every N  also checkpoint every N training steps\n"
         "      --keep K            keep the newest K checkpoints (default 3; 0 = all)\n"
         "      --resume            continue from the newest valid checkpoint in --checkpoint-dir (a fresh\n"
         "                          start when there is none)\n"
         "      --on-nan stop|skip  on a NaN/Inf loss or gradient: stop naming the step and layer (default),\n"
         "                          or roll back to the last checkpoint and skip that batch\n"
         "      --step-log FILE     append one CSV row per training step (step, epoch, loss; exact digits)\n"
         "      --input-dataset N   HDF5 dataset of the inputs (default: inputs, else cbed)\n"
         "      --target-dataset N  HDF5 dataset of the targets (default: targets, else potential)\n"
         "      --no-standardize    feed the inputs as stored (default: per-channel mean 0, std 1)\n"
         "      --simulate FILE     in-situ training: no --data; samples simulated by the multislice CBED\n"
         "                          simulator (settings: tessera-cbed's options as a JSON object) in the\n"
         "                          training task graph, into a pool, below training's priority\n"
         "      --pool N            with --simulate: samples held (default 4 x --batch, at least --batch)\n"
         "      --reuse R           with --simulate: reads of each simulated sample before it is\n"
         "                          replaced (default 1)\n"
         "      --epoch-steps N     with --simulate: steps per epoch (default pool x reuse / batch)\n"
         "      --spill FILE        with --simulate: also write every simulated sample to FILE (HDF5,\n"
         "                          inputs/targets/index; FILE.rankR.h5 per rank under mpirun)\n"
         "      --predict-png DIR   after training, write true | predicted | difference PNGs of the first\n"
         "                          validation samples to DIR (--predict-count, default 4)\n"
         "  -q, --quiet             only errors\n"
         "  -h, --help              this text\n",
         cli_program(), cli_program());
}

/* --trace-steps A:B (B empty: no end) or A. */
static void parse_trace_steps(const char *arg, struct train_opts *o) {
  char *end;
  const char *colon = strchr(arg, ':');
  o->trace_first = strtoll(arg, &end, 10);
  o->trace_last = colon ? (colon[1] ? strtoll(colon + 1, NULL, 10) : -1) : o->trace_first;
  if (end == arg || o->trace_first < 0 || (colon ? end != colon : *end != 0) ||
      (o->trace_last >= 0 && o->trace_last < o->trace_first))
    cli_usage_error("--trace-steps '%s': expected A:B with 0 <= A <= B (or A: or A)", arg);
}

void train_opts_parse(int argc, char **argv, struct train_opts *o) {
  enum { O_VAL = 256, O_VALF, O_SLICES, O_LR, O_SEED, O_DET, O_WORKERS, O_LOG, O_IMPORT, O_EXPORT, O_PREC };
  enum { O_TRACE = 512, O_TRACE_STEPS };
  enum { O_INDS = 1536, O_TGDS, O_NOSTD, O_PNG, O_PNGN }; /* data options */
  enum { O_CKPT_DIR = 1024, O_CKPT_EVERY, O_KEEP, O_RESUME, O_ON_NAN, O_STEP_LOG };
  enum { O_LRSCALE = 768, O_WARMUP };
  enum { O_GRADRED = 1792, O_LOSS_SCALE };
  enum { O_SIMULATE = 2048, O_POOL, O_REUSE, O_EPOCH_STEPS, O_SPILL }; /* in-situ training */
  static const struct option longopts[] = {
      {"model", required_argument, NULL, 'm'},     {"data", required_argument, NULL, 'd'},
      {"val", required_argument, NULL, O_VAL},     {"val-fraction", required_argument, NULL, O_VALF},
      {"epochs", required_argument, NULL, 'e'},    {"batch", required_argument, NULL, 'b'},
      {"slices", required_argument, NULL, O_SLICES}, {"lr", required_argument, NULL, O_LR},
      {"seed", required_argument, NULL, O_SEED},   {"deterministic", no_argument, NULL, O_DET},
      {"workers", required_argument, NULL, O_WORKERS}, {"log", required_argument, NULL, O_LOG},
      {"import-params", required_argument, NULL, O_IMPORT}, {"export-params", required_argument, NULL, O_EXPORT},
      {"trace", required_argument, NULL, O_TRACE}, {"trace-steps", required_argument, NULL, O_TRACE_STEPS},
      {"precision", required_argument, NULL, O_PREC},
      {"grad-reduce", required_argument, NULL, O_GRADRED}, {"loss-scale", required_argument, NULL, O_LOSS_SCALE},
      {"input-dataset", required_argument, NULL, O_INDS}, {"target-dataset", required_argument, NULL, O_TGDS},
      {"no-standardize", no_argument, NULL, O_NOSTD}, {"predict-png", required_argument, NULL, O_PNG},
      {"predict-count", required_argument, NULL, O_PNGN},
      {"checkpoint-dir", required_argument, NULL, O_CKPT_DIR}, {"checkpoint-every", required_argument, NULL, O_CKPT_EVERY},
      {"keep", required_argument, NULL, O_KEEP},   {"resume", no_argument, NULL, O_RESUME},
      {"on-nan", required_argument, NULL, O_ON_NAN}, {"step-log", required_argument, NULL, O_STEP_LOG},
      {"lr-scaling", required_argument, NULL, O_LRSCALE}, {"warmup-steps", required_argument, NULL, O_WARMUP},
      {"simulate", required_argument, NULL, O_SIMULATE}, {"pool", required_argument, NULL, O_POOL},
      {"reuse", required_argument, NULL, O_REUSE}, {"epoch-steps", required_argument, NULL, O_EPOCH_STEPS},
      {"spill", required_argument, NULL, O_SPILL},
      {"quiet", no_argument, NULL, 'q'},           {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  *o = (struct train_opts){.val_fraction = -1, .epochs = 5, .batch = 32, .workers = -1, .lr = -1, .seed = 1,
                           .trace_last = -1, .loss_scale = NAN};
  ckpt_init(&o->ck);
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "m:d:e:b:qh", longopts, NULL)) != -1) {
    switch (c) {
    case 'm': o->model = optarg; break;
    case 'd': o->data = optarg; break;
    case O_VAL: o->val = optarg; break;
    case O_VALF: o->val_fraction = cli_parse_float("--val-fraction", optarg, 0, 0.99); break;
    case 'e': o->epochs = cli_parse_int("--epochs", optarg, 1, 1000000); break;
    case 'b': o->batch = cli_parse_int("--batch", optarg, 1, 1 << 20); break;
    case O_SLICES: o->slices = cli_parse_int("--slices", optarg, 0, 4096); break;
    case O_LR: o->lr = cli_parse_float("--lr", optarg, 0, 1e3); break;
    case O_SEED: o->seed = cli_parse_u64("--seed", optarg); break;
    case O_DET: o->deterministic = 1; break;
    case O_PREC:
      if (strcmp(optarg, "f32") && strcmp(optarg, "bf16") && strcmp(optarg, "fp16"))
        cli_usage_error("--precision: '%s' (f32, bf16 or fp16)", optarg);
      o->precision = !strcmp(optarg, "bf16") ? TSR_PRECISION_BF16 : !strcmp(optarg, "fp16") ? TSR_PRECISION_FP16
                                                                                            : TSR_PRECISION_F32;
      break;
    case O_GRADRED:
      if (tsr_reduce_precision_parse(optarg, &o->grad_reduce)) cli_usage_error("--grad-reduce: %s", tsr_last_error());
      break;
    case O_LOSS_SCALE:
      o->loss_scale = !strcmp(optarg, "off") ? 0
                      : !strcmp(optarg, "dynamic") ? TSR_LOSS_SCALE_DYNAMIC
                                                   : cli_parse_float("--loss-scale", optarg, 1e-30, 1.7e38);
      break;
    case O_LRSCALE:
      if (strcmp(optarg, "none") && strcmp(optarg, "linear"))
        cli_usage_error("--lr-scaling: '%s' (none or linear)", optarg);
      o->lr_linear = strcmp(optarg, "linear") == 0;
      break;
    case O_WARMUP: o->warmup = cli_parse_int64("--warmup-steps", optarg, 0, INT64_C(1) << 40); break;
    case O_WORKERS: o->workers = cli_parse_int("--workers", optarg, 1, 4096); break;
    case O_LOG: o->log = optarg; break;
    case O_IMPORT: o->import_path = optarg; break;
    case O_EXPORT: o->export_path = optarg; break;
    case O_TRACE: o->trace = optarg; break;
    case O_INDS: o->input_dataset = optarg; break;
    case O_TGDS: o->target_dataset = optarg; break;
    case O_NOSTD: o->no_standardize = 1; break;
    case O_PNG: o->predict_png = optarg; break;
    case O_PNGN: o->predict_count = cli_parse_int("--predict-count", optarg, 1, 100000); break;
    case O_TRACE_STEPS: parse_trace_steps(optarg, o); break;
    case O_CKPT_DIR: o->ck.dir = optarg; break;
    case O_CKPT_EVERY: o->ck.every = cli_parse_int64("--checkpoint-every", optarg, 1, INT64_MAX); break;
    case O_KEEP: o->ck.keep = cli_parse_int("--keep", optarg, 0, 1 << 20); break;
    case O_RESUME: o->ck.resume = 1; break;
    case O_ON_NAN:
      if (strcmp(optarg, "stop") && strcmp(optarg, "skip")) cli_usage_error("--on-nan: '%s' (stop or skip)", optarg);
      o->ck.skip_nan = strcmp(optarg, "skip") == 0;
      break;
    case O_STEP_LOG: o->ck.step_log_path = optarg; break;
    case O_SIMULATE: o->simulate = optarg; break;
    case O_POOL: o->pool = cli_parse_int("--pool", optarg, 1, 1 << 24); break;
    case O_REUSE: o->reuse = cli_parse_int("--reuse", optarg, 1, 1 << 24); break;
    case O_EPOCH_STEPS: o->epoch_steps = cli_parse_int64("--epoch-steps", optarg, 1, INT64_C(1) << 40); break;
    case O_SPILL: o->spill = optarg; break;
    case 'q': o->quiet = 1; break;
    case 'h': usage(); exit(0);
    default: cli_usage_error("unknown option or missing value: %s", argv[optind - 1]);
    }
  }
  if (optind < argc) cli_usage_error("unexpected argument '%s'", argv[optind]);
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
  if (!o->ck.dir && (o->ck.resume || o->ck.every || o->ck.skip_nan))
    cli_usage_error("--resume, --checkpoint-every and --on-nan skip need --checkpoint-dir");
  if (!o->trace && getenv("TESSERA_TRACE") && *getenv("TESSERA_TRACE")) o->trace = getenv("TESSERA_TRACE");
}


/* tessera-train: trains a model file on an HDF5 data set through the public API only. Steps are
 * submitted ahead (the trainer bounds the window) and losses are read a few steps late, so the host
 * never stalls the task graph; samples are read inside load tasks through the fill callback. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "cli.h"

enum { WINDOW = 2 };                /* steps in flight; losses are read WINDOW submissions late */
enum { BASELINE_MEAN_SAMPLES = 4096 }; /* training samples averaged for the constant baseline */

struct options {
  const char *model, *data, *val, *log, *export_path, *import_path;
  double val_fraction; /* < 0: not given */
  int epochs, batch, slices, workers, deterministic, quiet;
  int precision;       /* tsr_precision */
  float lr;            /* < 0: the model file's */
  uint64_t seed;
  const char *trace;   /* --trace or TESSERA_TRACE: trace folder */
  int64_t trace_first, trace_last;
};

/* What one submitted step reads: kept alive until its loss has been read, since load tasks run later. */
struct slot {
  tsr_dataset *d;
  int64_t *idx;    /* [batch] sample indices in d */
  int64_t step;
  int pending, train, nvalid;
};

struct run {
  tsr_trainer *t;
  int batch, nslots, next;
  int64_t submitted;
  struct slot *slots;
  double train_sum, val_sum; /* this epoch */
  int64_t train_steps, val_samples;
};

/* Everything a failure must release before exiting. */
static struct {
  tsr_context *ctx;
  tsr_trainer *t;
  tsr_model *m;
  tsr_dataset *train, *val;
} live;

static void release(void) {
  tsr_trainer_destroy(live.t);
  tsr_model_destroy(live.m);
  tsr_dataset_close(live.train);
  if (live.val != live.train) tsr_dataset_close(live.val);
  tsr_context_destroy(live.ctx);
  live.t = NULL, live.m = NULL, live.train = live.val = NULL, live.ctx = NULL;
}

static void check(tsr_status s) {
  if (s == TSR_OK) return;
  char msg[1100];
  snprintf(msg, sizeof msg, "%s", tsr_last_error());
  release();
  cli_die("%s (%s)", msg, tsr_status_name(s));
}

static void usage(void) {
  printf("Usage: %s --model MODEL.json --data TRAIN.h5 [options]\n"
         "Trains the model on the HDF5 data set (datasets 'inputs' [N,C,H,W] and 'targets').\n\n"
         "  -m, --model FILE        model file (layers, loss, optimizer)\n"
         "  -d, --data FILE         training data\n"
         "      --val FILE          validation data\n"
         "      --val-fraction F    hold out the last fraction F of the training file for validation\n"
         "                          (default 0.1 without --val; 0 = no validation)\n"
         "  -e, --epochs N          passes over the training data (default 5)\n"
         "  -b, --batch N           samples per step (default 32); the last partial batch is dropped\n"
         "      --slices N          micro-batch slices per step (default 0 = one per worker)\n"
         "      --lr X              learning rate (overrides the model file)\n"
         "      --seed S            seed of initialisation, dropout and shuffling (default 1)\n"
         "      --deterministic     bitwise-reproducible runs for one seed\n"
         "      --precision P       f32 (default) or bf16: convolutions in bf16, float32 weights\n"
         "      --workers N         CPU workers (default: StarPU's choice)\n"
         "      --log FILE          append one CSV row per epoch\n"
         "      --import-params P   start from parameters (.h5 file or folder of .npy files)\n"
         "      --export-params P   write the trained parameters (.h5 file or folder of .npy files)\n"
         "      --trace DIR         record a performance trace into DIR (also TESSERA_TRACE=DIR); read it\n"
         "                          with tessera-trace DIR or open DIR/trace.json in ui.perfetto.dev\n"
         "      --trace-steps A:B   trace only step ids A to B (training and validation steps count)\n"
         "  -q, --quiet             only errors\n"
         "  -h, --help              this text\n",
         cli_program());
}

/* --trace-steps A:B (B empty: no end) or A. */
static void parse_trace_steps(const char *arg, struct options *o) {
  char *end;
  const char *colon = strchr(arg, ':');
  o->trace_first = strtoll(arg, &end, 10);
  o->trace_last = colon ? (colon[1] ? strtoll(colon + 1, NULL, 10) : -1) : o->trace_first;
  if (end == arg || o->trace_first < 0 || (colon ? end != colon : *end != 0) ||
      (o->trace_last >= 0 && o->trace_last < o->trace_first))
    cli_usage_error("--trace-steps '%s': expected A:B with 0 <= A <= B (or A: or A)", arg);
}

static void parse(int argc, char **argv, struct options *o) {
  enum { O_VAL = 256, O_VALF, O_SLICES, O_LR, O_SEED, O_DET, O_WORKERS, O_LOG, O_IMPORT, O_EXPORT, O_PREC };
  enum { O_TRACE = 512, O_TRACE_STEPS };
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
      {"quiet", no_argument, NULL, 'q'},           {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  *o = (struct options){.val_fraction = -1, .epochs = 5, .batch = 32, .workers = -1, .lr = -1, .seed = 1, .trace_last = -1};
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
      if (strcmp(optarg, "f32") && strcmp(optarg, "bf16")) cli_usage_error("--precision: '%s' (f32 or bf16)", optarg);
      o->precision = strcmp(optarg, "bf16") ? TSR_PRECISION_F32 : TSR_PRECISION_BF16;
      break;
    case O_WORKERS: o->workers = cli_parse_int("--workers", optarg, 1, 4096); break;
    case O_LOG: o->log = optarg; break;
    case O_IMPORT: o->import_path = optarg; break;
    case O_EXPORT: o->export_path = optarg; break;
    case O_TRACE: o->trace = optarg; break;
    case O_TRACE_STEPS: parse_trace_steps(optarg, o); break;
    case 'q': o->quiet = 1; break;
    case 'h': usage(); exit(0);
    default: cli_usage_error("unknown option or missing value: %s", argv[optind - 1]);
    }
  }
  if (optind < argc) cli_usage_error("unexpected argument '%s'", argv[optind]);
  if (!o->model) cli_usage_error("--model is required");
  if (!o->data) cli_usage_error("--data is required");
  if (o->val && o->val_fraction >= 0) cli_usage_error("--val and --val-fraction exclude each other");
  if (!o->val && o->val_fraction < 0) o->val_fraction = 0.1;
  if (!o->trace && getenv("TESSERA_TRACE") && *getenv("TESSERA_TRACE")) o->trace = getenv("TESSERA_TRACE");
}

/* ---- shapes ---- */

static void check_shapes(const char *path, const tsr_dataset *d, const tsr_trainer *t, const tsr_model *m) {
  int dc, dh, dw, mc, mh, mw;
  tsr_dataset_input_shape(d, &dc, &dh, &dw);
  tsr_trainer_input_shape(t, &mc, &mh, &mw);
  const char *what = "inputs", *verb = "takes";
  if (dc == mc && dh == mh && dw == mw) {
    tsr_dataset_target_shape(d, &dc, &dh, &dw);
    tsr_trainer_target_shape(t, &mc, &mh, &mw);
    what = "targets", verb = "outputs";
    if (dc == mc && dh == mh && dw == mw) return;
  }
  char msg[600];
  snprintf(msg, sizeof msg, "%s: %s have per-sample shape [%d, %d, %d] but model '%s' %s [%d, %d, %d]", path, what, dc,
           dh, dw, tsr_model_name(m), verb, mc, mh, mw);
  release();
  cli_die("%s", msg);
}

/* ---- steps ---- */

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  const struct slot *s = user;
  return tsr_dataset_read(s->d, s->idx[index], x, y) != TSR_OK; /* the trainer reports the message */
}

static void harvest(struct run *r, struct slot *s) {
  if (!s->pending) return;
  double loss;
  check(tsr_trainer_loss(r->t, s->step, &loss));
  s->pending = 0;
  if (s->train) {
    r->train_sum += loss;
    r->train_steps++;
  } else {
    r->val_sum += loss * s->nvalid;
    r->val_samples += s->nvalid;
  }
}

static struct slot *take_slot(struct run *r) {
  struct slot *s = &r->slots[r->next];
  r->next = (r->next + 1) % r->nslots;
  harvest(r, s);
  return s;
}

/* Reads the loss of the step submitted WINDOW submissions ago: the trainer has waited for it already. */
static void submitted(struct run *r, struct slot *s) {
  s->pending = 1;
  r->submitted++;
  if (r->submitted > WINDOW) harvest(r, &r->slots[(r->next + r->nslots - 1 - WINDOW) % r->nslots]);
}

static void harvest_all(struct run *r) {
  for (int i = 0; i < r->nslots; i++) harvest(r, &r->slots[(r->next + i) % r->nslots]);
}

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Fisher-Yates with a stream depending only on (seed, epoch): every rank draws the same order. */
static void shuffle(int64_t *perm, int64_t n, uint64_t seed, int epoch) {
  uint64_t key = mix64(seed ^ mix64(0x5DEECE66Dull + (uint64_t)epoch)), ctr = 0;
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    uint64_t u = mix64(key + ++ctr * 0x9E3779B97F4A7C15ull);
    int64_t j = (int64_t)(u % (uint64_t)(i + 1));
    int64_t tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
}

/* ---- mean-target baseline ---- */

/* Loss (MSE) of predicting the mean training target (the per-pixel mean image, a stronger baseline
 * than one constant) for every validation sample. *mean_out is the image's average value. */
static double baseline_mse(tsr_dataset *train, int64_t ntrain, tsr_dataset *val, int64_t vfirst, int64_t nval,
                           double *mean_out) {
  int c, h, w;
  tsr_dataset_target_shape(train, &c, &h, &w);
  size_t ye = (size_t)c * h * w;
  float *y = malloc(ye * sizeof *y);
  double *mean = calloc(ye, sizeof *mean);
  if (!y || !mean) cli_die("out of memory");
  int64_t k = ntrain < BASELINE_MEAN_SAMPLES ? ntrain : BASELINE_MEAN_SAMPLES;
  for (int64_t i = 0; i < k; i++) {
    check(tsr_dataset_read(train, i * ntrain / k, NULL, y));
    for (size_t j = 0; j < ye; j++) mean[j] += y[j];
  }
  double se = 0, avg = 0;
  for (size_t j = 0; j < ye; j++) mean[j] /= (double)k, avg += mean[j] / ye;
  for (int64_t i = 0; i < nval; i++) {
    check(tsr_dataset_read(val, vfirst + i, NULL, y));
    for (size_t j = 0; j < ye; j++) se += (y[j] - mean[j]) * (y[j] - mean[j]);
  }
  free(y);
  free(mean);
  *mean_out = avg;
  return se / ((double)nval * ye);
}

static FILE *open_log(const char *path) {
  FILE *f = fopen(path, "a");
  if (!f) {
    release();
    cli_die("%s: cannot open the log: %m", path);
  }
  fseek(f, 0, SEEK_END);
  if (ftell(f) == 0) fprintf(f, "epoch,step,train_loss,val_loss,samples_per_s,elapsed_s\n");
  return f;
}

int main(int argc, char **argv) {
  cli_set_program("tessera-train");
  struct options o;
  parse(argc, argv, &o);

  check(tsr_dataset_open(&live.train, o.data));
  int64_t nfile = tsr_dataset_size(live.train), ntrain = nfile, nval = 0, vfirst = 0;
  const char *val_name = o.val;
  if (o.val) {
    check(tsr_dataset_open(&live.val, o.val));
    nval = tsr_dataset_size(live.val);
  } else if (o.val_fraction > 0) {
    live.val = live.train;
    nval = llround(o.val_fraction * nfile);
    nval = nval < 1 ? 1 : nval;
    ntrain = nfile - nval, vfirst = ntrain;
    val_name = o.data;
  }

  tsr_optim_spec opt;
  check(tsr_model_load_json(&live.m, &opt, o.model));
  if (o.lr >= 0) opt.lr = o.lr;

  tsr_context_opts copts;
  tsr_context_opts_default(&copts);
  copts.ncpus = o.workers;
  copts.deterministic = o.deterministic;
  copts.precision = o.precision;
  copts.seed = o.seed;
  copts.verbose = o.quiet ? 0 : 1;
  check(tsr_context_create(&live.ctx, &copts, &argc, &argv));
  int rank = tsr_context_rank(live.ctx), nranks = tsr_context_size(live.ctx);
  int talk = !o.quiet && rank == 0;

  tsr_trainer_opts topts;
  tsr_trainer_opts_default(&topts);
  topts.batch = o.batch;
  topts.slices = o.slices;
  topts.window = WINDOW;
  check(tsr_trainer_create(&live.t, live.ctx, live.m, &opt, &topts));
  if (o.trace) check(tsr_trace_start(live.ctx, o.trace, o.trace_first, o.trace_last));
  check_shapes(o.data, live.train, live.t, live.m);
  if (o.val) check_shapes(o.val, live.val, live.t, live.m);
  if (o.import_path) check(tsr_params_import(live.t, o.import_path));

  int64_t steps = ntrain / ((int64_t)o.batch * nranks);
  if (steps == 0) {
    release();
    cli_die("%s: %lld training samples make no full batch of %d x %d rank(s)", o.data, (long long)ntrain, o.batch,
            nranks);
  }
  double base_mean = 0, base = nval > 0 ? baseline_mse(live.train, ntrain, live.val, vfirst, nval, &base_mean)
                                        : baseline_mse(live.train, ntrain, live.train, 0, ntrain, &base_mean);
  if (talk) {
    printf("model '%s': %d layers, %lld parameters, %.3g GFLOP per sample (forward), %s lr %g\n",
           tsr_model_name(live.m), tsr_model_num_layers(live.m), (long long)tsr_model_num_params(live.m),
           2e-9 * tsr_model_forward_flops(live.m), tsr_optim_kind_name(opt.kind), opt.lr);
    printf("data: %lld training samples (%lld steps of %d per epoch", (long long)ntrain, (long long)steps, o.batch);
    if (nranks > 1) printf(" on each of %d ranks", nranks);
    if (nval > 0)
      printf("), %lld validation samples from %s%s\n", (long long)nval, val_name, o.val ? "" : " (held out)");
    else
      printf("), no validation\n");
  }

  FILE *log = o.log && rank == 0 ? open_log(o.log) : NULL;
  struct run r = {.t = live.t, .batch = o.batch, .nslots = WINDOW + 2};
  r.slots = calloc(r.nslots, sizeof *r.slots);
  int64_t *perm = malloc(sizeof *perm * ntrain);
  for (int i = 0; r.slots && i < r.nslots; i++) r.slots[i].idx = malloc(sizeof(int64_t) * o.batch);
  if (!r.slots || !perm || !r.slots[r.nslots - 1].idx) cli_die("out of memory");

  cli_progress line;
  cli_progress_init(&line, !talk);
  double t0 = cli_now(), last_train = NAN, last_val = NAN;
  int64_t total_steps = steps * o.epochs;
  for (int ep = 1; ep <= o.epochs; ep++) {
    r.train_sum = r.val_sum = 0;
    r.train_steps = r.val_samples = 0;
    shuffle(perm, ntrain, o.seed, ep);
    double te = cli_now();
    for (int64_t st = 0; st < steps; st++) {
      struct slot *s = take_slot(&r);
      const int64_t *src = perm + (st * nranks + rank) * o.batch;
      memcpy(s->idx, src, sizeof(int64_t) * o.batch);
      s->d = live.train, s->train = 1, s->nvalid = o.batch;
      check(tsr_trainer_step(live.t, fill, s, &s->step));
      submitted(&r, s);
      double el = cli_now() - te, rate = r.train_steps / el;
      char eta[32], loss[32] = "-";
      if (r.train_steps) snprintf(loss, sizeof loss, "%.5g", r.train_sum / r.train_steps);
      double left = (double)(total_steps - ((ep - 1) * steps + st + 1));
      cli_progress_update(&line, 0, "epoch %d/%d  step %lld/%lld  loss %s  %.0f samples/s  ETA %s", ep, o.epochs,
                          (long long)st + 1, (long long)steps, loss, rate * o.batch * nranks,
                          cli_duration(rate > 0 ? left / rate : -1, eta, sizeof eta));
    }
    harvest_all(&r);
    double train_time = cli_now() - te;
    for (int64_t b = 0; b < nval; b += o.batch) {
      struct slot *s = take_slot(&r);
      s->nvalid = nval - b < o.batch ? (int)(nval - b) : o.batch;
      for (int i = 0; i < o.batch; i++) s->idx[i] = vfirst + b + (i < s->nvalid ? i : 0);
      s->d = live.val, s->train = 0;
      check(tsr_trainer_eval(live.t, fill, s, s->nvalid, &s->step));
      submitted(&r, s);
    }
    harvest_all(&r);
    cli_progress_clear(&line);
    last_train = r.train_sum / r.train_steps;
    last_val = nval > 0 ? r.val_sum / r.val_samples : NAN;
    double sps = (double)steps * o.batch * nranks / train_time, elapsed = cli_now() - t0;
    char el[32];
    if (talk) {
      printf("epoch %d/%d: train loss %.6g", ep, o.epochs, last_train);
      if (nval > 0) printf(", val loss %.6g", last_val);
      printf(", %.0f samples/s, elapsed %s\n", sps, cli_duration(elapsed, el, sizeof el));
      fflush(stdout);
    }
    if (log) {
      fprintf(log, "%d,%lld,%.9g,%.9g,%.6g,%.3f\n", ep, (long long)(ep * steps), last_train, last_val, sps, elapsed);
      fflush(log);
    }
    if (!isfinite(last_train)) {
      release();
      cli_die("epoch %d: the training loss is %g; try a lower --lr", ep, last_train);
    }
  }
  check(tsr_trainer_sync(live.t));
  if (o.trace) {
    check(tsr_trace_stop(live.ctx));
    if (talk) printf("trace written to %s (tessera-trace %s; %s/trace.json opens in ui.perfetto.dev)\n", o.trace, o.trace, o.trace);
  }
  if (talk) {
    const char *on = nval > 0 ? "validation" : "training";
    double model_loss = nval > 0 ? last_val : last_train;
    printf("baseline: predicting the mean training target image (average value %.6g) gives %s MSE %.6g; the "
           "model's %s loss is %.6g, %.1f%% of it\n",
           base_mean, on, base, on, model_loss, 100.0 * model_loss / base);
  }
  if (o.export_path) {
    check(tsr_params_export(live.t, o.export_path));
    if (talk) printf("parameters written to %s\n", o.export_path);
  }
  if (log && fclose(log) != 0) cli_die("%s: cannot write the log: %m", o.log);
  for (int i = 0; i < r.nslots; i++) free(r.slots[i].idx);
  free(r.slots);
  free(perm);
  release();
  return 0;
}

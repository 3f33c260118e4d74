/* tessera-predict: applies a trained model (its model file plus exported parameters or a checkpoint,
 * with the input normalisation they carry) to an input set and writes the outputs to HDF5 in the
 * input's order. Batches run as tasks over all workers (tsr_trainer_predict). Under mpirun each rank
 * predicts a contiguous share into OUT.part-<rank>; once every rank is done, rank 0 copies the parts
 * into OUT in rank order and removes them. With targets, prints MSE and PSNR (also stored as
 * attributes of OUT) and can draw true | predicted | difference PNGs of the first samples; with
 * --train (one rank), PSNR, SSIM and atom columns of the predictions and of two baselines computed
 * from the training data (mean target, nearest neighbour on the inputs). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "cli.h"
#include "data_meta.h"
#include "eval_metrics.h"
#include "opt_table.h"
#include "pred_out.h"
#include "predict_png.h"
#include "run_fail.h"

struct predict_opts {
  const char *model, *params, *checkpoint, *data, *out, *input_dataset, *target_dataset, *png, *config;
  int batch, workers, png_count, quiet, verbose;
  uint64_t seed;
  const char *train, *metrics, *label; /* the baselines' training data; CSV of the metrics; its row's label */
  struct eval_opts eval;
};

static void parse_pixel_size(void *opts, const char *what, const char *arg) {
  struct predict_opts *o = opts;
  eval_parse_pixel_size(what, arg, &o->eval.px, &o->eval.py);
}

static int text_pixel_size(const void *opts, char *buf, size_t cap) {
  const struct predict_opts *o = opts;
  return eval_pixel_size_text(o->eval.px, o->eval.py, buf, cap);
}

/* entries give the leading fields in order and the others by name; the rest stay zero */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define F(field) offsetof(struct predict_opts, field)
static const struct opt_def defs[] = {
    {"model", 'm', OPT_STR, F(model), "FILE", NULL, "model file the parameters were trained with; required"},
    {"params", 'p', OPT_STR, F(params), "P", NULL,
     "parameters written by tessera-train --export-params (.h5 file or folder of .npy files), with their input "
     "normalisation"},
    {"checkpoint", 0, OPT_STR, F(checkpoint), "FILE", NULL,
     "a checkpoint instead of --params (e.g. best.h5 of --keep-best; needs the run's --seed)"},
    {"data", 'd', OPT_STR, F(data), "IN", NULL,
     "inputs: an HDF5 file of tessera-datagen's format (or anything tessera-train's --data takes), or one .npy file "
     "[N, C, H, W] without targets; required"},
    {"out", 'o', OPT_STR, F(out), "OUT.h5", NULL, "output file: dataset 'predictions' [N, C', H', W']; required"},
    {"input-dataset", 0, OPT_STR, F(input_dataset), "N", NULL, "HDF5 dataset of the inputs", .deftext = "inputs, else cbed"},
    {"target-dataset", 0, OPT_STR, F(target_dataset), "N", NULL, "HDF5 dataset of the targets",
     .deftext = "targets, else potential"},
    {"batch", 'b', OPT_INT, F(batch), "N", "32", "samples per batch (split over the workers)", 1, 1 << 20},
    {"workers", 0, OPT_INT, F(workers), "N", NULL, "CPU workers", 1, 4096, -1, "StarPU's choice"},
    {"seed", 0, OPT_U64, F(seed), "S", "1", "the training run's seed (checked against a checkpoint's)"},
    {"png", 0, OPT_STR, F(png), "DIR", NULL,
     "write true | predicted | difference PNGs of the first samples to DIR (needs targets)"},
    {"png-count", 0, OPT_INT, F(png_count), "N", "4", "samples drawn by --png", 1, 100000},
    {"train", 0, OPT_STR, F(train), "DATA", NULL,
     "the model's training data (as tessera-train's --data): compare the predictions with the mean training target "
     "and the nearest neighbour on the inputs, by MSE, PSNR, SSIM and atom columns (needs targets; one rank)"},
    {"metrics", 0, OPT_STR, F(metrics), "FILE", NULL,
     "with --train: append the metrics as a CSV row (label, samples, then test_, mean_ and nn_ columns)"},
    {"label", 0, OPT_STR, F(label), "TEXT", NULL, "the --metrics row's label (no commas)", .deftext = "IN"},
    {"pixel-size", 0, OPT_CUSTOM, 0, "X[:Y]", NULL, "the targets' pixel size in angstrom for the atom-column metrics",
     .deftext = "from the data (pixel_size_A), else none", .parse = parse_pixel_size, .text = text_pixel_size},
    {"column-threshold", 0, OPT_DOUBLE, F(eval.col.threshold), "F", "0.3",
     "an atom column is a peak above min + F (max - min) of its image", 0, 0.999},
    {"column-separation", 0, OPT_DOUBLE, F(eval.col.separation), "A", "1.0",
     "atom columns are at least A angstrom apart", 0, 1e6},
    {"column-radius", 0, OPT_DOUBLE, F(eval.col.radius), "A", "0.2",
     "a predicted column within A angstrom of a true one has found it", 1e-6, 1e6},
    {"quiet", 'q', OPT_FLAG, F(quiet), NULL, NULL, "only errors"},
    {"verbose", 'v', OPT_FLAG, F(verbose), NULL, NULL, "also the library's details and StarPU's messages"},
    {"config", 0, OPT_CONFIG, F(config), "FILE", NULL, "read options from a JSON run file; the command line overrides it"},
    {"version", 'V', OPT_VERSION, 0, NULL, NULL, "print the version"},
    {"help", 'h', OPT_HELP, 0, NULL, NULL, "this text"},
};
static const struct opt_table table = {
    defs, sizeof defs / sizeof *defs, "--model MODEL.json --params P --data IN --out OUT.h5 [options]",
    "Applies a trained model to an input set and writes its outputs, in the input's order, to OUT.h5.",
    "With targets in IN, prints the MSE over all outputs and the PSNR, 10 log10(range^2 / MSE) with range the\n"
    "targets' max - min, and stores both as attributes of OUT.h5."};

/* The inputs: a loader (targets too), or one .npy file of inputs held in memory. */
struct source {
  float *npy;     /* [n, c, h, w] or NULL */
  int64_t n;
  int c, h, w, tc, th, tw; /* tc = 0: no targets */
};

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void open_source(const struct predict_opts *o, struct source *src) {
  memset(src, 0, sizeof *src);
  if (ends_with(o->data, ".npy") && !strchr(o->data, ':')) {
    tsr_shape s;
    check(tsr_npy_read(o->data, &s, &src->npy));
    if (s.ndim != 4) fail("%s: inputs must be [N, C, H, W]; this array has %d dimensions", o->data, s.ndim);
    src->n = s.dims[0], src->c = (int)s.dims[1], src->h = (int)s.dims[2], src->w = (int)s.dims[3];
    return;
  }
  tsr_loader_opts lo;
  tsr_loader_opts_default(&lo);
  lo.input_name = o->input_dataset, lo.target_name = o->target_dataset;
  lo.standardize = 0; /* the parameters carry the training run's normalisation */
  check(tsr_loader_open(&live.train, o->data, &lo));
  src->n = tsr_loader_size(live.train);
  tsr_loader_input_shape(live.train, &src->c, &src->h, &src->w);
  tsr_loader_target_shape(live.train, &src->tc, &src->th, &src->tw);
}

static void read_sample(const struct source *src, int64_t i, float *x, float *y) {
  if (src->npy) memcpy(x, src->npy + (size_t)i * src->c * src->h * src->w, sizeof(float) * src->c * src->h * src->w);
  else check(tsr_loader_read(live.train, i, x, y));
}

static void check_shapes(const struct predict_opts *o, const struct source *src) {
  int c, h, w;
  tsr_trainer_input_shape(live.t, &c, &h, &w);
  if (c != src->c || h != src->h || w != src->w)
    fail("%s: inputs have per-sample shape [%d, %d, %d] but model '%s' takes [%d, %d, %d]", o->data, src->c, src->h,
         src->w, tsr_model_name(live.m), c, h, w);
  tsr_trainer_target_shape(live.t, &c, &h, &w);
  if (src->tc && (c != src->tc || h != src->th || w != src->tw))
    fail("%s: targets have per-sample shape [%d, %d, %d] but model '%s' outputs [%d, %d, %d]", o->data, src->tc,
         src->th, src->tw, tsr_model_name(live.m), c, h, w);
}

/* Predicts samples [first, first + count) into the open output `out` (at its rows from 0), summing
 * the squared errors and the targets' range into *m when there are targets. */
static void predict_range(const struct predict_opts *o, const struct source *src, int64_t first, int64_t count,
                          struct pred_out *out, struct pred_metrics *m, struct eval *ev, tsr_metrics *em, int talk) {
  size_t xe = (size_t)src->c * src->h * src->w, ye = (size_t)out->c * out->h * out->w;
  float *x = malloc(sizeof(float) * xe * o->batch), *y = malloc(sizeof(float) * ye * o->batch),
        *p = malloc(sizeof(float) * ye * o->batch);
  if (!x || !y || !p) fail("out of memory");
  cli_progress line;
  cli_progress_init(&line, !talk);
  double t0 = cli_now();
  for (int64_t b = 0; b < count; b += o->batch) {
    int n = count - b < o->batch ? (int)(count - b) : o->batch;
    for (int i = 0; i < n; i++) read_sample(src, first + b + i, x + xe * i, src->tc ? y + ye * i : NULL);
    check(tsr_trainer_predict(live.t, x, n, p));
    char err[4400];
    if (pred_out_write(out, b, n, p, err, sizeof err)) fail("%s", err);
    if (src->tc) pred_metrics_add(m, y, p, (size_t)n * ye);
    for (int i = 0; ev && i < n; i++) eval_add(ev, em, first + b + i, p + ye * i);
    double el = cli_now() - t0;
    cli_progress_update(&line, b + n == count, "predicting %lld/%lld samples, %.0f samples/s", (long long)(b + n),
                        (long long)count, (b + n) / (el > 0 ? el : 1e-9));
  }
  cli_progress_clear(&line);
  free(x), free(y), free(p);
}

/* The model's and the baselines' metrics, printed and appended to --metrics. */
static void report_metrics(const struct predict_opts *o, const struct eval *ev, const tsr_metrics *em, int talk) {
  if (talk) {
    eval_describe(stdout, ev);
    eval_print(stdout, "model", em);
    eval_print(stdout, "baseline, mean training target", &ev->mean);
    eval_print(stdout, "baseline, nearest neighbour on the inputs", &ev->nn);
  }
  if (!o->metrics) return;
  FILE *f = fopen(o->metrics, "a");
  if (!f) fail("%s: cannot open the metrics file: %m", o->metrics);
  fseek(f, 0, SEEK_END);
  if (ftell(f) == 0) {
    fprintf(f, "label,samples,");
    eval_csv_header(f, "test_");
    fprintf(f, "\n");
  }
  fprintf(f, "%s,%lld,", o->label ? o->label : o->data, (long long)ev->n);
  eval_csv_fields(f, ev, em);
  fprintf(f, "\n");
  if (fclose(f) != 0) fail("%s: cannot write the metrics: %m", o->metrics);
}

int main(int argc, char **argv) {
  cli_set_program("tessera-predict");
  struct predict_opts o;
  memset(&o, 0, sizeof o);
  opt_parse(&table, &o, argc, argv);
  if (!o.model) cli_usage_error("--model is required");
  if (!o.data) cli_usage_error("--data is required");
  if (!o.out) cli_usage_error("--out is required");
  if (!o.params == !o.checkpoint) cli_usage_error("give the parameters: --params P or --checkpoint FILE (one of them)");
  if (o.quiet && o.verbose) cli_usage_error("--quiet and --verbose exclude each other");

  struct source src;
  open_source(&o, &src);
  if (o.png && !src.tc) cli_usage_error("--png: %s has no targets to compare with", o.data);
  if (o.train && !src.tc) cli_usage_error("--train: %s has no targets to compare with", o.data);
  if (o.metrics && !o.train) cli_usage_error("--metrics needs --train (the baselines' data)");
  if (o.label && strchr(o.label, ',')) cli_usage_error("--label '%s': no commas (it is a CSV field)", o.label);
  tsr_optim_spec opt;
  check(tsr_model_load_json(&live.m, &opt, o.model));
  tsr_context_opts copts;
  tsr_context_opts_default(&copts);
  copts.ncpus = o.workers, copts.seed = o.seed, copts.verbose = o.quiet ? 0 : o.verbose ? 2 : 1;
  check(tsr_context_create(&live.ctx, &copts, &argc, &argv));
  int rank = tsr_context_rank(live.ctx), nranks = tsr_context_size(live.ctx), talk = !o.quiet && rank == 0;
  tsr_trainer_opts topts;
  tsr_trainer_opts_default(&topts);
  topts.batch = o.batch;
  check(tsr_trainer_create(&live.t, live.ctx, live.m, &opt, &topts));
  check_shapes(&o, &src);
  if (o.params) {
    check(tsr_params_import(live.t, o.params));
  } else {
    tsr_checkpoint_meta meta;
    check(tsr_checkpoint_load(live.t, o.checkpoint, &meta));
  }
  const float *mean, *std;
  tsr_trainer_input_norm(live.t, &mean, &std);
  if (talk) {
    printf("model '%s' with %s: %lld samples from %s", tsr_model_name(live.m), o.params ? o.params : o.checkpoint,
           (long long)src.n, o.data);
    if (nranks > 1) printf(" on %d ranks", nranks);
    if (mean) printf("; input normalisation: channel 0 mean %.6g, std %.6g", mean[0], std[0]);
    else printf("; no input normalisation");
    tsr_trainer_target_norm(live.t, &mean, &std);
    if (mean) printf("; outputs turned back into target units: channel 0 mean %.6g, std %.6g\n", mean[0], std[0]);
    else printf("\n");
  }

  if (o.train && nranks > 1) fail("--train: the metrics need one rank (%d here)", nranks);
  struct eval ev;
  tsr_metrics em;
  tsr_metrics_init(&em);
  char units[256] = "";
  if (o.png) data_target_units(live.train, units, sizeof units);
  if (o.train) {
    tsr_loader_opts lo;
    tsr_loader_opts_default(&lo);
    lo.input_name = o.input_dataset, lo.target_name = o.target_dataset;
    lo.standardize = 0; /* nearest neighbours among raw inputs, as the inputs read here */
    check(tsr_loader_open(&live.val, o.train, &lo));
    int64_t nt = tsr_loader_size(live.val);
    eval_init(&ev, &o.eval, live.train, 0, src.n, live.val, 0, nt, live.val, 0, nt);
  }
  int c, h, w;
  tsr_trainer_target_shape(live.t, &c, &h, &w);
  int64_t first = src.n * rank / nranks, count = src.n * (rank + 1) / nranks - first;
  char part[4200], err[4400];
  if (nranks > 1) snprintf(part, sizeof part, "%s.part-%d", o.out, rank);
  else snprintf(part, sizeof part, "%s.tmp", o.out);
  struct pred_out out;
  struct pred_metrics m;
  pred_metrics_init(&m);
  if (pred_out_create(&out, part, count, c, h, w, err, sizeof err)) fail("%s", err);
  predict_range(&o, &src, first, count, &out, &m, o.train ? &ev : NULL, &em, talk);
  if (pred_out_close(&out, src.tc ? &m : NULL, err, sizeof err)) fail("%s", err);
  /* every rank's part is complete before rank 0 reads it (a collective call: a barrier) */
  check(tsr_context_check_same(live.ctx, "the number of input samples", &src.n, sizeof src.n));
  if (rank == 0 && nranks > 1 && pred_out_merge(o.out, nranks, src.n, c, h, w, src.tc ? &m : NULL, err, sizeof err))
    fail("%s", err);
  if (rank == 0 && nranks == 1 && rename(part, o.out) != 0) fail("%s: cannot rename %s to it: %m", o.out, part);
  if (talk) {
    printf("predictions [%lld, %d, %d, %d] written to %s\n", (long long)src.n, c, h, w, o.out);
    if (src.tc) printf("MSE %.9g, PSNR %.4f dB (target range %.6g)\n", pred_metrics_mse(&m), pred_metrics_psnr(&m),
                       m.hi - m.lo);
  }
  if (o.train) report_metrics(&o, &ev, &em, talk);
  if (o.png && rank == 0) {
    if (predict_png(live.t, live.train, 0, o.png_count, units, o.png, err, sizeof err) != 0) fail("--png: %s", err);
    if (talk) printf("true | predicted | difference PNGs of %d samples written to %s/\n",
                     (int)(src.n < o.png_count ? src.n : o.png_count), o.png);
  }
  if (o.train) eval_free(&ev);
  free(src.npy);
  release();
  return 0;
}

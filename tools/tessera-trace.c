/* tessera-trace: reads a trace folder written by tessera-train --trace (or tsr_trace_stop) and prints
 * a one-screen summary (per rank: wall time per step, critical path, computing and idle shares,
 * communication and how much of it is hidden; slowest steps; task time by operation family, layer
 * and operation), or every step's breakdown with --detail; optionally re-merges the Chrome / Paje
 * files and draws PNG plots (the timeline of a window of steps, loss curves from the CSV logs). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "cli.h"
#include "trace_plots.h"

struct options {
  const char *dir, *log, *step_log, *out_dir;
  int64_t first, last;
  int steps_chosen, merge, plots, quiet, detail;
};

static void usage(void) {
  printf("Usage: %s DIR [options]\n"
         "Summary of a trace folder written by tessera-train --trace DIR, and its pictures.\n\n"
         "      --steps A:B     report (and draw) steps A to B; A-B works too, A: means from A on\n"
         "                      (default: all; the timeline then shows three steps from the middle)\n"
         "      --detail        every step: computation by layer and operation, the whole critical path\n"
         "      --merge         rewrite DIR/trace.json (Perfetto) and DIR/trace.paje (ViTE) from DIR/rank-*.tsv\n"
         "      --plots         draw DIR/timeline.png with gnuplot: one lane per worker and two per rank\n"
         "                      for MPI transfers, operation families in colours, step starts, the\n"
         "                      critical path outlined\n"
         "      --log FILE      tessera-train's CSV log (--log): also draw loss.png (training and\n"
         "                      validation loss per epoch, the log's other columns as metrics)\n"
         "      --step-log FILE tessera-train's step log (--step-log): the training loss of every step\n"
         "                      in loss.png too\n"
         "      --out-dir D     folder of the PNG files (default DIR; created with its parents)\n"
         "  -q, --quiet         no report (with --merge or the plots)\n"
         "  -V, --version       print the version\n"
         "  -h, --help          this text\n",
         cli_program());
}

static void parse_steps(const char *arg, struct options *o) {
  char *end;
  const char *sep = strpbrk(arg, ":-");
  o->first = strtoll(arg, &end, 10);
  if (end == arg || o->first < 0 || (sep ? end != sep : *end))
    cli_usage_error("--steps '%s': expected A:B, A-B, A: or A with step numbers >= 0", arg);
  o->last = o->first;
  if (sep) {
    o->last = sep[1] ? strtoll(sep + 1, &end, 10) : -1;
    if (sep[1] && (*end || o->last < o->first)) cli_usage_error("--steps '%s': B must be a number >= A", arg);
  }
  o->steps_chosen = 1;
}

static void parse(int argc, char **argv, struct options *o) {
  enum { O_STEPS = 256, O_MERGE, O_PLOTS, O_LOG, O_STEP_LOG, O_OUT, O_DETAIL };
  static const struct option longopts[] = {
      {"steps", required_argument, NULL, O_STEPS}, {"merge", no_argument, NULL, O_MERGE},
      {"plots", no_argument, NULL, O_PLOTS},       {"log", required_argument, NULL, O_LOG},
      {"step-log", required_argument, NULL, O_STEP_LOG}, {"detail", no_argument, NULL, O_DETAIL},
      {"out-dir", required_argument, NULL, O_OUT}, {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}};
  *o = (struct options){.last = -1};
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "qhV", longopts, NULL)) != -1) {
    switch (c) {
    case O_STEPS: parse_steps(optarg, o); break;
    case O_MERGE: o->merge = 1; break;
    case O_PLOTS: o->plots = 1; break;
    case O_LOG: o->log = optarg; break;
    case O_STEP_LOG: o->step_log = optarg; break;
    case O_DETAIL: o->detail = 1; break;
    case O_OUT: o->out_dir = optarg; break;
    case 'q': o->quiet = 1; break;
    case 'h': usage(); exit(0);
    case 'V': cli_version(); exit(0);
    default: cli_usage_error("unknown option or missing value: %s", argv[optind - 1]);
    }
  }
  if (optind != argc - 1) cli_usage_error("expected one trace folder (got %d arguments)", argc - optind);
  o->dir = argv[optind];
}

int main(int argc, char **argv) {
  cli_set_program("tessera-trace");
  struct options o;
  parse(argc, argv, &o);
  int drawing = o.plots || o.log || o.step_log;
  if (drawing && o.out_dir) {
    char err[4200];
    if (cli_mkdirs(o.out_dir, err, sizeof err)) cli_die("--out-dir %s: %s", o.out_dir, err);
  }
  if (!o.out_dir) o.out_dir = o.dir;
  if (o.merge) {
    if (tsr_trace_merge(o.dir) != TSR_OK) cli_die("%s", tsr_last_error());
    printf("wrote %s/trace.json and %s/trace.paje\n", o.dir, o.dir);
  }
  if (!o.quiet) {
    tsr_trace_report_opts ro;
    tsr_trace_report_opts_default(&ro);
    ro.first_step = o.first, ro.last_step = o.last, ro.detail = o.detail;
    if (tsr_trace_report(o.dir, stdout, &ro) != TSR_OK) cli_die("%s", tsr_last_error());
    fflush(stdout);
  }
  char err[9000];
  if (o.plots && plot_timeline(o.dir, o.out_dir, o.first, o.last, o.steps_chosen, err, sizeof err)) cli_die("%s", err);
  if ((o.log || o.step_log) && plot_losses(o.log, o.step_log, o.out_dir, err, sizeof err)) cli_die("%s", err);
  return 0;
}

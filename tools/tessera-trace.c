/* tessera-trace: reads a trace folder written by tessera-train --trace (or tsr_trace_stop) and prints,
 * per step, computation by layer and operation, communication, idle time, the fraction of
 * communication hidden behind computation and the critical path; optionally re-merges the Chrome /
 * Paje files and draws PNG plots (task timeline per worker, loss curves from the CSV log) with gnuplot. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <tessera.h>

#include "cli.h"

struct options {
  const char *dir, *log, *out_dir;
  int64_t first, last;
  int merge, plots, quiet;
};

static void usage(void) {
  printf("Usage: %s DIR [options]\n"
         "Per-step breakdown of a trace folder written by tessera-train --trace DIR.\n\n"
         "      --steps A:B     report steps A to B (A: from A on; default all)\n"
         "      --merge         rewrite DIR/trace.json (Perfetto) and DIR/trace.paje (ViTE) from DIR/rank-*.tsv\n"
         "      --plots         draw DIR/timeline.png (tasks per worker) with gnuplot\n"
         "      --log FILE      tessera-train's CSV log: also draw loss.png (train and validation loss)\n"
         "      --out-dir D     folder of the PNG files (default DIR; created with its parents)\n"
         "  -q, --quiet         no report (with --merge or --plots)\n"
         "  -V, --version       print the version\n"
         "  -h, --help          this text\n",
         cli_program());
}

static void parse_steps(const char *arg, struct options *o) {
  char *end;
  const char *colon = strchr(arg, ':');
  o->first = strtoll(arg, &end, 10);
  if (end == arg || o->first < 0 || (colon ? end != colon : *end))
    cli_usage_error("--steps '%s': expected A:B, A: or A with step numbers >= 0", arg);
  o->last = o->first;
  if (colon) {
    o->last = colon[1] ? strtoll(colon + 1, &end, 10) : -1;
    if (colon[1] && (*end || o->last < o->first)) cli_usage_error("--steps '%s': B must be a number >= A", arg);
  }
}

static void parse(int argc, char **argv, struct options *o) {
  enum { O_STEPS = 256, O_MERGE, O_PLOTS, O_LOG, O_OUT };
  static const struct option longopts[] = {
      {"steps", required_argument, NULL, O_STEPS}, {"merge", no_argument, NULL, O_MERGE},
      {"plots", no_argument, NULL, O_PLOTS},       {"log", required_argument, NULL, O_LOG},
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
    case O_LOG: o->log = optarg, o->plots = 1; break;
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

/* Feeds a script to gnuplot; dies naming the plot when gnuplot is missing or fails. */
static void gnuplot(const char *script, const char *what) {
  FILE *p = popen("gnuplot 2>&1", "w");
  if (!p) cli_die("%s: cannot run gnuplot: %m", what);
  fputs(script, p);
  int st = pclose(p);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 127)
    cli_die("%s: gnuplot is not installed (Debian package gnuplot-nox)", what);
  if (WEXITSTATUS(st) != 0) cli_die("%s: gnuplot failed (status %d)", what, WEXITSTATUS(st));
}

static void plot_timeline(const struct options *o) {
  char dat[4200], png[4200], line[8192], ytics[8192] = "", ops[8192] = "";
  int rows = 1;
  snprintf(dat, sizeof dat, "%s/timeline.dat", o->out_dir);
  snprintf(png, sizeof png, "%s/timeline.png", o->out_dir);
  tsr_trace_report_opts ro;
  tsr_trace_report_opts_default(&ro);
  ro.first_step = o->first, ro.last_step = o->last, ro.timeline_data = dat;
  FILE *null = fopen("/dev/null", "w");
  if (!null || tsr_trace_report(o->dir, null, &ro) != TSR_OK) cli_die("%s", tsr_last_error());
  fclose(null);
  FILE *f = fopen(dat, "r");
  if (!f) cli_die("%s: cannot read: %m", dat);
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (!strncmp(line, "# ytics ", 8)) snprintf(ytics, sizeof ytics, "%s", line + 8);
    if (!strncmp(line, "# rows ", 7)) rows = atoi(line + 7);
    if (!strncmp(line, "# ops", 5)) snprintf(ops, sizeof ops, "%s", line + 5);
  }
  fclose(f);
  size_t cap = 16384 + strlen(ytics) + 64 * strlen(ops);
  char *s = malloc(cap);
  if (!s) cli_die("out of memory");
  int n = snprintf(s, cap,
                   "set terminal png size 1600,%d\nset output '%s'\nset termoption noenhanced\nset xlabel 'time (ms)'\nset ytics %s\n"
                   "set yrange [-0.6:%d]\nset key outside right\nset title 'tasks per worker'\n"
                   "plot '%s' using (($1+$2)/2):3:(($2-$1)/2):(0.4):($4+1) with boxxyerror fs solid 0.85 noborder "
                   "lc variable notitle",
                   rows > 8 ? 160 + 40 * rows : 480, png, ytics[0] ? ytics : "auto", rows, dat);
  int k = 1;
  for (char *tok = strtok(ops, " "); tok; tok = strtok(NULL, " "), k++)
    n += snprintf(s + n, cap - n, ", NaN with boxes fs solid lc %d title '%s'", k, tok);
  n += snprintf(s + n, cap - n, "\n");
  /* One distinct colour per operation (golden-ratio hues) instead of gnuplot's 8-colour cycle. */
  char *types = malloc(64 * (size_t)k + 64);
  if (!types) cli_die("out of memory");
  int m = 0;
  types[0] = 0;
  for (int i = 1; i < k; i++) {
    double h = fmod(0.13 + 0.618034 * i, 1.0) * 6, v = 0.85, sat = i % 2 ? 0.75 : 0.5, c = v * sat;
    double x = c * (1 - fabs(fmod(h, 2) - 1)), r = 0, g = 0, b = 0;
    int sector = (int)h;
    if (sector == 0) r = c, g = x; else if (sector == 1) r = x, g = c; else if (sector == 2) g = c, b = x;
    else if (sector == 3) g = x, b = c; else if (sector == 4) r = x, b = c; else r = c, b = x;
    m += snprintf(types + m, 64, "set linetype %d lc rgb '#%02x%02x%02x'\n", i, (int)(255 * (r + v - c)),
                  (int)(255 * (g + v - c)), (int)(255 * (b + v - c)));
  }
  char *full = malloc(strlen(types) + strlen(s) + 1);
  if (!full) cli_die("out of memory");
  strcpy(full, types);
  strcat(full, s);
  free(types);
  free(s);
  s = full;
  gnuplot(s, png);
  free(s);
  printf("wrote %s\n", png);
}

static void plot_loss(const struct options *o) {
  char png[4200], s[9000];
  snprintf(png, sizeof png, "%s/loss.png", o->out_dir);
  FILE *f = fopen(o->log, "r");
  if (!f) cli_die("%s: cannot read the CSV log: %m", o->log);
  char head[256] = "";
  if (!fgets(head, sizeof head, f) || strncmp(head, "epoch,step,train_loss,val_loss", 30))
    cli_die("%s: not a tessera-train log (first line should start with epoch,step,train_loss,val_loss)", o->log);
  fclose(f);
  snprintf(s, sizeof s,
           "set terminal png size 1000,600\nset output '%s'\nset termoption noenhanced\nset datafile separator ','\nset xlabel 'step'\n"
           "set ylabel 'loss'\nset logscale y\nset title 'loss'\n"
           "plot '%s' every ::1 using 2:3 with linespoints title 'train', '' every ::1 using 2:4 with linespoints "
           "title 'validation'\n",
           png, o->log);
  gnuplot(s, png);
  printf("wrote %s\n", png);
}

int main(int argc, char **argv) {
  cli_set_program("tessera-trace");
  struct options o;
  parse(argc, argv, &o);
  if (o.plots && o.out_dir) {
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
    ro.first_step = o.first, ro.last_step = o.last;
    if (tsr_trace_report(o.dir, stdout, &ro) != TSR_OK) cli_die("%s", tsr_last_error());
  }
  if (o.plots) plot_timeline(&o);
  if (o.log) plot_loss(&o);
  return 0;
}

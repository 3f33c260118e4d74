/* tessera-trace's pictures (see trace_plots.h): the timeline of a window of steps and the loss curves
 * of a run, drawn with gnuplot from the library's timeline data and tessera-train's CSV logs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "gnuplot.h"
#include "trace_plots.h"

/* Colours of the operation families (tsr_trace_report_opts.timeline_data numbers them), chosen to be
 * told apart at a glance: forward blues and greens, backward oranges and reds, the rest apart. */
static const char *const family_colour[] = {"#e377c2", "#1f77b4", "#ff7f0e", "#d62728", "#2ca02c",
                                            "#bcbd22", "#9467bd", "#17becf", "#8c564b", "#7f7f7f"};
enum { NCOLOURS = sizeof family_colour / sizeof *family_colour, MAX_FAMILIES = 32, MAX_STEPS = 4096 };

struct tl_data {
  int rows, nfam, ntasks, nxfers, nsteps;
  char ytics[65536], fam[MAX_FAMILIES][64];
  int fam_used[MAX_FAMILIES];
  double t_lo, t_hi, step_begin[MAX_STEPS];
  long long step_id[MAX_STEPS];
};

static int read_tl(const char *path, struct tl_data *d, char *err, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return snprintf(err, cap, "%s: cannot read the timeline data", path), -1;
  memset(d, 0, sizeof *d);
  d->t_lo = INFINITY, d->t_hi = -INFINITY;
  char *line = NULL;
  size_t lcap = 0;
  int block = 0, blanks = 0;
  while (getline(&line, &lcap, f) > 0) {
    line[strcspn(line, "\n")] = 0;
    if (!line[0]) {
      if (++blanks == 2) block++, blanks = 0;
      continue;
    }
    blanks = 0;
    if (!strncmp(line, "# rows ", 7)) d->rows = atoi(line + 7);
    if (!strncmp(line, "# ytics (", 9)) snprintf(d->ytics, sizeof d->ytics, "%s", line + 9);
    if (!strncmp(line, "# families ", 11))
      for (char *sv, *t = strtok_r(line + 11, "|", &sv); t && d->nfam < MAX_FAMILIES; t = strtok_r(NULL, "|", &sv))
        snprintf(d->fam[d->nfam++], sizeof d->fam[0], "%s", t);
    if (line[0] == '#') continue;
    double a, b, c;
    if (sscanf(line, "%lf %lf %lf", &a, &b, &c) != 3) continue;
    d->t_lo = fmin(d->t_lo, a), d->t_hi = fmax(d->t_hi, b);
    if (block == 0) {
      int fam = 0;
      if (sscanf(line, "%*f %*f %*d %d", &fam) == 1 && fam >= 0 && fam < MAX_FAMILIES) d->fam_used[fam]++;
      d->ntasks++;
    } else if (block == 1) {
      d->nxfers++;
    } else if (d->nsteps < MAX_STEPS) {
      d->step_begin[d->nsteps] = a, d->step_id[d->nsteps++] = (long long)c;
    }
  }
  free(line);
  fclose(f);
  if (!d->ntasks) return snprintf(err, cap, "%s: no task in the chosen steps", path), -1;
  return 0;
}

static int write_tl_data(const char *dir, const char *dat, int64_t first, int64_t last, char *err, size_t cap) {
  tsr_trace_report_opts ro;
  tsr_trace_report_opts_default(&ro);
  ro.first_step = first, ro.last_step = last, ro.timeline_data = dat;
  FILE *null = fopen("/dev/null", "w");
  tsr_status s = null ? tsr_trace_report(dir, null, &ro) : TSR_ERR_IO;
  if (null) fclose(null);
  if (s != TSR_OK) return snprintf(err, cap, "%s", null ? tsr_last_error() : "cannot open /dev/null"), -1;
  return 0;
}

int plot_timeline(const char *dir, const char *out_dir, int64_t first, int64_t last, int chosen, char *err, size_t cap) {
  char dat[4200], png[4200], q[8600];
  snprintf(dat, sizeof dat, "%s/timeline.dat", out_dir);
  snprintf(png, sizeof png, "%s/timeline.png", out_dir);
  struct tl_data *d = malloc(sizeof *d);
  if (!d) return snprintf(err, cap, "out of memory"), -1;
  int rc = write_tl_data(dir, dat, first, last, err, cap) || read_tl(dat, d, err, cap) ? -1 : 0;
  /* a whole run's timeline is a barcode: without --steps, three steps from the middle of the trace */
  if (!rc && !chosen && d->nsteps > 3) {
    first = d->step_id[d->nsteps / 2 - 1], last = d->step_id[d->nsteps / 2 + 1];
    rc = write_tl_data(dir, dat, first, last, err, cap) || read_tl(dat, d, err, cap) ? -1 : 0;
  }
  if (!rc && d->nsteps) { /* the title names the steps drawn */
    first = first > d->step_id[0] ? first : d->step_id[0];
    last = last >= 0 && last < d->step_id[d->nsteps - 1] ? last : d->step_id[d->nsteps - 1];
  }
  struct gp g;
  if (!rc && gp_open(&g, 1600, d->rows > 7 ? 120 + 45 * (d->rows + 1) : 480)) {
    snprintf(err, cap, "out of memory");
    rc = -1;
  }
  if (rc) return free(d), rc;
  FILE *s = g.f;
  fprintf(s, "set output %s\n", gp_quote(png, q, sizeof q));
  fprintf(s, "set title 'steps %lld to %lld: tasks on each worker, MPI transfers of each rank; black strips: the "
             "critical path of each step; dashed lines: step starts'\n", (long long)first, (long long)last);
  fprintf(s, "set xlabel 'time (ms)'\nset ytics (\"steps\" -1, %s\nset yrange [%g:-1.6]\n", d->ytics, d->rows - 0.4);
  double pad = 0.01 * (d->t_hi - d->t_lo);
  fprintf(s, "set xrange [%g:%g]\nset grid xtics lc rgb '#e0e0e0'\n", d->t_lo - pad, d->t_hi + pad);
  fprintf(s, "set key outside right top vertical Left reverse samplen 1.5 spacing 1.3 title 'operation family'\n");
  for (int i = 0; i < d->nsteps; i++)
    fprintf(s, "set arrow from %g, graph 0 to %g, graph 1 nohead dt 2 lw 1 lc rgb '#606060' back\n", d->step_begin[i],
            d->step_begin[i]);
  /* a line under each rank's lanes (after its "MPI recv" lane) */
  for (const char *p = strstr(d->ytics, "MPI recv\" "); p; p = strstr(p + 1, "MPI recv\" ")) {
    int row = atoi(p + 10);
    if (row + 1 < d->rows) fprintf(s, "set arrow from graph 0, first %g to graph 1, first %g nohead lc rgb '#909090' back\n",
                                   row + 0.5, row + 0.5);
  }
  const char *src = gp_quote(dat, q, sizeof q);
  fprintf(s, "plot ");
  for (int k = 0; k < d->nfam; k++)
    if (d->fam_used[k])
      fprintf(s, "%s index 'tasks:' using (($4==%d)?($1+$2)/2:1/0):3:(($2-$1)/2):(0.38) with boxxyerror fs solid 1.0 noborder "
                 "lc rgb '%s' title '%s', \\\n  ", src, k, family_colour[k % NCOLOURS], d->fam[k]);
  /* a black strip along the top of each task on a critical path: outlines would hide the colours */
  fprintf(s, "%s index 'tasks:' using (($5==1)?($1+$2)/2:1/0):($3-0.32):(($2-$1)/2):(0.07) with boxxyerror fs solid 1.0 "
             "noborder lc rgb 'black' title 'critical path (strip on top)', \\\n  ", src);
  if (d->nxfers) /* posted receives wait long, so the bars overlap: the ticks show when each completed */
    fprintf(s, "%s index 'transfers:' using (($1+$2)/2):3:(($2-$1)/2):(0.3) with boxxyerror fs transparent solid 0.15 "
               "noborder lc rgb '#202080' title 'MPI transfer, post to completion', \\\n  "
               "%s index 'transfers:' using 2:($3-0.3):(0):(0.6) with vectors nohead lw 1 lc rgb '#000060' "
               "title 'MPI transfer completed', \\\n  ", src, src);
  fprintf(s, "%s index 'steps:' using (($1+$2)/2):(int($3)%%2?-0.8:-1.2):(($2-$1)/2):(0.17) with boxxyerror fs solid 0.35 "
             "border lc rgb '#606060' lc rgb '#b8b8b8' title 'step (first start to last end)', \\\n  ", src);
  fprintf(s, "%s index 'steps:' using (($1+$2)/2):(int($3)%%2?-0.8:-1.2):(sprintf('step %%d', int($3))) with labels "
             "font ',9' notitle\n", src);
  free(d);
  rc = gp_run(&g, png, err, cap);
  if (!rc) printf("wrote %s (steps %lld to %lld)\n", png, (long long)first, (long long)last);
  return rc;
}

/* ---- loss curves ---- */

struct csv {
  int ncols, rows;
  char cols[16][48];
  int has_value[16]; /* some row holds a finite number there */
};

/* Reads a CSV log's header and notes which columns hold numbers. */
static int read_csv(const char *path, struct csv *c, char *err, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return snprintf(err, cap, "%s: cannot read the log", path), -1;
  memset(c, 0, sizeof *c);
  char line[4096];
  if (!fgets(line, sizeof line, f)) {
    fclose(f);
    return snprintf(err, cap, "%s: empty log", path), -1;
  }
  line[strcspn(line, "\r\n")] = 0;
  for (char *sv, *t = strtok_r(line, ",", &sv); t && c->ncols < 16; t = strtok_r(NULL, ",", &sv))
    snprintf(c->cols[c->ncols++], sizeof c->cols[0], "%s", t);
  while (fgets(line, sizeof line, f)) {
    c->rows++;
    int k = 0;
    for (char *sv, *t = strtok_r(line, ",", &sv); t && k < c->ncols; t = strtok_r(NULL, ",", &sv), k++)
      if (isfinite(strtod(t, NULL))) c->has_value[k] = 1;
  }
  fclose(f);
  return 0;
}

static int col(const struct csv *c, const char *name) {
  for (int k = 0; k < c->ncols; k++)
    if (!strcmp(c->cols[k], name)) return k + 1;
  return 0;
}

int plot_losses(const char *log, const char *step_log, const char *out_dir, char *err, size_t cap) {
  struct csv e = {0}, st = {0};
  if (log && read_csv(log, &e, err, cap)) return -1;
  if (step_log && read_csv(step_log, &st, err, cap)) return -1;
  if (log && (!col(&e, "epoch") || !col(&e, "step") || !col(&e, "train_loss")))
    return snprintf(err, cap, "%s: not a tessera-train log (its header should hold epoch, step and train_loss)", log), -1;
  if (step_log && (!col(&st, "step") || !col(&st, "train_loss")))
    return snprintf(err, cap, "%s: not a tessera-train step log (its header should hold step and train_loss)", step_log), -1;
  /* every other numeric column of the epoch log is a metric with a panel of its own (at most 3); not
   * the validation MSE (the loss, mostly) nor the baselines' figures (the same every epoch) */
  int metric[3], nm = 0;
  for (int k = 0; log && k < e.ncols && nm < 3; k++) {
    const char *n = e.cols[k];
    if (e.has_value[k] && strcmp(n, "epoch") && strcmp(n, "step") && strcmp(n, "train_loss") && strcmp(n, "val_loss") &&
        strcmp(n, "elapsed_s") && strcmp(n, "val_mse") && strncmp(n, "mean_", 5) && strncmp(n, "nn_", 3))
      metric[nm++] = k + 1;
  }
  char png[4200], q[8600], q2[8600];
  snprintf(png, sizeof png, "%s/loss.png", out_dir);
  struct gp g;
  if (gp_open(&g, 1100, 560 + 230 * nm)) return snprintf(err, cap, "out of memory"), -1;
  FILE *s = g.f;
  fprintf(s, "set output %s\nset datafile separator ','\nset datafile columnheaders\n", gp_quote(png, q, sizeof q));
  fprintf(s, "set multiplot title 'training run: loss per step and per epoch%s'\n", nm ? ", and metrics per epoch" : "");
  /* the loss panel on top, the metric panels stacked under it, the title above all */
  double top = nm ? 0.6 : 0.96, h = nm ? (0.96 - top) / nm : 0;
  fprintf(s, "set lmargin 12\nset rmargin 4\nset origin 0,%g\nset size 1,%g\n", nm * h, top);
  fprintf(s, "set xrange [0:*]\nset logscale y\nset ylabel 'loss (log scale)'\nset xlabel 'training step'\nset grid\n"
             "set key top right box opaque\n");
  if (log) { /* epoch ends: dotted lines at the step each epoch row was logged at */
    FILE *f = fopen(log, "r");
    char line[4096];
    int row = 0, cs = col(&e, "step"), ce = col(&e, "epoch");
    while (f && fgets(line, sizeof line, f))
      if (row++) {
        char *sv, *t = strtok_r(line, ",", &sv);
        double stepv = NAN, ep = NAN;
        for (int k = 1; t; t = strtok_r(NULL, ",", &sv), k++)
          if (k == cs) stepv = strtod(t, NULL); else if (k == ce) ep = strtod(t, NULL);
        if (isfinite(stepv))
          fprintf(s, "set arrow from %g, graph 0 to %g, graph 1 nohead dt 3 lc rgb '#a0a0a0' back\n"
                     "set label 'epoch %g' at %g, graph 0.03 right offset -0.3,0 font ',8' tc rgb '#808080'\n",
                  stepv, stepv, ep, stepv);
      }
    if (f) fclose(f);
  }
  const char *sep = "plot ";
  if (step_log) {
    fprintf(s, "%s%s using %d:%d with lines lw 1 lc rgb '#9ecae1' title 'training loss, each step'", sep,
            gp_quote(step_log, q2, sizeof q2), col(&st, "step"), col(&st, "train_loss"));
    sep = ", \\\n  ";
  }
  if (log) {
    gp_quote(log, q2, sizeof q2);
    fprintf(s, "%s%s using %d:%d with linespoints pt 7 ps 1.2 lw 2 lc rgb '#1f77b4' title 'training loss, epoch mean'",
            sep, q2, col(&e, "step"), col(&e, "train_loss"));
    if (col(&e, "val_loss") && e.has_value[col(&e, "val_loss") - 1])
      fprintf(s, ", \\\n  %s using %d:%d with linespoints pt 5 ps 1.2 lw 2 lc rgb '#ff7f0e' title 'validation loss'",
              q2, col(&e, "step"), col(&e, "val_loss"));
  }
  fputc('\n', s);
  fprintf(s, "unset logscale y\nunset arrow\nunset label\nunset key\n");
  for (int i = 0; i < nm; i++) {
    const char *name = e.cols[metric[i] - 1];
    char label[128];
    snprintf(label, sizeof label, "%s (each epoch)", name);
    fprintf(s, "set origin 0,%g\nset size 1,%g\nset ylabel %s\n", (nm - 1 - i) * h, h, gp_quote(label, q, sizeof q));
    fprintf(s, "plot %s using %d:%d with linespoints pt 7 lw 2 lc rgb '#2ca02c' notitle\n", q2, col(&e, "step"),
            metric[i]);
  }
  fprintf(s, "unset multiplot\n");
  int rc = gp_run(&g, png, err, cap);
  if (!rc) printf("wrote %s\n", png);
  return rc;
}

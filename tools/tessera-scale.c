/* tessera-scale: predicts how a traced training run scales (replaying its task graph on a machine
 * file for several rank counts, tsr_scale_predict), prints the cost of one reduction per model, and
 * measures a machine's link under mpirun (--calibrate) into a machine file. docs/scaling.md. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "cli.h"

enum { MAX_RANKS = 64 };

struct options {
  const char *trace, *machine, *algo, *out, *save, *from_trace, *name, *link, *progress;
  int ranks[MAX_RANKS], nranks, out_ranks, trace_rank, calibrate, cost, csv, reps, per_node, quiet;
  int64_t first, last, sizes[32];
  int nsizes;
  double bytes;
};

static void usage(void) {
  printf("Usage: %s TRACE_DIR --machine M.json [--ranks 1,2,4] [options]     predict\n"
         "       %s --cost --machine M.json --bytes B [--ranks ...]              one reduction's time\n"
         "       mpirun -np 2 %s --calibrate --save M.json [options]            measure a link\n"
         "Replays the training steps of a trace (tessera-train --trace, 3 or more steps) on the machine of\n"
         "M.json for each rank count: predicted time per step, efficiency against one rank, and per\n"
         "gradient group the reduction's time and the part of it not hidden by computation.\n\n"
         "  -m, --machine FILE    machine file (docs/scaling.md); default: built-in defaults\n"
         "  -r, --ranks LIST      rank counts, comma-separated (default 1)\n"
         "  -a, --algo NAME       reduction cost model (default f32; --list shows them; best: cheapest exact)\n"
         "      --steps A:B       replay training steps A to B (default: all traced but the first)\n"
         "      --trace-rank R    replay rank R of the trace (default: the slowest: workers busy longest)\n"
         "  -o, --out DIR         write the predicted timeline (raw files, trace.json, trace.paje) into\n"
         "                        DIR (DIR/ranks-P with several rank counts); read it with tessera-trace DIR\n"
         "      --out-ranks N     ranks written there (default 4)\n"
         "      --csv             one line per rank count: ranks,predicted_us,measured_us,step1_us,efficiency\n"
         "      --list            the reduction cost models\n"
         "      --cost            print one reduction's time (--bytes B of float32 gradients) per model\n"
         "      --bytes B         group size for --cost\n"
         "      --calibrate       measure the link between ranks 0 and 1 (ping-pong and streaming)\n"
         "      --save FILE       machine file written by --calibrate\n"
         "      --link inter|intra|timeslice  what of the machine file --calibrate sets (default inter;\n"
         "                        timeslice: ranks 0 and 1 on one core, the ping-pong beyond intra latency)\n"
         "      --from-trace DIR  workers, dispatch time per task and sum/pack rates from a traced run: with\n"
         "                        --calibrate, or alone with --save (into the file), or when predicting\n"
         "                        (over the machine file's; the replayed trace itself: the same load)\n"
         "      --sizes LIST      message sizes in bytes for --calibrate (default 8,1024,...,4194304)\n"
         "      --reps N          repetitions per size (default 20)\n"
         "      --ranks-per-node K  ranks_per_node written by --calibrate\n"
         "      --name S          machine name written by --calibrate\n"
         "      --progress worker|thread  who moves the reductions' messages (TESSERA_MPI_PROGRESS of the run),\n"
         "                        over the machine file's `progress` (default worker: worker 0 between tasks)\n"
         "  -q, --quiet           only the figures\n"
         "  -h, --help            this text\n"
         "  -V, --version         print the version\n",
         cli_program(), cli_program(), cli_program());
}

static int parse_list(const char *opt, const char *arg, int64_t *v, int max, int64_t lo, int64_t hi) {
  int n = 0;
  char *copy = strdup(arg), *sv = NULL;
  if (!copy) cli_die("out of memory");
  for (char *t = strtok_r(copy, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
    if (n == max) cli_usage_error("%s: at most %d values", opt, max);
    v[n++] = cli_parse_int64(opt, t, lo, hi);
  }
  free(copy);
  if (!n) cli_usage_error("%s: expected a comma-separated list", opt);
  return n;
}

static void parse(int argc, char **argv, struct options *o) {
  enum {
    O_STEPS = 256,
    O_OUTR,
    O_CSV,
    O_LIST,
    O_COST,
    O_BYTES,
    O_CAL,
    O_SAVE,
    O_LINK,
    O_FROM,
    O_SIZES,
    O_REPS,
    O_RPN,
    O_NAME,
    O_TRANK,
    O_PROG
  };
  static const struct option lo[] = {{"machine", required_argument, NULL, 'm'},
                                     {"ranks", required_argument, NULL, 'r'},
                                     {"algo", required_argument, NULL, 'a'},
                                     {"steps", required_argument, NULL, O_STEPS},
                                     {"trace-rank", required_argument, NULL, O_TRANK},
                                     {"out", required_argument, NULL, 'o'},
                                     {"out-ranks", required_argument, NULL, O_OUTR},
                                     {"csv", no_argument, NULL, O_CSV},
                                     {"list", no_argument, NULL, O_LIST},
                                     {"cost", no_argument, NULL, O_COST},
                                     {"bytes", required_argument, NULL, O_BYTES},
                                     {"calibrate", no_argument, NULL, O_CAL},
                                     {"save", required_argument, NULL, O_SAVE},
                                     {"link", required_argument, NULL, O_LINK},
                                     {"from-trace", required_argument, NULL, O_FROM},
                                     {"sizes", required_argument, NULL, O_SIZES},
                                     {"reps", required_argument, NULL, O_REPS},
                                     {"ranks-per-node", required_argument, NULL, O_RPN},
                                     {"name", required_argument, NULL, O_NAME},
                                     {"progress", required_argument, NULL, O_PROG},
                                     {"quiet", no_argument, NULL, 'q'},
                                     {"help", no_argument, NULL, 'h'},
                                     {"version", no_argument, NULL, 'V'},
                                     {NULL, 0, NULL, 0}};
  *o = (struct options){.algo = "f32",
                        .out_ranks = 4,
                        .first = -1,
                        .last = -1,
                        .reps = 20,
                        .link = "inter",
                        .ranks = {1},
                        .nranks = 1,
                        .trace_rank = -1};
  int64_t v[MAX_RANKS];
  char *end;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "m:r:a:o:qhV", lo, NULL)) != -1) {
    switch (c) {
    case 'm':
      o->machine = optarg;
      break;
    case 'r':
      o->nranks = parse_list("--ranks", optarg, v, MAX_RANKS, 1, 1 << 24);
      for (int i = 0; i < o->nranks; i++) o->ranks[i] = (int)v[i];
      break;
    case 'a':
      o->algo = optarg;
      break;
    case O_STEPS:
      o->first = strtoll(optarg, &end, 10);
      o->last = *end == ':' ? (end[1] ? strtoll(end + 1, &end, 10) : -1) : o->first;
      if (*end && *end != ':') cli_usage_error("--steps '%s': expected A:B", optarg);
      if (o->first < 0 || (o->last >= 0 && o->last < o->first + 1))
        cli_usage_error("--steps '%s': need 0 <= A < B (at least 2 steps)", optarg);
      break;
    case 'o':
      o->out = optarg;
      break;
    case O_TRANK:
      o->trace_rank = cli_parse_int("--trace-rank", optarg, 0, 1 << 20);
      break;
    case O_OUTR:
      o->out_ranks = cli_parse_int("--out-ranks", optarg, 1, 1024);
      break;
    case O_CSV:
      o->csv = 1;
      break;
    case O_LIST:
      for (int i = 0;; i++) {
        const char *about, *n = tsr_scale_algo_name(i, &about);
        if (!n) break;
        printf("%-10s %s\n", n, about);
      }
      printf("%-10s the cheapest of the exact (float32) models, per group\n", "best");
      exit(0);
    case O_COST:
      o->cost = 1;
      break;
    case O_BYTES:
      o->bytes = cli_parse_float("--bytes", optarg, 1, 1e15);
      break;
    case O_CAL:
      o->calibrate = 1;
      break;
    case O_SAVE:
      o->save = optarg;
      break;
    case O_LINK:
      if (strcmp(optarg, "inter") && strcmp(optarg, "intra") && strcmp(optarg, "timeslice"))
        cli_usage_error("--link: inter, intra or timeslice, not '%s'", optarg);
      o->link = optarg;
      break;
    case O_FROM:
      o->from_trace = optarg;
      break;
    case O_SIZES:
      o->nsizes = parse_list("--sizes", optarg, o->sizes, 32, 1, 1 << 30);
      break;
    case O_REPS:
      o->reps = cli_parse_int("--reps", optarg, 1, 100000);
      break;
    case O_RPN:
      o->per_node = cli_parse_int("--ranks-per-node", optarg, 1, 1 << 20);
      break;
    case O_NAME:
      o->name = optarg;
      break;
    case O_PROG:
      if (strcmp(optarg, "worker") && strcmp(optarg, "thread"))
        cli_usage_error("--progress: worker or thread, not '%s'", optarg);
      o->progress = optarg;
      break;
    case 'q':
      o->quiet = 1;
      break;
    case 'h':
      usage();
      exit(0);
    case 'V':
      cli_version();
      exit(0);
    default:
      cli_usage_error("unknown option or missing value: %s", argv[optind - 1]);
    }
  }
  if (o->calibrate || o->cost || (o->save && o->from_trace)) {
    if (optind != argc) cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (o->cost && !o->bytes) cli_usage_error("--cost needs --bytes");
    if (o->calibrate && !o->save) cli_usage_error("--calibrate needs --save FILE");
    return;
  }
  if (optind != argc - 1) cli_usage_error("expected one trace folder (got %d arguments)", argc - optind);
  o->trace = argv[optind];
}

static void check(tsr_status s) {
  if (s != TSR_OK) cli_die("%s", tsr_last_error());
}

static void calibrate(const struct options *o, tsr_machine *m, int *argc, char ***argv) {
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.use_mpi = 1;
  co.ncpus = 1;
  co.verbose = 0;
  tsr_context *ctx;
  check(tsr_context_create(&ctx, &co, argc, argv));
  tsr_link *l = strcmp(o->link, "intra") ? &m->inter : &m->intra;
  int rank = tsr_context_rank(ctx);
  FILE *log = rank == 0 && !o->quiet ? stdout : NULL;
  tsr_status st = strcmp(o->link, "timeslice")
                      ? tsr_scale_calibrate(ctx, o->nsizes ? o->sizes : NULL, o->nsizes, o->reps, l, log)
                      : tsr_scale_calibrate_timeslice(ctx, o->reps, m->intra.latency_us, &m->timeslice_us, log);
  tsr_context_destroy(ctx);
  check(st);
  if (rank != 0) exit(0);
}

int main(int argc, char **argv) {
  cli_set_program("tessera-scale");
  struct options o;
  parse(argc, argv, &o);
  tsr_machine m;
  tsr_machine_default(&m);
  if (o.machine) check(tsr_machine_load(o.machine, &m));
  if (o.progress) m.progress = strcmp(o.progress, "thread") ? TSR_MPI_PROGRESS_WORKER : TSR_MPI_PROGRESS_THREAD;
  if (o.from_trace && !o.calibrate && !o.save) check(tsr_machine_from_trace(o.from_trace, &m));
  if (o.calibrate || (o.save && o.from_trace)) {
    if (o.calibrate) calibrate(&o, &m, &argc, &argv);
    if (o.from_trace) check(tsr_machine_from_trace(o.from_trace, &m));
    if (o.name) snprintf(m.name, sizeof m.name, "%s", o.name);
    if (o.per_node) m.ranks_per_node = o.per_node;
    check(tsr_machine_save(o.save, &m));
    if (!o.quiet) printf("wrote %s\n", o.save);
    return 0;
  }
  if (o.cost) {
    printf("%-10s", "ranks");
    for (int i = 0; tsr_scale_algo_name(i, NULL); i++) printf(" %12s", tsr_scale_algo_name(i, NULL));
    printf("   (us for %.0f bytes on %s)\n", o.bytes, m.name);
    for (int r = 0; r < o.nranks; r++) {
      printf("%-10d", o.ranks[r]);
      for (int i = 0; tsr_scale_algo_name(i, NULL); i++) {
        double us;
        check(tsr_scale_collective_us(&m, tsr_scale_algo_name(i, NULL), o.bytes, o.ranks[r], &us));
        printf(" %12.1f", us);
      }
      printf("\n");
    }
    return 0;
  }
  if (o.csv) printf("ranks,predicted_us,measured_us,step1_us,efficiency\n");
  for (int r = 0; r < o.nranks; r++) {
    tsr_scale_opts so;
    tsr_scale_opts_default(&so);
    so.ranks = o.ranks[r], so.algo = o.algo, so.first_step = o.first, so.last_step = o.last;
    so.out_ranks = o.out_ranks, so.trace_rank = o.trace_rank;
    char dir[4096];
    if (o.out) {
      if (o.nranks > 1)
        snprintf(dir, sizeof dir, "%s/ranks-%d", o.out, o.ranks[r]);
      else
        snprintf(dir, sizeof dir, "%s", o.out);
      char err[512];
      if (cli_mkdirs(dir, err, sizeof err)) cli_die("%s", err);
      so.out_dir = dir;
    }
    tsr_scale_result res;
    check(tsr_scale_predict(o.trace, &m, &so, &res));
    if (o.csv) {
      printf("%d,%.1f,%.1f,%.1f,%.4f\n", res.ranks, res.step_us, res.measured_us, res.step1_us, res.efficiency);
    } else {
      printf("ranks %d on %s (%d workers/rank, %d steps of trace rank %d, model %s): predicted %.3f ms/step, "
             "efficiency %.3f (1 rank: %.3f ms/step; the trace itself: %.3f ms/step)\n",
             res.ranks, m.name, res.workers, res.nsteps, res.trace_rank, o.algo, res.step_us / 1e3, res.efficiency,
             res.step1_us / 1e3, res.measured_us / 1e3);
      if (!o.quiet && res.ranks > 1) {
        printf("  %5s %12s %10s %12s %12s\n", "group", "bytes", "model", "reduce ms", "exposed ms");
        for (int g = 0; g < res.ngroups; g++)
          printf("  %5d %12.0f %10s %12.3f %12.3f\n", g, res.groups[g].bytes,
                 res.groups[g].algo ? res.groups[g].algo : "-", res.groups[g].cost_us / 1e3,
                 res.groups[g].exposed_us / 1e3);
      }
      if (so.out_dir && !o.quiet) printf("  predicted timeline: %s (tessera-trace %s)\n", dir, dir);
    }
    tsr_scale_result_free(&res);
  }
  return 0;
}

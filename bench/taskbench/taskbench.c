/* Task Bench (after Slaughter et al., SC20) for Tessera's task layer: a grid of W points x T time
 * steps where task (t, i) runs a compute-bound kernel of G iterations and depends on the tasks of
 * step t-1 that the pattern names (trivial, no_comm, stencil_1d, fft, tree, nearest, spread,
 * random). Each task is submitted either through Tessera's insert wrapper (_tsr_submit: argument
 * copy, name, placement rule, trace hook) or as a bare StarPU task, the same codelet and handles.
 * Across ranks, points are split in blocks and the values a task needs from another rank travel
 * as StarPU-MPI detached sends/receives (as Tessera's ring does), the same in both variants.
 * For each grain G (halving from MAX_GRAIN) it prints the efficiency (ideal time: tasks x the
 * kernel's time alone / workers, over the measured time) and the task granularity (wall x workers
 * / tasks), and the same from the CPU time the processes got (all their threads), which a shared
 * machine's other users do not inflate; METG(50%) is the smallest granularity with efficiency >= 50%
 * (interpolated, bench/taskbench/metg.py).
 * PATTERN may list several (comma-separated); VARIANT runs one of the two; STEPS fixes the number of
 * time steps (bench/taskbench/instructions.sh: the same graph under callgrind at two step counts).
 * One process runs plain StarPU, StarPU-MPI starts under mpirun (as tessera-train).
 * Build: make bench/taskbench/taskbench; run: bench/taskbench/run.sh or run_quiet.sh BUILD_DIR. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <starpu_mpi.h>
#include <tessera.h>

#include "runtime/submit.h"

enum { MAXDEP = 8 };
static const char *patterns[] = {"trivial", "no_comm", "stencil_1d", "fft", "tree", "nearest", "spread", "random"};
enum { NPAT = sizeof patterns / sizeof *patterns };

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* CPU time of this process (every thread: workers, StarPU-MPI's progress thread, the submitter). */
static double cpu_now(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/* The kernel: G dependent multiply-adds on 4 lanes (compute-bound, no memory traffic). */
static double kernel(long g) {
  double a = 1.0, b = 1.000001, c = 1e-9, d = 0.999999;
  for (long k = 0; k < g; k++) a = a * b + c, d = d * b - c;
  return a + d;
}

static void kernel_cpu(void *buffers[], void *arg) {
  long g = *(const long *)arg;
  double r = kernel(g);
  if (STARPU_TASK_GET_NBUFFERS(starpu_task_get_current()) > 0) *(double *)STARPU_VECTOR_GET_PTR(buffers[0]) = r;
}

static struct starpu_codelet cl = {
    .cpu_funcs = {kernel_cpu}, .nbuffers = STARPU_VARIABLE_NBUFFERS, .name = "tb_kernel"};
/* TASKBENCH_PERFMODEL=1: the codelet gets a history-based performance model, as every Tessera
 * codelet has (its cost per task: footprints, the history's lookups and updates). */
static struct starpu_perfmodel tb_model = {.type = STARPU_HISTORY_BASED, .symbol = "tb_kernel"};

/* Points of step t-1 that point i of step t depends on (W points). */
static int deps_of(int pat, int t, int i, int w, int *d) {
  int n = 0, lg = 0;
  while ((1 << (lg + 1)) <= w) lg++;
  switch (pat) {
  case 0:
    return 0; /* trivial: none, no data */
  case 1:
    d[n++] = i;
    break; /* no_comm: itself */
  case 2:  /* stencil_1d: i-1, i, i+1 */
  case 5:  /* nearest: i-2 .. i+2 */
    for (int r = pat == 2 ? 1 : 2, k = -r; k <= r; k++)
      if (i + k >= 0 && i + k < w) d[n++] = i + k;
    break;
  case 3: /* fft: butterfly at distance 2^((t-1) mod log2 W) */
    d[n++] = i;
    if (lg > 0 && (i ^ (1 << ((t - 1) % lg))) < w) d[n++] = i ^ (1 << ((t - 1) % lg));
    break;
  case 4:
    d[n++] = i / 2;
    break; /* tree: a binary fan-out, point i/2 */
  case 6:  /* spread: 3 points W/3 apart */
    for (int k = 0; k < 3; k++) d[n++] = (i + k * (w / 3) + t) % w;
    break;
  case 7: { /* random: 3 points drawn from a fixed sequence of (t, i) */
    uint64_t x = (uint64_t)t * 1000003u + (uint64_t)i * 7919u + 1;
    for (int k = 0; k < 3; k++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, d[n++] = (int)(x % (uint64_t)w);
    break;
  }
  }
  for (int a = 0; a < n; a++) /* unique */
    for (int b = a + 1; b < n; b++)
      if (d[b] == d[a]) d[b--] = d[--n];
  return n;
}

/* Whether `name` is one of the comma-separated names of `list`. */
static int listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (!strncmp(p, name, n) && (p[n] == ',' || !p[n])) return 1;
  return 0;
}

struct run {
  int pat, w, t, tessera, rank, size;
  long grain;
  starpu_data_handle_t (*h)[2]; /* [w][parity] */
};

static int owner(const struct run *r, int i) { return (int)((long)i * r->size / r->w); }

static int submit(const struct run *r, int t, int i, const int *d, int nd, long *grain_arg) {
  struct _tsr_buf b[MAXDEP + 1];
  int nb = 0;
  if (r->pat != 0) {
    b[nb++] = (struct _tsr_buf){r->h[i][t & 1], STARPU_W};
    for (int k = 0; k < nd; k++) b[nb++] = (struct _tsr_buf){r->h[d[k]][(t - 1) & 1], STARPU_R};
  }
  if (r->tessera) return _tsr_submit(&cl, &r->grain, sizeof r->grain, STARPU_DEFAULT_PRIO, "tb", nb, b);
  struct starpu_task *task = starpu_task_create();
  task->cl = &cl, task->cl_arg = grain_arg, task->cl_arg_size = sizeof *grain_arg, task->nbuffers = nb;
  for (int k = 0; k < nb; k++) task->handles[k] = b[k].h, task->modes[k] = b[k].mode;
  return starpu_task_submit(task);
}

/* One run: returns the wall time in seconds (every rank), or -1; *cpu: the CPU time of every rank's
 * process during it, summed on rank 0. */
static double run_graph(struct run *r, double *cpu) {
  static double vals[4096][2];
  long grain = r->grain;
  for (int i = 0; i < r->w; i++)
    for (int p = 0; p < 2; p++)
      starpu_vector_data_register(&r->h[i][p], STARPU_MAIN_RAM, (uintptr_t)&vals[i][p], 1, sizeof(double));
  if (r->size > 1) starpu_mpi_barrier(MPI_COMM_WORLD);
  double t0 = now(), c0 = cpu_now();
  int ret = 0, d[MAXDEP];
  unsigned char *sent = calloc(r->w, 1);
  for (int t = 0; !ret && t < r->t; t++) {
    memset(sent, 0, r->w);
    for (int i = 0; !ret && i < r->w; i++) {
      int nd = t > 0 ? deps_of(r->pat, t, i, r->w, d) : 0, me = owner(r, i) == r->rank;
      for (int k = 0; !ret && k < nd && r->pat != 0; k++) { /* values from another rank */
        int j = d[k], from = owner(r, j), to = owner(r, i);
        if (from == to) continue;
        starpu_mpi_tag_t tag = ((starpu_mpi_tag_t)t * r->w + j) * 64 + to;
        if (from == r->rank && !(sent[j] & (1u << to)))
          sent[j] |= 1u << to,
              ret = starpu_mpi_isend_detached(r->h[j][(t - 1) & 1], to, tag, MPI_COMM_WORLD, NULL, NULL);
        else if (me && !(sent[j] & 0x80))
          sent[j] |= 0x80, ret = starpu_mpi_irecv_detached(r->h[j][(t - 1) & 1], from, tag, MPI_COMM_WORLD, NULL, NULL);
      }
      if (me && !ret) ret = submit(r, t, i, d, nd, &grain);
    }
  }
  free(sent);
  starpu_task_wait_for_all();
  if (r->size > 1) starpu_mpi_wait_for_all(MPI_COMM_WORLD), starpu_mpi_barrier(MPI_COMM_WORLD);
  double wall = now() - t0, mine = cpu_now() - c0, other = 0;
  *cpu = mine;
  if (r->size > 1) {
    starpu_data_handle_t hc;
    starpu_variable_data_register(&hc, STARPU_MAIN_RAM, (uintptr_t)&other, sizeof other);
    for (int k = 1; !ret && k < r->size; k++) { /* every rank's CPU time to rank 0 */
      if (r->rank == k) other = mine, ret = starpu_mpi_send(hc, 0, 999, MPI_COMM_WORLD);
      if (r->rank == 0) ret = starpu_mpi_recv(hc, k, 999, MPI_COMM_WORLD, MPI_STATUS_IGNORE), *cpu += other;
    }
    starpu_data_unregister(hc);
  }
  for (int i = 0; i < r->w; i++)
    for (int p = 0; p < 2; p++) starpu_data_unregister(r->h[i][p]);
  return ret ? -1 : wall;
}

/* Rank 0's *rate to every rank (StarPU-MPI's point-to-point calls: MPI belongs to its thread). */
static int share_rate(int rank, int size, double *rate) {
  starpu_data_handle_t h;
  int ret = 0;
  starpu_variable_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)rate, sizeof *rate);
  for (int k = 1; !ret && k < size; k++) {
    if (rank == 0) ret = starpu_mpi_send(h, k, 998, MPI_COMM_WORLD);
    if (rank == k) ret = starpu_mpi_recv(h, 0, 998, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  starpu_data_unregister(h);
  return ret;
}

int main(int argc, char **argv) {
  long max_grain = argc > 1 ? atol(argv[1]) : 1 << 20, min_grain = argc > 2 ? atol(argv[2]) : 64;
  double budget = argc > 3 ? atof(argv[3]) : 0.15; /* seconds of ideal work per run */
  const char *only = argc > 4 && strcmp(argv[4], "all") ? argv[4] : NULL;
  const char *variant = argc > 5 ? argv[5] : "both";
  int fixed_steps = argc > 6 ? atoi(argv[6]) : 0;
  int v_first = !strcmp(variant, "tessera"), v_last = strcmp(variant, "starpu") ? 1 : 0;
  if (max_grain < 1 || min_grain < 1 || budget <= 0 || fixed_steps < 0 ||
      (strcmp(variant, "both") && strcmp(variant, "starpu") && strcmp(variant, "tessera"))) {
    fprintf(
        stderr,
        "usage: taskbench [MAX_GRAIN [MIN_GRAIN [SECONDS [PATTERN[,PATTERN...]|all [starpu|tessera|both [STEPS]]]]]]\n"
        "(under mpirun for 2 ranks; STEPS: a fixed number of time steps, e.g. for callgrind)\n");
    return 2;
  }
  /* The kernel's own rate, before StarPU's workers start: the fastest of 40 short runs (the one
   * least disturbed by other processes on a shared machine). */
  double sink = 0, per_iter = 1e9;
  for (int k = 0; k < 40; k++) {
    double k0 = now();
    sink += kernel(1 << 18);
    per_iter = fmin(per_iter, (now() - k0) / (1 << 18));
  }
  const char *pm = getenv("TASKBENCH_PERFMODEL");
  if (pm && *pm && strcmp(pm, "0")) cl.model = &tb_model;
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.use_mpi = -1; /* StarPU-MPI when launched by mpirun, as tessera-train does; one process: plain StarPU */
  tsr_context *ctx;
  if (tsr_context_create(&ctx, &co, &argc, &argv) != TSR_OK) return fprintf(stderr, "%s\n", tsr_last_error()), 1;
  int rank = tsr_context_rank(ctx), size = tsr_context_size(ctx), nw = (int)starpu_cpu_worker_get_count();
  /* Every rank must submit the same graph: the step counts below follow from the kernel's rate, so
   * all ranks take rank 0's (each measuring its own, they differed by a step now and then, and a
   * rank waited for ever for a message its neighbour's graph did not have). */
  if (size > 1 && share_rate(rank, size, &per_iter)) return fprintf(stderr, "taskbench: cannot share the kernel's rate\n"), 1;
  int w = 4 * nw * size;
  starpu_data_handle_t(*h)[2] = calloc(w, sizeof *h);
  if (rank == 0)
    printf("# ranks %d, CPU workers per rank %d, width %d, kernel %.3f ns/iteration (sink %g)\n"
           "pattern,variant,ranks,grain,tasks,wall_s,granularity_us,efficiency,cpu_s,cpu_granularity_us,"
           "cpu_efficiency\n",
           size, nw, w, per_iter * 1e9, sink);
  for (int p = 0; p < NPAT; p++) {
    if (only && !listed(only, patterns[p])) continue;
    for (long g = max_grain; g >= min_grain; g /= 2)
      for (int v = v_first; v <= v_last; v++) { /* interleaved: both variants see the same load */
        int steps = fixed_steps ? fixed_steps : (int)fmin(1000, fmax(8, budget * nw * size / (w * g * per_iter)));
        struct run r = {.pat = p, .w = w, .t = steps, .tessera = v, .rank = rank, .size = size, .grain = g, .h = h};
        double cpu, wall = run_graph(&r, &cpu);
        if (wall < 0) return fprintf(stderr, "taskbench: submission failed\n"), 1;
        double tasks = (double)w * steps, ideal = tasks * g * per_iter / (nw * size);
        if (rank == 0)
          printf("%s,%s,%d,%ld,%.0f,%.4f,%.3f,%.4f,%.4f,%.3f,%.4f\n", patterns[p], v ? "tessera" : "starpu", size, g,
                 tasks, wall, wall * nw * size / tasks * 1e6, ideal / wall, cpu, cpu / tasks * 1e6,
                 tasks * g * per_iter / cpu);
        fflush(stdout);
      }
  }
  free(h);
  tsr_context_destroy(ctx);
  return 0;
}

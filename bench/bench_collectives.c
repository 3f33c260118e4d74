/* One gradient reduction of several sizes by each algorithm (ring, rd, tree, hier, rabenseifner,
 * hier-rh), run under
 * mpirun: per size, the algorithms alternate round by round (same load for all), each reduction
 * starting after a barrier; rank 0 prints the median time of one reduction, the bytes it sent, and
 * the alpha-beta model's estimate on the links measured at start-up (or TESSERA_LINK), with the
 * algorithm "auto" would pick. Build: make bench/bench_collectives; run (see bench_collectives.sh):
 *   mpirun -np 4 bench/bench_collectives [--sizes 1K,16K,256K,4M] [--reps 15] [--algos ring,rd,tree,hier,...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <starpu_mpi.h>
#include <tessera.h>

#include "comm/collective.h"
#include "comm/groups.h"
#include "runtime/communicator.h"

#define MAXA 8
#define MAXS 16
#define MAXR 1000

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* "1K,16K,4M" -> bytes; returns the count */
static int parse_sizes(const char *s, long long *out) {
  int n = 0;
  for (char *end; *s && n < MAXS; s = *end == ',' ? end + 1 : end) {
    long long v = strtoll(s, &end, 10);
    if (end == s || v <= 0) return -1;
    if (*end == 'K') v <<= 10, end++;
    else if (*end == 'M') v <<= 20, end++;
    out[n++] = v;
    if (*end && *end != ',') return -1;
  }
  return n;
}

static int parse_algos(char *s, const char **out) {
  int n = 0;
  for (char *t = strtok(s, ","); t && n < MAXA; t = strtok(NULL, ",")) out[n++] = t;
  return n;
}

int main(int argc, char **argv) {
  long long sizes[MAXS];
  int nsizes = parse_sizes("1K,16K,256K,4M", sizes), reps = 15;
  char algobuf[256] = "ring,rd,tree,hier,rabenseifner,hier-rh";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sizes") && i + 1 < argc) nsizes = parse_sizes(argv[++i], sizes);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--algos") && i + 1 < argc) snprintf(algobuf, sizeof algobuf, "%s", argv[++i]);
    else {
      printf("usage: mpirun -np N bench_collectives [--sizes 1K,16K,256K,4M] [--reps 15]\n"
             "         [--algos ring,rd,tree,hier,rabenseifner,hier-rh]\n"
             "One reduction of each size by each algorithm, alternating; rank 0 prints the median of reps.\n");
      return strcmp(argv[i], "--help") ? 2 : 0;
    }
  }
  const char *algos[MAXA];
  int nalgos = parse_algos(algobuf, algos);
  if (nsizes < 1 || reps < 1 || reps > MAXR || nalgos < 1) return fprintf(stderr, "bad --sizes, --reps or --algos\n"), 2;
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.verbose = 0;
  tsr_context *ctx;
  if (tsr_context_create(&ctx, &co, &argc, &argv)) return fprintf(stderr, "context: %s\n", tsr_last_error()), 1;
  int rank = tsr_context_rank(ctx), size = tsr_context_size(ctx);
  struct _tsr_comm world;
  if (_tsr_comm_world(&world, rank, size) || size < 2)
    return fprintf(stderr, "bench_collectives: run it under mpirun with 2 ranks or more\n"), 1;
  if (rank == 0) printf("%d ranks; %-12s %10s %12s %12s %12s %12s\n", size, "algo", "bytes", "median_us", "sent_B", "model_us", "auto");
  for (int s = 0; s < nsizes; s++) {
    size_t n = (size_t)(sizes[s] / 4 + 15) & ~(size_t)15;
    struct _tsr_groups gs[MAXA];
    struct _tsr_grad_tensor t = {.name = "w", .off = 0, .n = n, .layer = 0, .trainable = 1};
    float *buf[MAXA + 1]; /* the last: the probe's */
    double times[MAXA][MAXR];
    memset(gs, 0, sizeof gs);
    for (int a = 0; a < nalgos; a++) {
      buf[a] = calloc(n, sizeof(float));
      for (size_t i = 0; buf[a] && i < n; i++) buf[a][i] = (float)((i + rank) % 7);
      struct _tsr_grad_view v = {.buf = buf[a], .keep = 0, .ntensors = 1, .tensors = &t};
      gs[a].algo = algos[a];
      if (!buf[a] || _tsr_groups_build(&gs[a], &v, &world, -1, "f32", NULL) || _tsr_groups_start(&gs[a]))
        return fprintf(stderr, "rank %d: %s: %s\n", rank, algos[a], tsr_last_error()), 1;
    }
    struct _tsr_groups probe = {0}; /* the model's estimates and auto's choice on the measured links */
    buf[nalgos] = calloc(n, sizeof(float));
    struct _tsr_grad_view pv = {.buf = buf[nalgos], .keep = 0, .ntensors = 1, .tensors = &t};
    probe.algo = "auto";
    if (!buf[nalgos] || _tsr_groups_build(&probe, &pv, &world, -1, "f32", NULL) || _tsr_groups_start(&probe))
      return fprintf(stderr, "rank %d: auto: %s\n", rank, tsr_last_error()), 1;
    for (int r = -1; r < reps; r++) /* round -1 warms up */
      for (int a = 0; a < nalgos; a++) {
        starpu_mpi_barrier(MPI_COMM_WORLD);
        double t0 = now();
        if (_tsr_group_allreduce(&gs[a], 0, r + 1)) return fprintf(stderr, "%s\n", tsr_last_error()), 1;
        starpu_task_wait_for_all();
        if (r >= 0) times[a][r] = now() - t0;
      }
    for (int a = 0; a < nalgos && rank == 0; a++) {
      qsort(times[a], reps, sizeof(double), cmp);
      double model = -1;
      for (int c = 0; c < probe.ncand; c++)
        if (!strcmp(probe.cand[c]->impl, algos[a])) probe.ops = probe.cand[c], model = probe.ops->cost(&probe, 0);
      printf("%d ranks; %-12s %10zu %12.1f %12lld %12.1f %12s\n", size, algos[a], n * 4, 1e6 * times[a][reps / 2],
             (long long)(gs[a].bytes / (reps + 1)), 1e6 * model, probe.g[0].ops->impl);
    }
    _tsr_groups_destroy(&probe);
    free(buf[nalgos]);
    for (int a = 0; a < nalgos; a++) _tsr_groups_destroy(&gs[a]), free(buf[a]);
  }
  _tsr_comm_free(&world);
  tsr_context_destroy(ctx);
  return 0;
}

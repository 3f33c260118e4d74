/* Where a 1-bit Lion Cub step's local work goes, per rank, without the network: the CPU time of
 * single-threaded passes over n parameters (default 11.0 M, bench/dense_10m.json) of Lion's fused
 * update, its two halves (direction, apply) that the sign reductions split it into, and sign1's
 * 1-bit pack, vote and unpack for N ranks (each rank packs the (N - 1)/N of the values the others
 * own, votes on its own 1/N, unpacks the (N - 1)/N voted by the others). Prints the median of
 * --reps runs of each pass in ms of this thread's CPU time (other processes on a shared machine
 * change it little), the sum of what the 1-bit path adds to float32 Lion's update, and the time the
 * float32 ring's and the 1-bit messages take on the wire at --gbit Gbit/s, for comparison. Build:
 * make bench/bench_sign_kernels; run: bench/bench_sign_kernels [--n 11000000] [--ranks 4] [--reps 5] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "optim/optim.h"
#include "sign_wire.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define REPS_MAX 64
enum { FUSED, DIRECTION, APPLY, PACK, VOTE, UNPACK, NPASS };
static const char *const names[NPASS] = {"lion update (fused, float32 Lion)", "lion direction (sign path)",
                                         "lion apply (sign path)", "sign1 pack (N-1)/N", "sign1 vote 1/N",
                                         "sign1 unpack (N-1)/N"};

int main(int argc, char **argv) {
  size_t n = 11000000;
  int ranks = 4, reps = 5;
  double gbit = 1.0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--n") && i + 1 < argc) n = (size_t)atoll(argv[++i]);
    else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) ranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--gbit") && i + 1 < argc) gbit = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_sign_kernels [--n N] [--ranks R] [--reps K] [--gbit G]\n");
      return 2;
    }
  }
  if (ranks < 2 || reps < 1 || reps > REPS_MAX || n < (size_t)ranks) {
    fprintf(stderr, "bench_sign_kernels: need --ranks >= 2, 1 <= --reps <= %d, --n >= ranks\n", REPS_MAX);
    return 2;
  }
  const struct _tsr_optim_ops *lion = _tsr_optim_ops_of(TSR_OPTIM_LION);
  float *w = malloc(n * 4), *g = malloc(n * 4), *m = malloc(n * 4), *d = malloc(n * 4);
  size_t own = n / ranks, others = n - own, bytes = _tsr_packed_bytes(n, 1);
  uint8_t *bits = malloc(bytes), *out = malloc(bytes), **in = malloc((ranks - 1) * sizeof *in);
  for (int k = 0; in && k < ranks - 1; k++) in[k] = malloc(_tsr_packed_bytes(own, 1));
  if (!w || !g || !m || !d || !bits || !out || !in) return fprintf(stderr, "out of memory\n"), 1;
  for (size_t i = 0; i < n; i++) w[i] = 0.01f * (float)(i % 97), g[i] = (float)((int)(i % 7) - 3), m[i] = 0.1f;
  for (int k = 0; k < ranks - 1; k++) _tsr_sign_pack1_cpu(g + (size_t)k * own / 2, own, 0, 1, in[k]);
  struct _tsr_optim_args a = {.h = tsr_optim_spec_default(TSR_OPTIM_LION), .step = 1, .grad_scale = 1.0f};
  float *st[1] = {m};
  double t[NPASS][REPS_MAX], med[NPASS];
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    lion->cpu(&a, n, w, g, st);
    double t1 = now();
    memcpy(d, g, n * 4);
    double t2 = now();
    lion->direction(&a, n, d, st);
    double t3 = now();
    lion->apply(&a, n, w, d);
    double t4 = now();
    _tsr_sign_pack1_cpu(d + own, others, own, 1, bits);
    double t5 = now();
    _tsr_sign_vote1_cpu(d, own, 0, 1, (const uint8_t *const *)in, ranks - 1, out);
    double t6 = now();
    _tsr_sign_unpack1_cpu(bits, others, d + own);
    double t7 = now();
    t[FUSED][r] = t1 - t0, t[DIRECTION][r] = t3 - t2, t[APPLY][r] = t4 - t3;
    t[PACK][r] = t5 - t4, t[VOTE][r] = t6 - t5, t[UNPACK][r] = t7 - t6;
  }
  printf("n %zu, %d ranks, median of %d, CPU time of one thread:\n", n, ranks, reps);
  for (int p = 0; p < NPASS; p++) {
    qsort(t[p], reps, sizeof(double), cmp);
    med[p] = t[p][reps / 2];
    printf("  %-36s %8.2f ms\n", names[p], 1e3 * med[p]);
  }
  double extra = med[DIRECTION] + med[APPLY] + med[PACK] + med[VOTE] + med[UNPACK] - med[FUSED];
  double f32_wire = 2.0 * (ranks - 1) / ranks * 4.0 * n, bit_wire = 2.0 * (ranks - 1) / ranks * n / 8.0;
  printf("  1-bit path's local work beyond float32 Lion's update: %.2f ms\n", 1e3 * extra);
  printf("  on the wire at %g Gbit/s: float32 ring %.1f ms (%.1f MB), 1-bit %.1f ms (%.2f MB)\n", gbit,
         1e3 * f32_wire * 8 / (gbit * 1e9), f32_wire / 1e6, 1e3 * bit_wire * 8 / (gbit * 1e9), bit_wire / 1e6);
  volatile float sink = w[n / 2] + d[n / 3] + (float)out[0];
  (void)sink;
  for (int k = 0; k < ranks - 1; k++) free(in[k]);
  free(w), free(g), free(m), free(d), free(bits), free(out), free(in);
  return 0;
}

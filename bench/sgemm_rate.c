/* sgemm_rate: OpenBLAS SGEMM rate (GFLOP/s) of an N^3 product on THREADS threads (default 1), the
 * machine's practical peak that bench_train.py divides achieved training GFLOP/s by. Prints the best
 * of REPS timings (the least disturbed on a shared machine). Built on the fly by bench_train.py:
 *   gcc -O2 sgemm_rate.c -o sgemm_rate $(pkg-config --cflags --libs openblas) && ./sgemm_rate 1024 10 2 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1024, reps = argc > 2 ? atoi(argv[2]) : 10;
  int threads = argc > 3 ? atoi(argv[3]) : 1;
  if (n < 16 || reps < 1 || threads < 1) {
    fprintf(stderr, "usage: %s [N >= 16] [REPS >= 1] [THREADS >= 1]\n", argv[0]);
    return 2;
  }
  openblas_set_num_threads(threads);
  size_t len = (size_t)n * n;
  float *a = malloc(len * sizeof *a), *b = malloc(len * sizeof *b), *c = malloc(len * sizeof *c);
  if (!a || !b || !c) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < len; i++) a[i] = (float)(i % 7) * 0.25f, b[i] = (float)(i % 5) * 0.5f;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n); /* warm-up */
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double t = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    t = now() - t;
    if (t < best) best = t;
  }
  printf("%.2f\n", 2.0 * n * n * (double)n / best * 1e-9);
  free(a);
  free(b);
  free(c);
  return 0;
}

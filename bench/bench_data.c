/* bench_data: throughput of the data side. --simulate N times tessera-cbed's pipeline (StarPU tasks
 * + HDF5 writer) on N samples; --data SPEC times tsr_loader_read (standardised, random order) from 1
 * and from T threads, as the trainer's load tasks call it; --train-log CSV compares both with the
 * samples/s that training consumed (tessera-train --log, last row). */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tessera.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void die(const char *what) {
  fprintf(stderr, "bench_data: %s: %s\n", what, tsr_last_error());
  exit(1);
}

struct reader {
  tsr_loader *l;
  int64_t count, seed;
};

static void *read_loop(void *arg) {
  struct reader *r = arg;
  int c, h, w, tc, th, tw;
  tsr_loader_input_shape(r->l, &c, &h, &w);
  tsr_loader_target_shape(r->l, &tc, &th, &tw);
  float *x = malloc(sizeof(float) * c * h * w), *y = malloc(sizeof(float) * tc * th * tw);
  uint64_t s = (uint64_t)r->seed * 2654435761u + 1;
  for (int64_t i = 0; i < r->count; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    if (tsr_loader_read(r->l, (int64_t)(s % (uint64_t)tsr_loader_size(r->l)), x, y) != TSR_OK) die("read");
  }
  free(x), free(y);
  return NULL;
}

static double loader_rate(tsr_loader *l, int threads, int64_t samples) {
  pthread_t th[64];
  struct reader r[64];
  double t0 = now();
  for (int i = 0; i < threads; i++) {
    r[i] = (struct reader){l, samples / threads, i + 1};
    pthread_create(&th[i], NULL, read_loop, &r[i]);
  }
  for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
  return (double)(samples / threads * threads) / (now() - t0);
}

static double last_train_rate(const char *csv) {
  FILE *f = fopen(csv, "r");
  if (!f) return -1;
  char line[512];
  double rate = -1, v;
  int ep;
  long long st;
  double a, b;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%d,%lld,%lf,%lf,%lf", &ep, &st, &a, &b, &v) == 5) rate = v;
  fclose(f);
  return rate;
}

int main(int argc, char **argv) {
  const char *data = NULL, *log = NULL;
  int64_t simulate = 0, samples = 2000;
  int threads = 2, workers = -1, c;
  static const struct option opts[] = {{"simulate", required_argument, NULL, 's'}, {"data", required_argument, NULL, 'd'},
                                       {"samples", required_argument, NULL, 'n'}, {"threads", required_argument, NULL, 't'},
                                       {"workers", required_argument, NULL, 'w'}, {"train-log", required_argument, NULL, 'l'},
                                       {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's': simulate = atoll(optarg); break;
    case 'd': data = optarg; break;
    case 'n': samples = atoll(optarg); break;
    case 't': threads = atoi(optarg) < 1 ? 1 : atoi(optarg) > 64 ? 64 : atoi(optarg); break;
    case 'w': workers = atoi(optarg); break;
    case 'l': log = optarg; break;
    default:
      printf("Usage: bench_data [--simulate N [--workers W]] [--data SPEC [--samples N] [--threads T]]\n"
             "                  [--train-log train.csv]\n"
             "Simulation (samples/s, default tessera-cbed options) and loader throughput (samples/s),\n"
             "compared with the samples/s training consumed (last row of a tessera-train --log).\n");
      return c == 'h' ? 0 : 2;
    }
  }
  double train = log ? last_train_rate(log) : -1;
  if (log && train < 0) fprintf(stderr, "bench_data: %s: no samples_per_s row\n", log);
  if (simulate > 0) {
    tsr_context_opts co;
    tsr_context_opts_default(&co);
    co.ncpus = workers, co.use_mpi = 0, co.verbose = 0;
    tsr_context *ctx;
    if (tsr_context_create(&ctx, &co, NULL, NULL) != TSR_OK) die("context");
    tsr_cbed_opts o;
    tsr_cbed_opts_default(&o);
    char path[] = "/tmp/bench_data_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    double t0 = now();
    if (tsr_cbed_write(ctx, &o, 0, simulate, 0, path, NULL, NULL) != TSR_OK) die("simulate");
    double rate = simulate / (now() - t0);
    printf("simulation: %lld samples (%dx%d probes, %dx%d patterns, %g kV), %.2f samples/s on %d workers\n",
           (long long)simulate, o.probes, o.probes, o.pattern, o.pattern, o.kv, rate, tsr_context_nworkers(ctx));
    remove(path);
    tsr_context_destroy(ctx);
  }
  if (data) {
    tsr_loader *l;
    if (tsr_loader_open(&l, data, NULL) != TSR_OK) die(data);
    int ch, h, w;
    tsr_loader_input_shape(l, &ch, &h, &w);
    double r1 = loader_rate(l, 1, samples), rt = loader_rate(l, threads, samples);
    double mb = (double)ch * h * w * 4 / 1e6;
    printf("loader: %s, %lld samples [%d, %d, %d]: %.0f samples/s (%.0f MB/s) from 1 thread, %.0f samples/s from %d\n",
           data, (long long)tsr_loader_size(l), ch, h, w, r1, r1 * mb, rt, threads);
    if (train > 0)
      printf("training consumed %.1f samples/s: the loader is %.0fx faster than training needs\n", train, r1 / train);
    tsr_loader_close(l);
  }
  return 0;
}

/* tsr_scale_calibrate: measures the link between ranks 0 and 1 through StarPU-MPI, the layer the
 * reductions use: ping-pong half round trips (latency) and streams of back-to-back messages
 * (bandwidth) at several sizes, medians over repetitions. Other ranks take no part. A message above
 * the link's eager limit waits for the receiver's answer to MPI's rendezvous before its bulk: a
 * stream overlaps those waits, a ping-pong (like the dependent rounds of a reduction) does not; what
 * a ping-pong takes beyond latency + size / bandwidth is the link's rendezvous time. Exchanges (both
 * ranks send to each other at once, as in a ring's or a halving's round) give the rate each way with
 * both directions busy, which the MPI stack need not keep at the one-way bandwidth. The time slice of
 * two ranks on one core is the ping-pong's time beyond the latency of ranks with a core each. */
#include <math.h>
#include <stdlib.h>
#include <starpu_mpi.h>

#include "runtime/error.h"
#include "runtime/progress.h"
#include "scale/scale.h"

enum { STREAM = 8, TAG = 7000 };

static const int64_t default_sizes[] = {8, 1024, 65536, 262144, 1048576, 4194304};

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One size: median half round trip and median time per streamed message (rank 0; rank 1 echoes).
 * The streams' requests complete through _tsr_mpi_wait: StarPU-MPI 1.3's starpu_mpi_wait returns -1
 * for a message that arrived before its receive was posted, and rank 1, stopping there, left rank 0
 * waiting for its acknowledgement for ever (runtime/progress.h). Every request posted is waited
 * for, so no handle is unregistered with a transfer pending. */
static int measure(int rank, starpu_data_handle_t *h, starpu_data_handle_t ack, int reps, double *half, double *per_msg,
                   double *exch, double ack_us, double *tv) {
  int peer = 1 - rank, ret = 0;
  for (int r = -2; !ret && r < reps; r++) { /* two warm-up rounds */
    double t0 = starpu_timing_now();
    if (rank == 0) {
      ret = starpu_mpi_send(h[0], peer, TAG, MPI_COMM_WORLD);
      if (!ret) ret = starpu_mpi_recv(h[0], peer, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      ret = starpu_mpi_recv(h[0], peer, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (!ret) ret = starpu_mpi_send(h[0], peer, TAG, MPI_COMM_WORLD);
    }
    if (r >= 0) tv[r] = (starpu_timing_now() - t0) / 2;
  }
  if (ret) return ret;
  *half = median(tv, reps);
  for (int r = -1; !ret && r < reps; r++) {
    starpu_mpi_req req[STREAM];
    double t0 = starpu_timing_now();
    int posted = 0;
    for (; !ret && posted < STREAM; posted++)
      ret = rank == 0 ? starpu_mpi_isend(h[posted], &req[posted], peer, TAG + 1 + posted, MPI_COMM_WORLD)
                      : starpu_mpi_irecv(h[posted], &req[posted], peer, TAG + 1 + posted, MPI_COMM_WORLD);
    if (ret) posted--; /* the failed one was not posted */
    for (int k = 0; k < posted; k++) _tsr_mpi_wait(&req[k]);
    if (!ret)
      ret = rank == 0 ? starpu_mpi_recv(ack, peer, TAG + 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
                      : starpu_mpi_send(ack, peer, TAG + 99, MPI_COMM_WORLD);
    if (r >= 0) tv[r] = (starpu_timing_now() - t0 - ack_us) / STREAM;
  }
  *per_msg = median(tv, reps);
  /* Exchange: both ranks send one message to the other at once and wait for both, as a ring's round
   * at 2 ranks does (both directions of the link busy); dependent repetitions, like the rounds. */
  for (int r = -2; !ret && r < reps; r++) {
    starpu_mpi_req req[2];
    double t0 = starpu_timing_now();
    ret = starpu_mpi_isend(h[0], &req[0], peer, TAG + 50, MPI_COMM_WORLD);
    if (ret) break;
    ret = starpu_mpi_irecv(h[1], &req[1], peer, TAG + 50, MPI_COMM_WORLD);
    _tsr_mpi_wait(&req[0]);
    if (!ret) _tsr_mpi_wait(&req[1]);
    if (r >= 0) tv[r] = starpu_timing_now() - t0;
  }
  *exch = median(tv, reps);
  return ret;
}

tsr_status tsr_scale_calibrate(tsr_context *ctx, const int64_t *sizes, int nsizes, int reps, tsr_link *link,
                               FILE *log) {
  if (!ctx || !link) return _tsr_error(TSR_ERR_ARG, "tsr_scale_calibrate: context and link are required");
  if (!sizes) sizes = default_sizes, nsizes = sizeof default_sizes / sizeof *default_sizes;
  if (nsizes < 2 || reps < 1 || reps > 100000)
    return _tsr_error(TSR_ERR_ARG, "tsr_scale_calibrate: %d sizes and %d repetitions (need >= 2 and 1..100000)", nsizes,
                      reps);
  int rank = tsr_context_rank(ctx), size = tsr_context_size(ctx);
  if (size < 2) return _tsr_error(TSR_ERR_ARG, "tsr_scale_calibrate: needs 2 ranks (run it under mpirun -np 2)");
  int64_t maxb = 0;
  for (int i = 0; i < nsizes; i++) {
    if (sizes[i] < 1 || sizes[i] > (1 << 30) || (i > 0 && sizes[i] <= sizes[i - 1]))
      return _tsr_error(TSR_ERR_ARG, "tsr_scale_calibrate: size %d (%lld bytes) must be 1 B..1 GiB and increasing", i,
                        (long long)sizes[i]);
    maxb = sizes[i];
  }
  if (rank > 1) return TSR_OK;
  char *buf = calloc(STREAM, (size_t)maxb), ackb = 0;
  double *tv = malloc(reps * sizeof *tv), *half = calloc(nsizes, sizeof *half), *per = calloc(nsizes, sizeof *per),
         *exch = calloc(nsizes, sizeof *exch);
  if (!buf || !tv || !half || !per || !exch) {
    free(buf), free(tv), free(half), free(per), free(exch);
    return _tsr_error(TSR_ERR_NOMEM, "tsr_scale_calibrate: out of memory for %lld-byte messages", (long long)maxb);
  }
  starpu_data_handle_t ack;
  starpu_vector_data_register(&ack, STARPU_MAIN_RAM, (uintptr_t)&ackb, 1, 1);
  int ret = 0;
  for (int i = 0; !ret && i < nsizes; i++) {
    starpu_data_handle_t h[STREAM];
    for (int k = 0; k < STREAM; k++)
      starpu_vector_data_register(&h[k], STARPU_MAIN_RAM, (uintptr_t)(buf + k * maxb), (uint32_t)sizes[i], 1);
    ret = measure(rank, h, ack, reps, &half[i], &per[i], &exch[i], i ? half[0] : 0, tv);
    for (int k = 0; k < STREAM; k++) starpu_data_unregister(h[k]);
  }
  starpu_data_unregister(ack);
  tsr_status st = TSR_OK;
  if (ret) st = _tsr_error(TSR_ERR_RUNTIME, "tsr_scale_calibrate: StarPU-MPI transfer failed (%d)", ret);
  /* Bandwidth: least-squares slope of time per streamed message against size, sizes >= 64 KiB
   * (all sizes when fewer than two are that large). */
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0, from = 0;
  while (from < nsizes - 2 && sizes[from] < 65536) from++;
  for (int i = from; i < nsizes; i++, n++)
    sx += sizes[i], sy += per[i], sxx += (double)sizes[i] * sizes[i], sxy += sizes[i] * per[i];
  double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx); /* us per byte */
  if (st == TSR_OK && rank == 0 && !(slope > 0))
    st = _tsr_error(TSR_ERR_RUNTIME, "tsr_scale_calibrate: streaming time does not grow with size (noise?): rerun "
                                     "with more repetitions or larger sizes");
  /* Rendezvous: median over the sizes above the eager limit of the half round trip beyond the
   * latency and the streamed time of the size; 0 when no size is above it or the excess is < 0. */
  double extra[64];
  int nx = 0;
  for (int i = 1; i < nsizes && nx < 64; i++)
    if (sizes[i] > link->eager_bytes) extra[nx++] = half[i] - half[0] - sizes[i] * slope;
  double rdv = nx ? median(extra, nx) : 0;
  /* Exchange rate: median over the same sizes as the bandwidth of size / (exchange time - latency). */
  double xr[64];
  int nr = 0;
  for (int i = from; i < nsizes && nr < 64; i++)
    if (exch[i] > half[0]) xr[nr++] = sizes[i] / (exch[i] - half[0]) / 125.0;
  double xgbit = nr ? median(xr, nr) : 0;
  if (st == TSR_OK && rank == 0) {
    link->latency_us = half[0];
    link->bandwidth_gbit = 1 / slope / 125.0;
    link->rendezvous_us = rdv > 0 ? rdv : 0;
    link->exchange_gbit = xgbit;
    if (log) {
      fprintf(log, "%12s %14s %16s %12s %14s\n", "bytes", "half RTT us", "stream us/msg", "Gbit/s", "exchange us");
      for (int i = 0; i < nsizes; i++)
        fprintf(log, "%12lld %14.2f %16.2f %12.3f %14.2f\n", (long long)sizes[i], half[i], per[i],
                per[i] > 0 ? sizes[i] / per[i] / 125.0 : 0.0, exch[i]);
      fprintf(log, "latency %.2f us, bandwidth %.3f Gbit/s (slope over sizes >= %lld bytes)\n", link->latency_us,
              link->bandwidth_gbit, (long long)sizes[from]);
      fprintf(log, "rendezvous %.2f us per message above %.0f bytes (ping-pong beyond latency + stream, median of %d "
                   "sizes)\n",
              link->rendezvous_us, link->eager_bytes, nx);
      fprintf(log, "exchange %.3f Gbit/s each way with both directions busy (median over sizes >= %lld bytes of "
                   "size / (exchange - latency))\n",
              link->exchange_gbit, (long long)sizes[from]);
    }
  }
  free(buf), free(tv), free(half), free(per), free(exch);
  return st;
}

tsr_status tsr_scale_calibrate_timeslice(tsr_context *ctx, int reps, double latency_us, double *slice_us, FILE *log) {
  if (!ctx || !slice_us)
    return _tsr_error(TSR_ERR_ARG, "tsr_scale_calibrate_timeslice: context and result are required");
  if (reps < 1 || reps > 100000 || !(latency_us >= 0))
    return _tsr_error(TSR_ERR_ARG,
                      "tsr_scale_calibrate_timeslice: %d repetitions (need 1..100000), latency %g us (need >= 0)", reps,
                      latency_us);
  int rank = tsr_context_rank(ctx);
  if (tsr_context_size(ctx) < 2)
    return _tsr_error(TSR_ERR_ARG, "tsr_scale_calibrate_timeslice: needs 2 ranks (run it under mpirun -np 2)");
  if (rank > 1) return TSR_OK;
  char b = 0;
  double *tv = malloc(reps * sizeof *tv);
  if (!tv) return _tsr_error(TSR_ERR_NOMEM, "tsr_scale_calibrate_timeslice: out of memory");
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&b, 1, 1);
  int peer = 1 - rank, ret = 0;
  for (int r = -2; !ret && r < reps; r++) { /* two warm-up rounds */
    double t0 = starpu_timing_now();
    if (rank == 0) {
      ret = starpu_mpi_send(h, peer, TAG + 200, MPI_COMM_WORLD);
      if (!ret) ret = starpu_mpi_recv(h, peer, TAG + 200, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      ret = starpu_mpi_recv(h, peer, TAG + 200, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (!ret) ret = starpu_mpi_send(h, peer, TAG + 200, MPI_COMM_WORLD);
    }
    if (r >= 0) tv[r] = (starpu_timing_now() - t0) / 2;
  }
  starpu_data_unregister(h);
  tsr_status st = TSR_OK;
  if (ret)
    st = _tsr_error(TSR_ERR_RUNTIME, "tsr_scale_calibrate_timeslice: StarPU-MPI transfer failed (%d)", ret);
  else if (rank == 0) {
    double half = median(tv, reps);
    *slice_us = half > latency_us ? half - latency_us : 0;
    if (log)
      fprintf(log, "half round trip %.2f us (8 bytes, median of %d), latency %.2f us: time slice %.2f us\n", half, reps,
              latency_us, *slice_us);
  }
  free(tv);
  return st;
}

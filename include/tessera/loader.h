/* Training data from one or many files: HDF5 files (datasets `inputs`/`targets` or `cbed`/`potential`,
 * found automatically, or named; samples [C, H, W] or [C, D, H, W]), `.npy` pairs, globs; reads of
 * whole samples or of a box of each sample; per-channel standardisation of the inputs;
 * and the per-epoch order (seeded shuffle, the same on every rank) sharded across ranks. Reads are
 * thread-safe, so a tsr_sample_fn can call tsr_loader_read inside the trainer's load tasks. */
#ifndef TESSERA_LOADER_H
#define TESSERA_LOADER_H

#include <stdint.h>
#include <tessera/status.h>
#include <tessera/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_loader tsr_loader;

typedef struct tsr_loader_opts {
  const char *input_name;  /* HDF5 dataset of the inputs; NULL = `inputs`, else `cbed` */
  const char *target_name; /* NULL = `targets`, else `potential` */
  int standardize;         /* 1 = inputs become (x - mean_c) / std_c per channel (default 1) */
  int stats_samples;       /* samples, spread over the data, that estimate mean and std (default 256) */
} tsr_loader_opts;

void tsr_loader_opts_default(tsr_loader_opts *o);

/* `spec` is a comma-separated list of sources, concatenated in order:
 *   FILE.h5 (any name that is not .npy)   an HDF5 file
 *   PATTERN with * ? [ ]                   every match, sorted (e.g. train.rank*.h5)
 *   X.npy:Y.npy                            inputs [N,C,H,W] and targets [N,C',H',W'] as .npy
 *   DIR/                                   a folder with inputs.npy and targets.npy (or cbed.npy, potential.npy)
 * Every source must have the same per-sample shapes; errors name the file and the problem. */
tsr_status tsr_loader_open(tsr_loader **l, const char *spec, const tsr_loader_opts *o);
void tsr_loader_close(tsr_loader *l);

int64_t tsr_loader_size(const tsr_loader *l);
int tsr_loader_num_files(const tsr_loader *l);
const char *tsr_loader_file(const tsr_loader *l, int i);
/* Per-sample shapes as [C, H, W]; [C, D, H, W] samples are given as [C, D*H, W] (the same elements in
 * the same order, so buffers sized from these hold a whole sample). */
void tsr_loader_input_shape(const tsr_loader *l, int *c, int *h, int *w);
void tsr_loader_target_shape(const tsr_loader *l, int *c, int *h, int *w);
/* Per-sample shapes as stored: ndim 3 [C, H, W] or 4 [C, D, H, W]. */
void tsr_loader_input_dims(const tsr_loader *l, tsr_shape *s);
void tsr_loader_target_dims(const tsr_loader *l, tsr_shape *s);

/* Sample `index` of the concatenation (x or y may be NULL), standardised if enabled. Thread-safe. */
tsr_status tsr_loader_read(tsr_loader *l, int64_t index, float *x, float *y);
/* A box of sample `index`: on each spatial axis a of the inputs (D, H, W, or H, W), the indices
 * [start[a], start[a] + extent[a]). x gets [C, extent...] of the inputs (standardised if enabled);
 * y the same box of the targets when they have the inputs' spatial shape (segmentation), else the
 * whole target (regression). HDF5 sources read only the box (a hyperslab); others cut it from the
 * sample. Equal to tsr_loader_read's sample cut to the box. Errors name the axis. Thread-safe. */
tsr_status tsr_loader_read_box(tsr_loader *l, int64_t index, const int64_t *start, const int64_t *extent, float *x,
                               float *y);

/* Per-channel input statistics ([C] each; NULL when standardisation is off). A validation loader
 * should use its training loader's statistics: tsr_loader_set_stats copies them; NULL mean and std
 * turn standardisation off (the statistics can then go to tsr_trainer_set_input_norm instead). */
void tsr_loader_stats(const tsr_loader *l, const double **mean, const double **std);
tsr_status tsr_loader_set_stats(tsr_loader *l, const double *mean, const double *std, int channels);

/* This rank's samples for one epoch: a permutation of [0, n) drawn from (seed, epoch) only (every rank
 * draws the same), of which rank r of `size` takes positions r, r + size, r + 2 size, ...; so the
 * ranks' shards are disjoint and cover [0, n) exactly once. out holds tsr_loader_shard_size entries. */
int64_t tsr_loader_shard_size(int64_t n, int rank, int size);
tsr_status tsr_loader_epoch_indices(int64_t n, uint64_t seed, int epoch, int rank, int size, int64_t *out);

/* ---- a pool of produced samples (in-situ training) ----
 * A stream loader: samples come from a producer (a simulator) that runs as StarPU tasks, into a
 * bounded pool of `slots` sample buffers. Stream position u (0, 1, 2, ... on each rank) reads slot
 * u % slots; each produced sample serves `reuse` passes over the pool, slot s being replaced after
 * pass q when (q + s) % reuse == reuse - 1 (replacements are spread over the pass; the first
 * samples of a slot serve reuse - s % reuse passes), so the pool's content at any position is a
 * function of the position alone. A slot is refilled by a task of priority below training's as
 * soon as its last read is submitted; tsr_trainer_step_loader's load tasks wait for exactly the
 * samples they read, so no half-written sample is ever read. Sample k of this rank (k-th produced
 * in position order) has producer index k * size + rank: ranks produce disjoint samples, and a run
 * is reproducible for a seed. tsr_loader_read on a stream produces the sample of position `index`
 * on the calling thread; tsr_loader_size is INT64_MAX (unbounded). */
typedef struct tsr_sample_producer {
  const char *name;      /* task name in traces, e.g. "cbed_sample" */
  int c, h, w;           /* per-sample input shape */
  int tc, th, tw;        /* per-sample target shape */
  /* Writes sample `index` (a pure function of it); thread-safe; a failure sets tsr_last_error (the
   * pool's error is "rank R, producer NAME: " and this text, with "sample N: " put before it when the
   * text does not name the sample itself, as the CBED simulator's "cbed: sample N: ..." does). */
  tsr_status (*produce)(void *user, int64_t index, float *x, float *y);
  void (*destroy)(void *user); /* (optional) called by tsr_loader_close */
  void *user;
} tsr_sample_producer;

typedef struct tsr_pool_opts {
  int slots;           /* samples held (default 64); at least the batch a step reads */
  int reuse;           /* times each sample is read before it is replaced (default 1) */
  int rank, size;      /* this rank and the ranks producing (default 0 of 1) */
  int stats_samples;   /* the producer's samples 0..n-1, produced at open, give the input statistics
                          (default 8; 0 = none); by producer index, so every rank computes the same */
  int target_stats_samples; /* the same for per-channel target statistics, samples 0..n-1 (default 0 =
                          none; tsr_loader_target_stats): one production at open serves both */
  const char *spill;   /* HDF5 file every produced sample is also written to (datasets inputs,
                          targets and index; written to spill.tmp, renamed at close); NULL: none */
  /* Tests: 0 = TESSERA_SIM_DELAY_MS, TESSERA_SIM_FAIL_AT (README, "Environment variables"). */
  int delay_ms;        /* every production task sleeps this long (half before, half after writing) */
  int64_t fail_at;     /* producer index that fails with an injected error; < 0 never (default -1) */
} tsr_pool_opts;

void tsr_pool_opts_default(tsr_pool_opts *o);
/* The producer's shapes and functions are copied; `user` must live until tsr_loader_close. Errors
 * name the bad option. Standardisation statistics come from the producer's samples 0..stats_samples-1
 * (not this rank's stream positions: the same for every rank and number of ranks).
 * Slots are StarPU data: open after tsr_context_create, close before tsr_context_destroy. */
tsr_status tsr_loader_open_pool(tsr_loader **l, const tsr_sample_producer *p, const tsr_pool_opts *o);
/* 1 for a pool (samples by stream position), 0 for files. */
int tsr_loader_is_stream(const tsr_loader *l);
/* A pool's per-channel target mean and population std over the producer's samples
 * 0..target_stats_samples-1 (float64, two passes; std 0 for a constant channel); NULL when none. */
void tsr_loader_target_stats(const tsr_loader *l, const double **mean, const double **std);
/* A pool's counters: samples produced so far (tasks finished), slots filled and not yet replaced
 * at this moment, and the first producer error ("" when none). NULL pointers are skipped. */
void tsr_loader_pool_counts(const tsr_loader *l, int64_t *produced, int *filled, const char **error);

#ifdef __cplusplus
}
#endif
#endif

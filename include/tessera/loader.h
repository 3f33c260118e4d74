/* Training data from one or many files: HDF5 files (datasets `inputs`/`targets` or `cbed`/`potential`,
 * found automatically, or named), `.npy` pairs, globs; per-channel standardisation of the inputs;
 * and the per-epoch order (seeded shuffle, the same on every rank) sharded across ranks. Reads are
 * thread-safe, so a tsr_sample_fn can call tsr_loader_read inside the trainer's load tasks. */
#ifndef TESSERA_LOADER_H
#define TESSERA_LOADER_H

#include <stdint.h>
#include <tessera/status.h>

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
void tsr_loader_input_shape(const tsr_loader *l, int *c, int *h, int *w);
void tsr_loader_target_shape(const tsr_loader *l, int *c, int *h, int *w);

/* Sample `index` of the concatenation (x or y may be NULL), standardised if enabled. Thread-safe. */
tsr_status tsr_loader_read(tsr_loader *l, int64_t index, float *x, float *y);

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

#ifdef __cplusplus
}
#endif
#endif

/* Datasets: HDF5 files with `inputs` [N,C,H,W] or [N,C,D,H,W] and `targets` of either rank (float),
 * and the built-in phase-object diffraction generator that makes such files. */
#ifndef TESSERA_DATA_H
#define TESSERA_DATA_H

#include <stdint.h>
#include <tessera/status.h>
#include <tessera/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_dataset tsr_dataset;

/* Opens `path`, checks that `inputs` and `targets` exist, are float and 4-D [N, C, H, W] or 5-D
 * [N, C, D, H, W] with the same N. Errors name the file and the dataset. */
tsr_status tsr_dataset_open(tsr_dataset **d, const char *path);
/* The same with the dataset names given; NULL = `inputs` (`targets`) when present, else `cbed`
 * (`potential`), the names tessera-cbed writes. */
tsr_status tsr_dataset_open_names(tsr_dataset **d, const char *path, const char *inputs, const char *targets);
void tsr_dataset_close(tsr_dataset *d);
int64_t tsr_dataset_size(const tsr_dataset *d);
/* Per-sample shapes as [C, H, W]; a [C, D, H, W] sample is given as [C, D*H, W] (the same elements
 * in the same order). */
void tsr_dataset_input_shape(const tsr_dataset *d, int *c, int *h, int *w);
void tsr_dataset_target_shape(const tsr_dataset *d, int *c, int *h, int *w);
/* Per-sample shapes as they are stored: ndim 3 [C, H, W] or 4 [C, D, H, W]. */
void tsr_dataset_input_dims(const tsr_dataset *d, tsr_shape *s);
void tsr_dataset_target_dims(const tsr_dataset *d, tsr_shape *s);
/* Reads one sample (thread-safe: HDF5 calls are serialised inside). */
tsr_status tsr_dataset_read(tsr_dataset *d, int64_t index, float *x, float *y);
/* Reads the box [start[a], start[a] + extent[a]) of each spatial axis a (D, H, W or H, W) of sample
 * `index`'s input, all channels, into x as [C, extent...] through an HDF5 hyperslab (nothing
 * outside the box is copied out). y gets the same box of the target when the target has the
 * input's spatial shape (segmentation), else the whole target. Errors name the axis. */
tsr_status tsr_dataset_read_box(tsr_dataset *d, int64_t index, const int64_t *start, const int64_t *extent, float *x,
                                float *y);

/* Phase-object diffraction: a random projected potential V (Gaussian atoms) gives the input
 * log(1 + |FFT(P exp(i sigma V))|^2) and the target V. P is a defocused convergent probe (aperture
 * and defocus): its central disc then holds a shadow image of V (as in a Ronchigram), which makes
 * the inverse problem well-posed. With aperture 0, P = 1 (plane wave): |FFT|^2 is then blind to
 * translations of V, so V cannot be recovered from it; that mode exists for tests and comparison. */
typedef struct tsr_phase_gen_opts {
  int size;          /* pattern and potential side in pixels (default 64) */
  int atoms_min, atoms_max; /* atoms per sample (default 4..12) */
  float sigma;       /* interaction constant x potential scale (default 0.8) */
  float width_min, width_max; /* Gaussian atom width in pixels (default 1.5..3.0) */
  float aperture;    /* probe aperture radius as a fraction of Nyquist (default 0.6; 0 = plane wave) */
  float magnification; /* defocus, as the shadow image's magnification (default 1: pixel k of the
                          pattern shows V at the same offset from the centre) */
  uint64_t seed;     /* default 1, as every seed in Tessera (programs, tsr_context_opts) */
  int workers;       /* threads generating samples in tsr_phase_gen_write (default 1); the data do not
                        depend on it */
} tsr_phase_gen_opts;

void tsr_phase_gen_opts_default(tsr_phase_gen_opts *o);
/* Generates sample `index` (deterministic for seed and index): x [1,size,size], v [1,size,size]. */
tsr_status tsr_phase_gen_sample(const tsr_phase_gen_opts *o, int64_t index, float *x, float *v);
/* Writes n samples to an HDF5 file (datasets inputs and targets, attributes for each option);
 * progress(user, done, total) is called now and then if not NULL. */
tsr_status tsr_phase_gen_write(const tsr_phase_gen_opts *o, int64_t n, const char *path,
                               void (*progress)(void *user, int64_t done, int64_t total), void *user);

#ifdef __cplusplus
}
#endif
#endif

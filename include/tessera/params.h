/* Parameter import/export in PyTorch's layouts and names, as a folder of .npy files
 * (<name>.npy, float32, C order) or one HDF5 file (one float32 dataset per tensor). */
#ifndef TESSERA_PARAMS_H
#define TESSERA_PARAMS_H

#include <stdint.h>
#include <tessera/status.h>
#include <tessera/train.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Path ending in .h5 or .hdf5: HDF5 file; otherwise a folder of .npy files (created if absent). */
tsr_status tsr_params_export(tsr_trainer *t, const char *path);
/* Every tensor of the trainer must be present with its exact shape; errors name the tensor,
 * the file and both shapes. */
tsr_status tsr_params_import(tsr_trainer *t, const char *path);

/* .npy helpers (float32, little-endian, C order; float64 is converted on read). */
tsr_status tsr_npy_write(const char *path, const tsr_shape *shape, const float *data);
/* Allocates *data (free with free()). */
tsr_status tsr_npy_read(const char *path, tsr_shape *shape, float **data);

#ifdef __cplusplus
}
#endif
#endif

/* libFuzzer target: the HDF5 dataset reader (open, shapes, reading every sample, NaN checks). */
#include <stdlib.h>
#include <tessera/data.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size, ".h5");
  tsr_dataset *d;
  if (!path || tsr_dataset_open(&d, path) != TSR_OK) return 0;
  int c, h, w, tc, th, tw;
  tsr_dataset_input_shape(d, &c, &h, &w);
  tsr_dataset_target_shape(d, &tc, &th, &tw);
  size_t xe = (size_t)c * h * w, ye = (size_t)tc * th * tw;
  float *x = xe < (1u << 24) ? malloc(xe * sizeof *x + 1) : NULL, *y = ye < (1u << 24) ? malloc(ye * sizeof *y + 1) : NULL;
  int64_t n = tsr_dataset_size(d);
  for (int64_t i = 0; x && y && i < n && i < 16; i++) tsr_dataset_read(d, i, x, y);
  free(x);
  free(y);
  tsr_dataset_close(d);
  return 0;
}

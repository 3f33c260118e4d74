/* libFuzzer target: the .npy reader (header dictionary, dtype, shape, data length). */
#include <stdlib.h>
#include <tessera/params.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size, ".npy");
  tsr_shape shape;
  float *v = NULL;
  if (path && tsr_npy_read(path, &shape, &v) == TSR_OK) free(v);
  return 0;
}

/* libFuzzer target: the checkpoint reader (HDF5 layout, attributes, shapes, checksum) on any bytes. */
#include <tessera/checkpoint.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size, ".h5");
  tsr_checkpoint_meta meta;
  int n;
  if (path) tsr_checkpoint_verify(path, &meta, &n);
  return 0;
}

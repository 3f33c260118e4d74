/* libFuzzer target: the checkpoint reader (HDF5 layout, attributes, shapes, checksum) on any bytes,
 * each given a matching digest file, so the input reaches HDF5 (the digest alone would reject it). */
#include <tessera/checkpoint.h>
#include "io/checkpoint_int.h"

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size, ".h5");
  tsr_checkpoint_meta meta;
  int n;
  if (path && _tsr_ck_write_sum(path) == TSR_OK) tsr_checkpoint_verify(path, &meta, &n);
  return 0;
}

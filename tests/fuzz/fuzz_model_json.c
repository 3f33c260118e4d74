/* libFuzzer target: the JSON model reader (layers, DAG references, shapes, loss, optimizer). */
#include <tessera/model.h>
#include <tessera/train.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size, ".json");
  tsr_model *m;
  tsr_optim_spec opt;
  if (path && tsr_model_load_json(&m, &opt, path) == TSR_OK) tsr_model_destroy(m);
  return 0;
}

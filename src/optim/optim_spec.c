/* Optimizer specifications: per-kind defaults and the names used in model files and on the
 * command line ("sgd", "adam", "adamw"). The update kernels live in codelets/optim.c. */
#include <string.h>

#include <tessera/train.h>

#include "runtime/error.h"

static const char *const optim_names[TSR_OPTIM_KIND_COUNT] = {"sgd", "adam", "adamw"};

tsr_optim_spec tsr_optim_spec_default(tsr_optim_kind kind) {
  tsr_optim_spec s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.beta1 = 0.9f;
  s.beta2 = 0.999f;
  s.eps = 1e-8f;
  switch (kind) {
  case TSR_OPTIM_SGD:
    s.lr = 0.01f;
    s.momentum = 0.9f;
    break;
  case TSR_OPTIM_ADAMW:
    s.lr = 1e-3f;
    s.weight_decay = 0.01f; /* PyTorch's AdamW default */
    break;
  default:
    s.lr = 1e-3f;
    break;
  }
  return s;
}

const char *tsr_optim_kind_name(tsr_optim_kind kind) {
  return (unsigned)kind < TSR_OPTIM_KIND_COUNT ? optim_names[kind] : "?";
}

tsr_status tsr_optim_kind_parse(const char *name, tsr_optim_kind *kind) {
  if (!kind) return _tsr_error(TSR_ERR_ARG, "tsr_optim_kind_parse: kind is NULL");
  for (int i = 0; name && i < TSR_OPTIM_KIND_COUNT; i++)
    if (strcmp(name, optim_names[i]) == 0) {
      *kind = (tsr_optim_kind)i;
      return TSR_OK;
    }
  return _tsr_error(TSR_ERR_ARG, "unknown optimizer '%s' (expected sgd, adam, adamw)", name ? name : "(null)");
}

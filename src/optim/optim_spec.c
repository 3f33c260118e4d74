/* Optimizer specifications: per-kind defaults, the names used in model files and on the command
 * line ("sgd", "adam", "adamw") and the hyperparameters each kind uses (to report a resumed run's
 * changes). The update kernels live in codelets/optim.c. */
#include <stddef.h>
#include <stdio.h>
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

#define SGD_ONLY (1u << TSR_OPTIM_SGD)
#define ADAMS ((1u << TSR_OPTIM_ADAM) | (1u << TSR_OPTIM_ADAMW))

/* The hyperparameters of tsr_optim_spec (floats, but nesterov) and the kinds that use them. */
static const struct {
  const char *name;
  size_t offset;
  unsigned kinds;
  int is_int;
} hyper[] = {{"lr", offsetof(tsr_optim_spec, lr), SGD_ONLY | ADAMS, 0},
             {"momentum", offsetof(tsr_optim_spec, momentum), SGD_ONLY, 0},
             {"nesterov", offsetof(tsr_optim_spec, nesterov), SGD_ONLY, 1},
             {"weight_decay", offsetof(tsr_optim_spec, weight_decay), SGD_ONLY | ADAMS, 0},
             {"beta1", offsetof(tsr_optim_spec, beta1), ADAMS, 0},
             {"beta2", offsetof(tsr_optim_spec, beta2), ADAMS, 0},
             {"eps", offsetof(tsr_optim_spec, eps), ADAMS, 0}};

int tsr_optim_spec_diff(const tsr_optim_spec *from, const tsr_optim_spec *to, char *out, size_t cap) {
  int n = 0;
  size_t len = 0;
  if (cap) out[0] = '\0';
  for (size_t i = 0; i < sizeof hyper / sizeof *hyper; i++) {
    if (!(hyper[i].kinds & (1u << to->kind))) continue;
    const char *a = (const char *)from + hyper[i].offset, *b = (const char *)to + hyper[i].offset;
    int is_int = hyper[i].is_int;
    double x = is_int ? *(const int *)a : *(const float *)a, y = is_int ? *(const int *)b : *(const float *)b;
    if (x == y) continue;
    if (len < cap)
      len += (size_t)snprintf(out + len, cap - len, "%s%s %.7g -> %.7g", n ? ", " : "", hyper[i].name, x, y);
    n++;
  }
  return n;
}

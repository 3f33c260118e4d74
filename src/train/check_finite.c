/* Reports the first non-finite gradient the trainer's check tasks (codelets/check_finite.c) found,
 * naming the step, the tensor and the layer it belongs to. */
#include <string.h>

#include "train/trainer.h"
#include "runtime/error.h"

tsr_status tsr_trainer_check_finite(tsr_trainer *t, int64_t *step) {
  if (!t) return _tsr_error(TSR_ERR_ARG, "tsr_trainer_check_finite: trainer is NULL");
  struct _tsr_finite *f = &t->nonfinite;
  pthread_mutex_lock(&f->lock);
  int64_t bad = f->step;
  char name[sizeof f->name];
  float value = f->value;
  memcpy(name, f->name, sizeof name);
  pthread_mutex_unlock(&f->lock);
  if (bad < 0) return TSR_OK;
  if (step) *step = bad;
  char layer[sizeof name];
  memcpy(layer, name, sizeof layer);
  char *dot = strrchr(layer, '.');
  if (dot) *dot = '\0';
  return _tsr_error(TSR_ERR_NUMERIC, "step %lld: the gradient of '%s' (layer '%s') holds %g", (long long)bad, name,
                    layer, value);
}

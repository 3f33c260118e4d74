/* The trainer's two per-channel standardisations, both part of the model: of the inputs (every
 * sample a load task writes becomes (x - mean) / std before the first layer) and of the targets
 * (every target a load task writes becomes (y - mean) / std, so the loss, its gradient and the
 * reported loss are in standardised units; an evaluation's outputs are turned back, out * std +
 * mean, as the task copies them to the caller). Load and copy tasks read the arrays, so replacing
 * them waits for the steps in flight first. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "train/trainer.h"

/* Checks and copies mean and std ([c] each) into *m and *s; both NULL when the values are the
 * identity or absent. `what` and `layer` name them in messages. */
static tsr_status copy_norm(const char *what, const char *layer, int c, const float *mean, const float *std,
                            int channels, float **m, float **s) {
  *m = *s = NULL;
  if (!mean) return TSR_OK;
  if (channels != c)
    return _tsr_error(TSR_ERR_SHAPE, "%s: %d channels, the model's %s '%s' has %d", what, channels,
                      strcmp(what, "input normalisation") ? "output" : "input", layer, c);
  int identity = 1;
  for (int i = 0; i < c; i++) {
    if (!isfinite(mean[i]) || !isfinite(std[i]) || !(std[i] > 0))
      return _tsr_error(TSR_ERR_ARG, "%s: channel %d has mean %g and std %g (finite, std > 0)", what, i, mean[i],
                        std[i]);
    identity &= mean[i] == 0 && std[i] == 1;
  }
  if (identity) return TSR_OK;
  *m = malloc(sizeof(float) * c), *s = malloc(sizeof(float) * c);
  if (!*m || !*s) {
    free(*m), free(*s);
    return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", what);
  }
  memcpy(*m, mean, sizeof(float) * c), memcpy(*s, std, sizeof(float) * c);
  return TSR_OK;
}

/* Replaces (*mean, *std) by (m, s) once no task reads the old arrays; frees m and s on failure. */
static tsr_status replace(tsr_trainer *t, float **mean, float **std, float *m, float *s) {
  tsr_status st = tsr_trainer_sync(t);
  if (st != TSR_OK) {
    free(m), free(s);
    return st;
  }
  free(*mean), free(*std);
  *mean = m, *std = s;
  return TSR_OK;
}

tsr_status tsr_trainer_set_input_norm(tsr_trainer *t, const float *mean, const float *std, int channels) {
  if (!t || !mean != !std) return _tsr_error(TSR_ERR_ARG, "tsr_trainer_set_input_norm: trainer, or mean and std both");
  const struct _tsr_layer *in = &t->model->layers[t->input_layer];
  float *m, *s;
  TSR_TRY(copy_norm("input normalisation", in->name, in->c, mean, std, channels, &m, &s));
  return replace(t, &t->norm_mean, &t->norm_std, m, s);
}

void tsr_trainer_input_norm(const tsr_trainer *t, const float **mean, const float **std) {
  *mean = t ? t->norm_mean : NULL;
  *std = t ? t->norm_std : NULL;
}

tsr_status tsr_trainer_set_target_norm(tsr_trainer *t, const float *mean, const float *std, int channels) {
  if (!t || !mean != !std) return _tsr_error(TSR_ERR_ARG, "tsr_trainer_set_target_norm: trainer, or mean and std both");
  if (mean && t->model->loss == TSR_LOSS_SOFTMAX_CROSS_ENTROPY)
    return _tsr_error(TSR_ERR_ARG,
                      "target standardisation: the loss of model '%s' is %s, whose targets are class probabilities "
                      "(standardised they would not sum to 1)",
                      t->model->name, tsr_loss_kind_name(t->model->loss));
  const struct _tsr_layer *out = &t->model->layers[t->output_layer];
  float *m, *s;
  TSR_TRY(copy_norm("target standardisation", out->name, out->c, mean, std, channels, &m, &s));
  return replace(t, &t->tnorm_mean, &t->tnorm_std, m, s);
}

void tsr_trainer_target_norm(const tsr_trainer *t, const float **mean, const float **std) {
  *mean = t ? t->tnorm_mean : NULL;
  *std = t ? t->tnorm_std : NULL;
}

double tsr_trainer_target_loss_factor(const tsr_trainer *t) {
  if (!t) return NAN;
  if (!t->tnorm_mean) return 1.0;
  int c = t->model->layers[t->output_layer].c;
  for (int i = 1; i < c; i++)
    if (t->tnorm_std[i] != t->tnorm_std[0]) return NAN; /* each channel's share would need its own factor */
  double s = t->tnorm_std[0];
  switch (t->model->loss) {
  case TSR_LOSS_MSE: return s * s;
  case TSR_LOSS_L1: return s;
  default: return NAN; /* Huber: quadratic below delta, linear above, in standardised units */
  }
}

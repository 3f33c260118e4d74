/* Dynamic loss scaling: halve on overflow (the step is skipped), double after a run of finite steps,
 * clamped to [2^-24, 2^24 * 65536] so that repeated overflows or long runs cannot reach 0 or inf. */
#include "optim/loss_scale.h"
#include "runtime/error.h"

tsr_status _tsr_loss_scaler_init(struct _tsr_loss_scaler *s, double init_scale, int growth_interval) {
  if (!s) return _tsr_error(TSR_ERR_ARG, "loss scaler: NULL scaler");
  if (!(init_scale > 0) || init_scale > 1e30)
    return _tsr_error(TSR_ERR_ARG, "loss scaler: init_scale = %g (must be positive and finite)", init_scale);
  if (growth_interval < 1)
    return _tsr_error(TSR_ERR_ARG, "loss scaler: growth_interval = %d (must be >= 1)", growth_interval);
  *s = (struct _tsr_loss_scaler){.scale = init_scale, .growth = 2.0, .backoff = 0.5, .min_scale = 0x1p-24,
                                 .max_scale = 0x1p40, .growth_interval = growth_interval};
  return TSR_OK;
}

int _tsr_loss_scaler_update(struct _tsr_loss_scaler *s, int grads_finite) {
  s->steps++;
  if (!grads_finite) {
    s->skipped++;
    s->good_steps = 0;
    s->scale *= s->backoff;
    if (s->scale < s->min_scale) s->scale = s->min_scale;
    return 0;
  }
  if (++s->good_steps >= s->growth_interval) {
    s->good_steps = 0;
    s->scale *= s->growth;
    if (s->scale > s->max_scale) s->scale = s->max_scale;
  }
  return 1;
}

float _tsr_loss_scaler_unscale(const struct _tsr_loss_scaler *s, int ranks) {
  return (float)(1.0 / (s->scale * (ranks > 0 ? ranks : 1)));
}

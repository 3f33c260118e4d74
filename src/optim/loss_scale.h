/* Dynamic loss scaling for fp16 training (the policy of torch.cuda.amp.GradScaler): the loss, hence
 * every gradient, is multiplied by `scale`; a step whose gradients hold an inf or NaN is skipped
 * and the scale halved; after `growth_interval` finite steps in a row the scale doubles. The
 * optimizer unscales through tsr_opt_args.grad_scale = 1 / (scale * ranks). */
#ifndef TSR_LOSS_SCALE_H
#define TSR_LOSS_SCALE_H

#include <stdint.h>
#include <tessera/status.h>

struct _tsr_loss_scaler {
  double scale, growth, backoff, min_scale, max_scale;
  int growth_interval, good_steps;
  int64_t steps, skipped;
};

/* init_scale > 0 (PyTorch: 65536), growth_interval >= 1 (PyTorch: 2000). */
tsr_status _tsr_loss_scaler_init(struct _tsr_loss_scaler *s, double init_scale, int growth_interval);
/* After a step's gradients are known (and reduced across ranks): returns 1 when the step must be
 * applied, 0 when it must be skipped, and updates the scale for the next step. */
int _tsr_loss_scaler_update(struct _tsr_loss_scaler *s, int grads_finite);
/* Factor for tsr_opt_args.grad_scale. */
float _tsr_loss_scaler_unscale(const struct _tsr_loss_scaler *s, int ranks);

#endif

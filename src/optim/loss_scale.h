/* Dynamic loss scaling for reduced-precision training (the policy of torch.cuda.amp.GradScaler): the
 * loss gradient, hence every gradient, is multiplied by `scale`; a step whose reduced gradients hold
 * an Inf or NaN is skipped and the scale halved; after `growth_interval` finite steps in a row it
 * doubles. The state lives in a StarPU handle and the policy runs in tasks, so the host never waits
 * for a decision: the step's update tasks read it (struct _tsr_scale_state, codelets.h). */
#ifndef TSR_LOSS_SCALE_H
#define TSR_LOSS_SCALE_H

#include <stdint.h>
#include <starpu.h>
#include <tessera/status.h>
#include "codelets.h"

struct _tsr_loss_scaler {
  double growth, backoff, min_scale, max_scale;
  int growth_interval;
};

/* init_scale in (0, 2^127] (PyTorch: 65536), growth_interval >= 1 (PyTorch: 2000). */
tsr_status _tsr_loss_scaler_init(struct _tsr_loss_scaler *p, struct _tsr_scale_state *s, double init_scale,
                                 int growth_interval);
/* After a step's gradients are known (and reduced across ranks): returns 1 when the step must be
 * applied, 0 when it must be skipped, and moves the scale for the next step. */
int _tsr_loss_scaler_update(const struct _tsr_loss_scaler *p, struct _tsr_scale_state *s, int grads_finite);
/* Factor for _tsr_optim_args.grad_scale: 1 / (scale * ranks), exact for a power-of-two scale. */
float _tsr_loss_scaler_unscale(double scale, int ranks);

/* Tasks. x *= scale (RW x), the scale read from `state` (R) or, when state is NULL, `fixed`. */
int _tsr_insert_scale_grad(starpu_data_handle_t x, starpu_data_handle_t state, double fixed, const char *name);
/* state->overflow |= some value of the n handles (R) is not finite; commutes with the others. */
int _tsr_insert_scale_check(starpu_data_handle_t state, int n, const starpu_data_handle_t *grads, const char *name);
/* The step's decision (RW state): apply, unscale for `ranks`, next scale; clears overflow. */
int _tsr_insert_scale_decide(starpu_data_handle_t state, const struct _tsr_loss_scaler *p, int ranks);

#endif

/* Batch normalisation over the whole batch (PyTorch's BatchNorm2d, and BatchNorm3d on [C, D, H, W]
 * inputs, whose D*H*W positions per channel are planes of [C, D*H, W]): statistics span every slice,
 * so slice 0 opens an accumulation, each slice adds to it, and the last slice's call closes it and
 * submits every slice's normalisation (forward) or data gradient (backward); with spatially split
 * samples the closing call first sums the accumulation over the spatial group. With c->relu, a
 * following relu runs in the same tasks (y and dy are the relu's; the backward recomputes the
 * relu's mask from x, the statistics, gamma and beta, so the caller must not change gamma and beta
 * between a slice's forward and backward: asynchronous slices, whose updates may, do not fuse the
 * relu, train/layout.c). State: the forward
 * and backward sums (double [2c]) and the batch's mean and inverse std (float [2c]).
 *
 * With c->slice_stats (asynchronous slices: no join between slices) each slice is a batch of its
 * own ("ghost" batch norm, as data-parallel replicas without synchronised batch norm): the same
 * tasks on the slice's own state, statistics over its n_s samples instead of the batch's B, the
 * backward of that per-slice normalisation, gamma and beta gradients written into the slice's own
 * buffers. Each slice's finalize task applies the momentum update of the running statistics with
 * its own mean and unbiased variance (n_s samples), in whichever order the slices' tasks run: S
 * updates per step with S slices, not bitwise reproducible. With one slice it is the whole-batch
 * path, task for task. */
#include <stddef.h>
#include <string.h>

#include "codelets.h"
#include "layers/layer.h"
#include "runtime/error.h"

enum { ACC_F, ACC_B, STAT, NSTATE };           /* state buffers */
enum { GAMMA, BETA, RUNNING_MEAN, RUNNING_VAR }; /* tensors */

static tsr_status bn_infer(struct _tsr_layer_view *v, tsr_layer_spec *s, const char *const *in_names) {
  if (!(s->eps > 0) || !(s->momentum >= 0 && s->momentum <= 1))
    return _tsr_error(TSR_ERR_ARG, "batchnorm '%s': eps %g must be > 0 and momentum %g in [0, 1]", v->name, s->eps,
                      s->momentum);
  return _tsr_infer_same(v, s, in_names);
}

static int bn_num_tensors(const tsr_layer_spec *s) { return 4; }

static void bn_tensor(const struct _tsr_layer_view *v, int i, tsr_shape *shape, const char **suffix, int *trainable) {
  static const char *const names[4] = {"weight", "bias", "running_mean", "running_var"};
  memset(shape, 0, sizeof *shape);
  shape->ndim = 1, shape->dims[0] = v->out.c;
  *suffix = names[i];
  *trainable = i == GAMMA || i == BETA;
}

/* gamma = 1, beta = 0, running mean 0, running variance 1 */
static void bn_init(const struct _tsr_layer_view *v, int i, float *w, size_t n, uint64_t seed) {
  float x = (i == GAMMA || i == RUNNING_VAR) ? 1.0f : 0.0f;
  for (size_t j = 0; j < n; j++) w[j] = x;
}

static int bn_num_state(const struct _tsr_layer_view *v) { return NSTATE; }

static void bn_state(const struct _tsr_layer_view *v, int i, size_t *count, size_t *elemsize) {
  *count = 2 * (size_t)v->out.c;
  *elemsize = i == STAT ? sizeof(float) : sizeof(double);
}

static struct _tsr_bn_desc bn_desc(const struct _tsr_layer_call *c, int s) {
  const struct _tsr_layer_view *v = c->v;
  struct _tsr_bn_desc d = {.n = c->slice_n[s], .c = v->out.c, .h = v->out.h * _tsr_chw_depth(&v->out), .w = v->out.w,
                          .total = (int64_t)(c->slice_stats ? c->slice_n[s] : c->batch) * c->parts,
                          .eps = v->spec->eps, .momentum = v->spec->momentum, .blk = v->out_blk, .relu = c->relu,
                          .x_bf16 = v->in_bf16[0], .y_bf16 = v->out_bf16, .dy_bf16 = v->dout_bf16,
                          .dx_bf16 = v->din_bf16[0], .dx_add = c->dx_add[0]};
  return d;
}

/* The statistics of slice c->s alone, in its own state (c->slice_stats; never spatially split:
 * asynchronous slices refuse --spatial, and group_sum tells sums apart by step, not slice). */
static int slice_forward(const struct _tsr_layer_call *c, struct _tsr_bn_desc *d) {
  const starpu_data_handle_t *st = c->state, *w = c->w;
  const char *nm = c->v->name;
  d->overwrite = 1;
  int ret = _tsr_insert_bn_stats(d, c->x[0][c->s], st[ACC_F], nm);
  d->overwrite = 0;
  if (!ret) ret = _tsr_insert_bn_finalize(d, st[ACC_F], st[STAT], w[RUNNING_MEAN], w[RUNNING_VAR], nm);
  if (!ret) ret = _tsr_insert_bn_fwd(d, c->x[0][c->s], st[STAT], w[GAMMA], w[BETA], c->y[c->s], nm);
  return ret;
}

static int bn_forward(const struct _tsr_layer_call *c) {
  struct _tsr_bn_desc d = bn_desc(c, c->s);
  const starpu_data_handle_t *st = c->state, *w = c->w;
  const char *nm = c->v->name;
  if (!c->train)
    return _tsr_insert_bn_fwd_eval(&d, c->x[0][c->s], w[RUNNING_MEAN], w[RUNNING_VAR], w[GAMMA], w[BETA],
                                   c->y[c->s], nm);
  if (c->slice_stats) return slice_forward(c, &d);
  d.overwrite = c->s == 0; /* slice 0's sums are written, the later slices' added */
  int ret = _tsr_insert_bn_stats(&d, c->x[0][c->s], st[ACC_F], nm);
  d.overwrite = 0;
  if (ret || c->s != c->slices - 1) return ret;
  if (c->group_sum) ret = c->group_sum(c->owner, st[ACC_F], 0); /* a spatially split batch */
  if (!ret) ret = _tsr_insert_bn_finalize(&d, st[ACC_F], st[STAT], w[RUNNING_MEAN], w[RUNNING_VAR], nm);
  for (int k = 0; !ret && k < c->slices; k++) {
    struct _tsr_bn_desc dk = bn_desc(c, k);
    ret = _tsr_insert_bn_fwd(&dk, c->x[0][k], st[STAT], w[GAMMA], w[BETA], c->y[k], nm);
  }
  return ret;
}

/* The backward of slice c->s's own normalisation (c->slice_stats); dw are the slice's own. */
static int slice_backward(const struct _tsr_layer_call *c, struct _tsr_bn_desc *d) {
  const starpu_data_handle_t *st = c->state;
  const char *nm = c->v->name;
  const int s = c->s;
  d->overwrite = 1;
  int ret = _tsr_insert_bn_bwd_stats(d, c->x[0][s], st[STAT], c->dy[s], c->w[GAMMA], c->w[BETA], st[ACC_B], nm);
  d->overwrite = c->dw_first;
  if (!ret) ret = _tsr_insert_bn_bwd_params(d, st[ACC_B], c->dw[GAMMA], c->dw[BETA], nm);
  if (!ret && c->dx[0])
    ret = _tsr_insert_bn_bwd_data(d, c->x[0][s], st[STAT], c->w[GAMMA], c->w[BETA], st[ACC_B], c->dy[s],
                                  c->dx[0][s], nm);
  if (!ret) ret = _tsr_layer_dx_done(c, 0, s);
  return ret;
}

static int bn_backward(const struct _tsr_layer_call *c) {
  struct _tsr_bn_desc d = bn_desc(c, c->s);
  const starpu_data_handle_t *st = c->state;
  const char *nm = c->v->name;
  if (c->slice_stats) return slice_backward(c, &d);
  d.overwrite = c->s == 0; /* slice 0's sums are written, the later slices' added */
  int ret = _tsr_insert_bn_bwd_stats(&d, c->x[0][c->s], st[STAT], c->dy[c->s], c->w[GAMMA], c->w[BETA], st[ACC_B],
                                     nm);
  if (ret || c->s != c->slices - 1) return ret;
  d.overwrite = c->dw_first; /* the step's only writer of the parameters' gradients */
  ret = _tsr_insert_bn_bwd_params(&d, st[ACC_B], c->dw[GAMMA], c->dw[BETA], nm);
  /* split: the parameters' gradients are this block's share (the reduction sums them over the
   * ranks), the data gradient needs the sums over the whole batch */
  if (!ret && c->group_sum) ret = c->group_sum(c->owner, st[ACC_B], 1);
  for (int k = 0; !ret && c->dx[0] && k < c->slices; k++) {
    struct _tsr_bn_desc dk = bn_desc(c, k);
    ret = _tsr_insert_bn_bwd_data(&dk, c->x[0][k], st[STAT], c->w[GAMMA], c->w[BETA], st[ACC_B], c->dy[k],
                                  c->dx[0][k], nm);
    if (!ret) ret = _tsr_layer_dx_done(c, 0, k);
  }
  return ret;
}

static const struct _tsr_layer_field bn_fields[] = {
    TSR_LAYER_FIELD("eps", TSR_FIELD_POSITIVE, eps, 0),
    TSR_LAYER_FIELD("momentum", TSR_FIELD_UNIT, momentum, 0),
    {NULL},
};

const struct _tsr_layer_ops _tsr_layers_batchnorm[] = {
    {.name = "batchnorm", .kind = TSR_LAYER_BATCHNORM, .fields = bn_fields, .min_inputs = 1, .max_inputs = 1,
     .infer = bn_infer, .num_tensors = bn_num_tensors, .tensor = bn_tensor, .init = bn_init,
     .num_state = bn_num_state, .state = bn_state, .layout = TSR_LAYOUT_FOLLOW, .fuse_relu = 1, .bf16 = TSR_BF16_EACH,
     .bf16_grad = 1, .dx_add = 1,
     .forward = bn_forward, .backward = bn_backward, .spatial = TSR_SPATIAL_POINTWISE, .wgrad_first = 1},
    {.name = NULL},
};

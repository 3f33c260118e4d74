/* Internal contract between the graph (src/) and the operations (codelets/).
 * For each operation: a descriptor of its static shape and parameters, raw CPU kernels on plain
 * pointers (no StarPU, tested alone), and _tsr_insert_* functions that submit one StarPU task.
 * Shapes: n = samples in the slice, c/h/w per sample, NCHW float32. Weights in PyTorch layouts:
 * conv OIHW, transposed conv IOHW, dense [out, in]. bwd_data kernels overwrite dx; bwd_weights
 * kernels accumulate into dw/db (the graph zeroes gradients once per step). */
#ifndef TSR_CODELETS_H
#define TSR_CODELETS_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>

#include "runtime/submit.h"
#include "runtime/switches.h"

/* TSR_SIMD(omp simd ...): an OpenMP SIMD pragma on a CPU kernel's loop (nothing without OpenMP). */
#ifdef _OPENMP
#define TSR_SIMD(clause) _Pragma(#clause)
#else
#define TSR_SIMD(clause)
#endif

#ifdef __cplusplus /* the CUDA launchers (*.cu) use these declarations too */
extern "C" {
#endif

/* ---- submission: src/runtime/submit.h (the wrapper), src/runtime/switches.h (precision, determinism) ---- */
/* Called at the start of every CPU codelet: makes OpenMP (oneDNN) and OpenBLAS use one thread in
 * this worker, once per thread. */
void _tsr_worker_enter(void);

/* ---- elementary tensor tasks (tensor_ops.c) ---- */
void _tsr_zero_cpu(float *x, size_t n);
void _tsr_axpy_cpu(float *y, const float *x, float a, size_t n); /* y += a x */
void _tsr_copy_cpu(float *y, const float *x, size_t n);
int _tsr_insert_zero(starpu_data_handle_t x, const char *name);            /* x = 0 (W) */
int _tsr_insert_fill(starpu_data_handle_t x, float value, const char *name); /* x = 0, x[0] = value (W) */
/* y += x; vectors of 2-byte elements (gradients stored in bf16, CPU): y = bf16(y + x) */
int _tsr_insert_accumulate(starpu_data_handle_t y, starpu_data_handle_t x, const char *name);
int _tsr_insert_accumulate_prio(starpu_data_handle_t y, starpu_data_handle_t x, const char *name, int prio);
/* y += x into a gradient that several tasks add into: y in the accumulation mode (_tsr_accum_mode) */
int _tsr_insert_accumulate_grad(starpu_data_handle_t y, starpu_data_handle_t x, const char *name);
int _tsr_insert_copy(starpu_data_handle_t y, starpu_data_handle_t x, const char *name);  /* y = x */

/* ---- conv2d and conv_transpose2d (conv2d.c, conv_transpose2d.c; oneDNN) ---- */
/* The passes of a convolution, a transposed convolution and a dense layer (their CUDA launchers too). */
enum _tsr_conv_pass { TSR_CONV_FWD, TSR_CONV_BWD_DATA, TSR_CONV_BWD_WEIGHTS };
struct _tsr_conv_desc {
  int n, ci, h, w;      /* input */
  int co, oh, ow;       /* output */
  int kh, kw, sh, sw, ph, pw, dh, dw; /* dilation 1 = none */
  int oph, opw;         /* transposed only: output padding */
  int has_bias;
  int src_blk, dst_blk; /* CPU: channel block of the input's and output's layout (and of their
                         * gradients'), 0 plain NCHW; blocked nChw{B}c has zero padding channels */
  int overwrite;        /* bwd_weights: dw (and db) are written (STARPU_W), not added into */
  int src_bf16, dst_bf16; /* CPU: the input (read by fwd and bwd_weights) and the output (written by
                           * fwd) are stored as bf16 (uint16_t bit patterns, same layout) */
  int dsrc_bf16, ddst_bf16; /* CPU: the input's gradient (written by bwd_data) and the output's (read
                             * by bwd_data and bwd_weights) are stored as bf16 */
};

void _tsr_conv2d_fwd_cpu(const struct _tsr_conv_desc *d, const float *x, const float *w, const float *b, float *y);
void _tsr_conv2d_bwd_data_cpu(const struct _tsr_conv_desc *d, const float *dy, const float *w, float *dx);
void _tsr_conv2d_bwd_weights_cpu(const struct _tsr_conv_desc *d, const float *x, const float *dy, float *dw, float *db);
/* Which activations (TSR_CONV_REORDERS_SRC: the input and its gradient, _DST: the output and its
 * gradient) the tasks of a conv2d (deconv 0) or conv_transpose2d (1) with descriptor d would
 * reorder between the caller's layout and the one oneDNN's kernel takes, over the forward, the
 * backward for weights and, with bwd_data, the backward for data; -1 when a plan failed (the
 * failure is recorded, see _tsr_kernel_error). The trainer reorders those in tasks of their own. */
enum { TSR_CONV_REORDERS_SRC = 1, TSR_CONV_REORDERS_DST = 2 };
int _tsr_convlike_reorders(const struct _tsr_conv_desc *d, int deconv, int bwd_data);
/* Reorders that convolution tasks (conv2d, conv_transpose2d) ran inside themselves since the
 * process started: of activations and their gradients (params 0), of weights, biases and their
 * gradients (params 1). For tests. */
long _tsr_conv_reorders(int params);
/* StarPU's can_execute of the conv and transposed-conv codelets: in fp16 only non-CPU workers. */
int _tsr_conv_can_execute(unsigned workerid, struct starpu_task *task, unsigned nimpl);
int _tsr_insert_conv2d_fwd(const struct _tsr_conv_desc *d, starpu_data_handle_t x, starpu_data_handle_t w,
                           starpu_data_handle_t b /* NULL if no bias */, starpu_data_handle_t y, const char *name);
int _tsr_insert_conv2d_bwd_data(const struct _tsr_conv_desc *d, starpu_data_handle_t dy, starpu_data_handle_t w,
                                starpu_data_handle_t dx, const char *name);
int _tsr_insert_conv2d_bwd_weights(const struct _tsr_conv_desc *d, starpu_data_handle_t x, starpu_data_handle_t dy,
                                   starpu_data_handle_t dw, starpu_data_handle_t db, const char *name);
/* Weights w: IOHW [ci, co, kh, kw]. */
void _tsr_deconv2d_fwd_cpu(const struct _tsr_conv_desc *d, const float *x, const float *w, const float *b, float *y);
void _tsr_deconv2d_bwd_data_cpu(const struct _tsr_conv_desc *d, const float *dy, const float *w, float *dx);
void _tsr_deconv2d_bwd_weights_cpu(const struct _tsr_conv_desc *d, const float *x, const float *dy, float *dw, float *db);
int _tsr_insert_deconv2d_fwd(const struct _tsr_conv_desc *d, starpu_data_handle_t x, starpu_data_handle_t w,
                             starpu_data_handle_t b, starpu_data_handle_t y, const char *name);
int _tsr_insert_deconv2d_bwd_data(const struct _tsr_conv_desc *d, starpu_data_handle_t dy, starpu_data_handle_t w,
                                  starpu_data_handle_t dx, const char *name);
int _tsr_insert_deconv2d_bwd_weights(const struct _tsr_conv_desc *d, starpu_data_handle_t x, starpu_data_handle_t dy,
                                     starpu_data_handle_t dw, starpu_data_handle_t db, const char *name);

/* ---- reorders of activations between plain NCHW and blocked nChw{B}c (reorder.c; oneDNN, CPU) ---- */
struct _tsr_reorder_desc {
  int n, c, h, w;         /* the activation, channels without padding */
  int from_blk, to_blk;   /* channel blocks of the source and destination layouts, 0 plain */
};
void _tsr_reorder_cpu(const struct _tsr_reorder_desc *d, const float *x, float *y);
/* y = x in the other layout; grad: a gradient (codelet tsr_reorder_bwd, else tsr_reorder_fwd). */
int _tsr_insert_reorder(const struct _tsr_reorder_desc *d, int grad, starpu_data_handle_t x, starpu_data_handle_t y,
                        const char *name);

/* ---- conv3d and conv_transpose3d (conv3d.c; oneDNN on NCDHW) ----
 * Weights OIDHW [co, ci, kd, kh, kw] (transposed: IODHW [ci, co, kd, kh, kw]); ci and co are the
 * layer's input and output channels. Arrays hold (depth, height, width). Float32 at every
 * precision. Buffers of the passes as for conv2d: fwd x, w, [b] -> y; bwd_data dy, w -> dx;
 * bwd_weights x, dy -> dw +=, [db +=]. */
struct _tsr_conv3d_desc {
  int n, ci, id[3];     /* input: samples, channels, D, H, W */
  int co, od[3];        /* output */
  int k[3], s[3], p[3], dil[3]; /* dilation 1 = none */
  int op[3];            /* transposed only: output padding */
  int has_bias, deconv;
  int overwrite; /* bwd_weights: dw (and db) are written (STARPU_W), not added into */
  /* Ranges of planes (_tsr_insert_conv3d_range, CPU): along each axis a (0 D, 1 H, 2 W) with
   * src_full[a] > 0 the first buffer read (x, or dy for bwd_data) is planes [src_off[a], src_off[a] +
   * its extent) of a buffer of src_full[a] planes there; likewise the second one (bwd_weights: dy)
   * with in1_*, and the forward's output (planes [dst_off[a], dst_off[a] + od[a]) of dst_full[a]);
   * 0: the buffer is whole along a. */
  int src_full[3], src_off[3], in1_full[3], in1_off[3], dst_full[3], dst_off[3];
};
void _tsr_conv3d_run(const struct _tsr_conv3d_desc *d, enum _tsr_conv_pass pass, const float *in0, const float *in1,
                     const float *in2, float *out0, float *out1);
/* oneDNN's implementation name for the pass (NULL if the primitive could not be made). */
const char *_tsr_conv3d_impl(const struct _tsr_conv3d_desc *d, enum _tsr_conv_pass pass);
/* h0, h1 read; fwd: h2 the bias (when there is one), h3 the output; bwd_data: h2 the output;
 * bwd_weights: h2 dw and h3 db (when there is a bias), accumulated (written with d->overwrite). */
int _tsr_insert_conv3d(const struct _tsr_conv3d_desc *d, enum _tsr_conv_pass pass, starpu_data_handle_t h0,
                       starpu_data_handle_t h1, starpu_data_handle_t h2, starpu_data_handle_t h3, const char *name);
/* A pass on boxes of its buffers (the desc's src_*, in1_* and dst_* fields), buffers as
 * _tsr_insert_conv3d's: the pieces of a convolution split along one or more axes (interior, edge slabs).
 * The forward's output keeps its other planes (read-write). CPU only. */
int _tsr_insert_conv3d_range(const struct _tsr_conv3d_desc *d, enum _tsr_conv_pass pass, starpu_data_handle_t h0,
                             starpu_data_handle_t h1, starpu_data_handle_t h2, starpu_data_handle_t h3,
                             const char *name);

/* ---- pooling (pool.c; oneDNN): 2-D on NCHW, or 3-D on NCDHW when d > 0 ---- */
struct _tsr_pool_desc {
  int n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
  int is_max;           /* 1 max, 0 average (padding counted, as PyTorch's default) */
  int blk;              /* CPU: channel block of x and y (and their gradients), 0 plain NCHW */
  int d, od, kd, sd, pd; /* depth axis of 3-D pooling; all 0 for 2-D */
  int bf16;             /* CPU, 2-D: x and y stored as bf16 (uint16_t bit patterns) */
  int dy_bf16, dx_bf16; /* CPU, 2-D: y's and x's gradients stored as bf16; each independently of
                         * the other and of bf16 */
};
/* Bytes of the saved state of max pooling for one slice (0 for average). */
size_t _tsr_pool_ws_bytes(const struct _tsr_pool_desc *d);
void _tsr_pool_fwd_cpu(const struct _tsr_pool_desc *d, const float *x, float *y, void *ws);
void _tsr_pool_bwd_cpu(const struct _tsr_pool_desc *d, const float *dy, const void *ws, float *dx);
/* ws: vector handle of bytes (registered with elemsize 1), NULL for average pooling. */
int _tsr_insert_pool_fwd(const struct _tsr_pool_desc *d, starpu_data_handle_t x, starpu_data_handle_t y,
                         starpu_data_handle_t ws, const char *name);
int _tsr_insert_pool_bwd(const struct _tsr_pool_desc *d, starpu_data_handle_t dy, starpu_data_handle_t ws,
                         starpu_data_handle_t dx, const char *name);

/* ---- nearest upsampling by an integer factor on D, H and W (upsample.c) ---- */
struct _tsr_upsample_desc {
  int n, c, d, h, w;    /* input */
  int f;                /* factor: the output is [c, d f, h f, w f] */
};
void _tsr_upsample_fwd_cpu(const struct _tsr_upsample_desc *d, const float *x, float *y);
/* dx = the sum of dy over each input element's f^3 copies */
void _tsr_upsample_bwd_cpu(const struct _tsr_upsample_desc *d, const float *dy, float *dx);
int _tsr_insert_upsample_fwd(const struct _tsr_upsample_desc *d, starpu_data_handle_t x, starpu_data_handle_t y,
                             const char *name);
int _tsr_insert_upsample_bwd(const struct _tsr_upsample_desc *d, starpu_data_handle_t dy, starpu_data_handle_t dx,
                             const char *name);

/* ---- activations (eltwise.c; oneDNN): a table of activations found by name ("relu") ---- */
struct _tsr_act_desc {
  int op;               /* index in eltwise.c's table: _tsr_act_find(name) */
  float alpha;          /* leaky_relu slope */
  size_t len;           /* elements in the slice */
  float scale;          /* tanh: y = scale * tanh(x) (0 or 1: the plain activation) */
};
/* Index of the activation called `name`, -1 if none; the name of index `op` (NULL if none); the
 * table's size. */
int _tsr_act_find(const char *name);
/* The output scale the kernels apply: d->scale for an activation that takes one (tanh), else 1. */
float _tsr_act_scale(const struct _tsr_act_desc *d);
const char *_tsr_act_name(int op);
int _tsr_act_count(void);
void _tsr_act_fwd_cpu(const struct _tsr_act_desc *d, const float *x, float *y);
/* x is the forward input and y its output; kernels use whichever their derivative needs. */
void _tsr_act_bwd_cpu(const struct _tsr_act_desc *d, const float *x, const float *y, const float *dy, float *dx);
int _tsr_insert_act_fwd(const struct _tsr_act_desc *d, starpu_data_handle_t x, starpu_data_handle_t y, const char *name);
int _tsr_insert_act_bwd(const struct _tsr_act_desc *d, starpu_data_handle_t x, starpu_data_handle_t y,
                        starpu_data_handle_t dy, starpu_data_handle_t dx, const char *name);

/* ---- batch normalisation over the whole batch across slices (batchnorm.c) ----
 * Statistics span every slice: per slice a stats task accumulates per-channel sums into `acc`
 * (double [2c]: sum, sum of squares), a finalize task turns them into mean and inverse std
 * (float [2c] `stat`) and updates the running statistics; then each slice is normalised.
 * Backward mirrors it: per slice accumulate sum(dy) and sum(dy * xhat) into `acc` (double [2c]),
 * then dgamma/dbeta and each slice's dx. Layouts are planar: acc = [sum | sum of squares] forward,
 * [sum dy | sum dy*xhat] backward; stat = [mean | invstd]. */
struct _tsr_bn_desc {
  int n, c, h, w;       /* slice */
  int64_t total;        /* samples in the whole batch (all slices) */
  float eps, momentum;
  int blk;              /* CPU: channel block of x, y and their gradients (0: plain NCHW) */
  int relu;             /* CPU: y = relu(batchnorm(x)); backward takes dy of the relu's output and
                         * recomputes the forward's value from x, gamma and beta (the extra buffers
                         * of the bwd tasks) for its mask */
  int overwrite;        /* stats, bwd_stats: acc, bwd_params: dgamma and dbeta are written
                         * (STARPU_W), not added into (the first slice's task, the step's only one) */
  int x_bf16, y_bf16;   /* CPU: x, y stored as bf16 (uint16_t bit patterns, same layout), loaded into
                         * float32 in the loops; arithmetic and statistics float32 */
  int dy_bf16, dx_bf16; /* CPU backward: dy (of y, or of the relu's output), dx stored as bf16 */
  int dx_add;           /* bwd_data: dx holds other consumers' contributions, this one is added into
                         * it (STARPU_RW) instead of written; with dx_bf16, rounded to bf16 first and
                         * the sum rounded (CPU), as the accumulate task sums bf16 contributions */
};
void _tsr_bn_stats_cpu(const struct _tsr_bn_desc *d, const float *x, double *acc); /* acc += (=: overwrite) */
void _tsr_bn_finalize_cpu(const struct _tsr_bn_desc *d, const double *acc, float *stat,
                          float *running_mean, float *running_var);                      /* unbiased running var */
void _tsr_bn_fwd_cpu(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *gamma,
                     const float *beta, float *y);
/* eval: normalise with the running statistics */
void _tsr_bn_fwd_eval_cpu(const struct _tsr_bn_desc *d, const float *x, const float *running_mean,
                          const float *running_var, const float *gamma, const float *beta, float *y);
/* gamma, beta: the forward's, for the relu's mask when d->relu (else unused, may be NULL) */
void _tsr_bn_bwd_stats_cpu(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *dy,
                           const float *gamma, const float *beta, double *acc); /* acc += (=: overwrite) */
/* dgamma += sum(dy xhat), dbeta += sum(dy); with d->overwrite = instead of += */
void _tsr_bn_bwd_params_cpu(const struct _tsr_bn_desc *d, const double *acc, float *dgamma, float *dbeta);
/* beta: the forward's, for the relu's mask when d->relu (else unused, may be NULL) */
void _tsr_bn_bwd_data_cpu(const struct _tsr_bn_desc *d, const float *x, const float *stat, const float *gamma,
                          const float *beta, const double *acc, const float *dy, float *dx);
/* acc handles: vector of doubles [2c]; stat: vector of floats [2c]. The first slice's stats task
 * (d->overwrite) writes an acc handle, the later slices' add into it. */
int _tsr_insert_bn_stats(const struct _tsr_bn_desc *d, starpu_data_handle_t x, starpu_data_handle_t acc, const char *name);
int _tsr_insert_bn_finalize(const struct _tsr_bn_desc *d, starpu_data_handle_t acc, starpu_data_handle_t stat,
                            starpu_data_handle_t running_mean, starpu_data_handle_t running_var, const char *name);
int _tsr_insert_bn_fwd(const struct _tsr_bn_desc *d, starpu_data_handle_t x, starpu_data_handle_t stat,
                       starpu_data_handle_t gamma, starpu_data_handle_t beta, starpu_data_handle_t y, const char *name);
int _tsr_insert_bn_fwd_eval(const struct _tsr_bn_desc *d, starpu_data_handle_t x, starpu_data_handle_t running_mean,
                            starpu_data_handle_t running_var, starpu_data_handle_t gamma, starpu_data_handle_t beta,
                            starpu_data_handle_t y, const char *name);
/* gamma, beta: the parameters the forward read, for the relu's mask when d->relu (else unused) */
int _tsr_insert_bn_bwd_stats(const struct _tsr_bn_desc *d, starpu_data_handle_t x, starpu_data_handle_t stat,
                             starpu_data_handle_t dy, starpu_data_handle_t gamma, starpu_data_handle_t beta,
                             starpu_data_handle_t acc, const char *name);
int _tsr_insert_bn_bwd_params(const struct _tsr_bn_desc *d, starpu_data_handle_t acc, starpu_data_handle_t dgamma,
                              starpu_data_handle_t dbeta, const char *name);
int _tsr_insert_bn_bwd_data(const struct _tsr_bn_desc *d, starpu_data_handle_t x, starpu_data_handle_t stat,
                            starpu_data_handle_t gamma, starpu_data_handle_t beta, starpu_data_handle_t acc,
                            starpu_data_handle_t dy, starpu_data_handle_t dx, const char *name);

/* ---- dropout (dropout.c): the mask is a pure function of (seed, element index), so backward
 * recomputes it and results do not depend on which worker runs the task. ---- */
struct _tsr_dropout_desc {
  int n, c, h, w;
  float p;
  int spatial;          /* 1: one draw per (sample, channel) */
};
/* seed already mixes step, layer and slice (masks depend on the slicing, not on the worker) */
void _tsr_dropout_fwd_cpu(const struct _tsr_dropout_desc *d, uint64_t seed, const float *x, float *y);
void _tsr_dropout_bwd_cpu(const struct _tsr_dropout_desc *d, uint64_t seed, const float *dy, float *dx);
int _tsr_insert_dropout_fwd(const struct _tsr_dropout_desc *d, uint64_t seed, starpu_data_handle_t x,
                            starpu_data_handle_t y, const char *name);
int _tsr_insert_dropout_bwd(const struct _tsr_dropout_desc *d, uint64_t seed, starpu_data_handle_t dy,
                            starpu_data_handle_t dx, const char *name);

/* ---- channel concatenation and sum (concat.c) ---- */
#define TSR_MAX_CONCAT 32
struct _tsr_concat_desc {
  int n, h, w, k;       /* k inputs */
  int c[TSR_MAX_CONCAT];
  int blk;              /* CPU: channel block of every input and the output (0: plain NCHW) */
  int bf16;             /* CPU forward: every input and the output stored as bf16 (uint16_t bit
                         * patterns, copied as they are) */
  int dy_bf16;          /* CPU backward: the output's gradient stored as bf16 */
  unsigned dx_bf16;     /* CPU backward: bit i, input i's gradient stored as bf16 (values rounded
                         * to nearest even from a float32 dy, widened from a bf16 one) */
};
void _tsr_concat_fwd_cpu(const struct _tsr_concat_desc *d, const float *const *xs, float *y);
void _tsr_concat_bwd_cpu(const struct _tsr_concat_desc *d, const float *dy, float *const *dxs);
int _tsr_insert_concat_fwd(const struct _tsr_concat_desc *d, const starpu_data_handle_t *xs, starpu_data_handle_t y,
                           const char *name);
int _tsr_insert_concat_bwd(const struct _tsr_concat_desc *d, starpu_data_handle_t dy, const starpu_data_handle_t *dxs,
                           const char *name);
/* y = sum of k inputs of len elements */
void _tsr_add_fwd_cpu(size_t len, int k, const float *const *xs, float *y);
int _tsr_insert_add_fwd(size_t len, int k, const starpu_data_handle_t *xs, starpu_data_handle_t y, const char *name);

/* ---- dense (dense.c; OpenBLAS) ---- */
struct _tsr_dense_desc {
  int n, in, out, has_bias;
  int overwrite; /* bwd_weights: dw (and db) are written (STARPU_W), not added into */
};
void _tsr_dense_fwd_cpu(const struct _tsr_dense_desc *d, const float *x, const float *w, const float *b, float *y);
void _tsr_dense_bwd_data_cpu(const struct _tsr_dense_desc *d, const float *dy, const float *w, float *dx);
void _tsr_dense_bwd_weights_cpu(const struct _tsr_dense_desc *d, const float *x, const float *dy, float *dw, float *db);
int _tsr_insert_dense_fwd(const struct _tsr_dense_desc *d, starpu_data_handle_t x, starpu_data_handle_t w,
                          starpu_data_handle_t b, starpu_data_handle_t y, const char *name);
int _tsr_insert_dense_bwd_data(const struct _tsr_dense_desc *d, starpu_data_handle_t dy, starpu_data_handle_t w,
                               starpu_data_handle_t dx, const char *name);
int _tsr_insert_dense_bwd_weights(const struct _tsr_dense_desc *d, starpu_data_handle_t x, starpu_data_handle_t dy,
                                  starpu_data_handle_t dw, starpu_data_handle_t db, const char *name);

/* ---- losses (loss.c): mean over every element of the whole batch (all slices). ---- */
enum _tsr_loss { TSR_L_MSE, TSR_L_L1, TSR_L_HUBER, TSR_L_SOFTMAX_CE };
struct _tsr_loss_desc {
  enum _tsr_loss kind;
  int n, c, h, w;       /* slice; softmax over c */
  int nvalid;           /* samples of this slice that count (the rest is padding) */
  double scale;         /* 1 / (elements counted in the whole batch); CE: 1 / (positions counted) */
  float delta;          /* huber */
};
/* Writes dyhat = scale * dL/dyhat (0 for padding samples) and *loss = scale * sum of the slice's
 * per-element losses (double, so slices add up to the batch mean). */
void _tsr_loss_cpu(const struct _tsr_loss_desc *d, const float *yhat, const float *y, float *dyhat, double *loss);
/* loss: vector handle of one double */
int _tsr_insert_loss(const struct _tsr_loss_desc *d, starpu_data_handle_t yhat, starpu_data_handle_t y,
                     starpu_data_handle_t dyhat, starpu_data_handle_t loss, const char *name);

/* ---- loss scaling (the optimizers' update tasks are in src/optim) ---- */
/* Dynamic loss scaler state as tasks see it (one StarPU variable; the policy is in
 * src/optim/loss_scale.c). The check tasks of a step set `overflow`, the step's decision task turns
 * it into `apply` and `unscale` for that step's updates and moves `scale` for the next step. */
struct _tsr_scale_state {
  double scale;         /* multiplies the loss gradient of the steps submitted after the decision */
  float unscale;        /* the deciding step's 1 / (scale * ranks) */
  int apply;            /* the deciding step's gradients were finite */
  int overflow;         /* set by the check tasks of the step in progress */
  int good_steps;       /* finite steps in a row since the scale last changed */
  int64_t steps, skipped;
};

/* ---- per-step loss collection (tensor_ops.c) ---- */
/* Sums k double handles into *out (host memory that outlives the task). */
int _tsr_insert_loss_sum(int k, const starpu_data_handle_t *losses, double *out, const char *name,
                         struct starpu_task **task_out /* non-detached task to wait on */);
/* The same, and with ctl (a float vector) also copies ctl[0] into *ctl_out (NULL ctl: none). */
int _tsr_insert_loss_sum_ctl(int k, const starpu_data_handle_t *losses, starpu_data_handle_t ctl, double *ctl_out,
                             double *out, const char *name, struct starpu_task **task_out);

#ifdef __cplusplus
}
#endif
#endif

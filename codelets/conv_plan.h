/* What conv2d.c (which defines them) shares with conv_transpose2d.c and the tests: the oneDNN plan
 * runner, what the plan runs (implementation and data types, for tests), and one
 * insert function for both codelet families (whose buffer list conv3d.c shares). */
#ifndef TSR_CODELETS_CONV_PLAN_H
#define TSR_CODELETS_CONV_PLAN_H

#include <dnnl.h>
#include "codelets.h"

void _tsr_convlike_run(const struct _tsr_conv_desc *d, int deconv, enum _tsr_conv_pass pass, const float *in0,
                       const float *in1, const float *in2, float *out0, float *out1);
/* The CPU function of both families' codelets for one pass (buffers as the insert function orders them). */
void _tsr_convlike_cpu(void *buffers[], const struct _tsr_conv_desc *d, int deconv, enum _tsr_conv_pass pass);
const char *_tsr_convlike_impl(const struct _tsr_conv_desc *d, int deconv, enum _tsr_conv_pass pass);
int _tsr_convlike_types(const struct _tsr_conv_desc *d, int deconv, enum _tsr_conv_pass pass, dnnl_data_type_t types[3]);
/* 1: with bf16 precision this pass computes in float32 all the same (strided transposed
 * convolutions' forward and weight gradient: oneDNN's bf16 kernels for them are slow). */
int _tsr_conv_bf16_in_f32(const struct _tsr_conv_desc *d, int deconv, int pass);

/* The buffers (and their count) of a task of pass `pass`, as below; conv3d.c's tasks use them too. */
int _tsr_convlike_bufs(enum _tsr_conv_pass pass, int has_bias, int overwrite, starpu_data_handle_t h0,
                       starpu_data_handle_t h1, starpu_data_handle_t h2, starpu_data_handle_t h3,
                       struct _tsr_buf bufs[4]);
/* Submits a task of codelet cl for pass `pass`: h0, h1 read; forward: h2 the bias (read, when the
 * descriptor has one), h3 the output; backward data: h2 the output (h3 unused); backward weights:
 * h2 dw and h3 db (when it has a bias), accumulated (STARPU_W and written with d->overwrite). */
int _tsr_convlike_insert(struct starpu_codelet *cl, enum _tsr_conv_pass pass, const struct _tsr_conv_desc *d,
                         starpu_data_handle_t h0, starpu_data_handle_t h1, starpu_data_handle_t h2,
                         starpu_data_handle_t h3, const char *name);

#endif

/* conv_transpose2d (PyTorch's ConvTranspose2d, weights IOHW [ci, co, kh, kw], output padding)
 * on oneDNN's deconvolution, through the plan code of conv2d.c: raw kernels, codelets and insert
 * functions. oneDNN runs IOHW weights in its jit kernels (OIHW would fall back to the reference
 * one); the plan asks for the layout it prefers and reorders. */
#include "codelets.h"
#include "conv_plan.h"
#include "cuda_util.h"

void _tsr_deconv2d_fwd_cpu(const struct _tsr_conv_desc *d, const float *x, const float *w, const float *b, float *y) {
  _tsr_convlike_run(d, 1, TSR_CONV_FWD, x, w, b, y, NULL);
}

void _tsr_deconv2d_bwd_data_cpu(const struct _tsr_conv_desc *d, const float *dy, const float *w, float *dx) {
  _tsr_convlike_run(d, 1, TSR_CONV_BWD_DATA, dy, w, NULL, dx, NULL);
}

void _tsr_deconv2d_bwd_weights_cpu(const struct _tsr_conv_desc *d, const float *x, const float *dy, float *dw,
                                   float *db) {
  _tsr_convlike_run(d, 1, TSR_CONV_BWD_WEIGHTS, x, dy, NULL, dw, db);
}

/* ---- codelets ---- */

static void deconv2d_fwd_cpu(void *b[], void *a) { _tsr_convlike_cpu(b, a, 1, TSR_CONV_FWD); }
static void deconv2d_bwd_data_cpu(void *b[], void *a) { _tsr_convlike_cpu(b, a, 1, TSR_CONV_BWD_DATA); }
static void deconv2d_bwd_weights_cpu(void *b[], void *a) { _tsr_convlike_cpu(b, a, 1, TSR_CONV_BWD_WEIGHTS); }

#ifdef TSR_CUDA_CODELETS
/* CUDA (conv2d_cuda.cu, through conv2d.c) */
static void deconv2d_fwd_cpu_cuda(void *b[], void *a) { _tsr_convlike_cuda(b, a, 1, TSR_CONV_FWD); }
static void deconv2d_bwd_data_cpu_cuda(void *b[], void *a) { _tsr_convlike_cuda(b, a, 1, TSR_CONV_BWD_DATA); }
static void deconv2d_bwd_weights_cpu_cuda(void *b[], void *a) { _tsr_convlike_cuda(b, a, 1, TSR_CONV_BWD_WEIGHTS); }
#endif

static struct starpu_perfmodel fwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_deconv2d_fwd"};
static struct starpu_perfmodel bwd_data_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_deconv2d_bwd_data"};
static struct starpu_perfmodel bwd_weights_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_deconv2d_bwd_weights"};

static struct starpu_codelet cl_deconv2d_fwd = {
    .cpu_funcs = {deconv2d_fwd_cpu}, TSR_CUDA_FUNCS(deconv2d_fwd_cpu_cuda)
    .cpu_funcs_name = {"deconv2d_fwd_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &fwd_model,
    .name = "tsr_deconv2d_fwd",
    .can_execute = _tsr_conv_can_execute,
};
static struct starpu_codelet cl_deconv2d_bwd_data = {
    .cpu_funcs = {deconv2d_bwd_data_cpu}, TSR_CUDA_FUNCS(deconv2d_bwd_data_cpu_cuda)
    .cpu_funcs_name = {"deconv2d_bwd_data_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &bwd_data_model,
    .name = "tsr_deconv2d_bwd_data",
    .can_execute = _tsr_conv_can_execute,
};
static struct starpu_codelet cl_deconv2d_bwd_weights = {
    .cpu_funcs = {deconv2d_bwd_weights_cpu}, TSR_CUDA_FUNCS(deconv2d_bwd_weights_cpu_cuda)
    .cpu_funcs_name = {"deconv2d_bwd_weights_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &bwd_weights_model,
    .name = "tsr_deconv2d_bwd_weights",
    .can_execute = _tsr_conv_can_execute,
};

int _tsr_insert_deconv2d_fwd(const struct _tsr_conv_desc *d, starpu_data_handle_t x, starpu_data_handle_t w,
                             starpu_data_handle_t b, starpu_data_handle_t y, const char *name) {
  return _tsr_convlike_insert(&cl_deconv2d_fwd, TSR_CONV_FWD, d, x, w, b, y, name);
}

int _tsr_insert_deconv2d_bwd_data(const struct _tsr_conv_desc *d, starpu_data_handle_t dy, starpu_data_handle_t w,
                                  starpu_data_handle_t dx, const char *name) {
  return _tsr_convlike_insert(&cl_deconv2d_bwd_data, TSR_CONV_BWD_DATA, d, dy, w, dx, NULL, name);
}

int _tsr_insert_deconv2d_bwd_weights(const struct _tsr_conv_desc *d, starpu_data_handle_t x, starpu_data_handle_t dy,
                                     starpu_data_handle_t dw, starpu_data_handle_t db, const char *name) {
  return _tsr_convlike_insert(&cl_deconv2d_bwd_weights, TSR_CONV_BWD_WEIGHTS, d, x, dy, dw, db, name);
}

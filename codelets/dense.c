/* Dense (fully connected) layer on OpenBLAS: y[n, out] = x[n, in] W^T + b with W in PyTorch's
 * [out, in] layout; the data gradient overwrites dx; the weight gradients of slice 0 overwrite dw
 * and db (beta = 0, d->overwrite: the graph does not zero them), the later slices' add (beta = 1). */
#include <errno.h>
#include <cblas.h>

#include "codelets.h"
#include "cuda_util.h"
#include "runtime/error.h"

void _tsr_dense_fwd_cpu(const struct _tsr_dense_desc *d, const float *x, const float *w, const float *b, float *y) {
  float beta = 0.0f;
  if (d->has_bias) {
    for (int i = 0; i < d->n; i++)
      for (int o = 0; o < d->out; o++) y[(size_t)i * d->out + o] = b[o];
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d->n, d->out, d->in, 1.0f, x, d->in, w, d->in, beta, y,
              d->out);
}

void _tsr_dense_bwd_data_cpu(const struct _tsr_dense_desc *d, const float *dy, const float *w, float *dx) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->n, d->in, d->out, 1.0f, dy, d->out, w, d->in, 0.0f, dx,
              d->in);
}

void _tsr_dense_bwd_weights_cpu(const struct _tsr_dense_desc *d, const float *x, const float *dy, float *dw,
                                float *db) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d->out, d->in, d->n, 1.0f, dy, d->out, x, d->in,
              d->overwrite ? 0.0f : 1.0f, dw, d->in);
  if (d->has_bias && db) {
    if (d->overwrite)
      for (int o = 0; o < d->out; o++) db[o] = 0;
    for (int i = 0; i < d->n; i++) {
      const float *row = dy + (size_t)i * d->out;
#pragma omp simd
      for (int o = 0; o < d->out; o++) db[o] += row[o];
    }
  }
}

/* ---- codelets ---- */

static void dense_fwd_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  const struct _tsr_dense_desc *d = cl_arg;
  int yi = d->has_bias ? 3 : 2;
  _tsr_dense_fwd_cpu(d, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), d->has_bias ? TSR_BUF(buffers, 2) : NULL,
                     TSR_BUF(buffers, yi));
}

static void dense_bwd_data_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  _tsr_dense_bwd_data_cpu(cl_arg, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2));
}

static void dense_bwd_weights_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  const struct _tsr_dense_desc *d = cl_arg;
  _tsr_dense_bwd_weights_cpu(d, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2),
                             d->has_bias ? TSR_BUF(buffers, 3) : NULL);
}

#ifdef TSR_CUDA_CODELETS
/* CUDA (dense_cuda.cu) */
static void dense_cuda(void *b[], const struct _tsr_dense_desc *d, int pass) {
  int hb = d->has_bias;
  if (pass == TSR_CONV_FWD)
    TSR_CUDA_RUN(_tsr_dense_cuda(TSR_CUDA_WORKER, TSR_CUDA_STREAM, d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), hb ? TSR_BUF(b, 2) : NULL,
                        TSR_BUF(b, 2 + hb), NULL));
  else if (pass == TSR_CONV_BWD_DATA)
    TSR_CUDA_RUN(_tsr_dense_cuda(TSR_CUDA_WORKER, TSR_CUDA_STREAM, d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2), NULL));
  else
    TSR_CUDA_RUN(_tsr_dense_cuda(TSR_CUDA_WORKER, TSR_CUDA_STREAM, d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2),
                        hb ? TSR_BUF(b, 3) : NULL));
}
static void dense_fwd_cpu_cuda(void *b[], void *a) { dense_cuda(b, a, TSR_CONV_FWD); }
static void dense_bwd_data_cpu_cuda(void *b[], void *a) { dense_cuda(b, a, TSR_CONV_BWD_DATA); }
static void dense_bwd_weights_cpu_cuda(void *b[], void *a) { dense_cuda(b, a, TSR_CONV_BWD_WEIGHTS); }
#endif

static struct starpu_perfmodel fwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_dense_fwd"};
static struct starpu_perfmodel bwd_data_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_dense_bwd_data"};
static struct starpu_perfmodel bwd_weights_model = {.type = STARPU_HISTORY_BASED,
                                                    .symbol = "tsr_dense_bwd_weights"};

static struct starpu_codelet cl_dense_fwd = {
    .cpu_funcs = {dense_fwd_cpu}, TSR_CUDA_FUNCS(dense_fwd_cpu_cuda)
    .cpu_funcs_name = {"dense_fwd_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_dense_fwd",
    .model = &fwd_model,
};
static struct starpu_codelet cl_dense_bwd_data = {
    .cpu_funcs = {dense_bwd_data_cpu}, TSR_CUDA_FUNCS(dense_bwd_data_cpu_cuda)
    .cpu_funcs_name = {"dense_bwd_data_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_dense_bwd_data",
    .model = &bwd_data_model,
};
static struct starpu_codelet cl_dense_bwd_weights = {
    .cpu_funcs = {dense_bwd_weights_cpu}, TSR_CUDA_FUNCS(dense_bwd_weights_cpu_cuda)
    .cpu_funcs_name = {"dense_bwd_weights_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_dense_bwd_weights",
    .model = &bwd_weights_model,
};

static int check_bias(const struct _tsr_dense_desc *d, starpu_data_handle_t b, const char *name) {
  if (d->has_bias && !b) {
    _tsr_error(TSR_ERR_ARG, "dense '%s': has_bias is set but no bias handle was given", name);
    return -EINVAL;
  }
  return 0;
}

int _tsr_insert_dense_fwd(const struct _tsr_dense_desc *d, starpu_data_handle_t x, starpu_data_handle_t w,
                          starpu_data_handle_t b, starpu_data_handle_t y, const char *name) {
  int ret = check_bias(d, b, name);
  if (ret) return ret;
  struct _tsr_buf bufs[4] = {{x, STARPU_R}, {w, STARPU_R}};
  int nb = 2;
  if (d->has_bias) bufs[nb++] = (struct _tsr_buf){b, STARPU_R};
  bufs[nb++] = (struct _tsr_buf){y, STARPU_W};
  return _tsr_submit(&cl_dense_fwd, d, sizeof(*d), STARPU_DEFAULT_PRIO, name, nb, bufs);
}

int _tsr_insert_dense_bwd_data(const struct _tsr_dense_desc *d, starpu_data_handle_t dy, starpu_data_handle_t w,
                               starpu_data_handle_t dx, const char *name) {
  struct _tsr_buf bufs[] = {{dy, STARPU_R}, {w, STARPU_R}, {dx, STARPU_W}};
  return _tsr_submit(&cl_dense_bwd_data, d, sizeof(*d), STARPU_DEFAULT_PRIO, name, 3, bufs);
}

int _tsr_insert_dense_bwd_weights(const struct _tsr_dense_desc *d, starpu_data_handle_t x, starpu_data_handle_t dy,
                                  starpu_data_handle_t dw, starpu_data_handle_t db, const char *name) {
  int ret = check_bias(d, db, name);
  if (ret) return ret;
  enum starpu_data_access_mode acc = d->overwrite ? STARPU_W : _tsr_accum_mode();
  struct _tsr_buf bufs[] = {{x, STARPU_R}, {dy, STARPU_R}, {dw, acc}, {db, acc}};
  return _tsr_submit(&cl_dense_bwd_weights, d, sizeof(*d), STARPU_DEFAULT_PRIO, name, d->has_bias ? 4 : 3, bufs);
}

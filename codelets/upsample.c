/* Nearest upsampling of NCDHW float32 by an integer factor f on D, H and W (PyTorch's
 * Upsample(scale_factor=f, mode="nearest") on 5-D tensors): y[.., z, y, x] = x[.., z/f, y/f, x/f],
 * and its backward, which sums each input element's f^3 copies in a fixed order (the CUDA twin,
 * upsample_cuda.cu, sums in the same order). Raw kernels, codelets and insert functions. */
#include "codelets.h"
#include "cuda_util.h"

void _tsr_upsample_fwd_cpu(const struct _tsr_upsample_desc *d, const float *x, float *y) {
  const int f = d->f, W = d->w * f;
  const size_t vols = (size_t)d->n * d->c;
  for (size_t v = 0; v < vols; v++)
    for (int z = 0; z < d->d * f; z++)
      for (int r = 0; r < d->h * f; r++) {
        const float *in = x + ((v * d->d + z / f) * d->h + r / f) * d->w;
        float *out = y + ((v * d->d * f + z) * (size_t)d->h * f + r) * W;
        for (int c = 0; c < W; c++) out[c] = in[c / f];
      }
}

void _tsr_upsample_bwd_cpu(const struct _tsr_upsample_desc *d, const float *dy, float *dx) {
  const int f = d->f;
  const size_t W = (size_t)d->w * f, HW = (size_t)d->h * f * W, vols = (size_t)d->n * d->c;
  for (size_t v = 0; v < vols; v++)
    for (int z = 0; z < d->d; z++)
      for (int r = 0; r < d->h; r++)
        for (int c = 0; c < d->w; c++) {
          const float *g = dy + (v * d->d + z) * f * HW + (size_t)r * f * W + (size_t)c * f;
          float s = 0;
          for (int a = 0; a < f; a++)
            for (int b = 0; b < f; b++)
              for (int e = 0; e < f; e++) s += g[a * HW + b * W + e];
          dx[((v * d->d + z) * d->h + r) * d->w + c] = s;
        }
}

static void upsample_fwd_func(void *b[], void *a) {
  _tsr_worker_enter();
  _tsr_upsample_fwd_cpu(a, TSR_BUF(b, 0), TSR_BUF(b, 1));
}
static void upsample_bwd_func(void *b[], void *a) {
  _tsr_worker_enter();
  _tsr_upsample_bwd_cpu(a, TSR_BUF(b, 0), TSR_BUF(b, 1));
}

#ifdef TSR_CUDA_CODELETS
static void upsample_fwd_func_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_upsample_cuda(TSR_CUDA_STREAM, a, 0, TSR_BUF(b, 0), TSR_BUF(b, 1)));
}
static void upsample_bwd_func_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_upsample_cuda(TSR_CUDA_STREAM, a, 1, TSR_BUF(b, 0), TSR_BUF(b, 1)));
}
#endif

static struct starpu_perfmodel fwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_upsample_fwd"};
static struct starpu_perfmodel bwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_upsample_bwd"};

static struct starpu_codelet cl_upsample_fwd = {
    .cpu_funcs = {upsample_fwd_func}, TSR_CUDA_FUNCS(upsample_fwd_func_cuda)
    .cpu_funcs_name = {"upsample_fwd_func"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &fwd_model,
    .name = "tsr_upsample_fwd",
};
static struct starpu_codelet cl_upsample_bwd = {
    .cpu_funcs = {upsample_bwd_func}, TSR_CUDA_FUNCS(upsample_bwd_func_cuda)
    .cpu_funcs_name = {"upsample_bwd_func"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &bwd_model,
    .name = "tsr_upsample_bwd",
};

int _tsr_insert_upsample_fwd(const struct _tsr_upsample_desc *d, starpu_data_handle_t x, starpu_data_handle_t y,
                             const char *name) {
  struct _tsr_buf bufs[] = {{x, STARPU_R}, {y, STARPU_W}};
  return _tsr_submit(&cl_upsample_fwd, d, sizeof *d, STARPU_DEFAULT_PRIO, name, 2, bufs);
}

int _tsr_insert_upsample_bwd(const struct _tsr_upsample_desc *d, starpu_data_handle_t dy, starpu_data_handle_t dx,
                             const char *name) {
  struct _tsr_buf bufs[] = {{dy, STARPU_R}, {dx, STARPU_W}};
  return _tsr_submit(&cl_upsample_bwd, d, sizeof *d, STARPU_DEFAULT_PRIO, name, 2, bufs);
}

/* Activations on CUDA, the twin of codelets/eltwise.c: the activations of eltwise.c's table, found
 * by name; cuDNN for relu, tanh and sigmoid, a kernel for the others (cuDNN has no leaky relu, no
 * GELU). */
#include <string.h>

#include "cuda_util.h"

__global__ static void leaky_k(size_t n, float alpha, int bwd, const float *x, const float *dy, float *out) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = bwd ? (x[i] > 0 ? dy[i] : alpha * dy[i]) : (x[i] > 0 ? x[i] : alpha * x[i]);
}

static int leaky_run(cudaStream_t s, const struct _tsr_act_desc *d, int bwd, const float *x, const float *dy,
                     float *out) {
  leaky_k<<<_tsr_blocks(d->len), TSR_THREADS, 0, s>>>(d->len, d->alpha, bwd, x, dy, out);
  TSR_CUDA_LAUNCHED("leaky relu kernel");
  return 0;
}

/* GELU, exact form: y = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2; dy/dx = Phi(x) + x phi(x). */
__global__ static void gelu_k(size_t n, int bwd, const float *x, const float *dy, float *out) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i], cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    out[i] = bwd ? dy[i] * (cdf + v * 0.39894228040143268f * expf(-0.5f * v * v)) : v * cdf;
  }
}

static int gelu_run(cudaStream_t s, const struct _tsr_act_desc *d, int bwd, const float *x, const float *dy,
                    float *out) {
  gelu_k<<<_tsr_blocks(d->len), TSR_THREADS, 0, s>>>(d->len, bwd, x, dy, out);
  TSR_CUDA_LAUNCHED("gelu kernel");
  return 0;
}

/* tanh with an output scale s: y = s tanh x; dx = dy s (1 - (y/s)^2), as codelets/eltwise.c. */
__global__ static void scaled_tanh_k(size_t n, float s, int bwd, const float *x, const float *y, const float *dy,
                                     float *out) {
  TSR_GRID_LOOP(i, n) {
    if (bwd) {
      const float t = y[i] / s;
      out[i] = dy[i] * s * (1.0f - t * t);
    } else {
      out[i] = s * tanhf(x[i]);
    }
  }
}

static const struct cuda_act {
  const char *name;
  int mode; /* a cudnnActivationMode_t, or -1: run `kernel` (forward from x; backward from x and dy) */
  int (*kernel)(cudaStream_t s, const struct _tsr_act_desc *d, int bwd, const float *x, const float *dy, float *out);
} cuda_acts[] = {
    {"relu", CUDNN_ACTIVATION_RELU, NULL},
    {"leaky_relu", -1, leaky_run},
    {"tanh", CUDNN_ACTIVATION_TANH, NULL},
    {"sigmoid", CUDNN_ACTIVATION_SIGMOID, NULL},
    {"gelu", -1, gelu_run},
};

extern "C" int _tsr_act_cuda(int worker, cudaStream_t s, const struct _tsr_act_desc *d, int bwd, const float *x,
                             const float *y, const float *dy, float *out) {
  const char *name = _tsr_act_name(d->op);
  const struct cuda_act *a = NULL;
  for (size_t i = 0; name && i < sizeof cuda_acts / sizeof cuda_acts[0]; i++)
    if (strcmp(cuda_acts[i].name, name) == 0) a = &cuda_acts[i];
  if (!a) return _tsr_cuda_report("activation '%s' has no CUDA implementation", name ? name : "?");
  const float scale = _tsr_act_scale(d);
  if (scale != 1.0f) {
    scaled_tanh_k<<<_tsr_blocks(d->len), TSR_THREADS, 0, s>>>(d->len, scale, bwd, x, y, dy, out);
    TSR_CUDA_LAUNCHED("scaled tanh kernel");
    return 0;
  }
  if (a->mode < 0) return a->kernel(s, d, bwd, x, dy, out);
  cudnnHandle_t h;
  if (_tsr_cuda_handles(worker, s, &h, NULL)) return -1;
  /* a flat [1, 1, 1, len] tensor (cuDNN wants int dimensions: split very long slices) */
  cudnnActivationDescriptor_t ad;
  cudnnTensorDescriptor_t td;
  TSR_CUDNN_OK(cudnnCreateActivationDescriptor(&ad));
  TSR_CUDNN_OK(cudnnSetActivationDescriptor(ad, (cudnnActivationMode_t)a->mode, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  TSR_CUDNN_OK(cudnnCreateTensorDescriptor(&td));
  const float one = 1.0f, zero = 0.0f;
  const size_t chunk = (size_t)1 << 30;
  int rc = 0;
  for (size_t off = 0; off < d->len && !rc; off += chunk) {
    int m = (int)(d->len - off < chunk ? d->len - off : chunk);
    cudnnStatus_t st = cudnnSetTensor4dDescriptor(td, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, m);
    if (st == CUDNN_STATUS_SUCCESS)
      st = bwd ? cudnnActivationBackward(h, ad, &one, td, y + off, td, dy + off, td, x + off, &zero, td, out + off)
               : cudnnActivationForward(h, ad, &one, td, x + off, &zero, td, out + off);
    if (st != CUDNN_STATUS_SUCCESS)
      rc = _tsr_cuda_report("cudnnActivation%s (or its descriptor) failed: %s", bwd ? "Backward" : "Forward",
                            cudnnGetErrorString(st));
  }
  cudnnDestroyTensorDescriptor(td);
  cudnnDestroyActivationDescriptor(ad);
  return rc;
}

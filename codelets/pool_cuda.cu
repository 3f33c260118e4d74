/* Pooling on CUDA, the twin of codelets/pool.c (floor mode, symmetric padding, average counting
 * the padding: divisor kh*kw). Average forward is cuDNN's CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING.
 * Max pooling and both backward passes are kernels, because max pooling saves its argmax in
 * oneDNN's workspace layout: the backward of a slice may run on a CPU worker after a GPU forward
 * or the reverse, and cuDNN's max backward recomputes the argmax from x and y instead (with ties
 * broken its own way). Backward passes gather (each dx element sums the windows that hold it), so
 * no atomics and no dependence on the launch: results are deterministic. */
#include <float.h>
#include <stdint.h>

#include "cuda_util.h"

/* oneDNN's workspace (checked against oneDNN 2.6 by tests/gpu/check_gpu.c on the host): one index
 * per output element, in y's NCHW order; the index is i*kw + j of the window's first strict
 * maximum in row-major order over the elements inside the image (padding never wins); uint8 when
 * kh*kw < 256, int32 otherwise. */
static __host__ __device__ inline int imin(int a, int b) { return a < b ? a : b; }
static __host__ __device__ inline int wide_ws(const _tsr_pool_desc &d) { return d.kh * d.kw >= 256; }

extern "C" size_t _tsr_pool_cuda_ws_bytes(const struct _tsr_pool_desc *d) {
  if (!d->is_max) return 0;
  return (size_t)d->n * d->c * d->oh * d->ow * (wide_ws(*d) ? sizeof(int32_t) : sizeof(uint8_t));
}

/* Output element o (flat NCHW index): y and the argmax index. */
static __host__ __device__ inline void max_window(const _tsr_pool_desc &d, const float *x, size_t o, float *y,
                                                  int *arg) {
  const size_t ohw = (size_t)d.oh * d.ow;
  const float *plane = x + (o / ohw) * d.h * d.w;
  const int oh = (int)(o % ohw / d.ow), ow = (int)(o % d.ow);
  float best = -FLT_MAX;
  int at = 0;
  for (int i = 0; i < d.kh; i++) {
    const int ih = oh * d.sh - d.ph + i;
    if (ih < 0 || ih >= d.h) continue;
    for (int j = 0; j < d.kw; j++) {
      const int iw = ow * d.sw - d.pw + j;
      if (iw < 0 || iw >= d.w) continue;
      const float v = plane[(size_t)ih * d.w + iw];
      if (v > best) best = v, at = i * d.kw + j;
    }
  }
  *y = best;
  *arg = at;
}

static __host__ __device__ inline void max_store(const _tsr_pool_desc &d, const float *x, size_t o, float *y,
                                                 void *ws) {
  int arg;
  max_window(d, x, o, &y[o], &arg);
  if (wide_ws(d)) ((int32_t *)ws)[o] = arg;
  else ((uint8_t *)ws)[o] = (uint8_t)arg;
}

/* Input element i (flat NCHW index) of dx: the sum over the windows that hold it of dy (max: when
 * the window's argmax is this element) or dy / (kh*kw) (average). */
static __host__ __device__ inline float window_grad(const _tsr_pool_desc &d, const float *dy, const void *ws,
                                                    size_t i) {
  const size_t hw = (size_t)d.h * d.w, ohw = (size_t)d.oh * d.ow, plane = i / hw;
  const int ih = (int)(i % hw / d.w), iw = (int)(i % d.w);
  /* window oh covers rows oh*sh - ph .. oh*sh - ph + kh - 1 */
  const int lo_h = ih + d.ph - d.kh + 1, lo_w = iw + d.pw - d.kw + 1;
  const int oh0 = lo_h <= 0 ? 0 : (lo_h + d.sh - 1) / d.sh, ow0 = lo_w <= 0 ? 0 : (lo_w + d.sw - 1) / d.sw;
  const int oh1 = imin((ih + d.ph) / d.sh, d.oh - 1), ow1 = imin((iw + d.pw) / d.sw, d.ow - 1);
  float g = 0;
  for (int oh = oh0; oh <= oh1; oh++)
    for (int ow = ow0; ow <= ow1; ow++) {
      const size_t o = plane * ohw + (size_t)oh * d.ow + ow;
      if (d.is_max) {
        const int at = wide_ws(d) ? ((const int32_t *)ws)[o] : ((const uint8_t *)ws)[o];
        if (at == (ih - (oh * d.sh - d.ph)) * d.kw + (iw - (ow * d.sw - d.pw))) g += dy[o];
      } else {
        g += dy[o];
      }
    }
  return d.is_max ? g : g / (float)(d.kh * d.kw);
}


__global__ static void max_fwd_k(_tsr_pool_desc d, size_t ny, const float *x, float *y, void *ws) {
  TSR_GRID_LOOP(o, ny) max_store(d, x, o, y, ws);
}

__global__ static void bwd_k(_tsr_pool_desc d, size_t nx, const float *dy, const void *ws, float *dx) {
  TSR_GRID_LOOP(i, nx) dx[i] = window_grad(d, dy, ws, i);
}

/* cuDNN average forward; descriptors are cheap host objects, made per call. */
static int avg_fwd_cudnn(int worker, cudaStream_t s, const _tsr_pool_desc *d, const float *x, float *y) {
  cudnnHandle_t h;
  if (_tsr_cuda_handles(worker, s, &h, NULL)) return -1;
  cudnnPoolingDescriptor_t pd = NULL;
  cudnnTensorDescriptor_t xd = NULL, yd = NULL;
  const float one = 1.0f, zero = 0.0f;
  const char *call = "cudnnCreatePoolingDescriptor";
  cudnnStatus_t st = cudnnCreatePoolingDescriptor(&pd);
  if (st == CUDNN_STATUS_SUCCESS) call = "cudnnCreateTensorDescriptor", st = cudnnCreateTensorDescriptor(&xd);
  if (st == CUDNN_STATUS_SUCCESS) st = cudnnCreateTensorDescriptor(&yd);
  if (st == CUDNN_STATUS_SUCCESS)
    call = "cudnnSetPooling2dDescriptor",
    st = cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_NOT_PROPAGATE_NAN, d->kh,
                                     d->kw, d->ph, d->pw, d->sh, d->sw);
  if (st == CUDNN_STATUS_SUCCESS)
    call = "cudnnSetTensor4dDescriptor",
    st = cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, d->c, d->h, d->w);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, d->c, d->oh, d->ow);
  if (st == CUDNN_STATUS_SUCCESS) call = "cudnnPoolingForward", st = cudnnPoolingForward(h, pd, &one, xd, x, &zero, yd, y);
  if (yd) cudnnDestroyTensorDescriptor(yd);
  if (xd) cudnnDestroyTensorDescriptor(xd);
  if (pd) cudnnDestroyPoolingDescriptor(pd);
  if (st != CUDNN_STATUS_SUCCESS)
    return _tsr_cuda_report("average pooling %dx%d over %dx%dx%dx%d: %s failed: %s", d->kh, d->kw, d->n, d->c, d->h,
                            d->w, call, cudnnGetErrorString(st));
  return 0;
}

extern "C" int _tsr_pool_cuda(int worker, cudaStream_t s, const struct _tsr_pool_desc *d, int bwd, const float *in,
                              void *ws, float *out) {
  const size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->c * d->oh * d->ow;
  if (d->is_max && !ws) return _tsr_cuda_report("max pooling without its workspace");
  if (!bwd && !d->is_max) return avg_fwd_cudnn(worker, s, d, in, out);
  if (!bwd) max_fwd_k<<<_tsr_blocks(ny), TSR_THREADS, 0, s>>>(*d, ny, in, out, ws);
  else bwd_k<<<_tsr_blocks(nx), TSR_THREADS, 0, s>>>(*d, nx, in, ws, out);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return _tsr_cuda_report("%s pooling %s kernel launch failed: %s", d->is_max ? "max" : "average",
                            bwd ? "backward" : "forward", cudaGetErrorString(e));
  return 0;
}

extern "C" void _tsr_pool_max_fwd_host(const struct _tsr_pool_desc *d, const float *x, float *y, void *ws) {
  const size_t ny = (size_t)d->n * d->c * d->oh * d->ow;
  for (size_t o = 0; o < ny; o++) max_store(*d, x, o, y, ws);
}

extern "C" void _tsr_pool_bwd_host(const struct _tsr_pool_desc *d, const float *dy, const void *ws, float *dx) {
  const size_t nx = (size_t)d->n * d->c * d->h * d->w;
  for (size_t i = 0; i < nx; i++) dx[i] = window_grad(*d, dy, ws, i);
}

/* Pooling on CUDA, the twin of codelets/pool.c (floor mode, symmetric padding, average counting
 * the padding: divisor kh*kw, kd*kh*kw in 3-D on NCDHW). Average forward is cuDNN's
 * CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING. Max pooling and both backward passes are kernels,
 * because max pooling saves its argmax in oneDNN's workspace layout: the backward of a slice may run on a CPU worker after a GPU forward
 * or the reverse, and cuDNN's max backward recomputes the argmax from x and y instead (with ties
 * broken its own way). Backward passes gather (each dx element sums the windows that hold it), so
 * no atomics and no dependence on the launch: results are deterministic. */
#include <float.h>
#include <stdint.h>

#include "cuda_util.h"

/* oneDNN's workspace (checked against oneDNN 2.6 by tests/gpu/check_gpu.c and
 * tests/check_layers3d.c on the host): one index per output element, in y's NCHW (NCDHW) order;
 * the index is (l*kh + i)*kw + j of the window's first strict maximum in row-major order over the
 * elements inside the volume (padding never wins); uint8 when kd*kh*kw < 256, int32 otherwise.
 * 2-D pooling is 3-D pooling with depth, window and stride 1 along d. */
static __host__ __device__ inline int imin(int a, int b) { return a < b ? a : b; }
static __host__ __device__ inline int one_if0(int v) { return v > 0 ? v : 1; }

/* The depth axis of a descriptor: 1, 1, 1, 1, 0 for 2-D pooling. */
struct depth_axis {
  int d, od, kd, sd, pd;
};
static __host__ __device__ inline depth_axis depth_of(const _tsr_pool_desc &d) {
  depth_axis a = {one_if0(d.d), one_if0(d.od), one_if0(d.kd), one_if0(d.sd), d.d > 0 ? d.pd : 0};
  return a;
}
static __host__ __device__ inline int wide_ws(const _tsr_pool_desc &d) { return depth_of(d).kd * d.kh * d.kw >= 256; }

static size_t in_elems(const _tsr_pool_desc &d) { return (size_t)d.n * d.c * depth_of(d).d * d.h * d.w; }
static size_t out_elems(const _tsr_pool_desc &d) { return (size_t)d.n * d.c * depth_of(d).od * d.oh * d.ow; }

extern "C" size_t _tsr_pool_cuda_ws_bytes(const struct _tsr_pool_desc *d) {
  if (!d->is_max) return 0;
  return out_elems(*d) * (wide_ws(*d) ? sizeof(int32_t) : sizeof(uint8_t));
}

/* Output element o (flat NC(D)HW index): y and the argmax index. */
static __host__ __device__ inline void max_window(const _tsr_pool_desc &d, const float *x, size_t o, float *y,
                                                  int *arg) {
  const depth_axis z = depth_of(d);
  const size_t ohw = (size_t)d.oh * d.ow, odhw = z.od * ohw;
  const float *vol = x + (o / odhw) * z.d * d.h * d.w;
  const int od = (int)(o % odhw / ohw), oh = (int)(o % ohw / d.ow), ow = (int)(o % d.ow);
  float best = -FLT_MAX;
  int at = 0;
  for (int l = 0; l < z.kd; l++) {
    const int id = od * z.sd - z.pd + l;
    if (id < 0 || id >= z.d) continue;
    for (int i = 0; i < d.kh; i++) {
      const int ih = oh * d.sh - d.ph + i;
      if (ih < 0 || ih >= d.h) continue;
      for (int j = 0; j < d.kw; j++) {
        const int iw = ow * d.sw - d.pw + j;
        if (iw < 0 || iw >= d.w) continue;
        const float v = vol[((size_t)id * d.h + ih) * d.w + iw];
        if (v > best) best = v, at = (l * d.kh + i) * d.kw + j;
      }
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

/* The windows along one axis that hold input position i: [*lo, *hi] (empty when lo > hi). */
static __host__ __device__ inline void windows(int i, int k, int s, int p, int out, int *lo, int *hi) {
  /* window o covers o*s - p .. o*s - p + k - 1 */
  const int first = i + p - k + 1;
  *lo = first <= 0 ? 0 : (first + s - 1) / s;
  *hi = imin((i + p) / s, out - 1);
}

/* Input element i (flat NC(D)HW index) of dx: the sum over the windows that hold it of dy (max: when
 * the window's argmax is this element) or dy / (kd*kh*kw) (average). */
static __host__ __device__ inline float window_grad(const _tsr_pool_desc &d, const float *dy, const void *ws,
                                                    size_t i) {
  const depth_axis z = depth_of(d);
  const size_t hw = (size_t)d.h * d.w, dhw = z.d * hw, ohw = (size_t)d.oh * d.ow, vol = i / dhw;
  const int id = (int)(i % dhw / hw), ih = (int)(i % hw / d.w), iw = (int)(i % d.w);
  int od0, od1, oh0, oh1, ow0, ow1;
  windows(id, z.kd, z.sd, z.pd, z.od, &od0, &od1);
  windows(ih, d.kh, d.sh, d.ph, d.oh, &oh0, &oh1);
  windows(iw, d.kw, d.sw, d.pw, d.ow, &ow0, &ow1);
  float g = 0;
  for (int od = od0; od <= od1; od++)
    for (int oh = oh0; oh <= oh1; oh++)
      for (int ow = ow0; ow <= ow1; ow++) {
        const size_t o = (vol * z.od + od) * ohw + (size_t)oh * d.ow + ow;
        if (d.is_max) {
          const int at = wide_ws(d) ? ((const int32_t *)ws)[o] : ((const uint8_t *)ws)[o];
          const int l = id - (od * z.sd - z.pd), i2 = ih - (oh * d.sh - d.ph), j = iw - (ow * d.sw - d.pw);
          if (at == (l * d.kh + i2) * d.kw + j) g += dy[o];
        } else {
          g += dy[o];
        }
      }
  return d.is_max ? g : g / (float)(z.kd * d.kh * d.kw);
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
  if (st == CUDNN_STATUS_SUCCESS && d->d > 0) { /* 3-D: N-d descriptors */
    const int k[3] = {d->kd, d->kh, d->kw}, p[3] = {d->pd, d->ph, d->pw}, sd[3] = {d->sd, d->sh, d->sw};
    const int xdims[5] = {d->n, d->c, d->d, d->h, d->w}, ydims[5] = {d->n, d->c, d->od, d->oh, d->ow};
    call = "cudnnSetPoolingNdDescriptor",
    st = cudnnSetPoolingNdDescriptor(pd, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_NOT_PROPAGATE_NAN, 3, k, p,
                                     sd);
    if (st == CUDNN_STATUS_SUCCESS)
      call = "cudnnSetTensorNdDescriptorEx",
      st = cudnnSetTensorNdDescriptorEx(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 5, xdims);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetTensorNdDescriptorEx(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 5, ydims);
  } else if (st == CUDNN_STATUS_SUCCESS) {
    call = "cudnnSetPooling2dDescriptor",
    st = cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_NOT_PROPAGATE_NAN, d->kh,
                                     d->kw, d->ph, d->pw, d->sh, d->sw);
    if (st == CUDNN_STATUS_SUCCESS)
      call = "cudnnSetTensor4dDescriptor",
      st = cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, d->c, d->h, d->w);
    if (st == CUDNN_STATUS_SUCCESS)
      st = cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, d->c, d->oh, d->ow);
  }
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
  const size_t nx = in_elems(*d), ny = out_elems(*d);
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
  const size_t ny = out_elems(*d);
  for (size_t o = 0; o < ny; o++) max_store(*d, x, o, y, ws);
}

extern "C" void _tsr_pool_bwd_host(const struct _tsr_pool_desc *d, const float *dy, const void *ws, float *dx) {
  const size_t nx = in_elems(*d);
  for (size_t i = 0; i < nx; i++) dx[i] = window_grad(*d, dy, ws, i);
}

/* Nearest upsampling on CUDA, the twin of codelets/upsample.c: forward gathers one input element
 * per output element; backward gathers each input element's f^3 copies in the CPU's order. */
#include "cuda_util.h"

__global__ static void upsample_fwd_k(_tsr_upsample_desc d, size_t ny, const float *x, float *y) {
  const size_t f = d.f, W = d.w * f, H = d.h * f, D = d.d * f;
  TSR_GRID_LOOP(o, ny) {
    const size_t c = o % W, r = o / W % H, z = o / (W * H) % D, v = o / (W * H * D);
    y[o] = x[((v * d.d + z / f) * d.h + r / f) * d.w + c / f];
  }
}

__global__ static void upsample_bwd_k(_tsr_upsample_desc d, size_t nx, const float *dy, float *dx) {
  const size_t f = d.f, W = d.w * f, HW = d.h * f * W;
  TSR_GRID_LOOP(i, nx) {
    const size_t c = i % d.w, r = i / d.w % d.h, vz = i / ((size_t)d.w * d.h);
    const float *g = dy + vz * f * HW + r * f * W + c * f;
    float s = 0;
    for (size_t a = 0; a < f; a++)
      for (size_t b = 0; b < f; b++)
        for (size_t e = 0; e < f; e++) s += g[a * HW + b * W + e];
    dx[i] = s;
  }
}

extern "C" int _tsr_upsample_cuda(cudaStream_t s, const struct _tsr_upsample_desc *d, int bwd, const float *in,
                                  float *out) {
  const size_t nx = (size_t)d->n * d->c * d->d * d->h * d->w, ny = nx * d->f * d->f * d->f;
  if (bwd) upsample_bwd_k<<<_tsr_blocks(nx), TSR_THREADS, 0, s>>>(*d, nx, in, out);
  else upsample_fwd_k<<<_tsr_blocks(ny), TSR_THREADS, 0, s>>>(*d, ny, in, out);
  TSR_CUDA_LAUNCHED(bwd ? "upsample backward kernel" : "upsample forward kernel");
  return 0;
}

/* Channel concatenation and split (strided 2-D copies) and sums on CUDA, the twin of
 * codelets/concat.c. */
#include "cuda_util.h"

extern "C" int _tsr_concat_cuda(cudaStream_t s, const struct _tsr_concat_desc *d, int bwd, float *const *parts,
                                float *whole) {
  size_t hw = (size_t)d->h * d->w, row = 0, off = 0;
  for (int i = 0; i < d->k; i++) row += (size_t)d->c[i] * hw;
  for (int i = 0; i < d->k; i++) {
    size_t len = (size_t)d->c[i] * hw * sizeof(float);
    float *w = whole + off;
    if (bwd)
      TSR_CUDA_OK(cudaMemcpy2DAsync(parts[i], len, w, row * sizeof(float), len, d->n, cudaMemcpyDeviceToDevice, s));
    else
      TSR_CUDA_OK(cudaMemcpy2DAsync(w, row * sizeof(float), parts[i], len, len, d->n, cudaMemcpyDeviceToDevice, s));
    off += (size_t)d->c[i] * hw;
  }
  return 0;
}

struct ptrs {
  const float *p[TSR_MAX_CONCAT];
};

__global__ static void add_k(size_t len, int k, ptrs xs, float *y) {
  TSR_GRID_LOOP(i, len) {
    float v = xs.p[0][i];
    for (int j = 1; j < k; j++) v += xs.p[j][i];
    y[i] = v;
  }
}

extern "C" int _tsr_add_cuda(cudaStream_t s, size_t len, int k, const float *const *xs, float *y) {
  /* up to 32 inputs per launch; later launches read y back as their first input */
  ptrs p;
  for (int done = 0, first = 1; done < k; first = 0) {
    int slots = first ? TSR_MAX_CONCAT : TSR_MAX_CONCAT - 1, m = k - done < slots ? k - done : slots, j = 0;
    if (!first) p.p[j++] = y;
    for (int q = 0; q < m; q++) p.p[j++] = xs[done + q];
    add_k<<<_tsr_blocks(len), TSR_THREADS, 0, s>>>(len, j, p, y);
    TSR_CUDA_LAUNCHED("add kernel");
    done += m;
  }
  return 0;
}

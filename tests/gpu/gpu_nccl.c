/* Suite "gpu_nccl": the NCCL launchers of the gradient reductions (src/comm/nccl_cuda.cu) on a
 * one-rank communicator, where a sum is the identity, so what remains is exact: the float32
 * reduction returns its input bitwise; the bf16/fp16 one returns the control word (the first
 * `keep` floats) bitwise and every other value rounded to nearest even in that format, bitwise equal
 * to the CPU's conversions. Needs a GPU and NCCL, not a CUDA-enabled StarPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tessera/context.h>
#include "cuda_util.h"
#include "comm/nccl.h"
#include "convert.h"
#include "gpu_test.h"

#ifdef TSR_WITH_CUDA

#define CU(call) ck_assert_msg((call) == cudaSuccess, "%s failed", #call)

START_TEST(test_nccl_reductions_round_as_stated) {
  const size_t n = 3000, keep = 16;
  float *x = gt_rand(n, 150), *got = malloc(n * 4), *want = malloc(n * 4);
  uint16_t *h = malloc(n * 2);
  ck_assert(got && want && h);
  for (size_t i = keep; i < n; i++) x[i] *= i % 3 ? 1.0f : 1e3f;
  for (size_t i = 0; i < keep; i++) x[i] = 257.0f + (float)i; /* not representable in bf16 */
  char id[128];
  void *comm = NULL;
  ck_assert_int_eq(_tsr_nccl_unique_id(id, sizeof id), 0);
  ck_assert_int_eq(_tsr_nccl_comm_init(&comm, 1, id, 0), 0);
  float *dx;
  uint16_t *dw;
  cudaStream_t s;
  CU(cudaStreamCreate(&s));
  CU(cudaMalloc((void **)&dx, n * 4)), CU(cudaMalloc((void **)&dw, n * 2));

  CU(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
  ck_assert_int_eq(_tsr_nccl_allreduce_sum(dx, n, comm, s), 0);
  CU(cudaStreamSynchronize(s));
  CU(cudaMemcpy(got, dx, n * 4, cudaMemcpyDeviceToHost));
  gt_same(got, x, n * 4, "float32 reduction on one rank");

  for (int bf16 = 0; bf16 < 2; bf16++) {
    CU(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
    ck_assert_int_eq(_tsr_nccl_allreduce_half(dx, n, keep, dw, bf16, comm, s), 0);
    CU(cudaStreamSynchronize(s));
    CU(cudaMemcpy(got, dx, n * 4, cudaMemcpyDeviceToHost));
    memcpy(want, x, keep * 4);
    bf16 ? _tsr_f32_to_bf16_cpu(x + keep, h, n - keep) : _tsr_f32_to_f16_cpu(x + keep, h, n - keep);
    bf16 ? _tsr_bf16_to_f32_cpu(h, want + keep, n - keep) : _tsr_f16_to_f32_cpu(h, want + keep, n - keep);
    gt_same(got, want, n * 4, bf16 ? "bf16 reduction on one rank" : "fp16 reduction on one rank");
    int rounded = 0; /* the check can fail: the values must have been narrowed */
    for (size_t i = keep; i < n; i++) rounded += got[i] != x[i];
    ck_assert_int_gt(rounded, (int)(n - keep) / 2);
  }
  CU(cudaFree(dx)), CU(cudaFree(dw)), CU(cudaStreamDestroy(s));
  _tsr_nccl_comm_destroy(comm);
  free(x), free(got), free(want), free(h);
}
END_TEST

Suite *make_gpu_nccl_suite(void) {
  Suite *s = suite_create("gpu_nccl");
  TCase *t = tcase_create("launchers");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, test_nccl_reductions_round_as_stated);
  suite_add_tcase(s, t);
  return s;
}

#endif

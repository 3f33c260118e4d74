/* tests/gpu/check_gpu: every CUDA codelet against its CPU twin on random inputs with stated
 * tolerances (gpu_ops.c), the sign reductions' codelets bitwise and Lion's kernels against float64
 * (gpu_sign.c), one training step on CUDA workers against the same step on CPU workers
 * (gpu_train.c), and, in every CUDA build even without a GPU, the pooling kernels' element code run
 * on the host against oneDNN (whose workspace layout they must write), the sign kernels' per-index
 * code against the CPU kernels (gpu_sign.c) and the refusal of fp16 convolutions by CPU workers; with a GPU (any StarPU), the NCCL launchers (gpu_nccl.c). The GPU part exits 77 (SKIP
 * for automake) with the reason when Tessera has no CUDA codelets, StarPU was built without CUDA,
 * or no GPU is visible. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tessera/context.h>
#include "codelets.h"
#include "cuda_util.h"
#include "gpu_test.h"
#include "kernel_util.h"

float *gt_rand(size_t n, uint64_t seed) {
  float *x = malloc(n * sizeof *x);
  ck_assert_ptr_nonnull(x);
  tt_fill_uniform(x, n, seed, -1, 1);
  return x;
}

void gt_cuda_up(void) {
  tt_starpu_home();
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = 0;
  conf.ncuda = 1;
  ck_assert_int_eq(starpu_init(&conf), 0);
  _tsr_kernel_error_clear();
}

starpu_data_handle_t gt_register_bytes(void *p, size_t n) {
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)p, (uint32_t)n, 1);
  return h;
}

void gt_done(starpu_data_handle_t *hs, int n) {
  ck_assert_int_eq(starpu_task_wait_for_all(), 0);
  for (int i = 0; i < n; i++) starpu_data_unregister(hs[i]);
  char msg[512];
  ck_assert_msg(!_tsr_kernel_error(msg, sizeof msg), "%s", msg);
}

void gt_close(const float *gpu, const float *cpu, size_t n, double atol, double rtol, const char *what) {
  double *ref = malloc(n * sizeof *ref);
  ck_assert_ptr_nonnull(ref);
  for (size_t i = 0; i < n; i++) ref[i] = cpu[i];
  tt_assert_close(gpu, ref, n, atol, rtol, what);
  free(ref);
}

void gt_close_d(const double *gpu, const double *cpu, size_t n, double rtol, const char *what) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabs(gpu[i] - cpu[i]) <= rtol * (1 + fabs(cpu[i])), "%s: element %zu is %.17g, CPU %.17g", what,
                  i, gpu[i], cpu[i]);
}

void gt_same(const void *gpu, const void *cpu, size_t bytes, const char *what) {
  const unsigned char *a = gpu, *b = cpu;
  for (size_t i = 0; i < bytes; i++)
    ck_assert_msg(a[i] == b[i], "%s: byte %zu is 0x%02x, CPU 0x%02x", what, i, a[i], b[i]);
}

/* Bitwise, except between two NaNs: IEEE 754 leaves the payload of an arithmetic result NaN open (x86
 * propagates the operand's quiet NaN, NVIDIA GPUs return the canonical 0x7fffffff), so only arithmetic
 * on NaN may differ, and a NaN must stay a NaN. */
void gt_same_f32(const float *gpu, const float *cpu, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++) {
    if (isnan(gpu[i]) && isnan(cpu[i])) continue;
    gt_same(gpu + i, cpu + i, sizeof *gpu, what);
  }
}

#ifdef TSR_WITH_CUDA
/* ---- host: pooling kernel code (pool_cuda.cu) against oneDNN (pool.c) ---- */

static struct _tsr_pool_desc pool_desc(int n, int c, int h, int w, int k, int s, int p, int is_max) {
  struct _tsr_pool_desc d = {.n = n, .c = c, .h = h, .w = w, .kh = k, .kw = k, .sh = s, .sw = s, .ph = p, .pw = p,
                            .is_max = is_max};
  d.oh = (h + 2 * p - k) / s + 1;
  d.ow = (w + 2 * p - k) / s + 1;
  return d;
}

/* 3-D pooling: the same window along d as along h and w */
static struct _tsr_pool_desc pool3d_desc(int n, int c, int dd, int h, int w, int k, int s, int p, int is_max) {
  struct _tsr_pool_desc d = pool_desc(n, c, h, w, k, s, p, is_max);
  d.d = dd, d.kd = k, d.sd = s, d.pd = p, d.od = (dd + 2 * p - k) / s + 1;
  return d;
}

/* ties: after a ReLU most windows hold several zeros; the first in row-major order must win, as
 * in oneDNN, or the gradient lands on another element than on CPUs */
static void pool_host_case(struct _tsr_pool_desc d, int ties, uint64_t seed) {
  size_t dd = d.d > 0 ? d.d : 1, od = d.d > 0 ? d.od : 1;
  size_t nx = (size_t)d.n * d.c * dd * d.h * d.w, ny = (size_t)d.n * d.c * od * d.oh * d.ow;
  float *x = gt_rand(nx, seed), *dy = gt_rand(ny, seed + 1);
  if (ties)
    for (size_t i = 0; i < nx; i++) x[i] = x[i] > 0.5f ? x[i] : 0.0f;
  size_t wsb = _tsr_pool_ws_bytes(&d);
  ck_assert_uint_eq(wsb, _tsr_pool_cuda_ws_bytes(&d));
  float *y = calloc(ny, 4), *yc = calloc(ny, 4), *dx = calloc(nx, 4), *dxc = calloc(nx, 4);
  unsigned char *ws = calloc(wsb + 1, 1), *wsc = calloc(wsb + 1, 1);
  _tsr_pool_fwd_cpu(&d, x, yc, d.is_max ? wsc : NULL);
  _tsr_pool_bwd_cpu(&d, dy, d.is_max ? wsc : NULL, dxc);
  char what[160];
  snprintf(what, sizeof what, "%s pool %dx%d s%d p%d over %dx%d%s", d.is_max ? "max" : "avg", d.kh, d.kw, d.sh, d.ph,
           d.h, d.w, ties ? " with ties" : "");
  if (d.is_max) {
    _tsr_pool_max_fwd_host(&d, x, y, ws);
    gt_same(y, yc, ny * 4, what);  /* a max is exact */
    gt_same(ws, wsc, wsb, what);   /* the argmax layout the CPU backward reads */
  }
  _tsr_pool_bwd_host(&d, dy, d.is_max ? wsc : NULL, dx);
  /* max: a sum of the few dy that chose an element; avg: dy / (kh kw) summed in another order */
  gt_close(dx, dxc, nx, 1e-6, 1e-5, what);
  free(x), free(dy), free(y), free(yc), free(dx), free(dxc), free(ws), free(wsc);
}

START_TEST(test_pool_kernel_code_matches_onednn) {
  for (int is_max = 0; is_max <= 1; is_max++) {
    pool_host_case(pool_desc(2, 3, 8, 8, 2, 2, 0, is_max), 0, 10);     /* the common 2x2 */
    pool_host_case(pool_desc(2, 3, 9, 11, 3, 2, 1, is_max), 0, 20);    /* overlap, padding, odd sizes */
    pool_host_case(pool_desc(2, 3, 9, 11, 3, 2, 1, is_max), 1, 30);
    pool_host_case(pool_desc(1, 4, 7, 7, 3, 1, 1, is_max), 1, 40);     /* stride 1: up to 9 windows per input */
    pool_host_case(pool_desc(1, 2, 40, 40, 17, 3, 8, is_max), 1, 50);  /* 289 window elements: int32 indices */
    pool_host_case(pool3d_desc(2, 3, 4, 6, 4, 2, 2, 0, is_max), 1, 60); /* 3-D: CosmoFlow's 2x2x2 */
    pool_host_case(pool3d_desc(1, 2, 7, 5, 6, 3, 2, 1, is_max), 0, 70); /* 3-D overlap and padding */
    pool_host_case(pool3d_desc(1, 1, 9, 9, 9, 7, 2, 3, is_max), 1, 80); /* 343 window elements: int32 */
  }
}
END_TEST

/* fp16 convolutions exist on GPUs only: a CPU worker must refuse them rather than run float32
 * (StarPU then finds no worker for the task on a CPU-only machine: -ENODEV at submission). */
static void cpu_up(void) { tt_starpu_start(1); }
static void cpu_down(void) {
  _tsr_set_precision(TSR_PRECISION_F32);
  tt_starpu_stop();
}

START_TEST(test_fp16_convolutions_never_run_on_cpu_workers) {
  struct _tsr_conv_desc d = {.n = 1, .ci = 2, .h = 5, .w = 5, .co = 3, .oh = 5, .ow = 5, .kh = 3, .kw = 3, .sh = 1,
                            .sw = 1, .ph = 1, .pw = 1, .dh = 1, .dw = 1};
  struct _tsr_conv_desc t = d; /* transposed: 3 -> 2 channels */
  t.ci = 3, t.co = 2;
  float *x = gt_rand(50, 1), *w = gt_rand(54, 2), *y = calloc(75, 4), *x3 = gt_rand(75, 3), *y2 = calloc(50, 4);
  starpu_data_handle_t hx = _tsr_register_floats(x, 50), hw = _tsr_register_floats(w, 54),
                       hy = _tsr_register_floats(y, 75), hx3 = _tsr_register_floats(x3, 75), hy2 = _tsr_register_floats(y2, 50);
  _tsr_set_precision(TSR_PRECISION_FP16);
  ck_assert_int_eq(_tsr_insert_conv2d_fwd(&d, hx, hw, NULL, hy, "fp16 conv"), -ENODEV);
  ck_assert_int_eq(_tsr_insert_conv2d_bwd_data(&d, hy, hw, hx, "fp16 conv bwd data"), -ENODEV);
  ck_assert_int_eq(_tsr_insert_conv2d_bwd_weights(&d, hx, hy, hw, NULL, "fp16 conv bwd weights"), -ENODEV);
  ck_assert_int_eq(_tsr_insert_deconv2d_fwd(&t, hx3, hw, NULL, hy2, "fp16 transposed conv"), -ENODEV);
  ck_assert_int_eq(_tsr_insert_deconv2d_bwd_data(&t, hy2, hw, hx3, "fp16 transposed conv bwd data"), -ENODEV);
  ck_assert_int_eq(_tsr_insert_deconv2d_bwd_weights(&t, hx3, hy2, hw, NULL, "fp16 transposed conv bwd weights"),
                   -ENODEV);
  _tsr_set_precision(TSR_PRECISION_BF16); /* bf16 has a CPU path */
  ck_assert_int_eq(_tsr_insert_conv2d_fwd(&d, hx, hw, NULL, hy, "bf16 conv"), 0);
  ck_assert_int_eq(starpu_task_wait_for_all(), 0);
  starpu_data_handle_t hs[] = {hx, hw, hy, hx3, hy2};
  for (int i = 0; i < 5; i++) starpu_data_unregister(hs[i]);
  free(x), free(w), free(y), free(x3), free(y2);
}
END_TEST

Suite *make_gpu_host_suite(void) {
  Suite *s = suite_create("gpu_host");
  TCase *t = tcase_create("pool_kernel_code");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, test_pool_kernel_code_matches_onednn);
  suite_add_tcase(s, t);
  TCase *c = tcase_create("cpu_workers");
  tcase_set_timeout(c, 60);
  tcase_add_checked_fixture(c, cpu_up, cpu_down);
  tcase_add_test(c, test_fp16_convolutions_never_run_on_cpu_workers);
  suite_add_tcase(s, c);
  return s;
}
#endif

#ifdef TSR_WITH_CUDA
/* What this machine offers, asked in a child process: a process that has called the CUDA runtime
 * leaves a broken CUDA to the children it forks afterwards (cudaErrorInitializationError), and
 * Check runs every test in such a child, so this parent never touches CUDA. Bits of the result:
 * PROBE_GPU a GPU visible to CUDA, PROBE_STARPU StarPU (with CUDA) started, PROBE_STARPU_GPU it
 * has a CUDA worker; -1 when the child could not be run or died. */
enum { PROBE_GPU = 1, PROBE_STARPU = 2, PROBE_STARPU_GPU = 4 };

static int probe_gpus(void) {
  fflush(stdout), fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int r = 0, ndev = 0;
    if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) r |= PROBE_GPU;
#if defined(STARPU_USE_CUDA)
    tt_starpu_home(); /* a short-lived StarPU to count the GPUs it sees */
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.ncpus = 0;
    if (starpu_init(&conf) == 0) {
      r |= PROBE_STARPU;
      if (starpu_cuda_worker_get_count() > 0) r |= PROBE_STARPU_GPU;
      starpu_shutdown();
    }
#endif
    fflush(stdout), fflush(stderr);
    _exit(r);
  }
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
#endif

int main(void) {
#ifndef TSR_WITH_CUDA
  printf("SKIP: Tessera was configured without CUDA (./configure --with-cuda)\n");
  return 77;
#else
  int rc = tt_run_suite(make_gpu_host_suite());
  if (rc == 0) rc = tt_run_suite(make_gpu_sign_host_suite());
  if (rc != 0) return rc;
  int probe = probe_gpus();
  if (probe < 0) {
    printf("FAIL: the child process counting the GPUs died\n");
    return 1;
  }
  /* the NCCL launchers need a GPU, not StarPU's CUDA support */
  if (probe & PROBE_GPU) rc = tt_run_suite(make_gpu_nccl_suite());
  else printf("SKIP (NCCL launchers): no GPU visible\n");
  if (rc != 0) return rc;
#if !defined(STARPU_USE_CUDA)
  printf("SKIP (GPU part): the StarPU found was built without CUDA (STARPU_USE_CUDA undefined): build StarPU "
         "with --enable-cuda or spack install starpu+cuda+mpi; the host checks above passed\n");
  return 77;
#else
  if (!(probe & PROBE_STARPU)) {
    printf("SKIP (GPU part): StarPU with CUDA could not start (no usable GPU?)\n");
    return 77;
  }
  if (!(probe & PROBE_STARPU_GPU)) {
    printf("SKIP (GPU part): StarPU has CUDA but sees no GPU\n");
    return 77;
  }
  rc = tt_run_suite(make_gpu_ops_suite());
  int rc2 = tt_run_suite(make_gpu_train_suite());
  int rc3 = tt_run_suite(make_gpu_sign_suite());
  return rc ? rc : rc2 ? rc2 : rc3;
#endif
#endif
}

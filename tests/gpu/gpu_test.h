/* Shared by the parts of tests/gpu/check_gpu: the suites and the helpers that compare a GPU result
 * with its CPU twin (widened to float64) under a stated tolerance. */
#ifndef TSR_GPU_TEST_H
#define TSR_GPU_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>

#include "../testutil.h"

/* Runs on the host in every CUDA build: the pooling kernels' per-element code against oneDNN. */
Suite *make_gpu_host_suite(void);
/* Runs on the host in every CUDA build: the sign kernels' per-index code against the CPU kernels. */
Suite *make_gpu_sign_host_suite(void);
/* Needs a GPU and NCCL (any StarPU). */
Suite *make_gpu_nccl_suite(void);
/* Need a StarPU with CUDA and a GPU. */
Suite *make_gpu_ops_suite(void);
Suite *make_gpu_train_suite(void);
Suite *make_gpu_sign_suite(void); /* the sign codelets and Lion's CUDA kernels */

float *gt_rand(size_t n, uint64_t seed);
/* The fixture of the GPU suites: StarPU with one CUDA worker and no CPU worker (nothing can fall
 * back to a CPU), and no kernel failure recorded. */
void gt_cuda_up(void);
/* n bytes at p as a StarPU vector in main memory. */
starpu_data_handle_t gt_register_bytes(void *p, size_t n);
/* Waits for every task, unregisters the n handles (their data comes home) and asserts that no
 * kernel reported a failure. */
void gt_done(starpu_data_handle_t *hs, int n);
/* Asserts |gpu - cpu| <= atol + rtol |cpu| element by element, naming `what`. */
void gt_close(const float *gpu, const float *cpu, size_t n, double atol, double rtol, const char *what);
void gt_close_d(const double *gpu, const double *cpu, size_t n, double rtol, const char *what);
/* Bitwise equality of n bytes, naming `what` and the first differing byte. */
void gt_same(const void *gpu, const void *cpu, size_t bytes, const char *what);
void gt_same_f32(const float *gpu, const float *cpu, size_t n, const char *what);

#endif

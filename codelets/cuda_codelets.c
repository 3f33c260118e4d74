/* The CUDA functions of the codelets not yet beside their CPU functions (only when StarPU has CUDA;
 * the helpers are in cuda_util.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "cuda_util.h"
#include "kernel_util.h"

#ifdef TSR_CUDA_CODELETS
enum { PASS_FWD, PASS_BWD_DATA, PASS_BWD_WEIGHTS };

void zero_cpu_cuda(void *b[], void *a) { RUN(_tsr_zero_cuda(TSR_BUF(b, 0), TSR_NX(b, 0), STREAM)); }
void accumulate_cpu_cuda(void *b[], void *a) { RUN(_tsr_axpy_cuda(TSR_BUF(b, 0), TSR_BUF(b, 1), 1.0f, TSR_NX(b, 0), STREAM)); }
void copy_cpu_cuda(void *b[], void *a) { RUN(_tsr_copy_cuda(TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_NX(b, 0), STREAM)); }
void fill_cpu_cuda(void *b[], void *a) {
  float v;
  memcpy(&v, a, sizeof v);
  RUN(_tsr_fill_cuda(TSR_BUF(b, 0), TSR_NX(b, 0), v, STREAM));
}
void zero_doubles_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_zero_bytes_cuda((void *)STARPU_VECTOR_GET_PTR(b[0]),
                           (size_t)STARPU_VECTOR_GET_NX(b[0]) * STARPU_VECTOR_GET_ELEMSIZE(b[0]), STREAM));
}

/* conv-like: fwd x, w, [b], y; bwd_data dy, w, dx; bwd_weights x, dy, dw, [db] */
static void convlike(void *b[], const struct tsr_conv_desc *d, int deconv, int pass) {
  int hb = d->has_bias, prec = _tsr_get_precision();
  if (pass == PASS_FWD)
    RUN(_tsr_conv_cuda(WORKER, STREAM, d, deconv, pass, prec, TSR_BUF(b, 0), TSR_BUF(b, 1), hb ? TSR_BUF(b, 2) : NULL,
                       TSR_BUF(b, 2 + hb), NULL));
  else if (pass == PASS_BWD_DATA)
    RUN(_tsr_conv_cuda(WORKER, STREAM, d, deconv, pass, prec, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2), NULL));
  else
    RUN(_tsr_conv_cuda(WORKER, STREAM, d, deconv, pass, prec, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2),
                       hb ? TSR_BUF(b, 3) : NULL));
}
void conv2d_fwd_cpu_cuda(void *b[], void *a) { convlike(b, a, 0, PASS_FWD); }
void conv2d_bwd_data_cpu_cuda(void *b[], void *a) { convlike(b, a, 0, PASS_BWD_DATA); }
void conv2d_bwd_weights_cpu_cuda(void *b[], void *a) { convlike(b, a, 0, PASS_BWD_WEIGHTS); }
void deconv2d_fwd_cpu_cuda(void *b[], void *a) { convlike(b, a, 1, PASS_FWD); }
void deconv2d_bwd_data_cpu_cuda(void *b[], void *a) { convlike(b, a, 1, PASS_BWD_DATA); }
void deconv2d_bwd_weights_cpu_cuda(void *b[], void *a) { convlike(b, a, 1, PASS_BWD_WEIGHTS); }

static void dense(void *b[], const struct tsr_dense_desc *d, int pass) {
  int hb = d->has_bias;
  if (pass == PASS_FWD)
    RUN(_tsr_dense_cuda(WORKER, STREAM, d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), hb ? TSR_BUF(b, 2) : NULL,
                        TSR_BUF(b, 2 + hb), NULL));
  else if (pass == PASS_BWD_DATA)
    RUN(_tsr_dense_cuda(WORKER, STREAM, d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2), NULL));
  else
    RUN(_tsr_dense_cuda(WORKER, STREAM, d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2),
                        hb ? TSR_BUF(b, 3) : NULL));
}
void dense_fwd_cpu_cuda(void *b[], void *a) { dense(b, a, PASS_FWD); }
void dense_bwd_data_cpu_cuda(void *b[], void *a) { dense(b, a, PASS_BWD_DATA); }
void dense_bwd_weights_cpu_cuda(void *b[], void *a) { dense(b, a, PASS_BWD_WEIGHTS); }

/* the task argument of dropout.c: descriptor, then the seed */
struct dropout_arg {
  struct tsr_dropout_desc d;
  uint64_t seed;
};
void dropout_fwd_cpu_cuda(void *b[], void *a) {
  const struct dropout_arg *x = a;
  RUN(_tsr_dropout_cuda(STREAM, &x->d, x->seed, TSR_BUF(b, 0), TSR_BUF(b, 1)));
}
void dropout_bwd_cpu_cuda(void *b[], void *a) { dropout_fwd_cpu_cuda(b, a); }

void concat_fwd_cpu_cuda(void *b[], void *a) {
  const struct tsr_concat_desc *d = a;
  float *parts[TSR_MAX_CONCAT];
  for (int i = 0; i < d->k; i++) parts[i] = TSR_BUF(b, i);
  RUN(_tsr_concat_cuda(STREAM, d, 0, parts, TSR_BUF(b, d->k)));
}
void concat_bwd_cpu_cuda(void *b[], void *a) {
  const struct tsr_concat_desc *d = a;
  float *parts[TSR_MAX_CONCAT];
  for (int i = 0; i < d->k; i++) parts[i] = TSR_BUF(b, 1 + i);
  RUN(_tsr_concat_cuda(STREAM, d, 1, parts, TSR_BUF(b, 0)));
}
/* the task argument of concat.c's add: length, count */
struct add_desc {
  size_t len;
  int k;
};
void add_fwd_cpu_cuda(void *b[], void *a) {
  const struct add_desc *d = a;
  const float **xs = malloc((size_t)d->k * sizeof *xs);
  if (!xs) {
    _tsr_cuda_report("out of host memory for %d input pointers", d->k);
    _tsr_cuda_task_failed(__func__, b);
    return;
  }
  for (int i = 0; i < d->k; i++) xs[i] = TSR_BUF(b, i);
  RUN(_tsr_add_cuda(STREAM, d->len, d->k, xs, TSR_BUF(b, d->k)));
  free(xs);
}

void loss_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_loss_cuda(WORKER, STREAM, a, TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), DBUF(b, 3)));
}
void opt_update_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_opt_update_cuda(STREAM, a, TSR_NX(b, 0), TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 3), NULL));
}
/* buffer 4: the loss scaler's state (a StarPU variable), read on the device */
void opt_update_gated_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_opt_update_cuda(STREAM, a, TSR_NX(b, 0), TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 3),
                           (const struct _tsr_scale_state *)STARPU_VARIABLE_GET_PTR(b[4])));
}

/* Loss scaling (src/optim/loss_scale.c). scale_grad: x[, state]; cl_arg the fixed scale.
 * scale_check: state, then the gradients. */
void scale_grad_cpu_cuda(void *b[], void *a) {
  double fixed;
  memcpy(&fixed, a, sizeof fixed);
  const struct _tsr_scale_state *state =
      STARPU_TASK_GET_NBUFFERS(starpu_task_get_current()) > 1 ? (const void *)STARPU_VARIABLE_GET_PTR(b[1]) : NULL;
  RUN(_tsr_scale_grad_cuda(STREAM, TSR_NX(b, 0), TSR_BUF(b, 0), state, fixed));
}
void scale_check_cpu_cuda(void *b[], void *a) {
  struct _tsr_scale_state *state = (void *)STARPU_VARIABLE_GET_PTR(b[0]);
  int n = STARPU_TASK_GET_NBUFFERS(starpu_task_get_current());
  for (int i = 1; i < n; i++) RUN(_tsr_scale_check_cuda(STREAM, TSR_NX(b, i), TSR_BUF(b, i), state));
}

/* Buffers as pool.c: fwd x, y[, ws]; bwd dy[, ws], dx. The workspace must have oneDNN's size,
 * since CPU workers read and write the same handle. */
static int pool_ws_ok(const struct tsr_pool_desc *d, void *ws_buf) {
  size_t want = _tsr_pool_cuda_ws_bytes(d);
  size_t got = (size_t)STARPU_VECTOR_GET_NX(ws_buf) * STARPU_VECTOR_GET_ELEMSIZE(ws_buf);
  if (got == want) return 0;
  return _tsr_cuda_report("max pooling workspace has %zu bytes, the CUDA kernels write %zu (oneDNN's layout changed?)",
                          got, want);
}
void pool_fwd_func_cuda(void *b[], void *a) {
  const struct tsr_pool_desc *d = a;
  void *ws = d->is_max ? (void *)STARPU_VECTOR_GET_PTR(b[2]) : NULL;
  RUN((d->is_max ? pool_ws_ok(d, b[2]) : 0) || _tsr_pool_cuda(WORKER, STREAM, d, 0, TSR_BUF(b, 0), ws, TSR_BUF(b, 1)));
}
void pool_bwd_func_cuda(void *b[], void *a) {
  const struct tsr_pool_desc *d = a;
  void *ws = d->is_max ? (void *)STARPU_VECTOR_GET_PTR(b[1]) : NULL;
  RUN((d->is_max ? pool_ws_ok(d, b[1]) : 0) ||
      _tsr_pool_cuda(WORKER, STREAM, d, 1, TSR_BUF(b, 0), ws, TSR_BUF(b, d->is_max ? 2 : 1)));
}

void bn_stats_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_bn_cuda(STREAM, a, TSR_BN_STATS, TSR_BUF(b, 0), NULL, NULL, NULL, NULL, DBUF(b, 1), NULL, NULL));
}
void bn_finalize_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_bn_finalize_cuda(STREAM, a, DBUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 3)));
}
void bn_fwd_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_bn_cuda(STREAM, a, TSR_BN_FWD, TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 3), NULL, NULL,
                   TSR_BUF(b, 4), NULL));
}
void bn_fwd_eval_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_bn_cuda(STREAM, a, TSR_BN_FWD_EVAL, TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 3),
                   TSR_BUF(b, 4), NULL, TSR_BUF(b, 5), NULL));
}
void bn_bwd_stats_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_bn_cuda(STREAM, a, TSR_BN_BWD_STATS, TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), NULL, NULL, DBUF(b, 3),
                   NULL, NULL));
}
void bn_bwd_params_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_bn_cuda(STREAM, a, TSR_BN_BWD_PARAMS, NULL, NULL, NULL, NULL, NULL, DBUF(b, 0), TSR_BUF(b, 1),
                   TSR_BUF(b, 2)));
}
/* x, stat, gamma, acc, dy -> dx */
void bn_bwd_data_cpu_cuda(void *b[], void *a) {
  RUN(_tsr_bn_cuda(STREAM, a, TSR_BN_BWD_DATA, TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 4), NULL,
                   DBUF(b, 3), TSR_BUF(b, 5), NULL));
}
#endif

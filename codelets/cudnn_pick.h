/* The cuDNN convolution algorithm choice shared by conv2d_cuda.cu and conv3d_cuda.cu (C++: one
 * template over cuDNN's three perf-result types). */
#ifndef TSR_CODELETS_CUDNN_PICK_H
#define TSR_CODELETS_CUDNN_PICK_H

#include <tessera/context.h>
#include "cuda_util.h"

/* Workspace a convolution algorithm may take. */
static const size_t TSR_CONV_WORKSPACE_LIMIT = (size_t)512 << 20;

/* The first algorithm of cuDNN's ranked list that fits: it succeeded, its workspace is bounded,
 * it is deterministic when asked (cuDNN says so per algorithm: backward algorithms that add with
 * atomics are not), and in float32 it uses FMA math (no TF32 tensor cores). Sets *algo and *ws_bytes
 * (and, in reduced precision, the math type the algorithm was ranked for); 0, 1 when none fits,
 * -1 on failure. */
template <typename Perf>
static int _tsr_cudnn_pick(const Perf *perf, int got, int precision, int deterministic,
                           cudnnConvolutionDescriptor_t conv, int *algo, size_t *ws_bytes) {
  for (int i = 0; i < got; i++) {
    const Perf &q = perf[i];
    if (q.status != CUDNN_STATUS_SUCCESS || q.memory > TSR_CONV_WORKSPACE_LIMIT) continue;
    if (deterministic && q.determinism != CUDNN_DETERMINISTIC) continue;
    if (precision == TSR_PRECISION_F32 && q.mathType != CUDNN_FMA_MATH && q.mathType != CUDNN_DEFAULT_MATH) continue;
    *algo = (int)q.algo;
    *ws_bytes = q.memory;
    /* float32 keeps FMA math; reduced precision runs with the math type the algorithm was ranked for */
    if (precision != TSR_PRECISION_F32) TSR_CUDNN_OK(cudnnSetConvolutionMathType(conv, q.mathType));
    return 0;
  }
  return 1;
}

#endif

/* Library-backed CUDA launchers: convolution and transposed convolution on cuDNN (a transposed
 * conv is the conv from its output space to its input space with the same IOHW = KCRS filter:
 * its forward is the conv's backward-data and so on), dense layers on cuBLAS, activations on cuDNN
 * (leaky ReLU, which cuDNN lacks, in a kernel). Descriptors, the algorithm and its workspace size
 * are chosen once per (worker, shape, pass, precision) and cached. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera/context.h>
#include "cuda_util.h"

#define CUDNN_OK(call)                                                                               \
  do {                                                                                               \
    cudnnStatus_t _s = (call);                                                                       \
    if (_s != CUDNN_STATUS_SUCCESS) {                                                                \
      fprintf(stderr, "tessera: %s failed: %s (%s:%d)\n", #call, cudnnGetErrorString(_s), __FILE__, __LINE__); \
      return -1;                                                                                     \
    }                                                                                                \
  } while (0)
#define CUBLAS_OK(call)                                                                              \
  do {                                                                                               \
    cublasStatus_t _s = (call);                                                                      \
    if (_s != CUBLAS_STATUS_SUCCESS) {                                                               \
      fprintf(stderr, "tessera: %s failed: %s (%s:%d)\n", #call, cublasGetStatusString(_s), __FILE__, __LINE__); \
      return -1;                                                                                     \
    }                                                                                                \
  } while (0)

enum { PASS_FWD, PASS_BWD_DATA, PASS_BWD_WEIGHTS }; /* as enum _tsr_conv_pass in conv2d.c */
static const size_t WORKSPACE_LIMIT = (size_t)512 << 20;

/* In cuDNN's terms: "in" is the conv's input space, "out" its output space. */
struct conv_key {
  tsr_conv_desc d;
  int deconv, pass, precision;
};
struct conv_plan {
  conv_key key;
  conv_plan *next;
  cudnnTensorDescriptor_t in, out, bias;
  cudnnFilterDescriptor_t filt;
  cudnnConvolutionDescriptor_t conv;
  int algo; /* of the cuDNN call this pass makes */
  size_t ws_bytes;
};

/* per worker: a list (a network has a few dozen shapes; no C++ runtime needed to link) */
static conv_plan *conv_plans[1024];

static int plan_make(cudnnHandle_t h, const tsr_conv_desc *d, int deconv, int pass, int precision, conv_plan *p) {
  int cin = deconv ? d->co : d->ci, hin = deconv ? d->oh : d->h, win = deconv ? d->ow : d->w;
  int cout = deconv ? d->ci : d->co, hout = deconv ? d->h : d->oh, wout = deconv ? d->w : d->ow;
  CUDNN_OK(cudnnCreateTensorDescriptor(&p->in));
  CUDNN_OK(cudnnCreateTensorDescriptor(&p->out));
  CUDNN_OK(cudnnCreateTensorDescriptor(&p->bias));
  CUDNN_OK(cudnnCreateFilterDescriptor(&p->filt));
  CUDNN_OK(cudnnCreateConvolutionDescriptor(&p->conv));
  CUDNN_OK(cudnnSetTensor4dDescriptor(p->in, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, cin, hin, win));
  CUDNN_OK(cudnnSetTensor4dDescriptor(p->out, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, cout, hout, wout));
  CUDNN_OK(cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, d->co, 1, 1));
  CUDNN_OK(cudnnSetFilter4dDescriptor(p->filt, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, cout, cin, d->kh, d->kw));
  CUDNN_OK(cudnnSetConvolution2dDescriptor(p->conv, d->ph, d->pw, d->sh, d->sw, d->dh, d->dw,
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  /* float32: FMA only (no TF32), as the CPU; reduced precision: tensor cores with down-conversion */
  CUDNN_OK(cudnnSetConvolutionMathType(p->conv, precision == TSR_PRECISION_F32 ? CUDNN_FMA_MATH
                                                                               : CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
  /* which cuDNN call: conv fwd / bwd data / bwd filter, swapped for the transposed conv */
  int call = !deconv ? pass : pass == PASS_FWD ? PASS_BWD_DATA : pass == PASS_BWD_DATA ? PASS_FWD : PASS_BWD_WEIGHTS;
  enum { MAXALGO = 16 };
  int got = 0;
  p->algo = -1;
  if (call == PASS_FWD) {
    cudnnConvolutionFwdAlgoPerf_t perf[MAXALGO];
    CUDNN_OK(cudnnGetConvolutionForwardAlgorithm_v7(h, p->in, p->filt, p->conv, p->out, MAXALGO, &got, perf));
    for (int i = 0; i < got && p->algo < 0; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= WORKSPACE_LIMIT)
        p->algo = perf[i].algo, p->ws_bytes = perf[i].memory;
  } else if (call == PASS_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[MAXALGO];
    CUDNN_OK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->filt, p->out, p->conv, p->in, MAXALGO, &got, perf));
    for (int i = 0; i < got && p->algo < 0; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= WORKSPACE_LIMIT)
        p->algo = perf[i].algo, p->ws_bytes = perf[i].memory;
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[MAXALGO];
    CUDNN_OK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->in, p->out, p->conv, p->filt, MAXALGO, &got, perf));
    for (int i = 0; i < got && p->algo < 0; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= WORKSPACE_LIMIT)
        p->algo = perf[i].algo, p->ws_bytes = perf[i].memory;
  }
  if (p->algo < 0) {
    fprintf(stderr, "tessera: cuDNN has no algorithm for %s pass %d of %dx%dx%dx%d (k %dx%d s %d p %d)\n",
            deconv ? "transposed conv" : "conv", pass, d->n, d->ci, d->h, d->w, d->kh, d->kw, d->sh, d->ph);
    return -1;
  }
  return 0;
}

/* Inputs/outputs in the order of _tsr_convlike_run: fwd x, w, b -> y; bwd_data dy, w -> dx;
 * bwd_weights x, dy -> dw (+=), db (+=). */
extern "C" int _tsr_conv_cuda(int worker, cudaStream_t s, const struct tsr_conv_desc *d, int deconv, int pass,
                              int precision, const float *in0, const float *in1, const float *in2, float *out0,
                              float *out1) {
  cudnnHandle_t h;
  if (_tsr_cuda_handles(worker, s, &h, NULL)) return -1;
  conv_key key;
  memset(&key, 0, sizeof key);
  key.d = *d;
  key.deconv = deconv;
  key.pass = pass;
  key.precision = precision;
  conv_plan *p = conv_plans[worker];
  while (p && memcmp(&p->key, &key, sizeof key)) p = p->next;
  if (!p) {
    p = (conv_plan *)calloc(1, sizeof *p);
    if (!p) {
      fprintf(stderr, "tessera: out of memory for a cuDNN plan\n");
      return -1;
    }
    if (plan_make(h, d, deconv, pass, precision, p)) {
      free(p);
      return -1;
    }
    p->key = key;
    p->next = conv_plans[worker];
    conv_plans[worker] = p;
  }
  void *ws = p->ws_bytes ? _tsr_cuda_scratch(worker, p->ws_bytes, s) : NULL;
  if (p->ws_bytes && !ws) return -1;
  const float one = 1.0f, zero = 0.0f;
  if (pass == PASS_FWD) {
    const float *x = in0, *w = in1, *b = in2;
    float *y = out0;
    if (!deconv)
      CUDNN_OK(cudnnConvolutionForward(h, &one, p->in, x, p->filt, w, p->conv, (cudnnConvolutionFwdAlgo_t)p->algo,
                                       ws, p->ws_bytes, &zero, p->out, y));
    else
      CUDNN_OK(cudnnConvolutionBackwardData(h, &one, p->filt, w, p->out, x, p->conv,
                                            (cudnnConvolutionBwdDataAlgo_t)p->algo, ws, p->ws_bytes, &zero, p->in, y));
    if (d->has_bias) CUDNN_OK(cudnnAddTensor(h, &one, p->bias, b, &one, deconv ? p->in : p->out, y));
  } else if (pass == PASS_BWD_DATA) {
    const float *dy = in0, *w = in1;
    float *dx = out0;
    if (!deconv)
      CUDNN_OK(cudnnConvolutionBackwardData(h, &one, p->filt, w, p->out, dy, p->conv,
                                            (cudnnConvolutionBwdDataAlgo_t)p->algo, ws, p->ws_bytes, &zero, p->in, dx));
    else
      CUDNN_OK(cudnnConvolutionForward(h, &one, p->in, dy, p->filt, w, p->conv, (cudnnConvolutionFwdAlgo_t)p->algo,
                                       ws, p->ws_bytes, &zero, p->out, dx));
  } else {
    const float *x = in0, *dy = in1;
    float *dw = out0, *db = out1;
    /* the conv's input space holds x (conv) or dy (transposed conv) */
    CUDNN_OK(cudnnConvolutionBackwardFilter(h, &one, p->in, deconv ? dy : x, p->out, deconv ? x : dy, p->conv,
                                            (cudnnConvolutionBwdFilterAlgo_t)p->algo, ws, p->ws_bytes, &one, p->filt,
                                            dw));
    if (d->has_bias && db) CUDNN_OK(cudnnConvolutionBackwardBias(h, &one, deconv ? p->in : p->out, dy, &one, p->bias, db));
  }
  return 0;
}

/* Row-major y[n, out] = x[n, in] W^T is column-major y^T[out, n] = W[in, out]^T x^T[in, n]. */
__global__ static void bias_rows_k(int n, int out, const float *b, float *y) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)n * out; i += (size_t)gridDim.x * blockDim.x)
    y[i] = b[i % out];
}

__global__ static void fill_k(int n, float v, float *y) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = v;
}

extern "C" int _tsr_dense_cuda(int worker, cudaStream_t s, const struct tsr_dense_desc *d, int pass, const float *in0,
                               const float *in1, const float *in2, float *out0, float *out1) {
  cublasHandle_t h;
  if (_tsr_cuda_handles(worker, s, NULL, &h)) return -1;
  const float one = 1.0f, zero = 0.0f;
  if (pass == PASS_FWD) { /* x, w, b -> y */
    float beta = 0.0f;
    if (d->has_bias) {
      size_t len = (size_t)d->n * d->out;
      bias_rows_k<<<(unsigned)((len + 255) / 256 > 4096 ? 4096 : (len + 255) / 256), 256, 0, s>>>(d->n, d->out, in2, out0);
      cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess) {
        fprintf(stderr, "tessera: dense bias kernel launch failed: %s\n", cudaGetErrorString(e));
        return -1;
      }
      beta = 1.0f;
    }
    CUBLAS_OK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, d->out, d->n, d->in, &one, in1, d->in, in0, d->in, &beta, out0,
                          d->out));
  } else if (pass == PASS_BWD_DATA) { /* dy, w -> dx[n, in] = dy[n, out] W[out, in] */
    CUBLAS_OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, d->in, d->n, d->out, &one, in1, d->in, in0, d->out, &zero, out0,
                          d->in));
  } else { /* x, dy -> dw[out, in] += dy^T x ; db += column sums of dy */
    CUBLAS_OK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, d->in, d->out, d->n, &one, in0, d->in, in1, d->out, &one, out0,
                          d->in));
    if (d->has_bias && out1) {
      float *ones = (float *)_tsr_cuda_scratch(worker, (size_t)d->n * sizeof(float), s);
      if (!ones) return -1;
      fill_k<<<1, 256, 0, s>>>(d->n, 1.0f, ones);
      CUBLAS_OK(cublasSgemv(h, CUBLAS_OP_N, d->out, d->n, &one, in1, d->out, ones, 1, &one, out1, 1));
    }
  }
  return 0;
}

/* ---- activations: cuDNN for relu, tanh, sigmoid; leaky relu (slope alpha) in a kernel ---- */

__global__ static void leaky_k(size_t n, float alpha, int bwd, const float *x, const float *dy, float *out) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = bwd ? (x[i] > 0 ? dy[i] : alpha * dy[i]) : (x[i] > 0 ? x[i] : alpha * x[i]);
}

extern "C" int _tsr_act_cuda(int worker, cudaStream_t s, const struct tsr_act_desc *d, int bwd, const float *x,
                             const float *y, const float *dy, float *out) {
  if (d->kind == TSR_ACT_LEAKY_RELU) {
    size_t b = (d->len + 255) / 256;
    leaky_k<<<(unsigned)(b > 8192 ? 8192 : b ? b : 1), 256, 0, s>>>(d->len, d->alpha, bwd, x, dy, out);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      fprintf(stderr, "tessera: leaky relu kernel launch failed: %s\n", cudaGetErrorString(e));
      return -1;
    }
    return 0;
  }
  cudnnHandle_t h;
  if (_tsr_cuda_handles(worker, s, &h, NULL)) return -1;
  /* a flat [1, 1, 1, len] tensor (cuDNN wants int dimensions: split very long slices) */
  cudnnActivationMode_t mode = d->kind == TSR_ACT_RELU ? CUDNN_ACTIVATION_RELU
                               : d->kind == TSR_ACT_TANH ? CUDNN_ACTIVATION_TANH : CUDNN_ACTIVATION_SIGMOID;
  cudnnActivationDescriptor_t ad;
  cudnnTensorDescriptor_t td;
  CUDNN_OK(cudnnCreateActivationDescriptor(&ad));
  CUDNN_OK(cudnnSetActivationDescriptor(ad, mode, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  CUDNN_OK(cudnnCreateTensorDescriptor(&td));
  const float one = 1.0f, zero = 0.0f;
  const size_t chunk = (size_t)1 << 30;
  int rc = 0;
  for (size_t off = 0; off < d->len && !rc; off += chunk) {
    int m = (int)(d->len - off < chunk ? d->len - off : chunk);
    cudnnStatus_t st = cudnnSetTensor4dDescriptor(td, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, m);
    if (st == CUDNN_STATUS_SUCCESS)
      st = bwd ? cudnnActivationBackward(h, ad, &one, td, y + off, td, dy + off, td, x + off, &zero, td, out + off)
               : cudnnActivationForward(h, ad, &one, td, x + off, &zero, td, out + off);
    if (st != CUDNN_STATUS_SUCCESS) {
      fprintf(stderr, "tessera: cudnnActivation%s failed: %s\n", bwd ? "Backward" : "Forward", cudnnGetErrorString(st));
      rc = -1;
    }
  }
  cudnnDestroyTensorDescriptor(td);
  cudnnDestroyActivationDescriptor(ad);
  return rc;
}

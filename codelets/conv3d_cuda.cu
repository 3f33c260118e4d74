/* conv3d and conv_transpose3d on cuDNN's N-d descriptors, the twin of codelets/conv3d.c: float32
 * tensors with FMA math at every precision, as on CPUs. A transposed conv is the conv from its
 * output space to its input space with the same IODHW = KCDRS filter (its forward is the conv's
 * backward-data, and so on, as in conv2d_cuda.cu). Descriptors, algorithm and workspace size are
 * chosen once per (worker, shape, pass, deterministic mode) and cached. */
#include <stdlib.h>
#include <string.h>

#include "cuda_util.h"
#include "cudnn_pick.h"

enum { CALL_FWD, CALL_BWD_DATA, CALL_BWD_FILTER };

struct conv3d_key {
  _tsr_conv3d_desc d;
  int pass, deterministic;
};
struct conv3d_plan {
  conv3d_key key;
  conv3d_plan *next;
  int call;
  cudnnTensorDescriptor_t in, out, bias; /* "in": the conv's input space, "out" its output space */
  cudnnFilterDescriptor_t filt;
  cudnnConvolutionDescriptor_t conv;
  int algo;
  size_t ws_bytes;
};

static conv3d_plan *plans[1024]; /* per worker: a list */

static void plan_destroy(conv3d_plan *p) {
  if (p->in) cudnnDestroyTensorDescriptor(p->in);
  if (p->out) cudnnDestroyTensorDescriptor(p->out);
  if (p->bias) cudnnDestroyTensorDescriptor(p->bias);
  if (p->filt) cudnnDestroyFilterDescriptor(p->filt);
  if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
  free(p);
}

static int set_5d(cudnnTensorDescriptor_t t, int n, int c, const int *dhw) {
  int dims[5] = {n, c, dhw[0], dhw[1], dhw[2]};
  TSR_CUDNN_OK(cudnnSetTensorNdDescriptorEx(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 5, dims));
  return 0;
}

static int plan_make(cudnnHandle_t h, const _tsr_conv3d_desc *d, int pass, int deterministic, conv3d_plan *p) {
  const int t = d->deconv, one3[3] = {1, 1, 1};
  int cin = t ? d->co : d->ci, cout = t ? d->ci : d->co;
  TSR_CUDNN_OK(cudnnCreateTensorDescriptor(&p->in));
  TSR_CUDNN_OK(cudnnCreateTensorDescriptor(&p->out));
  TSR_CUDNN_OK(cudnnCreateTensorDescriptor(&p->bias));
  TSR_CUDNN_OK(cudnnCreateFilterDescriptor(&p->filt));
  TSR_CUDNN_OK(cudnnCreateConvolutionDescriptor(&p->conv));
  if (set_5d(p->in, d->n, cin, t ? d->od : d->id) || set_5d(p->out, d->n, cout, t ? d->id : d->od) ||
      set_5d(p->bias, 1, d->co, one3))
    return -1;
  int fdims[5] = {cout, cin, d->k[0], d->k[1], d->k[2]};
  TSR_CUDNN_OK(cudnnSetFilterNdDescriptor(p->filt, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 5, fdims));
  TSR_CUDNN_OK(cudnnSetConvolutionNdDescriptor(p->conv, 3, d->p, d->s, d->dil, CUDNN_CROSS_CORRELATION,
                                               CUDNN_DATA_FLOAT));
  TSR_CUDNN_OK(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
  p->call = !t ? pass : pass == TSR_CONV_FWD ? CALL_BWD_DATA : pass == TSR_CONV_BWD_DATA ? CALL_FWD : CALL_BWD_FILTER;
  enum { MAXALGO = 16 };
  const int f32 = TSR_PRECISION_F32;
  int got = 0, rc;
  if (p->call == CALL_FWD) {
    cudnnConvolutionFwdAlgoPerf_t perf[MAXALGO];
    TSR_CUDNN_OK(cudnnGetConvolutionForwardAlgorithm_v7(h, p->in, p->filt, p->conv, p->out, MAXALGO, &got, perf));
    rc = _tsr_cudnn_pick(perf, got, f32, deterministic, p->conv, &p->algo, &p->ws_bytes);
  } else if (p->call == CALL_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[MAXALGO];
    TSR_CUDNN_OK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->filt, p->out, p->conv, p->in, MAXALGO, &got, perf));
    rc = _tsr_cudnn_pick(perf, got, f32, deterministic, p->conv, &p->algo, &p->ws_bytes);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[MAXALGO];
    TSR_CUDNN_OK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->in, p->out, p->conv, p->filt, MAXALGO, &got, perf));
    rc = _tsr_cudnn_pick(perf, got, f32, deterministic, p->conv, &p->algo, &p->ws_bytes);
  }
  if (rc > 0)
    return _tsr_cuda_report("cuDNN has no %salgorithm for %s pass %d of %dx%dx%dx%dx%d (k %dx%dx%d s %d p %d)",
                            deterministic ? "deterministic " : "", t ? "conv_transpose3d" : "conv3d", pass, d->n,
                            d->ci, d->id[0], d->id[1], d->id[2], d->k[0], d->k[1], d->k[2], d->s[0], d->p[0]);
  return rc;
}

static conv3d_plan *plan_get(int worker, cudnnHandle_t h, const _tsr_conv3d_desc *d, int pass) {
  conv3d_key key;
  memset(&key, 0, sizeof key);
  key.d = *d;
  key.pass = pass;
  key.deterministic = _tsr_get_deterministic();
  conv3d_plan *p = plans[worker];
  while (p && memcmp(&p->key, &key, sizeof key)) p = p->next;
  if (p) return p;
  p = (conv3d_plan *)calloc(1, sizeof *p);
  if (!p) {
    _tsr_cuda_report("out of host memory for a cuDNN plan");
    return NULL;
  }
  if (plan_make(h, d, pass, key.deterministic, p)) {
    plan_destroy(p);
    return NULL;
  }
  p->key = key;
  p->next = plans[worker];
  plans[worker] = p;
  return p;
}

/* The plan's cuDNN call on in-space, out-space and filter operands; beta 1 accumulates. */
static int conv_call(int worker, cudaStream_t s, cudnnHandle_t h, conv3d_plan *p, const float *in, const float *out,
                     const float *filt, float *result, float beta) {
  const float one = 1.0f;
  void *ws = p->ws_bytes ? _tsr_cuda_scratch(worker, p->ws_bytes, s) : NULL;
  if (p->ws_bytes && !ws) return -1;
  if (p->call == CALL_FWD)
    TSR_CUDNN_OK(cudnnConvolutionForward(h, &one, p->in, in, p->filt, filt, p->conv,
                                         (cudnnConvolutionFwdAlgo_t)p->algo, ws, p->ws_bytes, &beta, p->out, result));
  else if (p->call == CALL_BWD_DATA)
    TSR_CUDNN_OK(cudnnConvolutionBackwardData(h, &one, p->filt, filt, p->out, out, p->conv,
                                              (cudnnConvolutionBwdDataAlgo_t)p->algo, ws, p->ws_bytes, &beta, p->in,
                                              result));
  else
    TSR_CUDNN_OK(cudnnConvolutionBackwardFilter(h, &one, p->in, in, p->out, out, p->conv,
                                                (cudnnConvolutionBwdFilterAlgo_t)p->algo, ws, p->ws_bytes, &beta,
                                                p->filt, result));
  return 0;
}

/* fwd x, w, b -> y; bwd_data dy, w -> dx; bwd_weights x, dy -> dw (+=), db (+=). */
extern "C" int _tsr_conv3d_cuda(int worker, cudaStream_t s, const struct _tsr_conv3d_desc *d, int pass,
                                const float *in0, const float *in1, const float *in2, float *out0, float *out1) {
  cudnnHandle_t h;
  if (_tsr_cuda_handles(worker, s, &h, NULL)) return -1;
  conv3d_plan *p = plan_get(worker, h, d, pass);
  if (!p) return -1;
  const int t = d->deconv;
  const float one = 1.0f;
  if (pass == TSR_CONV_FWD) {
    if (conv_call(worker, s, h, p, t ? NULL : in0, t ? in0 : NULL, in1, out0, 0.0f)) return -1;
    if (d->has_bias) TSR_CUDNN_OK(cudnnAddTensor(h, &one, p->bias, in2, &one, t ? p->in : p->out, out0));
  } else if (pass == TSR_CONV_BWD_DATA) {
    if (conv_call(worker, s, h, p, t ? in0 : NULL, t ? NULL : in0, in1, out0, 0.0f)) return -1;
  } else {
    const float *x = in0, *dy = in1;
    const float beta = d->overwrite ? 0.0f : 1.0f; /* write, or add into dw and db */
    if (conv_call(worker, s, h, p, t ? dy : x, t ? x : dy, NULL, out0, beta)) return -1;
    if (d->has_bias && out1)
      TSR_CUDNN_OK(cudnnConvolutionBackwardBias(h, &one, t ? p->in : p->out, dy, &beta, p->bias, out1));
  }
  return 0;
}

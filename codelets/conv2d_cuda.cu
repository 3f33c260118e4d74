/* Convolution and transposed convolution on cuDNN, the twin of codelets/conv2d.c and
 * conv_transpose2d.c (a transposed conv is the conv from its output space to its input space with
 * the same IOHW = KCRS filter: its forward is the conv's backward-data and so on). Descriptors, the
 * algorithm and its workspace size are chosen once per (worker, shape, pass, precision,
 * deterministic mode) and cached.
 *
 * Precision of the convolutions (tessera/context.h):
 * - float32: float32 tensors and CUDNN_FMA_MATH, so no TF32 and no down-conversion.
 * - bf16 / fp16: the call's two operands are converted (round to nearest even) into bf16 / fp16
 *   copies and cuDNN runs on those with a float32 compute type (PSEUDO_BFLOAT16 / PSEUDO_HALF
 *   configurations, tensor cores where the algorithm uses them). cuDNN's legacy API wants x, w and
 *   y of one type, so the result is also rounded to bf16 / fp16 once before it is widened into the
 *   float32 output (weight gradients: widened and added). The CPU keeps that result in float32:
 *   the GPU rounds once more. CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION on float32 tensors is not used
 *   because it converts to fp16 whatever was asked (bf16 would silently run as fp16, with fp16's
 *   range), and only where the chosen algorithm wants to. Bias and its gradient stay float32.
 *   Shapes with no reduced-precision algorithm run in float32 (reported once), as on CPUs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera/context.h>
#include "cuda_util.h"
#include "cudnn_pick.h"

/* reduced precision: a failure here means no support for the data type, and float32 is tried */
#define GET_OK(call)                                                                                 \
  do {                                                                                               \
    cudnnStatus_t _s = (call);                                                                       \
    if (_s != CUDNN_STATUS_SUCCESS)                                                                  \
      return precision != TSR_PRECISION_F32 ? 1 : _tsr_cuda_report("%s failed: %s", #call, cudnnGetErrorString(_s)); \
  } while (0)

/* cuDNN calls (the transposed conv swaps forward and backward data) */
enum { CALL_FWD, CALL_BWD_DATA, CALL_BWD_FILTER };

/* In cuDNN's terms: "in" is the conv's input space, "out" its output space. */
struct conv_key {
  _tsr_conv_desc d;
  int deconv, pass, precision, deterministic;
};
struct conv_plan {
  conv_key key;
  conv_plan *next;
  int precision; /* what runs: the key's, or float32 where cuDNN had no reduced-precision algorithm */
  int call;
  cudnnTensorDescriptor_t in, out;     /* in the data type of `precision` */
  cudnnTensorDescriptor_t in32, out32; /* float32: bias add and bias gradient on the caller's buffers */
  cudnnTensorDescriptor_t bias;
  cudnnFilterDescriptor_t filt;
  cudnnConvolutionDescriptor_t conv;
  int algo;
  size_t ws_bytes;
  size_t nin, nout, nfilt; /* elements of each operand */
};

/* per worker: a list (a network has a few dozen shapes; no C++ runtime needed to link) */
static conv_plan *conv_plans[1024];

static void plan_destroy(conv_plan *p) {
  if (p->in) cudnnDestroyTensorDescriptor(p->in);
  if (p->out) cudnnDestroyTensorDescriptor(p->out);
  if (p->in32) cudnnDestroyTensorDescriptor(p->in32);
  if (p->out32) cudnnDestroyTensorDescriptor(p->out32);
  if (p->bias) cudnnDestroyTensorDescriptor(p->bias);
  if (p->filt) cudnnDestroyFilterDescriptor(p->filt);
  if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
  free(p);
}

static cudnnDataType_t data_type(int precision) {
  return precision == TSR_PRECISION_BF16 ? CUDNN_DATA_BFLOAT16
         : precision == TSR_PRECISION_FP16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

/* 0, 1 when cuDNN has no algorithm that fits (or no support for the data type), -1 on failure. */
static int plan_make(cudnnHandle_t h, const _tsr_conv_desc *d, int deconv, int pass, int precision, int deterministic,
                     conv_plan *p) {
  int cin = deconv ? d->co : d->ci, hin = deconv ? d->oh : d->h, win = deconv ? d->ow : d->w;
  int cout = deconv ? d->ci : d->co, hout = deconv ? d->h : d->oh, wout = deconv ? d->w : d->ow;
  cudnnDataType_t dt = data_type(precision);
  p->precision = precision;
  p->nin = (size_t)d->n * cin * hin * win;
  p->nout = (size_t)d->n * cout * hout * wout;
  p->nfilt = (size_t)cout * cin * d->kh * d->kw;
  TSR_CUDNN_OK(cudnnCreateTensorDescriptor(&p->in));
  TSR_CUDNN_OK(cudnnCreateTensorDescriptor(&p->out));
  TSR_CUDNN_OK(cudnnCreateTensorDescriptor(&p->in32));
  TSR_CUDNN_OK(cudnnCreateTensorDescriptor(&p->out32));
  TSR_CUDNN_OK(cudnnCreateTensorDescriptor(&p->bias));
  TSR_CUDNN_OK(cudnnCreateFilterDescriptor(&p->filt));
  TSR_CUDNN_OK(cudnnCreateConvolutionDescriptor(&p->conv));
  TSR_CUDNN_OK(cudnnSetTensor4dDescriptor(p->in32, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, cin, hin, win));
  TSR_CUDNN_OK(cudnnSetTensor4dDescriptor(p->out32, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, cout, hout, wout));
  TSR_CUDNN_OK(cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, d->co, 1, 1));
  if (cudnnSetTensor4dDescriptor(p->in, CUDNN_TENSOR_NCHW, dt, d->n, cin, hin, win) != CUDNN_STATUS_SUCCESS ||
      cudnnSetTensor4dDescriptor(p->out, CUDNN_TENSOR_NCHW, dt, d->n, cout, hout, wout) != CUDNN_STATUS_SUCCESS ||
      cudnnSetFilter4dDescriptor(p->filt, dt, CUDNN_TENSOR_NCHW, cout, cin, d->kh, d->kw) != CUDNN_STATUS_SUCCESS)
    return precision == TSR_PRECISION_F32 ? _tsr_cuda_report("cuDNN rejects the float32 descriptors of a conv") : 1;
  /* float32 compute in every precision (PSEUDO_* configurations for bf16 / fp16 data) */
  TSR_CUDNN_OK(cudnnSetConvolution2dDescriptor(p->conv, d->ph, d->pw, d->sh, d->sw, d->dh, d->dw,
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  GET_OK(cudnnSetConvolutionMathType(p->conv, precision == TSR_PRECISION_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  p->call = !deconv ? pass : pass == TSR_CONV_FWD ? CALL_BWD_DATA : pass == TSR_CONV_BWD_DATA ? CALL_FWD : CALL_BWD_FILTER;
  enum { MAXALGO = 16 };
  int got = 0, rc;
  if (p->call == CALL_FWD) {
    cudnnConvolutionFwdAlgoPerf_t perf[MAXALGO];
    GET_OK(cudnnGetConvolutionForwardAlgorithm_v7(h, p->in, p->filt, p->conv, p->out, MAXALGO, &got, perf));
    rc = _tsr_cudnn_pick(perf, got, precision, deterministic, p->conv, &p->algo, &p->ws_bytes);
  } else if (p->call == CALL_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[MAXALGO];
    GET_OK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p->filt, p->out, p->conv, p->in, MAXALGO, &got, perf));
    rc = _tsr_cudnn_pick(perf, got, precision, deterministic, p->conv, &p->algo, &p->ws_bytes);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[MAXALGO];
    GET_OK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p->in, p->out, p->conv, p->filt, MAXALGO, &got, perf));
    rc = _tsr_cudnn_pick(perf, got, precision, deterministic, p->conv, &p->algo, &p->ws_bytes);
  }
  if (rc > 0 && precision == TSR_PRECISION_F32)
    return _tsr_cuda_report("cuDNN has no %salgorithm for %s pass %d of %dx%dx%dx%d (k %dx%d s %d p %d)",
                            deterministic ? "deterministic " : "", deconv ? "transposed conv" : "conv", pass, d->n,
                            d->ci, d->h, d->w, d->kh, d->kw, d->sh, d->ph);
  return rc;
}

static conv_plan *plan_get(int worker, cudnnHandle_t h, const _tsr_conv_desc *d, int deconv, int pass, int precision) {
  conv_key key;
  memset(&key, 0, sizeof key);
  key.d = *d;
  key.deconv = deconv;
  key.pass = pass;
  key.precision = precision;
  key.deterministic = _tsr_get_deterministic();
  conv_plan *p = conv_plans[worker];
  while (p && memcmp(&p->key, &key, sizeof key)) p = p->next;
  if (p) return p;
  for (int prec = precision;; prec = TSR_PRECISION_F32) {
    p = (conv_plan *)calloc(1, sizeof *p);
    if (!p) {
      _tsr_cuda_report("out of host memory for a cuDNN plan");
      return NULL;
    }
    int rc = plan_make(h, d, deconv, pass, prec, key.deterministic, p);
    if (rc == 0) break;
    plan_destroy(p);
    if (rc < 0 || prec == TSR_PRECISION_F32) return NULL;
    fprintf(stderr, "tessera: cuDNN has no %s algorithm for %s pass %d of %dx%dx%dx%d: float32 on this worker\n",
            prec == TSR_PRECISION_BF16 ? "bf16" : "fp16", deconv ? "transposed conv" : "conv", pass, d->n, d->ci, d->h,
            d->w);
  }
  p->key = key;
  p->next = conv_plans[worker];
  conv_plans[worker] = p;
  return p;
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* Runs the plan's cuDNN call on in-space, out-space and filter operands (the one the call writes
 * is non-const in spirit); beta 1 accumulates (backward filter). Reduced precision converts. */
static int conv_call(int worker, cudaStream_t s, cudnnHandle_t h, conv_plan *p, const float *in, const float *out,
                     const float *filt, float *result, float beta) {
  const float one = 1.0f;
  if (p->precision == TSR_PRECISION_F32) {
    void *ws = p->ws_bytes ? _tsr_cuda_scratch(worker, p->ws_bytes, s) : NULL;
    if (p->ws_bytes && !ws) return -1;
    if (p->call == CALL_FWD)
      TSR_CUDNN_OK(cudnnConvolutionForward(h, &one, p->in, in, p->filt, filt, p->conv, (cudnnConvolutionFwdAlgo_t)p->algo,
                                       ws, p->ws_bytes, &beta, p->out, result));
    else if (p->call == CALL_BWD_DATA)
      TSR_CUDNN_OK(cudnnConvolutionBackwardData(h, &one, p->filt, filt, p->out, out, p->conv,
                                            (cudnnConvolutionBwdDataAlgo_t)p->algo, ws, p->ws_bytes, &beta, p->in,
                                            result));
    else
      TSR_CUDNN_OK(cudnnConvolutionBackwardFilter(h, &one, p->in, in, p->out, out, p->conv,
                                              (cudnnConvolutionBwdFilterAlgo_t)p->algo, ws, p->ws_bytes, &beta, p->filt,
                                              result));
    return 0;
  }
  /* scratch: cuDNN workspace, then bf16 / fp16 copies of the in-space, out-space and filter operands */
  size_t off_in = align256(p->ws_bytes), off_out = off_in + align256(2 * p->nin),
         off_filt = off_out + align256(2 * p->nout), total = off_filt + align256(2 * p->nfilt);
  char *scratch = (char *)_tsr_cuda_scratch(worker, total, s);
  if (!scratch) return -1;
  void *ws = p->ws_bytes ? scratch : NULL;
  uint16_t *hin = (uint16_t *)(scratch + off_in), *hout = (uint16_t *)(scratch + off_out),
           *hfilt = (uint16_t *)(scratch + off_filt);
  const float zero = 0.0f;
  int prec = p->precision;
  if (p->call != CALL_BWD_DATA && _tsr_narrow_cuda(in, hin, p->nin, prec, s)) return -1;
  if (p->call != CALL_FWD && _tsr_narrow_cuda(out, hout, p->nout, prec, s)) return -1;
  if (p->call != CALL_BWD_FILTER && _tsr_narrow_cuda(filt, hfilt, p->nfilt, prec, s)) return -1;
  if (p->call == CALL_FWD) {
    TSR_CUDNN_OK(cudnnConvolutionForward(h, &one, p->in, hin, p->filt, hfilt, p->conv, (cudnnConvolutionFwdAlgo_t)p->algo,
                                     ws, p->ws_bytes, &zero, p->out, hout));
    return _tsr_widen_cuda(hout, result, p->nout, prec, beta != 0.0f, s);
  }
  if (p->call == CALL_BWD_DATA) {
    TSR_CUDNN_OK(cudnnConvolutionBackwardData(h, &one, p->filt, hfilt, p->out, hout, p->conv,
                                          (cudnnConvolutionBwdDataAlgo_t)p->algo, ws, p->ws_bytes, &zero, p->in, hin));
    return _tsr_widen_cuda(hin, result, p->nin, prec, beta != 0.0f, s);
  }
  TSR_CUDNN_OK(cudnnConvolutionBackwardFilter(h, &one, p->in, hin, p->out, hout, p->conv,
                                          (cudnnConvolutionBwdFilterAlgo_t)p->algo, ws, p->ws_bytes, &zero, p->filt,
                                          hfilt));
  return _tsr_widen_cuda(hfilt, result, p->nfilt, prec, beta != 0.0f, s);
}

/* Inputs/outputs in the order of _tsr_convlike_run: fwd x, w, b -> y; bwd_data dy, w -> dx;
 * bwd_weights x, dy -> dw (+=), db (+=); with d->overwrite dw, db (=). */
extern "C" int _tsr_conv_cuda(int worker, cudaStream_t s, const struct _tsr_conv_desc *d, int deconv, int pass,
                              int precision, const float *in0, const float *in1, const float *in2, float *out0,
                              float *out1) {
  cudnnHandle_t h;
  if (_tsr_cuda_handles(worker, s, &h, NULL)) return -1;
  conv_plan *p = plan_get(worker, h, d, deconv, pass, precision);
  if (!p) return -1;
  const float one = 1.0f;
  if (pass == TSR_CONV_FWD) { /* conv: in-space x -> out-space y; transposed: out-space x -> in-space y */
    const float *x = in0, *w = in1, *b = in2;
    float *y = out0;
    if (conv_call(worker, s, h, p, deconv ? NULL : x, deconv ? x : NULL, w, y, 0.0f)) return -1;
    if (d->has_bias) TSR_CUDNN_OK(cudnnAddTensor(h, &one, p->bias, b, &one, deconv ? p->in32 : p->out32, y));
  } else if (pass == TSR_CONV_BWD_DATA) {
    const float *dy = in0, *w = in1;
    float *dx = out0;
    if (conv_call(worker, s, h, p, deconv ? dy : NULL, deconv ? NULL : dy, w, dx, 0.0f)) return -1;
  } else {
    const float *x = in0, *dy = in1;
    float *dw = out0, *db = out1;
    /* the conv's input space holds x (conv) or dy (transposed conv) */
    const float beta = d->overwrite ? 0.0f : 1.0f; /* write, or add into dw and db */
    if (conv_call(worker, s, h, p, deconv ? dy : x, deconv ? x : dy, NULL, dw, beta)) return -1;
    if (d->has_bias && db)
      TSR_CUDNN_OK(cudnnConvolutionBackwardBias(h, &one, deconv ? p->in32 : p->out32, dy, &beta, p->bias, db));
  }
  return 0;
}

/* conv3d and conv_transpose3d on oneDNN over the caller's NCDHW activations and PyTorch's OIDHW /
 * IODHW weights: the raw kernels, their codelets and the insert function. Per (thread, descriptor,
 * pass) one cached primitive runs directly on the caller's memory (plain layouts: no reorders, so
 * oneDNN picks its gemm-based 3-D kernels); its scratchpad comes from _tsr_scratch, so calls
 * allocate nothing. Weight gradients are computed into scratch and added (slices accumulate), or
 * with d->overwrite written by the primitive straight into the caller's memory. */
#include <string.h>

#include "codelets.h"
#include "conv_plan.h"
#include "cuda_util.h"
#include "kernel_util.h"

enum { TAG_CONV3D = 0x43563344 /* "CV3D" */ };
enum { SRC, WEI, BIA, DST, NROLE };

struct plan3 {
  dnnl_primitive_t prim;
  dnnl_primitive_desc_t pd; /* kept for the implementation name */
  int nargs;
  int arg[NROLE];
  dnnl_memory_t mem[NROLE];
  dnnl_memory_t scratchpad;
  size_t scratchpad_bytes;
};

struct plan3_key {
  struct _tsr_conv3d_desc d;
  int pass;
};

static void plan3_free(void *p) {
  struct plan3 *pl = p;
  for (int i = 0; i < pl->nargs; i++) dnnl_memory_destroy(pl->mem[i]);
  if (pl->scratchpad) dnnl_memory_destroy(pl->scratchpad);
  dnnl_primitive_destroy(pl->prim);
  dnnl_primitive_desc_destroy(pl->pd);
  free(pl);
}

static void plain_mds(const struct _tsr_conv3d_desc *d, dnnl_memory_desc_t md[NROLE]) {
  dnnl_dims_t src = {d->n, d->ci, d->id[0], d->id[1], d->id[2]}, dst = {d->n, d->co, d->od[0], d->od[1], d->od[2]};
  dnnl_dims_t wei = {d->co, d->ci, d->k[0], d->k[1], d->k[2]}, bia = {d->co};
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md[SRC], 5, src, dnnl_f32, dnnl_ncdhw));
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md[WEI], 5, wei, dnnl_f32, d->deconv ? dnnl_iodhw : dnnl_oidhw));
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md[BIA], 1, bia, dnnl_f32, dnnl_x));
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md[DST], 5, dst, dnnl_f32, dnnl_ncdhw));
}

/* Right padding p: oneDNN's size check then holds for the convolution (floor mode) and, with
 * output padding op < s, for the transposed one (any right padding in [p - op, p - op + s - 1]
 * describes the same sizes, and values depend on the left padding only). */
static void op_desc(const struct _tsr_conv3d_desc *d, int pass, const dnnl_memory_desc_t md[NROLE],
                    dnnl_convolution_desc_t *out) {
  dnnl_dims_t st, dil, pad;
  for (int a = 0; a < 3; a++) st[a] = d->s[a], dil[a] = d->dil[a] - 1, pad[a] = d->p[a];
  const dnnl_memory_desc_t *bia = d->has_bias ? &md[BIA] : NULL;
  if (!d->deconv) {
    if (pass == TSR_CONV_FWD)
      TSR_DNNL_CHECK(dnnl_dilated_convolution_forward_desc_init(out, dnnl_forward_training, dnnl_convolution_direct,
                                                                &md[SRC], &md[WEI], bia, &md[DST], st, dil, pad, pad));
    else if (pass == TSR_CONV_BWD_DATA)
      TSR_DNNL_CHECK(dnnl_dilated_convolution_backward_data_desc_init(out, dnnl_convolution_direct, &md[SRC], &md[WEI],
                                                                      &md[DST], st, dil, pad, pad));
    else
      TSR_DNNL_CHECK(dnnl_dilated_convolution_backward_weights_desc_init(out, dnnl_convolution_direct, &md[SRC],
                                                                         &md[WEI], bia, &md[DST], st, dil, pad, pad));
    return;
  }
  if (pass == TSR_CONV_FWD)
    TSR_DNNL_CHECK(dnnl_dilated_deconvolution_forward_desc_init(out, dnnl_forward_training, dnnl_deconvolution_direct,
                                                                &md[SRC], &md[WEI], bia, &md[DST], st, dil, pad, pad));
  else if (pass == TSR_CONV_BWD_DATA)
    TSR_DNNL_CHECK(dnnl_dilated_deconvolution_backward_data_desc_init(out, dnnl_deconvolution_direct, &md[SRC],
                                                                      &md[WEI], &md[DST], st, dil, pad, pad));
  else
    TSR_DNNL_CHECK(dnnl_dilated_deconvolution_backward_weights_desc_init(out, dnnl_deconvolution_direct, &md[SRC],
                                                                         &md[WEI], bia, &md[DST], st, dil, pad, pad));
}

/* The arguments of each pass in the order the kernels pass pointers (see codelets.h). */
static const struct {
  int n;
  int arg[NROLE], role[NROLE];
} pass_args[3] = {
    [TSR_CONV_FWD] = {4, {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST}, {SRC, WEI, BIA, DST}},
    [TSR_CONV_BWD_DATA] = {3, {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC}, {DST, WEI, SRC}},
    [TSR_CONV_BWD_WEIGHTS] = {4, {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_BIAS},
                              {SRC, DST, WEI, BIA}},
};

static struct plan3 *plan3_get(const struct _tsr_conv3d_desc *d, int pass) {
  struct plan3_key key;
  memset(&key, 0, sizeof key);
  key.d = *d;
  key.pass = pass;
  struct plan3 *p = _tsr_cache_get(TAG_CONV3D, &key, sizeof key);
  if (p) return p;
  dnnl_engine_t eng = _tsr_dnnl_engine();
  dnnl_memory_desc_t md[NROLE];
  plain_mds(d, md);
  dnnl_primitive_attr_t attr;
  TSR_DNNL_CHECK(dnnl_primitive_attr_create(&attr));
  TSR_DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  dnnl_convolution_desc_t fwd_desc, desc; /* backward passes take the forward one as a hint */
  dnnl_primitive_desc_t hint = NULL, pd;
  if (pass != TSR_CONV_FWD) {
    op_desc(d, TSR_CONV_FWD, md, &fwd_desc);
    TSR_DNNL_CHECK(dnnl_primitive_desc_create(&hint, &fwd_desc, NULL, eng, NULL));
  }
  op_desc(d, pass, md, &desc);
  dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, eng, hint);
  if (hint) dnnl_primitive_desc_destroy(hint);
  dnnl_primitive_attr_destroy(attr);
  TSR_DNNL_CHECK(st);
  p = calloc(1, sizeof *p);
  if (!p) _tsr_kernel_fail(__FILE__, __LINE__, "calloc(plan3)", -1);
  p->pd = pd;
  TSR_DNNL_CHECK(dnnl_primitive_create(&p->prim, pd));
  for (int i = 0; i < pass_args[pass].n; i++) {
    int role = pass_args[pass].role[i];
    if (role == BIA && !d->has_bias) continue;
    p->arg[p->nargs] = pass_args[pass].arg[i];
    p->mem[p->nargs++] = _tsr_dnnl_mem(&md[role], NULL);
  }
  const dnnl_memory_desc_t *spad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  p->scratchpad_bytes = spad ? dnnl_memory_desc_get_size(spad) : 0;
  if (p->scratchpad_bytes) p->scratchpad = _tsr_dnnl_mem(spad, NULL);
  _tsr_cache_put(TAG_CONV3D, &key, sizeof key, p, plan3_free);
  return p;
}

static size_t weight_elems(const struct _tsr_conv3d_desc *d) {
  return (size_t)d->co * d->ci * d->k[0] * d->k[1] * d->k[2];
}

/* ---- entry points, each under a kernel guard ---- */

struct conv3d_call {
  const struct _tsr_conv3d_desc *d;
  enum _tsr_conv_pass pass;
  const float *in[3];
  float *out[2];
  const char *impl;
};

static void conv3d_run_body(void *arg) {
  struct conv3d_call *c = arg;
  const struct _tsr_conv3d_desc *d = c->d;
  struct plan3 *p = plan3_get(d, c->pass);
  size_t nw = weight_elems(d);
  float *dw = NULL, *db = NULL; /* weight gradients go to scratch first, then add (unless overwritten) */
  void *ptr[NROLE];
  int k = 0;
  if (c->pass == TSR_CONV_FWD) {
    ptr[k++] = (void *)c->in[0], ptr[k++] = (void *)c->in[1];
    if (d->has_bias) ptr[k++] = (void *)c->in[2];
    ptr[k++] = c->out[0];
  } else if (c->pass == TSR_CONV_BWD_DATA) {
    ptr[k++] = (void *)c->in[0], ptr[k++] = (void *)c->in[1], ptr[k++] = c->out[0];
  } else if (d->overwrite) {
    ptr[k++] = (void *)c->in[0], ptr[k++] = (void *)c->in[1], ptr[k++] = c->out[0];
    if (d->has_bias) ptr[k++] = c->out[1] ? c->out[1] : _tsr_scratch(2, (size_t)d->co * sizeof(float));
  } else {
    dw = _tsr_scratch(1, nw * sizeof(float));
    ptr[k++] = (void *)c->in[0], ptr[k++] = (void *)c->in[1], ptr[k++] = dw;
    if (d->has_bias) ptr[k++] = db = _tsr_scratch(2, (size_t)d->co * sizeof(float));
  }
  dnnl_exec_arg_t args[NROLE + 1];
  for (int i = 0; i < p->nargs; i++) {
    TSR_DNNL_CHECK(dnnl_memory_set_data_handle(p->mem[i], ptr[i]));
    args[i] = (dnnl_exec_arg_t){p->arg[i], p->mem[i]};
  }
  int nargs = p->nargs;
  if (p->scratchpad) {
    TSR_DNNL_CHECK(dnnl_memory_set_data_handle(p->scratchpad, _tsr_scratch(0, p->scratchpad_bytes)));
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->scratchpad};
  }
  _tsr_dnnl_run(p->prim, nargs, args);
  if (dw) _tsr_axpy_cpu(c->out[0], dw, 1.0f, nw);
  if (db && c->out[1]) _tsr_axpy_cpu(c->out[1], db, 1.0f, (size_t)d->co);
}

/* A box of a buffer [nc, full...] (full[a] = 0: ext[a], whole along a) starting at off: copied into
 * (scatter 0) or out of (scatter 1) a dense [nc, ext...], row by row along the last axis. */
static void box(float *dense, float *buf, size_t nc, const int *ext, const int *full, const int *off, int scatter) {
  size_t f[3], o[3];
  for (int a = 0; a < 3; a++) f[a] = (size_t)(full[a] ? full[a] : ext[a]), o[a] = full[a] ? (size_t)off[a] : 0;
  size_t row = (size_t)ext[2] * sizeof(float);
  for (size_t i = 0; i < nc; i++)
    for (size_t z = 0; z < (size_t)ext[0]; z++)
      for (size_t y = 0; y < (size_t)ext[1]; y++) {
        float *far = buf + ((i * f[0] + o[0] + z) * f[1] + o[1] + y) * f[2] + o[2];
        float *near = dense + ((i * (size_t)ext[0] + z) * (size_t)ext[1] + y) * (size_t)ext[2];
        if (scatter)
          memcpy(far, near, row);
        else
          memcpy(near, far, row);
      }
}

static int any(const int *full) { return full[0] || full[1] || full[2]; }

/* Boxes: the read buffers gathered into dense scratch where they are boxes, the dense primitive
 * (strided views would leave oneDNN its reference kernels only), and a forward output box copied
 * into place. */
static void conv3d_range_body(void *arg) {
  const struct conv3d_call *c = arg;
  const struct _tsr_conv3d_desc *r = c->d;
  struct _tsr_conv3d_desc d = *r;
  memset(d.src_full, 0, sizeof d.src_full), memset(d.src_off, 0, sizeof d.src_off);
  memset(d.in1_full, 0, sizeof d.in1_full), memset(d.in1_off, 0, sizeof d.in1_off);
  memset(d.dst_full, 0, sizeof d.dst_full), memset(d.dst_off, 0, sizeof d.dst_off);
  size_t nci = (size_t)d.n * d.ci, nco = (size_t)d.n * d.co, ni = nci, no = nco;
  for (int a = 0; a < 3; a++) ni *= (size_t)d.id[a], no *= (size_t)d.od[a];
  int bwd_data = c->pass == TSR_CONV_BWD_DATA;
  struct conv3d_call dense = {
      .d = &d, .pass = c->pass, .in = {c->in[0], c->in[1], c->in[2]}, .out = {c->out[0], c->out[1]}};
  if (any(r->src_full)) { /* x, or dy for bwd_data */
    float *s = _tsr_scratch(3, (bwd_data ? no : ni) * sizeof(float));
    box(s, (float *)c->in[0], bwd_data ? nco : nci, bwd_data ? d.od : d.id, r->src_full, r->src_off, 0);
    dense.in[0] = s;
  }
  if (any(r->in1_full) && c->pass == TSR_CONV_BWD_WEIGHTS) { /* dy */
    float *s = _tsr_scratch(5, no * sizeof(float));
    box(s, (float *)c->in[1], nco, d.od, r->in1_full, r->in1_off, 0);
    dense.in[1] = s;
  }
  if (any(r->dst_full) && c->pass == TSR_CONV_FWD) dense.out[0] = _tsr_scratch(4, no * sizeof(float));
  conv3d_run_body(&dense);
  if (dense.out[0] != c->out[0]) box(dense.out[0], c->out[0], nco, d.od, r->dst_full, r->dst_off, 1);
}

static const char *conv3d_op(const struct _tsr_conv3d_desc *d, enum _tsr_conv_pass pass) {
  static const char *ops[2][3] = {{"conv3d_fwd", "conv3d_bwd_data", "conv3d_bwd_weights"},
                                  {"deconv3d_fwd", "deconv3d_bwd_data", "deconv3d_bwd_weights"}};
  return ops[d->deconv != 0][pass];
}

void _tsr_conv3d_run(const struct _tsr_conv3d_desc *d, enum _tsr_conv_pass pass, const float *in0, const float *in1,
                     const float *in2, float *out0, float *out1) {
  struct conv3d_call c = {.d = d, .pass = pass, .in = {in0, in1, in2}, .out = {out0, out1}};
  int range = any(d->src_full) || any(d->in1_full) || any(d->dst_full);
  _tsr_kernel_guard(conv3d_op(d, pass), range ? conv3d_range_body : conv3d_run_body, &c);
}

static void conv3d_impl_body(void *arg) {
  struct conv3d_call *c = arg;
  TSR_DNNL_CHECK(dnnl_primitive_desc_query(plan3_get(c->d, c->pass)->pd, dnnl_query_impl_info_str, 0, &c->impl));
}

const char *_tsr_conv3d_impl(const struct _tsr_conv3d_desc *d, enum _tsr_conv_pass pass) {
  struct conv3d_call c = {.d = d, .pass = pass};
  return _tsr_kernel_guard(conv3d_op(d, pass), conv3d_impl_body, &c) ? c.impl : NULL;
}

/* ---- codelets: buffers fwd x, w, [b], y; bwd_data dy, w, dx; bwd_weights x, dy, dw, [db] ---- */

static void conv3d_cpu(void *b[], const struct _tsr_conv3d_desc *d, enum _tsr_conv_pass pass) {
  _tsr_worker_enter();
  int hb = d->has_bias;
  if (pass == TSR_CONV_FWD)
    _tsr_conv3d_run(d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), hb ? TSR_BUF(b, 2) : NULL, TSR_BUF(b, 2 + hb), NULL);
  else if (pass == TSR_CONV_BWD_DATA)
    _tsr_conv3d_run(d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2), NULL);
  else
    _tsr_conv3d_run(d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2), hb ? TSR_BUF(b, 3) : NULL);
}
static void conv3d_fwd_cpu(void *b[], void *a) { conv3d_cpu(b, a, TSR_CONV_FWD); }
static void conv3d_bwd_data_cpu(void *b[], void *a) { conv3d_cpu(b, a, TSR_CONV_BWD_DATA); }
static void conv3d_bwd_weights_cpu(void *b[], void *a) { conv3d_cpu(b, a, TSR_CONV_BWD_WEIGHTS); }

#ifdef TSR_CUDA_CODELETS
/* CUDA (conv3d_cuda.cu) */
static void conv3d_cuda(void *b[], const struct _tsr_conv3d_desc *d, enum _tsr_conv_pass pass) {
  int hb = d->has_bias, w = TSR_CUDA_WORKER;
  cudaStream_t st = TSR_CUDA_STREAM;
  if (pass == TSR_CONV_FWD)
    TSR_CUDA_RUN(_tsr_conv3d_cuda(w, st, d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), hb ? TSR_BUF(b, 2) : NULL,
                                  TSR_BUF(b, 2 + hb), NULL));
  else if (pass == TSR_CONV_BWD_DATA)
    TSR_CUDA_RUN(_tsr_conv3d_cuda(w, st, d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2), NULL));
  else
    TSR_CUDA_RUN(_tsr_conv3d_cuda(w, st, d, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2),
                                  hb ? TSR_BUF(b, 3) : NULL));
}
static void conv3d_fwd_cuda(void *b[], void *a) { conv3d_cuda(b, a, TSR_CONV_FWD); }
static void conv3d_bwd_data_cuda(void *b[], void *a) { conv3d_cuda(b, a, TSR_CONV_BWD_DATA); }
static void conv3d_bwd_weights_cuda(void *b[], void *a) { conv3d_cuda(b, a, TSR_CONV_BWD_WEIGHTS); }
#endif

/* One codelet per pass serves both kinds: the perfmodels' footprints tell the shapes apart. */
static struct starpu_perfmodel models[3] = {
    {.type = STARPU_HISTORY_BASED, .symbol = "tsr_conv3d_fwd"},
    {.type = STARPU_HISTORY_BASED, .symbol = "tsr_conv3d_bwd_data"},
    {.type = STARPU_HISTORY_BASED, .symbol = "tsr_conv3d_bwd_weights"},
};

static struct starpu_codelet cl_conv3d[3] = {
    {.cpu_funcs = {conv3d_fwd_cpu}, TSR_CUDA_FUNCS(conv3d_fwd_cuda).cpu_funcs_name = {"conv3d_fwd_cpu"},
     .nbuffers = STARPU_VARIABLE_NBUFFERS, .model = &models[0], .name = "tsr_conv3d_fwd"},
    {.cpu_funcs = {conv3d_bwd_data_cpu}, TSR_CUDA_FUNCS(conv3d_bwd_data_cuda).cpu_funcs_name = {"conv3d_bwd_data_cpu"},
     .nbuffers = STARPU_VARIABLE_NBUFFERS, .model = &models[1], .name = "tsr_conv3d_bwd_data"},
    {.cpu_funcs = {conv3d_bwd_weights_cpu}, TSR_CUDA_FUNCS(conv3d_bwd_weights_cuda)
     .cpu_funcs_name = {"conv3d_bwd_weights_cpu"}, .nbuffers = STARPU_VARIABLE_NBUFFERS, .model = &models[2],
     .name = "tsr_conv3d_bwd_weights"},
};

static struct starpu_perfmodel range_models[3] = {
    {.type = STARPU_HISTORY_BASED, .symbol = "tsr_conv3d_fwd_range"},
    {.type = STARPU_HISTORY_BASED, .symbol = "tsr_conv3d_bwd_data_range"},
    {.type = STARPU_HISTORY_BASED, .symbol = "tsr_conv3d_bwd_weights_range"},
};
static struct starpu_codelet cl_conv3d_range[3] = {
    {.cpu_funcs = {conv3d_fwd_cpu},
     .cpu_funcs_name = {"conv3d_fwd_cpu"},
     .nbuffers = STARPU_VARIABLE_NBUFFERS,
     .model = &range_models[0],
     .name = "tsr_conv3d_fwd_range"},
    {.cpu_funcs = {conv3d_bwd_data_cpu},
     .cpu_funcs_name = {"conv3d_bwd_data_cpu"},
     .nbuffers = STARPU_VARIABLE_NBUFFERS,
     .model = &range_models[1],
     .name = "tsr_conv3d_bwd_data_range"},
    {.cpu_funcs = {conv3d_bwd_weights_cpu},
     .cpu_funcs_name = {"conv3d_bwd_weights_cpu"},
     .nbuffers = STARPU_VARIABLE_NBUFFERS,
     .model = &range_models[2],
     .name = "tsr_conv3d_bwd_weights_range"},
};

int _tsr_insert_conv3d_range(const struct _tsr_conv3d_desc *d, enum _tsr_conv_pass pass, starpu_data_handle_t h0,
                             starpu_data_handle_t h1, starpu_data_handle_t h2, starpu_data_handle_t h3,
                             const char *name) {
  struct _tsr_buf bufs[4];
  int n = _tsr_convlike_bufs(pass, d->has_bias, d->overwrite, h0, h1, h2, h3, bufs);
  if (pass == TSR_CONV_FWD && any(d->dst_full)) bufs[n - 1].mode = STARPU_RW; /* the other pieces' planes stay */
  return _tsr_submit(&cl_conv3d_range[pass], d, sizeof *d, 0, name, n, bufs);
}

int _tsr_insert_conv3d(const struct _tsr_conv3d_desc *d, enum _tsr_conv_pass pass, starpu_data_handle_t h0,
                       starpu_data_handle_t h1, starpu_data_handle_t h2, starpu_data_handle_t h3, const char *name) {
  struct _tsr_buf bufs[4];
  int n = _tsr_convlike_bufs(pass, d->has_bias, d->overwrite, h0, h1, h2, h3, bufs);
  return _tsr_submit(&cl_conv3d[pass], d, sizeof *d, 0, name, n, bufs);
}

/* 2-D and 3-D pooling (max, and average counting the padding as PyTorch's default) on NCHW, NCDHW
 * or (2-D) blocked nChw{B}c float32 (2-D: x and y also bf16, and each of dy and dx float32 or bf16)
 * with oneDNN: the raw kernels, their codelets and insert functions. Max pooling saves oneDNN's
 * workspace (the argmax of each window) during the forward so that the backward need not read x.
 * Primitives and their memory objects are built once per (thread, descriptor); a call only swaps
 * data pointers. Scratchpads are user-managed (per-thread scratch), so no call allocates. */
#include <errno.h>

#include "codelets.h"
#include "convert.h"
#include "cuda_util.h"
#include "kernel_util.h"
#include "runtime/error.h"

/* Cache tags are spelled in ASCII so that each codelet file's tags stay distinct. */
enum { TAG_POOL_FWD = 0x504c4657 /* "PLFW" */, TAG_POOL_BWD = 0x504c4257 /* "PLBW" */ };

/* One cached primitive with the memory objects it runs on. For the backward, `in` is diff_dst
 * and `out` diff_src. */
struct pool_prim {
  dnnl_primitive_t prim;
  dnnl_memory_t in, out, ws, scratch; /* ws, scratch: NULL when not needed */
  size_t scratch_bytes;
};

static void pool_prim_destroy(void *p) {
  struct pool_prim *pp = p;
  dnnl_primitive_destroy(pp->prim);
  dnnl_memory_destroy(pp->in);
  dnnl_memory_destroy(pp->out);
  if (pp->ws) dnnl_memory_destroy(pp->ws);
  if (pp->scratch) dnnl_memory_destroy(pp->scratch);
  free(pp);
}

/* The window's axes, (h, w) or (d, h, w): how many, and each one's sizes. */
static int pool_axes(const struct _tsr_pool_desc *d, dnnl_dim_t *in, dnnl_dim_t *out, dnnl_dim_t *k, dnnl_dim_t *s,
                     dnnl_dim_t *p) {
  int a = 0;
  if (d->d > 0) in[a] = d->d, out[a] = d->od, k[a] = d->kd, s[a] = d->sd, p[a++] = d->pd;
  in[a] = d->h, out[a] = d->oh, k[a] = d->kh, s[a] = d->sh, p[a++] = d->ph;
  in[a] = d->w, out[a] = d->ow, k[a] = d->kw, s[a] = d->sw, p[a++] = d->pw;
  return a;
}

/* x and y (bwd 0: bf16 where stored so), or their gradients (bwd 1: the kernel's type, bf16 where
 * pool_get's key has dy_bf16). */
static void pool_mds(const struct _tsr_pool_desc *d, int bwd, dnnl_memory_desc_t *src, dnnl_memory_desc_t *dst) {
  dnnl_dims_t sd = {d->n, d->c}, dd = {d->n, d->c}, k, s, p;
  int nd = 2 + pool_axes(d, sd + 2, dd + 2, k, s, p);
  dnnl_format_tag_t tag = nd == 5 ? dnnl_ncdhw : _tsr_act_tag(d->blk);
  dnnl_data_type_t dt = (bwd ? d->dy_bf16 : d->bf16) ? dnnl_bf16 : dnnl_f32;
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(src, nd, sd, dt, tag));
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(dst, nd, dd, dt, tag));
}

static dnnl_primitive_attr_t user_scratchpad_attr(void) {
  dnnl_primitive_attr_t attr;
  TSR_DNNL_CHECK(dnnl_primitive_attr_create(&attr));
  TSR_DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  return attr;
}

/* The forward (bwd 0) or backward primitive descriptor; the backward one takes the forward one as its
 * hint. Symmetric padding on both sides matches PyTorch's floor mode: oneDNN checks
 * (h - k + 2p) / s + 1 == oh with integer division, which is PyTorch's formula. */
static dnnl_primitive_desc_t pool_pd(const struct _tsr_pool_desc *d, int bwd) {
  dnnl_memory_desc_t src, dst;
  pool_mds(d, bwd, &src, &dst);
  dnnl_dims_t in, out, st, k, p;
  pool_axes(d, in, out, k, st, p);
  dnnl_alg_kind_t alg = d->is_max ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;
  dnnl_pooling_desc_t op;
  if (bwd)
    TSR_DNNL_CHECK(dnnl_pooling_backward_desc_init(&op, alg, &src, &dst, st, k, p, p));
  else
    TSR_DNNL_CHECK(dnnl_pooling_forward_desc_init(&op, dnnl_forward_training, alg, &src, &dst, st, k, p, p));
  dnnl_primitive_desc_t hint = bwd ? pool_pd(d, 0) : NULL;
  dnnl_primitive_attr_t attr = user_scratchpad_attr();
  dnnl_primitive_desc_t pd;
  TSR_DNNL_CHECK(dnnl_primitive_desc_create(&pd, &op, attr, _tsr_dnnl_engine(), hint));
  dnnl_primitive_attr_destroy(attr);
  if (hint) dnnl_primitive_desc_destroy(hint);
  return pd;
}

static size_t md_bytes(dnnl_primitive_desc_t pd, dnnl_query_t what) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, what, 0);
  return md ? dnnl_memory_desc_get_size(md) : 0;
}

/* The primitive of a pass; a backward one on bf16 gradients (both dy and dx) with bf16_grads, else
 * float32 ones, whatever the caller stores. */
static struct pool_prim *pool_get(const struct _tsr_pool_desc *desc, int bwd, int bf16_grads) {
  struct _tsr_pool_desc key = *desc;
  key.dy_bf16 = key.dx_bf16 = bwd && bf16_grads;
  const struct _tsr_pool_desc *d = &key;
  int tag = bwd ? TAG_POOL_BWD : TAG_POOL_FWD;
  struct pool_prim *pp = _tsr_cache_get(tag, d, sizeof *d);
  if (pp) return pp;
  pp = calloc(1, sizeof *pp);
  if (!pp) _tsr_kernel_fail(__FILE__, __LINE__, "calloc(pool_prim)", -1);
  dnnl_primitive_desc_t pd = pool_pd(d, bwd);
  TSR_DNNL_CHECK(dnnl_primitive_create(&pp->prim, pd));
  dnnl_query_t in = bwd ? dnnl_query_diff_dst_md : dnnl_query_src_md;
  dnnl_query_t out = bwd ? dnnl_query_diff_src_md : dnnl_query_dst_md;
  pp->in = _tsr_dnnl_mem(dnnl_primitive_desc_query_md(pd, in, 0), NULL);
  pp->out = _tsr_dnnl_mem(dnnl_primitive_desc_query_md(pd, out, 0), NULL);
  if (md_bytes(pd, dnnl_query_workspace_md))
    pp->ws = _tsr_dnnl_mem(dnnl_primitive_desc_query_md(pd, dnnl_query_workspace_md, 0), NULL);
  pp->scratch_bytes = md_bytes(pd, dnnl_query_scratchpad_md);
  if (pp->scratch_bytes)
    pp->scratch = _tsr_dnnl_mem(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0), NULL);
  dnnl_primitive_desc_destroy(pd);
  _tsr_cache_put(tag, d, sizeof *d, pp, pool_prim_destroy);
  return pp;
}

static void pool_run(struct pool_prim *pp, int in_arg, const void *in, int out_arg, void *out, void *ws) {
  dnnl_exec_arg_t args[4];
  int nargs = 0;
  TSR_DNNL_CHECK(dnnl_memory_set_data_handle(pp->in, (void *)in));
  TSR_DNNL_CHECK(dnnl_memory_set_data_handle(pp->out, out));
  args[nargs++] = (dnnl_exec_arg_t){in_arg, pp->in};
  args[nargs++] = (dnnl_exec_arg_t){out_arg, pp->out};
  if (pp->ws) {
    TSR_DNNL_CHECK(dnnl_memory_set_data_handle(pp->ws, ws));
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, pp->ws};
  }
  if (pp->scratch) {
    TSR_DNNL_CHECK(dnnl_memory_set_data_handle(pp->scratch, _tsr_scratch(0, pp->scratch_bytes)));
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pp->scratch};
  }
  _tsr_dnnl_run(pp->prim, nargs, args);
}

/* ---- entry points, each under a kernel guard ---- */

struct pool_call {
  const struct _tsr_pool_desc *d;
  const void *in;
  void *out, *ws;
  size_t bytes;
};

static void ws_bytes_body(void *arg) {
  struct pool_call *c = arg;
  dnnl_primitive_desc_t pd = pool_pd(c->d, 0);
  c->bytes = md_bytes(pd, dnnl_query_workspace_md);
  dnnl_primitive_desc_destroy(pd);
}

/* Asks oneDNN rather than assuming its layout (u8 or s32 indices depending on the window size).
 * 0 also when oneDNN failed (recorded, see _tsr_kernel_error). */
size_t _tsr_pool_ws_bytes(const struct _tsr_pool_desc *d) {
  struct pool_call c = {.d = d};
  if (d->is_max) _tsr_kernel_guard("pool_fwd", ws_bytes_body, &c);
  return c.bytes;
}

static void pool_fwd_body(void *arg) {
  struct pool_call *c = arg;
  pool_run(pool_get(c->d, 0, 0), DNNL_ARG_SRC, c->in, DNNL_ARG_DST, c->out, c->ws);
}

/* Elements of one side (x or y) of all n samples, padding channels included. */
static size_t side_elems(const struct _tsr_pool_desc *d, int out) {
  size_t c = d->blk ? (size_t)(d->c + d->blk - 1) / d->blk * d->blk : (size_t)d->c;
  return (size_t)d->n * c * (out ? (size_t)d->oh * d->ow : (size_t)d->h * d->w) * (d->d > 0 ? (out ? d->od : d->d) : 1);
}

/* bf16 gradients give bitwise the float32 path's dx rounded once (nearest even, convert.h). Max
 * pooling whose windows do not overlap (kernel at most the stride) writes into each dx element one
 * dy value or zero, so rounding dy first is the same: a bf16 dx comes from oneDNN's bf16 kernel on
 * dy (rounded into a scratch buffer a quarter of dx's size for a 2x2 window when it is float32).
 * Otherwise the kernel runs on float32 gradients: a bf16 dy widened (exactly) into a scratch
 * buffer, a bf16 dx rounded from a float32 one. */
static void pool_bwd_body(void *arg) {
  struct pool_call *c = arg;
  const struct _tsr_pool_desc *d = c->d;
  size_t ny = side_elems(d, 1), nx = side_elems(d, 0);
  const void *dy = c->in;
  void *dx = c->out;
  int one_each = d->is_max && d->kh <= d->sh && d->kw <= d->sw && (d->d == 0 || d->kd <= d->sd);
  if (d->dx_bf16 && one_each) {
    if (!d->dy_bf16) {
      uint16_t *r = _tsr_scratch(1, ny * sizeof(uint16_t));
      _tsr_f32_to_bf16_cpu(c->in, r, ny);
      dy = r;
    }
    /* oneDNN writes dx's padding channels as zeros here (tests/check_precision checks them) */
    pool_run(pool_get(d, 1, 1), DNNL_ARG_DIFF_DST, dy, DNNL_ARG_DIFF_SRC, dx, c->ws);
    return;
  }
  if (d->dy_bf16) {
    float *w = _tsr_scratch(1, ny * sizeof(float));
    _tsr_bf16_to_f32_cpu(c->in, w, ny);
    dy = w;
  }
  if (d->dx_bf16) dx = _tsr_scratch(2, nx * sizeof(float));
  pool_run(pool_get(d, 1, 0), DNNL_ARG_DIFF_DST, dy, DNNL_ARG_DIFF_SRC, dx, c->ws);
  if (d->dx_bf16) _tsr_f32_to_bf16_cpu(dx, c->out, nx);
  if (d->dy_bf16 || d->dx_bf16) { /* padding channels zeroed (kernel_util.h says why) */
    size_t hw = (size_t)d->h * d->w, es = d->dx_bf16 ? 2 : 4, per = side_elems(d, 0) / d->n * es;
    for (int s = 0; s < d->n; s++) _tsr_zero_pad_channels(d->blk, hw, es, (char *)c->out + s * per, d->c);
  }
}

void _tsr_pool_fwd_cpu(const struct _tsr_pool_desc *d, const float *x, float *y, void *ws) {
  struct pool_call c = {.d = d, .in = x, .out = y, .ws = ws};
  _tsr_kernel_guard("pool_fwd", pool_fwd_body, &c);
}

void _tsr_pool_bwd_cpu(const struct _tsr_pool_desc *d, const float *dy, const void *ws, float *dx) {
  struct pool_call c = {.d = d, .in = dy, .out = dx, .ws = (void *)ws};
  _tsr_kernel_guard("pool_bwd", pool_bwd_body, &c);
}

/* Buffers: x, y[, ws] */
static void pool_fwd_func(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  const struct _tsr_pool_desc *d = cl_arg;
  void *ws = d->is_max ? (void *)STARPU_VECTOR_GET_PTR(buffers[2]) : NULL;
  _tsr_pool_fwd_cpu(d, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), ws);
}

/* Buffers: dy[, ws], dx */
static void pool_bwd_func(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  const struct _tsr_pool_desc *d = cl_arg;
  const void *ws = d->is_max ? (const void *)STARPU_VECTOR_GET_PTR(buffers[1]) : NULL;
  _tsr_pool_bwd_cpu(d, TSR_BUF(buffers, 0), ws, TSR_BUF(buffers, d->is_max ? 2 : 1));
}

#ifdef TSR_CUDA_CODELETS
/* CUDA (pool_cuda.cu). Buffers as above: fwd x, y[, ws]; bwd dy[, ws], dx. The workspace must
 * have oneDNN's size, since CPU workers read and write the same handle. */
static int pool_ws_ok(const struct _tsr_pool_desc *d, void *ws_buf) {
  size_t want = _tsr_pool_cuda_ws_bytes(d);
  size_t got = (size_t)STARPU_VECTOR_GET_NX(ws_buf) * STARPU_VECTOR_GET_ELEMSIZE(ws_buf);
  if (got == want) return 0;
  return _tsr_cuda_report("max pooling workspace has %zu bytes, the CUDA kernels write %zu (oneDNN's layout changed?)",
                          got, want);
}
static void pool_fwd_func_cuda(void *b[], void *a) {
  const struct _tsr_pool_desc *d = a;
  void *ws = d->is_max ? (void *)STARPU_VECTOR_GET_PTR(b[2]) : NULL;
  TSR_CUDA_RUN((d->is_max ? pool_ws_ok(d, b[2]) : 0) || _tsr_pool_cuda(TSR_CUDA_WORKER, TSR_CUDA_STREAM, d, 0, TSR_BUF(b, 0), ws, TSR_BUF(b, 1)));
}
static void pool_bwd_func_cuda(void *b[], void *a) {
  const struct _tsr_pool_desc *d = a;
  void *ws = d->is_max ? (void *)STARPU_VECTOR_GET_PTR(b[1]) : NULL;
  TSR_CUDA_RUN((d->is_max ? pool_ws_ok(d, b[1]) : 0) ||
      _tsr_pool_cuda(TSR_CUDA_WORKER, TSR_CUDA_STREAM, d, 1, TSR_BUF(b, 0), ws, TSR_BUF(b, d->is_max ? 2 : 1)));
}
#endif

static struct starpu_perfmodel pool_fwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_pool_fwd"};
static struct starpu_perfmodel pool_bwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_pool_bwd"};

static struct starpu_codelet cl_pool_fwd = {
    .cpu_funcs = {pool_fwd_func}, TSR_CUDA_FUNCS(pool_fwd_func_cuda)
    .cpu_funcs_name = {"pool_fwd_func"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &pool_fwd_model,
    .name = "tsr_pool_fwd",
};

static struct starpu_codelet cl_pool_bwd = {
    .cpu_funcs = {pool_bwd_func}, TSR_CUDA_FUNCS(pool_bwd_func_cuda)
    .cpu_funcs_name = {"pool_bwd_func"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &pool_bwd_model,
    .name = "tsr_pool_bwd",
};

static int check_ws(const struct _tsr_pool_desc *d, starpu_data_handle_t ws, const char *name) {
  if (d->is_max && !ws) {
    _tsr_error(TSR_ERR_ARG, "pool '%s': max pooling needs a workspace handle", name);
    return -EINVAL;
  }
  return 0;
}

int _tsr_insert_pool_fwd(const struct _tsr_pool_desc *d, starpu_data_handle_t x, starpu_data_handle_t y,
                         starpu_data_handle_t ws, const char *name) {
  int ret = check_ws(d, ws, name);
  if (ret) return ret;
  struct _tsr_buf bufs[] = {{x, STARPU_R}, {y, STARPU_W}, {ws, STARPU_W}};
  return _tsr_submit(&cl_pool_fwd, d, sizeof *d, STARPU_DEFAULT_PRIO, name, d->is_max ? 3 : 2, bufs);
}

int _tsr_insert_pool_bwd(const struct _tsr_pool_desc *d, starpu_data_handle_t dy, starpu_data_handle_t ws,
                         starpu_data_handle_t dx, const char *name) {
  int ret = check_ws(d, ws, name);
  if (ret) return ret;
  struct _tsr_buf with_ws[] = {{dy, STARPU_R}, {ws, STARPU_R}, {dx, STARPU_W}};
  struct _tsr_buf without_ws[] = {{dy, STARPU_R}, {dx, STARPU_W}};
  return d->is_max ? _tsr_submit(&cl_pool_bwd, d, sizeof *d, STARPU_DEFAULT_PRIO, name, 3, with_ws)
                   : _tsr_submit(&cl_pool_bwd, d, sizeof *d, STARPU_DEFAULT_PRIO, name, 2, without_ws);
}

/* conv2d on oneDNN, and the plan code shared with conv_transpose2d.c: per (thread, descriptor,
 * pass) one cached plan holds the primitive, its memory objects and the reorders between the
 * caller's activations (NCHW or blocked) / PyTorch weights and the layouts oneDNN chose. Calls allocate
 * nothing: inner buffers and oneDNN's scratchpad come from _tsr_scratch. Weight gradients are
 * computed into scratch and added by a reorder with a sum post-op (slices accumulate), or, with
 * d->overwrite, written (by a plain reorder, or by the primitive itself when the layouts agree). */
#include <stdatomic.h>
#include <string.h>

#include <tessera/context.h>

#include "codelets.h"
#include "conv_plan.h"
#include "convert.h"
#include "cuda_util.h"
#include "kernel_util.h"
#include "runtime/error.h"


#define CONV_CACHE_TAG 0x636f6e76 /* "conv" */

/* Which tensors let oneDNN pick the layout (bit per role). The trainer keeps activations in the
 * blocked layout the jit kernels want (src_blk, dst_blk), so no reorder runs for them; where a side
 * is plain (the model's input and output), a blocked layout costs a reorder of the slice (which the
 * trainer runs in a task of its own where _tsr_convlike_reorders reports it), yet measured here
 * (one thread, slices of 16, 64x64 and 32x32) the blocked jit kernels beat the plain gemm ones 2-3x
 * on 3x3 convs and 1.3-2x on stride-2 transposed convs. A 1x1 conv between
 * plain tensors is a plain GEMM with no im2col: plain was ~10% faster. */
enum { ROLE_SRC, ROLE_WEI, ROLE_BIA, ROLE_DST, NROLE };

static int any_roles(const struct _tsr_conv_desc *d, int deconv) {
  int pointwise = !deconv && d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && d->ph == 0 && d->pw == 0;
  return pointwise && !d->src_blk && !d->dst_blk ? 0 : (1 << ROLE_SRC) | (1 << ROLE_WEI) | (1 << ROLE_DST);
}

static int role_blk(const struct _tsr_conv_desc *d, int r) {
  return r == ROLE_SRC ? d->src_blk : r == ROLE_DST ? d->dst_blk : 0;
}

struct plan_arg {
  int exec_arg;             /* DNNL_ARG_* */
  int role;                 /* ROLE_*: which of the four tensors (activation or parameter) */
  int is_out, accumulate;   /* output written back; added into the caller's memory */
  dnnl_memory_t user;       /* caller's plain layout */
  dnnl_memory_t inner;      /* primitive's layout over scratch; NULL when user serves directly */
  dnnl_primitive_t reorder; /* user -> inner for inputs, inner -> user for outputs */
  size_t inner_bytes;
};

struct plan {
  dnnl_primitive_t prim;
  dnnl_primitive_desc_t pd; /* kept for the implementation name and data types */
  int nargs;
  struct plan_arg a[NROLE];
  dnnl_memory_t scratchpad;
  size_t scratchpad_bytes;
};

struct plan_key {
  struct _tsr_conv_desc d;
  int deconv, pass, precision;
};

/* Arithmetic of the convolutions in this process (TSR_PRECISION_*), set by the context. */

/* fp16 convolutions exist on GPUs only (the context refuses fp16 without a CUDA worker): CPU
 * workers must not take them, or they would silently run in float32. */
int _tsr_conv_can_execute(unsigned workerid, struct starpu_task *task, unsigned nimpl) {
  return _tsr_get_precision() != TSR_PRECISION_FP16 || starpu_worker_get_type((int)workerid) != STARPU_CPU_WORKER;
}

/* bf16: the pass's inputs are asked for in bf16, so the reorders from the caller's float32 round
 * them; outputs and bias stay float32 (float32 accumulation, float32 master weights) unless the
 * caller stores them in bf16 (stored_bf16: activations and their gradients, never parameters). */
static int bf16_roles(int pass) {
  if (pass == TSR_CONV_FWD) return (1 << ROLE_SRC) | (1 << ROLE_WEI);
  if (pass == TSR_CONV_BWD_DATA) return (1 << ROLE_DST) | (1 << ROLE_WEI);
  return (1 << ROLE_SRC) | (1 << ROLE_DST);
}

static void plan_free(void *p) {
  struct plan *pl = p;
  for (int i = 0; i < pl->nargs; i++) {
    struct plan_arg *a = &pl->a[i];
    if (a->reorder) dnnl_primitive_destroy(a->reorder);
    if (a->inner) dnnl_memory_destroy(a->inner);
    dnnl_memory_destroy(a->user);
  }
  if (pl->scratchpad) dnnl_memory_destroy(pl->scratchpad);
  dnnl_primitive_destroy(pl->prim);
  dnnl_primitive_desc_destroy(pl->pd);
  free(pl);
}

/* Which roles of the pass the caller stores in bf16: the input where the pass reads the activation
 * (fwd, bwd_weights) or writes its gradient (bwd_data), the output where it writes it (fwd) or
 * reads its gradient (bwd_data, bwd_weights). */
static int stored_bf16(const struct _tsr_conv_desc *d, int pass) {
  int m = 0;
  if (pass == TSR_CONV_BWD_DATA ? d->dsrc_bf16 : d->src_bf16) m |= 1 << ROLE_SRC;
  if (pass == TSR_CONV_FWD ? d->dst_bf16 : d->ddst_bf16) m |= 1 << ROLE_DST;
  return m;
}

/* The caller's memory descriptors of the four roles in the forward sense (src = conv input). */
static void plain_mds(const struct _tsr_conv_desc *d, int deconv, int pass, dnnl_memory_desc_t md[NROLE]) {
  dnnl_dims_t src = {d->n, d->ci, d->h, d->w}, dst = {d->n, d->co, d->oh, d->ow};
  dnnl_dims_t wei = {d->co, d->ci, d->kh, d->kw}, bia = {d->co};
  int b = stored_bf16(d, pass);
  dnnl_data_type_t ts = b & (1 << ROLE_SRC) ? dnnl_bf16 : dnnl_f32, td = b & (1 << ROLE_DST) ? dnnl_bf16 : dnnl_f32;
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md[ROLE_SRC], 4, src, ts, _tsr_act_tag(d->src_blk)));
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md[ROLE_WEI], 4, wei, dnnl_f32, deconv ? dnnl_iohw : dnnl_oihw));
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md[ROLE_BIA], 1, bia, dnnl_f32, dnnl_x));
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md[ROLE_DST], 4, dst, td, _tsr_act_tag(d->dst_blk)));
}

/* Op descriptor for one pass; `md` carries the layouts asked for (any or plain). */
static void op_desc(const struct _tsr_conv_desc *d, int deconv, int pass, const dnnl_memory_desc_t md[NROLE],
                    dnnl_convolution_desc_t *out) {
  dnnl_dims_t st = {d->sh, d->sw}, dil = {d->dh - 1, d->dw - 1}, pl = {d->ph, d->pw}, pr;
  const dnnl_memory_desc_t *bia = d->has_bias ? &md[ROLE_BIA] : NULL;
  if (!deconv) {
    /* oneDNN rounds the output size down like PyTorch, so the symmetric padding is consistent. */
    pr[0] = d->ph;
    pr[1] = d->pw;
    if (pass == TSR_CONV_FWD)
      TSR_DNNL_CHECK(dnnl_dilated_convolution_forward_desc_init(out, dnnl_forward_training, dnnl_convolution_direct,
                                                                &md[ROLE_SRC], &md[ROLE_WEI], bia, &md[ROLE_DST],
                                                                st, dil, pl, pr));
    else if (pass == TSR_CONV_BWD_DATA)
      TSR_DNNL_CHECK(dnnl_dilated_convolution_backward_data_desc_init(out, dnnl_convolution_direct, &md[ROLE_SRC],
                                                                      &md[ROLE_WEI], &md[ROLE_DST], st, dil, pl, pr));
    else
      TSR_DNNL_CHECK(dnnl_dilated_convolution_backward_weights_desc_init(
          out, dnnl_convolution_direct, &md[ROLE_SRC], &md[ROLE_WEI], bia, &md[ROLE_DST], st, dil, pl, pr));
    return;
  }
  /* Output padding adds rows at the high end: any right padding in [p - op, p - op + s - 1]
   * describes the same sizes; take the one closest to p (valid for op < s). */
  pr[0] = d->ph - d->oph + d->sh - 1 < d->ph ? d->ph - d->oph + d->sh - 1 : d->ph;
  pr[1] = d->pw - d->opw + d->sw - 1 < d->pw ? d->pw - d->opw + d->sw - 1 : d->pw;
  if (pass == TSR_CONV_FWD)
    TSR_DNNL_CHECK(dnnl_dilated_deconvolution_forward_desc_init(out, dnnl_forward_training, dnnl_deconvolution_direct,
                                                                &md[ROLE_SRC], &md[ROLE_WEI], bia, &md[ROLE_DST], st,
                                                                dil, pl, pr));
  else if (pass == TSR_CONV_BWD_DATA)
    TSR_DNNL_CHECK(dnnl_dilated_deconvolution_backward_data_desc_init(out, dnnl_deconvolution_direct, &md[ROLE_SRC],
                                                                      &md[ROLE_WEI], &md[ROLE_DST], st, dil, pl, pr));
  else
    TSR_DNNL_CHECK(dnnl_dilated_deconvolution_backward_weights_desc_init(
        out, dnnl_deconvolution_direct, &md[ROLE_SRC], &md[ROLE_WEI], bia, &md[ROLE_DST], st, dil, pl, pr));
}

/* Sets up one argument: the caller's plain memory, and when the primitive wants another layout
 * (or the result must be added), an inner memory and the reorder between them. */
static void plan_arg_init(struct plan_arg *a, int exec_arg, int role, int is_out, int accumulate,
                          const dnnl_memory_desc_t *user_md, const dnnl_memory_desc_t *prim_md) {
  dnnl_engine_t eng = _tsr_dnnl_engine();
  *a = (struct plan_arg){.exec_arg = exec_arg, .role = role, .is_out = is_out, .accumulate = accumulate};
  a->user = _tsr_dnnl_mem(user_md, NULL);
  if (!accumulate && dnnl_memory_desc_equal(user_md, prim_md)) return;
  a->inner = _tsr_dnnl_mem(prim_md, NULL);
  a->inner_bytes = dnnl_memory_desc_get_size(prim_md);
  dnnl_primitive_attr_t attr = NULL;
  if (accumulate) {
    dnnl_post_ops_t po;
    TSR_DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    TSR_DNNL_CHECK(dnnl_post_ops_create(&po));
    TSR_DNNL_CHECK(dnnl_post_ops_append_sum(po, 1.0f));
    TSR_DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_post_ops_destroy(po);
  }
  dnnl_primitive_desc_t rpd;
  if (is_out)
    TSR_DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, prim_md, eng, user_md, eng, attr));
  else
    TSR_DNNL_CHECK(dnnl_reorder_primitive_desc_create(&rpd, user_md, eng, prim_md, eng, attr));
  TSR_DNNL_CHECK(dnnl_primitive_create(&a->reorder, rpd));
  dnnl_primitive_desc_destroy(rpd);
  if (attr) dnnl_primitive_attr_destroy(attr);
}

/* Memory descriptors asked of oneDNN: with `exact`, the caller's blocked layout for blocked
 * activations; layout `any` for the other roles of any_roles; bf16 for the roles of `bf16`. */
static void ask_mds(const struct _tsr_conv_desc *d, int deconv, int bf16, int exact,
                    const dnnl_memory_desc_t user[NROLE], dnnl_memory_desc_t ask[NROLE]) {
  /* bf16 kernels (brgconv, AMX) want blocked layouts also for 1x1 */
  int any = bf16 ? (1 << ROLE_SRC) | (1 << ROLE_WEI) | (1 << ROLE_DST) : any_roles(d, deconv);
  for (int r = 0; r < NROLE; r++) {
    dnnl_data_type_t dt = bf16 & (1 << r) ? dnnl_bf16 : dnnl_f32;
    dnnl_format_tag_t tag = exact && role_blk(d, r) ? _tsr_act_tag(role_blk(d, r))
                            : any & (1 << r)         ? dnnl_format_tag_any
                            : r == ROLE_BIA          ? dnnl_x
                            : r == ROLE_WEI          ? (deconv ? dnnl_iohw : dnnl_oihw)
                                                     : dnnl_nchw;
    TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&ask[r], user[r].ndims, user[r].dims, dt, tag));
  }
}

/* The pass's primitive descriptor (backward passes take the forward one as a hint). */
static dnnl_status_t make_pd(const struct _tsr_conv_desc *d, int deconv, int pass, int bf16, int exact,
                             const dnnl_memory_desc_t user[NROLE], dnnl_primitive_desc_t *pd) {
  dnnl_engine_t eng = _tsr_dnnl_engine();
  dnnl_memory_desc_t ask[NROLE], hint_ask[NROLE];
  /* a bf16 output the caller stores is written by the kernel itself */
  ask_mds(d, deconv, bf16 ? bf16_roles(pass) | stored_bf16(d, pass) : 0, exact, user, ask);
  ask_mds(d, deconv, bf16 ? bf16_roles(TSR_CONV_FWD) | stored_bf16(d, TSR_CONV_FWD) : 0, exact, user, hint_ask);
  dnnl_primitive_attr_t attr;
  TSR_DNNL_CHECK(dnnl_primitive_attr_create(&attr));
  TSR_DNNL_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  dnnl_convolution_desc_t fwd_desc, desc;
  dnnl_primitive_desc_t hint = NULL;
  dnnl_status_t st = dnnl_success;
  if (pass != TSR_CONV_FWD) {
    op_desc(d, deconv, TSR_CONV_FWD, hint_ask, &fwd_desc);
    st = dnnl_primitive_desc_create(&hint, &fwd_desc, NULL, eng, NULL);
    op_desc(d, deconv, pass, ask, &desc);
  } else {
    op_desc(d, deconv, TSR_CONV_FWD, ask, &desc);
  }
  if (st == dnnl_success) st = dnnl_primitive_desc_create(pd, &desc, attr, eng, hint);
  if (hint) dnnl_primitive_desc_destroy(hint);
  dnnl_primitive_attr_destroy(attr);
  return st;
}

/* A reference implementation: far slower than a reorder around a jit kernel. */
static int is_ref(dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
         strstr(impl, "ref");
}

/* Passes that compute in float32 with bf16 precision: oneDNN 2.6 runs a strided transposed
 * convolution's forward in bf16 as a strided backward-data convolution (jit_bf16), and that and its
 * weight gradient took 4-8x the time of the float32 kernels on an AVX512-BF16 CPU (the example's
 * 2x2 stride-2 transitions up; bench/README.md). These passes take their bf16-stored inputs widened
 * (exactly) by the plan's reorders and the float32 weights, and a bf16-stored output is their
 * float32 result rounded once. A fixed rule, so results never depend on timings. */
int _tsr_conv_bf16_in_f32(const struct _tsr_conv_desc *d, int deconv, int pass) {
  return deconv && (d->sh > 1 || d->sw > 1) && pass != TSR_CONV_BWD_DATA;
}

/* NULL when precision is bf16 and oneDNN has no bf16 implementation for this shape. */
static struct plan *plan_create(const struct _tsr_conv_desc *d, int deconv, int pass, int precision) {
  dnnl_memory_desc_t user[NROLE];
  int bf16 = precision == TSR_PRECISION_BF16 && !_tsr_conv_bf16_in_f32(d, deconv, pass);
  plain_mds(d, deconv, pass, user);
  dnnl_primitive_desc_t pd;
  /* The caller's blocked layouts first; a layout oneDNN chooses (and reorders) when no fast kernel
   * takes them. */
  int blocked = d->src_blk || d->dst_blk;
  dnnl_status_t st = make_pd(d, deconv, pass, bf16, blocked, user, &pd);
  if (st == dnnl_success && blocked && is_ref(pd)) {
    dnnl_primitive_desc_destroy(pd);
    st = dnnl_unimplemented;
  }
  if (st != dnnl_success && blocked) st = make_pd(d, deconv, pass, bf16, 0, user, &pd);
  if (st != dnnl_success && bf16) return NULL;
  TSR_DNNL_CHECK(st);

  struct plan *p = calloc(1, sizeof *p);
  if (!p) _tsr_kernel_fail(__FILE__, __LINE__, "calloc(plan)", -1);
  p->pd = pd;
  TSR_DNNL_CHECK(dnnl_primitive_create(&p->prim, pd));
#define MD(q) dnnl_primitive_desc_query_md(pd, q, 0)
  if (pass == TSR_CONV_FWD) {
    plan_arg_init(&p->a[p->nargs++], DNNL_ARG_SRC, ROLE_SRC, 0, 0, &user[ROLE_SRC], MD(dnnl_query_src_md));
    plan_arg_init(&p->a[p->nargs++], DNNL_ARG_WEIGHTS, ROLE_WEI, 0, 0, &user[ROLE_WEI], MD(dnnl_query_weights_md));
    if (d->has_bias) plan_arg_init(&p->a[p->nargs++], DNNL_ARG_BIAS, ROLE_BIA, 0, 0, &user[ROLE_BIA], &user[ROLE_BIA]);
    plan_arg_init(&p->a[p->nargs++], DNNL_ARG_DST, ROLE_DST, 1, 0, &user[ROLE_DST], MD(dnnl_query_dst_md));
  } else if (pass == TSR_CONV_BWD_DATA) {
    plan_arg_init(&p->a[p->nargs++], DNNL_ARG_DIFF_DST, ROLE_DST, 0, 0, &user[ROLE_DST], MD(dnnl_query_diff_dst_md));
    plan_arg_init(&p->a[p->nargs++], DNNL_ARG_WEIGHTS, ROLE_WEI, 0, 0, &user[ROLE_WEI], MD(dnnl_query_weights_md));
    plan_arg_init(&p->a[p->nargs++], DNNL_ARG_DIFF_SRC, ROLE_SRC, 1, 0, &user[ROLE_SRC], MD(dnnl_query_diff_src_md));
  } else {
    plan_arg_init(&p->a[p->nargs++], DNNL_ARG_SRC, ROLE_SRC, 0, 0, &user[ROLE_SRC], MD(dnnl_query_src_md));
    plan_arg_init(&p->a[p->nargs++], DNNL_ARG_DIFF_DST, ROLE_DST, 0, 0, &user[ROLE_DST], MD(dnnl_query_diff_dst_md));
    int acc = !d->overwrite;
    plan_arg_init(&p->a[p->nargs++], DNNL_ARG_DIFF_WEIGHTS, ROLE_WEI, 1, acc, &user[ROLE_WEI],
                  MD(dnnl_query_diff_weights_md));
    if (d->has_bias)
      plan_arg_init(&p->a[p->nargs++], DNNL_ARG_DIFF_BIAS, ROLE_BIA, 1, acc, &user[ROLE_BIA], &user[ROLE_BIA]);
  }
  const dnnl_memory_desc_t *spad = MD(dnnl_query_scratchpad_md);
#undef MD
  p->scratchpad_bytes = spad ? dnnl_memory_desc_get_size(spad) : 0;
  if (p->scratchpad_bytes) p->scratchpad = _tsr_dnnl_mem(spad, NULL);
  return p;
}

/* The plan of the pass at `precision` (the context's, or float32 for the taps' 1x1 convolution). */
static struct plan *plan_at(const struct _tsr_conv_desc *d, int deconv, int pass, int precision) {
  struct plan_key key;
  memset(&key, 0, sizeof key);
  key.d = *d;
  key.deconv = deconv;
  key.pass = pass;
  key.precision = precision;
  struct plan *p = _tsr_cache_get(CONV_CACHE_TAG, &key, sizeof key);
  if (!p) {
    p = plan_create(d, deconv, pass, precision);
    if (!p && key.precision == TSR_PRECISION_BF16) { /* no bf16 kernel here: float32, said once */
      static atomic_int warned;
      if (!atomic_exchange(&warned, 1))
        _tsr_log(1, "bf16 was asked for, but oneDNN offers no bf16 %s for some layers on this CPU (its bf16 "
                    "kernels need AVX-512): those run in float32", deconv ? "transposed convolution" : "convolution");
      p = plan_create(d, deconv, pass, TSR_PRECISION_F32);
    }
    _tsr_cache_put(CONV_CACHE_TAG, &key, sizeof key, p, plan_free);
  }
  return p;
}

static struct plan *plan_get(const struct _tsr_conv_desc *d, int deconv, int pass) {
  return plan_at(d, deconv, pass, _tsr_get_precision());
}

/* ---- transposed convolutions whose kernel equals their stride ----
 * (kh x kw = sh x sw, no padding, dilation or output padding). Each input pixel then scatters into
 * its own kh x kw block of the output, so the forward is a 1x1 convolution from ci to kh kw co
 * channels (tap t = a kw + b, output channel o at t co + o) and a pixel shuffle that adds the bias.
 * oneDNN 2.6 runs the transposed forward as a strided backward-data convolution, about 10x slower
 * than its 1x1 kernel on the example's 2x2 stride-2 shapes (bench/README.md). Float32 throughout, as
 * oneDNN's pass ran with bf16 precision (_tsr_conv_bf16_in_f32); the backward passes stay oneDNN's. */
static int taps_fwd(const struct _tsr_conv_desc *d, int deconv, int pass) {
  return deconv && pass == TSR_CONV_FWD && d->kh == d->sh && d->kw == d->sw && d->kh * d->kw > 1 && !d->ph &&
         !d->pw && d->dh == 1 && d->dw == 1 && !d->oph && !d->opw && (!d->dst_blk || d->co % d->dst_blk == 0);
}

/* The 1x1 convolution: the taps' outputs z in the layout of y's block, float32 */
static struct _tsr_conv_desc taps_desc(const struct _tsr_conv_desc *d) {
  struct _tsr_conv_desc e = *d;
  e.co = d->co * d->kh * d->kw, e.oh = d->h, e.ow = d->w;
  e.kh = e.kw = e.sh = e.sw = e.dh = e.dw = 1;
  e.ph = e.pw = e.oph = e.opw = e.has_bias = e.overwrite = 0;
  e.dst_bf16 = e.dsrc_bf16 = e.ddst_bf16 = 0;
  return e;
}

/* The plan that runs the pass: oneDNN's, or the taps' 1x1 convolution (its descriptor into *e). */
static struct plan *pass_plan(const struct _tsr_conv_desc *d, int deconv, int pass, struct _tsr_conv_desc *e) {
  if (!taps_fwd(d, deconv, pass)) return plan_get(d, deconv, pass);
  *e = taps_desc(d);
  return plan_at(e, 0, TSR_CONV_FWD, TSR_PRECISION_F32);
}

/* y[n][o][sh i + a][sw j + b] = z[n][(a kw + b) co + o][i][j] (+ bias[o]), z and y in the layout of
 * block d->dst_blk (a plain plane is a block of 1), y float32 or bf16 (rounded once). */
static void taps_shuffle(const struct _tsr_conv_desc *d, const float *z, const float *bias, void *y) {
  const int B = d->dst_blk ? d->dst_blk : 1, kk = d->kh * d->kw, cb = d->co / B;
  const size_t hw = (size_t)d->h * d->w, ohw = (size_t)d->oh * d->ow;
  static const float zero[16];
  for (int n = 0; n < d->n; n++)
    for (int ob = 0; ob < cb; ob++)
      for (int t = 0; t < kk; t++) {
        const float *zb = z + ((size_t)n * kk * cb + (size_t)t * cb + ob) * hw * B, *bb = bias ? bias + ob * B : zero;
        size_t yb = ((size_t)n * cb + ob) * ohw;
        for (int i = 0; i < d->h; i++)
          for (int j = 0; j < d->w; j++) {
            const float *restrict zp = zb + ((size_t)i * d->w + j) * B;
            size_t yo = (yb + (size_t)(i * d->sh + t / d->kw) * d->ow + (size_t)j * d->sw + t % d->kw) * B;
            if (d->dst_bf16) {
              uint16_t *restrict yp = (uint16_t *)y + yo;
#pragma omp simd
              for (int c = 0; c < B; c++) yp[c] = _tsr_bf16_round(bias ? zp[c] + bb[c] : zp[c]);
            } else {
              float *restrict yp = (float *)y + yo;
#pragma omp simd
              for (int c = 0; c < B; c++) yp[c] = bias ? zp[c] + bb[c] : zp[c];
            }
          }
      }
}


/* Reorders run inside convolution tasks since the process started, of activations (and their
 * gradients) and of parameters (and theirs): _tsr_conv_reorders. */
static atomic_long reorders_run[2];

long _tsr_conv_reorders(int params) { return atomic_load(&reorders_run[params != 0]); }

/* not inlined: profiles (callgrind) show the reorders convolution tasks run apart from their kernels */
__attribute__((noinline)) static void run_reorder(struct plan_arg *a) {
  atomic_fetch_add_explicit(&reorders_run[a->role == ROLE_WEI || a->role == ROLE_BIA], 1, memory_order_relaxed);
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a->is_out ? a->inner : a->user},
                             {DNNL_ARG_TO, a->is_out ? a->user : a->inner}};
  _tsr_dnnl_run(a->reorder, 2, args);
}

/* Inputs and outputs in the order the plan declared them (fwd: x, w, [b] -> y; bwd_data:
 * dy, w -> dx; bwd_weights: x, dy -> dw, [db]); absent bias pointers are skipped. */
static void plan_run(struct plan *p, const struct _tsr_conv_desc *d, enum _tsr_conv_pass pass, const float *in0,
                     const float *in1, const float *in2, float *out0, float *out1) {
  void *ptr[NROLE];
  int k = 0;
  if (pass == TSR_CONV_FWD) {
    ptr[k++] = (void *)in0;
    ptr[k++] = (void *)in1;
    if (d->has_bias) ptr[k++] = (void *)in2;
    ptr[k++] = out0;
  } else if (pass == TSR_CONV_BWD_DATA) {
    ptr[k++] = (void *)in0;
    ptr[k++] = (void *)in1;
    ptr[k++] = out0;
  } else {
    ptr[k++] = (void *)in0;
    ptr[k++] = (void *)in1;
    ptr[k++] = out0;
    if (d->has_bias) ptr[k++] = out1;
  }
  dnnl_exec_arg_t args[NROLE + 1];
  for (int i = 0; i < p->nargs; i++) {
    struct plan_arg *a = &p->a[i];
    TSR_DNNL_CHECK(dnnl_memory_set_data_handle(a->user, ptr[i]));
    if (a->inner) TSR_DNNL_CHECK(dnnl_memory_set_data_handle(a->inner, _tsr_scratch(i, a->inner_bytes)));
    if (a->inner && !a->is_out) run_reorder(a);
    args[i] = (dnnl_exec_arg_t){a->exec_arg, a->inner ? a->inner : a->user};
  }
  int nargs = p->nargs;
  if (p->scratchpad) {
    TSR_DNNL_CHECK(dnnl_memory_set_data_handle(p->scratchpad, _tsr_scratch(NROLE, p->scratchpad_bytes)));
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->scratchpad};
  }
  _tsr_dnnl_run(p->prim, nargs, args);
  for (int i = 0; i < p->nargs; i++)
    if (p->a[i].inner && p->a[i].is_out) run_reorder(&p->a[i]);
}

static void convlike_run(const struct _tsr_conv_desc *d, int deconv, enum _tsr_conv_pass pass, const float *in0,
                         const float *in1, const float *in2, float *out0, float *out1) {
  if (!taps_fwd(d, deconv, pass)) {
    plan_run(plan_get(d, deconv, pass), d, pass, in0, in1, in2, out0, out1);
    return;
  }
  struct _tsr_conv_desc e;
  struct plan *p = pass_plan(d, deconv, pass, &e);
  /* the taps' weights [t co + o][ci] from the transposed convolution's [ci][co][kh][kw] (IOHW) */
  const int kk = d->kh * d->kw;
  float *w1 = _tsr_scratch(NROLE + 1, (size_t)kk * d->co * d->ci * sizeof(float));
  for (int i = 0; i < d->ci; i++)
    for (int o = 0; o < d->co; o++)
      for (int t = 0; t < kk; t++) w1[((size_t)t * d->co + o) * d->ci + i] = in1[((size_t)i * d->co + o) * kk + t];
  float *z = _tsr_scratch(NROLE + 2, (size_t)d->n * e.co * d->h * d->w * sizeof(float));
  plan_run(p, &e, TSR_CONV_FWD, in0, w1, NULL, z, NULL);
  taps_shuffle(d, z, d->has_bias ? in2 : NULL, out0);
}

/* ---- entry points, each under a kernel guard ---- */

struct convlike_call {
  const struct _tsr_conv_desc *d;
  int deconv;
  enum _tsr_conv_pass pass;
  const float *in[3];
  float *out[2];
  const char *impl;
  dnnl_data_type_t *types;
};

static const char *convlike_op(int deconv, enum _tsr_conv_pass pass) {
  static const char *ops[2][3] = {{"conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weights"},
                                  {"deconv2d_fwd", "deconv2d_bwd_data", "deconv2d_bwd_weights"}};
  return ops[deconv != 0][pass];
}

static void convlike_impl_body(void *arg) {
  struct convlike_call *c = arg;
  struct _tsr_conv_desc e;
  TSR_DNNL_CHECK(dnnl_primitive_desc_query(pass_plan(c->d, c->deconv, c->pass, &e)->pd, dnnl_query_impl_info_str, 0,
                                           &c->impl));
}

/* NULL when the plan could not be made (the failure is recorded, see _tsr_kernel_error). */
const char *_tsr_convlike_impl(const struct _tsr_conv_desc *d, int deconv, enum _tsr_conv_pass pass) {
  struct convlike_call c = {.d = d, .deconv = deconv, .pass = pass};
  return _tsr_kernel_guard(convlike_op(deconv, pass), convlike_impl_body, &c) ? c.impl : NULL;
}

static void convlike_types_body(void *arg) {
  static const dnnl_query_t q[3][3] = {{dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md},
                                       {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
                                       {dnnl_query_src_md, dnnl_query_diff_dst_md, dnnl_query_diff_weights_md}};
  struct convlike_call *c = arg;
  struct _tsr_conv_desc e;
  dnnl_primitive_desc_t pd = pass_plan(c->d, c->deconv, c->pass, &e)->pd;
  for (int k = 0; k < 3; k++) c->types[k] = dnnl_primitive_desc_query_md(pd, q[c->pass][k], 0)->data_type;
}

/* The data types of the primitive that runs the pass at the current precision, as oneDNN reports
 * them: the pass's two inputs and its output in the order of _tsr_convlike_run (fwd x, w -> y;
 * bwd_data dy, w -> dx; bwd_weights x, dy -> dw). -1 when the plan could not be made. */
int _tsr_convlike_types(const struct _tsr_conv_desc *d, int deconv, enum _tsr_conv_pass pass,
                        dnnl_data_type_t types[3]) {
  struct convlike_call c = {.d = d, .deconv = deconv, .pass = pass, .types = types};
  return _tsr_kernel_guard(convlike_op(deconv, pass), convlike_types_body, &c) ? 0 : -1;
}

struct reorders_call {
  const struct _tsr_conv_desc *d;
  int deconv, bwd_data, mask;
};

static void convlike_reorders_body(void *arg) {
  struct reorders_call *c = arg;
  for (int pass = TSR_CONV_FWD; pass <= TSR_CONV_BWD_WEIGHTS; pass++) {
    if (pass == TSR_CONV_BWD_DATA && !c->bwd_data) continue;
    /* the taps' 1x1 convolution reorders its input as the caller stores it; its output is theirs */
    int taps = taps_fwd(c->d, c->deconv, pass), deconv = taps ? 0 : c->deconv;
    struct _tsr_conv_desc e = taps ? taps_desc(c->d) : *c->d;
    struct plan *p = plan_create(&e, deconv, pass, taps ? TSR_PRECISION_F32 : _tsr_get_precision());
    if (!p) p = plan_create(&e, deconv, pass, TSR_PRECISION_F32);
    for (int i = 0; i < p->nargs; i++)
      if (p->a[i].reorder && (p->a[i].role == ROLE_SRC || (p->a[i].role == ROLE_DST && !taps)))
        c->mask |= p->a[i].role == ROLE_SRC ? TSR_CONV_REORDERS_SRC : TSR_CONV_REORDERS_DST;
    plan_free(p);
  }
}

int _tsr_convlike_reorders(const struct _tsr_conv_desc *d, int deconv, int bwd_data) {
  struct reorders_call c = {.d = d, .deconv = deconv, .bwd_data = bwd_data};
  return _tsr_kernel_guard(convlike_op(deconv, TSR_CONV_FWD), convlike_reorders_body, &c) ? c.mask : -1;
}

static void convlike_run_body(void *arg) {
  struct convlike_call *c = arg;
  convlike_run(c->d, c->deconv, c->pass, c->in[0], c->in[1], c->in[2], c->out[0], c->out[1]);
}

void _tsr_convlike_run(const struct _tsr_conv_desc *d, int deconv, enum _tsr_conv_pass pass, const float *in0,
                       const float *in1, const float *in2, float *out0, float *out1) {
  struct convlike_call c = {.d = d, .deconv = deconv, .pass = pass, .in = {in0, in1, in2}, .out = {out0, out1}};
  _tsr_kernel_guard(convlike_op(deconv, pass), convlike_run_body, &c);
}

void _tsr_conv2d_fwd_cpu(const struct _tsr_conv_desc *d, const float *x, const float *w, const float *b, float *y) {
  _tsr_convlike_run(d, 0, TSR_CONV_FWD, x, w, b, y, NULL);
}

void _tsr_conv2d_bwd_data_cpu(const struct _tsr_conv_desc *d, const float *dy, const float *w, float *dx) {
  _tsr_convlike_run(d, 0, TSR_CONV_BWD_DATA, dy, w, NULL, dx, NULL);
}

void _tsr_conv2d_bwd_weights_cpu(const struct _tsr_conv_desc *d, const float *x, const float *dy, float *dw,
                                 float *db) {
  _tsr_convlike_run(d, 0, TSR_CONV_BWD_WEIGHTS, x, dy, NULL, dw, db);
}

/* ---- codelets ---- */

/* The CPU function of conv2d's and conv_transpose2d's codelets for one pass. Buffers: fwd x, w, [b],
 * y; bwd_data dy, w, dx; bwd_weights x, dy, dw, [db]. */
void _tsr_convlike_cpu(void *b[], const struct _tsr_conv_desc *d, int deconv, enum _tsr_conv_pass pass) {
  _tsr_worker_enter();
  int hb = d->has_bias;
  if (pass == TSR_CONV_FWD)
    _tsr_convlike_run(d, deconv, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), hb ? TSR_BUF(b, 2) : NULL, TSR_BUF(b, 2 + hb), NULL);
  else if (pass == TSR_CONV_BWD_DATA)
    _tsr_convlike_run(d, deconv, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2), NULL);
  else
    _tsr_convlike_run(d, deconv, pass, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2), hb ? TSR_BUF(b, 3) : NULL);
}
static void conv2d_fwd_cpu(void *b[], void *a) { _tsr_convlike_cpu(b, a, 0, TSR_CONV_FWD); }
static void conv2d_bwd_data_cpu(void *b[], void *a) { _tsr_convlike_cpu(b, a, 0, TSR_CONV_BWD_DATA); }
static void conv2d_bwd_weights_cpu(void *b[], void *a) { _tsr_convlike_cpu(b, a, 0, TSR_CONV_BWD_WEIGHTS); }

#ifdef TSR_CUDA_CODELETS
/* CUDA (conv2d_cuda.cu), shared with conv_transpose2d.c. Buffers: fwd x, w, [b], y; bwd_data dy,
 * w, dx; bwd_weights x, dy, dw, [db] */
void _tsr_convlike_cuda(void *b[], const struct _tsr_conv_desc *d, int deconv, int pass) {
  int hb = d->has_bias, prec = _tsr_get_precision(), w = TSR_CUDA_WORKER;
  cudaStream_t st = TSR_CUDA_STREAM;
  if (pass == TSR_CONV_FWD)
    TSR_CUDA_RUN(_tsr_conv_cuda(w, st, d, deconv, pass, prec, TSR_BUF(b, 0), TSR_BUF(b, 1), hb ? TSR_BUF(b, 2) : NULL,
                                TSR_BUF(b, 2 + hb), NULL));
  else if (pass == TSR_CONV_BWD_DATA)
    TSR_CUDA_RUN(_tsr_conv_cuda(w, st, d, deconv, pass, prec, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2), NULL));
  else
    TSR_CUDA_RUN(_tsr_conv_cuda(w, st, d, deconv, pass, prec, TSR_BUF(b, 0), TSR_BUF(b, 1), NULL, TSR_BUF(b, 2),
                                hb ? TSR_BUF(b, 3) : NULL));
}
static void conv2d_fwd_cpu_cuda(void *b[], void *a) { _tsr_convlike_cuda(b, a, 0, TSR_CONV_FWD); }
static void conv2d_bwd_data_cpu_cuda(void *b[], void *a) { _tsr_convlike_cuda(b, a, 0, TSR_CONV_BWD_DATA); }
static void conv2d_bwd_weights_cpu_cuda(void *b[], void *a) { _tsr_convlike_cuda(b, a, 0, TSR_CONV_BWD_WEIGHTS); }
#endif

static struct starpu_perfmodel fwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_conv2d_fwd"};
static struct starpu_perfmodel bwd_data_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_conv2d_bwd_data"};
static struct starpu_perfmodel bwd_weights_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_conv2d_bwd_weights"};

static struct starpu_codelet cl_conv2d_fwd = {
    .cpu_funcs = {conv2d_fwd_cpu}, TSR_CUDA_FUNCS(conv2d_fwd_cpu_cuda)
    .cpu_funcs_name = {"conv2d_fwd_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &fwd_model,
    .name = "tsr_conv2d_fwd",
    .can_execute = _tsr_conv_can_execute,
};
static struct starpu_codelet cl_conv2d_bwd_data = {
    .cpu_funcs = {conv2d_bwd_data_cpu}, TSR_CUDA_FUNCS(conv2d_bwd_data_cpu_cuda)
    .cpu_funcs_name = {"conv2d_bwd_data_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &bwd_data_model,
    .name = "tsr_conv2d_bwd_data",
    .can_execute = _tsr_conv_can_execute,
};
static struct starpu_codelet cl_conv2d_bwd_weights = {
    .cpu_funcs = {conv2d_bwd_weights_cpu}, TSR_CUDA_FUNCS(conv2d_bwd_weights_cpu_cuda)
    .cpu_funcs_name = {"conv2d_bwd_weights_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &bwd_weights_model,
    .name = "tsr_conv2d_bwd_weights",
    .can_execute = _tsr_conv_can_execute,
};

int _tsr_convlike_bufs(enum _tsr_conv_pass pass, int has_bias, int overwrite, starpu_data_handle_t h0,
                       starpu_data_handle_t h1, starpu_data_handle_t h2, starpu_data_handle_t h3,
                       struct _tsr_buf bufs[4]) {
  int n = 2;
  bufs[0] = (struct _tsr_buf){h0, STARPU_R}, bufs[1] = (struct _tsr_buf){h1, STARPU_R};
  if (pass == TSR_CONV_FWD) {
    if (has_bias) bufs[n++] = (struct _tsr_buf){h2, STARPU_R};
    bufs[n++] = (struct _tsr_buf){h3, STARPU_W};
  } else if (pass == TSR_CONV_BWD_DATA) {
    bufs[n++] = (struct _tsr_buf){h2, STARPU_W};
  } else {
    enum starpu_data_access_mode mode = overwrite ? STARPU_W : _tsr_accum_mode();
    bufs[n++] = (struct _tsr_buf){h2, mode};
    if (has_bias) bufs[n++] = (struct _tsr_buf){h3, mode};
  }
  return n;
}

int _tsr_convlike_insert(struct starpu_codelet *cl, enum _tsr_conv_pass pass, const struct _tsr_conv_desc *d,
                         starpu_data_handle_t h0, starpu_data_handle_t h1, starpu_data_handle_t h2,
                         starpu_data_handle_t h3, const char *name) {
  struct _tsr_buf bufs[4];
  int n = _tsr_convlike_bufs(pass, d->has_bias, d->overwrite, h0, h1, h2, h3, bufs);
  return _tsr_submit(cl, d, sizeof *d, 0, name, n, bufs);
}

int _tsr_insert_conv2d_fwd(const struct _tsr_conv_desc *d, starpu_data_handle_t x, starpu_data_handle_t w,
                           starpu_data_handle_t b, starpu_data_handle_t y, const char *name) {
  return _tsr_convlike_insert(&cl_conv2d_fwd, TSR_CONV_FWD, d, x, w, b, y, name);
}

int _tsr_insert_conv2d_bwd_data(const struct _tsr_conv_desc *d, starpu_data_handle_t dy, starpu_data_handle_t w,
                                starpu_data_handle_t dx, const char *name) {
  return _tsr_convlike_insert(&cl_conv2d_bwd_data, TSR_CONV_BWD_DATA, d, dy, w, dx, NULL, name);
}

int _tsr_insert_conv2d_bwd_weights(const struct _tsr_conv_desc *d, starpu_data_handle_t x, starpu_data_handle_t dy,
                                   starpu_data_handle_t dw, starpu_data_handle_t db, const char *name) {
  return _tsr_convlike_insert(&cl_conv2d_bwd_weights, TSR_CONV_BWD_WEIGHTS, d, x, dy, dw, db, name);
}

/* Activations with oneDNN eltwise primitives over a flat view of the slice: the table of
 * activations (found by name; the layer kind of the same name runs it), the raw kernels, their
 * codelets and insert functions. tanh and sigmoid take their derivative from the output y (no exp
 * to recompute); relu and leaky_relu from the input x, which stays right for any slope. tanh takes
 * an output scale s (y = s tanh x, CosmoFlow's head): oneDNN's tanh then a multiply forward, and
 * dx = dy s (1 - (y/s)^2) backward.
 * Primitives and memory objects are built once per (thread, descriptor). The codelets' CUDA
 * functions run eltwise_cuda.cu's launcher, which finds the activation by the same name. */
#include <string.h>

#include "codelets.h"
#include "cuda_util.h"
#include "kernel_util.h"

enum { TAG_ACT_FWD = 0x41434657 /* "ACFW" */, TAG_ACT_BWD = 0x41434257 /* "ACBW" */ };

/* A cached primitive and the memory objects of its arguments, in the order the kernels pass
 * pointers: forward (src, dst); backward (src or dst, diff_dst, diff_src). */
struct act_prim {
  dnnl_primitive_t prim;
  int nargs;
  int arg[3];
  dnnl_memory_t mem[3];
};

static void act_prim_destroy(void *p) {
  struct act_prim *ap = p;
  dnnl_primitive_destroy(ap->prim);
  for (int i = 0; i < ap->nargs; i++) dnnl_memory_destroy(ap->mem[i]);
  free(ap);
}

/* The activations, found by name. oneDNN's relu takes the negative slope as alpha, so leaky_relu
 * is relu with alpha; the others ignore alpha. */
static const struct act_op {
  const char *name;
  dnnl_alg_kind_t alg;
  int uses_dst;  /* the derivative is taken from the output y (else from the input x) */
  int has_alpha; /* alpha is a parameter (else 0 in the primitive and its cache key) */
  int has_scale; /* the output scale is a parameter (else 1) */
} act_ops[] = {
    {"relu", dnnl_eltwise_relu, 0, 0, 0},
    {"leaky_relu", dnnl_eltwise_relu, 0, 1, 0},
    {"tanh", dnnl_eltwise_tanh_use_dst_for_bwd, 1, 0, 1},
    {"sigmoid", dnnl_eltwise_logistic_use_dst_for_bwd, 1, 0, 0},
    {"gelu", dnnl_eltwise_gelu_erf, 0, 0, 0}, /* exact: x Phi(x), PyTorch's nn.GELU() */
};
#define NACT ((int)(sizeof act_ops / sizeof act_ops[0]))

int _tsr_act_count(void) { return NACT; }

int _tsr_act_find(const char *name) {
  for (int i = 0; name && i < NACT; i++)
    if (strcmp(act_ops[i].name, name) == 0) return i;
  return -1;
}

const char *_tsr_act_name(int op) { return op >= 0 && op < NACT ? act_ops[op].name : NULL; }

float _tsr_act_scale(const struct _tsr_act_desc *d) {
  return d->op >= 0 && d->op < NACT && act_ops[d->op].has_scale && d->scale != 0 ? d->scale : 1.0f;
}

/* The key ignores alpha where the activation has none, and the scale (applied after the
 * primitive), so one primitive serves every layer. */
static struct _tsr_act_desc act_key(const struct _tsr_act_desc *d) {
  struct _tsr_act_desc k = *d;
  if (k.op < 0 || k.op >= NACT) _tsr_kernel_fail(__FILE__, __LINE__, "activation index", (int)dnnl_invalid_arguments);
  if (!act_ops[k.op].has_alpha) k.alpha = 0;
  k.scale = 0;
  return k;
}

static dnnl_primitive_desc_t act_fwd_pd(const struct _tsr_act_desc *d, const dnnl_memory_desc_t *md) {
  dnnl_eltwise_desc_t op;
  TSR_DNNL_CHECK(dnnl_eltwise_forward_desc_init(&op, dnnl_forward_training, act_ops[d->op].alg, md, d->alpha, 0.f));
  dnnl_primitive_desc_t pd;
  TSR_DNNL_CHECK(dnnl_primitive_desc_create(&pd, &op, NULL, _tsr_dnnl_engine(), NULL));
  return pd;
}

static struct act_prim *act_get(const struct _tsr_act_desc *desc, int bwd) {
  struct _tsr_act_desc d = act_key(desc);
  int tag = bwd ? TAG_ACT_BWD : TAG_ACT_FWD;
  struct act_prim *ap = _tsr_cache_get(tag, &d, sizeof d);
  if (ap) return ap;
  ap = calloc(1, sizeof *ap);
  if (!ap) _tsr_kernel_fail(__FILE__, __LINE__, "calloc(act_prim)", -1);
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {(dnnl_dim_t)d.len};
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&md, 1, dims, dnnl_f32, dnnl_a));
  dnnl_primitive_desc_t fwd = act_fwd_pd(&d, &md);
  if (!bwd) {
    TSR_DNNL_CHECK(dnnl_primitive_create(&ap->prim, fwd));
    ap->nargs = 2;
    ap->arg[0] = DNNL_ARG_SRC;
    ap->arg[1] = DNNL_ARG_DST;
  } else {
    dnnl_eltwise_desc_t op;
    TSR_DNNL_CHECK(dnnl_eltwise_backward_desc_init(&op, act_ops[d.op].alg, &md, &md, d.alpha, 0.f));
    dnnl_primitive_desc_t pd;
    TSR_DNNL_CHECK(dnnl_primitive_desc_create(&pd, &op, NULL, _tsr_dnnl_engine(), fwd));
    TSR_DNNL_CHECK(dnnl_primitive_create(&ap->prim, pd));
    dnnl_primitive_desc_destroy(pd);
    ap->nargs = 3;
    ap->arg[0] = act_ops[d.op].uses_dst ? DNNL_ARG_DST : DNNL_ARG_SRC;
    ap->arg[1] = DNNL_ARG_DIFF_DST;
    ap->arg[2] = DNNL_ARG_DIFF_SRC;
  }
  for (int i = 0; i < ap->nargs; i++) ap->mem[i] = _tsr_dnnl_mem(&md, NULL);
  dnnl_primitive_desc_destroy(fwd);
  _tsr_cache_put(tag, &d, sizeof d, ap, act_prim_destroy);
  return ap;
}

static void act_run(struct act_prim *ap, const void *const *ptrs) {
  dnnl_exec_arg_t args[3];
  for (int i = 0; i < ap->nargs; i++) {
    TSR_DNNL_CHECK(dnnl_memory_set_data_handle(ap->mem[i], (void *)ptrs[i]));
    args[i] = (dnnl_exec_arg_t){ap->arg[i], ap->mem[i]};
  }
  _tsr_dnnl_run(ap->prim, ap->nargs, args);
}

/* ---- entry points, each under a kernel guard ---- */

struct act_call {
  const struct _tsr_act_desc *d;
  const float *x, *y, *dy;
  float *out;
};

static void act_fwd_body(void *arg) {
  struct act_call *c = arg;
  act_run(act_get(c->d, 0), (const void *[]){c->x, c->out});
  const float s = _tsr_act_scale(c->d);
  if (s != 1.0f)
    for (size_t i = 0; i < c->d->len; i++) c->out[i] *= s;
}

static void act_bwd_body(void *arg) {
  struct act_call *c = arg;
  const float s = _tsr_act_scale(c->d);
  if (s != 1.0f) { /* scaled tanh, from its output */
    for (size_t i = 0; i < c->d->len; i++) {
      const float t = c->y[i] / s;
      c->out[i] = c->dy[i] * s * (1.0f - t * t);
    }
    return;
  }
  struct act_prim *ap = act_get(c->d, 1);
  act_run(ap, (const void *[]){ap->arg[0] == DNNL_ARG_DST ? c->y : c->x, c->dy, c->out});
}

void _tsr_act_fwd_cpu(const struct _tsr_act_desc *d, const float *x, float *y) {
  struct act_call c = {.d = d, .x = x, .out = y};
  _tsr_kernel_guard("act_fwd", act_fwd_body, &c);
}

void _tsr_act_bwd_cpu(const struct _tsr_act_desc *d, const float *x, const float *y, const float *dy, float *dx) {
  struct act_call c = {.d = d, .x = x, .y = y, .dy = dy, .out = dx};
  _tsr_kernel_guard("act_bwd", act_bwd_body, &c);
}

/* Buffers: x, y */
static void act_fwd_func(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  _tsr_act_fwd_cpu(cl_arg, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1));
}

/* Buffers: x, y, dy, dx */
static void act_bwd_func(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  _tsr_act_bwd_cpu(cl_arg, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2), TSR_BUF(buffers, 3));
}

#ifdef TSR_CUDA_CODELETS
/* CUDA (eltwise_cuda.cu): buffers as above */
static void act_fwd_cpu_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_act_cuda(TSR_CUDA_WORKER, TSR_CUDA_STREAM, a, 0, TSR_BUF(b, 0), NULL, NULL, TSR_BUF(b, 1)));
}
static void act_bwd_cpu_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_act_cuda(TSR_CUDA_WORKER, TSR_CUDA_STREAM, a, 1, TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_BUF(b, 3)));
}
#endif

static struct starpu_perfmodel act_fwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_act_fwd"};
static struct starpu_perfmodel act_bwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_act_bwd"};

static struct starpu_codelet cl_act_fwd = {
    .cpu_funcs = {act_fwd_func}, TSR_CUDA_FUNCS(act_fwd_cpu_cuda)
    .cpu_funcs_name = {"act_fwd_func"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &act_fwd_model,
    .name = "tsr_act_fwd",
};

static struct starpu_codelet cl_act_bwd = {
    .cpu_funcs = {act_bwd_func}, TSR_CUDA_FUNCS(act_bwd_cpu_cuda)
    .cpu_funcs_name = {"act_bwd_func"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &act_bwd_model,
    .name = "tsr_act_bwd",
};

int _tsr_insert_act_fwd(const struct _tsr_act_desc *d, starpu_data_handle_t x, starpu_data_handle_t y,
                        const char *name) {
  struct _tsr_buf bufs[] = {{x, STARPU_R}, {y, STARPU_W}};
  return _tsr_submit(&cl_act_fwd, d, sizeof *d, STARPU_DEFAULT_PRIO, name, 2, bufs);
}

int _tsr_insert_act_bwd(const struct _tsr_act_desc *d, starpu_data_handle_t x, starpu_data_handle_t y,
                        starpu_data_handle_t dy, starpu_data_handle_t dx, const char *name) {
  struct _tsr_buf bufs[] = {{x, STARPU_R}, {y, STARPU_R}, {dy, STARPU_R}, {dx, STARPU_W}};
  return _tsr_submit(&cl_act_bwd, d, sizeof *d, STARPU_DEFAULT_PRIO, name, 4, bufs);
}

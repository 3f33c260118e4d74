/* Reorders of activations between plain NCHW and oneDNN's blocked nChw{B}c (and back), each a task
 * of its own: the trainer submits them where a convolution whose kernel takes the blocked layout
 * meets a plain activation (the model's input, an output read by the loss or by a layer that takes
 * only plain data), so the convolution tasks themselves reorder nothing (src/train/layout.c). A
 * blocked destination gets its padding channels written as zeros. CPU only: with CUDA workers the
 * trainer keeps every activation plain. */
#include <string.h>

#include "codelets.h"
#include "kernel_util.h"

#define REORDER_CACHE_TAG 0x72656f72 /* "reor" */

struct reorder_plan {
  dnnl_primitive_t prim;
  dnnl_memory_t from, to;
};

static void reorder_plan_free(void *p) {
  struct reorder_plan *r = p;
  dnnl_primitive_destroy(r->prim);
  dnnl_memory_destroy(r->from);
  dnnl_memory_destroy(r->to);
  free(r);
}

static struct reorder_plan *reorder_plan_get(const struct _tsr_reorder_desc *d) {
  struct reorder_plan *r = _tsr_cache_get(REORDER_CACHE_TAG, d, sizeof *d);
  if (r) return r;
  dnnl_dims_t dims = {d->n, d->c, d->h, d->w};
  dnnl_memory_desc_t from, to;
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&from, 4, dims, dnnl_f32, _tsr_act_tag(d->from_blk)));
  TSR_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&to, 4, dims, dnnl_f32, _tsr_act_tag(d->to_blk)));
  r = calloc(1, sizeof *r);
  if (!r) _tsr_kernel_fail(__FILE__, __LINE__, "calloc(reorder_plan)", -1);
  dnnl_engine_t eng = _tsr_dnnl_engine();
  dnnl_primitive_desc_t pd;
  TSR_DNNL_CHECK(dnnl_reorder_primitive_desc_create(&pd, &from, eng, &to, eng, NULL));
  dnnl_status_t st = dnnl_primitive_create(&r->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  if (st != dnnl_success) free(r);
  TSR_DNNL_CHECK(st);
  r->from = _tsr_dnnl_mem(&from, NULL);
  r->to = _tsr_dnnl_mem(&to, NULL);
  _tsr_cache_put(REORDER_CACHE_TAG, d, sizeof *d, r, reorder_plan_free);
  return r;
}

struct reorder_call {
  const struct _tsr_reorder_desc *d;
  const float *x;
  float *y;
};

static void reorder_body(void *arg) {
  struct reorder_call *c = arg;
  struct reorder_plan *r = reorder_plan_get(c->d);
  TSR_DNNL_CHECK(dnnl_memory_set_data_handle(r->from, (void *)c->x));
  TSR_DNNL_CHECK(dnnl_memory_set_data_handle(r->to, c->y));
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, r->from}, {DNNL_ARG_TO, r->to}};
  _tsr_dnnl_run(r->prim, 2, args);
}

void _tsr_reorder_cpu(const struct _tsr_reorder_desc *d, const float *x, float *y) {
  struct reorder_call c = {d, x, y};
  _tsr_kernel_guard("reorder", reorder_body, &c);
}

static void reorder_cpu(void *b[], void *a) {
  _tsr_worker_enter();
  _tsr_reorder_cpu(a, TSR_BUF(b, 0), TSR_BUF(b, 1));
}

static struct starpu_perfmodel fwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_reorder_fwd"};
static struct starpu_perfmodel bwd_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_reorder_bwd"};

/* Two codelets with one function: activations (forward) and their gradients (backward) are told
 * apart in traces and perf models. */
static struct starpu_codelet cl_reorder_fwd = {
    .cpu_funcs = {reorder_cpu},
    .cpu_funcs_name = {"reorder_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &fwd_model,
    .name = "tsr_reorder_fwd",
};
static struct starpu_codelet cl_reorder_bwd = {
    .cpu_funcs = {reorder_cpu},
    .cpu_funcs_name = {"reorder_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .model = &bwd_model,
    .name = "tsr_reorder_bwd",
};

int _tsr_insert_reorder(const struct _tsr_reorder_desc *d, int grad, starpu_data_handle_t x, starpu_data_handle_t y,
                        const char *name) {
  struct _tsr_buf b[] = {{x, STARPU_R}, {y, STARPU_W}};
  return _tsr_submit(grad ? &cl_reorder_bwd : &cl_reorder_fwd, d, sizeof *d, STARPU_DEFAULT_PRIO, name, 2, b);
}

/* Gradient chunks on the wire in bf16 or fp16 for the ring allreduce: pack (float32 -> half, with the
 * option of rounding the source the same way so that the rank that owns a reduced chunk keeps the
 * value it shares), unpack and unpack-accumulate (the sum itself stays float32). A chunk's first
 * `keep` values travel as float32 bit patterns: the control word must be summed exactly. */
#include <string.h>

#include "codelets.h"
#include "convert.h"

void _tsr_wire_pack_cpu(const float *x, size_t n, size_t keep, int fmt, uint16_t *wire, float *round_back) {
  memcpy(wire, x, keep * sizeof(float));
  uint16_t *h = wire + 2 * keep;
  if (fmt == TSR_WIRE_BF16) _tsr_f32_to_bf16_cpu(x + keep, h, n - keep);
  else _tsr_f32_to_f16_cpu(x + keep, h, n - keep);
  if (!round_back) return;
  if (fmt == TSR_WIRE_BF16) _tsr_bf16_to_f32_cpu(h, round_back + keep, n - keep);
  else _tsr_f16_to_f32_cpu(h, round_back + keep, n - keep);
}

void _tsr_wire_unpack_cpu(float *y, size_t n, size_t keep, int fmt, const uint16_t *wire, int accumulate) {
  const uint16_t *h = wire + 2 * keep;
  if (accumulate) {
    float head[64];
    memcpy(head, wire, keep * sizeof(float));
    for (size_t i = 0; i < keep; i++) y[i] += head[i];
    if (fmt == TSR_WIRE_BF16) _tsr_bf16_accumulate_cpu(y + keep, h, n - keep);
    else _tsr_f16_accumulate_cpu(y + keep, h, n - keep);
    return;
  }
  memcpy(y, wire, keep * sizeof(float));
  if (fmt == TSR_WIRE_BF16) _tsr_bf16_to_f32_cpu(h, y + keep, n - keep);
  else _tsr_f16_to_f32_cpu(h, y + keep, n - keep);
}

struct wire_arg {
  int fmt, flag; /* flag: pack rounds the source in place / unpack accumulates */
  size_t keep;
};

/* buffers: chunk (float32), wire (uint16) */
static void wire_pack_cpu(void *buffers[], void *cl_arg) {
  const struct wire_arg *a = cl_arg;
  float *x = TSR_BUF(buffers, 0);
  _tsr_wire_pack_cpu(x, TSR_NX(buffers, 0), a->keep, a->fmt, (uint16_t *)STARPU_VECTOR_GET_PTR(buffers[1]),
                     a->flag ? x : NULL);
}

static void wire_unpack_cpu(void *buffers[], void *cl_arg) {
  const struct wire_arg *a = cl_arg;
  _tsr_wire_unpack_cpu(TSR_BUF(buffers, 0), TSR_NX(buffers, 0), a->keep, a->fmt,
                       (const uint16_t *)STARPU_VECTOR_GET_PTR(buffers[1]), a->flag);
}

static struct starpu_perfmodel wire_pack_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_wire_pack"};
static struct starpu_perfmodel wire_unpack_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_wire_unpack"};
static struct starpu_codelet cl_wire_pack = {.cpu_funcs = {wire_pack_cpu}, .cpu_funcs_name = {"wire_pack_cpu"},
                                             .nbuffers = STARPU_VARIABLE_NBUFFERS, .name = "tsr_wire_pack",
                                             .model = &wire_pack_model};
static struct starpu_codelet cl_wire_unpack = {.cpu_funcs = {wire_unpack_cpu}, .cpu_funcs_name = {"wire_unpack_cpu"},
                                               .nbuffers = STARPU_VARIABLE_NBUFFERS, .name = "tsr_wire_unpack",
                                               .model = &wire_unpack_model};

int _tsr_insert_wire_pack(starpu_data_handle_t chunk, starpu_data_handle_t wire, int fmt, size_t keep, int round,
                          int prio) {
  struct wire_arg a = {fmt, round, keep};
  struct _tsr_buf b[2] = {{chunk, round ? STARPU_RW : STARPU_R}, {wire, STARPU_W}};
  return _tsr_submit(&cl_wire_pack, &a, sizeof a, prio, "allreduce_pack", 2, b);
}

int _tsr_insert_wire_unpack(starpu_data_handle_t chunk, starpu_data_handle_t wire, int fmt, size_t keep,
                            int accumulate, int prio) {
  struct wire_arg a = {fmt, accumulate, keep};
  struct _tsr_buf b[2] = {{chunk, accumulate ? STARPU_RW : STARPU_W}, {wire, STARPU_R}};
  return _tsr_submit(&cl_wire_unpack, &a, sizeof a, prio, accumulate ? "allreduce_sum" : "allreduce_unpack", 2, b);
}

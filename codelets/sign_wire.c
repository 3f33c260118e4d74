/* Update directions on the wire for the sign reductions (sign_wire.h): 1-bit pack, vote and unpack,
 * p-bit pack and unpack (adding, voting or averaging), and the member-ordered float32 sum that
 * carries the control word exactly. Their CUDA twins are in sign_wire_cuda.cu (bitwise the same). */
#include "codelets.h"
#include "cuda_util.h"
#include "sign_wire.h"

int _tsr_sign_bits(int ranks) {
  int p = 1;
  while ((1 << p) < 2 * ranks + 1) p++;
  return p;
}

/* The bit of direction v, value i: +1 set, -1 clear, 0 against the coin. */
static inline unsigned bit_of(float v, uint64_t i, int64_t step) {
  return v != 0 ? v > 0 : _tsr_sign_coin(i, step) < 0;
}

static const uint32_t bit_k[32] = {
    1u << 0,  1u << 1,  1u << 2,  1u << 3,  1u << 4,  1u << 5,  1u << 6,  1u << 7,  1u << 8,  1u << 9,  1u << 10,
    1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15, 1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21,
    1u << 22, 1u << 23, 1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};

/* Words of 32 values, bit k of word w being value 32 w + k: read and written a byte at a time, least
 * significant first, whatever the host's byte order. */
static inline uint32_t word_at(const uint8_t *b, size_t w) {
  const uint8_t *p = b + 4 * w;
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void put_word(uint8_t *b, size_t w, uint32_t x) {
  for (int j = 0; j < 4; j++) b[4 * w + (size_t)j] = (uint8_t)(x >> 8 * j);
}

/* The bits of 32 directions v (values base.. of the buffer) as pack1 sends them: the masks of the
 * positive values and of the zeros in one vectorised pass (each comparison widened to an all-ones
 * lane, kept where the value's bit is), then coins for the zeros only (rare: a direction is 0 only
 * where b1 m + (1 - b1) g is). */
static inline uint32_t pack_word(const float *v, uint64_t base, int64_t step) {
  uint32_t pos = 0, zero = 0;
  TSR_SIMD(omp simd reduction(| : pos, zero))
  for (int k = 0; k < 32; k++) {
    uint32_t gt = (uint32_t)-(int32_t)(v[k] > 0), eq = (uint32_t)-(int32_t)(v[k] == 0);
    pos |= gt & bit_k[k], zero |= eq & bit_k[k];
  }
  for (; zero; zero &= zero - 1) {
    int k = __builtin_ctz(zero);
    pos |= (uint32_t)(_tsr_sign_coin(base + (uint64_t)k, step) < 0) << k;
  }
  return pos;
}

/* The last n % 32 values one by one, from value `from` (a multiple of 32). */
static void pack_tail(const float *x, size_t from, size_t n, uint64_t base, int64_t step, uint8_t *bits) {
  unsigned byte = 0;
  for (size_t i = from; i < n; i++) {
    byte |= bit_of(x[i], base + i, step) << (i % 8);
    if (i % 8 == 7 || i + 1 == n) bits[i / 8] = (uint8_t)byte, byte = 0;
  }
}

void _tsr_sign_pack1_cpu(const float *x, size_t n, uint64_t base, int64_t step, uint8_t *bits) {
  size_t words = n / 32;
  for (size_t w = 0; w < words; w++) put_word(bits, w, pack_word(x + 32 * w, base + 32 * w, step));
  pack_tail(x, 32 * words, n, base, step, bits);
}

static inline int bit_at(const uint8_t *bits, size_t i) { return (bits[i / 8] >> (i % 8)) & 1; }

/* +1 where word r's bit is set, -1 where clear, in one vectorised pass. */
static inline void unpack_word(uint32_t r, float *v) {
  TSR_SIMD(omp simd)
  for (int k = 0; k < 32; k++) v[k] = r & bit_k[k] ? 1.0f : -1.0f;
}

void _tsr_sign_unpack1_cpu(const uint8_t *bits, size_t n, float *y) {
  size_t words = n / 32;
  for (size_t w = 0; w < words; w++) unpack_word(word_at(bits, w), y + 32 * w);
  for (size_t i = 32 * words; i < n; i++) y[i] = bit_at(bits, i) ? 1.0f : -1.0f;
}

/* 32 values a word: the voters' bits are added position by position in bit-sliced counters (c[j]
 * holds bit j of the 32 counts), the counts compared with half the voters in the same way, and the
 * coins drawn for the ties only. The last n % 32 values one by one. */
void _tsr_sign_vote1_cpu(float *x, size_t n, uint64_t base, int64_t step, const uint8_t *const *in, int nin,
                         uint8_t *out) {
  const int voters = nin + 1, even = voters % 2 == 0;
  const uint32_t half = (uint32_t)voters / 2; /* +1 where the count is above, a tie where equal and even */
  int nb = 1;
  while (nb < 32 && (1u << nb) <= (uint32_t)voters) nb++;
  size_t words = n / 32;
  for (size_t w = 0; w < words; w++) {
    uint32_t c[32] = {0};
    for (int k = 0; k <= nin; k++) {
      uint32_t carry = k == nin ? pack_word(x + 32 * w, base + 32 * w, step) : word_at(in[k], w);
      for (int j = 0; j < nb && carry; j++) {
        uint32_t t = c[j] & carry;
        c[j] ^= carry, carry = t;
      }
    }
    uint32_t above = 0, equal = ~0u;
    for (int j = nb - 1; j >= 0; j--) {
      if (half >> j & 1) {
        equal &= c[j];
      } else {
        above |= equal & c[j];
        equal &= ~c[j];
      }
    }
    for (uint32_t tie = even ? equal : 0; tie; tie &= tie - 1) {
      int k = __builtin_ctz(tie);
      above |= (uint32_t)(_tsr_sign_coin(base + 32 * w + (uint64_t)k, step) > 0) << k;
    }
    unpack_word(above, x + 32 * w);
    put_word(out, w, above);
  }
  for (size_t i = 32 * words; i < n; i++) {
    int set = (int)bit_of(x[i], base + i, step);
    for (int k = 0; k < nin; k++) set += bit_at(in[k], i);
    int d = 2 * set - voters; /* set votes minus clear ones */
    x[i] = d > 0 ? 1.0f : d < 0 ? -1.0f : (float)_tsr_sign_coin(base + i, step);
  }
  pack_tail(x, 32 * words, n, base, step, out);
}

void _tsr_sign_packp_cpu(const float *x, size_t n, int p, int bias, uint8_t *out) {
  uint64_t acc = 0;
  int have = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    acc |= (uint64_t)((int)x[i] + bias) << have;
    for (have += p; have >= 8; have -= 8) out[o++] = (uint8_t)acc, acc >>= 8;
  }
  if (have) out[o] = (uint8_t)acc;
}

static inline float finish(float v, enum _tsr_sign_mode mode, int ranks) {
  return mode == TSR_SIGN_VOTE ? (float)((v > 0) - (v < 0)) : v / (float)ranks;
}

void _tsr_sign_unpackp_cpu(const uint8_t *in, size_t n, int p, int bias, enum _tsr_sign_mode mode, float *y) {
  const uint64_t mask = (1u << p) - 1;
  uint64_t acc = 0;
  int have = 0;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    for (; have < p; have += 8) acc |= (uint64_t)in[o++] << have;
    float v = (float)((int)(acc & mask) - bias);
    acc >>= p, have -= p;
    y[i] = mode == TSR_SIGN_ADD ? y[i] + v : finish(v, mode, bias);
  }
}

void _tsr_sign_finish_cpu(float *x, size_t n, enum _tsr_sign_mode mode, int ranks) {
  for (size_t i = 0; i < n; i++) x[i] = finish(x[i], mode, ranks);
}

void _tsr_sum_ordered_cpu(float *own, size_t n, const float *const *in, int me, int r) {
  for (size_t i = 0; i < n; i++) {
    float s = 0;
    for (int k = 0; k < r; k++) s += k == me ? own[i] : in[k - (k > me)][i];
    own[i] = s;
  }
}

/* ---- tasks ---- */

struct sign_arg {
  uint64_t base; /* 1 bit: the chunk's first value's index in the gradient buffer, and the step */
  int64_t step;
  int p, bias, mode;
  int me, nin; /* member index (ordered sums); packed inputs (votes, ordered sums) */
};

#define BYTES(b, i) ((uint8_t *)STARPU_VECTOR_GET_PTR((b)[i]))

static void pack1_cpu(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  _tsr_sign_pack1_cpu(TSR_BUF(b, 0), TSR_NX(b, 0), a->base, a->step, BYTES(b, 1));
}
static void unpack1_cpu(void *b[], void *arg) { _tsr_sign_unpack1_cpu(BYTES(b, 1), TSR_NX(b, 0), TSR_BUF(b, 0)); }

/* buffers: chunk, out, in... */
static void vote1_cpu(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  const uint8_t *in[a->nin + 1];
  for (int k = 0; k < a->nin; k++) in[k] = BYTES(b, 2 + k);
  _tsr_sign_vote1_cpu(TSR_BUF(b, 0), TSR_NX(b, 0), a->base, a->step, in, a->nin, BYTES(b, 1));
}

static void packp_cpu(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  _tsr_sign_packp_cpu(TSR_BUF(b, 0), TSR_NX(b, 0), a->p, a->bias, BYTES(b, 1));
  if (a->mode != TSR_SIGN_ADD) _tsr_sign_finish_cpu(TSR_BUF(b, 0), TSR_NX(b, 0), a->mode, a->bias);
}

static void unpackp_cpu(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  _tsr_sign_unpackp_cpu(BYTES(b, 1), TSR_NX(b, 0), a->p, a->bias, a->mode, TSR_BUF(b, 0));
}

static void finish_cpu(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  _tsr_sign_finish_cpu(TSR_BUF(b, 0), TSR_NX(b, 0), a->mode, a->bias);
}

/* buffers: own, in... */
static void sum_ordered_cpu(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  const float *in[a->nin + 1];
  for (int k = 0; k < a->nin; k++) in[k] = TSR_BUF(b, 1 + k);
  _tsr_sum_ordered_cpu(TSR_BUF(b, 0), TSR_NX(b, 0), in, a->me, a->nin + 1);
}

#ifdef TSR_CUDA_CODELETS
/* CUDA (sign_wire_cuda.cu): the same buffers, on StarPU's local stream */
static void pack1_cpu_cuda(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  TSR_CUDA_RUN(_tsr_sign_pack1_cuda(TSR_CUDA_STREAM, TSR_BUF(b, 0), TSR_NX(b, 0), a->base, a->step, BYTES(b, 1)));
}
static void unpack1_cpu_cuda(void *b[], void *arg) {
  TSR_CUDA_RUN(_tsr_sign_unpack1_cuda(TSR_CUDA_STREAM, BYTES(b, 1), TSR_NX(b, 0), TSR_BUF(b, 0)));
}
static void vote1_cpu_cuda(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  const uint8_t *in[a->nin + 1];
  for (int k = 0; k < a->nin; k++) in[k] = BYTES(b, 2 + k);
  TSR_CUDA_RUN(_tsr_sign_vote1_cuda(TSR_CUDA_STREAM, TSR_CUDA_WORKER, TSR_BUF(b, 0), TSR_NX(b, 0), a->base, a->step, in,
                                    a->nin, BYTES(b, 1)));
}
static void packp_cpu_cuda(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  TSR_CUDA_RUN(_tsr_sign_packp_cuda(TSR_CUDA_STREAM, TSR_BUF(b, 0), TSR_NX(b, 0), a->p, a->bias, BYTES(b, 1)));
  if (a->mode != TSR_SIGN_ADD)
    TSR_CUDA_RUN(_tsr_sign_finish_cuda(TSR_CUDA_STREAM, TSR_BUF(b, 0), TSR_NX(b, 0), a->mode, a->bias));
}
static void unpackp_cpu_cuda(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  TSR_CUDA_RUN(_tsr_sign_unpackp_cuda(TSR_CUDA_STREAM, BYTES(b, 1), TSR_NX(b, 0), a->p, a->bias, a->mode, TSR_BUF(b, 0)));
}
static void finish_cpu_cuda(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  TSR_CUDA_RUN(_tsr_sign_finish_cuda(TSR_CUDA_STREAM, TSR_BUF(b, 0), TSR_NX(b, 0), a->mode, a->bias));
}
static void sum_ordered_cpu_cuda(void *b[], void *arg) {
  const struct sign_arg *a = arg;
  const float *in[a->nin + 1];
  for (int k = 0; k < a->nin; k++) in[k] = TSR_BUF(b, 1 + k);
  TSR_CUDA_RUN(_tsr_sum_ordered_cuda(TSR_CUDA_STREAM, TSR_CUDA_WORKER, TSR_BUF(b, 0), TSR_NX(b, 0), in, a->me, a->nin + 1));
}
#endif

#define CODELET(fn, sym)                                                                                               \
  static struct starpu_perfmodel fn##_model = {.type = STARPU_HISTORY_BASED, .symbol = sym};                           \
  static struct starpu_codelet cl_##fn = {.cpu_funcs = {fn}, TSR_CUDA_FUNCS(fn##_cuda)                                 \
                                          .cpu_funcs_name = {#fn},                                                     \
                                          .nbuffers = STARPU_VARIABLE_NBUFFERS,                                        \
                                          .name = sym,                                                                 \
                                          .model = &fn##_model}
CODELET(pack1_cpu, "tsr_sign_pack1");
CODELET(unpack1_cpu, "tsr_sign_unpack1");
CODELET(vote1_cpu, "tsr_sign_vote1");
CODELET(packp_cpu, "tsr_sign_packp");
CODELET(unpackp_cpu, "tsr_sign_unpackp");
CODELET(finish_cpu, "tsr_sign_finish");
CODELET(sum_ordered_cpu, "tsr_sum_ordered");

int _tsr_insert_sign_pack1(starpu_data_handle_t chunk, starpu_data_handle_t bits, uint64_t base, int64_t step,
                           int prio) {
  struct sign_arg a = {.base = base, .step = step};
  struct _tsr_buf b[2] = {{chunk, STARPU_R}, {bits, STARPU_W}};
  return _tsr_submit(&cl_pack1_cpu, &a, sizeof a, prio, "sign_pack", 2, b);
}

int _tsr_insert_sign_unpack1(starpu_data_handle_t chunk, starpu_data_handle_t bits, int prio) {
  struct _tsr_buf b[2] = {{chunk, STARPU_W}, {bits, STARPU_R}};
  return _tsr_submit(&cl_unpack1_cpu, NULL, 0, prio, "sign_unpack", 2, b);
}

int _tsr_insert_sign_vote1(starpu_data_handle_t chunk, starpu_data_handle_t out, uint64_t base, int64_t step, int nin,
                           const starpu_data_handle_t *in, int prio) {
  struct sign_arg a = {.base = base, .step = step, .nin = nin};
  struct _tsr_buf b[2 + nin];
  b[0] = (struct _tsr_buf){chunk, STARPU_RW}, b[1] = (struct _tsr_buf){out, STARPU_W};
  for (int k = 0; k < nin; k++) b[2 + k] = (struct _tsr_buf){in[k], STARPU_R};
  return _tsr_submit(&cl_vote1_cpu, &a, sizeof a, prio, "sign_vote", 2 + nin, b);
}

int _tsr_insert_sign_packp(starpu_data_handle_t chunk, starpu_data_handle_t out, int p, int bias,
                           enum _tsr_sign_mode finish, int prio) {
  struct sign_arg a = {.p = p, .bias = bias, .mode = finish};
  struct _tsr_buf b[2] = {{chunk, finish == TSR_SIGN_ADD ? STARPU_R : STARPU_RW}, {out, STARPU_W}};
  return _tsr_submit(&cl_packp_cpu, &a, sizeof a, prio, "sign_pack", 2, b);
}

int _tsr_insert_sign_unpackp(starpu_data_handle_t chunk, starpu_data_handle_t in, int p, int bias,
                             enum _tsr_sign_mode mode, int prio) {
  struct sign_arg a = {.p = p, .bias = bias, .mode = mode};
  struct _tsr_buf b[2] = {{chunk, mode == TSR_SIGN_ADD ? STARPU_RW : STARPU_W}, {in, STARPU_R}};
  return _tsr_submit(&cl_unpackp_cpu, &a, sizeof a, prio, mode == TSR_SIGN_ADD ? "sign_sum" : "sign_unpack", 2, b);
}

int _tsr_insert_sum_ordered(starpu_data_handle_t own, int nin, const starpu_data_handle_t *in, int me, int prio) {
  struct sign_arg a = {.me = me, .nin = nin};
  struct _tsr_buf b[1 + nin];
  b[0] = (struct _tsr_buf){own, STARPU_RW};
  for (int k = 0; k < nin; k++) b[1 + k] = (struct _tsr_buf){in[k], STARPU_R};
  return _tsr_submit(&cl_sum_ordered_cpu, &a, sizeof a, prio, "control_word_sum", 1 + nin, b);
}

int _tsr_insert_sign_finish(starpu_data_handle_t x, enum _tsr_sign_mode mode, int ranks, const char *name) {
  struct sign_arg a = {.bias = ranks, .mode = mode};
  struct _tsr_buf b[1] = {{x, STARPU_RW}};
  return _tsr_submit(&cl_finish_cpu, &a, sizeof a, STARPU_DEFAULT_PRIO, name, 1, b);
}

/* Update directions on the wire for the sign reductions of Lion Cub (src/comm/sign.c): 1-bit signs
 * (a set bit is +1; one bit cannot carry 0, so a direction 0 travels as the opposite of the value's
 * coin, _tsr_sign_coin) and p-bit integers in
 * offset binary (value + bias, bias = the number of ranks, so the sums of up to that many directions
 * in {-1, 0, 1} fit in p = ceil(log2(2 bias + 1)) bits). Bits are packed least significant first into
 * bytes, value i at bit i*p of the stream: ceil(n p / 8) bytes. Raw kernels on plain pointers, their
 * CUDA twins (sign_wire_cuda.cu, which give the same bytes and floats bit for bit, so ranks may mix
 * CPU and CUDA workers), and their tasks. */
#ifndef TSR_CODELETS_SIGN_WIRE_H
#define TSR_CODELETS_SIGN_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>

#ifdef __CUDACC__ /* the coin is shared with the CUDA kernels */
#define TSR_HOST_DEVICE __host__ __device__
#else
#define TSR_HOST_DEVICE
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* What a p-bit unpack (or a pack that finishes its source) leaves in the float32 chunk. */
enum _tsr_sign_mode {
  TSR_SIGN_ADD,  /* y += v: partial sums of the ring */
  TSR_SIGN_VOTE, /* y = sign(v): majority vote, 0 on a tie */
  TSR_SIGN_MEAN  /* y = v / ranks: the average of the directions */
};

static inline size_t _tsr_packed_bytes(size_t n, int p) { return (n * (size_t)p + 7) / 8; }
/* Bits for sums of `ranks` directions in {-1, 0, 1}: ceil(log2(2 ranks + 1)). */
int _tsr_sign_bits(int ranks);

/* The 1-bit vote's coin of value i (its index in the gradient buffer, the same on every rank) at a
 * step: +1 or -1 from a 64-bit mix of (i, step), so every rank draws the same coin without a message,
 * and over many values or steps as many +1 as -1. A tie resolves to the coin; a direction 0 votes
 * against it (-coin). With P directions +1, M directions -1 and Z zeros among the voters, the vote is
 * then sign(P - M) whenever P != M and |P - M| >= Z (every vote without zeros, and at 2 ranks a 0
 * against a +-1), and a fair coin otherwise (a true tie, or too many zeros to tell): no side is
 * favoured, unlike a fixed rule (ties and zeros to +1) that moves every such parameter one way. */
TSR_HOST_DEVICE static inline int _tsr_sign_coin(uint64_t i, int64_t step) {
  uint64_t x =
      i * UINT64_C(0x9E3779B97F4A7C15) ^ ((uint64_t)step + UINT64_C(0x632BE59BD9B4E019)) * UINT64_C(0xD1B54A32D192ED03);
  x ^= x >> 30, x *= UINT64_C(0xBF58476D1CE4E5B9); /* splitmix64's finaliser */
  x ^= x >> 27, x *= UINT64_C(0x94D049BB133111EB);
  x ^= x >> 31;
  return x >> 63 ? 1 : -1;
}

/* x[k] is value base + k of the gradient buffer: a set bit for +1, a clear one for -1, and a 0 as
 * -_tsr_sign_coin(base + k, step). */
void _tsr_sign_pack1_cpu(const float *x, size_t n, uint64_t base, int64_t step, uint8_t *bits);
void _tsr_sign_unpack1_cpu(const uint8_t *bits, size_t n, float *y); /* +1 or -1 */
/* The vote of x's own directions (values base.. of the buffer, a 0 voting as pack1 sends it) and
 * nin packed chunks of the others' bits, value by value: +1 when more than half of the nin + 1
 * voters have their bit set, -1 when fewer, the coin on a tie; written to x and packed to out. */
void _tsr_sign_vote1_cpu(float *x, size_t n, uint64_t base, int64_t step, const uint8_t *const *in, int nin,
                         uint8_t *out);
/* x holds integers in [-bias, bias]. */
void _tsr_sign_packp_cpu(const float *x, size_t n, int p, int bias, uint8_t *out);
void _tsr_sign_unpackp_cpu(const uint8_t *in, size_t n, int p, int bias, enum _tsr_sign_mode mode, float *y);
/* x = sign(x) (VOTE) or x / ranks (MEAN) in place. */
void _tsr_sign_finish_cpu(float *x, size_t n, enum _tsr_sign_mode mode, int ranks);
/* own[i] = the sum of the r vectors in member order, own being member `me` and in[] the others in
 * member order: every member adds in the same order, so all get the same float32 sums. */
void _tsr_sum_ordered_cpu(float *own, size_t n, const float *const *in, int me, int r);

/* Tasks (chunks float32, packed buffers vectors of bytes). */
/* base: the chunk's first value's index in the gradient buffer; step: the coin's step. */
int _tsr_insert_sign_pack1(starpu_data_handle_t chunk, starpu_data_handle_t bits, uint64_t base, int64_t step,
                           int prio);
int _tsr_insert_sign_unpack1(starpu_data_handle_t chunk, starpu_data_handle_t bits, int prio);
int _tsr_insert_sign_vote1(starpu_data_handle_t chunk, starpu_data_handle_t out, uint64_t base, int64_t step, int nin,
                           const starpu_data_handle_t *in, int prio);
/* finish: TSR_SIGN_ADD packs only; VOTE or MEAN also finishes the chunk in place after packing it. */
int _tsr_insert_sign_packp(starpu_data_handle_t chunk, starpu_data_handle_t out, int p, int bias,
                           enum _tsr_sign_mode finish, int prio);
int _tsr_insert_sign_unpackp(starpu_data_handle_t chunk, starpu_data_handle_t in, int p, int bias,
                             enum _tsr_sign_mode mode, int prio);
/* x = sign(x) or x / ranks in place (the mean of a float32 sum). */
int _tsr_insert_sign_finish(starpu_data_handle_t x, enum _tsr_sign_mode mode, int ranks, const char *name);
int _tsr_insert_sum_ordered(starpu_data_handle_t own, int nin, const starpu_data_handle_t *in, int me, int prio);

/* CUDA twins of the raw kernels (sign_wire_cuda.cu, compiled with --with-cuda): the same arguments on
 * device pointers, queued on `stream` (a cudaStream_t); `in` is a host array of device pointers,
 * copied into worker `worker`'s scratch. 0, or -1 after reporting the failed call. */
int _tsr_sign_pack1_cuda(void *stream, const float *x, size_t n, uint64_t base, int64_t step, uint8_t *bits);
int _tsr_sign_unpack1_cuda(void *stream, const uint8_t *bits, size_t n, float *y);
int _tsr_sign_vote1_cuda(void *stream, int worker, float *x, size_t n, uint64_t base, int64_t step,
                         const uint8_t *const *in, int nin, uint8_t *out);
int _tsr_sign_packp_cuda(void *stream, const float *x, size_t n, int p, int bias, uint8_t *out);
int _tsr_sign_unpackp_cuda(void *stream, const uint8_t *in, size_t n, int p, int bias, enum _tsr_sign_mode mode,
                           float *y);
int _tsr_sign_finish_cuda(void *stream, float *x, size_t n, enum _tsr_sign_mode mode, int ranks);
int _tsr_sum_ordered_cuda(void *stream, int worker, float *own, size_t n, const float *const *in, int me, int r);
/* The CUDA kernels' per-index code run on the host over every index (tests compare it with the CPU
 * kernels without a GPU); the arguments of the CPU kernels. */
void _tsr_sign_pack1_host(const float *x, size_t n, uint64_t base, int64_t step, uint8_t *bits);
void _tsr_sign_unpack1_host(const uint8_t *bits, size_t n, float *y);
void _tsr_sign_vote1_host(float *x, size_t n, uint64_t base, int64_t step, const uint8_t *const *in, int nin,
                          uint8_t *out);
void _tsr_sign_packp_host(const float *x, size_t n, int p, int bias, uint8_t *out);
void _tsr_sign_unpackp_host(const uint8_t *in, size_t n, int p, int bias, enum _tsr_sign_mode mode, float *y);
void _tsr_sign_finish_host(float *x, size_t n, enum _tsr_sign_mode mode, int ranks);
void _tsr_sum_ordered_host(float *own, size_t n, const float *const *in, int me, int r);

#ifdef __cplusplus
}
#endif
#endif

/* CUDA side of the sign reductions' wire (sign_wire.c): 1-bit pack, vote and unpack, p-bit pack and
 * unpack, the finish and the member-ordered float32 sum. Ranks may mix CPU and CUDA workers, so every
 * launcher gives the CPU kernel's bytes and floats bit for bit: integers and bit operations only,
 * the coin from the header's own _tsr_sign_coin, and float arithmetic rounded one operation at a time
 * (_tsr_add_rn, _tsr_div_rn: never fused or approximated), in the CPU's order.
 * One thread writes each byte of a packed stream, so no two threads share a byte. The per-index code
 * also runs on the host (_tsr_sign_*_host), where tests/gpu/check_gpu compares it with the CPU
 * kernels in every CUDA build, GPU or not. */
#include "cuda_util.h"
#include "sign_wire.h"

/* Per-index code, shared by the kernels and by the host runs that tests compare with the CPU kernels
 * without a GPU (_tsr_sign_*_host). */

/* The bit of direction v, value i, as the CPU's bit_of: +1 set, -1 clear, 0 against the coin. */
__host__ __device__ static inline unsigned bit_of(float v, uint64_t i, int64_t step) {
  return v != 0 ? v > 0 : _tsr_sign_coin(i, step) < 0;
}

__host__ __device__ static inline float finish_one(float v, int mode, int ranks) {
  return mode == TSR_SIGN_VOTE ? (float)((v > 0) - (v < 0)) : _tsr_div_rn(v, (float)ranks);
}

/* Byte j holds values 8 j .. 8 j + 7, least significant first; bits past n stay clear. */
__host__ __device__ static inline void pack1_byte(size_t j, const float *x, size_t n, uint64_t base, int64_t step,
                                                  uint8_t *bits) {
  unsigned byte = 0;
  for (unsigned k = 0; k < 8 && 8 * j + k < n; k++) byte |= bit_of(x[8 * j + k], base + 8 * j + k, step) << k;
  bits[j] = (uint8_t)byte;
}

__host__ __device__ static inline void unpack1_one(size_t i, const uint8_t *bits, float *y) {
  y[i] = (bits[i / 8] >> (i % 8)) & 1 ? 1.0f : -1.0f;
}

/* Byte j of every voter: own bit plus the others' bits, then +1 above half of the voters, -1 below,
 * the coin on a tie (an even number of voters only). */
__host__ __device__ static inline void vote1_byte(size_t j, float *x, size_t n, uint64_t base, int64_t step,
                                                  const uint8_t *const *in, int nin, uint8_t *out) {
  const int voters = nin + 1;
  int set[8];
  for (unsigned k = 0; k < 8; k++) set[k] = 8 * j + k < n ? (int)bit_of(x[8 * j + k], base + 8 * j + k, step) : 0;
  for (int q = 0; q < nin; q++) {
    unsigned b = in[q][j];
    for (unsigned k = 0; k < 8; k++) set[k] += (b >> k) & 1;
  }
  unsigned byte = 0;
  for (unsigned k = 0; k < 8 && 8 * j + k < n; k++) {
    int d = 2 * set[k] - voters; /* set votes minus clear ones */
    unsigned up = d > 0 ? 1u : d < 0 ? 0u : (unsigned)(_tsr_sign_coin(base + 8 * j + k, step) > 0);
    x[8 * j + k] = up ? 1.0f : -1.0f;
    byte |= up << k;
  }
  out[j] = (uint8_t)byte;
}

/* Byte o holds bits 8 o .. 8 o + 7 of the stream, value i at bit i p: the values that overlap it. */
__host__ __device__ static inline void packp_byte(size_t o, const float *x, size_t n, int p, int bias, uint8_t *out) {
  uint64_t lo = 8 * (uint64_t)o, byte = 0;
  for (uint64_t i = lo / (uint64_t)p; i < n && i * (uint64_t)p < lo + 8; i++) {
    uint64_t v = (uint64_t)((int)x[i] + bias), at = i * (uint64_t)p;
    byte |= at >= lo ? v << (at - lo) : v >> (lo - at);
  }
  out[o] = (uint8_t)byte;
}

__host__ __device__ static inline void unpackp_one(size_t i, const uint8_t *in, int p, int bias, int mode, float *y) {
  const uint64_t mask = ((uint64_t)1 << p) - 1;
  uint64_t at = i * (uint64_t)p, first = at / 8, last = (at + (uint64_t)p - 1) / 8, acc = 0;
  for (uint64_t b = first; b <= last; b++) acc |= (uint64_t)in[b] << (8 * (b - first));
  float v = (float)((int)((acc >> (at % 8)) & mask) - bias);
  y[i] = mode == TSR_SIGN_ADD ? _tsr_add_rn(y[i], v) : finish_one(v, mode, bias);
}

/* own = the sum of the r vectors in member order, from 0 (as the CPU's s = 0; s += ...). */
__host__ __device__ static inline void sum_ordered_one(size_t i, float *own, const float *const *in, int me, int r) {
  float s = 0;
  for (int k = 0; k < r; k++) s = _tsr_add_rn(s, k == me ? own[i] : in[k - (k > me)][i]);
  own[i] = s;
}

__global__ static void pack1_k(const float *x, size_t n, uint64_t base, int64_t step, uint8_t *bits, size_t nbytes) {
  TSR_GRID_LOOP(j, nbytes) pack1_byte(j, x, n, base, step, bits);
}
__global__ static void unpack1_k(const uint8_t *bits, size_t n, float *y) { TSR_GRID_LOOP(i, n) unpack1_one(i, bits, y); }
__global__ static void vote1_k(float *x, size_t n, uint64_t base, int64_t step, const uint8_t *const *in, int nin,
                               uint8_t *out, size_t nbytes) {
  TSR_GRID_LOOP(j, nbytes) vote1_byte(j, x, n, base, step, in, nin, out);
}
__global__ static void packp_k(const float *x, size_t n, int p, int bias, uint8_t *out, size_t nbytes) {
  TSR_GRID_LOOP(o, nbytes) packp_byte(o, x, n, p, bias, out);
}
__global__ static void unpackp_k(const uint8_t *in, size_t n, int p, int bias, int mode, float *y) {
  TSR_GRID_LOOP(i, n) unpackp_one(i, in, p, bias, mode, y);
}
__global__ static void finish_k(float *x, size_t n, int mode, int ranks) {
  TSR_GRID_LOOP(i, n) x[i] = finish_one(x[i], mode, ranks);
}
__global__ static void sum_ordered_k(float *own, size_t n, const float *const *in, int me, int r) {
  TSR_GRID_LOOP(i, n) sum_ordered_one(i, own, in, me, r);
}

/* ---- the per-index code run on the host, index by index (tests, without a GPU) ---- */
extern "C" void _tsr_sign_pack1_host(const float *x, size_t n, uint64_t base, int64_t step, uint8_t *bits) {
  for (size_t j = 0; j < _tsr_packed_bytes(n, 1); j++) pack1_byte(j, x, n, base, step, bits);
}
extern "C" void _tsr_sign_unpack1_host(const uint8_t *bits, size_t n, float *y) {
  for (size_t i = 0; i < n; i++) unpack1_one(i, bits, y);
}
extern "C" void _tsr_sign_vote1_host(float *x, size_t n, uint64_t base, int64_t step, const uint8_t *const *in,
                                     int nin, uint8_t *out) {
  for (size_t j = 0; j < _tsr_packed_bytes(n, 1); j++) vote1_byte(j, x, n, base, step, in, nin, out);
}
extern "C" void _tsr_sign_packp_host(const float *x, size_t n, int p, int bias, uint8_t *out) {
  for (size_t o = 0; o < _tsr_packed_bytes(n, p); o++) packp_byte(o, x, n, p, bias, out);
}
extern "C" void _tsr_sign_unpackp_host(const uint8_t *in, size_t n, int p, int bias, enum _tsr_sign_mode mode,
                                       float *y) {
  for (size_t i = 0; i < n; i++) unpackp_one(i, in, p, bias, (int)mode, y);
}
extern "C" void _tsr_sign_finish_host(float *x, size_t n, enum _tsr_sign_mode mode, int ranks) {
  for (size_t i = 0; i < n; i++) x[i] = finish_one(x[i], (int)mode, ranks);
}
extern "C" void _tsr_sum_ordered_host(float *own, size_t n, const float *const *in, int me, int r) {
  for (size_t i = 0; i < n; i++) sum_ordered_one(i, own, in, me, r);
}

/* The host array of `k` device pointers, copied into the worker's scratch on the stream (from
 * pageable memory: staged before cudaMemcpyAsync returns, so the caller's array may go). */
static const void *const *device_ptrs(int worker, cudaStream_t s, const void *const *host, int k) {
  size_t bytes = (size_t)(k > 0 ? k : 1) * sizeof(void *);
  void *d = _tsr_cuda_scratch(worker, bytes, s);
  if (!d) return NULL;
  cudaError_t e = k > 0 ? cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, s) : cudaSuccess;
  if (e != cudaSuccess) {
    _tsr_cuda_report("cudaMemcpyAsync (the sign kernels' input pointers) failed: %s", cudaGetErrorString(e));
    return NULL;
  }
  return (const void *const *)d;
}

#define STREAM ((cudaStream_t)stream)

extern "C" int _tsr_sign_pack1_cuda(void *stream, const float *x, size_t n, uint64_t base, int64_t step,
                                    uint8_t *bits) {
  size_t nb = _tsr_packed_bytes(n, 1);
  if (!nb) return 0;
  pack1_k<<<_tsr_blocks(nb), TSR_THREADS, 0, STREAM>>>(x, n, base, step, bits, nb);
  TSR_CUDA_LAUNCHED("sign_pack1 kernel");
  return 0;
}

extern "C" int _tsr_sign_unpack1_cuda(void *stream, const uint8_t *bits, size_t n, float *y) {
  if (!n) return 0;
  unpack1_k<<<_tsr_blocks(n), TSR_THREADS, 0, STREAM>>>(bits, n, y);
  TSR_CUDA_LAUNCHED("sign_unpack1 kernel");
  return 0;
}

extern "C" int _tsr_sign_vote1_cuda(void *stream, int worker, float *x, size_t n, uint64_t base, int64_t step,
                                    const uint8_t *const *in, int nin, uint8_t *out) {
  size_t nb = _tsr_packed_bytes(n, 1);
  if (!nb) return 0;
  const void *const *din = device_ptrs(worker, STREAM, (const void *const *)in, nin);
  if (!din) return -1;
  vote1_k<<<_tsr_blocks(nb), TSR_THREADS, 0, STREAM>>>(x, n, base, step, (const uint8_t *const *)din, nin, out, nb);
  TSR_CUDA_LAUNCHED("sign_vote1 kernel");
  return 0;
}

extern "C" int _tsr_sign_packp_cuda(void *stream, const float *x, size_t n, int p, int bias, uint8_t *out) {
  size_t nb = _tsr_packed_bytes(n, p);
  if (!nb) return 0;
  packp_k<<<_tsr_blocks(nb), TSR_THREADS, 0, STREAM>>>(x, n, p, bias, out, nb);
  TSR_CUDA_LAUNCHED("sign_packp kernel");
  return 0;
}

extern "C" int _tsr_sign_unpackp_cuda(void *stream, const uint8_t *in, size_t n, int p, int bias,
                                      enum _tsr_sign_mode mode, float *y) {
  if (!n) return 0;
  unpackp_k<<<_tsr_blocks(n), TSR_THREADS, 0, STREAM>>>(in, n, p, bias, (int)mode, y);
  TSR_CUDA_LAUNCHED("sign_unpackp kernel");
  return 0;
}

extern "C" int _tsr_sign_finish_cuda(void *stream, float *x, size_t n, enum _tsr_sign_mode mode, int ranks) {
  if (!n) return 0;
  finish_k<<<_tsr_blocks(n), TSR_THREADS, 0, STREAM>>>(x, n, (int)mode, ranks);
  TSR_CUDA_LAUNCHED("sign_finish kernel");
  return 0;
}

extern "C" int _tsr_sum_ordered_cuda(void *stream, int worker, float *own, size_t n, const float *const *in, int me,
                                     int r) {
  if (!n) return 0;
  const void *const *din = device_ptrs(worker, STREAM, (const void *const *)in, r - 1);
  if (!din) return -1;
  sum_ordered_k<<<_tsr_blocks(n), TSR_THREADS, 0, STREAM>>>(own, n, (const float *const *)din, me, r);
  TSR_CUDA_LAUNCHED("sum_ordered kernel");
  return 0;
}

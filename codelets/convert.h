/* Reduced-precision storage formats: float32 <-> bf16 and float32 <-> IEEE fp16 (binary16), both
 * rounding to nearest even with NaN kept NaN and overflow to infinity, on CPUs (convert.c) and on
 * GPUs (convert_cuda.cu, launchers queued on a stream). Used for half-size gradient reductions
 * (wire.c) and by the loss scaler's finiteness check. Values are raw uint16_t bit patterns. */
#ifndef TSR_CONVERT_H
#define TSR_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The bf16 conversions inline, for kernels' loops (vectorisable, branch-free: a select); the
 * functions below and batch normalisation's rows (batchnorm_rows.c) use them. */
static inline uint16_t _tsr_bf16_round(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t nan = (x >> 16) | 0x40;            /* quiet NaN */
  uint32_t r = x + 0x7fffu + ((x >> 16) & 1); /* ties to even; the carry may reach infinity, as it should */
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : r >> 16);
}

static inline float _tsr_bf16_widen(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

uint16_t _tsr_f32_to_bf16(float f);
float _tsr_bf16_to_f32(uint16_t h);
uint16_t _tsr_f32_to_f16(float f);
float _tsr_f16_to_f32(uint16_t h);

void _tsr_f32_to_bf16_cpu(const float *x, uint16_t *y, size_t n);
void _tsr_bf16_to_f32_cpu(const uint16_t *x, float *y, size_t n);
void _tsr_f32_to_f16_cpu(const float *x, uint16_t *y, size_t n);
void _tsr_f16_to_f32_cpu(const uint16_t *x, float *y, size_t n);
/* y += x, x in bf16 or fp16 (summing a received half-size buffer into float32) */
void _tsr_bf16_accumulate_cpu(float *y, const uint16_t *x, size_t n);
void _tsr_f16_accumulate_cpu(float *y, const uint16_t *x, size_t n);
/* y = bf16(y + x), both bf16 (summing gradient contributions stored in bf16) */
void _tsr_bf16_add_cpu(uint16_t *y, const uint16_t *x, size_t n);
/* 1 when every value is finite */
int _tsr_all_finite_cpu(const float *x, size_t n);

/* Half-size wire format of a chunk of n floats (wire.c): its first `keep` values as float32 bit
 * patterns (2 uint16 each), then n - keep halves; n + keep uint16 in all. */
enum { TSR_WIRE_BF16 = 1, TSR_WIRE_FP16 = 2 }; /* = TSR_REDUCE_BF16, TSR_REDUCE_FP16 */
/* round_back (may be x): also writes back the values the wire carries (float32 of the halves) */
void _tsr_wire_pack_cpu(const float *x, size_t n, size_t keep, int fmt, uint16_t *wire, float *round_back);
void _tsr_wire_unpack_cpu(float *y, size_t n, size_t keep, int fmt, const uint16_t *wire, int accumulate);
#ifdef STARPU_MAJOR_VERSION
/* Tasks: pack chunk (R, or RW with round) into wire (W); unpack wire (R) into chunk (W, or RW when
 * accumulating: chunk += wire). keep <= 16. */
int _tsr_insert_wire_pack(starpu_data_handle_t chunk, starpu_data_handle_t wire, int fmt, size_t keep, int round,
                          int prio);
int _tsr_insert_wire_unpack(starpu_data_handle_t chunk, starpu_data_handle_t wire, int fmt, size_t keep,
                            int accumulate, int prio);
#endif

#ifdef TSR_CUDA_STREAM_T
/* GPU twins (convert_cuda.cu): queued on `stream`; 0, or -1 after printing the failed call.
 * all_finite writes 1 or 0 to *flag_dev (device int), clearing it first when `reset`. */
int _tsr_f32_to_bf16_cuda(const float *x, uint16_t *y, size_t n, TSR_CUDA_STREAM_T stream);
int _tsr_bf16_to_f32_cuda(const uint16_t *x, float *y, size_t n, TSR_CUDA_STREAM_T stream);
int _tsr_f32_to_f16_cuda(const float *x, uint16_t *y, size_t n, TSR_CUDA_STREAM_T stream);
int _tsr_f16_to_f32_cuda(const uint16_t *x, float *y, size_t n, TSR_CUDA_STREAM_T stream);
int _tsr_all_finite_cuda(const float *x, size_t n, int *flag_dev, int reset, TSR_CUDA_STREAM_T stream);
#endif

#ifdef __cplusplus
}
#endif
#endif

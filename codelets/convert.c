/* float32 <-> bf16 and float32 <-> fp16 on CPUs in portable C (no _Float16, no F16C): round to
 * nearest even, subnormal halves, overflow to infinity, NaN stays NaN (made quiet). The loops are
 * plain streams so that gcc vectorises them; the finiteness check is the loss scaler's. */
#include <math.h>
#include <string.h>

#include "convert.h"

static inline uint32_t bits_of(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static inline float float_of(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static inline uint16_t to_bf16(float f) { return _tsr_bf16_round(f); }

static inline float from_bf16(uint16_t h) { return _tsr_bf16_widen(h); }

uint16_t _tsr_f32_to_bf16(float f) { return to_bf16(f); }

float _tsr_bf16_to_f32(uint16_t h) { return from_bf16(h); }

uint16_t _tsr_f32_to_f16(float f) {
  uint32_t x = bits_of(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* quiet NaN */
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (halfway above 65504): inf */
  if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal half */
    /* units of 2^-24: the scaling is exact, the rounding to integer is the only one (ties even) */
    uint32_t m = (uint32_t)lrintf(float_of(ax) * 16777216.0f);
    return (uint16_t)(sign | m); /* m = 0x400 is the smallest normal: the encoding carries over */
  }
  uint32_t r = ax - 0x38000000u; /* exponent bias 127 -> 15 */
  r += 0x0fffu + ((r >> 13) & 1);
  return (uint16_t)(sign | (r >> 13));
}

float _tsr_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
  }
  if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
  return float_of(sign | ((e + 112) << 23) | (m << 13));
}

void _tsr_f32_to_bf16_cpu(const float *restrict x, uint16_t *restrict y, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) y[i] = to_bf16(x[i]);
}

void _tsr_bf16_to_f32_cpu(const uint16_t *restrict x, float *restrict y, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) y[i] = from_bf16(x[i]);
}

void _tsr_f32_to_f16_cpu(const float *restrict x, uint16_t *restrict y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = _tsr_f32_to_f16(x[i]);
}

void _tsr_f16_to_f32_cpu(const uint16_t *restrict x, float *restrict y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = _tsr_f16_to_f32(x[i]);
}

void _tsr_bf16_accumulate_cpu(float *restrict y, const uint16_t *restrict x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] += from_bf16(x[i]);
}

void _tsr_bf16_add_cpu(uint16_t *restrict y, const uint16_t *restrict x, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) y[i] = _tsr_bf16_round(_tsr_bf16_widen(y[i]) + _tsr_bf16_widen(x[i]));
}

void _tsr_f16_accumulate_cpu(float *restrict y, const uint16_t *restrict x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] += _tsr_f16_to_f32(x[i]);
}

int _tsr_all_finite_cpu(const float *x, size_t n) {
  /* exponent bits all ones = inf or NaN; an OR-free count keeps the loop vectorisable */
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += (bits_of(x[i]) & 0x7f800000u) == 0x7f800000u;
  return bad == 0;
}

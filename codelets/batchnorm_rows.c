/* Batch normalisation's inner loops over rows of 16 lanes (batchnorm_rows.h), twice: portable C
 * whose lane loops gcc may vectorise for any target, and AVX-512F intrinsics chosen at run time.
 * Both do the same operations in the same order on each lane, so they agree bit for bit:
 *  - no fused multiply-add where it would round differently (contraction is off in this file; the
 *    sums of squares and of g (x - m) take one, their products being exact in double);
 *  - bf16 loads (x, dy, dx added into) widen exactly, bf16 stores (y, dx) round to nearest even with NaN kept quiet, the integer
 *    formula of convert.c (AVX512-BF16's instruction flushes subnormals, so it is not used);
 *  - a row's last n mod 16 values go through the same full-width loop on a zero-padded copy, whose
 *    padding lanes add +0 to the sums and are not written back;
 *  - the backward's relu mask recomputes the forward's value v from x with the forward's operations
 *    and coefficients (so the same bits) rather than reading y: one stream fewer through memory in
 *    both backward loops. y > 0 exactly when v > 0, or, where y is stored in bf16, when v exceeds
 *    BF16_ZERO_MAX, the largest float32 that rounds to bf16 +0 (nearest even: bits up to 0x8000, so
 *    2^-134): one comparison either way, no rounding in the loop. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stdint.h>
#include <string.h>

#include "batchnorm_rows.h"
#include "convert.h"

#ifdef _OPENMP
#define LANE_LOOP _Pragma("omp simd") for (int j = 0; j < TSR_BN_LANES; j++)
#else
#define LANE_LOOP for (int j = 0; j < TSR_BN_LANES; j++)
#endif
#define INLINE static inline __attribute__((always_inline))

enum { L = TSR_BN_LANES };

/* ---- zero-padded tails ---- */

typedef void stats_fn(const void *, int, size_t, double *, double *);
typedef void fwd_fn(const void *, int, void *, int, size_t, const float *, const float *, const float *, int);
typedef void bwd_stats_fn(const void *, int, const void *, int, int, int, size_t, const float *, const float *,
                          const float *, double *, double *);
typedef void bwd_data_fn(const void *, int, const void *, int, int, int, void *, int, size_t, const float *,
                         const float *, const float *, const float *, const float *, const float *);

/* bf: 1 bf16 (and dx's TSR_BN_DX_ADD_BF16), else float32 (dx's TSR_BN_DX_ADD included) */
static size_t esize(int bf) { return bf == 1 || bf == TSR_BN_DX_ADD_BF16 ? sizeof(uint16_t) : sizeof(float); }
static const char *at(const void *p, int bf, size_t k) { return (const char *)p + k * esize(bf); }

/* Values [k, n) of p (n - k < 16) into a zeroed row of 16. */
static void pad(float *row, const void *p, int bf, size_t k, size_t n) {
  memset(row, 0, L * sizeof *row);
  memcpy(row, at(p, bf, k), (n - k) * esize(bf));
}

static void stats_rows(stats_fn *full, const void *x, int bf, size_t n, double *s, double *ss) {
  size_t k = n / L * L;
  if (k) full(x, bf, k, s, ss);
  if (k == n) return;
  float px[L];
  pad(px, x, bf, k, n);
  full(px, bf, L, s, ss);
}

static void fwd_rows(fwd_fn *full, const void *x, int xb, void *y, int yb, size_t n, const float *a, const float *m,
                     const float *b, int relu) {
  size_t k = n / L * L;
  if (k) full(x, xb, y, yb, k, a, m, b, relu);
  if (k == n) return;
  float px[L], py[L];
  pad(px, x, xb, k, n);
  full(px, xb, py, yb, L, a, m, b, relu);
  memcpy((char *)y + k * esize(yb), py, (n - k) * esize(yb));
}

/* (the padding's dy is 0, so its g is 0 whatever the recomputed mask) */
static void bwd_stats_rows(bwd_stats_fn *full, const void *x, int xb, const void *dy, int gb, int relu, int yb,
                           size_t n, const float *m, const float *a, const float *b, double *s, double *sx) {
  size_t k = n / L * L;
  if (k) full(x, xb, dy, gb, relu, yb, k, m, a, b, s, sx);
  if (k == n) return;
  float px[L], pg[L];
  pad(px, x, xb, k, n), pad(pg, dy, gb, k, n);
  full(px, xb, pg, gb, relu, yb, L, m, a, b, s, sx);
}

static void bwd_data_rows(bwd_data_fn *full, const void *x, int xb, const void *dy, int gb, int relu, int yb,
                          void *dx, int db, size_t n, const float *kf, const float *shift, const float *slope,
                          const float *m, const float *a, const float *b) {
  size_t k = n / L * L;
  if (k) full(x, xb, dy, gb, relu, yb, dx, db, k, kf, shift, slope, m, a, b);
  if (k == n) return;
  float px[L], pg[L], pd[L];
  pad(px, x, xb, k, n), pad(pg, dy, gb, k, n);
  if (db >= TSR_BN_DX_ADD) pad(pd, dx, db, k, n); /* the values added into */
  full(px, xb, pg, gb, relu, yb, pd, db, L, kf, shift, slope, m, a, b);
  memcpy((char *)dx + k * esize(db), pd, (n - k) * esize(db));
}

/* ---- portable ---- */

INLINE float load1(const void *p, int bf, size_t k) {
  return bf ? _tsr_bf16_widen(((const uint16_t *)p)[k]) : ((const float *)p)[k];
}

/* bf: 0 float32, 1 bf16, TSR_BN_DX_ADD added into float32, TSR_BN_DX_ADD_BF16 rounded and added
 * into bf16 (the sum rounded) */
INLINE void store1(void *p, int bf, size_t k, float v) {
  uint16_t *h = p;
  if (bf == TSR_BN_DX_ADD) ((float *)p)[k] += v;
  else if (bf == TSR_BN_DX_ADD_BF16) h[k] = _tsr_bf16_round(_tsr_bf16_widen(h[k]) + _tsr_bf16_widen(_tsr_bf16_round(v)));
  else if (bf) ((uint16_t *)p)[k] = _tsr_bf16_round(v);
  else ((float *)p)[k] = v;
}

#define BF16_ZERO_MAX 0x1p-134f

INLINE float relu_p(float v) { return v > 0 ? v : v * 0.f; }
/* g where the forward's y was positive: v = a (x - m) + b as fwd_p computes it, y > 0 exactly when
 * v > 0 (float32 y) or v > BF16_ZERO_MAX (bf16 y) */
INLINE float mask_p(float g, float a, float x, float m, float b, int yb) {
  float v = a * (x - m) + b;
  return v > (yb ? BF16_ZERO_MAX : 0.f) ? g : g * 0.f;
}

INLINE void stats_p(const void *x, int xb, size_t n, double *s, double *ss) {
  double a[L], q[L];
  memcpy(a, s, sizeof a), memcpy(q, ss, sizeof q);
  for (size_t k = 0; k < n; k += L) {
    LANE_LOOP {
      double v = load1(x, xb, k + j);
      a[j] += v;
      q[j] += v * v;
    }
  }
  memcpy(s, a, sizeof a), memcpy(ss, q, sizeof q);
}

INLINE void fwd_p(const void *x, int xb, void *y, int yb, size_t n, const float *a, const float *m, const float *b,
                  int relu) {
  for (size_t k = 0; k < n; k += L) {
    LANE_LOOP {
      float v = a[j] * (load1(x, xb, k + j) - m[j]) + b[j];
      store1(y, yb, k + j, relu ? relu_p(v) : v);
    }
  }
}

INLINE void bwd_stats_p(const void *x, int xb, const void *dy, int gb, int yb, int relu, size_t n, const float *m,
                        const float *a, const float *b, double *s, double *sx) {
  double c[L], q[L];
  memcpy(c, s, sizeof c), memcpy(q, sx, sizeof q);
  for (size_t k = 0; k < n; k += L) {
    LANE_LOOP {
      float xv = load1(x, xb, k + j), g = load1(dy, gb, k + j);
      if (relu) g = mask_p(g, a[j], xv, m[j], b[j], yb);
      float d = xv - m[j];
      c[j] += g;
      q[j] += (double)g * d;
    }
  }
  memcpy(s, c, sizeof c), memcpy(sx, q, sizeof q);
}

INLINE void bwd_data_p(const void *x, int xb, const void *dy, int gb, int yb, int relu, void *dx, int db, size_t n,
                       const float *kf, const float *shift, const float *slope, const float *m, const float *a,
                       const float *b) {
  for (size_t k = 0; k < n; k += L) {
    LANE_LOOP {
      float xv = load1(x, xb, k + j), g = load1(dy, gb, k + j);
      if (relu) g = mask_p(g, a[j], xv, m[j], b[j], yb);
      store1(dx, db, k + j, (kf[j] * g - shift[j]) - slope[j] * (xv - m[j]));
    }
  }
}

/* The storage flags and the relu as constants in each instance (a switch over the cases: 8
 * forward, 16 and 64 backward with dy's and dx's formats), so that each loop has one load and store
 * kind and no branch. */
#define CASE_STATS(f, i)                                                                           \
  case i:                                                                                          \
    f(x, i, n, s, ss);                                                                             \
    break;
#define CASE_FWD(f, i)                                                                             \
  case i:                                                                                          \
    f(x, (i) & 1, y, (i) >> 1 & 1, n, a, m, b, (i) >> 2);                                         \
    break;
#define CASE_BWD_STATS(f, i)                                                                       \
  case i:                                                                                          \
    f(x, (i) & 1, dy, (i) >> 3 & 1, (i) >> 1 & 1, (i) >> 2 & 1, n, m, a, b, s, sx);              \
    break;
#define CASE_BWD_DATA(f, i)                                                                        \
  case i:                                                                                          \
    f(x, (i) & 1, dy, (i) >> 3 & 1, (i) >> 1 & 1, (i) >> 2 & 1, dx, (i) >> 4, n, kf, shift, slope, m, a, b); \
    break;
#define CASES8(C, f) C(f, 0) C(f, 1) C(f, 2) C(f, 3) C(f, 4) C(f, 5) C(f, 6) C(f, 7)
#define CASES16(C, f) CASES8(C, f) C(f, 8) C(f, 9) C(f, 10) C(f, 11) C(f, 12) C(f, 13) C(f, 14) C(f, 15)
#define CASES32(C, f)                                                                              \
  CASES16(C, f) C(f, 16) C(f, 17) C(f, 18) C(f, 19) C(f, 20) C(f, 21) C(f, 22) C(f, 23) C(f, 24) C(f, 25) \
      C(f, 26) C(f, 27) C(f, 28) C(f, 29) C(f, 30) C(f, 31)
#define CASES64(C, f)                                                                              \
  CASES32(C, f) C(f, 32) C(f, 33) C(f, 34) C(f, 35) C(f, 36) C(f, 37) C(f, 38) C(f, 39) C(f, 40) C(f, 41) \
      C(f, 42) C(f, 43) C(f, 44) C(f, 45) C(f, 46) C(f, 47) C(f, 48) C(f, 49) C(f, 50) C(f, 51) C(f, 52)   \
      C(f, 53) C(f, 54) C(f, 55) C(f, 56) C(f, 57) C(f, 58) C(f, 59) C(f, 60) C(f, 61) C(f, 62) C(f, 63)
/* the case index: x's format, y's, and the relu, then backward dy's format and dx's (0, 1,
 * TSR_BN_DX_ADD or TSR_BN_DX_ADD_BF16: 16 cases each); y's format matters backward only with the relu */
static int case_of(int xb, int yb, int relu) { return (xb != 0) | (yb != 0) << 1 | (relu != 0) << 2; }
#define BWD_CASE(gb, db) (case_of(xb, relu && yb, relu) | ((gb) != 0) << 3 | (db) << 4)

/* One set of loops from the kernels stats_<k>, fwd_<k>, bwd_stats_<k> and bwd_data_<k>: for each, the
 * switch over its instances (with the attributes ATTR, those of the kernels' target, so that the
 * kernels inline) and the function of whole rows around it (zero-padded tail), gathered in the
 * table TABLE named LABEL. Written once here and stamped out for each target below. */
#define BN_ROWS_SET(ATTR, k, TABLE, LABEL)                                                          \
  ATTR void stats_##k##_cases(const void *x, int xb, size_t n, double *s, double *ss) {            \
    switch (xb != 0) { CASE_STATS(stats_##k, 0) CASE_STATS(stats_##k, 1) }                        \
  }                                                                                                \
  ATTR void fwd_##k##_cases(const void *x, int xb, void *y, int yb, size_t n, const float *a,      \
                            const float *m, const float *b, int relu) {                            \
    switch (case_of(xb, yb, relu)) { CASES8(CASE_FWD, fwd_##k) }                                   \
  }                                                                                                \
  ATTR void bwd_stats_##k##_cases(const void *x, int xb, const void *dy, int gb, int relu, int yb,  \
                                  size_t n, const float *m, const float *a, const float *b,        \
                                  double *s, double *sx) {                                         \
    switch (BWD_CASE(gb, 0)) { CASES16(CASE_BWD_STATS, bwd_stats_##k) }                            \
  }                                                                                                \
  ATTR void bwd_data_##k##_cases(const void *x, int xb, const void *dy, int gb, int relu, int yb,   \
                                 void *dx, int db, size_t n, const float *kf, const float *shift,  \
                                 const float *slope, const float *m, const float *a,               \
                                 const float *b) {                                                 \
    switch (BWD_CASE(gb, db)) { CASES64(CASE_BWD_DATA, bwd_data_##k) }                             \
  }                                                                                                \
  static void stats_##k##_rows(const void *x, int xb, size_t n, double *s, double *ss) {           \
    stats_rows(stats_##k##_cases, x, xb, n, s, ss);                                                \
  }                                                                                                \
  static void fwd_##k##_rows(const void *x, int xb, void *y, int yb, size_t n, const float *a,     \
                             const float *m, const float *b, int relu) {                           \
    fwd_rows(fwd_##k##_cases, x, xb, y, yb, n, a, m, b, relu);                                     \
  }                                                                                                \
  static void bwd_stats_##k##_rows(const void *x, int xb, const void *dy, int gb, int relu, int yb, \
                                   size_t n, const float *m, const float *a, const float *b,       \
                                   double *s, double *sx) {                                        \
    bwd_stats_rows(bwd_stats_##k##_cases, x, xb, dy, gb, relu, yb, n, m, a, b, s, sx);             \
  }                                                                                                \
  static void bwd_data_##k##_rows(const void *x, int xb, const void *dy, int gb, int relu, int yb,  \
                                  void *dx, int db, size_t n, const float *kf, const float *shift, \
                                  const float *slope, const float *m, const float *a,              \
                                  const float *b) {                                                \
    bwd_data_rows(bwd_data_##k##_cases, x, xb, dy, gb, relu, yb, dx, db, n, kf, shift, slope, m, a, b); \
  }                                                                                                \
  static const struct _tsr_bn_rows TABLE = {LABEL, stats_##k##_rows, fwd_##k##_rows,              \
                                            bwd_stats_##k##_rows, bwd_data_##k##_rows};

BN_ROWS_SET(static, p, portable, "portable")

const struct _tsr_bn_rows *_tsr_bn_rows_portable(void) { return &portable; }

/* ---- AVX-512F ---- */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX static inline __attribute__((target("avx512f"), always_inline))
#define AVX_FN static __attribute__((target("avx512f")))

AVX __m512 load16(const void *p, int bf, size_t k) {
  if (!bf) return _mm512_loadu_ps((const float *)p + k);
  __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + k));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* _tsr_bf16_round on 16 lanes: the bf16 bit patterns in the low halves of the 32-bit lanes */
AVX __m512i round16(__m512 v) {
  __m512i x = _mm512_castps_si512(v), hi = _mm512_srli_epi32(x, 16);
  __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
}

/* those patterns widened back to float32 (exact) */
AVX __m512 widen16(__m512i r) { return _mm512_castsi512_ps(_mm512_slli_epi32(r, 16)); }

/* bf 0: float32; 1: rounded to bf16; TSR_BN_DX_ADD: added into float32; TSR_BN_DX_ADD_BF16: rounded,
 * added into bf16, the sum rounded */
AVX void store16(void *p, int bf, size_t k, __m512 v) {
  if (!bf) {
    _mm512_storeu_ps((float *)p + k, v);
    return;
  }
  if (bf == TSR_BN_DX_ADD) {
    _mm512_storeu_ps((float *)p + k, _mm512_add_ps(_mm512_loadu_ps((const float *)p + k), v));
    return;
  }
  if (bf == TSR_BN_DX_ADD_BF16) v = _mm512_add_ps(load16(p, 1, k), widen16(round16(v)));
  _mm256_storeu_si256((__m256i *)((uint16_t *)p + k), _mm512_cvtepi32_epi16(round16(v)));
}

/* g in the lanes of pos, else g 0 (NaN and infinities stay NaN, as mask_p's g * 0.f) */
AVX __m512 keep16(__m512 g, __mmask16 pos) { return _mm512_mask_mov_ps(_mm512_mul_ps(g, _mm512_setzero_ps()), pos, g); }

/* v > 0 ? v : v 0 */
AVX __m512 relu16(__m512 v) { return keep16(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ)); }

/* lanes 0-7 and 8-15 as doubles */
AVX __m512d lo8(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
AVX __m512d hi8(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

AVX void stats_v(const void *x, int xb, size_t n, double *s, double *ss) {
  __m512d s0 = _mm512_loadu_pd(s), s1 = _mm512_loadu_pd(s + 8);
  __m512d q0 = _mm512_loadu_pd(ss), q1 = _mm512_loadu_pd(ss + 8);
  for (size_t k = 0; k < n; k += L) {
    __m512 v = load16(x, xb, k);
    __m512d a = lo8(v), b = hi8(v);
    s0 = _mm512_add_pd(s0, a), s1 = _mm512_add_pd(s1, b);
    q0 = _mm512_fmadd_pd(a, a, q0), q1 = _mm512_fmadd_pd(b, b, q1); /* x x exact in double */
  }
  _mm512_storeu_pd(s, s0), _mm512_storeu_pd(s + 8, s1);
  _mm512_storeu_pd(ss, q0), _mm512_storeu_pd(ss + 8, q1);
}

AVX void fwd_v(const void *x, int xb, void *y, int yb, size_t n, const float *a, const float *m, const float *b,
               int relu) {
  const __m512 va = _mm512_loadu_ps(a), vm = _mm512_loadu_ps(m), vb = _mm512_loadu_ps(b);
  for (size_t k = 0; k < n; k += L) {
    __m512 v = _mm512_add_ps(_mm512_mul_ps(va, _mm512_sub_ps(load16(x, xb, k), vm)), vb);
    store16(y, yb, k, relu ? relu16(v) : v);
  }
}

/* g where the forward's y was positive: v from d = x - m with fwd_v's operations, compared as
 * mask_p compares it */
AVX __m512 mask16(__m512 g, __m512 d, __m512 va, __m512 vb, int yb) {
  __m512 v = _mm512_add_ps(_mm512_mul_ps(va, d), vb);
  return keep16(g, _mm512_cmp_ps_mask(v, _mm512_set1_ps(yb ? BF16_ZERO_MAX : 0.f), _CMP_GT_OQ));
}

AVX void bwd_stats_v(const void *x, int xb, const void *dy, int gb, int yb, int relu, size_t n, const float *m,
                     const float *a, const float *b, double *s, double *sx) {
  const __m512 vm = _mm512_loadu_ps(m), va = _mm512_loadu_ps(a), vb = _mm512_loadu_ps(b);
  __m512d s0 = _mm512_loadu_pd(s), s1 = _mm512_loadu_pd(s + 8);
  __m512d q0 = _mm512_loadu_pd(sx), q1 = _mm512_loadu_pd(sx + 8);
  for (size_t k = 0; k < n; k += L) {
    __m512 g = load16(dy, gb, k);
    __m512 d = _mm512_sub_ps(load16(x, xb, k), vm);
    if (relu) g = mask16(g, d, va, vb, yb);
    __m512d g0 = lo8(g), g1 = hi8(g);
    s0 = _mm512_add_pd(s0, g0), s1 = _mm512_add_pd(s1, g1);
    q0 = _mm512_fmadd_pd(g0, lo8(d), q0), q1 = _mm512_fmadd_pd(g1, hi8(d), q1); /* g d exact in double */
  }
  _mm512_storeu_pd(s, s0), _mm512_storeu_pd(s + 8, s1);
  _mm512_storeu_pd(sx, q0), _mm512_storeu_pd(sx + 8, q1);
}

AVX void bwd_data_v(const void *x, int xb, const void *dy, int gb, int yb, int relu, void *dx, int db, size_t n,
                    const float *kf, const float *shift, const float *slope, const float *m, const float *a,
                    const float *b) {
  const __m512 vk = _mm512_loadu_ps(kf), vs = _mm512_loadu_ps(shift), vl = _mm512_loadu_ps(slope),
               vm = _mm512_loadu_ps(m), va = _mm512_loadu_ps(a), vb = _mm512_loadu_ps(b);
  for (size_t k = 0; k < n; k += L) {
    __m512 g = load16(dy, gb, k);
    __m512 d = _mm512_sub_ps(load16(x, xb, k), vm);
    if (relu) g = mask16(g, d, va, vb, yb);
    __m512 t = _mm512_sub_ps(_mm512_mul_ps(vk, g), vs);
    store16(dx, db, k, _mm512_sub_ps(t, _mm512_mul_ps(vl, d)));
  }
}

BN_ROWS_SET(AVX_FN, v, avx512, "avx512f")

const struct _tsr_bn_rows *_tsr_bn_rows_avx512(void) {
  return __builtin_cpu_supports("avx512f") ? &avx512 : NULL;
}
#else
const struct _tsr_bn_rows *_tsr_bn_rows_avx512(void) { return NULL; }
#endif

/* ---- the choice ---- */

static const struct _tsr_bn_rows *_Atomic chosen;

void _tsr_bn_rows_use(const struct _tsr_bn_rows *r) { chosen = r; }

const struct _tsr_bn_rows *_tsr_bn_rows(void) {
  const struct _tsr_bn_rows *r = chosen;
  if (r) return r;
  r = _tsr_bn_rows_avx512();
  if (!r) r = &portable;
  chosen = r;
  return r;
}

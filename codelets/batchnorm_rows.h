/* Batch normalisation's inner loops (batchnorm_rows.c): each runs over one row of n contiguous
 * values in 16 lanes (lane j: values j, j + 16, j + 32, ... in order), with per-lane coefficients
 * (the caller repeats a channel's over the lanes that hold it: one channel for a plain row, 16 or
 * 8 for a blocked one) and per-lane sums in double. x, y, dy and dx are each float32 or bf16
 * (uint16_t bit patterns; y and dx rounded to nearest even as convert.c does). Arithmetic float32,
 * sums double, with no fused multiply-add where its rounding would differ, so that the AVX-512
 * loops and the portable ones give bitwise equal results on any row. */
#ifndef TSR_BATCHNORM_ROWS_H
#define TSR_BATCHNORM_ROWS_H

#include <stddef.h>

enum { TSR_BN_LANES = 16 };
/* bwd_data's dx_mode beyond 0 (float32) and 1 (bf16): dx holds other consumers' contributions and
 * the value is added into it, the one addition as the accumulate task's. TSR_BN_DX_ADD: dx float32,
 * dx += v. TSR_BN_DX_ADD_BF16: dx bf16, dx = bf16(dx + bf16(v)) (the value rounded as a contribution
 * written to a buffer of its own would be, then the sum rounded as the accumulate task rounds it). */
enum { TSR_BN_DX_ADD = 2, TSR_BN_DX_ADD_BF16 = 3 };

struct _tsr_bn_rows {
  const char *name; /* "avx512f" or "portable" */
  /* s[j] += x, ss[j] += x x over lane j's values */
  void (*stats)(const void *x, int x_bf16, size_t n, double *s, double *ss);
  /* y = a (x - m) + b, then y > 0 ? y : y 0 when relu */
  void (*fwd)(const void *x, int x_bf16, void *y, int y_bf16, size_t n, const float *a, const float *m,
              const float *b, int relu);
  /* g = dy, or with the relu v > 0 ? dy : dy 0 where v = a (x - m) + b is the forward's value
   * recomputed bit for bit (y_bf16: v rounded to bf16 first, as y was stored); s[j] += g,
   * sx[j] += g (x - m) */
  void (*bwd_stats)(const void *x, int x_bf16, const void *dy, int dy_bf16, int relu, int y_bf16, size_t n,
                    const float *m, const float *a, const float *b, double *s, double *sx);
  /* dx = (kf g - shift) - slope (x - m), g as in bwd_stats; dx_mode 0 float32, 1 bf16, TSR_BN_DX_ADD
   * or TSR_BN_DX_ADD_BF16 added into dx as above */
  void (*bwd_data)(const void *x, int x_bf16, const void *dy, int dy_bf16, int relu, int y_bf16, void *dx,
                   int dx_mode, size_t n, const float *kf, const float *shift, const float *slope, const float *m,
                   const float *a, const float *b);
};

/* The loops in use: the AVX-512 ones where the CPU has AVX-512F, else the portable ones. */
const struct _tsr_bn_rows *_tsr_bn_rows(void);
/* The two sets; NULL for AVX-512 where the build or the CPU has none. */
const struct _tsr_bn_rows *_tsr_bn_rows_portable(void);
const struct _tsr_bn_rows *_tsr_bn_rows_avx512(void);
/* Which set _tsr_bn_rows returns from now on (tests); NULL: back to the CPU's best. */
void _tsr_bn_rows_use(const struct _tsr_bn_rows *r);

#endif

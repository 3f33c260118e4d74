/* A tiny dense network shared by tests of the trainer's update schedules (check_staleness,
 * check_async_slices): inputs NI -> dense NH -> (batch norm) -> tanh -> dense NO, MSE loss; its
 * deterministic samples; and its float64 reference (parameters, loss and gradient of a step's batch). */
#ifndef TSR_TESTS_TINY_MLP_H
#define TSR_TESTS_TINY_MLP_H

#include <math.h>
#include <string.h>
#include <tessera.h>

#include "testutil.h"

#define NI 3 /* inputs */
#define NH 4 /* hidden units (tanh) */
#define NO 2 /* outputs */
#define B 4  /* batch */

static inline void sample(int64_t step, int i, float *x, float *y) {
  int64_t g = step * B + i;
  for (int c = 0; c < NI; c++) x[c] = sinf(0.7f * (float)(g + 1) * (c + 1) + c) * 0.9f;
  for (int j = 0; j < NO; j++) y[j] = 0.5f * x[j] * x[j + 1] - 0.3f * x[(j + 2) % NI];
}

static inline int fill(void *user, int64_t step, int index, float *x, float *y) {
  (void)user;
  sample(step, index, x, y);
  return 0;
}

/* The network; batchnorm: a batch normalisation between the hidden layer and tanh. */
static inline tsr_model *model(int batchnorm) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "tiny_mlp"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", NI, 1, 1), TSR_OK);
  tsr_layer_spec d = tsr_layer_spec_default(TSR_LAYER_DENSE);
  d.out_channels = NH, d.bias = 1;
  const char *in = "in", *a = "a";
  ck_assert_int_eq(tsr_model_add(m, "h", &d, &in, 1), TSR_OK);
  if (batchnorm) {
    ck_assert_int_eq(tsr_model_add_simple(m, "bn", TSR_LAYER_BATCHNORM, "h"), TSR_OK);
    ck_assert_int_eq(tsr_model_add_simple(m, "a", TSR_LAYER_TANH, "bn"), TSR_OK);
  } else {
    ck_assert_int_eq(tsr_model_add_simple(m, "a", TSR_LAYER_TANH, "h"), TSR_OK);
  }
  d.out_channels = NO;
  ck_assert_int_eq(tsr_model_add(m, "out", &d, &a, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_set_output(m, "out", TSR_LOSS_MSE, 1), TSR_OK);
  return m;
}

/* The parameters in float64: W1 [NH, NI], b1, W2 [NO, NH], b2. */
struct params {
  double w1[NH * NI], b1[NH], w2[NO * NH], b2[NO];
};
static const char *const names[4] = {"h.weight", "h.bias", "out.weight", "out.bias"};
static inline double *field(struct params *p, int k) { return k == 0 ? p->w1 : k == 1 ? p->b1 : k == 2 ? p->w2 : p->b2; }
static const int sizes[4] = {NH * NI, NH, NO * NH, NO};

/* MSE of `step`'s batch at p (mean over the batch and outputs) and, when g, its gradient. */
static inline double loss_grad(const struct params *p, int64_t step, struct params *g) {
  if (g) memset(g, 0, sizeof *g);
  double loss = 0;
  for (int i = 0; i < B; i++) {
    float xf[NI], yf[NO];
    sample(step, i, xf, yf);
    double a[NH], da[NH] = {0};
    for (int h = 0; h < NH; h++) {
      double s = p->b1[h];
      for (int c = 0; c < NI; c++) s += p->w1[h * NI + c] * xf[c];
      a[h] = tanh(s);
    }
    for (int o = 0; o < NO; o++) {
      double s = p->b2[o];
      for (int h = 0; h < NH; h++) s += p->w2[o * NH + h] * a[h];
      double e = s - yf[o], dy = 2.0 * e / (NO * B);
      loss += e * e / (NO * B);
      if (!g) continue;
      g->b2[o] += dy;
      for (int h = 0; h < NH; h++) g->w2[o * NH + h] += dy * a[h], da[h] += p->w2[o * NH + h] * dy;
    }
    for (int h = 0; g && h < NH; h++) {
      double dh = da[h] * (1 - a[h] * a[h]);
      g->b1[h] += dh;
      for (int c = 0; c < NI; c++) g->w1[h * NI + c] += dh * xf[c];
    }
  }
  return loss;
}

#endif

/* Activation gradients that share memory (src/train/grad_share.c): the plan of three small graphs
 * worked out by hand (which gradients share a buffer, in which order, and the bytes it saves), and
 * training with shared gradients against every gradient in its own buffer, bitwise, in
 * deterministic mode, on a model with branches, a concatenation, an addition and batch
 * normalisation, with 1 and 2 slices; there the shared run's batch normalisation also adds its
 * contribution to a gradient in its own task (trainer.c's edge_add), the separate run by a task of
 * its own; and the same with --precision bf16 on a DenseNet-like model, where gradients summed from
 * two consumers are stored and summed in bf16. CPU workers only (STARPU_NCUDA=0): with CUDA workers the
 * gradients do not share. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>

#include "kernel_util.h"
#include "testutil.h"
#include "train/trainer.h"

#define S 8 /* image side */

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  for (int c = 0; c < 2; c++)
    for (int p = 0; p < S * S; p++) x[c * S * S + p] = sinf(0.31f * (p + 1) * (index + 1) + c) * 0.7f;
  for (int p = 0; p < S * S; p++) y[p] = 0.4f * x[p] * x[p] - 0.2f * x[S * S + (p + 3) % (S * S)];
  return 0;
}

/* CPU workers only, also where a GPU is: with CUDA workers every gradient keeps its own buffer. */
static tsr_context *start_prec(int deterministic, int precision) {
  setenv("STARPU_NCUDA", "0", 1);
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.ncpus = 2, o.use_mpi = 0, o.deterministic = deterministic, o.verbose = 0, o.precision = precision;
  tsr_context *ctx = NULL;
  ck_assert_msg(tsr_context_create(&ctx, &o, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  return ctx;
}

static tsr_context *start(int deterministic) { return start_prec(deterministic, TSR_PRECISION_F32); }

/* in [2, S, S] -> c1 -> c2 -> c3 -> c4 (the output), convolutions of 2, 3, 2, 1 channels. */
static tsr_model *chain(void) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "chain"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 2, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "in", 2, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c2", "c1", 3, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c3", "c2", 2, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c4", "c3", 1, 3, 1, 1), TSR_OK);
  return m;
}

/* in -> c1 -> c2; cat = concat(c1, c2) -> c3 (the output): c1's gradient has two contributions. */
static tsr_model *concat(void) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "concat"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 2, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "in", 2, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c2", "c1", 2, 3, 1, 1), TSR_OK);
  const char *in[] = {"c1", "c2"};
  tsr_layer_spec cat = tsr_layer_spec_default(TSR_LAYER_CONCAT);
  ck_assert_int_eq(tsr_model_add(m, "cat", &cat, in, 2), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c3", "cat", 1, 3, 1, 1), TSR_OK);
  return m;
}

static tsr_trainer *trainer(tsr_context *ctx, tsr_model *m, int slices, int separate) {
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 4, o.slices = slices, o.seed = 5, o.separate_grads = separate;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, NULL, &o) == TSR_OK, "%s", tsr_last_error());
  return t;
}

/* The bytes a trainer needs, from the refusal at a limit of one byte. */
static unsigned long long needs(tsr_context *ctx, tsr_model *m, int separate) {
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 4, o.slices = 2, o.separate_grads = separate;
  tsr_trainer *t = NULL;
  ck_assert_int_eq(tsr_memory_set_limit(1), TSR_OK);
  ck_assert_int_eq(tsr_trainer_create(&t, ctx, m, NULL, &o), TSR_ERR_NOMEM);
  ck_assert_int_eq(tsr_memory_set_limit(0), TSR_OK);
  const char *at = strstr(tsr_last_error(), " needs ");
  ck_assert_msg(at, "%s", tsr_last_error());
  return strtoull(at + 7, NULL, 10);
}

static unsigned long long floats(unsigned long long n) { return (n * 4 + 63) / 64 * 64; }

/* Backward positions (the loss -1, layer l at 4 - l): c4's gradient lives [-1, 0] (the loss
 * writes it, c4 reads it), c3's [0, 1], c2's [1, 2], c1's [2, 3]. Taken by first write: c4 opens
 * buffer A, c3 overlaps it (0) and opens B, c2 reuses A (free after 0), c1 reuses B. The cycle:
 * c2 follows c4 and c4 (next step) follows c2; the same for c1 and c3. Each shared buffer holds
 * the larger member, so sharing saves, per slice of 2 samples, the smaller member of each pair. */
START_TEST(a_chain_alternates_two_buffers) {
  tsr_context *ctx = start(0);
  tsr_model *m = chain();
  tsr_trainer *t = trainer(ctx, m, 2, 0);
  int c1 = _tsr_model_find(m, "c1"), c2 = _tsr_model_find(m, "c2"), c3 = _tsr_model_find(m, "c3"),
      c4 = _tsr_model_find(m, "c4");
  ck_assert_int_eq(t->gs_n, 2);
  ck_assert_int_eq(t->gs_buf[c4], t->gs_buf[c2]);
  ck_assert_int_eq(t->gs_buf[c3], t->gs_buf[c1]);
  ck_assert_int_ne(t->gs_buf[c4], t->gs_buf[c3]);
  ck_assert_int_eq(t->gs_buf[_tsr_model_find(m, "in")], -1);
  ck_assert_int_eq(t->gs_prev[c2], c4);
  ck_assert_int_eq(t->gs_prev[c4], c2);
  ck_assert_int_eq(t->gs_prev[c1], c3);
  ck_assert_int_eq(t->gs_prev[c3], c1);
  ck_assert_int_eq(t->gs_start[c4], -1);
  ck_assert_int_eq(t->gs_start[c3], 0);
  ck_assert_int_eq(t->gs_start[c2], 1);
  ck_assert_int_eq(t->gs_start[c1], 2);
  size_t e[5];
  for (int l = 1; l < 5; l++) e[l] = t->ls[l].elems; /* per sample, with the layout's padding */
  ck_assert_uint_eq(t->gs_elems[t->gs_buf[c4]], e[c4] > e[c2] ? e[c4] : e[c2]);
  ck_assert_uint_eq(t->gs_elems[t->gs_buf[c3]], e[c3] > e[c1] ? e[c3] : e[c1]);
  /* the members of one buffer: one memory, their own handles */
  ck_assert_ptr_eq(t->ls[c4].gbuf[1], t->ls[c2].gbuf[1]);
  ck_assert_ptr_ne(t->ls[c4].gbuf[1], t->ls[c3].gbuf[1]);
  ck_assert_ptr_ne(t->ls[c4].gbuf[0], t->ls[c4].gbuf[1]); /* slices keep their own */
  ck_assert_ptr_ne(t->ls[c4].g[1], t->ls[c2].g[1]);
  tsr_trainer_destroy(t);
  unsigned long long min42 = e[c4] < e[c2] ? e[c4] : e[c2], min31 = e[c3] < e[c1] ? e[c3] : e[c1];
  unsigned long long saved = 2 * (floats(2 * min42) + floats(2 * min31)); /* 2 slices of 2 samples */
  ck_assert_uint_eq(needs(ctx, m, 1) - needs(ctx, m, 0), saved);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* Positions: c3 4 - 4 = 0, cat 1, c2 2, c1 3. c3's gradient [-1, 0]; cat's [0, 1] (c3 writes it,
 * cat reads it); c2's [1, 2]; c1's from cat's contribution (1, the first in backward order) to its
 * own backward (3); c2's contribution to c1's gradient goes into a buffer of its own, added at 2:
 * [2, 2]. By first write (ties: the higher id first, c2 before c1): c3 opens A, cat B, c2 takes A
 * (free after 0), c1 overlaps both (A until 2, B until 1) and opens C, and the contribution takes B
 * (free after 1; A is read at 2). c1's gradient shares with nobody. */
START_TEST(a_gradient_with_two_contributions_stays_live_until_its_layer) {
  tsr_context *ctx = start(0);
  tsr_model *m = concat();
  tsr_trainer *t = trainer(ctx, m, 1, 0);
  int c1 = _tsr_model_find(m, "c1"), c2 = _tsr_model_find(m, "c2"), cat = _tsr_model_find(m, "cat"),
      c3 = _tsr_model_find(m, "c3");
  ck_assert_int_eq(t->gs_n, 3);
  ck_assert_int_eq(t->gs_nc, 1);
  int contrib = m->n + t->gs_cidx[c2 * TSR_MAX_CONCAT + 0];
  ck_assert_int_eq(contrib, m->n);
  ck_assert_int_eq(t->gs_cidx[cat * TSR_MAX_CONCAT + 0], -1); /* cat writes c1's gradient itself */
  ck_assert_int_eq(t->gs_buf[c3], t->gs_buf[c2]);
  ck_assert_int_eq(t->gs_buf[contrib], t->gs_buf[cat]);
  ck_assert_int_ne(t->gs_buf[cat], t->gs_buf[c3]);
  ck_assert_int_ne(t->gs_buf[c1], t->gs_buf[c3]);
  ck_assert_int_ne(t->gs_buf[c1], t->gs_buf[cat]);
  ck_assert_int_eq(t->gs_start[c1], 1);
  ck_assert_int_eq(t->gs_start[c2], 1);
  ck_assert_int_eq(t->gs_start[cat], 0);
  ck_assert_int_eq(t->gs_start[contrib], 2);
  ck_assert_int_eq(t->gs_prev[c1], -1);
  ck_assert_int_eq(t->gs_prev[contrib], cat);
  ck_assert_int_eq(t->gs_prev[cat], contrib);
  ck_assert_int_eq(t->gs_prev[c2], c3);
  ck_assert_int_eq(t->gs_prev[c3], c2);
  ck_assert_int_eq(_tsr_layer_needs_tmp(t, c1), 0); /* no second buffer of its own */
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* in -> c1 (4 channels) -> bn -> r (relu) -> c2 (the output, 1 channel). Positions: c2 0, r 1, bn 2,
 * c1 3. Where bn runs the relu in its own tasks (layout.c), r's gradient is written by c2 (0) and
 * read by bn (2): [0, 2]; c2's is [-1, 0], c1's [2, 3] (bn writes it). c2 opens A, r opens B, c1
 * takes A, the only free one (B is read until 2), although B, as large as c1's, would fit it
 * better. Without the fusion: r [0, 1], bn [1, 2], c1 [2, 3]: c2 A, r B, bn A (free after 0), c1 B
 * (free after 1). */
START_TEST(a_fused_relu_s_gradient_lives_until_the_layer_that_runs_it) {
  tsr_context *ctx = start(0);
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "fused"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 2, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "in", 4, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "bn", TSR_LAYER_BATCHNORM, "c1"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r", TSR_LAYER_RELU, "bn"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c2", "r", 1, 3, 1, 1), TSR_OK);
  tsr_trainer *t = trainer(ctx, m, 2, 0);
  int c1 = _tsr_model_find(m, "c1"), bn = _tsr_model_find(m, "bn"), r = _tsr_model_find(m, "r"),
      c2 = _tsr_model_find(m, "c2");
  ck_assert_int_eq(t->gs_n, 2);
  ck_assert_int_ne(t->gs_buf[c2], t->gs_buf[r]);
  if (t->ls[bn].relu == r) {
    ck_assert_int_eq(t->gs_buf[bn], -1); /* no gradient of its own */
    ck_assert_int_eq(t->gs_buf[c1], t->gs_buf[c2]);
    ck_assert_int_eq(t->gs_prev[c1], c2);
    ck_assert_int_eq(t->gs_prev[r], -1);
  } else {
    ck_assert_int_eq(t->gs_buf[bn], t->gs_buf[c2]);
    ck_assert_int_eq(t->gs_buf[c1], t->gs_buf[r]);
    ck_assert_int_eq(t->gs_prev[c1], r);
  }
  ck_assert_int_eq(t->gs_start[c1], 2);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}
END_TEST

/* Branches: 'a' feeds a relu, a batch normalisation and the concatenation; the input feeds the
 * concatenation (its scratch takes the input's gradient) and a 1x1 convolution added at the end. */
static tsr_model *branches(void) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, "branches"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 2, S, S), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "a", "in", 4, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "bn", TSR_LAYER_BATCHNORM, "a"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r", TSR_LAYER_RELU, "bn"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "b", "r", 3, 3, 1, 1), TSR_OK);
  const char *cat_in[] = {"a", "b", "in"};
  tsr_layer_spec cat = tsr_layer_spec_default(TSR_LAYER_CONCAT);
  ck_assert_int_eq(tsr_model_add(m, "cat", &cat, cat_in, 3), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c", "cat", 4, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "bn2", TSR_LAYER_BATCHNORM, "c"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r2", TSR_LAYER_RELU, "bn2"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "d", "r2", 1, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "skip", "in", 1, 1, 1, 0), TSR_OK);
  const char *add_in[] = {"d", "skip"};
  tsr_layer_spec add = tsr_layer_spec_default(TSR_LAYER_ADD);
  ck_assert_int_eq(tsr_model_add(m, "sum", &add, add_in, 2), TSR_OK);
  ck_assert_int_eq(tsr_model_set_output(m, "sum", TSR_LOSS_MSE, 1), TSR_OK);
  return m;
}

#define STEPS 6

/* Trains STEPS steps (deterministic); the losses and the parameters into loss[], *params. With
 * bf16, the DenseNet-like model of check_bf16_train with --precision bf16: c0's gradient sums two
 * bf16 contributions (cat's first in backward order, then bn0's added in its own task, or with
 * separate buffers by the accumulate task), and so does r1's (c2's first, then pool's through a
 * contribution buffer and the accumulate task). */
static void run(int slices, int separate, int bf16, double *loss, float **params, size_t *n, int *shared) {
  tsr_context *ctx = start_prec(1, bf16 ? TSR_PRECISION_BF16 : TSR_PRECISION_F32);
  tsr_model *m = bf16 ? tt_dense_model(S, 16, 8, 16, TSR_LAYER_RELU, TSR_LAYER_MAXPOOL2D) : branches();
  tsr_optim_spec adam = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  adam.lr = 1e-2f;
  tsr_trainer_opts o;
  tsr_trainer_opts_default(&o);
  o.batch = 6, o.slices = slices, o.seed = 11, o.separate_grads = separate;
  tsr_trainer *t;
  ck_assert_msg(tsr_trainer_create(&t, ctx, m, &adam, &o) == TSR_OK, "%s", tsr_last_error());
  /* bn adds its contribution to a's gradient (cat's comes first in backward order) in its own task,
   * except with separate buffers, where a task of its own adds it */
  int bn = _tsr_model_find(m, bf16 ? "bn0" : "bn"), cat = _tsr_model_find(m, "cat");
  int a = _tsr_model_find(m, bf16 ? "c0" : "a");
  ck_assert_int_eq(t->edge_add[bn * TSR_MAX_CONCAT], !separate);
  ck_assert_int_eq(t->edge_first[cat * TSR_MAX_CONCAT], 1);
  ck_assert_int_eq(t->ls[a].gbf16, bf16);
  if (bf16) ck_assert_int_eq(t->ls[_tsr_model_find(m, "r1")].gbf16, 1);
  /* gradients that share: fewer buffers than gradients */
  int grads = 0;
  for (int l = 0; l < m->n; l++) grads += t->gs_buf[l] >= 0;
  *shared = grads - t->gs_n;
  for (int i = 0; i < STEPS; i++) ck_assert_int_eq(tsr_trainer_step(t, fill, NULL, NULL), TSR_OK);
  for (int i = 0; i < STEPS; i++) ck_assert_int_eq(tsr_trainer_loss(t, i, &loss[i]), TSR_OK);
  ck_assert_int_eq(tsr_trainer_sync(t), TSR_OK);
  size_t total = 0;
  for (int i = 0; i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape s;
    tsr_trainer_tensor_info(t, i, NULL, &s, NULL);
    total += tsr_shape_numel(&s);
  }
  *params = malloc(total * sizeof(float)), *n = total;
  for (int i = 0, off = 0; i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape s;
    tsr_trainer_tensor_info(t, i, NULL, &s, NULL);
    ck_assert_int_eq(tsr_trainer_tensor_get(t, i, *params + off), TSR_OK);
    off += tsr_shape_numel(&s);
  }
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
}

/* Loop _i: slices 1 or 2 (_i % 2), float32 or (_i >= 2) bf16 gradients summed in bf16. */
START_TEST(shared_gradients_train_bitwise_as_separate_ones) {
  int slices = _i % 2 + 1, bf16 = _i >= 2;
  if (bf16 && _tsr_act_block() != 16) {
    tt_skip("bf16 gradients not checked: this CPU has no AVX-512 (no bf16 kernels in oneDNN 2.6)");
    return;
  }
  double l0[STEPS], l1[STEPS];
  float *p0, *p1;
  size_t n0, n1;
  int sh0, sh1;
  run(slices, 0, bf16, l0, &p0, &n0, &sh0);
  run(slices, 1, bf16, l1, &p1, &n1, &sh1);
  const char *what = bf16 ? "bf16" : "float32";
  ck_assert_msg(sh0 > 0, "%s, %d slices: no gradients share a buffer", what, slices);
  ck_assert_int_eq(sh1, 0);
  ck_assert_uint_eq(n0, n1);
  for (int i = 0; i < STEPS; i++)
    ck_assert_msg(memcmp(&l0[i], &l1[i], sizeof(double)) == 0 && isfinite(l0[i]), "%s, %d slices, step %d: %.17g vs %.17g",
                  what, slices, i, l0[i], l1[i]);
  ck_assert_msg(l0[STEPS - 1] < l0[0], "%s, %d slices: the loss went from %g to %g", what, slices, l0[0], l0[STEPS - 1]);
  ck_assert_msg(memcmp(p0, p1, n0 * sizeof(float)) == 0, "%s, %d slices: the final parameters differ", what, slices);
  free(p0), free(p1);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("grad_share");
  TCase *tc = tcase_create("plan");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, a_chain_alternates_two_buffers);
  tcase_add_test(tc, a_gradient_with_two_contributions_stays_live_until_its_layer);
  tcase_add_test(tc, a_fused_relu_s_gradient_lives_until_the_layer_that_runs_it);
  tcase_add_loop_test(tc, shared_gradients_train_bitwise_as_separate_ones, 0, 4);
  suite_add_tcase(s, tc);
  return s;
}

TT_MAIN(make_suite)

/* The CUDA side of Lion and of Lion Cub's sign reductions against the CPU side.
 * Suite "gpu_sign_host" (every CUDA build, no GPU needed): the per-index code of the sign kernels
 * (codelets/sign_wire_cuda.cu) run on the host against the CPU kernels (codelets/sign_wire.c), bitwise,
 * at lengths that are not multiples of 8, 32 or 64, for 2 to 5 voters and p-bit widths up to 3 bytes
 * per value. Suite "gpu_sign" (a StarPU with CUDA and a GPU; CUDA workers only): the same operations,
 * through the same checks (struct sign_run), as StarPU tasks on the GPU against the CPU kernels,
 * bitwise (ranks may mix CPU and CUDA workers, so the wire must not differ by one bit), and Lion's
 * CUDA kernels (the fused update and the direction and apply halves) against a float64 reference of
 * the PyTorch rule within 1e-6 relative (3 float32 roundings), with sign(0) = 0 exactly, the
 * invariant |w_new - w (1 - lr wd)| in {0, lr}, and the fused update equal bitwise to direction +
 * apply on the GPU (a 1-rank vote); the host suite checks the Lion kernels' per-index code against
 * the same reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "cuda_util.h"
#include "gpu_test.h"
#include "optim/optim.h"
#include "sign_wire.h"

#ifdef TSR_WITH_CUDA

static const size_t lens[] = {1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 257, 1000};
#define NLENS (sizeof lens / sizeof lens[0])

/* Directions in {-1, 0, 1}, a third of each. */
static float *directions(size_t n, uint64_t seed) {
  float *x = gt_rand(n, seed);
  for (size_t i = 0; i < n; i++) x[i] = roundf(1.5f * x[i]);
  return x;
}
/* Integers in [-bias, bias]. */
static float *ints(size_t n, int bias, uint64_t seed) {
  float *x = gt_rand(n, seed);
  for (size_t i = 0; i < n; i++) {
    int v = (int)floorf((x[i] + 1) * 0.5f * (float)(2 * bias + 1)) - bias;
    x[i] = (float)(v > bias ? bias : v);
  }
  return x;
}
/* Two buffers of `bytes` filled with different junk, so a byte one kernel leaves unwritten differs. */
static void junk2(uint8_t **a, uint8_t **b, size_t bytes) {
  *a = malloc(bytes + 1), *b = malloc(bytes + 1);
  memset(*a, 0x5A, bytes + 1), memset(*b, 0xA5, bytes + 1);
}

/* ---- the sign operations against the CPU kernels, on the host or as tasks ---- */

/* One way to run the sign kernels, with the CPU kernels' arguments: their CUDA per-index code on the
 * host, or their tasks on the GPU. */
struct sign_run {
  const char *where;
  int min_members; /* the fewest members of an ordered sum it is run with */
  void (*pack1)(const float *x, size_t n, uint64_t base, int64_t step, uint8_t *bits);
  void (*unpack1)(const uint8_t *bits, size_t n, float *y);
  void (*vote1)(float *x, size_t n, uint64_t base, int64_t step, const uint8_t *const *in, int nin, uint8_t *out);
  /* packs x, then finishes it in place unless mode is TSR_SIGN_ADD (as the pack task does) */
  void (*packp)(float *x, size_t n, int p, int bias, enum _tsr_sign_mode mode, uint8_t *out);
  void (*unpackp)(const uint8_t *in, size_t n, int p, int bias, enum _tsr_sign_mode mode, float *y);
  void (*finish)(float *x, size_t n, enum _tsr_sign_mode mode, int ranks);
  void (*sum_ordered)(float *own, size_t n, const float *const *in, int me, int r);
};

static void packp_cpu(float *x, size_t n, int p, int bias, enum _tsr_sign_mode mode, uint8_t *out) {
  _tsr_sign_packp_cpu(x, n, p, bias, out);
  if (mode != TSR_SIGN_ADD) _tsr_sign_finish_cpu(x, n, mode, bias);
}

static void one_bit_matches_cpu(const struct sign_run *run) {
  char what[96];
  for (size_t l = 0; l < NLENS; l++) {
    size_t n = lens[l], nb = _tsr_packed_bytes(n, 1);
    uint64_t base = ((uint64_t)1 << 40) + 977 * l; /* coins of large indices too */
    float *x = directions(n, 10 + l), *y = malloc(n * 4), *yc = malloc(n * 4);
    uint8_t *b, *bc;
    junk2(&b, &bc, nb);
    run->pack1(x, n, base, 7, b);
    _tsr_sign_pack1_cpu(x, n, base, 7, bc);
    snprintf(what, sizeof what, "%s: 1-bit pack of %zu directions", run->where, n), gt_same(b, bc, nb, what);
    run->unpack1(b, n, y);
    _tsr_sign_unpack1_cpu(bc, n, yc);
    snprintf(what, sizeof what, "%s: 1-bit unpack of %zu values", run->where, n), gt_same(y, yc, n * 4, what);
    for (int nin = 1; nin <= 4; nin++) { /* 2 to 5 voters: ties and zeros against the coin */
      uint8_t *in[4];
      for (int k = 0; k < nin; k++) {
        float *d = directions(n, 100 * l + k + 20);
        in[k] = malloc(nb);
        _tsr_sign_pack1_cpu(d, n, base, 7, in[k]);
        free(d);
      }
      float *v = directions(n, 30 + l), *vc = malloc(n * 4);
      memcpy(vc, v, n * 4);
      uint8_t *o, *oc;
      junk2(&o, &oc, nb);
      run->vote1(v, n, base, 7, (const uint8_t *const *)in, nin, o);
      _tsr_sign_vote1_cpu(vc, n, base, 7, (const uint8_t *const *)in, nin, oc);
      snprintf(what, sizeof what, "%s: 1-bit vote of %d voters on %zu values: bits", run->where, nin + 1, n);
      gt_same(o, oc, nb, what);
      snprintf(what, sizeof what, "%s: 1-bit vote of %d voters on %zu values: directions", run->where, nin + 1, n);
      gt_same(v, vc, n * 4, what);
      for (int k = 0; k < nin; k++) free(in[k]);
      free(v), free(vc), free(o), free(oc);
    }
    free(x), free(y), free(yc), free(b), free(bc);
  }
}

/* Pack (finishing the source in VOTE and MEAN), then unpack in the same mode onto y. */
static void p_bit_matches_cpu(const struct sign_run *run) {
  const int ranks[] = {2, 3, 4, 5, 17, 200}; /* p = 3, 3, 4, 4, 6, 9: values across 2 and 3 bytes */
  const enum _tsr_sign_mode modes[] = {TSR_SIGN_ADD, TSR_SIGN_VOTE, TSR_SIGN_MEAN};
  char what[96];
  for (int r = 0; r < 6; r++)
    for (size_t l = 0; l < NLENS; l++)
      for (int m = 0; m < 3; m++) {
        int p = _tsr_sign_bits(ranks[r]);
        size_t n = lens[l], nb = _tsr_packed_bytes(n, p);
        float *x = ints(n, ranks[r], 40 + l + 13 * r), *xc = malloc(n * 4), *y = gt_rand(n, 50 + l),
              *yc = malloc(n * 4);
        memcpy(xc, x, n * 4), memcpy(yc, y, n * 4);
        uint8_t *b, *bc;
        junk2(&b, &bc, nb);
        run->packp(x, n, p, ranks[r], modes[m], b);
        packp_cpu(xc, n, p, ranks[r], modes[m], bc);
        snprintf(what, sizeof what, "%s: %d-bit pack (mode %d) of %zu sums of %d", run->where, p, m, n, ranks[r]);
        gt_same(b, bc, nb, what);
        gt_same(x, xc, n * 4, what);
        run->unpackp(b, n, p, ranks[r], modes[m], y);
        _tsr_sign_unpackp_cpu(bc, n, p, ranks[r], modes[m], yc);
        snprintf(what, sizeof what, "%s: %d-bit unpack (mode %d) of %zu sums of %d", run->where, p, m, n, ranks[r]);
        gt_same(y, yc, n * 4, what);
        free(x), free(xc), free(y), free(yc), free(b), free(bc);
      }
}

/* The finish alone (momentum averaging: VOTE and MEAN of float32 sums) and the ordered sum. */
static void finish_and_ordered_sum_match_cpu(const struct sign_run *run) {
  const size_t n = 333;
  char what[96];
  for (enum _tsr_sign_mode m = TSR_SIGN_VOTE; m <= TSR_SIGN_MEAN; m++) {
    float *x = gt_rand(n, 400 + m), *xc = malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] *= 3;
    memcpy(xc, x, n * 4);
    run->finish(x, n, m, 3);
    _tsr_sign_finish_cpu(xc, n, m, 3);
    snprintf(what, sizeof what, "%s: finish (mode %d) of %zu float32 sums of 3", run->where, (int)m, n);
    gt_same(x, xc, n * 4, what);
  }
  for (int r = run->min_members; r <= 4; r++)
    for (int me = 0; me < r; me++) {
      float *in[3], *own = gt_rand(n, 60 + r), *ownc = malloc(n * 4);
      for (int k = 0; k < r - 1; k++) in[k] = gt_rand(n, 70 + 5 * r + k);
      if (r > 1) in[0][5] = -own[5]; /* an exact cancellation: +0 (with a second member) */
      memcpy(ownc, own, n * 4);
      run->sum_ordered(own, n, (const float *const *)in, me, r);
      _tsr_sum_ordered_cpu(ownc, n, (const float *const *)in, me, r);
      snprintf(what, sizeof what, "%s: ordered sum of %d members as member %d", run->where, r, me);
      gt_same(own, ownc, n * 4, what);
      for (int k = 0; k < r - 1; k++) free(in[k]);
      free(own), free(ownc);
    }
}

/* ---- host: the kernels' per-index code ---- */

static void packp_host(float *x, size_t n, int p, int bias, enum _tsr_sign_mode mode, uint8_t *out) {
  _tsr_sign_packp_host(x, n, p, bias, out);
  if (mode != TSR_SIGN_ADD) _tsr_sign_finish_host(x, n, mode, bias);
}

static const struct sign_run on_host = {
    .where = "kernel code on the host", .min_members = 1,
    .pack1 = _tsr_sign_pack1_host, .unpack1 = _tsr_sign_unpack1_host, .vote1 = _tsr_sign_vote1_host,
    .packp = packp_host, .unpackp = _tsr_sign_unpackp_host, .finish = _tsr_sign_finish_host,
    .sum_ordered = _tsr_sum_ordered_host,
};

START_TEST(test_one_bit_kernel_code_matches_cpu) { one_bit_matches_cpu(&on_host); }
END_TEST

START_TEST(test_p_bit_kernel_code_matches_cpu) { p_bit_matches_cpu(&on_host); }
END_TEST

START_TEST(test_finish_and_ordered_sum_kernel_code_match_cpu) { finish_and_ordered_sum_match_cpu(&on_host); }
END_TEST

/* Lion's kernels against float64 over 4 steps of the fused update from zero momenta (zero gradients
 * too, so b1 m + (1 - b1) g = 0 exactly and sign(0) = 0 is exercised), and the direction and apply
 * halves on the same inputs. run: the three kernels (host or GPU). bitwise: also require the halves
 * to give the fused update's bits (on the GPU, where the rounding is fixed by the intrinsics; the
 * host compiler may contract the host runs' products and sums into FMAs differently per call site). */
typedef void lion_run_fn(const struct _tsr_optim_args *a, size_t n, float *w, const float *g, float *m, float *w2,
                         float *d, float *m2);
static void lion_against_float64(lion_run_fn *run, int bitwise, const char *where) {
  const size_t n = 1000;
  const double tol = 1e-6; /* relative: a few float32 roundings per value */
  struct _tsr_optim_args a = {.h.kind = TSR_OPTIM_LION, .h.lr = 1e-2f, .h.beta1 = 0.9f, .h.beta2 = 0.99f,
                              .h.weight_decay = 0.1f, .grad_scale = 0.5f, .step = 1};
  float *w = gt_rand(n, 500), *m = calloc(n, 4), *w2 = malloc(n * 4), *m2 = malloc(n * 4), *d = malloc(n * 4);
  float *w_before = malloc(n * 4);
  double *wr = malloc(n * 8), *mr = malloc(n * 8);
  int8_t *sref = malloc(n);
  for (size_t i = 0; i < n; i++) wr[i] = w[i], mr[i] = 0;
  const double lr = a.h.lr, b1 = a.h.beta1, b2 = a.h.beta2, wd = a.h.weight_decay;
  char what[96];
  for (int s = 0; s < 4; s++, a.step++) {
    float *g = gt_rand(n, 510 + s);
    for (size_t i = 0; i < n; i += 7) g[i] = 0;
    /* float64 reference (PyTorch's rule: decay, sign step, momentum) */
    for (size_t i = 0; i < n; i++) {
      double gi = (double)a.grad_scale * g[i], u = b1 * mr[i] + (1 - b1) * gi;
      /* |u| within float32 rounding of its terms: its sign is not the rule's to tell (2) */
      double slack = 1e-6 * (fabs(b1 * mr[i]) + fabs((1 - b1) * gi));
      sref[i] = u == 0 ? 0 : fabs(u) > slack ? (u > 0 ? 1 : -1) : 2;
      mr[i] = b2 * mr[i] + (1 - b2) * gi;
    }
    memcpy(w2, w, n * 4), memcpy(m2, m, n * 4), memcpy(d, g, n * 4), memcpy(w_before, w, n * 4);
    run(&a, n, w, g, m, w2, d, m2);
    for (size_t i = 0; i < n; i++) { /* the reference takes the kernel's sign only where its own is undetermined */
      wr[i] = wr[i] * (1 - lr * wd) - lr * (sref[i] != 2 ? sref[i] : d[i]);
      if (sref[i] != 2)
        ck_assert_msg(d[i] == sref[i], "%s, step %d: direction %zu is %g, float64 sign %d", where, s, i, d[i], sref[i]);
      ck_assert_msg(d[i] == 0 || fabsf(d[i]) == 1, "%s, step %d: direction %zu is %g", where, s, i, d[i]);
      double moved = fabs((double)w[i] - (double)w_before[i] * (1 - lr * wd)), slack = tol * (1 + fabs(w_before[i]));
      ck_assert_msg(moved <= slack || fabs(moved - lr) <= slack, "%s, step %d: |w_new - w (1 - lr wd)| at %zu is %g, not 0 or lr", where, s, i, moved);
    }
    snprintf(what, sizeof what, "%s: Lion step %d weights", where, s);
    tt_assert_close(w, wr, n, tol, tol, what);
    snprintf(what, sizeof what, "%s: Lion step %d momentum", where, s);
    tt_assert_close(m, mr, n, tol, tol, what);
    snprintf(what, sizeof what, "%s: Lion step %d, direction + apply", where, s);
    tt_assert_close(w2, wr, n, tol, tol, what);
    tt_assert_close(m2, mr, n, tol, tol, what);
    if (bitwise) { /* a vote of one: direction + apply is the fused update */
      snprintf(what, sizeof what, "%s: Lion step %d, direction + apply against the fused update", where, s);
      gt_same(w2, w, n * 4, what);
      gt_same(m2, m, n * 4, what);
    }
    free(g);
  }
  free(w), free(m), free(w2), free(m2), free(d), free(w_before), free(wr), free(mr), free(sref);
}

static void lion_on_host(const struct _tsr_optim_args *a, size_t n, float *w, const float *g, float *m, float *w2,
                         float *d, float *m2) {
  _tsr_lion_update_host(a, n, w, g, m);
  _tsr_lion_direction_host(a, n, d, m2);
  _tsr_lion_apply_host(a, n, w2, d);
}

START_TEST(test_lion_kernel_code_matches_float64_reference) { lion_against_float64(lion_on_host, 0, "host"); }
END_TEST

Suite *make_gpu_sign_host_suite(void) {
  Suite *s = suite_create("gpu_sign_host");
  TCase *t = tcase_create("sign_kernel_code");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, test_one_bit_kernel_code_matches_cpu);
  tcase_add_test(t, test_p_bit_kernel_code_matches_cpu);
  tcase_add_test(t, test_finish_and_ordered_sum_kernel_code_match_cpu);
  tcase_add_test(t, test_lion_kernel_code_matches_float64_reference);
  suite_add_tcase(s, t);
  return s;
}
#endif

#if defined(STARPU_USE_CUDA) && defined(TSR_WITH_CUDA)
/* ---- GPU: the codelets as tasks on CUDA workers only ---- */

static void cuda_down(void) { starpu_shutdown(); }

/* The sign tasks, one at a time, on the arguments of the CPU kernels. */
static void pack1_task(const float *x, size_t n, uint64_t base, int64_t step, uint8_t *bits) {
  starpu_data_handle_t hs[2] = {_tsr_register_floats((float *)x, n),
                                gt_register_bytes(bits, _tsr_packed_bytes(n, 1))};
  ck_assert_int_eq(_tsr_insert_sign_pack1(hs[0], hs[1], base, step, STARPU_DEFAULT_PRIO), 0);
  gt_done(hs, 2);
}
static void unpack1_task(const uint8_t *bits, size_t n, float *y) {
  starpu_data_handle_t hs[2] = {_tsr_register_floats(y, n),
                                gt_register_bytes((uint8_t *)bits, _tsr_packed_bytes(n, 1))};
  ck_assert_int_eq(_tsr_insert_sign_unpack1(hs[0], hs[1], STARPU_DEFAULT_PRIO), 0);
  gt_done(hs, 2);
}
static void vote1_task(float *x, size_t n, uint64_t base, int64_t step, const uint8_t *const *in, int nin,
                       uint8_t *out) {
  size_t nb = _tsr_packed_bytes(n, 1);
  starpu_data_handle_t hin[4], hs[2] = {_tsr_register_floats(x, n), gt_register_bytes(out, nb)};
  for (int k = 0; k < nin; k++) hin[k] = gt_register_bytes((uint8_t *)in[k], nb);
  ck_assert_int_eq(_tsr_insert_sign_vote1(hs[0], hs[1], base, step, nin, hin, STARPU_DEFAULT_PRIO), 0);
  gt_done(hs, 2);
  gt_done(hin, nin);
}
static void packp_task(float *x, size_t n, int p, int bias, enum _tsr_sign_mode mode, uint8_t *out) {
  starpu_data_handle_t hs[2] = {_tsr_register_floats(x, n), gt_register_bytes(out, _tsr_packed_bytes(n, p))};
  ck_assert_int_eq(_tsr_insert_sign_packp(hs[0], hs[1], p, bias, mode, STARPU_DEFAULT_PRIO), 0);
  gt_done(hs, 2);
}
static void unpackp_task(const uint8_t *in, size_t n, int p, int bias, enum _tsr_sign_mode mode, float *y) {
  starpu_data_handle_t hs[2] = {_tsr_register_floats(y, n),
                                gt_register_bytes((uint8_t *)in, _tsr_packed_bytes(n, p))};
  ck_assert_int_eq(_tsr_insert_sign_unpackp(hs[0], hs[1], p, bias, mode, STARPU_DEFAULT_PRIO), 0);
  gt_done(hs, 2);
}
static void finish_task(float *x, size_t n, enum _tsr_sign_mode mode, int ranks) {
  starpu_data_handle_t h = _tsr_register_floats(x, n);
  ck_assert_int_eq(_tsr_insert_sign_finish(h, mode, ranks, "finish"), 0);
  gt_done(&h, 1);
}
static void sum_ordered_task(float *own, size_t n, const float *const *in, int me, int r) {
  starpu_data_handle_t hs[4] = {_tsr_register_floats(own, n)};
  for (int k = 0; k < r - 1; k++) hs[1 + k] = _tsr_register_floats((float *)in[k], n);
  ck_assert_int_eq(_tsr_insert_sum_ordered(hs[0], r - 1, hs + 1, me, STARPU_DEFAULT_PRIO), 0);
  gt_done(hs, r);
}

static const struct sign_run on_gpu = {
    .where = "task on the GPU", .min_members = 2,
    .pack1 = pack1_task, .unpack1 = unpack1_task, .vote1 = vote1_task,
    .packp = packp_task, .unpackp = unpackp_task, .finish = finish_task,
    .sum_ordered = sum_ordered_task,
};

START_TEST(test_one_bit_codelets_match_cpu) { one_bit_matches_cpu(&on_gpu); }
END_TEST

START_TEST(test_p_bit_codelets_match_cpu) { p_bit_matches_cpu(&on_gpu); }
END_TEST

START_TEST(test_finish_and_ordered_sum_codelets_match_cpu) { finish_and_ordered_sum_match_cpu(&on_gpu); }
END_TEST

/* Lion's three CUDA kernels as tasks on the GPU: the fused update on (w, g, m), the direction in
 * place of d (a copy of g) with momentum m2, and its application to w2. */
static void lion_on_gpu(const struct _tsr_optim_args *a, size_t n, float *w, const float *g, float *m, float *w2,
                        float *d, float *m2) {
  starpu_data_handle_t hs[6] = {_tsr_register_floats(w, n),  _tsr_register_floats((float *)g, n),
                                _tsr_register_floats(m, n),  _tsr_register_floats(w2, n),
                                _tsr_register_floats(d, n),  _tsr_register_floats(m2, n)};
  ck_assert_int_eq(_tsr_optim_submit(a, hs[0], hs[1], &hs[2], NULL, "lion"), 0);
  ck_assert_int_eq(_tsr_optim_submit_direction(a, hs[4], &hs[5], "lion direction"), 0);
  ck_assert_int_eq(_tsr_optim_submit_apply(a, hs[3], hs[4], "lion apply"), 0);
  gt_done(hs, 6);
}

START_TEST(test_lion_cuda_matches_float64_reference) { lion_against_float64(lion_on_gpu, 1, "GPU"); }
END_TEST

Suite *make_gpu_sign_suite(void) {
  Suite *s = suite_create("gpu_sign");
  TCase *t = tcase_create("sign_codelets");
  tcase_set_timeout(t, 120);
  tcase_add_checked_fixture(t, gt_cuda_up, cuda_down);
  tcase_add_test(t, test_one_bit_codelets_match_cpu);
  tcase_add_test(t, test_p_bit_codelets_match_cpu);
  tcase_add_test(t, test_finish_and_ordered_sum_codelets_match_cpu);
  tcase_add_test(t, test_lion_cuda_matches_float64_reference);
  suite_add_tcase(s, t);
  return s;
}
#endif

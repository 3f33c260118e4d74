/* The CUDA side of Lion and of Lion Cub's sign reductions against the CPU side.
 * Suite "gpu_sign_host" (every CUDA build, no GPU needed): the per-index code of the sign kernels
 * (codelets/sign_wire_cuda.cu) run on the host against the CPU kernels (codelets/sign_wire.c), bitwise,
 * at lengths that are not multiples of 8, 32 or 64, for 2 to 5 voters and p-bit widths up to 3 bytes
 * per value. Suite "gpu_sign" (a StarPU with CUDA and a GPU; CUDA workers only): the same operations
 * as StarPU tasks on the GPU against the CPU kernels, bitwise (ranks may mix CPU and CUDA workers, so
 * the wire must not differ by one bit), and Lion's CUDA kernels (the fused update and the direction
 * and apply halves) against a float64 reference of the PyTorch rule within 1e-6 relative (3 float32
 * roundings), with sign(0) = 0 exactly, the invariant |w_new - w (1 - lr wd)| in {0, lr}, and the
 * fused update equal bitwise to direction + apply on the GPU (a 1-rank vote); the host suite checks
 * the Lion kernels' per-index code against the same reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets.h"
#include "cuda_util.h"
#include "gpu_test.h"
#include "kernel_util.h"
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

/* ---- host: the kernels' per-index code against the CPU kernels ---- */

START_TEST(test_one_bit_kernel_code_matches_cpu) {
  char what[96];
  for (size_t l = 0; l < NLENS; l++) {
    size_t n = lens[l], nb = _tsr_packed_bytes(n, 1);
    uint64_t base = ((uint64_t)1 << 40) + 977 * l; /* coins of large indices too */
    float *x = directions(n, 10 + l), *y = malloc(n * 4), *yc = malloc(n * 4);
    uint8_t *b, *bc;
    junk2(&b, &bc, nb);
    _tsr_sign_pack1_host(x, n, base, 7, b);
    _tsr_sign_pack1_cpu(x, n, base, 7, bc);
    snprintf(what, sizeof what, "1-bit pack of %zu directions", n), gt_same(b, bc, nb, what);
    _tsr_sign_unpack1_host(bc, n, y);
    _tsr_sign_unpack1_cpu(bc, n, yc);
    snprintf(what, sizeof what, "1-bit unpack of %zu values", n), gt_same(y, yc, n * 4, what);
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
      _tsr_sign_vote1_host(v, n, base, 7, (const uint8_t *const *)in, nin, o);
      _tsr_sign_vote1_cpu(vc, n, base, 7, (const uint8_t *const *)in, nin, oc);
      snprintf(what, sizeof what, "1-bit vote of %d voters on %zu values: bits", nin + 1, n), gt_same(o, oc, nb, what);
      snprintf(what, sizeof what, "1-bit vote of %d voters on %zu values: directions", nin + 1, n);
      gt_same(v, vc, n * 4, what);
      for (int k = 0; k < nin; k++) free(in[k]);
      free(v), free(vc), free(o), free(oc);
    }
    free(x), free(y), free(yc), free(b), free(bc);
  }
}
END_TEST

START_TEST(test_p_bit_kernel_code_matches_cpu) {
  const int ranks[] = {2, 3, 4, 5, 17, 200}; /* p = 3, 3, 4, 4, 6, 9: values across 2 and 3 bytes */
  const enum _tsr_sign_mode modes[] = {TSR_SIGN_ADD, TSR_SIGN_VOTE, TSR_SIGN_MEAN};
  char what[96];
  for (int r = 0; r < 6; r++)
    for (size_t l = 0; l < NLENS; l++) {
      int p = _tsr_sign_bits(ranks[r]);
      size_t n = lens[l], nb = _tsr_packed_bytes(n, p);
      float *x = ints(n, ranks[r], 40 + l + 13 * r);
      uint8_t *b, *bc;
      junk2(&b, &bc, nb);
      _tsr_sign_packp_host(x, n, p, ranks[r], b);
      _tsr_sign_packp_cpu(x, n, p, ranks[r], bc);
      snprintf(what, sizeof what, "%d-bit pack of %zu sums of %d", p, n, ranks[r]), gt_same(b, bc, nb, what);
      for (int m = 0; m < 3; m++) {
        float *y = gt_rand(n, 50 + l), *yc = malloc(n * 4);
        memcpy(yc, y, n * 4);
        _tsr_sign_unpackp_host(bc, n, p, ranks[r], modes[m], y);
        _tsr_sign_unpackp_cpu(bc, n, p, ranks[r], modes[m], yc);
        snprintf(what, sizeof what, "%d-bit unpack (mode %d) of %zu sums of %d", p, m, n, ranks[r]);
        gt_same(y, yc, n * 4, what);
        if (m) {
          memcpy(y, x, n * 4), memcpy(yc, x, n * 4);
          _tsr_sign_finish_host(y, n, modes[m], ranks[r]);
          _tsr_sign_finish_cpu(yc, n, modes[m], ranks[r]);
          snprintf(what, sizeof what, "finish (mode %d) of %zu sums of %d", m, n, ranks[r]);
          gt_same(y, yc, n * 4, what);
        }
        free(y), free(yc);
      }
      free(x), free(b), free(bc);
    }
}
END_TEST

START_TEST(test_ordered_sum_kernel_code_matches_cpu) {
  const size_t n = 333;
  for (int r = 1; r <= 4; r++)
    for (int me = 0; me < r; me++) {
      float *in[3], *own = gt_rand(n, 60 + r), *ownc = malloc(n * 4);
      for (int k = 0; k < r - 1; k++) in[k] = gt_rand(n, 70 + 5 * r + k);
      if (r > 1) in[0][5] = -own[5]; /* an exact cancellation: +0 (with a second member) */
      memcpy(ownc, own, n * 4);
      _tsr_sum_ordered_host(own, n, (const float *const *)in, me, r);
      _tsr_sum_ordered_cpu(ownc, n, (const float *const *)in, me, r);
      char what[64];
      snprintf(what, sizeof what, "ordered sum of %d members as member %d", r, me), gt_same(own, ownc, n * 4, what);
      for (int k = 0; k < r - 1; k++) free(in[k]);
      free(own), free(ownc);
    }
}
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
  tcase_add_test(t, test_ordered_sum_kernel_code_matches_cpu);
  tcase_add_test(t, test_lion_kernel_code_matches_float64_reference);
  suite_add_tcase(s, t);
  return s;
}
#endif

#if defined(STARPU_USE_CUDA) && defined(TSR_WITH_CUDA)
/* ---- GPU: the codelets as tasks on CUDA workers only ---- */

static void cuda_up(void) {
  tt_starpu_home();
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = 0; /* nothing can fall back to a CPU */
  conf.ncuda = 1;
  ck_assert_int_eq(starpu_init(&conf), 0);
  _tsr_kernel_error_clear();
}
static void cuda_down(void) { starpu_shutdown(); }

static starpu_data_handle_t bytes_h(uint8_t *p, size_t n) {
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)p, (uint32_t)n, 1);
  return h;
}
static void done(starpu_data_handle_t *hs, int n) {
  ck_assert_int_eq(starpu_task_wait_for_all(), 0);
  for (int i = 0; i < n; i++) starpu_data_unregister(hs[i]);
  char msg[512];
  ck_assert_msg(!_tsr_kernel_error(msg, sizeof msg), "%s", msg);
}

START_TEST(test_one_bit_codelets_match_cpu) {
  char what[96];
  for (size_t l = 0; l < NLENS; l++) {
    size_t n = lens[l], nb = _tsr_packed_bytes(n, 1);
    uint64_t base = 12345 + l;
    float *x = directions(n, 80 + l), *y = malloc(n * 4), *yc = malloc(n * 4);
    uint8_t *b, *bc;
    junk2(&b, &bc, nb);
    starpu_data_handle_t hs[3] = {_tsr_register_floats(x, n), bytes_h(b, nb), _tsr_register_floats(y, n)};
    ck_assert_int_eq(_tsr_insert_sign_pack1(hs[0], hs[1], base, 3, STARPU_DEFAULT_PRIO), 0);
    ck_assert_int_eq(_tsr_insert_sign_unpack1(hs[2], hs[1], STARPU_DEFAULT_PRIO), 0);
    done(hs, 3);
    _tsr_sign_pack1_cpu(x, n, base, 3, bc);
    _tsr_sign_unpack1_cpu(bc, n, yc);
    snprintf(what, sizeof what, "1-bit pack task, %zu directions", n), gt_same(b, bc, nb, what);
    snprintf(what, sizeof what, "1-bit unpack task, %zu values", n), gt_same(y, yc, n * 4, what);
    for (int nin = 1; nin <= 4; nin++) {
      uint8_t *in[4];
      starpu_data_handle_t hin[4];
      for (int k = 0; k < nin; k++) {
        float *d = directions(n, 200 * l + k + 90);
        in[k] = malloc(nb);
        _tsr_sign_pack1_cpu(d, n, base, 3, in[k]);
        hin[k] = bytes_h(in[k], nb);
        free(d);
      }
      float *v = directions(n, 95 + l), *vc = malloc(n * 4);
      memcpy(vc, v, n * 4);
      uint8_t *o, *oc;
      junk2(&o, &oc, nb);
      starpu_data_handle_t hv[2] = {_tsr_register_floats(v, n), bytes_h(o, nb)};
      ck_assert_int_eq(_tsr_insert_sign_vote1(hv[0], hv[1], base, 3, nin, hin, STARPU_DEFAULT_PRIO), 0);
      done(hv, 2);
      done(hin, nin);
      _tsr_sign_vote1_cpu(vc, n, base, 3, (const uint8_t *const *)in, nin, oc);
      snprintf(what, sizeof what, "1-bit vote task, %d voters, %zu values: bits", nin + 1, n), gt_same(o, oc, nb, what);
      snprintf(what, sizeof what, "1-bit vote task, %d voters, %zu values: directions", nin + 1, n);
      gt_same(v, vc, n * 4, what);
      for (int k = 0; k < nin; k++) free(in[k]);
      free(v), free(vc), free(o), free(oc);
    }
    free(x), free(y), free(yc), free(b), free(bc);
  }
}
END_TEST

START_TEST(test_p_bit_codelets_match_cpu) {
  const int ranks[] = {2, 3, 5, 17, 200};
  const enum _tsr_sign_mode modes[] = {TSR_SIGN_ADD, TSR_SIGN_VOTE, TSR_SIGN_MEAN};
  char what[96];
  for (int r = 0; r < 5; r++)
    for (size_t l = 0; l < NLENS; l++)
      for (int m = 0; m < 3; m++) {
        int p = _tsr_sign_bits(ranks[r]);
        size_t n = lens[l], nb = _tsr_packed_bytes(n, p);
        /* pack (finishing the source in VOTE and MEAN), unpack in the same mode into y */
        float *x = ints(n, ranks[r], 300 + l + 7 * r), *xc = malloc(n * 4), *y = gt_rand(n, 310 + l),
              *yc = malloc(n * 4);
        memcpy(xc, x, n * 4), memcpy(yc, y, n * 4);
        uint8_t *b, *bc;
        junk2(&b, &bc, nb);
        starpu_data_handle_t hs[3] = {_tsr_register_floats(x, n), bytes_h(b, nb), _tsr_register_floats(y, n)};
        ck_assert_int_eq(_tsr_insert_sign_packp(hs[0], hs[1], p, ranks[r], modes[m], STARPU_DEFAULT_PRIO), 0);
        ck_assert_int_eq(_tsr_insert_sign_unpackp(hs[2], hs[1], p, ranks[r], modes[m], STARPU_DEFAULT_PRIO), 0);
        done(hs, 3);
        _tsr_sign_packp_cpu(xc, n, p, ranks[r], bc);
        if (modes[m] != TSR_SIGN_ADD) _tsr_sign_finish_cpu(xc, n, modes[m], ranks[r]);
        _tsr_sign_unpackp_cpu(bc, n, p, ranks[r], modes[m], yc);
        snprintf(what, sizeof what, "%d-bit pack task (mode %d), %zu sums of %d", p, m, n, ranks[r]);
        gt_same(b, bc, nb, what);
        gt_same(x, xc, n * 4, what);
        snprintf(what, sizeof what, "%d-bit unpack task (mode %d), %zu sums of %d", p, m, n, ranks[r]);
        gt_same(y, yc, n * 4, what);
        free(x), free(xc), free(y), free(yc), free(b), free(bc);
      }
  /* the finish task alone (momentum averaging: MEAN of float32 sums) and the ordered sum */
  const size_t n = 777;
  for (int m = 1; m < 3; m++) {
    float *x = gt_rand(n, 400 + m), *xc = malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] *= 3;
    memcpy(xc, x, n * 4);
    starpu_data_handle_t h = _tsr_register_floats(x, n);
    ck_assert_int_eq(_tsr_insert_sign_finish(h, modes[m], 3, "finish"), 0);
    done(&h, 1);
    _tsr_sign_finish_cpu(xc, n, modes[m], 3);
    gt_same(x, xc, n * 4, m == 1 ? "finish task (vote)" : "finish task (mean)");
  }
  for (int r = 2; r <= 4; r++)
    for (int me = 0; me < r; me++) {
      float *in[3], *own = gt_rand(n, 410 + r), *ownc = malloc(n * 4);
      starpu_data_handle_t hs[4];
      for (int k = 0; k < r - 1; k++) in[k] = gt_rand(n, 420 + 5 * r + k), hs[1 + k] = _tsr_register_floats(in[k], n);
      memcpy(ownc, own, n * 4);
      hs[0] = _tsr_register_floats(own, n);
      ck_assert_int_eq(_tsr_insert_sum_ordered(hs[0], r - 1, hs + 1, me, STARPU_DEFAULT_PRIO), 0);
      done(hs, r);
      _tsr_sum_ordered_cpu(ownc, n, (const float *const *)in, me, r);
      snprintf(what, sizeof what, "ordered sum task, %d members, member %d", r, me), gt_same(own, ownc, n * 4, what);
      for (int k = 0; k < r - 1; k++) free(in[k]);
      free(own), free(ownc);
    }
}
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
  done(hs, 6);
}

START_TEST(test_lion_cuda_matches_float64_reference) { lion_against_float64(lion_on_gpu, 1, "GPU"); }
END_TEST

Suite *make_gpu_sign_suite(void) {
  Suite *s = suite_create("gpu_sign");
  TCase *t = tcase_create("sign_codelets");
  tcase_set_timeout(t, 120);
  tcase_add_checked_fixture(t, cuda_up, cuda_down);
  tcase_add_test(t, test_one_bit_codelets_match_cpu);
  tcase_add_test(t, test_p_bit_codelets_match_cpu);
  tcase_add_test(t, test_lion_cuda_matches_float64_reference);
  suite_add_tcase(s, t);
  return s;
}
#endif

/* Suite "sign": the wire kernels of the sign reductions (codelets/sign_wire.c) without MPI. 1-bit
 * and p-bit pack/unpack round trips at every length from 1 to 200 (so lengths that are not
 * multiples of 8, 32 or 64, and the bytes after the last value left alone), the 1-bit pack's rule on
 * any float (+0 and -0 against the coin, NaN clear) in its words and tail, p-bit partial sums
 * added exactly, the 1-bit vote at every length against a count, the 1-bit vote's rule for 0 and ties
 * (every value's coin c from (index, step): a tie gives c, a 0 votes -c) on crafted votes of 2 and 4
 * voters, on every combination of 2 to 5 voters' directions against the rule stated in counts of +1,
 * -1 and 0, and balanced over many tied values and steps; the p-bit vote (0 on a tie), the average,
 * and the member-ordered sum of the control word. Under mpirun: tests/mpi_sign.sh. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "sign_wire.h"
#include "testutil.h"

#define MAXN 200

/* Directions in {-1, 0, 1}, or integers in [-bias, bias] with bias > 0. */
static void fill_ints(float *x, size_t n, int bias, unsigned seed) {
  for (size_t i = 0; i < n; i++) x[i] = (float)((int)((i * 7919u + seed * 104729u) % (2u * bias + 1)) - bias);
}

START_TEST(sign_bits_hold_the_sums_of_n_directions) {
  const int want[] = {0, 2, 3, 3, 4, 4, 4, 4, 5}; /* ceil(log2(2n + 1)) */
  for (int n = 1; n <= 8; n++) ck_assert_int_eq(_tsr_sign_bits(n), want[n]);
  ck_assert_int_eq(_tsr_sign_bits(1000), 11);
}
END_TEST

START_TEST(one_bit_round_trips_at_every_length_and_zero_travels_against_its_coin) {
  float x[MAXN], y[MAXN];
  uint8_t bits[MAXN / 8 + 2];
  for (size_t n = 1; n <= MAXN; n++) {
    fill_ints(x, n, 1, (unsigned)n);
    memset(bits, 0xA5, sizeof bits);
    uint64_t base = 1000 + 3 * n; /* the chunk's first value's index in the buffer */
    _tsr_sign_pack1_cpu(x, n, base, 5, bits);
    ck_assert_int_eq(bits[_tsr_packed_bytes(n, 1)], 0xA5); /* nothing written past the packed bytes */
    _tsr_sign_unpack1_cpu(bits, n, y);
    for (size_t i = 0; i < n; i++)
      ck_assert_msg(y[i] == (x[i] != 0 ? x[i] : (float)-_tsr_sign_coin(base + i, 5)), "n %zu, i %zu", n, i);
  }
}
END_TEST

/* The 1-bit pack's rule on any float, in the vectorised words of 32 values and in the tail alike: a
 * set bit for a value > 0, the coin's opposite for +0 and -0, a clear bit otherwise (negative values
 * and NaN, which a direction never is: Lion's sign of NaN is 0). */
START_TEST(one_bit_pack_sets_positive_values_and_draws_coins_for_both_zeros) {
  const float odd[] = {1.0f, -1.0f, 0.0f, -0.0f, 2.5f, -3.0f, 1e-30f, -1e-30f, NAN, -NAN, INFINITY, -INFINITY};
  const int nodd = (int)(sizeof odd / sizeof odd[0]);
  float x[MAXN];
  uint8_t bits[MAXN / 8 + 2];
  for (size_t n = 60; n <= 100; n += 20) /* 1 word and a 28-value tail; 2 words and 4; 3 and 4 */
    for (int shift = 0; shift < nodd; shift++) {
      for (size_t i = 0; i < n; i++) x[i] = odd[(i + (size_t)shift) % (size_t)nodd];
      memset(bits, 0x5A, sizeof bits);
      _tsr_sign_pack1_cpu(x, n, 77, 3, bits);
      ck_assert_int_eq(bits[_tsr_packed_bytes(n, 1)], 0x5A);
      for (size_t i = 0; i < n; i++) {
        int want = x[i] > 0 ? 1 : x[i] == 0 ? _tsr_sign_coin(77 + i, 3) < 0 : 0;
        ck_assert_msg(((bits[i / 8] >> (i % 8)) & 1) == want, "n %zu, shift %d, value %zu (%g)", n, shift, i,
                      (double)x[i]);
      }
    }
}
END_TEST

START_TEST(p_bit_round_trips_and_adds_exactly_at_every_length) {
  float x[MAXN], y[MAXN], acc[MAXN];
  uint8_t buf[MAXN * 2 + 2];
  for (int ranks = 1; ranks <= 9; ranks++) {
    int p = _tsr_sign_bits(ranks);
    for (size_t n = 1; n <= MAXN; n++) {
      fill_ints(x, n, ranks, (unsigned)(n + ranks));
      memset(buf, 0x5A, sizeof buf);
      _tsr_sign_packp_cpu(x, n, p, ranks, buf);
      ck_assert_int_eq(buf[_tsr_packed_bytes(n, p)], 0x5A);
      for (size_t i = 0; i < n; i++) y[i] = 1234.0f, acc[i] = (float)i;
      _tsr_sign_unpackp_cpu(buf, n, p, ranks, TSR_SIGN_MEAN, y);
      _tsr_sign_unpackp_cpu(buf, n, p, ranks, TSR_SIGN_ADD, acc);
      for (size_t i = 0; i < n; i++) {
        ck_assert_msg(y[i] == x[i] / (float)ranks, "mean: ranks %d, n %zu, i %zu", ranks, n, i);
        ck_assert_msg(acc[i] == (float)i + x[i], "add: ranks %d, n %zu, i %zu", ranks, n, i);
      }
    }
  }
}
END_TEST

/* Votes of nv voters on n values (value k of voter j: d[j][k]; voter 0 is the own chunk), values
 * base.. of the buffer at `step`; the result is left in res. */
static void vote(int nv, size_t n, float d[][MAXN], uint64_t base, int64_t step, float *res) {
  uint8_t in[5][MAXN / 8 + 1], out[MAXN / 8 + 1];
  const uint8_t *inp[5];
  for (int j = 1; j < nv; j++) _tsr_sign_pack1_cpu(d[j], n, base, step, in[j - 1]), inp[j - 1] = in[j - 1];
  memcpy(res, d[0], n * sizeof *res);
  _tsr_sign_vote1_cpu(res, n, base, step, inp, nv - 1, out);
}

/* Crafted votes of 2 and 4 voters; c is each value's coin. */
START_TEST(the_1_bit_vote_of_2_and_4_voters_gives_the_majority_and_the_coin_on_ties) {
  /* 2 voters: +-1 unanimous, the two ties, a 0 against +1 and against -1, two 0s */
  float two[2][MAXN] = {{1, -1, 1, -1, 0, 1, 0, -1, 0}, {1, -1, -1, 1, 1, 0, -1, 0, 0}}, r2[9];
  const int want2[9] = {1, -1, 2, 2, 1, 1, -1, -1, -2}; /* 2: the coin c, -2: -c */
  /* 4 voters: 3-1 both ways, the 2-2 tie, 2 +1 and 2 zeros, +1 -1 and 2 zeros, 2 +1 one -1 one 0, one
   * +1 and 3 zeros, four 0s */
  float four[4][MAXN] = {{1, -1, 1, 1, 1, 1, 1, 0},
                         {1, -1, 1, 1, -1, 1, 0, 0},
                         {1, -1, -1, 0, 0, -1, 0, 0},
                         {-1, 1, -1, 0, 0, 0, 0, 0}},
        r4[8];
  const int want4[8] = {1, -1, 2, 1, -2, 1, -2, -2};
  int seen[2] = {0, 0}; /* the tie's coin was -1, +1 */
  for (int64_t step = 0; step < 64; step++) {
    uint64_t base = 77 + 1000 * (uint64_t)step;
    seen[_tsr_sign_coin(base + 2, step) > 0] = 1;
    vote(2, 9, two, base, step, r2);
    for (int i = 0; i < 9; i++) {
      int c = _tsr_sign_coin(base + i, step), w = want2[i] == 2 ? c : want2[i] == -2 ? -c : want2[i];
      ck_assert_msg(r2[i] == (float)w, "2 voters, step %lld, value %d: %g, want %d", (long long)step, i, r2[i], w);
    }
    vote(4, 8, four, base, step, r4);
    for (int i = 0; i < 8; i++) {
      int c = _tsr_sign_coin(base + i, step), w = want4[i] == 2 ? c : want4[i] == -2 ? -c : want4[i];
      ck_assert_msg(r4[i] == (float)w, "4 voters, step %lld, value %d: %g, want %d", (long long)step, i, r4[i], w);
    }
  }
  ck_assert_msg(seen[0] && seen[1], "the coins took both signs over the 64 steps");
}
END_TEST

/* Every combination of 2 to 5 voters' directions in {-1, 0, 1}, at 16 (index, step) pairs, against
 * the rule in counts: P +1s, M -1s, Z 0s, coin c: sign(P - M) when P != M and |P - M| >= Z, c on a
 * tie without zeros (P = M, Z = 0), else -c. */
START_TEST(the_1_bit_vote_follows_its_rule_in_counts_for_every_combination) {
  for (int nv = 2; nv <= 5; nv++) {
    int combos = 1;
    for (int j = 0; j < nv; j++) combos *= 3;
    for (int rep = 0; rep < 16; rep++) {
      static float d[5][243]; /* 3^5 */
      float res[MAXN];
      for (int k = 0; k < combos; k++)
        for (int j = 0, c = k; j < nv; j++, c /= 3) d[j][k] = (float)(c % 3 - 1);
      uint64_t base = 12345 * (uint64_t)rep + 7;
      int64_t step = 3 * rep + nv;
      for (int k0 = 0; k0 < combos; k0 += MAXN) { /* MAXN values at a time */
        int n = combos - k0 < MAXN ? combos - k0 : MAXN;
        float chunk[5][MAXN];
        for (int j = 0; j < nv; j++) memcpy(chunk[j], d[j] + k0, n * sizeof(float));
        vote(nv, (size_t)n, chunk, base + k0, step, res);
        for (int k = 0; k < n; k++) {
          int P = 0, M = 0, Z = 0;
          for (int j = 0; j < nv; j++) P += chunk[j][k] > 0, M += chunk[j][k] < 0, Z += chunk[j][k] == 0;
          int c = _tsr_sign_coin(base + k0 + k, step), dpm = P - M, want;
          if (dpm != 0 && abs(dpm) >= Z)
            want = dpm > 0 ? 1 : -1;
          else if (dpm == 0 && Z == 0)
            want = c;
          else
            want = -c;
          ck_assert_msg(res[k] == (float)want, "%d voters, P %d M %d Z %d, coin %d: %g", nv, P, M, Z, c, res[k]);
        }
      }
    }
  }
}
END_TEST

/* The coins are balanced: over 100000 values tied 1 against 1 (2 voters) and 2 against 2 (4
 * voters), and over 10000 steps of one value, the share of +1 is 1/2 within 1% and 2% (a fair coin's
 * standard deviation: 0.16% and 0.5%); the rules are deterministic, so these counts are fixed. A rule
 * that sends ties one way fails both. */
START_TEST(the_1_bit_vote_splits_ties_evenly_over_values_and_steps) {
  enum { N = 100000, STEPS = 10000, CH = 1000 };
  static float d[4][MAXN];
  float res[MAXN];
  for (int nv = 2; nv <= 4; nv += 2) {
    long plus = 0;
    for (size_t k0 = 0; k0 < N; k0 += MAXN) {
      for (int k = 0; k < MAXN; k++)
        for (int j = 0; j < nv; j++) d[j][k] = j % 2 ? -1.0f : 1.0f; /* as many +1 as -1 */
      vote(nv, MAXN, d, 500000 + k0, 42, res);
      for (int k = 0; k < MAXN; k++) plus += res[k] > 0;
    }
    ck_assert_msg(labs(2 * plus - N) <= N / 50, "%d voters: %ld of %d tied values went to +1", nv, plus, N);
  }
  long plus = 0;
  for (int64_t step = 0; step < STEPS; step++) {
    float one[2][MAXN] = {{-1}, {1}};
    vote(2, 1, one, 31337, step, res);
    plus += res[0] > 0;
  }
  ck_assert_msg(labs(2 * plus - STEPS) <= STEPS / 25, "value 31337: %ld of %d tied steps went to +1", plus, STEPS);
}
END_TEST

/* The 1-bit vote at every length from 1 to 200 and 1 to 6 other voters, against the count of set
 * bits value by value: written to the chunk, packed to out, the bytes after the last value left alone. */
START_TEST(the_1_bit_vote_equals_the_count_at_every_length) {
  float own[MAXN], other[MAXN];
  uint8_t in[6][MAXN / 8 + 2], out[MAXN / 8 + 2];
  for (int nin = 1; nin <= 6; nin++)
    for (size_t n = 1; n <= MAXN; n++) {
      const uint8_t *inp[6];
      for (int k = 0; k < nin; k++) {
        fill_ints(other, n, 1, (unsigned)(n * 7 + k + 1));
        _tsr_sign_pack1_cpu(other, n, 0, 9, in[k]);
        inp[k] = in[k];
      }
      fill_ints(own, n, 1, (unsigned)n);
      float ref[MAXN];
      for (size_t i = 0; i < n; i++) {
        int c = _tsr_sign_coin(i, 9), set = own[i] != 0 ? own[i] > 0 : c < 0;
        for (int k = 0; k < nin; k++) set += (in[k][i / 8] >> (i % 8)) & 1;
        ref[i] = 2 * set > nin + 1 ? 1.0f : 2 * set < nin + 1 ? -1.0f : (float)c;
      }
      memset(out, 0xA5, sizeof out);
      _tsr_sign_vote1_cpu(own, n, 0, 9, inp, nin, out);
      ck_assert_int_eq(out[_tsr_packed_bytes(n, 1)], 0xA5);
      for (size_t i = 0; i < n; i++) {
        ck_assert_msg(own[i] == ref[i], "%d voters, n %zu, i %zu", nin + 1, n, i);
        ck_assert_msg(((out[i / 8] >> (i % 8)) & 1) == (ref[i] > 0), "%d voters, n %zu, bit %zu", nin + 1, n, i);
      }
      if (n % 8) ck_assert_int_eq(out[n / 8] >> (n % 8), 0); /* the last byte's unused bits are 0 */
    }
}
END_TEST

START_TEST(the_p_bit_vote_is_the_sign_of_the_exact_sum) {
  float s[5] = {0, 2, -2, 3, -1};
  _tsr_sign_finish_cpu(s, 5, TSR_SIGN_VOTE, 4);
  ck_assert(s[0] == 0 && s[1] == 1 && s[2] == -1 && s[3] == 1 && s[4] == -1);
  float m[3] = {1, -3, 2};
  _tsr_sign_finish_cpu(m, 3, TSR_SIGN_MEAN, 3);
  ck_assert(m[0] == 1.0f / 3.0f && m[1] == -1.0f && m[2] == 2.0f / 3.0f);
}
END_TEST

START_TEST(the_control_word_is_summed_in_member_order_on_every_member) {
  /* 1e8 + 1 - 1e8 depends on the order in float32: every member must use the same one */
  float w[3][2] = {{1e8f, 3}, {1, 4}, {-1e8f, 5}}, got[3][2];
  for (int me = 0; me < 3; me++) {
    const float *in[2];
    for (int k = 0, j = 0; k < 3; k++)
      if (k != me) in[j++] = w[k];
    memcpy(got[me], w[me], sizeof got[me]);
    _tsr_sum_ordered_cpu(got[me], 2, in, me, 3);
  }
  float want0 = (1e8f + 1.0f) + -1e8f;
  for (int me = 0; me < 3; me++) ck_assert(got[me][0] == want0 && got[me][1] == 12.0f);
}
END_TEST

static Suite *make_sign_suite(void) {
  Suite *s = suite_create("sign");
  TCase *t = tcase_create("sign");
  tcase_add_test(t, sign_bits_hold_the_sums_of_n_directions);
  tcase_add_test(t, one_bit_round_trips_at_every_length_and_zero_travels_against_its_coin);
  tcase_add_test(t, one_bit_pack_sets_positive_values_and_draws_coins_for_both_zeros);
  tcase_add_test(t, p_bit_round_trips_and_adds_exactly_at_every_length);
  tcase_add_test(t, the_1_bit_vote_of_2_and_4_voters_gives_the_majority_and_the_coin_on_ties);
  tcase_add_test(t, the_1_bit_vote_follows_its_rule_in_counts_for_every_combination);
  tcase_add_test(t, the_1_bit_vote_splits_ties_evenly_over_values_and_steps);
  tcase_add_test(t, the_1_bit_vote_equals_the_count_at_every_length);
  tcase_add_test(t, the_p_bit_vote_is_the_sign_of_the_exact_sum);
  tcase_add_test(t, the_control_word_is_summed_in_member_order_on_every_member);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_sign_suite)

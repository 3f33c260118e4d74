/* Suite "sign": the wire kernels of the sign reductions (codelets/sign_wire.c) without MPI. 1-bit
 * and p-bit pack/unpack round trips at every length from 1 to 200 (so lengths that are not
 * multiples of 8, 32 or 64, and the bytes after the last value left alone), p-bit partial sums
 * added exactly, the 1-bit vote at every length against a count, the vote's handling of 0 and ties
 * (1 bit: both +1; p bits: 0 on a tie), the average, and the member-ordered sum of the control word. Under mpirun: tests/mpi_sign.sh. */
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

START_TEST(one_bit_round_trips_at_every_length_and_zero_travels_as_plus_one) {
  float x[MAXN], y[MAXN];
  uint8_t bits[MAXN / 8 + 2];
  for (size_t n = 1; n <= MAXN; n++) {
    fill_ints(x, n, 1, (unsigned)n);
    memset(bits, 0xA5, sizeof bits);
    _tsr_sign_pack1_cpu(x, n, bits);
    ck_assert_int_eq(bits[_tsr_packed_bytes(n, 1)], 0xA5); /* nothing written past the packed bytes */
    _tsr_sign_unpack1_cpu(bits, n, y);
    for (size_t i = 0; i < n; i++) ck_assert_msg(y[i] == (x[i] >= 0 ? 1.0f : -1.0f), "n %zu, i %zu", n, i);
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

/* Four voters: the own chunk and three packed ones; i = 0: all 0 (four +1 votes), 1: a 2-2 tie,
 * 2: three -1 against one 0, 3: three +1 against one -1. */
START_TEST(the_1_bit_vote_counts_zero_as_plus_one_and_ties_as_plus_one) {
  float own[4] = {0, 1, -1, 1}, v1[4] = {0, 1, -1, 1}, v2[4] = {0, -1, -1, -1}, v3[4] = {0, -1, 0, 1};
  uint8_t b1[1], b2[1], b3[1], out[1];
  _tsr_sign_pack1_cpu(v1, 4, b1), _tsr_sign_pack1_cpu(v2, 4, b2), _tsr_sign_pack1_cpu(v3, 4, b3);
  const uint8_t *in[3] = {b1, b2, b3};
  _tsr_sign_vote1_cpu(own, 4, in, 3, out);
  ck_assert(own[0] == 1 && own[1] == 1 && own[2] == -1 && own[3] == 1);
  ck_assert_int_eq(out[0] & 0xF, 0xB);              /* bits 0, 1, 3 */
  float three[1] = {-1}, m1[1] = {1}, m2[1] = {-1}; /* 3 voters: 1 against 2 */
  uint8_t c1[1], c2[1], o[1];
  _tsr_sign_pack1_cpu(m1, 1, c1), _tsr_sign_pack1_cpu(m2, 1, c2);
  _tsr_sign_vote1_cpu(three, 1, (const uint8_t *[]){c1, c2}, 2, o);
  ck_assert(three[0] == -1);
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
        _tsr_sign_pack1_cpu(other, n, in[k]);
        inp[k] = in[k];
      }
      fill_ints(own, n, 1, (unsigned)n);
      float ref[MAXN];
      for (size_t i = 0; i < n; i++) {
        int set = own[i] >= 0;
        for (int k = 0; k < nin; k++) set += (in[k][i / 8] >> (i % 8)) & 1;
        ref[i] = 2 * set >= nin + 1 ? 1.0f : -1.0f;
      }
      memset(out, 0xA5, sizeof out);
      _tsr_sign_vote1_cpu(own, n, inp, nin, out);
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
  tcase_add_test(t, one_bit_round_trips_at_every_length_and_zero_travels_as_plus_one);
  tcase_add_test(t, p_bit_round_trips_and_adds_exactly_at_every_length);
  tcase_add_test(t, the_1_bit_vote_counts_zero_as_plus_one_and_ties_as_plus_one);
  tcase_add_test(t, the_1_bit_vote_equals_the_count_at_every_length);
  tcase_add_test(t, the_p_bit_vote_is_the_sign_of_the_exact_sum);
  tcase_add_test(t, the_control_word_is_summed_in_member_order_on_every_member);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_sign_suite)

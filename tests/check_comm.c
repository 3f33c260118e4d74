/* Suite "comm": what spreads work over ranks, checked without MPI. Distribution descriptors
 * (src/tensor/dist.h): a batch split gives part p of P the samples p, p + P, ... (the loader's
 * shards); a spatial split cuts the last axes into a grid of blocks that cover the tensor exactly
 * once, the first whole % grid blocks one value longer, each widened by its halos on the sides
 * that have a neighbour; bad grids and halos are refused by name. The collective registry: its
 * names are tsr_reduce_precision's values, its algorithms are found by name; the alpha-beta costs
 * that "auto" compares, and the link text it may be given. Communicators and the collectives on
 * them are tested under mpirun (tests/mpi_comm.sh, tests/mpi_collectives.sh). */
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "comm/collective.h"
#include "comm/net.h"
#include "comm/tree.h"
#include "runtime/communicator.h"
#include "tensor/dist.h"
#include "testutil.h"

START_TEST(a_batch_split_interleaves_the_samples_like_the_loader) {
  for (int parts = 1; parts <= 5; parts++)
    for (int64_t n = 1; n <= 13; n++) {
      int64_t total = 0;
      for (int p = 0; p < parts; p++) {
        struct _tsr_dist d;
        ck_assert_int_eq(_tsr_dist_batch(&d, NULL, p, parts), TSR_OK);
        int64_t k = _tsr_dist_batch_count(&d, n);
        ck_assert_int_eq(k, tsr_loader_shard_size(n, p, parts));
        for (int64_t i = 0; i < k; i++) ck_assert_int_eq(_tsr_dist_batch_index(&d, i), p + i * parts);
        total += k;
      }
      ck_assert_int_eq(total, n);
    }
  struct _tsr_dist r = _tsr_dist_replicated();
  ck_assert_int_eq(_tsr_dist_batch_count(&r, 9), 9);
  ck_assert_int_eq(_tsr_dist_batch_index(&r, 4), 4);
  struct _tsr_dist d;
  ck_assert_int_eq(_tsr_dist_batch(&d, NULL, 3, 3), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "part 3 of 3"));
}
END_TEST

START_TEST(a_batch_split_over_a_communicator_takes_its_size_and_index) {
  struct _tsr_comm w = {.size = 4, .index = 2};
  struct _tsr_dist d;
  ck_assert_int_eq(_tsr_dist_batch(&d, &w, 0, 0), TSR_OK);
  ck_assert(d.comm == &w && d.parts == 4 && d.part == 2);
  ck_assert_int_eq(_tsr_dist_batch_count(&d, 10), 2);
}
END_TEST

/* A 10 x 7 plane in a 3 x 2 grid of blocks with halos 1 (rows) and 2 (columns). */
START_TEST(spatial_blocks_cover_the_tensor_and_add_halos_inside_only) {
  const int grid[2] = {3, 2}, halo[2] = {1, 2};
  const int64_t whole[2] = {10, 7};
  int seen[10][7] = {{0}};
  for (int p = 0; p < 6; p++) {
    struct _tsr_dist d;
    int64_t first[2], owned[2], ext[2];
    ck_assert_int_eq(_tsr_dist_spatial(&d, NULL, p, 2, grid, halo), TSR_OK);
    ck_assert_int_eq(d.parts, 6);
    ck_assert_int_eq(_tsr_dist_block(&d, whole, first, owned, ext), TSR_OK);
    int row = p / 2, col = p % 2; /* row-major: the last axis varies fastest */
    ck_assert_int_eq(owned[0], row == 0 ? 4 : 3); /* 10 = 4 + 3 + 3 */
    ck_assert_int_eq(owned[1], col == 0 ? 4 : 3); /* 7 = 4 + 3 */
    ck_assert_int_eq(ext[0], owned[0] + (row > 0) + (row < 2));
    ck_assert_int_eq(ext[1], owned[1] + 2);
    for (int64_t i = first[0]; i < first[0] + owned[0]; i++)
      for (int64_t j = first[1]; j < first[1] + owned[1]; j++) seen[i][j]++;
  }
  for (int i = 0; i < 10; i++)
    for (int j = 0; j < 7; j++) ck_assert_msg(seen[i][j] == 1, "value (%d, %d) owned %d times", i, j, seen[i][j]);
}
END_TEST

START_TEST(bad_spatial_splits_are_refused_by_name) {
  struct _tsr_dist d;
  int64_t first[3], owned[3], ext[3];
  const int grid[3] = {2, 2, 4}, halo[3] = {0, 1, 3};
  ck_assert_int_eq(_tsr_dist_spatial(&d, NULL, 0, 4, grid, halo), TSR_ERR_ARG);
  ck_assert_int_eq(_tsr_dist_spatial(&d, NULL, 16, 3, grid, halo), TSR_ERR_ARG);
  struct _tsr_comm two = {.size = 2, .index = 1};
  ck_assert_int_eq(_tsr_dist_spatial(&d, &two, 0, 3, grid, halo), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "a grid of 16 blocks over 2 ranks"));
  ck_assert_int_eq(_tsr_dist_spatial(&d, NULL, 5, 3, grid, halo), TSR_OK);
  const int64_t fine[3] = {4, 4, 12}, thin[3] = {4, 4, 8}, few[3] = {1, 4, 12};
  ck_assert_int_eq(_tsr_dist_block(&d, fine, first, owned, ext), TSR_OK);
  ck_assert_int_eq(_tsr_dist_block(&d, thin, first, owned, ext), TSR_ERR_SHAPE); /* blocks of 2 < halo 3 */
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "axis 2 has 8 values for 4 blocks with halo 3"));
  ck_assert_int_eq(_tsr_dist_block(&d, few, first, owned, ext), TSR_ERR_SHAPE);
  struct _tsr_dist b;
  ck_assert_int_eq(_tsr_dist_batch(&b, NULL, 0, 2), TSR_OK);
  ck_assert_int_eq(_tsr_dist_block(&b, fine, first, owned, ext), TSR_ERR_ARG);
}
END_TEST

START_TEST(the_registry_names_the_reduction_precisions) {
  ck_assert_int_eq(_tsr_collective_count(), 6); /* f32, bf16, fp16, then the sign reductions */
  const char *names[] = {[TSR_REDUCE_F32] = "f32", [TSR_REDUCE_BF16] = "bf16", [TSR_REDUCE_FP16] = "fp16"};
  for (int i = 0; i < 3; i++) {
    int p = -1;
    ck_assert_str_eq(tsr_reduce_precision_name(i), names[i]);
    ck_assert_int_eq(tsr_reduce_precision_parse(names[i], &p), TSR_OK);
    ck_assert_int_eq(p, i);
  }
  ck_assert_str_eq(tsr_reduce_precision_name(6), "unknown");
  int p;
  ck_assert_int_eq(tsr_reduce_precision_parse("int8", &p), TSR_ERR_ARG);
  ck_assert_str_eq(tsr_last_error(),
                   "gradient reduction precision 'int8' (f32, bf16, fp16, sign1, signp or signp_mean)");
  /* without NCCL every name falls back to the StarPU-MPI ring in its own wire format */
  struct _tsr_comm two = {.size = 2, .index = 0};
  for (int i = 0; i < 3; i++) {
    const struct _tsr_collective_ops *ops = _tsr_collective_select(names[i], &two, "nccl");
    ck_assert_ptr_nonnull(ops);
    ck_assert_str_eq(ops->impl, "ring");
    ck_assert_str_eq(ops->name, names[i]);
    ck_assert_ptr_null(ops->state); /* no reduction keeps state across steps yet */
  }
  ck_assert_ptr_null(_tsr_collective_select("int8", &two, NULL));
}
END_TEST

START_TEST(every_algorithm_is_an_entry_of_every_format) {
  struct _tsr_comm three = {.size = 3, .index = 0};
  const char *names[] = {"f32", "bf16", "fp16"},
             *algos[] = {"ring", "rd", "tree", "hier", "rabenseifner", "hier-rh"};
  for (int i = 0; i < 3; i++)
    for (int a = 0; a < 6; a++) {
      const struct _tsr_collective_ops *o[4];
      ck_assert_int_eq(_tsr_collective_usable(names[i], algos[a], &three, "nccl", o, 4), 1);
      ck_assert_str_eq(o[0]->impl, algos[a]);
      ck_assert_str_eq(o[0]->name, names[i]);
      ck_assert_ptr_nonnull(o[0]->cost); /* all of them take part in "auto" */
      ck_assert(_tsr_collective_algo_known(algos[a]));
    }
  const struct _tsr_collective_ops *o[8];
  ck_assert_int_eq(_tsr_collective_usable("f32", NULL, &three, "nccl", o, 8), 6);
  ck_assert_str_eq(o[0]->impl, "ring"); /* the default stays first */
  ck_assert(_tsr_collective_algo_known("auto") && !_tsr_collective_algo_known("ring2"));
  char buf[256];
  ck_assert_ptr_nonnull(strstr(_tsr_collective_algos(buf, sizeof buf), "ring, rd, tree, hier, rabenseifner, hier-rh, "));
  ck_assert_ptr_nonnull(strstr(buf, ", or auto"));
}
END_TEST

/* alpha 10 us, 1 GB/s (beta 1 ns per byte), 1 MB */
START_TEST(the_cost_formulas_follow_the_alpha_beta_model) {
  struct _tsr_link l = {1e-5, 1e-9};
  ck_assert_double_eq_tol(_tsr_cost_ring(4, 1e6, l), 6 * (1e-5 + 2.5e5 * 1e-9), 1e-12);
  ck_assert_double_eq_tol(_tsr_cost_rd(4, 1e6, l), 2 * (1e-5 + 1e-3), 1e-12);
  ck_assert_double_eq_tol(_tsr_cost_rd(3, 1e6, l), 3 * (1e-5 + 1e-3), 1e-12); /* 1 round + hand-over and back */
  ck_assert_double_eq_tol(_tsr_cost_tree(3, 1e6, l), 4 * (1e-5 + 1e-3), 1e-12);
  ck_assert(_tsr_cost_ring(1, 1e6, l) == 0);
  /* halving-doubling: halves then quarters, each sent twice (halving, doubling) */
  ck_assert_double_eq_tol(_tsr_cost_rabenseifner(4, 1e6, l), 2 * (1e-5 + 5e-4) + 2 * (1e-5 + 2.5e-4), 1e-12);
  ck_assert_double_eq_tol(_tsr_cost_rabenseifner(3, 1e6, l), 2 * (1e-5 + 1e-3) + 2 * (1e-5 + 5e-4), 1e-12);
  ck_assert(_tsr_cost_rabenseifner(1, 1e6, l) == 0);
  /* hier-rh, 2 nodes x 2 ranks, a group of 4 MB in float32, 2 MB in bf16: the float32 ring inside
   * (2 messages of 2 MB on a link 10 times faster), then the halving-doubling of each rank's 1 MB
   * half of the bf16 bytes over 2 nodes (2 messages of 0.5 MB) */
  struct _tsr_link fast = {1e-6, 1e-10};
  ck_assert_double_eq_tol(_tsr_cost_hier_rh(2, 2, 4e6, 2e6, fast, l), 2 * (1e-6 + 2e-4) + 2 * (1e-5 + 5e-4), 1e-12);
  ck_assert_double_eq_tol(_tsr_cost_hier_rh(4, 1, 4e6, 4e6, fast, l), _tsr_cost_ring(4, 4e6, fast), 1e-12);
  /* the ring's bytes in log2 p rounds: below the ring for p a power of two > 2, equal at 2 */
  for (int p = 4; p <= 64; p *= 2) ck_assert(_tsr_cost_rabenseifner(p, 1e8, l) < _tsr_cost_ring(p, 1e8, l));
  ck_assert_double_eq_tol(_tsr_cost_rabenseifner(2, 1e8, l), _tsr_cost_ring(2, 1e8, l), 1e-12);
  /* small groups: recursive doubling's log2 p messages win; large ones: the ring's 2 (p-1)/p bytes */
  for (int p = 4; p <= 64; p *= 2) {
    ck_assert(_tsr_cost_rd(p, 1e3, l) < _tsr_cost_ring(p, 1e3, l));
    ck_assert(_tsr_cost_ring(p, 1e8, l) < _tsr_cost_rd(p, 1e8, l));
  }
}
END_TEST

START_TEST(a_binomial_tree_sends_each_member_s_values_twice_but_the_root_s) {
  for (int p = 1; p <= 17; p++) {
    int total = 0;
    for (int me = 0; me < p; me++) total += _tsr_tree_messages(me, p);
    ck_assert_int_eq(total, 2 * (p - 1)); /* one message up and one down per edge */
    ck_assert_int_eq(_tsr_tree_messages(0, p), _tsr_tree_depth(p));
  }
}
END_TEST

START_TEST(the_link_text_gives_latency_and_bandwidth) {
  struct _tsr_link r, l;
  ck_assert_int_eq(_tsr_net_parse_link("50,1", &r, &l), TSR_OK);
  ck_assert_double_eq_tol(r.alpha, 50e-6, 1e-15);
  ck_assert_double_eq_tol(r.beta, 8e-9, 1e-20);
  ck_assert(l.alpha == r.alpha && l.beta == r.beta);
  ck_assert_int_eq(_tsr_net_parse_link("50,10,2,100", &r, &l), TSR_OK);
  ck_assert_double_eq_tol(l.alpha, 2e-6, 1e-15);
  ck_assert_double_eq_tol(l.beta, 8e-11, 1e-20);
  const char *bad[] = {"50", "50,", "50,0", "a,b", "1,2,3", "1,2,3,4,5", "-1,2"};
  for (int i = 0; i < 7; i++) {
    ck_assert_int_eq(_tsr_net_parse_link(bad[i], &r, &l), TSR_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(tsr_last_error(), bad[i]));
  }
}
END_TEST

static Suite *make_comm_suite(void) {
  Suite *s = suite_create("comm");
  TCase *t = tcase_create("comm");
  tcase_add_test(t, a_batch_split_interleaves_the_samples_like_the_loader);
  tcase_add_test(t, a_batch_split_over_a_communicator_takes_its_size_and_index);
  tcase_add_test(t, spatial_blocks_cover_the_tensor_and_add_halos_inside_only);
  tcase_add_test(t, bad_spatial_splits_are_refused_by_name);
  tcase_add_test(t, the_registry_names_the_reduction_precisions);
  tcase_add_test(t, every_algorithm_is_an_entry_of_every_format);
  tcase_add_test(t, the_cost_formulas_follow_the_alpha_beta_model);
  tcase_add_test(t, a_binomial_tree_sends_each_member_s_values_twice_but_the_root_s);
  tcase_add_test(t, the_link_text_gives_latency_and_bandwidth);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_comm_suite)

/* Suite "loader3d": samples [C, D, H, W] from 5-D HDF5 datasets (chunked in boxes, or contiguous),
 * read whole and by boxes of their spatial axes (what a rank of a spatially partitioned run reads):
 * every box equals the whole sample cut to it, standardised alike; targets come boxed when they
 * have the inputs' spatial shape (segmentation), whole otherwise (regression); two half-boxes of
 * each sample of a rank's shard rebuild it; .npy sources and pools of produced samples cut
 * [C, H, W] boxes; boxes outside the sample and mixed ranks are refused naming the axis or the
 * shapes. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>
#include <tessera/data.h>
#include <tessera/loader.h>
#include <tessera/params.h>

#include "testutil.h"

enum { N = 5, C = 2, D = 4, H = 6, W = 8, TC = 3 };

/* Value of input element (sample s, channel c, d, h, w): distinct for every element. */
static float xval(int s, int c, int d, int h, int w) { return (float)(((s * 10 + c) * 10 + d) * 100 + h * 10 + w) / 7.0f; }

/* inputs [N, C, D, H, W]; targets [N, TC, D, H, W] (seg) or [N, TC, 1, 1]; chunked in boxes
 * [1, 1, 2, 3, 4] or contiguous. */
static void write_volume(const char *path, int seg, int chunked) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ck_assert(f >= 0);
  hsize_t dx[5] = {N, C, D, H, W}, dy[5] = {N, TC, D, H, W}, dyr[4] = {N, TC, 1, 1}, chunk[5] = {1, 1, 2, 3, 4};
  size_t nx = (size_t)N * C * D * H * W, ny = seg ? (size_t)N * TC * D * H * W : (size_t)N * TC;
  float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * ny);
  size_t i = 0;
  for (int s = 0; s < N; s++)
    for (int c = 0; c < C; c++)
      for (int d = 0; d < D; d++)
        for (int h = 0; h < H; h++)
          for (int w = 0; w < W; w++) x[i++] = xval(s, c, d, h, w);
  for (size_t j = 0; j < ny; j++) y[j] = -(float)j;
  hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
  if (chunked) H5Pset_chunk(pl, 5, chunk);
  hid_t sx = H5Screate_simple(5, dx, NULL), sy = seg ? H5Screate_simple(5, dy, NULL) : H5Screate_simple(4, dyr, NULL);
  hid_t ix = H5Dcreate2(f, "inputs", H5T_IEEE_F32LE, sx, H5P_DEFAULT, pl, H5P_DEFAULT);
  hid_t iy = H5Dcreate2(f, "targets", H5T_IEEE_F32LE, sy, H5P_DEFAULT, seg ? pl : H5P_DEFAULT, H5P_DEFAULT);
  ck_assert(ix >= 0 && iy >= 0);
  ck_assert(H5Dwrite(ix, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0);
  ck_assert(H5Dwrite(iy, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) >= 0);
  H5Dclose(ix), H5Dclose(iy), H5Sclose(sx), H5Sclose(sy), H5Pclose(pl), H5Fclose(f);
  free(x), free(y);
}

static tsr_loader *open_ok(const char *spec, int standardize) {
  tsr_loader_opts o;
  tsr_loader_opts_default(&o);
  o.standardize = standardize;
  tsr_loader *l;
  ck_assert_msg(tsr_loader_open(&l, spec, &o) == TSR_OK, "%s: %s", spec, tsr_last_error());
  return l;
}

/* Cuts box (start, ext) of a [c, dims...] sample, written out here independently of the loader. */
static void cut(int nsp, int c, const int64_t *dims, const float *whole, const int64_t *start, const int64_t *ext,
                float *out) {
  int64_t d0 = nsp == 3 ? dims[0] : 1, e0 = nsp == 3 ? ext[0] : 1, s0 = nsp == 3 ? start[0] : 0;
  const int64_t *hw = dims + (nsp == 3), *shw = start + (nsp == 3), *ehw = ext + (nsp == 3);
  size_t o = 0;
  for (int k = 0; k < c; k++)
    for (int64_t d = s0; d < s0 + e0; d++)
      for (int64_t h = shw[0]; h < shw[0] + ehw[0]; h++)
        for (int64_t w = shw[1]; w < shw[1] + ehw[1]; w++) out[o++] = whole[((k * d0 + d) * hw[0] + h) * hw[1] + w];
}

/* Every box of a few sizes and positions, read through the loader, equals the whole sample cut. */
static void check_boxes(tsr_loader *l, int seg) {
  float whole[C * D * H * W], wy[TC * D * H * W], box[C * D * H * W], by[TC * D * H * W], ref[TC * D * H * W];
  const int64_t dims[3] = {D, H, W};
  const int64_t boxes[][6] = {{0, 0, 0, D, H, W}, {1, 2, 3, 2, 3, 4}, {0, 3, 0, 4, 3, 8}, {3, 5, 7, 1, 1, 1},
                              {2, 0, 4, 2, 6, 4}, {1, 1, 1, 3, 4, 5}};
  for (int s = 0; s < N; s++) {
    ck_assert_int_eq(tsr_loader_read(l, s, whole, wy), TSR_OK);
    for (int b = 0; b < 6; b++) {
      const int64_t *st = boxes[b], *ex = boxes[b] + 3;
      memset(by, 0, sizeof by);
      ck_assert_msg(tsr_loader_read_box(l, s, st, ex, box, by) == TSR_OK, "%s", tsr_last_error());
      cut(3, C, dims, whole, st, ex, ref);
      size_t n = C * ex[0] * ex[1] * ex[2];
      ck_assert_msg(memcmp(box, ref, sizeof(float) * n) == 0, "sample %d box %d: inputs differ from the cut sample", s, b);
      if (seg) {
        cut(3, TC, dims, wy, st, ex, ref);
        ck_assert_msg(memcmp(by, ref, sizeof(float) * TC * ex[0] * ex[1] * ex[2]) == 0,
                      "sample %d box %d: targets differ from the cut sample", s, b);
      } else {
        ck_assert_msg(memcmp(by, wy, sizeof(float) * TC) == 0, "sample %d box %d: regression targets not whole", s, b);
      }
    }
  }
}

START_TEST(boxes_of_3d_samples_equal_the_cut_sample) {
  const char *dir = tt_tmpdir();
  for (int seg = 0; seg <= 1; seg++)
    for (int chunked = 0; chunked <= 1; chunked++) {
      char *p = tt_path_in(dir, seg ? (chunked ? "seg_c.h5" : "seg.h5") : (chunked ? "reg_c.h5" : "reg.h5"));
      write_volume(p, seg, chunked);
      tsr_loader *l = open_ok(p, 0);
      tsr_shape xs, ys;
      tsr_loader_input_dims(l, &xs);
      tsr_loader_target_dims(l, &ys);
      ck_assert(xs.ndim == 4 && xs.dims[0] == C && xs.dims[1] == D && xs.dims[2] == H && xs.dims[3] == W);
      ck_assert(seg ? ys.ndim == 4 && ys.dims[0] == TC && ys.dims[1] == D : ys.ndim == 3 && ys.dims[1] == 1);
      int c, h, w;
      tsr_loader_input_shape(l, &c, &h, &w); /* the three-value form folds D into H */
      ck_assert(c == C && h == D * H && w == W);
      float whole[C * D * H * W];
      ck_assert_int_eq(tsr_loader_read(l, 3, whole, NULL), TSR_OK);
      ck_assert(whole[((1 * D + 2) * H + 5) * W + 6] == xval(3, 1, 2, 5, 6));
      check_boxes(l, seg);
      tsr_loader_close(l);
      /* standardised: a box is the standardised sample cut */
      l = open_ok(p, 1);
      check_boxes(l, seg);
      tsr_loader_close(l);
    }
}
END_TEST

/* Under a 2-way split along D, each rank of 2 reads its shard's samples as two half-boxes; together
 * they are the whole samples, and no read returns more than its half. */
START_TEST(half_boxes_of_a_shard_rebuild_its_samples) {
  char *p = tt_path_in(tt_tmpdir(), "shard.h5");
  write_volume(p, 1, 1);
  tsr_loader *l = open_ok(p, 1);
  for (int rank = 0; rank < 2; rank++) {
    int64_t k = tsr_loader_shard_size(N, rank, 2), idx[N];
    ck_assert_int_eq(tsr_loader_epoch_indices(N, 7, 1, rank, 2, idx), TSR_OK);
    for (int64_t i = 0; i < k; i++) {
      float whole[C * D * H * W], rebuilt[C * D * H * W], half[C * D * H * W + 1];
      ck_assert_int_eq(tsr_loader_read(l, idx[i], whole, NULL), TSR_OK);
      for (int part = 0; part < 2; part++) {
        int64_t st[3] = {part * D / 2, 0, 0}, ex[3] = {D / 2, H, W};
        half[C * D / 2 * H * W] = 12345.0f; /* the element after the box stays untouched */
        ck_assert_int_eq(tsr_loader_read_box(l, idx[i], st, ex, half, NULL), TSR_OK);
        ck_assert(half[C * D / 2 * H * W] == 12345.0f);
        for (int c = 0; c < C; c++)
          memcpy(rebuilt + (c * D + part * D / 2) * H * W, half + c * D / 2 * H * W, sizeof(float) * D / 2 * H * W);
      }
      ck_assert_msg(memcmp(whole, rebuilt, sizeof whole) == 0, "rank %d sample %lld: halves differ from the whole",
                    rank, (long long)idx[i]);
    }
  }
  tsr_loader_close(l);
}
END_TEST

/* [C, H, W] samples of a .npy pair: boxes along H and W are cut from memory. */
START_TEST(npy_boxes_equal_the_cut_sample) {
  const char *dir = tt_tmpdir();
  char *xp = strdup(tt_path_in(dir, "x.npy")), *yp = strdup(tt_path_in(dir, "y.npy")), *pair;
  float x[3 * 2 * 5 * 7], y[3];
  for (int i = 0; i < 3 * 2 * 5 * 7; i++) x[i] = (float)i;
  tsr_shape sx = {.ndim = 4, .dims = {3, 2, 5, 7}}, sy = {.ndim = 4, .dims = {3, 1, 1, 1}};
  ck_assert_int_eq(tsr_npy_write(xp, &sx, x), TSR_OK);
  ck_assert_int_eq(tsr_npy_write(yp, &sy, y), TSR_OK);
  ck_assert(asprintf(&pair, "%s:%s", xp, yp) > 0);
  tsr_loader *l = open_ok(pair, 0);
  const int64_t dims[2] = {5, 7}, st[2] = {1, 2}, ex[2] = {3, 4};
  float box[2 * 3 * 4], ref[2 * 3 * 4];
  ck_assert_int_eq(tsr_loader_read_box(l, 2, st, ex, box, NULL), TSR_OK);
  cut(2, 2, dims, x + 2 * 70, st, ex, ref);
  ck_assert(memcmp(box, ref, sizeof box) == 0);
  ck_assert(box[0] == 2 * 70 + 1 * 7 + 2);
  tsr_loader_close(l);
  free(xp), free(yp), free(pair);
}
END_TEST

/* A pool's producer: [2, 6, 8] inputs and targets whose values encode (index, element). */
static tsr_status produce(void *user, int64_t index, float *x, float *y) {
  for (int i = 0; i < 2 * H * W; i++) x[i] = (float)(index * 1000 + i), y[i] = -(float)(index * 1000 + i);
  return TSR_OK;
}

/* A stream: boxes are cut from the produced sample, targets of the same spatial shape boxed too. */
START_TEST(pool_boxes_equal_the_cut_sample) {
  tt_starpu_start(1);
  tsr_sample_producer p = {.name = "box_sample", .c = 2, .h = H, .w = W, .tc = 2, .th = H, .tw = W,
                           .produce = produce};
  tsr_pool_opts o;
  tsr_pool_opts_default(&o);
  o.slots = 4, o.stats_samples = 0;
  tsr_loader *l;
  ck_assert_msg(tsr_loader_open_pool(&l, &p, &o) == TSR_OK, "%s", tsr_last_error());
  float x[2 * H * W], y[2 * H * W], bx[2 * H * W], by[2 * H * W], ref[2 * H * W];
  const int64_t dims[2] = {H, W}, st[2] = {2, 3}, ex[2] = {3, 4};
  ck_assert_int_eq(tsr_loader_read(l, 5, x, y), TSR_OK);
  ck_assert_msg(tsr_loader_read_box(l, 5, st, ex, bx, by) == TSR_OK, "%s", tsr_last_error());
  cut(2, 2, dims, x, st, ex, ref);
  ck_assert(memcmp(bx, ref, sizeof(float) * 2 * 3 * 4) == 0);
  cut(2, 2, dims, y, st, ex, ref);
  ck_assert(memcmp(by, ref, sizeof(float) * 2 * 3 * 4) == 0);
  ck_assert(bx[0] == 5000 + 2 * W + 3);
  tsr_loader_close(l);
  tt_starpu_stop();
}
END_TEST

static void expect_box_error(tsr_loader *l, const int64_t *st, const int64_t *ex, const char *a, const char *b) {
  float buf[C * D * H * W];
  ck_assert_int_eq(tsr_loader_read_box(l, 0, st, ex, buf, NULL), TSR_ERR_ARG);
  const char *e = tsr_last_error();
  ck_assert_msg(strstr(e, a) && (!b || strstr(e, b)), "message '%s' lacks '%s' or '%s'", e, a, b ? b : "");
}

START_TEST(boxes_outside_the_sample_and_mixed_ranks_are_refused) {
  const char *dir = tt_tmpdir();
  char *p = strdup(tt_path_in(dir, "v.h5")), *flat = strdup(tt_path_in(dir, "flat.h5")), *spec;
  write_volume(p, 0, 1);
  tsr_loader *l = open_ok(p, 0);
  const int64_t zero[3] = {0, 0, 0}, full[3] = {D, H, W};
  expect_box_error(l, (int64_t[]){0, 4, 0}, (int64_t[]){D, 3, W}, "box axis 1 (H)", "start 4 with extent 3");
  expect_box_error(l, (int64_t[]){-1, 0, 0}, full, "box axis 0 (D)", "start -1");
  expect_box_error(l, zero, (int64_t[]){D, H, 0}, "box axis 2 (W)", "extent 0");
  expect_box_error(l, NULL, full, "without start", NULL);
  float buf[C * D * H * W];
  ck_assert_int_eq(tsr_loader_read_box(l, N, zero, full, buf, NULL), TSR_ERR_ARG);
  ck_assert(strstr(tsr_last_error(), "out of range"));
  tsr_loader_close(l);
  /* a [C, H, W] file after a [C, D, H, W] one */
  hid_t f = H5Fcreate(flat, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t d4[4] = {2, C, H, W}, t4[4] = {2, TC, 1, 1};
  float zeros[2 * C * H * W] = {0};
  hid_t s1 = H5Screate_simple(4, d4, NULL), s2 = H5Screate_simple(4, t4, NULL);
  hid_t a = H5Dcreate2(f, "inputs", H5T_IEEE_F32LE, s1, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t b = H5Dcreate2(f, "targets", H5T_IEEE_F32LE, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(a, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros);
  H5Dwrite(b, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros);
  H5Dclose(a), H5Dclose(b), H5Sclose(s1), H5Sclose(s2), H5Fclose(f);
  ck_assert(asprintf(&spec, "%s,%s", p, flat) > 0);
  tsr_loader_opts o;
  tsr_loader_opts_default(&o);
  tsr_loader *bad = (tsr_loader *)1;
  ck_assert_int_eq(tsr_loader_open(&bad, spec, &o), TSR_ERR_SHAPE);
  ck_assert(bad == NULL);
  const char *e = tsr_last_error();
  ck_assert_msg(strstr(e, "flat.h5") && strstr(e, "[2, 6, 8]") && strstr(e, "[2, 4, 6, 8]"), "%s", e);
  free(p), free(flat), free(spec);
}
END_TEST

static Suite *make_loader3d_suite(void) {
  Suite *s = suite_create("loader3d");
  TCase *t = tcase_create("boxes");
  tcase_add_test(t, boxes_of_3d_samples_equal_the_cut_sample);
  tcase_add_test(t, half_boxes_of_a_shard_rebuild_its_samples);
  tcase_add_test(t, npy_boxes_equal_the_cut_sample);
  tcase_add_test(t, pool_boxes_equal_the_cut_sample);
  tcase_add_test(t, boxes_outside_the_sample_and_mixed_ranks_are_refused);
  suite_add_tcase(s, t);
  return s;
}

TT_MAIN(make_loader3d_suite)

/* Suite "spatial": the pieces of spatial partitioning that need no second rank. The box copies of
 * halo packing and gathering against direct indexing; the ordered group sum; the plan's blocks and
 * halos, checked by running each layer's kernel on every block's halo'd input (built directly
 * from the whole input, the padding value outside it) and comparing with the block of the whole
 * output (float32 kernels on the same values in the same order: equal within 1e-6); and shapes
 * that cannot be split refused with an error naming the layer. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "box_copy.h"
#include "codelets.h"
#include "train/spatial.h"
#include "testutil.h"

START_TEST(box_copy_packs_unpacks_adds_and_fills) {
  enum { O = 2, H = 5, W = 7 };
  float src[O * H * W], dst[O * 4 * 6];
  for (int i = 0; i < O * H * W; i++) src[i] = (float)i;
  struct _tsr_box_desc d = {.outer = O,
                            .nd = 2,
                            .src_ext = {H, W},
                            .dst_ext = {4, 6},
                            .src_lo = {1, 2},
                            .dst_lo = {2, 1},
                            .len = {2, 3},
                            .scale = 2.0f,
                            .fill = 1,
                            .value = -1.0f};
  _tsr_box_copy_cpu(&d, src, dst);
  for (int o = 0; o < O; o++)
    for (int y = 0; y < 4; y++)
      for (int x = 0; x < 6; x++) {
        int in = y >= 2 && y < 4 && x >= 1 && x < 4;
        float want = in ? 2.0f * src[(o * H + y - 2 + 1) * W + x - 1 + 2] : -1.0f;
        ck_assert_msg(dst[(o * 4 + y) * 6 + x] == want, "box copy at (%d, %d, %d): %g, want %g", o, y, x,
                      dst[(o * 4 + y) * 6 + x], want);
      }
  d.fill = 0, d.add = 1, d.scale = 1.0f;
  _tsr_box_copy_cpu(&d, src, dst);
  ck_assert_float_eq(dst[(1 * 4 + 3) * 6 + 3], 3.0f * src[(1 * H + 2) * W + 4]);
  ck_assert_float_eq(dst[0], -1.0f);
}
END_TEST

START_TEST(ordered_sum_is_the_same_whichever_member_holds_the_accumulator) {
  double a[3] = {1e16, 1, -1e16}, b[3] = {1, 1e16, 2}, c[3] = {-1e16, 3, 1e16};
  double out[3][3];
  for (int own = 0; own < 3; own++) {
    double *v[3] = {a, b, c}, acc[3];
    memcpy(acc, v[own], sizeof acc);
    const double *parts[3] = {a, b, c};
    _tsr_sum_doubles_cpu(3, own, parts, acc, 3);
    memcpy(out[own], acc, sizeof acc);
  }
  for (int own = 1; own < 3; own++) ck_assert_msg(!memcmp(out[0], out[own], sizeof out[0]), "member %d differs", own);
  ck_assert_double_eq(out[0][0], (1e16 + 1) - 1e16); /* member order, not sorted */
}
END_TEST

static tsr_model *model_of(const char *name) {
  tsr_model *m;
  ck_assert_int_eq(tsr_model_create(&m, name), TSR_OK);
  return m;
}

static void add(tsr_model *m, const char *name, tsr_layer_kind kind, const char *in, int co, int k, int s, int p) {
  tsr_layer_spec sp = tsr_layer_spec_default(kind);
  sp.out_channels = co, sp.kernel_h = sp.kernel_w = k, sp.stride_h = sp.stride_w = s, sp.pad_h = sp.pad_w = p;
  ck_assert_msg(tsr_model_add(m, name, &sp, &in, 1) == TSR_OK, "%s: %s", name, tsr_last_error());
}

/* Input 0's halo'd block of `part`, built from the whole input x [C, H, W] (one sample). */
static void halo_block(const struct _tsr_layer *I, const struct _tsr_sp_layer *P, const struct _tsr_sp_layer *PI,
                       const float *x, float pad, float *xh) {
  for (int c = 0; c < I->c; c++)
    for (int y = 0; y < P->in.h; y++)
      for (int z = 0; z < P->in.w; z++) {
        int gy = PI->first[0] - P->lo[0] + y, gz = PI->first[1] - P->lo[1] + z;
        int in = gy >= 0 && gy < I->h && gz >= 0 && gz < I->w;
        xh[(c * P->in.h + y) * P->in.w + z] = in ? x[(c * I->h + gy) * I->w + gz] : pad;
      }
}

/* Runs the window layer l of m whole and on every block of the grid; the blocks' outputs must be
 * the whole output's. */
static void check_blocks(tsr_model *m, int l, const int *grid) {
  const struct _tsr_layer *L = &m->layers[l], *I = &m->layers[L->inputs[0]];
  int parts = grid[0] * grid[1];
  size_t nx = (size_t)I->c * I->h * I->w, ny = (size_t)L->c * L->h * L->w;
  float *x = malloc(nx * 4), *y = malloc(ny * 4), *xh = malloc(nx * 16), *yb = malloc(ny * 4);
  tt_fill_uniform(x, nx, 7 + l, -1, 1);
  const tsr_layer_spec *s = &L->spec;
  int pool = s->kind == TSR_LAYER_MAXPOOL2D || s->kind == TSR_LAYER_AVGPOOL2D;
  float *w = NULL;
  struct _tsr_conv_desc cd = {.n = 1,
                              .ci = I->c,
                              .h = I->h,
                              .w = I->w,
                              .co = L->c,
                              .oh = L->h,
                              .ow = L->w,
                              .kh = s->kernel_h,
                              .kw = s->kernel_w,
                              .sh = s->stride_h,
                              .sw = s->stride_w,
                              .ph = s->pad_h,
                              .pw = s->pad_w,
                              .dh = 1,
                              .dw = 1};
  struct _tsr_pool_desc pd = {.n = 1,
                              .c = I->c,
                              .h = I->h,
                              .w = I->w,
                              .oh = L->h,
                              .ow = L->w,
                              .kh = s->kernel_h,
                              .kw = s->kernel_w,
                              .sh = s->stride_h,
                              .sw = s->stride_w,
                              .ph = s->pad_h,
                              .pw = s->pad_w,
                              .is_max = s->kind == TSR_LAYER_MAXPOOL2D};
  char ws[1 << 16];
  if (!pool) {
    size_t nw = (size_t)L->c * I->c * s->kernel_h * s->kernel_w;
    w = malloc(nw * 4);
    tt_fill_uniform(w, nw, 3, -1, 1);
    _tsr_conv2d_fwd_cpu(&cd, x, w, NULL, y);
  } else {
    ck_assert(_tsr_pool_ws_bytes(&pd) <= sizeof ws);
    _tsr_pool_fwd_cpu(&pd, x, y, ws);
  }
  struct _tsr_sp_layer plan[m->n];
  for (int part = 0; part < parts; part++) {
    ck_assert_msg(_tsr_spatial_plan(m, 2, grid, part, plan) == TSR_OK, "%s", tsr_last_error());
    const struct _tsr_sp_layer *P = &plan[l];
    ck_assert(P->window && P->split);
    halo_block(I, P, &plan[L->inputs[0]], x, pd.is_max ? -FLT_MAX : 0.0f, xh);
    const tsr_layer_spec *ls = &P->spec;
    if (!pool) {
      struct _tsr_conv_desc b = cd;
      b.h = P->in.h, b.w = P->in.w, b.oh = P->out.h, b.ow = P->out.w, b.ph = ls->pad_h, b.pw = ls->pad_w;
      _tsr_conv2d_fwd_cpu(&b, xh, w, NULL, yb);
    } else {
      struct _tsr_pool_desc b = pd;
      b.h = P->in.h, b.w = P->in.w, b.oh = P->out.h, b.ow = P->out.w, b.ph = ls->pad_h, b.pw = ls->pad_w;
      ck_assert(_tsr_pool_ws_bytes(&b) <= sizeof ws);
      _tsr_pool_fwd_cpu(&b, xh, yb, ws);
    }
    for (int c = 0; c < L->c; c++)
      for (int i = 0; i < P->out.h; i++)
        for (int j = 0; j < P->out.w; j++) {
          float got = yb[(c * P->out.h + i) * P->out.w + j];
          float want = y[(c * L->h + P->first[0] + i) * L->w + P->first[1] + j];
          ck_assert_msg(fabsf(got - want) <= 1e-6f * (1 + fabsf(want)),
                        "layer '%s', grid %dx%d, part %d, output (%d, %d, %d): %g, whole %g", L->name, grid[0], grid[1],
                        part, c, i, j, got, want);
        }
  }
  free(x), free(y), free(xh), free(yb), free(w);
}

/* in [2, 16, 16] -> conv 'a' 3x3 pad 1 -> max 'p' 2x2 -> conv 'b' 3x3 stride 2 pad 1 -> max 'q' 3x3
 * stride 1 pad 1 -> avg 'r' 3x3 stride 1 pad 1 -> flatten -> dense */
static tsr_model *window_model(void) {
  tsr_model *m = model_of("windows");
  ck_assert_int_eq(tsr_model_add_input(m, "in", 2, 16, 16), TSR_OK);
  add(m, "a", TSR_LAYER_CONV2D, "in", 3, 3, 1, 1);
  add(m, "p", TSR_LAYER_MAXPOOL2D, "a", 0, 2, 2, 0);
  add(m, "b", TSR_LAYER_CONV2D, "p", 4, 3, 2, 1);
  add(m, "q", TSR_LAYER_MAXPOOL2D, "b", 0, 3, 1, 1);
  add(m, "r", TSR_LAYER_AVGPOOL2D, "q", 0, 3, 1, 1);
  add(m, "f", TSR_LAYER_FLATTEN, "r", 0, 0, 1, 0);
  add(m, "d", TSR_LAYER_DENSE, "f", 2, 0, 1, 0);
  return m;
}

START_TEST(blocks_of_window_layers_equal_the_whole_layer) {
  tsr_model *m = window_model();
  static const int grids[][2] = {{2, 1}, {4, 1}, {2, 2}, {1, 4}};
  for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++)
    for (int l = 1; l <= 5; l++) check_blocks(m, l, grids[g]);
  tsr_model_destroy(m);
}
END_TEST

START_TEST(plan_gathers_before_the_head_and_sizes_halos) {
  tsr_model *m = window_model();
  struct _tsr_sp_layer plan[8];
  ck_assert_int_eq(_tsr_spatial_plan(m, 2, (int[]){4, 1}, 1, plan), TSR_OK);
  ck_assert(plan[0].split && plan[0].own[0] == 4 && plan[0].first[0] == 4 && plan[0].own[1] == 16);
  ck_assert(plan[1].lo[0] == 1 && plan[1].hi[0] == 1 && plan[1].lo[1] == 0 && plan[1].spec.pad_h == 0 &&
            plan[1].spec.pad_w == 1);
  ck_assert(plan[2].lo[0] == 0 && plan[2].hi[0] == 0); /* 2x2 stride 2: no halo */
  ck_assert(plan[3].lo[0] == 1 && plan[3].hi[0] == 0); /* 3x3 stride 2 pad 1 */
  ck_assert(plan[6].gather && !plan[6].split && !plan[7].split && plan[6].in.h == 4);
  tsr_model_destroy(m);
}
END_TEST

static void expect_refusal_nd(tsr_model *m, int nd, const int *grid, const char *words) {
  struct _tsr_sp_layer plan[16];
  tsr_status st = _tsr_spatial_plan(m, nd, grid, 0, plan);
  ck_assert_msg(st == TSR_ERR_SHAPE, "grid %dx%d accepted (%d)", grid[0], grid[1], st);
  ck_assert_msg(strstr(tsr_last_error(), words), "'%s' does not name %s", tsr_last_error(), words);
}

static void expect_refusal(tsr_model *m, const int *grid, const char *words) { expect_refusal_nd(m, 2, grid, words); }

START_TEST(plan_keeps_upscaling_layers_and_the_output_split) {
  tsr_model *m = model_of("no_head"); /* fully convolutional: the output stays split, gathered for the loss */
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, 8, 8), TSR_OK);
  add(m, "a", TSR_LAYER_CONV2D, "in", 2, 3, 1, 1);
  add(m, "u", TSR_LAYER_CONV_TRANSPOSE2D, "a", 2, 2, 2, 0);
  add(m, "o", TSR_LAYER_CONV2D, "u", 1, 3, 1, 1);
  struct _tsr_sp_layer plan[4];
  ck_assert_msg(_tsr_spatial_plan(m, 2, (int[]){2, 1}, 1, plan) == TSR_OK, "%s", tsr_last_error());
  ck_assert(plan[2].split && !plan[2].window && !plan[2].gather && plan[2].own[0] == 8 && plan[2].first[0] == 8);
  ck_assert(plan[2].out.h == 8 && plan[2].out.w == 16);
  ck_assert(plan[3].split && plan[3].window && plan[3].own[0] == 8 && plan[3].lo[0] == 1 && plan[3].hi[0] == 1);
  tsr_model_destroy(m);
}
END_TEST

START_TEST(shapes_that_cannot_be_split_are_refused_naming_the_layer) {
  tsr_model *m = model_of("odd");
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, 10, 8), TSR_OK);
  add(m, "c", TSR_LAYER_CONV2D, "in", 2, 3, 1, 1);
  add(m, "f", TSR_LAYER_FLATTEN, "c", 0, 0, 1, 0);
  expect_refusal(m, (int[]){4, 1}, "input 'in': output height 10");
  tsr_model_destroy(m);

  m = model_of("strided"); /* 4 outputs split in 2, but blocks of 12 rows are no multiple of the stride 5 */
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, 24, 8), TSR_OK);
  add(m, "s", TSR_LAYER_CONV2D, "in", 2, 5, 5, 0);
  add(m, "f", TSR_LAYER_FLATTEN, "s", 0, 0, 1, 0);
  expect_refusal(m, (int[]){2, 1}, "conv2d 's': height 24 in 2 blocks of 12 with kernel 5, stride 5");
  tsr_model_destroy(m);

  m = model_of("wide"); /* a 7x7 kernel's halo of 3 exceeds blocks of 2 */
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, 8, 8), TSR_OK);
  add(m, "k", TSR_LAYER_CONV2D, "in", 2, 7, 1, 3);
  add(m, "f", TSR_LAYER_FLATTEN, "k", 0, 0, 1, 0);
  expect_refusal(m, (int[]){4, 1}, "conv2d 'k': halos of 3 and 3");
  tsr_model_destroy(m);

  m = model_of("overlap"); /* a transposed convolution whose windows overlap would need halos of its output */
  ck_assert_int_eq(tsr_model_add_input(m, "in", 1, 8, 8), TSR_OK);
  tsr_layer_spec u = tsr_layer_spec_default(TSR_LAYER_CONV_TRANSPOSE2D);
  u.out_channels = 1, u.kernel_h = u.kernel_w = 3, u.stride_h = u.stride_w = 2, u.pad_h = u.pad_w = 1;
  u.output_pad_h = u.output_pad_w = 1;
  const char *uin = "in";
  ck_assert_int_eq(tsr_model_add(m, "u", &u, &uin, 1), TSR_OK);
  expect_refusal(m, (int[]){2, 1}, "conv_transpose2d 'u': height 16 from 8 with kernel 3, stride 2, padding 1");
  tsr_model_destroy(m);

  m = model_of("deep"); /* 3-D: depth 24 in 2 blocks of 12, which a 5x5x5 pooling of stride 5 does not align */
  tsr_layer_spec in = tsr_layer_spec_default(TSR_LAYER_INPUT);
  in.channels = 1, in.depth = 24, in.height = 10, in.width = 10;
  ck_assert_int_eq(tsr_model_add(m, "in", &in, NULL, 0), TSR_OK);
  tsr_layer_kind kd;
  ck_assert_int_eq(tsr_layer_kind_parse("maxpool3d", &kd), TSR_OK);
  tsr_layer_spec p = tsr_layer_spec_default(kd);
  p.kernel_d = p.kernel_h = p.kernel_w = p.stride_d = p.stride_h = p.stride_w = 5;
  const char *pin = "in", *fin = "p3";
  ck_assert_int_eq(tsr_model_add(m, "p3", &p, &pin, 1), TSR_OK);
  tsr_layer_spec f = tsr_layer_spec_default(TSR_LAYER_FLATTEN);
  ck_assert_int_eq(tsr_model_add(m, "f", &f, &fin, 1), TSR_OK);
  expect_refusal_nd(m, 3, (int[]){2, 1, 1}, "maxpool3d 'p3': depth 24 in 2 blocks of 12 with kernel 5, stride 5");
  tsr_model_destroy(m);
}
END_TEST

/* A 3-D layer of kind `kind`: cubic kernel k, padding p, stride 1 (pooling: stride k, no padding). */
static void add3(tsr_model *m, const char *name, const char *kind, const char *in, int co, int k, int p) {
  tsr_layer_kind kd;
  ck_assert_int_eq(tsr_layer_kind_parse(kind, &kd), TSR_OK);
  tsr_layer_spec sp = tsr_layer_spec_default(kd);
  int pool = strstr(kind, "pool") != NULL;
  sp.out_channels = co, sp.kernel_d = sp.kernel_h = sp.kernel_w = k;
  sp.stride_d = sp.stride_h = sp.stride_w = pool ? k : 1, sp.pad_d = sp.pad_h = sp.pad_w = p;
  ck_assert_msg(tsr_model_add(m, name, &sp, &in, 1) == TSR_OK, "%s: %s", name, tsr_last_error());
}

/* How the plan runs window layers: pooling of kernel = stride (no halos) on the block itself; a conv3d
 * with halos along one axis from edge slabs (3 planes of its input block each; the gradient only
 * towards a neighbour) where they take less memory than a halo'd copy and its gradient (blocks of 8
 * and 4 planes with one neighbour: 9 planes of slabs against 20 or 12), a copy for blocks of 2
 * planes (9 > 8) and for halos along two axes where the blocks are small (8 x 4: 2016 values of slabs
 * against 1920), slabs along both axes for blocks of 8 x 8; where CUDA workers exist, copies. */
START_TEST(plan_runs_windows_on_blocks_edge_slabs_or_copies) {
  tsr_model *m = model_of("edges");
  tsr_layer_spec in = tsr_layer_spec_default(TSR_LAYER_INPUT);
  in.channels = 2, in.depth = 16, in.height = 8, in.width = 8;
  ck_assert_int_eq(tsr_model_add(m, "in", &in, NULL, 0), TSR_OK);
  add3(m, "c", "conv3d", "in", 4, 3, 1);   /* 1 */
  add3(m, "p", "maxpool3d", "c", 0, 2, 0); /* 2: [4, 8, 4, 4] */
  add3(m, "d", "conv3d", "p", 4, 3, 1);    /* 3 */
  add3(m, "q", "maxpool3d", "d", 0, 2, 0); /* 4: [4, 4, 2, 2] */
  add3(m, "e", "conv3d", "q", 2, 3, 1);    /* 5 */
  int cpu = !(starpu_is_initialized() && starpu_cuda_worker_get_count() > 0);
  struct _tsr_sp_layer plan[6];
  for (int part = 0; part < 2; part++) {
    ck_assert_msg(_tsr_spatial_plan(m, 3, (int[]){2, 1, 1}, part, plan) == TSR_OK, "%s", tsr_last_error());
    ck_assert(plan[2].direct && plan[4].direct && !plan[2].edges && !plan[4].edges);
    ck_assert(plan[1].edges == cpu && plan[3].edges == cpu && !plan[5].edges && !plan[5].direct);
    if (!cpu) continue;
    ck_assert(plan[1].edge_len[0][0] == 2 * 3 * 8 * 8 && plan[1].edge_len[0][1] == 2 * 3 * 8 * 8);
    ck_assert(!plan[1].edge_len[1][0] && !plan[1].edge_len[2][0]);
    ck_assert(plan[1].dedge_len[0][part] == 0 && plan[1].dedge_len[0][1 - part] == 2 * 3 * 8 * 8);
    ck_assert(plan[3].edge_len[0][0] == 4 * 3 * 4 * 4 && plan[5].edge_len[0][0] == 0 &&
              plan[5].dedge_len[0][1 - part] == 0);
  }
  ck_assert_int_eq(_tsr_spatial_plan(m, 3, (int[]){2, 2, 1}, 3, plan), TSR_OK);
  ck_assert(!plan[1].edges && !plan[1].direct && plan[2].direct); /* 2016 values of slabs > 1920 */
  ck_assert_int_eq(_tsr_spatial_plan(m, 3, (int[]){1, 2, 1}, 1, plan), TSR_OK);
  ck_assert(plan[1].edges == cpu && (!cpu || (plan[1].edge_len[1][0] == 2 * 16 * 3 * 8 && !plan[1].edge_len[0][0])));
  tsr_model_destroy(m);
  /* halos along D and H, blocks of 8 x 8: slabs of 3 D planes of the 8 x 4 block (2 + 1 with a
   * gradient), then of 3 H planes spanning D's halos (10 x 4): 1296 values against 1600; the edge
   * along D has no neighbour's gradient below for member 0, the one along H none above for member 1 */
  m = model_of("edges2");
  in.height = 16, in.width = 4;
  ck_assert_int_eq(tsr_model_add(m, "in", &in, NULL, 0), TSR_OK);
  add3(m, "c", "conv3d", "in", 4, 3, 1);
  ck_assert_int_eq(_tsr_spatial_plan(m, 3, (int[]){2, 2, 1}, 1, plan), TSR_OK);
  ck_assert(plan[1].edges == cpu);
  if (cpu) {
    ck_assert(plan[1].edge_len[0][0] == 2 * 3 * 8 * 4 && plan[1].edge_len[0][1] == 2 * 3 * 8 * 4);
    ck_assert(plan[1].edge_len[1][0] == 2 * 10 * 3 * 4 && plan[1].edge_len[1][1] == 2 * 10 * 3 * 4);
    ck_assert(plan[1].dedge_len[0][0] == 0 && plan[1].dedge_len[0][1] == 2 * 3 * 8 * 4);
    ck_assert(plan[1].dedge_len[1][0] == 2 * 10 * 3 * 4 && plan[1].dedge_len[1][1] == 0 && !plan[1].edge_len[2][0]);
  }
  tsr_model_destroy(m);
}
END_TEST

static Suite *make_spatial_suite(void) {
  Suite *s = suite_create("spatial");
  TCase *k = tcase_create("plan");
  tcase_add_test(k, box_copy_packs_unpacks_adds_and_fills);
  tcase_add_test(k, plan_keeps_upscaling_layers_and_the_output_split);
  tcase_add_test(k, ordered_sum_is_the_same_whichever_member_holds_the_accumulator);
  tcase_add_test(k, blocks_of_window_layers_equal_the_whole_layer);
  tcase_add_test(k, plan_gathers_before_the_head_and_sizes_halos);
  tcase_add_test(k, shapes_that_cannot_be_split_are_refused_naming_the_layer);
  tcase_add_test(k, plan_runs_windows_on_blocks_edge_slabs_or_copies);
  suite_add_tcase(s, k);
  return s;
}

TT_MAIN(make_spatial_suite)

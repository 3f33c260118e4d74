/* Model builder: DAG construction, shape inference, errors that name the layer and shapes, sizes
 * beyond int or 64-bit byte counts refused, the layer registry; and where the memory limit comes
 * from. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <tessera.h>

#include "runtime/memory.h"
#include "layers/layer.h"
#include "testutil.h"

static tsr_model *m;

static void setup(void) {
  ck_assert_int_eq(tsr_model_create(&m, "t"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(m, "in", 3, 32, 32), TSR_OK);
}
static void teardown(void) { tsr_model_destroy(m); }

static void shape_is(const char *layer, int c, int h, int w) {
  int C, H, W;
  ck_assert_int_eq(tsr_model_layer_shape(m, layer, &C, &H, &W), TSR_OK);
  ck_assert_msg(C == c && H == h && W == w, "%s: got [%d, %d, %d], expected [%d, %d, %d]", layer, C, H, W, c, h, w);
}

START_TEST(conv_pool_deconv_shapes_follow_pytorch) {
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c1", "in", 8, 3, 1, 1), TSR_OK);
  shape_is("c1", 8, 32, 32);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c2", "c1", 8, 3, 2, 1), TSR_OK);
  shape_is("c2", 8, 16, 16);
  tsr_layer_spec p = tsr_layer_spec_default(TSR_LAYER_MAXPOOL2D);
  p.kernel_h = p.kernel_w = 2;
  const char *c2 = "c2";
  ck_assert_int_eq(tsr_model_add(m, "p", &p, &c2, 1), TSR_OK);
  shape_is("p", 8, 8, 8);
  tsr_layer_spec d = tsr_layer_spec_default(TSR_LAYER_CONV_TRANSPOSE2D);
  d.out_channels = 4, d.kernel_h = d.kernel_w = 3, d.stride_h = d.stride_w = 2, d.pad_h = d.pad_w = 1;
  d.output_pad_h = d.output_pad_w = 1;
  const char *pp = "p";
  ck_assert_int_eq(tsr_model_add(m, "up", &d, &pp, 1), TSR_OK);
  shape_is("up", 4, 16, 16); /* (8-1)*2 - 2 + 3 + 1 */
  tsr_layer_spec dil = tsr_layer_spec_default(TSR_LAYER_CONV2D);
  dil.out_channels = 2, dil.kernel_h = dil.kernel_w = 3, dil.dilation_h = dil.dilation_w = 2;
  const char *in = "in";
  ck_assert_int_eq(tsr_model_add(m, "dil", &dil, &in, 1), TSR_OK);
  shape_is("dil", 2, 28, 28);
}
END_TEST

START_TEST(concat_skip_connection_adds_channels) {
  ck_assert_int_eq(tsr_model_add_conv2d(m, "a", "in", 5, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(m, "r", TSR_LAYER_RELU, "a"), TSR_OK);
  const char *ins[] = {"in", "a", "r"};
  tsr_layer_spec c = tsr_layer_spec_default(TSR_LAYER_CONCAT);
  ck_assert_int_eq(tsr_model_add(m, "cat", &c, ins, 3), TSR_OK);
  shape_is("cat", 13, 32, 32);
  const char *ab[] = {"a", "r"};
  tsr_layer_spec s = tsr_layer_spec_default(TSR_LAYER_ADD);
  ck_assert_int_eq(tsr_model_add(m, "sum", &s, ab, 2), TSR_OK);
  shape_is("sum", 5, 32, 32);
  ck_assert_int_eq(tsr_model_num_layers(m), 5);
  ck_assert_int_eq(tsr_model_num_params(m), 5 * 3 * 9 + 5);
}
END_TEST

START_TEST(concat_of_different_sizes_names_layer_and_shapes) {
  ck_assert_int_eq(tsr_model_add_conv2d(m, "down", "in", 4, 2, 2, 0), TSR_OK);
  const char *ins[] = {"in", "down"};
  tsr_layer_spec c = tsr_layer_spec_default(TSR_LAYER_CONCAT);
  ck_assert_int_eq(tsr_model_add(m, "bad", &c, ins, 2), TSR_ERR_SHAPE);
  const char *e = tsr_last_error();
  ck_assert_msg(strstr(e, "'bad'") && strstr(e, "[4, 16, 16]") && strstr(e, "[3, 32, 32]"), "message: %s", e);
  ck_assert_int_eq(tsr_model_num_layers(m), 2);
}
END_TEST

START_TEST(dense_needs_flatten_and_kernel_larger_than_input_fails) {
  tsr_layer_spec d = tsr_layer_spec_default(TSR_LAYER_DENSE);
  d.out_channels = 10;
  const char *in = "in";
  ck_assert_int_eq(tsr_model_add(m, "fc", &d, &in, 1), TSR_ERR_SHAPE);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "flatten"));
  ck_assert_int_eq(tsr_model_add_simple(m, "flat", TSR_LAYER_FLATTEN, "in"), TSR_OK);
  shape_is("flat", 3 * 32 * 32, 1, 1);
  const char *f = "flat";
  ck_assert_int_eq(tsr_model_add(m, "fc", &d, &f, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "huge", "in", 4, 40, 1, 0), TSR_ERR_SHAPE);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "'huge'"));
}
END_TEST

START_TEST(bad_arguments_are_named) {
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c", "nowhere", 4, 3, 1, 1), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "'nowhere'"));
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c", "in", 0, 3, 1, 1), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "out_channels 0"));
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c", "in", 4, 3, 1, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_conv2d(m, "c", "in", 4, 3, 1, 1), TSR_ERR_ARG);
  ck_assert_ptr_nonnull(strstr(tsr_last_error(), "twice"));
  tsr_layer_spec dp = tsr_layer_spec_default(TSR_LAYER_DROPOUT);
  dp.p = 1.0f;
  const char *c = "c";
  ck_assert_int_eq(tsr_model_add(m, "drop", &dp, &c, 1), TSR_ERR_ARG);
  tsr_layer_spec cat = tsr_layer_spec_default(TSR_LAYER_CONCAT);
  ck_assert_int_eq(tsr_model_add(m, "cat1", &cat, &c, 1), TSR_ERR_ARG);
  ck_assert_int_eq(tsr_model_set_output(m, "missing", TSR_LOSS_MSE, 1), TSR_ERR_ARG);
  ck_assert_int_eq(tsr_model_set_output(m, "c", TSR_LOSS_HUBER, 0), TSR_ERR_ARG);
  tsr_layer_kind k;
  ck_assert_int_eq(tsr_layer_kind_parse("conv_transpose2d", &k), TSR_OK);
  ck_assert_int_eq(k, TSR_LAYER_CONV_TRANSPOSE2D);
  ck_assert_int_eq(tsr_layer_kind_parse("conv4d", &k), TSR_ERR_ARG);
}
END_TEST

/* Each would have wrapped around (int or 64-bit products) and been accepted with a wrong size. */
START_TEST(sizes_beyond_int_or_64_bits_are_refused) {
  tsr_model *b;
  ck_assert_int_eq(tsr_model_create(&b, "big"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(b, "cube", 1 << 30, 1 << 30, 1 << 30), TSR_ERR_SHAPE);
  ck_assert_msg(strstr(tsr_last_error(), "'cube'") && strstr(tsr_last_error(), "2^63 bytes"), "%s", tsr_last_error());
  ck_assert_int_eq(tsr_model_add_input(b, "in", 2000000000, 1, 1), TSR_OK);
  /* weight [2e9, 2e9, 3, 3]: 3.6e19 elements, past 2^64 */
  tsr_layer_spec c = tsr_layer_spec_default(TSR_LAYER_CONV2D);
  c.out_channels = 2000000000, c.kernel_h = c.kernel_w = 3, c.pad_h = c.pad_w = 1;
  const char *in = "in";
  ck_assert_int_eq(tsr_model_add(b, "wide", &c, &in, 1), TSR_ERR_SHAPE);
  const char *e = tsr_last_error();
  ck_assert_msg(strstr(e, "'wide'") && strstr(e, "weight [2000000000, 2000000000, 3, 3]"), "%s", e);
  /* padding 2^31 - 1 on each side of 1 pixel: 2^32 - 1 pixels */
  c.out_channels = 1, c.kernel_h = c.kernel_w = 1, c.pad_h = c.pad_w = 2147483647;
  ck_assert_int_eq(tsr_model_add_conv2d(b, "small", "in", 1, 1, 1, 0), TSR_OK);
  const char *sm = "small";
  ck_assert_int_eq(tsr_model_add(b, "padded", &c, &sm, 1), TSR_ERR_SHAPE);
  ck_assert_msg(strstr(tsr_last_error(), "'padded'") && strstr(tsr_last_error(), "4294967295 x 4294967295"), "%s",
                tsr_last_error());
  tsr_model_destroy(b);
  /* flatten of [65536, 65536, 1]: 2^32 features, past int */
  ck_assert_int_eq(tsr_model_create(&b, "flat"), TSR_OK);
  ck_assert_int_eq(tsr_model_add_input(b, "in", 65536, 65536, 1), TSR_OK);
  ck_assert_int_eq(tsr_model_add_simple(b, "f", TSR_LAYER_FLATTEN, "in"), TSR_ERR_SHAPE);
  ck_assert_msg(strstr(tsr_last_error(), "'f'") && strstr(tsr_last_error(), "4294967296 features"), "%s",
                tsr_last_error());
  ck_assert_int_eq(tsr_model_num_layers(b), 1);
  tsr_model_destroy(b);
}
END_TEST

static void write_file(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  for (char *p = path + strlen(dir) + 1; (p = strchr(p, '/')); *p++ = '/') {
    *p = '\0';
    mkdir(path, 0700);
  }
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

static int64_t limit_of(const char *env, tsr_status want, char *src, size_t len) {
  if (env) setenv("TESSERA_MEMORY_LIMIT", env, 1);
  else unsetenv("TESSERA_MEMORY_LIMIT");
  int64_t bytes = -1;
  ck_assert_int_eq(tsr_memory_limit(&bytes, src, len), want);
  return bytes;
}

START_TEST(memory_limit_comes_from_api_environment_or_machine) {
  char src[512];
  ck_assert_int_eq(tsr_memory_set_limit(12345), TSR_OK);
  ck_assert_int_eq(limit_of("1G", TSR_OK, src, sizeof src), 12345); /* the API's value wins */
  ck_assert_str_eq(src, "tsr_memory_set_limit");
  ck_assert_int_eq(tsr_memory_set_limit(-1), TSR_ERR_ARG);
  ck_assert_int_eq(tsr_memory_set_limit(0), TSR_OK);
  ck_assert_int_eq(limit_of("1.5G", TSR_OK, src, sizeof src), 1536ll << 20);
  ck_assert_str_eq(src, "TESSERA_MEMORY_LIMIT");
  ck_assert_int_eq(limit_of("64KiB", TSR_OK, src, sizeof src), 65536);
  ck_assert_int_eq(limit_of("1000", TSR_OK, src, sizeof src), 1000);
  const char *bad[] = {"lots", "0", "-5G", "12X", "1e30"};
  for (int i = 0; i < 5; i++) {
    limit_of(bad[i], TSR_ERR_ARG, src, sizeof src);
    ck_assert_msg(strstr(tsr_last_error(), "TESSERA_MEMORY_LIMIT") && strstr(tsr_last_error(), bad[i]), "%s",
                  tsr_last_error());
  }
  int64_t machine = limit_of(NULL, TSR_OK, src, sizeof src);
  ck_assert(machine > 0 && (uint64_t)machine <= (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE));
}
END_TEST

/* A process in v2 cgroup /job/step and v1 memory cgroup /slurm/job1: the smallest limit on either
 * path or their parents counts; "max" and v1's huge "unlimited" do not. */
START_TEST(cgroup_limit_is_the_smallest_on_the_path) {
  const char *d = tt_tmpdir();
  char proc[512], src[512] = "";
  snprintf(proc, sizeof proc, "%s/cgroup", d);
  write_file(d, "cgroup", "4:cpu,memory:/slurm/job1\n0::/job/step\n");
  ck_assert_uint_eq(_tsr_cgroup_limit(proc, d, src, sizeof src), UINT64_MAX);
  write_file(d, "job/memory.max", "max\n");
  write_file(d, "memory/slurm/job1/memory.limit_in_bytes", "9223372036854771712\n");
  write_file(d, "memory/slurm/memory.limit_in_bytes", "2000000\n");
  ck_assert_uint_eq(_tsr_cgroup_limit(proc, d, src, sizeof src), 2000000);
  ck_assert_msg(strstr(src, "memory/slurm/memory.limit_in_bytes"), "%s", src);
  write_file(d, "unified/job/step/memory.max", "1000000\n");
  ck_assert_uint_eq(_tsr_cgroup_limit(proc, d, src, sizeof src), 1000000);
  ck_assert_msg(strstr(src, "unified/job/step/memory.max"), "%s", src);
  write_file(d, "memory.max", "4096\n"); /* the root of the v2 mount */
  ck_assert_uint_eq(_tsr_cgroup_limit(proc, d, src, sizeof src), 4096);
}
END_TEST

/* The layer registry: the public kinds keep their enum values and names, every index has one
 * complete entry, and names parse back to their index (so names are unique). */
START_TEST(registry_keeps_public_kinds_and_names_round_trip) {
  static const char *const public_names[TSR_LAYER_KIND_COUNT] = {
      "input",   "conv2d",    "conv_transpose2d", "maxpool2d",       "avgpool2d", "relu",  "leaky_relu", "tanh",
      "sigmoid", "batchnorm", "dropout",          "spatial_dropout", "concat",    "add",   "dense",      "flatten"};
  int n = _tsr_layer_kind_count();
  ck_assert_int_ge(n, TSR_LAYER_KIND_COUNT);
  for (int k = 0; k < n; k++) {
    const struct _tsr_layer_ops *e = _tsr_layer_ops_of(k);
    ck_assert_msg(e != NULL, "no registry entry for kind %d", k);
    if (k < TSR_LAYER_KIND_COUNT) ck_assert_str_eq(e->name, public_names[k]);
    ck_assert_msg(k < TSR_LAYER_KIND_COUNT ? e->kind == k : e->kind == TSR_LAYER_REGISTERED,
                  "'%s': kind %d at index %d", e->name, e->kind, k);
    tsr_layer_kind parsed;
    ck_assert_int_eq(tsr_layer_kind_parse(e->name, &parsed), TSR_OK);
    ck_assert_msg((int)parsed == k, "'%s' parses to %d, is at %d", e->name, (int)parsed, k);
    ck_assert_str_eq(tsr_layer_kind_name((tsr_layer_kind)k), e->name);
    ck_assert_msg(e->infer && e->min_inputs <= e->max_inputs && e->max_inputs <= TSR_MAX_INPUTS, "'%s'", e->name);
    ck_assert_msg(!e->num_tensors == !e->tensor && !e->num_state == !e->state, "'%s': half a hook pair", e->name);
    ck_assert_msg(e->max_inputs == 0 || (e->forward && e->backward), "'%s': no forward or backward", e->name);
  }
  ck_assert_ptr_null(_tsr_layer_ops_of(n));
  ck_assert_ptr_null(_tsr_layer_ops_of(-1));
  ck_assert_str_eq(tsr_layer_kind_name((tsr_layer_kind)n), "?");
}
END_TEST

static Suite *make_model_suite(void) {
  Suite *s = suite_create("model");
  TCase *tc = tcase_create("builder");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, conv_pool_deconv_shapes_follow_pytorch);
  tcase_add_test(tc, concat_skip_connection_adds_channels);
  tcase_add_test(tc, concat_of_different_sizes_names_layer_and_shapes);
  tcase_add_test(tc, dense_needs_flatten_and_kernel_larger_than_input_fails);
  tcase_add_test(tc, bad_arguments_are_named);
  tcase_add_test(tc, sizes_beyond_int_or_64_bits_are_refused);
  tcase_add_test(tc, registry_keeps_public_kinds_and_names_round_trip);
  suite_add_tcase(s, tc);
  TCase *mem = tcase_create("memory limit");
  tcase_add_test(mem, memory_limit_comes_from_api_environment_or_machine);
  tcase_add_test(mem, cgroup_limit_is_the_smallest_on_the_path);
  suite_add_tcase(s, mem);
  return s;
}

TT_MAIN(make_model_suite)

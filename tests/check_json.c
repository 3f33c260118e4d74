/* Model files: a valid DAG loads with the right shapes and optimizer; each kind of bad file is
 * rejected with the right status and a message naming the file, the position and the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

#include "testutil.h"

/* Writes `text` to <fresh tmpdir>/<name> and returns the path (static: valid until the next call). */
static const char *write_model(const char *name, const char *text) {
  static char path[256];
  snprintf(path, sizeof path, "%s/%s", tt_tmpdir(), name);
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot create %s", path);
  fputs(text, f);
  fclose(f);
  return path;
}

static void assert_shape(const tsr_model *m, const char *layer, int c, int h, int w) {
  int gc = -1, gh = -1, gw = -1;
  ck_assert_int_eq(tsr_model_layer_shape(m, layer, &gc, &gh, &gw), TSR_OK);
  ck_assert_msg(gc == c && gh == h && gw == w, "layer %s: shape [%d, %d, %d], expected [%d, %d, %d]", layer, gc, gh,
                gw, c, h, w);
}

static const char *unet_mini =
    "{\n"
    "  \"name\": \"unet-mini\",\n"
    "  \"layers\": [\n"
    "    {\"name\": \"in\", \"type\": \"input\", \"shape\": [2, 16, 16]},\n"
    "    {\"name\": \"c1\", \"type\": \"conv2d\", \"out_channels\": 4, \"kernel\": 3, \"padding\": 1},\n"
    "    {\"name\": \"bn1\", \"type\": \"batchnorm\", \"eps\": 1e-3, \"momentum\": 0.2},\n"
    "    {\"name\": \"r1\", \"type\": \"leaky_relu\", \"alpha\": 0.2},\n"
    "    {\"name\": \"p1\", \"type\": \"maxpool2d\", \"kernel\": 2},\n"
    "    {\"name\": \"c2\", \"type\": \"conv2d\", \"out_channels\": 8, \"kernel\": [3, 1], \"padding\": [1, 0]},\n"
    "    {\"name\": \"up\", \"type\": \"conv_transpose2d\", \"out_channels\": 4, \"kernel\": 2, \"stride\": 2},\n"
    "    {\"name\": \"cat\", \"type\": \"concat\", \"inputs\": [\"r1\", \"up\"]},\n"
    "    {\"name\": \"drop\", \"type\": \"spatial_dropout\", \"p\": 0.1},\n"
    "    {\"name\": \"pool\", \"type\": \"avgpool2d\", \"kernel\": 4},\n"
    "    {\"name\": \"flat\", \"type\": \"flatten\"},\n"
    "    {\"name\": \"fc\", \"type\": \"dense\", \"out_features\": 10, \"bias\": false},\n"
    "    {\"name\": \"side\", \"type\": \"tanh\", \"input\": \"c1\"}\n"
    "  ],\n"
    "  \"output\": \"fc\",\n"
    "  \"loss\": {\"type\": \"softmax_cross_entropy\"},\n"
    "  \"optimizer\": {\"type\": \"adamw\", \"lr\": 0.002, \"weight_decay\": 0.0001, \"betas\": [0.8, 0.99], "
    "\"eps\": 1e-7}\n"
    "}\n";

START_TEST(test_valid_dag_loads_with_shapes_and_optimizer) {
  const char *path = write_model("unet.json", unet_mini);
  tsr_model *m = NULL;
  tsr_optim_spec o;
  memset(&o, 0, sizeof o);
  tsr_status s = tsr_model_load_json(&m, &o, path);
  ck_assert_msg(s == TSR_OK, "load failed: %s", tsr_last_error());
  ck_assert_str_eq(tsr_model_name(m), "unet-mini");
  ck_assert_int_eq(tsr_model_num_layers(m), 13);
  assert_shape(m, "in", 2, 16, 16);
  assert_shape(m, "c1", 4, 16, 16);
  assert_shape(m, "p1", 4, 8, 8);
  assert_shape(m, "c2", 8, 8, 8);
  assert_shape(m, "up", 4, 16, 16);
  assert_shape(m, "cat", 8, 16, 16);
  assert_shape(m, "pool", 8, 4, 4);
  assert_shape(m, "flat", 128, 1, 1);
  assert_shape(m, "fc", 10, 1, 1);
  assert_shape(m, "side", 4, 16, 16);

  const tsr_layer_spec *c2 = tsr_model_layer_spec(m, 5);
  ck_assert_int_eq(tsr_model_layer_kind(m, 5), TSR_LAYER_CONV2D);
  ck_assert_int_eq(c2->kernel_h, 3);
  ck_assert_int_eq(c2->kernel_w, 1);
  ck_assert_int_eq(c2->pad_h, 1);
  ck_assert_int_eq(c2->pad_w, 0);
  ck_assert_int_eq(tsr_model_layer_spec(m, 11)->bias, 0);
  ck_assert_int_eq(tsr_model_layer_spec(m, 1)->bias, 1);
  ck_assert_float_eq_tol(tsr_model_layer_spec(m, 2)->eps, 1e-3f, 1e-9f);
  ck_assert_float_eq_tol(tsr_model_layer_spec(m, 2)->momentum, 0.2f, 1e-7f);
  ck_assert_float_eq_tol(tsr_model_layer_spec(m, 3)->alpha, 0.2f, 1e-7f);
  ck_assert_float_eq_tol(tsr_model_layer_spec(m, 8)->p, 0.1f, 1e-7f);
  ck_assert_int_eq(tsr_model_layer_kind(m, 8), TSR_LAYER_SPATIAL_DROPOUT);
  /* weights of the dense layer follow from flatten: 128 inputs, no bias */
  ck_assert_int_eq(tsr_model_num_params(m), (2 * 4 * 9 + 4) + 2 * 4 + (4 * 8 * 3 + 8) + (8 * 4 * 4 + 4) + 128 * 10);

  ck_assert_int_eq(o.kind, TSR_OPTIM_ADAMW);
  ck_assert_float_eq_tol(o.lr, 0.002f, 1e-9f);
  ck_assert_float_eq_tol(o.weight_decay, 1e-4f, 1e-10f);
  ck_assert_float_eq_tol(o.beta1, 0.8f, 1e-7f);
  ck_assert_float_eq_tol(o.beta2, 0.99f, 1e-7f);
  ck_assert_float_eq_tol(o.eps, 1e-7f, 1e-12f);
  tsr_model_destroy(m);
}
END_TEST

START_TEST(test_defaults_when_sections_are_absent) {
  const char *path = write_model("tiny-net.json", "{\"layers\": [\n"
                                                  "  {\"name\": \"x\", \"type\": \"input\", \"shape\": [1, 9, 9]},\n"
                                                  "  {\"name\": \"pool\", \"type\": \"maxpool2d\", \"kernel\": 3},\n"
                                                  "  {\"name\": \"act\", \"type\": \"sigmoid\"}\n"
                                                  "]}\n");
  tsr_model *m = NULL;
  tsr_optim_spec o;
  memset(&o, 0, sizeof o);
  ck_assert_msg(tsr_model_load_json(&m, &o, path) == TSR_OK, "%s", tsr_last_error());
  ck_assert_str_eq(tsr_model_name(m), "tiny-net"); /* from the file name */
  assert_shape(m, "pool", 1, 3, 3);                /* pooling stride defaults to the kernel */
  ck_assert_int_eq(o.kind, TSR_OPTIM_ADAM);
  tsr_optim_spec d = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  ck_assert(o.lr == d.lr && o.beta1 == d.beta1 && o.beta2 == d.beta2 && o.eps == d.eps);
  tsr_model_destroy(m);

  /* the optimizer may be ignored by passing NULL */
  ck_assert_int_eq(tsr_model_load_json(&m, NULL, path), TSR_OK);
  tsr_model_destroy(m);
}
END_TEST

START_TEST(test_sgd_fields_and_huber_delta) {
  const char *path = write_model("sgd.json", "{\"layers\": [{\"name\": \"x\", \"type\": \"input\", \"shape\": [3, 4, 4]},\n"
                                             "  {\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 2, \"kernel\": 1,"
                                             " \"dilation\": 2, \"bias\": true}],\n"
                                             " \"loss\": {\"type\": \"huber\", \"delta\": 0.5},\n"
                                             " \"optimizer\": {\"type\": \"sgd\", \"lr\": 0.1, \"momentum\": 0.5,"
                                             " \"nesterov\": true, \"weight_decay\": 0.001}}\n");
  tsr_model *m = NULL;
  tsr_optim_spec o;
  ck_assert_msg(tsr_model_load_json(&m, &o, path) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(o.kind, TSR_OPTIM_SGD);
  ck_assert_float_eq_tol(o.lr, 0.1f, 1e-9f);
  ck_assert_float_eq_tol(o.momentum, 0.5f, 1e-9f);
  ck_assert_int_eq(o.nesterov, 1);
  ck_assert_float_eq_tol(o.weight_decay, 0.001f, 1e-9f);
  ck_assert_int_eq(tsr_model_layer_spec(m, 1)->dilation_h, 2);
  tsr_model_destroy(m);
}
END_TEST

/* Bad files: the bad layer is layers[1] on line 3 unless the case says otherwise. */
#define HEAD "{\"layers\": [\n  {\"name\": \"in\", \"type\": \"input\", \"shape\": [1, 8, 8]},\n  "
#define TAIL "\n]}\n"
static const struct bad {
  const char *what, *json;
  tsr_status status;
  const char *expect[4];
} bad_cases[] = {
    {"syntax error", "{\"layers\": [\n  {\"name\": \"in\",\n   \"type\": \"input\" \"shape\": [1, 8, 8]}\n]}\n",
     TSR_ERR_FORMAT, {":3:", "syntax"}},
    {"unknown type", HEAD "{\"name\": \"c1\", \"type\": \"conv4d\", \"kernel\": 3}" TAIL, TSR_ERR_FORMAT,
     {":3:", "layers[1] ('c1')", "field 'type'", "conv4d"}},
    {"unknown field", HEAD "{\"name\": \"c1\", \"type\": \"conv2d\", \"out_channels\": 4, \"kernal\": 3}" TAIL,
     TSR_ERR_FORMAT, {":3:", "layers[1] ('c1')", "field 'kernal'", "'conv2d'"}},
    {"field of another type", HEAD "{\"name\": \"r\", \"type\": \"relu\", \"p\": 0.5}" TAIL, TSR_ERR_FORMAT,
     {":3:", "layers[1] ('r')", "field 'p'", "'relu'"}},
    {"missing required field", HEAD "{\"name\": \"mp\", \"type\": \"maxpool2d\", \"stride\": 2}" TAIL, TSR_ERR_FORMAT,
     {":3:", "layers[1] ('mp')", "field 'kernel'", "missing"}},
    {"missing type", HEAD "{\"name\": \"mp\", \"kernel\": 2}" TAIL, TSR_ERR_FORMAT, {"layers[1] ('mp')", "field 'type'", "missing"}},
    {"missing name", HEAD "{\"type\": \"relu\"}" TAIL, TSR_ERR_FORMAT, {"layers[1]", "field 'name'", "missing"}},
    {"bad value type", HEAD "{\"name\": \"enc1\", \"type\": \"conv2d\", \"out_channels\": 4, \"kernel\": \"three\"}" TAIL,
     TSR_ERR_FORMAT, {":3:", "layers[1] ('enc1'): field 'kernel'", "positive integer or [h, w]", "\"three\""}},
    {"zero size", HEAD "{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 0, \"kernel\": 3}" TAIL, TSR_ERR_FORMAT,
     {":3:", "field 'out_channels'", "got 0"}},
    {"negative padding", HEAD "{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 2, \"kernel\": 3, \"padding\": [1, -1]}" TAIL,
     TSR_ERR_FORMAT, {"field 'padding'", "non-negative", "[1,-1]"}},
    {"kernel pair of three", HEAD "{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 2, \"kernel\": [3, 3, 3]}" TAIL,
     TSR_ERR_FORMAT, {"field 'kernel'", "[h, w]"}},
    {"p outside [0,1)", HEAD "{\"name\": \"d\", \"type\": \"dropout\", \"p\": 1.0}" TAIL, TSR_ERR_FORMAT,
     {":3:", "field 'p'", "[0, 1)"}},
    {"bias not a boolean", HEAD "{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 2, \"kernel\": 1, \"bias\": 1}" TAIL,
     TSR_ERR_FORMAT, {"field 'bias'", "true or false"}},
    {"bad input shape", "{\"layers\": [{\"name\": \"in\", \"type\": \"input\", \"shape\": [8, 8]}]}", TSR_ERR_FORMAT,
     {"layers[0] ('in')", "field 'shape'", "[C, H, W]"}},
    {"input layer with an input", HEAD "{\"name\": \"in2\", \"type\": \"input\", \"shape\": [1, 2, 2], \"input\": \"in\"}" TAIL,
     TSR_ERR_FORMAT, {"field 'input'", "'input'"}},
    {"unknown input", HEAD "{\"name\": \"r\", \"type\": \"relu\", \"input\": \"nope\"}" TAIL, TSR_ERR_FORMAT,
     {":3:", "layers[1] ('r')", "field 'input'", "unknown layer 'nope'"}},
    {"unknown name in inputs", HEAD "{\"name\": \"cat\", \"type\": \"concat\", \"inputs\": [\"in\", \"nope\"]}" TAIL,
     TSR_ERR_FORMAT, {"field 'inputs'", "unknown layer 'nope'"}},
    {"input defined later", HEAD "{\"name\": \"a\", \"type\": \"relu\", \"input\": \"b\"},\n  {\"name\": \"b\", \"type\": \"relu\"}" TAIL,
     TSR_ERR_FORMAT, {"layers[1] ('a')", "defined later (layers[2])"}},
    {"input and inputs", HEAD "{\"name\": \"a\", \"type\": \"relu\", \"input\": \"in\", \"inputs\": [\"in\"]}" TAIL,
     TSR_ERR_FORMAT, {"field 'inputs'", "not both"}},
    {"empty inputs", HEAD "{\"name\": \"a\", \"type\": \"concat\", \"inputs\": []}" TAIL, TSR_ERR_FORMAT,
     {"field 'inputs'", "non-empty"}},
    {"first layer without input", "{\"layers\": [{\"name\": \"r\", \"type\": \"relu\"}]}", TSR_ERR_FORMAT,
     {"layers[0] ('r')", "first layer"}},
    {"duplicate names", HEAD "{\"name\": \"r\", \"type\": \"relu\"},\n  {\"name\": \"r\", \"type\": \"tanh\"}" TAIL,
     TSR_ERR_FORMAT, {":4:", "layers[2] ('r')", "duplicate", "layers[1]"}},
    {"concat of different heights", HEAD "{\"name\": \"p\", \"type\": \"maxpool2d\", \"kernel\": 2},\n"
                                         "  {\"name\": \"cat\", \"type\": \"concat\", \"inputs\": [\"in\", \"p\"]}" TAIL,
     TSR_ERR_SHAPE, {":4:", "layers[2] ('cat')", "[1, 8, 8]", "[1, 4, 4]"}},
    {"dense without flatten", HEAD "{\"name\": \"fc\", \"type\": \"dense\", \"out_features\": 3}" TAIL, TSR_ERR_SHAPE,
     {":3:", "layers[1] ('fc')", "flatten"}},
    {"kernel larger than the input", HEAD "{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 1, \"kernel\": 9}" TAIL,
     TSR_ERR_SHAPE, {"layers[1] ('c')", "kernel"}},
    {"line found past a model name equal to a layer name",
     "{\"name\": \"c\",\n \"layers\": [\n  {\"name\": \"in\", \"type\": \"input\", \"shape\": [1, 8, 8]},\n"
     "  {\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 1, \"kernel\": -3}\n]}\n",
     TSR_ERR_FORMAT, {":4:", "layers[1] ('c')", "field 'kernel'"}},
    {"empty layers", "{\"layers\": []}", TSR_ERR_FORMAT, {"field 'layers'", "non-empty"}},
    {"missing layers", "{\"name\": \"m\"}", TSR_ERR_FORMAT, {"field 'layers'", "missing"}},
    {"layer not an object", "{\"layers\": [3]}", TSR_ERR_FORMAT, {"layers[0]", "got 3"}},
    {"top level not an object", "[1, 2]", TSR_ERR_FORMAT, {"top level"}},
    {"unknown top-level field", HEAD "{\"name\": \"r\", \"type\": \"relu\"}\n],\n\"optimiser\": {}}", TSR_ERR_FORMAT,
     {":5:", "field 'optimiser'", "top-level"}},
    {"duplicate key", HEAD "{\"name\": \"r\", \"type\": \"relu\", \"type\": \"tanh\"}" TAIL, TSR_ERR_FORMAT,
     {":3:", "duplicate"}},
    {"unknown output", HEAD "{\"name\": \"r\", \"type\": \"relu\"}\n],\n\"output\": \"nope\"}", TSR_ERR_FORMAT,
     {":5:", "field 'output'", "unknown layer 'nope'"}},
    {"unknown loss", HEAD "{\"name\": \"r\", \"type\": \"relu\"}\n],\n\"loss\": {\"type\": \"hinge\"}}", TSR_ERR_FORMAT,
     {":5:", "loss: field 'type'", "hinge"}},
    {"delta for mse", HEAD "{\"name\": \"r\", \"type\": \"relu\"}\n],\n\"loss\": {\"type\": \"mse\", \"delta\": 1}}",
     TSR_ERR_FORMAT, {"loss: field 'delta'", "'mse'"}},
    {"negative huber delta", HEAD "{\"name\": \"r\", \"type\": \"relu\"}\n],\n\"loss\": {\"type\": \"huber\", \"delta\": -1}}",
     TSR_ERR_FORMAT, {"loss: field 'delta'", "positive"}},
    {"cross entropy on one channel", HEAD "{\"name\": \"r\", \"type\": \"relu\"}\n],\n\"loss\": {\"type\": \"softmax_cross_entropy\"}}",
     TSR_ERR_SHAPE, {"loss", "channels"}},
    {"unknown optimizer", HEAD "{\"name\": \"r\", \"type\": \"relu\"}\n],\n\"optimizer\": {\"type\": \"rmsprop\"}}",
     TSR_ERR_FORMAT, {":5:", "optimizer: field 'type'", "rmsprop"}},
    {"adam field for sgd", HEAD "{\"name\": \"r\", \"type\": \"relu\"}\n],\n\"optimizer\": {\"type\": \"sgd\", \"betas\": [0.9, 0.99]}}",
     TSR_ERR_FORMAT, {"optimizer: field 'betas'", "'sgd'"}},
    {"negative learning rate", HEAD "{\"name\": \"r\", \"type\": \"relu\"}\n],\n\"optimizer\": {\"type\": \"adam\", \"lr\": -1}}",
     TSR_ERR_FORMAT, {"optimizer: field 'lr'", "positive"}},
    {"bad betas", HEAD "{\"name\": \"r\", \"type\": \"relu\"}\n],\n\"optimizer\": {\"type\": \"adam\", \"betas\": [0.9]}}",
     TSR_ERR_FORMAT, {"optimizer: field 'betas'", "[beta1, beta2]"}},
};
#define NBAD ((int)(sizeof bad_cases / sizeof bad_cases[0]))

START_TEST(test_bad_file_is_rejected_with_position_and_field) {
  const struct bad *b = &bad_cases[_i];
  const char *path = write_model("bad.json", b->json);
  tsr_model *m = (tsr_model *)&m; /* must come back NULL */
  tsr_optim_spec o;
  tsr_status s = tsr_model_load_json(&m, &o, path);
  const char *msg = tsr_last_error();
  ck_assert_msg(s == b->status, "%s: status %s, expected %s (%s)", b->what, tsr_status_name(s),
                tsr_status_name(b->status), msg);
  ck_assert_msg(m == NULL, "%s: model not NULL after an error", b->what);
  ck_assert_msg(strstr(msg, path) == msg, "%s: message does not start with the file name: %s", b->what, msg);
  for (int k = 0; k < 4 && b->expect[k]; k++)
    ck_assert_msg(strstr(msg, b->expect[k]) != NULL, "%s: message lacks \"%s\": %s", b->what, b->expect[k], msg);
}
END_TEST

START_TEST(test_unreadable_file_is_an_io_error) {
  char path[256];
  snprintf(path, sizeof path, "%s/absent.json", tt_tmpdir());
  tsr_model *m = NULL;
  ck_assert_int_eq(tsr_model_load_json(&m, NULL, path), TSR_ERR_IO);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(tsr_last_error(), path) != NULL, "%s", tsr_last_error());
}
END_TEST

START_TEST(test_optim_kind_names_round_trip) {
  for (int k = 0; k < TSR_OPTIM_KIND_COUNT; k++) {
    tsr_optim_kind got;
    ck_assert_int_eq(tsr_optim_kind_parse(tsr_optim_kind_name((tsr_optim_kind)k), &got), TSR_OK);
    ck_assert_int_eq(got, k);
  }
  tsr_optim_kind got;
  ck_assert_int_eq(tsr_optim_kind_parse("Adam", &got), TSR_ERR_ARG);
  ck_assert_str_eq(tsr_optim_kind_name(TSR_OPTIM_ADAMW), "adamw");
  tsr_optim_spec s = tsr_optim_spec_default(TSR_OPTIM_SGD);
  ck_assert(s.lr == 0.01f && s.momentum == 0.9f && s.weight_decay == 0.0f && !s.nesterov);
  s = tsr_optim_spec_default(TSR_OPTIM_ADAMW);
  ck_assert(s.lr == 1e-3f && s.beta1 == 0.9f && s.beta2 == 0.999f && s.eps == 1e-8f && s.weight_decay == 0.01f);
  ck_assert(tsr_optim_spec_default(TSR_OPTIM_ADAM).weight_decay == 0.0f);
}
END_TEST

static Suite *make_json_suite(void) {
  Suite *s = suite_create("json");
  TCase *tc = tcase_create("load");
  tcase_add_test(tc, test_valid_dag_loads_with_shapes_and_optimizer);
  tcase_add_test(tc, test_defaults_when_sections_are_absent);
  tcase_add_test(tc, test_sgd_fields_and_huber_delta);
  tcase_add_test(tc, test_unreadable_file_is_an_io_error);
  tcase_add_test(tc, test_optim_kind_names_round_trip);
  suite_add_tcase(s, tc);
  TCase *bad = tcase_create("bad_files");
  tcase_add_loop_test(bad, test_bad_file_is_rejected_with_position_and_field, 0, NBAD);
  suite_add_tcase(s, bad);
  return s;
}

TT_MAIN(make_json_suite)

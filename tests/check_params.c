/* Parameter import/export through a trainer (npy folder and HDF5, shape checks, the input
 * normalisation they carry), plus PyTorch's layouts: a state_dict saved by torch and imported here
 * must give torch's output, and an export loaded by bench/torch_model.py must give Tessera's from
 * the same raw inputs (without torch these are skipped: exit status 77). The .npy format itself:
 * check_npy.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hdf5.h>
#include <tessera.h>

#include "testutil.h"

#define PYTHON "/usr/bin/python3"

/* ---- through a trainer ---- */

/* in [2,5,7] -> c1 conv2d 3x2 pad 1 -> bn -> relu -> up conv_transpose2d 2x3 stride 2 -> flatten -> fc.
 * Non-square kernels and inputs make a swapped H/W or a wrong weight layout visible. */
static tsr_model *tiny_model(void) {
  tsr_model *m = NULL;
  ck_assert(tsr_model_create(&m, "tiny") == TSR_OK);
  ck_assert(tsr_model_add_input(m, "in", 2, 5, 7) == TSR_OK);
  tsr_layer_spec c = tsr_layer_spec_default(TSR_LAYER_CONV2D);
  c.out_channels = 3, c.kernel_h = 3, c.kernel_w = 2, c.pad_h = c.pad_w = 1;
  const char *in = "in";
  ck_assert_msg(tsr_model_add(m, "c1", &c, &in, 1) == TSR_OK, "%s", tsr_last_error());
  ck_assert(tsr_model_add_simple(m, "bn", TSR_LAYER_BATCHNORM, "c1") == TSR_OK);
  ck_assert(tsr_model_add_simple(m, "act", TSR_LAYER_RELU, "bn") == TSR_OK);
  tsr_layer_spec u = tsr_layer_spec_default(TSR_LAYER_CONV_TRANSPOSE2D);
  u.out_channels = 2, u.kernel_h = 2, u.kernel_w = 3, u.stride_h = u.stride_w = 2;
  in = "act";
  ck_assert_msg(tsr_model_add(m, "up", &u, &in, 1) == TSR_OK, "%s", tsr_last_error());
  ck_assert(tsr_model_add_simple(m, "flat", TSR_LAYER_FLATTEN, "up") == TSR_OK);
  tsr_layer_spec d = tsr_layer_spec_default(TSR_LAYER_DENSE);
  d.out_channels = 4;
  in = "flat";
  ck_assert_msg(tsr_model_add(m, "fc", &d, &in, 1) == TSR_OK, "%s", tsr_last_error());
  ck_assert(tsr_model_set_output(m, "fc", TSR_LOSS_MSE, 1.0f) == TSR_OK);
  return m;
}

static tsr_context *ctx;
static tsr_model *model;
static tsr_trainer *trainer;

static void trainer_setup(void) {
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.ncpus = 2, o.use_mpi = 0, o.verbose = 0;
  ck_assert_msg(tsr_context_create(&ctx, &o, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  model = tiny_model();
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = 2;
  ck_assert_msg(tsr_trainer_create(&trainer, ctx, model, NULL, &to) == TSR_OK, "%s", tsr_last_error());
}

static void trainer_teardown(void) {
  tsr_trainer_destroy(trainer);
  tsr_model_destroy(model);
  tsr_context_destroy(ctx);
}

/* All tensors of the trainer, concatenated. */
static float *get_all(size_t *total) {
  size_t n = 0;
  for (int i = 0; i < tsr_trainer_num_tensors(trainer); i++) {
    tsr_shape s;
    tsr_trainer_tensor_info(trainer, i, NULL, &s, NULL);
    n += (size_t)tsr_shape_numel(&s);
  }
  float *all = malloc(n * sizeof *all);
  for (int i = 0, off = 0; i < tsr_trainer_num_tensors(trainer); i++) {
    tsr_shape s;
    tsr_trainer_tensor_info(trainer, i, NULL, &s, NULL);
    ck_assert_msg(tsr_trainer_tensor_get(trainer, i, all + off) == TSR_OK, "%s", tsr_last_error());
    off += (int)tsr_shape_numel(&s);
  }
  *total = n;
  return all;
}

static void assert_trainer_holds(const float *want, size_t n, const char *what) {
  size_t got_n;
  float *got = get_all(&got_n);
  ck_assert_int_eq(got_n, n);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(got[i] == want[i], "%s: value %zu is %g, expected %g", what, i, got[i], want[i]);
  free(got);
}

START_TEST(test_tensor_names_and_pytorch_shapes) {
  static const struct { const char *name; int ndim; int64_t dims[4]; } want[] = {
      {"c1.weight", 4, {3, 2, 3, 2}}, {"c1.bias", 1, {3}},         {"bn.weight", 1, {3}},
      {"bn.bias", 1, {3}},            {"bn.running_mean", 1, {3}}, {"bn.running_var", 1, {3}},
      {"up.weight", 4, {3, 2, 2, 3}}, {"up.bias", 1, {2}},         {"fc.weight", 2, {4, 2 * 10 * 17}},
      {"fc.bias", 1, {4}},
  };
  ck_assert_int_eq(tsr_trainer_num_tensors(trainer), 10);
  for (size_t k = 0; k < 10; k++) {
    int i = tsr_trainer_tensor_find(trainer, want[k].name);
    ck_assert_msg(i >= 0, "no tensor %s", want[k].name);
    tsr_shape s;
    ck_assert(tsr_trainer_tensor_info(trainer, i, NULL, &s, NULL) == TSR_OK);
    ck_assert_msg(s.ndim == want[k].ndim, "%s: ndim %d", want[k].name, s.ndim);
    for (int d = 0; d < s.ndim; d++)
      ck_assert_msg(s.dims[d] == want[k].dims[d], "%s: dim %d is %lld", want[k].name, d, (long long)s.dims[d]);
  }
}
END_TEST

START_TEST(test_export_import_round_trip_npy_and_hdf5) {
  char dir[64];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  size_t n;
  float *orig = get_all(&n);
  char a[512], b[512], c[512], d[512];
  snprintf(a, sizeof a, "%s/exported/npy", dir); /* nested: created by export */
  snprintf(b, sizeof b, "%s/orig.h5", dir);
  snprintf(c, sizeof c, "%s/random", dir);
  snprintf(d, sizeof d, "%s/random.hdf5", dir);
  ck_assert_msg(tsr_params_export(trainer, a) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_params_export(trainer, b) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(access(tt_path_in(dir, "orig.h5.tmp"), F_OK), -1);

  /* the HDF5 file holds one float32 dataset per tensor, named as the tensor */
  hid_t f = H5Fopen(b, H5F_ACC_RDONLY, H5P_DEFAULT);
  ck_assert(f >= 0);
  hid_t ds = H5Dopen2(f, "up.weight", H5P_DEFAULT);
  ck_assert(ds >= 0);
  hid_t sp = H5Dget_space(ds), ty = H5Dget_type(ds);
  hsize_t dims[4];
  ck_assert_int_eq(H5Sget_simple_extent_dims(sp, dims, NULL), 4);
  ck_assert(dims[0] == 3 && dims[1] == 2 && dims[2] == 2 && dims[3] == 3);
  ck_assert(H5Tequal(ty, H5T_IEEE_F32LE) > 0);
  H5Tclose(ty), H5Sclose(sp), H5Dclose(ds), H5Fclose(f);

  /* random values written as .npy files (plus a tensor the trainer lacks) and imported */
  ck_assert(mkdir(c, 0777) == 0);
  float *rnd = malloc(n * sizeof *rnd);
  tt_fill_uniform(rnd, n, 77, -1, 1);
  for (int i = 0, off = 0; i < tsr_trainer_num_tensors(trainer); i++) {
    const char *name;
    tsr_shape s;
    tsr_trainer_tensor_info(trainer, i, &name, &s, NULL);
    char file[600];
    snprintf(file, sizeof file, "%s/%s.npy", c, name);
    ck_assert(tsr_npy_write(file, &s, rnd + off) == TSR_OK);
    off += (int)tsr_shape_numel(&s);
  }
  tsr_shape one = tsr_shape_make(0, NULL);
  float nbt = 5;
  ck_assert(tsr_npy_write(tt_path_in(c, "bn.num_batches_tracked.npy"), &one, &nbt) == TSR_OK);
  ck_assert_msg(tsr_params_import(trainer, c) == TSR_OK, "%s", tsr_last_error());
  assert_trainer_holds(rnd, n, "after importing random .npy files");

  ck_assert_msg(tsr_params_export(trainer, d) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_params_import(trainer, a) == TSR_OK, "%s", tsr_last_error());
  assert_trainer_holds(orig, n, "after importing the exported .npy folder");
  ck_assert_msg(tsr_params_import(trainer, d) == TSR_OK, "%s", tsr_last_error());
  assert_trainer_holds(rnd, n, "after importing the exported random .hdf5");
  ck_assert_msg(tsr_params_import(trainer, b) == TSR_OK, "%s", tsr_last_error());
  assert_trainer_holds(orig, n, "after importing the exported .h5");
  free(orig);
  free(rnd);
}
END_TEST

START_TEST(test_import_rejects_wrong_shape_and_missing_tensor) {
  char dir[64];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  size_t n;
  float *orig = get_all(&n);
  char a[512], h5[512];
  snprintf(a, sizeof a, "%s/p", dir);
  snprintf(h5, sizeof h5, "%s/p.h5", dir);
  ck_assert(tsr_params_export(trainer, a) == TSR_OK);
  ck_assert(tsr_params_export(trainer, h5) == TSR_OK);

  /* c1.weight with kernel 2x3 instead of 3x2 (same element count) */
  float w[36] = {0};
  tsr_shape bad = tsr_shape_make(4, (int64_t[]){3, 2, 2, 3});
  const char *file = tt_path_in(a, "c1.weight.npy");
  ck_assert(tsr_npy_write(file, &bad, w) == TSR_OK);
  ck_assert_int_eq(tsr_params_import(trainer, a), TSR_ERR_SHAPE);
  const char *msg = tsr_last_error();
  ck_assert_msg(strstr(msg, "c1.weight") && strstr(msg, file) && strstr(msg, "[3, 2, 2, 3]") && strstr(msg, "[3, 2, 3, 2]"),
                "%s", msg);
  assert_trainer_holds(orig, n, "after a rejected import");

  /* the same in the HDF5 file */
  hid_t f = H5Fopen(h5, H5F_ACC_RDWR, H5P_DEFAULT);
  ck_assert(H5Ldelete(f, "c1.weight", H5P_DEFAULT) >= 0);
  hsize_t dims[4] = {3, 2, 2, 3};
  hid_t sp = H5Screate_simple(4, dims, NULL);
  hid_t ds = H5Dcreate2(f, "c1.weight", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ck_assert(ds >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w) >= 0);
  H5Dclose(ds), H5Sclose(sp), H5Fclose(f);
  ck_assert_int_eq(tsr_params_import(trainer, h5), TSR_ERR_SHAPE);
  msg = tsr_last_error();
  ck_assert_msg(strstr(msg, "c1.weight") && strstr(msg, h5) && strstr(msg, "[3, 2, 2, 3]"), "%s", msg);

  /* a missing tensor */
  ck_assert(tsr_params_export(trainer, a) == TSR_OK);
  ck_assert(remove(tt_path_in(a, "fc.bias.npy")) == 0);
  ck_assert_int_eq(tsr_params_import(trainer, a), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(tsr_last_error(), "fc.bias") && strstr(tsr_last_error(), "missing"), "%s", tsr_last_error());
  assert_trainer_holds(orig, n, "after rejected imports");
  free(orig);
}
END_TEST

enum { XE = 2 * 5 * 7 }; /* values per input sample of tiny_model */
static const float norm_mean[2] = {0.4f, -1.5f}, norm_std[2] = {2.0f, 0.25f};

/* Raw inputs for tiny_model: channel c spread around norm_mean[c] by about norm_std[c]. */
static void raw_inputs(float *x, int n, uint64_t seed) {
  tt_fill_uniform(x, (size_t)n * XE, seed, -2, 2);
  for (int i = 0; i < n * XE; i++) x[i] = norm_mean[i / 35 % 2] + norm_std[i / 35 % 2] * x[i];
}

/* input_mean or input_std of an export, [2]. */
static void read_norm_file(const char *dir, const char *name, float *out) {
  char file[600];
  snprintf(file, sizeof file, "%s/%s.npy", dir, name);
  tsr_shape s;
  float *v = NULL;
  ck_assert_msg(tsr_npy_read(file, &s, &v) == TSR_OK, "%s", tsr_last_error());
  ck_assert(s.ndim == 1 && s.dims[0] == 2);
  memcpy(out, v, 2 * sizeof *out);
  free(v);
}

/* An export says how its inputs were prepared: a trainer that imports it predicts from raw inputs as
 * the exporting one did, from .npy files and from HDF5. */
START_TEST(test_export_carries_normalisation_and_import_predicts_alike) {
  char dir[64], a[512], h5[512], plain[512];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  snprintf(a, sizeof a, "%s/norm", dir);
  snprintf(h5, sizeof h5, "%s/norm.h5", dir);
  snprintf(plain, sizeof plain, "%s/plain", dir);
  float x[2 * XE], xs[2 * XE], pa[8], ps[8], pb[8];
  raw_inputs(x, 2, 21);
  /* reference: the trainer without normalisation on inputs standardised in float64 (the float32
   * rounding of each standardised input bounds the difference: 1e-5 + 1e-4 relative) */
  double ref[8];
  for (int i = 0; i < 2 * XE; i++) xs[i] = (float)((x[i] - (double)norm_mean[i / 35 % 2]) / norm_std[i / 35 % 2]);
  ck_assert_msg(tsr_trainer_predict(trainer, xs, 2, ps) == TSR_OK, "%s", tsr_last_error());
  for (int i = 0; i < 8; i++) ref[i] = ps[i];
  ck_assert_int_eq(tsr_trainer_set_input_norm(trainer, norm_mean, norm_std, 2), TSR_OK);
  ck_assert_msg(tsr_trainer_predict(trainer, x, 2, pa) == TSR_OK, "%s", tsr_last_error());
  tt_assert_close(pa, ref, 8, 1e-5, 1e-4, "prediction from raw inputs with the normalisation set");
  ck_assert_msg(tsr_params_export(trainer, a) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_params_export(trainer, h5) == TSR_OK, "%s", tsr_last_error());
  float got[2];
  read_norm_file(a, "input_mean", got);
  ck_assert(got[0] == norm_mean[0] && got[1] == norm_mean[1]);
  read_norm_file(a, "input_std", got);
  ck_assert(got[0] == norm_std[0] && got[1] == norm_std[1]);
  hid_t f = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t ds = f < 0 ? -1 : H5Dopen2(f, "input_std", H5P_DEFAULT);
  ck_assert(ds >= 0 && H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
  H5Dclose(ds), H5Fclose(f);
  ck_assert(got[0] == norm_std[0] && got[1] == norm_std[1]);

  /* a fresh trainer (other initial parameters, no normalisation) imports each and predicts alike
   * (the same kernels on the same values: equal within 1e-6 relative, bitwise in practice) */
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = 2, to.seed = 99;
  tsr_trainer *b;
  ck_assert_msg(tsr_trainer_create(&b, ctx, model, NULL, &to) == TSR_OK, "%s", tsr_last_error());
  const char *paths[2] = {a, h5};
  for (int k = 0; k < 2; k++) {
    ck_assert_int_eq(tsr_trainer_set_input_norm(b, NULL, NULL, 0), TSR_OK);
    ck_assert_msg(tsr_params_import(b, paths[k]) == TSR_OK, "%s", tsr_last_error());
    const float *m, *sd;
    tsr_trainer_input_norm(b, &m, &sd);
    ck_assert_msg(m && m[1] == norm_mean[1] && sd[1] == norm_std[1], "%s: normalisation not imported", paths[k]);
    ck_assert_msg(tsr_trainer_predict(b, x, 2, pb) == TSR_OK, "%s", tsr_last_error());
    double want[8];
    for (int i = 0; i < 8; i++) want[i] = pa[i];
    tt_assert_close(pb, want, 8, 0, 1e-6, paths[k]);
  }

  /* one of the two alone is refused and changes nothing */
  ck_assert(remove(tt_path_in(a, "input_std.npy")) == 0);
  ck_assert_int_eq(tsr_trainer_set_input_norm(b, NULL, NULL, 0), TSR_OK);
  ck_assert_int_eq(tsr_params_import(b, a), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(tsr_last_error(), "input_std") && strstr(tsr_last_error(), a), "%s", tsr_last_error());
  const float *m, *sd;
  tsr_trainer_input_norm(b, &m, &sd);
  ck_assert(!m && !sd);
  /* an older export (neither) keeps the trainer's normalisation */
  ck_assert(remove(tt_path_in(a, "input_mean.npy")) == 0);
  ck_assert_int_eq(tsr_trainer_set_input_norm(b, norm_mean, norm_std, 2), TSR_OK);
  ck_assert_msg(tsr_params_import(b, a) == TSR_OK, "%s", tsr_last_error());
  tsr_trainer_input_norm(b, &m, &sd);
  ck_assert(m && m[0] == norm_mean[0]);
  /* a trainer without one exports mean 0 and std 1, and its import removes the importer's */
  ck_assert_int_eq(tsr_trainer_set_input_norm(trainer, NULL, NULL, 0), TSR_OK);
  ck_assert_msg(tsr_params_export(trainer, plain) == TSR_OK, "%s", tsr_last_error());
  read_norm_file(plain, "input_mean", got);
  ck_assert(got[0] == 0 && got[1] == 0);
  read_norm_file(plain, "input_std", got);
  ck_assert(got[0] == 1 && got[1] == 1);
  ck_assert_msg(tsr_params_import(b, plain) == TSR_OK, "%s", tsr_last_error());
  tsr_trainer_input_norm(b, &m, &sd);
  ck_assert(!m && !sd);
  tsr_trainer_destroy(b);
}
END_TEST

static const char *torch_script =
    "import sys\n"
    "try:\n"
    "    import numpy as np, torch, torch.nn as nn\n"
    "except ImportError:\n"
    "    sys.exit(77)\n"
    "torch.set_num_threads(1)\n"
    "torch.manual_seed(3)\n"
    "class M(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.c1 = nn.Conv2d(2, 3, (3, 2), padding=1)\n"
    "        self.bn = nn.BatchNorm2d(3)\n"
    "        self.up = nn.ConvTranspose2d(3, 2, (2, 3), stride=2)\n"
    "        self.fc = nn.Linear(340, 4)\n"
    "    def forward(self, x):\n"
    "        y = self.up(torch.relu(self.bn(self.c1(x))))\n"
    "        return self.fc(torch.flatten(y, 1))\n"
    "m = M()\n"
    "with torch.no_grad():\n"
    "    m.bn.weight.uniform_(0.5, 1.5); m.bn.bias.uniform_(-0.5, 0.5)\n"
    "    m.bn.running_mean.uniform_(-0.3, 0.3); m.bn.running_var.uniform_(0.5, 2.0)\n"
    "m.eval()\n"
    "out = sys.argv[1]\n"
    "for k, v in m.state_dict().items():\n"
    "    np.save(out + '/' + k + '.npy', v.numpy())\n"
    "x = torch.rand(2, 2, 5, 7) * 2 - 1\n"
    "np.save(out + '/input_x.npy', x.numpy())\n"
    "with torch.no_grad():\n"
    "    np.save(out + '/output_y.npy', m(x).numpy())\n";

/* Python runs before StarPU starts: StarPU's idle workers would slow torch's import down. */
START_TEST(test_pytorch_state_dict_gives_pytorch_output) {
  if (access(PYTHON, X_OK) != 0) {
    tt_skip("PyTorch layouts not checked: no " PYTHON " (apt-get install python3-torch)");
    return;
  }
  char dir[64];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  FILE *f = fopen(tt_path_in(dir, "make.py"), "w");
  fputs(torch_script, f);
  fclose(f);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, PYTHON " %s/make.py %s", dir, dir);
  int rc = system(cmd);
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) {
    tt_skip("PyTorch layouts not checked: " PYTHON " has no torch or numpy (apt-get install python3-torch)");
    return;
  }
  ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "the PyTorch script failed (status %d)", rc);
  trainer_setup();
  ck_assert_msg(tsr_params_import(trainer, dir) == TSR_OK, "%s", tsr_last_error());

  tsr_shape xs, ys;
  float *x = NULL, *y = NULL;
  ck_assert(tsr_npy_read(tt_path_in(dir, "input_x.npy"), &xs, &x) == TSR_OK);
  ck_assert(tsr_npy_read(tt_path_in(dir, "output_y.npy"), &ys, &y) == TSR_OK);
  ck_assert(tsr_shape_numel(&xs) == 2 * 2 * 5 * 7 && tsr_shape_numel(&ys) == 8);
  float out[8];
  ck_assert_msg(tsr_trainer_predict(trainer, x, 2, out) == TSR_OK, "%s", tsr_last_error());
  double ref[8];
  for (int i = 0; i < 8; i++) ref[i] = y[i];
  tt_assert_close(out, ref, 8, 1e-5, 1e-4, "Tessera output against PyTorch's (eval mode)");
  free(x);
  free(y);
  trainer_teardown();
}
END_TEST

/* tiny_model as a model file, for bench/torch_model.py */
static const char *tiny_json =
    "{\"name\": \"tiny\", \"layers\": [\n"
    "  {\"name\": \"in\", \"type\": \"input\", \"shape\": [2, 5, 7]},\n"
    "  {\"name\": \"c1\", \"type\": \"conv2d\", \"out_channels\": 3, \"kernel\": [3, 2], \"padding\": 1},\n"
    "  {\"name\": \"bn\", \"type\": \"batchnorm\"},\n"
    "  {\"name\": \"act\", \"type\": \"relu\"},\n"
    "  {\"name\": \"up\", \"type\": \"conv_transpose2d\", \"out_channels\": 2, \"kernel\": [2, 3], \"stride\": 2},\n"
    "  {\"name\": \"flat\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"dense\", \"out_features\": 4}]}\n";

static const char *interop_script =
    "import sys\n"
    "try:\n"
    "    import numpy as np, torch, h5py\n"
    "except ImportError:\n"
    "    sys.exit(77)\n"
    "sys.path.insert(0, sys.argv[1] + '/bench')\n"
    "import torch_model\n"
    "torch.set_num_threads(1)\n"
    "d = sys.argv[2]\n"
    "x = torch.from_numpy(np.load(d + '/x.npy'))\n"
    "want = np.load(d + '/y.npy').astype(np.float64)\n"
    "for exp in (d + '/exp', d + '/exp.h5'):\n"
    "    net, spec = torch_model.load(d + '/tiny.json')\n"
    "    mean, std = torch_model.load_params(net, exp)\n"
    "    assert mean is not None, exp + ': no input normalisation'\n"
    "    net.eval()\n"
    "    with torch.no_grad():\n"
    "        got = net(x).numpy().reshape(want.shape)\n"
    "    err = np.abs(got - want) / (1e-5 + 1e-4 * np.abs(want))\n"
    "    if err.max() > 1:\n"
    "        print('%s: PyTorch %r, Tessera %r' % (exp, got.ravel().tolist(), want.ravel().tolist()))\n"
    "        sys.exit(1)\n";

/* Parameters exported with their normalisation and loaded by bench/torch_model.py give, from the same
 * raw inputs, Tessera's prediction (1e-5 + 1e-4 relative: convolution algorithms differ). Python
 * runs after the context is gone (StarPU's idle workers would slow torch down). */
START_TEST(test_pytorch_twin_predicts_from_raw_inputs_as_tessera) {
  const char *src = getenv("TESSERA_SRCDIR");
  if (access(PYTHON, X_OK) != 0 || !src) {
    tt_skip("bench/torch_model.py not checked: no " PYTHON " (apt-get install python3-torch) or no TESSERA_SRCDIR "
            "(make check sets it)");
    return;
  }
  char dir[64];
  snprintf(dir, sizeof dir, "%s", tt_tmpdir());
  FILE *f = fopen(tt_path_in(dir, "tiny.json"), "w");
  fputs(tiny_json, f);
  fclose(f);
  f = fopen(tt_path_in(dir, "check.py"), "w");
  fputs(interop_script, f);
  fclose(f);
  tsr_context_opts o;
  tsr_context_opts_default(&o);
  o.ncpus = 2, o.use_mpi = 0, o.verbose = 0;
  ck_assert_msg(tsr_context_create(&ctx, &o, NULL, NULL) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_model_load_json(&model, NULL, tt_path_in(dir, "tiny.json")) == TSR_OK, "%s", tsr_last_error());
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = 2;
  ck_assert_msg(tsr_trainer_create(&trainer, ctx, model, NULL, &to) == TSR_OK, "%s", tsr_last_error());
  ck_assert_int_eq(tsr_trainer_set_input_norm(trainer, norm_mean, norm_std, 2), TSR_OK);
  float x[2 * XE], y[8];
  raw_inputs(x, 2, 8);
  ck_assert_msg(tsr_trainer_predict(trainer, x, 2, y) == TSR_OK, "%s", tsr_last_error());
  tsr_shape xs = tsr_shape_make(4, (int64_t[]){2, 2, 5, 7}), ys = tsr_shape_make(2, (int64_t[]){2, 4});
  ck_assert(tsr_npy_write(tt_path_in(dir, "x.npy"), &xs, x) == TSR_OK);
  ck_assert(tsr_npy_write(tt_path_in(dir, "y.npy"), &ys, y) == TSR_OK);
  ck_assert_msg(tsr_params_export(trainer, tt_path_in(dir, "exp")) == TSR_OK, "%s", tsr_last_error());
  ck_assert_msg(tsr_params_export(trainer, tt_path_in(dir, "exp.h5")) == TSR_OK, "%s", tsr_last_error());
  trainer_teardown();
  char cmd[1024];
  snprintf(cmd, sizeof cmd, PYTHON " %s/check.py %s %s", dir, src, dir);
  int rc = system(cmd);
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) {
    tt_skip("bench/torch_model.py not checked: " PYTHON " has no torch, numpy or h5py (apt-get install python3-torch "
            "python3-h5py)");
    return;
  }
  ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "bench/torch_model.py's prediction differs (status %d)", rc);
}
END_TEST

static Suite *make_params_suite(void) {
  Suite *s = suite_create("params");
  TCase *tr = tcase_create("trainer");
  tcase_add_checked_fixture(tr, trainer_setup, trainer_teardown);
  tcase_set_timeout(tr, 30);
  tcase_add_test(tr, test_tensor_names_and_pytorch_shapes);
  tcase_add_test(tr, test_export_import_round_trip_npy_and_hdf5);
  tcase_add_test(tr, test_import_rejects_wrong_shape_and_missing_tensor);
  tcase_add_test(tr, test_export_carries_normalisation_and_import_predicts_alike);
  suite_add_tcase(s, tr);
  TCase *torch = tcase_create("pytorch");
  tcase_set_timeout(torch, 60);
  tcase_add_test(torch, test_pytorch_state_dict_gives_pytorch_output);
  tcase_add_test(torch, test_pytorch_twin_predicts_from_raw_inputs_as_tessera);
  suite_add_tcase(s, torch);
  return s;
}

TT_MAIN(make_params_suite)

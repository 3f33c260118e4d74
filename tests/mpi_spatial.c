/* Spatial and hybrid parallelism driver for tests/mpi_spatial.sh.
 *   mpi_spatial --spatial G --batch B --steps K --out PREFIX [--no-bn] [--3d [--k5] [--wide|--cube]|--unet] [--deterministic]
 *               [--resume-at J] [--slices N]
 * trains a small 2-D model (conv, batch norm, ReLU, max pooling, strided conv, overlapping max and
 * average pooling, flatten, dense), or with --3d a CosmoFlow-like one on [2, 8, 8, 4] samples
 * (conv3d, batch norm, leaky ReLU, max pooling, conv3d, overlapping max and average pooling, flatten,
 * dense; kernels 3 of the convolutions, or 5 on [2, 16, 8, 2] with --k5; --wide: [2, 32, 32, 2], or
 * [2, 64, 64, 2] with kernels 5; --cube: [2, 20, 20, 20] with the pooling after the second conv3d),
 * or with --unet a small
 * 3-D U-Net on them (build_unet; softmax cross-entropy per voxel),
 * with every sample split into G blocks (N, NxM or NxMxK along the first axes, (D,) H (, W), as
 * tessera-train's --spatial) over the ranks: replica r = rank / P takes samples [r B, (r + 1) B) of
 * every step's global batch. It writes PREFIX.rankR.params (every tensor, running statistics
 * included), .losses and .pred (the outputs of a fixed batch after training). --resume-at J saves a
 * checkpoint after step J, builds a new trainer, loads it and goes on.
 *   mpi_spatial --halo NxM   exchanges halos (widths 1 below, 2 above along the first axis, 2 and 1
 * along the second) of a known field split NxM over the ranks and checks them (the padding value
 * outside the field); sends back halo gradients weighted by the sender and checks what each block
 * receives; and runs 3x3 max pooling (stride 1, padding 1) on the halo'd blocks: the gradients
 * handed back must add up, over all ranks, to the sum of the output gradients.
 *   mpi_spatial --compare A B RTOL ATOL   (float32 files; exit 1 if they differ beyond tolerance)
 *   mpi_spatial --calibrated REF CAL RUN K   (RUN against REF within K times CAL's spread: calibrated) */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>

#include "codelets.h"
#include "comm/halo.h"
#include "runtime/communicator.h"
#include "train/trainer.h"

#define C_IN 2
#define S 16

static void die(const char *what) {
  fprintf(stderr, "mpi_spatial: %s: %s\n", what, tsr_last_error());
  exit(1);
}

static void parse_grid(const char *s, int *g) {
  g[0] = g[1] = g[2] = 0;
  if (sscanf(s, "%dx%dx%d", &g[0], &g[1], &g[2]) < 1) g[0] = 1;
}

struct data {
  int replica, replicas, batch;
};

static int unet; /* --unet: targets are one class of 3 per position (one-hot [3, S * S]) */
static int kern = 3; /* --k5: the 3-D model's convolutions have kernels 5 (padding 2), on [C_IN, 16, 8, 2] */
/* --wide: the 3-D model on [C_IN, 32, 32, 2] (kernels 5: [C_IN, 64, 64, 2]), so that both its conv3d
 * split 2x2 run from edge slabs along D and H (blocks of 16 x 16 and 8 x 8 after the pooling, twice
 * that with halos of 2), the second one with an input gradient (diagonal neighbours' parts sent back) */
static int wide;
/* --cube: the 3-D model on [C_IN, 20, 20, 20] with its pooling p after the second conv3d, so that
 * both conv3d split 2x2x2 run from edge slabs along D, H and W (blocks of 10^3: slabs of 3 planes
 * take less memory than a halo'd copy from 10 planes up), the second one with an input gradient
 * (the parts of its halos, edges and corners included, sent back to the 7 neighbours); a split run
 * stops with an error if either does not */
static int cube;
enum { NPOS_MAX = 32768 };
static int npos = S * S; /* input values per channel of a sample */

static void sample(int64_t g, float *x, float *y) {
  for (int c = 0; c < C_IN; c++)
    for (int p = 0; p < npos; p++) x[c * npos + p] = sinf(0.37f * (p + 1) * (float)(g % 97 + 1) + c) * 0.8f;
  if (!unet)
    for (int k = 0; k < 3; k++) y[k] = 0.3f * x[k * 37] - 0.2f * x[npos + k * 11] + 0.1f * k;
  for (int p = 0; unet && p < S * S; p++) {
    float v = x[p] + 0.5f * x[S * S + (p + 5) % (S * S)];
    for (int k = 0; k < 3; k++) y[k * S * S + p] = (float)(k == (v > 0.4f ? 1 : v < -0.4f ? 2 : 0));
  }
}

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  const struct data *d = user;
  sample((step * d->replicas + d->replica) * d->batch + index, x, y);
  return 0;
}

static void add(tsr_model *m, const char *name, tsr_layer_kind kind, const char *in, int co, int k, int s, int p) {
  tsr_layer_spec sp = tsr_layer_spec_default(kind);
  sp.bias = strcmp(name, "a") != 0; /* 'a' feeds batch norm: a bias would get a gradient of rounding noise, which
                                       Adam turns into steps of lr in a direction that depends on the order of sums */
  sp.out_channels = co, sp.kernel_h = sp.kernel_w = k, sp.stride_h = sp.stride_w = s, sp.pad_h = sp.pad_w = p;
  if (tsr_model_add(m, name, &sp, &in, 1)) die(name);
}

/* A 3-D layer of a kind registered by name: cubic kernel k, stride s, padding p. */
static void add3(tsr_model *m, const char *name, const char *kind, const char *in, int co, int k, int s, int p) {
  tsr_layer_kind kd;
  if (tsr_layer_kind_parse(kind, &kd)) die(kind);
  tsr_layer_spec sp = tsr_layer_spec_default(kd);
  sp.bias = strcmp(name, "a") != 0, sp.out_channels = co;
  sp.kernel_d = sp.kernel_h = sp.kernel_w = k, sp.stride_d = sp.stride_h = sp.stride_w = s;
  sp.pad_d = sp.pad_h = sp.pad_w = p, sp.dilation_d = sp.dilation_h = sp.dilation_w = 1;
  if (tsr_model_add(m, name, &sp, &in, 1)) die(name);
}

/* The same number of input values as the 2-D model's: [C_IN, 8, 8, 4] = [C_IN, S, S]. */
static tsr_model *build3d(int bn) {
  tsr_model *m;
  tsr_layer_spec in = tsr_layer_spec_default(TSR_LAYER_INPUT);
  int deep = kern == 5 ? 2 : 1; /* kernels 5: twice the depth, so that blocks of 8 planes take edge slabs */
  in.channels = C_IN, in.depth = 8 * deep, in.height = 8, in.width = S * S / 64 / deep;
  if (wide) in.depth = in.height = 32 * deep, in.width = 2;
  if (cube) in.depth = in.height = in.width = 20;
  npos = in.depth * in.height * in.width;
  if (tsr_model_create(&m, "spatial3d") || tsr_model_add(m, "in", &in, NULL, 0)) die("model");
  add3(m, "a", "conv3d", "in", 4, kern, 1, kern / 2);
  add(m, "bn", bn ? TSR_LAYER_BATCHNORM : TSR_LAYER_TANH, "a", 0, 0, 1, 0);
  tsr_layer_spec lr = tsr_layer_spec_default(TSR_LAYER_LEAKY_RELU);
  const char *bnn = "bn";
  if (tsr_model_add(m, "la", &lr, &bnn, 1)) die("la");
  if (cube) {
    add3(m, "b", "conv3d", "la", 6, kern, 1, kern / 2);
    add3(m, "p", "maxpool3d", "b", 0, 2, 2, 0);
  } else {
    add3(m, "p", "maxpool3d", "la", 0, 2, 2, 0);
    add3(m, "b", "conv3d", "p", 6, kern, 1, kern / 2);
  }
  add3(m, "q", "maxpool3d", cube ? "p" : "b", 0, 3, 1, 1);
  add3(m, "r", "avgpool3d", "q", 0, 3, 1, 1);
  add(m, "f", TSR_LAYER_FLATTEN, "r", 0, 0, 1, 0);
  add(m, "d", TSR_LAYER_DENSE, "f", 3, 0, 1, 0);
  return m;
}

/* A small 3-D U-Net on the same samples, one class of 3 per voxel: conv3d, batch norm, ReLU, max
 * pooling, conv3d, then back up by a transposed convolution (kernel 2, stride 2) and by nearest
 * upsampling, concatenated with the skip connection, and a 3x3x3 conv3d to the class scores: every
 * layer stays split, and the output is gathered whole for the loss. */
static tsr_model *build_unet(int bn) {
  tsr_model *m;
  tsr_layer_spec in = tsr_layer_spec_default(TSR_LAYER_INPUT);
  in.channels = C_IN, in.depth = 8, in.height = 8, in.width = S * S / 64;
  if (tsr_model_create(&m, "spatial_unet") || tsr_model_add(m, "in", &in, NULL, 0)) die("model");
  add3(m, "a", "conv3d", "in", 4, 3, 1, 1);
  add(m, "bn", bn ? TSR_LAYER_BATCHNORM : TSR_LAYER_TANH, "a", 0, 0, 1, 0);
  add(m, "ra", TSR_LAYER_RELU, "bn", 0, 0, 1, 0);
  add3(m, "p", "maxpool3d", "ra", 0, 2, 2, 0);
  add3(m, "b", "conv3d", "p", 6, 3, 1, 1);
  add(m, "rb", TSR_LAYER_RELU, "b", 0, 0, 1, 0);
  add3(m, "u", "conv_transpose3d", "rb", 4, 2, 2, 0);
  tsr_layer_kind kd;
  if (tsr_layer_kind_parse("upsample3d", &kd)) die("upsample3d");
  tsr_layer_spec up = tsr_layer_spec_default(kd);
  up.scale_factor = 2;
  const char *pin = "p", *cat[3] = {"u", "ra", "n"};
  if (tsr_model_add(m, "n", &up, &pin, 1)) die("n");
  tsr_layer_spec cs = tsr_layer_spec_default(TSR_LAYER_CONCAT);
  if (tsr_model_add(m, "cat", &cs, cat, 3)) die("cat");
  add3(m, "o", "conv3d", "cat", 3, 3, 1, 1);
  if (tsr_model_set_output(m, "o", TSR_LOSS_SOFTMAX_CROSS_ENTROPY, 0)) die("output");
  return m;
}

static tsr_model *build(int bn) {
  tsr_model *m;
  if (tsr_model_create(&m, "spatial") || tsr_model_add_input(m, "in", C_IN, S, S)) die("model");
  add(m, "a", TSR_LAYER_CONV2D, "in", 4, 3, 1, 1);
  add(m, "bn", bn ? TSR_LAYER_BATCHNORM : TSR_LAYER_TANH, "a", 0, 0, 1, 0);
  add(m, "ra", TSR_LAYER_RELU, "bn", 0, 0, 1, 0);
  add(m, "p", TSR_LAYER_MAXPOOL2D, "ra", 0, 2, 2, 0);
  add(m, "b", TSR_LAYER_CONV2D, "p", 6, 3, 2, 1);
  add(m, "q", TSR_LAYER_MAXPOOL2D, "b", 0, 3, 1, 1);
  add(m, "r", TSR_LAYER_AVGPOOL2D, "q", 0, 3, 1, 1);
  add(m, "f", TSR_LAYER_FLATTEN, "r", 0, 0, 1, 0);
  add(m, "d", TSR_LAYER_DENSE, "f", 3, 0, 1, 0);
  return m;
}

static int compare(const char *a, const char *b, double rtol, double atol) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  if (!fa || !fb) return fprintf(stderr, "compare: cannot open %s or %s\n", a, b), 1;
  float x, y;
  long n = 0, bad = 0;
  double worst = 0;
  while (fread(&x, 4, 1, fa) == 1) {
    if (fread(&y, 4, 1, fb) != 1) return fprintf(stderr, "compare: %s is shorter than %s\n", b, a), 1;
    double e = fabs((double)x - y) / (atol + rtol * fabs((double)x));
    bad += !(e <= 1), n++;
    if (!(e <= worst)) worst = e;
  }
  if (fread(&y, 4, 1, fb) == 1) return fprintf(stderr, "compare: %s is longer than %s\n", b, a), 1;
  printf("compare %s %s: %ld values, %ld beyond tolerance, worst %.3g x tolerance\n", a, b, n, bad, worst);
  return bad != 0 || n == 0;
}

/* The largest deviation of file b from file a in units of the suite's tolerance, |b - a| / (1e-6 +
 * 1e-5 |a|); -1 when they cannot be read or differ in length. */
static double worst_dev(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  double worst = 0;
  float x, y;
  long n = 0;
  while (fa && fb && fread(&x, 4, 1, fa) == 1) {
    if (fread(&y, 4, 1, fb) != 1) worst = -1;
    double e = fabs((double)x - y) / (1e-6 + 1e-5 * fabs((double)x));
    if (worst >= 0 && !(e <= worst)) worst = e;
    n++;
  }
  if (!fa || !fb || n == 0 || fread(&y, 4, 1, fb) == 1) worst = -1;
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return worst;
}

/* Run `run` against the reference `ref` with a tolerance calibrated on the float32 rounding of the
 * reference itself: `cal` is the same 1-rank training with its batch sums in another order, its
 * worst deviation w from ref (in the suite's units, worst_dev) how far float32 alone moves the
 * result. The run must stay within max(k w, 1): k times that spread, never less than the suite's
 * 1e-5 relative, 1e-6 absolute. A spread above 10 (1e-4 relative) means the training is chaotic at
 * this length: no test, it fails. */
static int calibrated(const char *ref, const char *cal, const char *run, double k) {
  double w = worst_dev(ref, cal), d = worst_dev(ref, run), tol = k * w > 1 ? k * w : 1;
  printf("calibrated %s: float32 spread of the 1-rank run %.3g, run %.3g, tolerance %.3g (units of 1e-5 relative "
         "+ 1e-6)\n", run, w, d, tol);
  if (w < 0 || d < 0) return fprintf(stderr, "calibrated: cannot compare %s, %s and %s\n", ref, cal, run), 1;
  if (w > 10) return fprintf(stderr, "calibrated: spread %.3g: too chaotic for a comparison\n", w), 1;
  return !(d <= tol);
}

static void write_floats(const char *prefix, int rank, const char *kind, const float *v, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s.rank%d.%s", prefix, rank, kind);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(v, sizeof *v, n, f) != n || fclose(f)) die(path);
}

static int slices = 2; /* --slices N: another order of the float32 sums over the batch (calibration) */

static tsr_trainer *trainer(tsr_context *ctx, tsr_model *m, int batch, const int *grid) {
  tsr_optim_spec adam = tsr_optim_spec_default(TSR_OPTIM_ADAM);
  adam.lr = 1e-2f;
  adam.eps = 1e-3f; /* a gradient component far below eps moves its parameter by lr g / eps, not by +-lr: the
                       rounding of near-cancelling sums (a few per model) stays small in the parameters */
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = batch, to.slices = slices, to.seed = 11, to.group_bytes = 512;
  memcpy(to.spatial, grid, sizeof to.spatial);
  tsr_trainer *t;
  if (tsr_trainer_create(&t, ctx, m, &adam, &to)) die("trainer");
  for (int l = 0; cube && t->sp && l < m->n; l++)
    if (!strcmp(m->layers[l].ops->name, "conv3d") && !t->sp->l[l].edges) {
      fprintf(stderr, "mpi_spatial --cube: conv3d '%s' does not run from edge slabs\n", m->layers[l].name);
      exit(1);
    }
  return t;
}

static int train(tsr_context *ctx, int argc, char **argv) {
  int batch = 4, steps = 4, bn = 1, three = 0, resume_at = -1, grid[3] = {1, 0, 0};
  const char *out = "mpi_spatial";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--out") && i + 1 < argc)
      out = argv[++i];
    else if (!strcmp(argv[i], "--spatial") && i + 1 < argc)
      parse_grid(argv[++i], grid);
    else if (!strcmp(argv[i], "--resume-at") && i + 1 < argc)
      resume_at = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-bn"))
      bn = 0;
    else if (!strcmp(argv[i], "--3d"))
      three = 1;
    else if (!strcmp(argv[i], "--unet"))
      unet = 1;
    else if (!strcmp(argv[i], "--k5"))
      kern = 5;
    else if (!strcmp(argv[i], "--wide"))
      wide = 1;
    else if (!strcmp(argv[i], "--cube"))
      cube = 1;
    else if (!strcmp(argv[i], "--slices") && i + 1 < argc)
      slices = atoi(argv[++i]);
  }
  int rank = tsr_context_rank(ctx), parts = 1;
  for (int a = 0; a < 3; a++) parts *= grid[a] > 1 ? grid[a] : 1;
  struct data d = {rank / parts, tsr_context_size(ctx) / parts, batch};
  tsr_model *m = unet ? build_unet(bn) : three ? build3d(bn) : build(bn);
  tsr_trainer *t = trainer(ctx, m, batch, grid);
  float *losses = calloc(steps, sizeof(float));
  char path[4096];
  for (int i = 0; i < steps; i++) {
    if (tsr_trainer_step(t, fill, &d, NULL)) die("step");
    if (i + 1 != resume_at) continue;
    for (int k = 0; k <= i; k++) {
      double l;
      if (tsr_trainer_loss(t, k, &l)) die("loss");
      losses[k] = (float)l;
    }
    snprintf(path, sizeof path, "%s.ckpt.h5", out);
    tsr_checkpoint_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.step = meta.position = i + 1, meta.epoch = 1, meta.seed = 11, meta.batch = batch;
    meta.nranks = tsr_context_size(ctx);
    if (tsr_checkpoint_save(t, path, &meta)) die("checkpoint save");
    int done = i;
    if (tsr_context_check_same(ctx, "the step of the checkpoint", &done, sizeof done)) die("barrier");
    tsr_trainer_destroy(t);
    t = trainer(ctx, m, batch, grid);
    if (tsr_checkpoint_load(t, path, &meta)) die("checkpoint load");
  }
  enum { YE = 3 * S * S };
  int ye = unet ? YE : 3;
  static float xs[4 * C_IN * NPOS_MAX], ys[4 * YE], pred[4 * YE];
  for (int k = 0; k < 4; k++) sample(1000 + k, xs + k * C_IN * npos, ys + k * ye);
  if (tsr_trainer_sync(t) || tsr_trainer_predict(t, xs, 4 < batch ? 4 : batch, pred)) die("predict");
  for (int k = resume_at > 0 ? resume_at : 0; k < steps; k++) {
    double l;
    if (tsr_trainer_loss(t, k, &l)) die("loss");
    losses[k] = (float)l;
  }
  write_floats(out, rank, "losses", losses, steps);
  write_floats(out, rank, "pred", pred, (size_t)(4 < batch ? 4 : batch) * ye);
  snprintf(path, sizeof path, "%s.rank%d.params", out, rank);
  FILE *f = fopen(path, "wb");
  for (int i = 0; f && i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape s;
    tsr_trainer_tensor_info(t, i, NULL, &s, NULL);
    float *buf = malloc(tsr_shape_numel(&s) * sizeof(float));
    if (!buf || tsr_trainer_tensor_get(t, i, buf)) die("tensor_get");
    fwrite(buf, sizeof(float), tsr_shape_numel(&s), f);
    free(buf);
  }
  if (!f || fclose(f)) die(path);
  free(losses);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  return 0;
}

enum { HO = 3, HH = 8, HW = 12 }; /* the field of the halo test: [HO, HH, HW] */

static float field(int o, int y, int x) { return (float)(o * 10000 + y * 100 + x); }

/* One block's halo geometry on `grid`, with halo widths lo, hi. */
static void geometry(struct _tsr_halo *h, const struct _tsr_comm *world, const int *grid, const int *lo, const int *hi,
                     float pad, int layer) {
  int me = world->index, coord[2] = {me / grid[1], me % grid[1]}, stride[2] = {grid[1], 1};
  *h = (struct _tsr_halo){
      .comm = world, .nd = 2, .outer = HO, .own = {HH / grid[0], HW / grid[1]}, .pad = pad, .layer = layer};
  for (int a = 0; a < 2; a++) {
    h->lo[a] = lo[a], h->hi[a] = hi[a];
    h->nb[a][0] = coord[a] > 0 ? me - stride[a] : -1;
    h->nb[a][1] = coord[a] < grid[a] - 1 ? me + stride[a] : -1;
  }
  if (_tsr_halo_init(h)) die("halo buffers");
}

/* Global coordinates of halo'd cell (y, x) of member q's block. */
static void global_of(const struct _tsr_halo *h, const int *grid, int q, int y, int x, int *gy, int *gx) {
  *gy = (q / grid[1]) * h->own[0] - h->lo[0] + y;
  *gx = (q % grid[1]) * h->own[1] - h->lo[1] + x;
}

static void wait_all(void) {
  if (starpu_task_wait_for_all()) die("wait");
}

static int halo_test(tsr_context *ctx, const char *spec) {
  int grid[3];
  parse_grid(spec, grid);
  if (grid[1] < 1) grid[1] = 1;
  struct _tsr_comm world;
  if (_tsr_comm_world(&world, tsr_context_rank(ctx), tsr_context_size(ctx))) die("world");
  if (grid[0] * grid[1] != world.size || HH % grid[0] || HW % grid[1]) {
    fprintf(stderr, "mpi_spatial --halo %s: needs %d ranks and a grid dividing %dx%d\n", spec, grid[0] * grid[1], HH,
            HW);
    return 2;
  }
  int me = world.index, bad = 0;
  struct _tsr_halo h;
  geometry(&h, &world, grid, (int[]){1, 2}, (int[]){2, 1}, -7.0f, 0);
  int ey = h.lo[0] + h.own[0] + h.hi[0], ex = h.lo[1] + h.own[1] + h.hi[1], oy = h.own[0], ox = h.own[1];
  float *block = malloc(sizeof(float) * HO * oy * ox), *halo = malloc(sizeof(float) * _tsr_halo_count(&h));
  for (int o = 0; o < HO; o++)
    for (int y = 0; y < oy; y++)
      for (int x = 0; x < ox; x++)
        block[(o * oy + y) * ox + x] = field(o, (me / grid[1]) * oy + y, (me % grid[1]) * ox + x);
  starpu_data_handle_t hb = _tsr_register_floats(block, (size_t)HO * oy * ox);
  starpu_data_handle_t hh = _tsr_register_floats(halo, (size_t)_tsr_halo_count(&h));
  if (_tsr_halo_forward(&h, hb, hh, 0, "halo_test")) die("halo forward");
  wait_all();
  starpu_data_acquire(hh, STARPU_RW);
  for (int o = 0; o < HO; o++)
    for (int y = 0; y < ey; y++)
      for (int x = 0; x < ex; x++) {
        int gy, gx;
        global_of(&h, grid, me, y, x, &gy, &gx);
        float want = gy >= 0 && gy < HH && gx >= 0 && gx < HW ? field(o, gy, gx) : -7.0f;
        if (halo[(o * ey + y) * ex + x] != want && bad++ < 5)
          fprintf(stderr, "rank %d: halo (%d, %d, %d) = global (%d, %d) holds %g, want %g\n", me, o, y, x, gy, gx,
                  halo[(o * ey + y) * ex + x], want);
      }
  /* backward: every cell of member q's halo'd block carries q + 1 */
  for (int64_t i = 0; i < _tsr_halo_count(&h); i++) halo[i] = (float)(me + 1);
  starpu_data_release(hh);
  if (_tsr_halo_backward(&h, hh, hb, 1, "halo_test")) die("halo backward");
  wait_all();
  starpu_data_acquire(hb, STARPU_R);
  for (int o = 0; o < HO; o++)
    for (int y = 0; y < oy; y++)
      for (int x = 0; x < ox; x++) {
        int gy, gx, ty, tx;
        global_of(&h, grid, me, y + h.lo[0], x + h.lo[1], &gy, &gx);
        float want = 0;
        for (int q = 0; q < world.size; q++) {
          global_of(&h, grid, q, 0, 0, &ty, &tx);
          if (gy >= ty && gy < ty + ey && gx >= tx && gx < tx + ex) want += (float)(q + 1);
        }
        if (block[(o * oy + y) * ox + x] != want && bad++ < 10)
          fprintf(stderr, "rank %d: gradient at global (%d, %d) is %g, want %g\n", me, gy, gx,
                  block[(o * oy + y) * ox + x], want);
      }
  starpu_data_release(hb);
  starpu_data_unregister(hh);
  _tsr_halo_free(&h);
  free(halo);

  /* 3x3 max pooling, stride 1, padding 1 (-FLT_MAX outside the field), on the halo'd blocks */
  geometry(&h, &world, grid, (int[]){1, 1}, (int[]){1, 1}, -FLT_MAX, 1);
  size_t nh = (size_t)_tsr_halo_count(&h), nown = (size_t)HO * oy * ox;
  halo = malloc(sizeof(float) * nh);
  float *y = malloc(sizeof(float) * nown), *dy = malloc(sizeof(float) * nown);
  hh = _tsr_register_floats(halo, nh);
  for (size_t i = 0; i < nown; i++) dy[i] = 1.0f;
  starpu_data_acquire(hb, STARPU_W);
  for (int o = 0; o < HO; o++)
    for (int r = 0; r < oy; r++)
      for (int x = 0; x < ox; x++) /* distinct values: one maximum per window */
        block[(o * oy + r) * ox + x] = sinf(0.1f * field(o, (me / grid[1]) * oy + r, (me % grid[1]) * ox + x));
  starpu_data_release(hb);
  if (_tsr_halo_forward(&h, hb, hh, 2, "pool_test")) die("halo forward");
  wait_all();
  struct _tsr_pool_desc pd = {
      .n = 1, .c = HO, .h = oy + 2, .w = ox + 2, .oh = oy, .ow = ox, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .is_max = 1};
  void *ws = malloc(_tsr_pool_ws_bytes(&pd) + 64);
  starpu_data_acquire(hh, STARPU_RW);
  _tsr_pool_fwd_cpu(&pd, halo, y, ws);
  _tsr_pool_bwd_cpu(&pd, dy, ws, halo); /* the halo'd input's gradient, in place of the input */
  starpu_data_release(hh);
  if (_tsr_halo_backward(&h, hh, hb, 3, "pool_test")) die("halo backward");
  wait_all();
  starpu_data_acquire(hb, STARPU_R);
  double sum = 0;
  for (size_t i = 0; i < nown; i++) sum += block[i];
  starpu_data_release(hb);
  int64_t tag = (int64_t)1 << 40;
  if (me != 0 && _tsr_comm_xfer(&sum, sizeof sum, 0, 1, tag)) die("send");
  for (int q = 1; me == 0 && q < world.size; q++) {
    double part;
    if (_tsr_comm_xfer(&part, sizeof part, q, 0, tag)) die("receive");
    sum += part;
  }
  if (me == 0) {
    printf("max pooling backward over %d blocks: gradients add up to %.1f, the outputs' %d\n", world.size, sum,
           HO * HH * HW);
    if (sum != HO * HH * HW) bad++;
  }
  starpu_data_unregister(hh), starpu_data_unregister(hb);
  _tsr_halo_free(&h);
  free(halo), free(block), free(y), free(dy), free(ws);
  _tsr_comm_free(&world);
  printf("rank %d: halo test %s\n", me, bad ? "FAILED" : "passed");
  return bad != 0;
}

int main(int argc, char **argv) {
  if (argc == 6 && !strcmp(argv[1], "--compare")) return compare(argv[2], argv[3], atof(argv[4]), atof(argv[5]));
  if (argc == 6 && !strcmp(argv[1], "--calibrated")) return calibrated(argv[2], argv[3], argv[4], atof(argv[5]));
  if (argc < 2 || !strcmp(argv[1], "--help")) {
    printf("usage: mpi_spatial --spatial G --batch B --steps K --out PREFIX [--no-bn] [--deterministic]\n"
           "                   [--resume-at J]\n"
           "       mpi_spatial --halo NxM\n"
           "       mpi_spatial --compare A B RTOL ATOL\n"
           "       mpi_spatial --calibrated REF CAL RUN K\n");
    return argc < 2 ? 2 : 0;
  }
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.verbose = 0;
  for (int i = 1; i < argc; i++) co.deterministic |= !strcmp(argv[i], "--deterministic");
  tsr_context *ctx;
  if (tsr_context_create(&ctx, &co, &argc, &argv)) die("context");
  int ret = argc == 3 && !strcmp(argv[1], "--halo") ? halo_test(ctx, argv[2]) : train(ctx, argc, argv);
  tsr_context_destroy(ctx);
  return ret;
}

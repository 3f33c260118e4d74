/* Can a layer write its output straight into its slot of a concatenation (copy-free DenseNet
 * concatenation, issue 16)? A slice of n samples stores an activation as [n][C][H][W] (or blocked
 * nChw16c); the slot of an input of c channels at channel offset off in a concatenation of C
 * channels is then strided: c channels per sample, C apart. This asks oneDNN which implementation it
 * picks for the producers of the STEMDL example's slots (a 3x3 convolution of 8 outputs, a 2x2
 * stride-2 transposed convolution of 16, a 2x2 max pooling) when their output (forward) and output
 * gradient (backward) are such a slot, against a dense buffer of their own. "ref:any" is oneDNN's
 * reference loop, orders of magnitude slower than its jit kernels. Build: make
 * bench/probe_concat_slots; run: bench/probe_concat_slots [--n N] (default 16, the example's slice). */
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dnnl_engine_t eng;

/* Creates the primitive descriptor of op into *pd (NULL when none) and returns its implementation. */
static const char *create(dnnl_primitive_desc_t *pd, const void *op, const_dnnl_primitive_desc_t hint) {
  const char *impl = "(none)";
  if (dnnl_primitive_desc_create(pd, op, NULL, eng, hint) != dnnl_success)
    *pd = NULL;
  else
    dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &impl);
  return impl;
}

static void row(const char *layer, const char *pass, const char *tag, const char *dense, const char *slot) {
  printf("%-26s %-17s %-8s %-16s %s\n", layer, pass, tag, dense, slot);
}

/* A (transposed) convolution of ci -> co channels on h x w with kernel k, stride s, padding p whose
 * output is dst: forward, backward data and backward weights; impl[pass] filled. */
static void conv(int deconv, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int ci, int co, int k, int s,
                 int p, const char *impl[3], dnnl_primitive_desc_t pds[3]) {
  dnnl_memory_desc_t wei;
  dnnl_dims_t wd = {co, ci, k, k}, st = {s, s}, pl = {p, p}, dl = {0, 0};
  dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_f32, dnnl_format_tag_any);
  dnnl_convolution_desc_t cd;
  if (deconv)
    dnnl_dilated_deconvolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_deconvolution_direct, src, &wei, NULL,
                                                 dst, st, dl, pl, pl);
  else
    dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training, dnnl_convolution_direct, src, &wei, NULL,
                                               dst, st, dl, pl, pl);
  impl[0] = create(&pds[0], &cd, NULL);
  impl[1] = impl[2] = "(no forward)";
  if (!pds[0]) return;
  if (deconv)
    dnnl_dilated_deconvolution_backward_data_desc_init(&cd, dnnl_deconvolution_direct, src, &wei, dst, st, dl, pl, pl);
  else
    dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct, src, &wei, dst, st, dl, pl, pl);
  impl[1] = create(&pds[1], &cd, pds[0]);
  if (deconv)
    dnnl_dilated_deconvolution_backward_weights_desc_init(&cd, dnnl_deconvolution_direct, src, &wei, NULL, dst, st, dl,
                                                          pl, pl);
  else
    dnnl_dilated_convolution_backward_weights_desc_init(&cd, dnnl_convolution_direct, src, &wei, NULL, dst, st, dl,
                                                        pl, pl);
  impl[2] = create(&pds[2], &cd, pds[0]);
}

static void pool(const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, const char *impl[3],
                 dnnl_primitive_desc_t pds[3]) {
  dnnl_pooling_v2_desc_t d;
  dnnl_dims_t st = {2, 2}, k = {2, 2}, pl = {0, 0}, dl = {0, 0};
  dnnl_pooling_v2_forward_desc_init(&d, dnnl_forward_training, dnnl_pooling_max, src, dst, st, k, dl, pl, pl);
  impl[0] = create(&pds[0], &d, NULL);
  impl[1] = "(no forward)", impl[2] = "-", pds[2] = NULL;
  if (!pds[0]) return;
  dnnl_pooling_v2_backward_desc_init(&d, dnnl_pooling_max, src, dst, st, k, dl, pl, pl);
  impl[1] = create(&pds[1], &d, pds[0]);
}

/* One producer: input of ci channels on hi x hi, output of co channels on ho x ho, placed at channel
 * off of a concatenation of ct channels. kind 0 conv 3x3, 1 transposed conv 2x2/2, 2 max pool 2x2/2. */
static void producer(const char *name, int kind, int n, int ci, int hi, int co, int ho, int ct, int off) {
  static const char *pass[3] = {"forward", "backward data", "backward weights"};
  for (int b = 0; b < 2; b++) {
    dnnl_format_tag_t tag = b ? dnnl_nChw16c : dnnl_nchw;
    dnnl_memory_desc_t src, dst, whole, slot;
    dnnl_dims_t sd = {n, ci, hi, hi}, dd = {n, co, ho, ho}, wd = {n, ct, ho, ho}, od = {0, off, 0, 0};
    dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, tag);
    dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, tag);
    dnnl_memory_desc_init_by_tag(&whole, 4, wd, dnnl_f32, tag);
    if (dnnl_memory_desc_init_submemory(&slot, &whole, dd, od) != dnnl_success) {
      printf("%-26s %-17s %-8s no slot of %d channels at %d in %d\n", name, "-", b ? "nChw16c" : "nchw", co, off, ct);
      continue;
    }
    const char *dense[3], *slotted[3];
    dnnl_primitive_desc_t pd_dense[3] = {0}, pd_slot[3] = {0};
    if (kind == 2) {
      pool(&src, &dst, dense, pd_dense);
      pool(&src, &slot, slotted, pd_slot);
    } else {
      conv(kind == 1, &src, &dst, ci, co, kind == 1 ? 2 : 3, kind == 1 ? 2 : 1, kind == 1 ? 0 : 1, dense, pd_dense);
      conv(kind == 1, &src, &slot, ci, co, kind == 1 ? 2 : 3, kind == 1 ? 2 : 1, kind == 1 ? 0 : 1, slotted, pd_slot);
    }
    for (int p = 0; p < (kind == 2 ? 2 : 3); p++) row(name, pass[p], b ? "nChw16c" : "nchw", dense[p], slotted[p]);
    for (int p = 0; p < 3; p++) {
      if (pd_dense[p]) dnnl_primitive_desc_destroy(pd_dense[p]);
      if (pd_slot[p]) dnnl_primitive_desc_destroy(pd_slot[p]);
    }
  }
}

int main(int argc, char **argv) {
  int n = 16;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
      n = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--n N]\n", argv[0]);
      return 2;
    }
  }
  if (n < 1 || dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) {
    fprintf(stderr, "probe_concat_slots: --n %d, or no oneDNN CPU engine\n", n);
    return 1;
  }
  printf("slice of %d samples; implementation oneDNN picks with the output (gradient) dense, and as a slot\n", n);
  row("producer", "pass", "layout", "dense", "slot of a concat");
  /* db1_l1_conv: 8 channels at 16 of db1_l1_cat (24), 64x64 */
  producer("conv 3x3 -> 8 @16/24", 0, n, 16, 64, 8, 64, 24, 16);
  /* tu1: 16 channels at 0 of tu1_cat (48), 32x32 -> 64x64 */
  producer("deconv 2x2/2 -> 16 @0/48", 1, n, 16, 32, 16, 64, 48, 0);
  /* td1_pool: 32 channels at 0 of db2_l1_cat (40), 64x64 -> 32x32 */
  producer("maxpool 2x2 -> 32 @0/40", 2, n, 32, 64, 32, 32, 40, 0);
  dnnl_engine_destroy(eng);
  return 0;
}

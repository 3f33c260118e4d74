/* Where a bf16 convolution's time goes, without Tessera's task graph: for the STEMDL example's
 * convolution shapes (examples/stemdl/fcdensenet.json, a slice of 16 samples; or one --shape), each
 * pass of oneDNN's convolution on blocked activations (nChw16c, as the trainer keeps them; plain
 * NCHW for the model's 1-channel input) in
 *   f32       float32 in and out (Tessera's float32 today),
 *   bf16-now  bf16 kernel on float32 activations: the inputs converted to bf16 before the kernel,
 *             float32 outputs (Tessera's --precision bf16 today, conversions counted apart),
 *   bf16-all  bf16 activations in and out (fwd dst and bwd_data diff_src bf16; the weight gradient
 *             float32): what "bf16 throughout" would run, with no activation conversion.
 * Weights are converted from float32 oihw to the kernel's layout in every mode (as the trainer does
 * on every call) and counted apart. Times are medians of --reps runs in ms of this thread's CPU time
 * (run with OMP_NUM_THREADS=1 so oneDNN computes on this thread; other processes on a shared machine
 * change it little, cache contention still does). Build: make bench/bench_bf16_conv; run:
 * OMP_NUM_THREADS=1 bench/bench_bf16_conv [--reps 7] [--n 16] [--shape CI,CO,H,K] */
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                                   \
  do {                                                                                          \
    dnnl_status_t s_ = (x);                                                                     \
    if (s_ != dnnl_success) {                                                                   \
      fprintf(stderr, "bench_bf16_conv: %s failed (%d) at line %d\n", #x, (int)s_, __LINE__); \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

enum { FWD, BWD_DATA, BWD_WEIGHTS, NPASS };
enum { F32, BF16_NOW, BF16_ALL, NMODE };
static const char *pass_name[NPASS] = {"fwd", "bwd_data", "bwd_weights"};

struct shape {
  int ci, co, h, k;
};

/* The example's convolutions in model order, at their resolutions (input channels: the dense blocks'
 * concatenations), one entry each. */
static const struct shape example[] = {
    {1, 16, 64, 3},  {16, 8, 64, 3}, {24, 8, 64, 3}, {32, 32, 64, 1}, {32, 8, 32, 3},
    {40, 8, 32, 3},  {48, 48, 32, 1}, {48, 8, 16, 3}, {56, 8, 16, 3}, {64, 64, 16, 1},
    {64, 8, 8, 3},   {72, 8, 8, 3},   {80, 8, 16, 3}, {88, 8, 16, 3}, {64, 8, 32, 3},
    {72, 8, 32, 3},  {48, 8, 64, 3},  {56, 8, 64, 3}, {64, 1, 64, 1}};

static dnnl_engine_t eng;
static dnnl_stream_t strm;

static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static dnnl_memory_t mem(const dnnl_memory_desc_t *md) {
  dnnl_memory_t m;
  CK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
  void *p;
  CK(dnnl_memory_get_data_handle(m, &p));
  memset(p, 0, dnnl_memory_desc_get_size(md));
  return m;
}

static dnnl_primitive_t reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to) {
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t p;
  CK(dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL));
  CK(dnnl_primitive_create(&p, pd));
  dnnl_primitive_desc_destroy(pd);
  return p;
}

static void run(dnnl_primitive_t p, int n, const dnnl_exec_arg_t *a) {
  CK(dnnl_primitive_execute(p, strm, n, a));
  CK(dnnl_stream_wait(strm));
}

/* One pass in one mode: its kernel, activation conversions and weight conversion, ms each. */
struct timing {
  double kernel, act_conv, wei_conv;
  const char *impl;
};

static void desc_of(int pass, const struct shape *s, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *wei,
                    const dnnl_memory_desc_t *dst, dnnl_convolution_desc_t *d) {
  dnnl_dims_t st = {1, 1}, pd = {s->k / 2, s->k / 2};
  if (pass == FWD)
    CK(dnnl_convolution_forward_desc_init(d, dnnl_forward_training, dnnl_convolution_direct, src, wei, NULL, dst, st,
                                          pd, pd));
  else if (pass == BWD_DATA)
    CK(dnnl_convolution_backward_data_desc_init(d, dnnl_convolution_direct, src, wei, dst, st, pd, pd));
  else
    CK(dnnl_convolution_backward_weights_desc_init(d, dnnl_convolution_direct, src, wei, NULL, dst, st, pd, pd));
}

static struct timing measure(const struct shape *s, int n, int pass, int mode, int reps) {
  dnnl_dims_t sd = {n, s->ci, s->h, s->h}, dd = {n, s->co, s->h, s->h}, wd = {s->co, s->ci, s->k, s->k};
  dnnl_data_type_t in_dt = mode == F32 ? dnnl_f32 : dnnl_bf16;
  /* activations stored: f32 except in bf16-all; the pass's outputs f32 in bf16-now */
  dnnl_data_type_t store = mode == BF16_ALL ? dnnl_bf16 : dnnl_f32;
  int src_out = pass == BWD_DATA, dst_out = pass == FWD;
  dnnl_memory_desc_t k_src, k_dst, k_wei, u_src, u_dst, u_wei, hint_src, hint_dst, hint_wei;
  /* a 1-channel input stays plain (the trainer plans it so); the 1-channel output gets a blocked copy */
  dnnl_format_tag_t st = s->ci < 16 ? dnnl_nchw : dnnl_nChw16c, dt = dnnl_nChw16c;
  CK(dnnl_memory_desc_init_by_tag(&u_src, 4, sd, store, st));
  CK(dnnl_memory_desc_init_by_tag(&u_dst, 4, dd, store, dt));
  CK(dnnl_memory_desc_init_by_tag(&u_wei, 4, wd, dnnl_f32, dnnl_oihw));
  /* the kernel's roles: inputs in_dt; outputs the stored type (bf16-now: float32) */
  CK(dnnl_memory_desc_init_by_tag(&k_src, 4, sd, src_out ? store : in_dt, st));
  CK(dnnl_memory_desc_init_by_tag(&k_dst, 4, dd, dst_out ? store : in_dt, dt));
  CK(dnnl_memory_desc_init_by_tag(&k_wei, 4, wd, pass == BWD_WEIGHTS ? dnnl_f32 : in_dt, dnnl_format_tag_any));
  CK(dnnl_memory_desc_init_by_tag(&hint_src, 4, sd, in_dt, st));
  CK(dnnl_memory_desc_init_by_tag(&hint_dst, 4, dd, mode == BF16_ALL ? in_dt : dnnl_f32, dt));
  CK(dnnl_memory_desc_init_by_tag(&hint_wei, 4, wd, in_dt, dnnl_format_tag_any));
  dnnl_convolution_desc_t d, hd;
  dnnl_primitive_desc_t hint = NULL, pd;
  if (pass != FWD) {
    desc_of(FWD, s, &hint_src, &hint_wei, &hint_dst, &hd);
    CK(dnnl_primitive_desc_create(&hint, &hd, NULL, eng, NULL));
  }
  desc_of(pass, s, &k_src, &k_wei, &k_dst, &d);
  if (dnnl_primitive_desc_create(&pd, &d, NULL, eng, hint) != dnnl_success) {
    fprintf(stderr, "bench_bf16_conv: oneDNN has no %s convolution %s for %d,%d,%d,%d on this CPU (bf16 needs "
                    "AVX-512)\n", mode == F32 ? "float32" : "bf16", pass_name[pass], s->ci, s->co, s->h, s->k);
    exit(1);
  }
  struct timing t = {0};
  CK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &t.impl));
  dnnl_primitive_t prim;
  CK(dnnl_primitive_create(&prim, pd));
  const dnnl_memory_desc_t *pw =
      dnnl_primitive_desc_query_md(pd, pass == BWD_WEIGHTS ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
  dnnl_memory_t m_us = mem(&u_src), m_ud = mem(&u_dst), m_uw = mem(&u_wei), m_ks = mem(&k_src), m_kd = mem(&k_dst),
                m_kw = mem(pw);
  int conv_src = !dnnl_memory_desc_equal(&u_src, &k_src), conv_dst = !dnnl_memory_desc_equal(&u_dst, &k_dst);
  dnnl_primitive_t r_src = conv_src ? (src_out ? reorder(&k_src, &u_src) : reorder(&u_src, &k_src)) : NULL;
  dnnl_primitive_t r_dst = conv_dst ? (dst_out ? reorder(&k_dst, &u_dst) : reorder(&u_dst, &k_dst)) : NULL;
  dnnl_primitive_t r_wei = pass == BWD_WEIGHTS ? reorder(pw, &u_wei) : reorder(&u_wei, pw);
  dnnl_exec_arg_t a_src[2] = {{DNNL_ARG_FROM, src_out ? m_ks : m_us}, {DNNL_ARG_TO, src_out ? m_us : m_ks}};
  dnnl_exec_arg_t a_dst[2] = {{DNNL_ARG_FROM, dst_out ? m_kd : m_ud}, {DNNL_ARG_TO, dst_out ? m_ud : m_kd}};
  dnnl_exec_arg_t a_wei[2] = {{DNNL_ARG_FROM, pass == BWD_WEIGHTS ? m_kw : m_uw},
                              {DNNL_ARG_TO, pass == BWD_WEIGHTS ? m_uw : m_kw}};
  dnnl_memory_t src = conv_src ? m_ks : m_us, dst = conv_dst ? m_kd : m_ud;
  dnnl_exec_arg_t args[3] = {
      {pass == BWD_DATA ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC, src},
      {pass == BWD_WEIGHTS ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS, m_kw},
      {pass == FWD ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST, dst}};
  double *k = malloc(sizeof(double) * 3 * reps);
  for (int r = 0; r < reps + 1; r++) { /* the first run warms up, uncounted */
    double t0 = cpu_ms(), ta = 0;
    if (conv_src && !src_out) run(r_src, 2, a_src);
    if (conv_dst && !dst_out) run(r_dst, 2, a_dst);
    ta = cpu_ms() - t0;
    t0 = cpu_ms();
    if (pass != BWD_WEIGHTS) run(r_wei, 2, a_wei);
    double tw = cpu_ms() - t0;
    t0 = cpu_ms();
    run(prim, 3, args);
    double tk = cpu_ms() - t0;
    t0 = cpu_ms();
    if (conv_src && src_out) run(r_src, 2, a_src);
    if (conv_dst && dst_out) run(r_dst, 2, a_dst);
    if (pass == BWD_WEIGHTS) run(r_wei, 2, a_wei);
    double tb = cpu_ms() - t0;
    if (pass == BWD_WEIGHTS) tw += tb;
    else ta += tb;
    if (r) k[r - 1] = tk, k[reps + r - 1] = ta, k[2 * reps + r - 1] = tw;
  }
  for (int i = 0; i < 3; i++) qsort(k + i * reps, reps, sizeof(double), cmp_d);
  t.kernel = k[reps / 2], t.act_conv = k[reps + reps / 2], t.wei_conv = k[2 * reps + reps / 2];
  free(k);
  dnnl_primitive_t prims[] = {prim, r_src, r_dst, r_wei};
  for (int i = 0; i < 4; i++)
    if (prims[i]) dnnl_primitive_destroy(prims[i]);
  dnnl_memory_t mems[] = {m_us, m_ud, m_uw, m_ks, m_kd, m_kw};
  for (int i = 0; i < 6; i++) dnnl_memory_destroy(mems[i]);
  dnnl_primitive_desc_destroy(pd);
  if (hint) dnnl_primitive_desc_destroy(hint);
  return t;
}

int main(int argc, char **argv) {
  int reps = 7, n = 16, nshapes = sizeof example / sizeof example[0];
  struct shape one = {0, 0, 0, 0};
  const struct shape *shapes = example;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--shape") && i + 1 < argc &&
             sscanf(argv[++i], "%d,%d,%d,%d", &one.ci, &one.co, &one.h, &one.k) == 4)
      shapes = &one, nshapes = 1;
    else {
      fprintf(stderr, "usage: %s [--reps R] [--n N] [--shape CI,CO,H,K]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || n < 1) return fprintf(stderr, "bench_bf16_conv: --reps and --n must be positive\n"), 2;
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
  double sum[NMODE][3] = {{0}}; /* kernel, activation conversions, weight conversions */
  printf("ms per pass (median of %d, thread CPU time), slice of %d samples; kernel + activation "
         "conversions + weight conversion\n",
         reps, n);
  printf("%-16s %-11s %-24s %-24s %-24s\n", "ci,co,hw,k", "pass", "f32", "bf16-now", "bf16-all");
  for (int i = 0; i < nshapes; i++)
    for (int p = 0; p < NPASS; p++) {
      const struct shape *s = &shapes[i];
      if (p == BWD_DATA && s->ci == 1) continue; /* the first layer has no input gradient */
      char label[32];
      snprintf(label, sizeof label, "%d,%d,%d,%d", s->ci, s->co, s->h, s->k);
      printf("%-16s %-11s", label, pass_name[p]);
      for (int m = 0; m < NMODE; m++) {
        struct timing t = measure(s, n, p, m, reps);
        printf(" %6.3f+%6.3f+%6.3f   ", t.kernel, t.act_conv, t.wei_conv);
        sum[m][0] += t.kernel, sum[m][1] += t.act_conv, sum[m][2] += t.wei_conv;
        if (strstr(t.impl, "ref")) printf("(ref impl: %s) ", t.impl);
      }
      printf("\n");
    }
  printf("\nsum over the shapes, one slice, all passes (ms): kernel, activation conversions, weight "
         "conversions, total\n");
  const char *mn[NMODE] = {"f32", "bf16-now", "bf16-all"};
  for (int m = 0; m < NMODE; m++)
    printf("%-9s %8.2f %8.2f %8.2f %8.2f\n", mn[m], sum[m][0], sum[m][1], sum[m][2],
           sum[m][0] + sum[m][1] + sum[m][2]);
  dnnl_stream_destroy(strm);
  dnnl_engine_destroy(eng);
  return 0;
}

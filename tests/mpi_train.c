/* Multi-rank training driver for tests/mpi_train.sh. Each rank trains a small DAG model on its
 * share of a deterministic global batch (rank r takes samples [r*B, (r+1)*B) of every step's N*B),
 * then writes its parameters and losses, so the script can compare ranks with each other, with a
 * 1-rank run of the N-times batch, and repeated runs with each other.
 *   mpi_train --batch B --steps K --out PREFIX [--deterministic] [--variant-rank R] [--group-bytes N]
 *             [--grad-reduce NAME] [--collective A] [--loss-scale dynamic|S] [--loss-scale-init S]
 *             [--mark-training] [--lion] [--momentum-sync K] [--momentum-sync-layers P] [--same-data]
 *             [--moments]
 *   mpi_train --compare A B RTOL ATOL     (float32 files; exit 1 if they differ beyond tolerance)
 * PREFIX.rankR.stats gets the bytes this rank sent for reductions, the algorithm of each gradient
 * group, whether the control word summed exactly at every step, and the loss scaler's state.
 * --mark-training creates PREFIX.rankR.training once this rank has completed 3 steps (the script's
 * cue to stop or kill a rank in training). --lion trains with Lion (lr 1e-2, weight decay 0.1,
 * momentum averaged every K steps under a sign reduction with --momentum-sync K, only that of the
 * layers the patterns P name with --momentum-sync-layers P); --same-data gives every rank rank 0's
 * samples; --moments writes each trainable tensor's momentum to PREFIX.rankR.m.NAME (float32). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>

#define S 8

struct data {
  int rank, batch, nranks; /* rank: whose samples this rank takes */
};

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  const struct data *d = user;
  int64_t g = (step * d->nranks + d->rank) * d->batch + index; /* global sample number */
  for (int c = 0; c < 2; c++)
    for (int p = 0; p < S * S; p++) x[c * S * S + p] = sinf(0.37f * (p + 1) * (float)(g % 97 + 1) + c) * 0.8f;
  for (int p = 0; p < S * S; p++) y[p] = 0.5f * x[p] * x[p] - 0.3f * x[(p + 1) % (S * S)];
  return 0;
}

static void die(const char *what) {
  fprintf(stderr, "mpi_train: %s: %s\n", what, tsr_last_error());
  exit(1);
}

static tsr_model *build(int wide) {
  tsr_model *m;
  if (tsr_model_create(&m, "mpi") || tsr_model_add_input(m, "in", 2, S, S) ||
      tsr_model_add_conv2d(m, "a", "in", 4, 3, 1, 1) || tsr_model_add_simple(m, "ra", TSR_LAYER_RELU, "a") ||
      tsr_model_add_conv2d(m, "b", "ra", wide ? 6 : 4, 3, 1, 1))
    die("model");
  const char *cat_in[] = {"ra", "b"};
  tsr_layer_spec cat = tsr_layer_spec_default(TSR_LAYER_CONCAT);
  if (tsr_model_add(m, "cat", &cat, cat_in, 2) || tsr_model_add_conv2d(m, "out", "cat", 1, 3, 1, 1)) die("model");
  return m;
}

static int compare(const char *a, const char *b, double rtol, double atol) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  if (!fa || !fb) {
    fprintf(stderr, "compare: cannot open %s or %s\n", a, b);
    return 1;
  }
  float x, y;
  long i = 0, bad = 0;
  double worst = 0;
  while (fread(&x, 4, 1, fa) == 1) {
    if (fread(&y, 4, 1, fb) != 1) {
      fprintf(stderr, "compare: %s is shorter than %s\n", b, a);
      return 1;
    }
    double e = fabs((double)x - y) / (atol + rtol * fabs((double)x));
    if (!(e <= 1)) bad++;
    if (!(e <= worst)) worst = e;
    i++;
  }
  if (fread(&y, 4, 1, fb) == 1) {
    fprintf(stderr, "compare: %s is longer than %s\n", b, a);
    return 1;
  }
  printf("compare %s %s: %ld values, %ld beyond tolerance, worst %.3g x tolerance\n", a, b, i, bad, worst);
  return bad != 0;
}

/* --check-ahead DIR S: in each rank's raw trace DIR/rank-R.tsv, the loss task of every step u starts
 * after the last optimizer update of step u - S - 1 ended (on that rank's clock): with staleness S a
 * rank computes step u only with the updates of steps up to u - S - 1 applied, and those updates wait
 * for their reductions, which need every rank's gradient of that step. Prints how many steps started
 * before the updates of the step just before them had ended (with S >= 1 every step but the first:
 * those updates are submitted after it). Exit 1 when a step ran further ahead or a step has no loss
 * or update task. Also prints, not asserted (it rests on the clock offsets the trace estimated), the
 * least time between any other rank's end of the backward of step u - S - 1 and a rank's loss of
 * step u, on the clocks aligned by the offsets: negative would mean a rank ran ahead of another. */
#define MAX_STEPS 4096
#define MAX_RANKS 16
static int check_ahead(const char *dir, int s) {
  int bad = 0, ranks = 0, lasts[MAX_RANKS];
  static double loss_at[MAX_RANKS][MAX_STEPS], bwd_end[MAX_RANKS][MAX_STEPS];
  for (int r = 0; r < MAX_RANKS; r++, ranks++) {
    char path[4096], line[8192];
    snprintf(path, sizeof path, "%s/rank-%d.tsv", dir, r);
    FILE *f = fopen(path, "r");
    if (!f) break;
    static double loss_start[MAX_STEPS], upd_end[MAX_STEPS];
    for (int k = 0; k < MAX_STEPS; k++) loss_start[k] = INFINITY, upd_end[k] = -INFINITY;
    int last = -1;
    double offset = 0;
    for (int k = 0; k < MAX_STEPS; k++) loss_at[r][k] = INFINITY, bwd_end[r][k] = -INFINITY;
    while (fgets(line, sizeof line, f)) {
      int rr, size;
      if (sscanf(line, "rank\t%d\tsize\t%d\toffset_us\t%lf", &rr, &size, &offset) == 3) continue;
      unsigned long long seq, bytes;
      long long step;
      int worker;
      double submit, start, end;
      char name[512], op[128];
      if (sscanf(line, "task\t%llu\t%lld\t%d\t%lf\t%lf\t%lf\t%llu\t%511s\t%127s", &seq, &step, &worker, &submit,
                 &start, &end, &bytes, name, op) != 9 || step < 0 || step >= MAX_STEPS)
        continue;
      if (!strcmp(op, "loss") && start < loss_start[step]) loss_start[step] = start;
      if (!strcmp(op, "loss") && start + offset < loss_at[r][step]) loss_at[r][step] = start + offset;
      if (strstr(op, "bwd") && end + offset > bwd_end[r][step]) bwd_end[r][step] = end + offset;
      if (!strcmp(op, "opt_update") && end > upd_end[step]) upd_end[step] = end;
      if (step > last) last = (int)step;
    }
    fclose(f);
    int ahead = 0;
    for (int u = 0; u <= last; u++) {
      if (!isfinite(loss_start[u]) || !isfinite(upd_end[u])) {
        fprintf(stderr, "rank %d: step %d has no loss or no update task in the trace\n", r, u);
        bad++;
        continue;
      }
      if (u >= s + 1 && loss_start[u] < upd_end[u - s - 1]) {
        fprintf(stderr, "rank %d: step %d started %.1f us before the updates of step %d ended (staleness %d)\n", r, u,
                upd_end[u - s - 1] - loss_start[u], u - s - 1, s);
        bad++;
      }
      ahead += u >= 1 && loss_start[u] < upd_end[u - 1];
    }
    printf("rank %d: steps 0..%d, %d ran ahead of the previous step's updates\n", r, last, ahead);
    lasts[r] = last;
  }
  double least = INFINITY;
  int lr = -1, lq = -1, lu = -1;
  for (int r = 0; r < ranks; r++)
    for (int q = 0; q < ranks; q++)
      for (int u = s + 1; q != r && u <= lasts[r] && u - s - 1 <= lasts[q]; u++)
        if (loss_at[r][u] - bwd_end[q][u - s - 1] < least) least = loss_at[r][u] - bwd_end[q][u - s - 1], lr = r, lq = q, lu = u;
  if (lr >= 0)
    printf("across ranks (clocks aligned by the trace's offsets): rank %d's loss of step %d came %.1f us after rank "
           "%d's backward of step %d, the least of all such pairs\n", lr, lu, least, lq, lu - s - 1);
  if (ranks == 0) fprintf(stderr, "check-ahead: no %s/rank-0.tsv\n", dir);
  return bad || ranks == 0;
}

int main(int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "--compare") == 0) return compare(argv[2], argv[3], atof(argv[4]), atof(argv[5]));
  if (argc == 4 && strcmp(argv[1], "--check-ahead") == 0) return check_ahead(argv[2], atoi(argv[3]));
  int batch = 4, steps = 5, det = 0, variant = -1, mark = 0, lion = 0, same = 0, msync = 0, staleness = 0;
  long long group_bytes = 512; /* several groups */
  int grad_reduce = TSR_REDUCE_F32;
  double loss_scale = 0, loss_scale_init = 0;
  const char *out = NULL, *collective = NULL, *msync_layers = "", *trace = NULL;
  int moments = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "--deterministic")) det = 1;
    else if (!strcmp(argv[i], "--mark-training")) mark = 1;
    else if (!strcmp(argv[i], "--lion")) lion = 1;
    else if (!strcmp(argv[i], "--same-data")) same = 1;
    else if (!strcmp(argv[i], "--momentum-sync") && i + 1 < argc) msync = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--momentum-sync-layers") && i + 1 < argc) msync_layers = argv[++i];
    else if (!strcmp(argv[i], "--moments")) moments = 1;
    else if (!strcmp(argv[i], "--staleness") && i + 1 < argc) staleness = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--trace") && i + 1 < argc) trace = argv[++i];
    else if (!strcmp(argv[i], "--variant-rank") && i + 1 < argc) variant = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--group-bytes") && i + 1 < argc) group_bytes = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--grad-reduce") && i + 1 < argc) {
      if (tsr_reduce_precision_parse(argv[++i], &grad_reduce)) die("--grad-reduce");
    } else if (!strcmp(argv[i], "--collective") && i + 1 < argc) collective = argv[++i];
    else if (!strcmp(argv[i], "--loss-scale") && i + 1 < argc) {
      i++;
      loss_scale = !strcmp(argv[i], "dynamic") ? TSR_LOSS_SCALE_DYNAMIC : atof(argv[i]);
    } else if (!strcmp(argv[i], "--loss-scale-init") && i + 1 < argc) loss_scale_init = atof(argv[++i]);
    else {
      fprintf(stderr, "usage: mpi_train --batch B --steps K --out PREFIX [--deterministic] [--variant-rank R]\n"
                      "         [--group-bytes N] [--grad-reduce NAME] [--collective A]\n"
                      "         [--loss-scale dynamic|S] [--loss-scale-init S] [--mark-training]\n"
                      "         [--lion] [--momentum-sync K] [--momentum-sync-layers P] [--same-data]\n"
                      "         [--moments] [--staleness S] [--trace DIR]\n"
                      "       mpi_train --compare A B RTOL ATOL\n"
                      "       mpi_train --check-ahead DIR S\n");
      return 2;
    }
  }
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.deterministic = det;
  co.verbose = 0;
  tsr_context *ctx;
  if (tsr_context_create(&ctx, &co, &argc, &argv)) die("context");
  struct data d = {tsr_context_rank(ctx), batch, tsr_context_size(ctx)};
  tsr_model *m = build(d.rank == variant);
  int rank = d.rank;
  if (same) d.rank = 0, d.nranks = 1;
  tsr_optim_spec adam = tsr_optim_spec_default(lion ? TSR_OPTIM_LION : TSR_OPTIM_ADAM);
  adam.lr = 1e-2f;
  if (lion) adam.weight_decay = 0.1f, adam.extra[0] = (float)msync; /* Lion's momentum_sync_every */
  snprintf(adam.momentum_sync_layers, sizeof adam.momentum_sync_layers, "%s", msync_layers);
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = batch, to.slices = 2, to.seed = 11, to.group_bytes = group_bytes, to.grad_reduce = grad_reduce;
  to.collective = collective;
  to.staleness = staleness;
  to.loss_scale = loss_scale, to.loss_scale_init = loss_scale_init, to.loss_scale_interval = 1000;
  tsr_trainer *t;
  if (tsr_trainer_create(&t, ctx, m, &adam, &to)) {
    fprintf(stderr, "mpi_train: rank %d: %s\n", rank, tsr_last_error());
    tsr_model_destroy(m);
    tsr_context_destroy(ctx);
    return 3;
  }
  /* 257 + rank: not a bf16 or fp16 value, so a control word reduced in half precision would show */
  tsr_trainer_set_flag(t, 257.0f + rank);
  if (trace && tsr_trace_start(ctx, trace, 0, -1)) die("trace");
  char path[4096];
  for (int i = 0; i < steps; i++) {
    if (tsr_trainer_step(t, fill, &d, NULL)) die("step");
    if (mark && i == 2) {
      FILE *f = NULL;
      snprintf(path, sizeof path, "%s.rank%d.training", out ? out : "mpi_train", rank);
      if (tsr_trainer_sync(t) || !(f = fopen(path, "w")) || fclose(f)) die(path);
    }
  }
  if (tsr_trainer_sync(t)) die("sync");
  if (trace && tsr_trace_stop(ctx)) die("trace");
  snprintf(path, sizeof path, "%s.rank%d.params", out ? out : "mpi_train", rank);
  FILE *f = fopen(path, "wb");
  if (!f) die(path);
  for (int i = 0; i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape s;
    tsr_trainer_tensor_info(t, i, NULL, &s, NULL);
    float *buf = malloc(tsr_shape_numel(&s) * sizeof(float));
    if (!buf || tsr_trainer_tensor_get(t, i, buf)) die("tensor_get");
    fwrite(buf, sizeof(float), tsr_shape_numel(&s), f);
    free(buf);
  }
  fclose(f);
  for (int i = 0; moments && i < tsr_trainer_num_tensors(t); i++) {
    tsr_shape s;
    const char *name;
    int trainable;
    tsr_trainer_tensor_info(t, i, &name, &s, &trainable);
    if (!trainable) continue;
    float *buf = malloc(tsr_shape_numel(&s) * sizeof(float));
    snprintf(path, sizeof path, "%s.rank%d.m.%s", out ? out : "mpi_train", rank, name);
    if (!buf || tsr_trainer_moment_get(t, i, 0, buf) || !(f = fopen(path, "wb"))) die(path);
    fwrite(buf, sizeof(float), tsr_shape_numel(&s), f);
    fclose(f);
    free(buf);
  }
  snprintf(path, sizeof path, "%s.rank%d.losses", out ? out : "mpi_train", rank);
  f = fopen(path, "wb");
  for (int i = 0; f && i < steps; i++) {
    double l;
    if (tsr_trainer_loss(t, i, &l)) die("loss");
    float lf = (float)l;
    fwrite(&lf, sizeof lf, 1, f);
  }
  if (f) fclose(f);
  snprintf(path, sizeof path, "%s.rank%d.stats", out ? out : "mpi_train", rank);
  f = fopen(path, "w");
  if (!f) die(path);
  fprintf(f, "reduce_bytes %lld\ncollectives", (long long)tsr_trainer_reduce_bytes(t));
  for (int g = 0; g < tsr_trainer_num_groups(t); g++) fprintf(f, " %s", tsr_trainer_group_collective(t, g));
  fprintf(f, "\n");
  int exact = 1, n = tsr_context_size(ctx);
  for (int i = 0; i < steps; i++) {
    double sum;
    if (tsr_trainer_flag(t, i, &sum)) die("flag");
    exact &= sum == 257.0 * n + n * (n - 1) / 2;
  }
  fprintf(f, "control_word_exact %d\n", exact);
  tsr_loss_scale_state ls;
  if (loss_scale == TSR_LOSS_SCALE_DYNAMIC) {
    if (tsr_trainer_loss_scale_get(t, &ls)) die("loss_scale_get");
    fprintf(f, "scale %g\nskipped %lld\nsteps %lld\n", ls.scale, (long long)ls.skipped, (long long)ls.steps);
  }
  fclose(f);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
  return 0;
}

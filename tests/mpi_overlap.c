/* Overlap of halo exchanges, shown by task dependencies (no timing), for tests/mpi_spatial.sh:
 *   mpi_overlap --spatial G [--k5] [--wide]
 * trains one step of a 3-D model (conv3d 'a' on [2, 16, 8, 4] samples, or [2, 32, 32, 2] with
 * --wide, max pooling, conv3d 'c', flatten, dense; 'a' of kernels 3, or 5 with --k5) with every
 * sample split G (N or NxM along D, H) over the ranks, recording every task the trainer submits (the
 * submit hook). StarPU orders two tasks that touch the same data handle, one of them writing, in
 * submission order; from those implicit dependencies it checks, on every rank, for each conv3d layer
 * the plan runs from edge slabs:
 *  - forward: its interior task (tsr_conv3d_fwd) depends, directly or not, on none of the layer's
 *    halo tasks (box copies named after the layer: packing the block, the received halo into the
 *    edge slabs), so it does not wait for the halo receive and StarPU runs it during the exchange;
 *    each of its edge tasks (tsr_conv3d_fwd_range) does depend on one of them;
 *  - backward, where its input needs a gradient ('c'; 'a' computes none, so it has no backward
 *    exchange and is only checked to submit none): the backward exchange is the layer's box copies
 *    after its first backward task, which pack the halo parts of the edge slabs' gradients (written
 *    by the edge data-gradient tasks, tsr_conv3d_bwd_data_range) into the messages back to the
 *    neighbours, and add what the neighbours send back into the input gradient's boundary planes
 *    (the copies that write the interior data gradient's output); split along two axes, it also adds
 *    the diagonal neighbours' parts received along the second axis into the first axis's slab
 *    gradients before they are packed (counted with the packings: they too must wait for an edge
 *    data-gradient task and for neither interior task). The interior data-gradient task
 *    (tsr_conv3d_bwd_data) and the interior weight-gradient task (tsr_conv3d_bwd_weights_range
 *    reading the block) wait for no task of that exchange; each packing waits for an edge
 *    data-gradient task and for neither interior task, so the halo gradients travel while the
 *    interior computes.
 * A convolution reading a halo'd copy of its input (filled by the layer's box copies) would fail the
 * first check; edge tasks not ordered after the exchange the second; an exchange submitted before
 * the interior that adds into the gradient the interior writes the third; an interior writing what
 * the edge data-gradient tasks write (the slab gradients) the fourth.
 * Split 2x2 with --wide, both layers run from edge slabs along D and H (corners included).
 * Not checked, and not true: the interior data gradient of a convolution followed by another split
 * one reads its whole output gradient, whose boundary planes the next convolution's backward exchange
 * completes, so it waits for that exchange (StarPU orders by whole handles). Split along H (1x2),
 * 'c' has blocks of 2 planes and takes a halo'd copy: its backward is not checked there. Layers
 * without a neighbour on either side along the split (none here) are skipped. Prints PASS or FAIL lines per rank; exit
 * 1 on a failure. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tessera.h>

#include "runtime/submit.h"

enum { MAXT = 20000, MAXB = 8, C = 2 };
static int D = 16, H = 8, W = 4; /* --wide: 32, 32, 2 */

struct rec {
  char name[32], cl[40];
  int n;
  starpu_data_handle_t h[MAXB];
  int writes[MAXB];
};

static struct rec *recs;
static int nrec, overflow;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void record(struct starpu_task *task) {
  pthread_mutex_lock(&lock);
  if (nrec == MAXT || STARPU_TASK_GET_NBUFFERS(task) > MAXB) {
    overflow = 1;
  } else {
    struct rec *r = &recs[nrec++];
    snprintf(r->name, sizeof r->name, "%s", task->name ? task->name : "");
    snprintf(r->cl, sizeof r->cl, "%s", task->cl && task->cl->name ? task->cl->name : "");
    r->n = STARPU_TASK_GET_NBUFFERS(task);
    for (int i = 0; i < r->n; i++) {
      r->h[i] = STARPU_TASK_GET_HANDLE(task, i);
      r->writes[i] = (STARPU_TASK_GET_MODE(task, i) & STARPU_W) != 0;
    }
  }
  pthread_mutex_unlock(&lock);
}

static int depends(const struct rec *a, const struct rec *b) { /* a submitted before b */
  for (int i = 0; i < a->n; i++)
    for (int j = 0; j < b->n; j++)
      if (a->h[i] == b->h[j] && (a->writes[i] || b->writes[j])) return 1;
  return 0;
}

/* anc[k] = 1 for every task k that task t waits for, directly or not. */
static void ancestors(int t, char *anc) {
  memset(anc, 0, (size_t)nrec);
  anc[t] = 2;
  for (int k = t; k >= 0; k--) {
    if (!anc[k]) continue;
    for (int j = 0; j < k; j++)
      if (!anc[j] && depends(&recs[j], &recs[k])) anc[j] = 1;
  }
  anc[t] = 0;
}

static int halo_ancestor(const char *anc, const char *layer) {
  for (int k = 0; k < nrec; k++)
    if (anc[k] && !strcmp(recs[k].cl, "tsr_box_copy") && !strcmp(recs[k].name, layer)) return 1;
  return 0;
}

static int is(const struct rec *r, const char *layer, const char *cl) { return !strcmp(r->name, layer) && !strcmp(r->cl, cl); }

static int reads(const struct rec *r, starpu_data_handle_t h) {
  for (int i = 0; i < r->n; i++)
    if (r->h[i] == h) return 1;
  return 0;
}

static int writes(const struct rec *r, starpu_data_handle_t h) {
  for (int i = 0; i < r->n; i++)
    if (r->h[i] == h && r->writes[i]) return 1;
  return 0;
}

/* The forward checks of one layer; 1 when it runs from edge slabs (checked), -1 after a failure. */
static int check_forward(int rank, const char *layer, char *anc) {
  int interior = -1, edges = 0, waiting = 0;
  for (int i = 0; i < nrec && interior < 0; i++)
    if (is(&recs[i], layer, "tsr_conv3d_fwd")) interior = i;
  for (int i = 0; i < nrec; i++) {
    if (!is(&recs[i], layer, "tsr_conv3d_fwd_range")) continue;
    edges++;
    ancestors(i, anc);
    waiting += halo_ancestor(anc, layer);
  }
  if (edges == 0) {
    printf("rank %d: layer '%s' runs without edge slabs (not checked)\n", rank, layer);
    return 0;
  }
  if (interior >= 0) ancestors(interior, anc);
  int waits = interior < 0 || halo_ancestor(anc, layer);
  printf("%s: rank %d: layer '%s': the interior forward does not wait for the halo exchange\n",
         waits ? "FAIL" : "PASS", rank, layer);
  printf("%s: rank %d: layer '%s': its %d edge forward task(s) wait for it\n", waiting == edges ? "PASS" : "FAIL", rank,
         layer, edges);
  return waits || waiting != edges ? -1 : 1;
}

/* The backward checks of a layer run from edge slabs (header); 0 when they pass. */
static int check_backward(int rank, const char *layer, char *anc) {
  int fwd = -1, dx = -1, dw = -1, first = -1, edges = 0, packs = 0, adds = 0, bad = 0;
  for (int i = 0; i < nrec && fwd < 0; i++)
    if (is(&recs[i], layer, "tsr_conv3d_fwd")) fwd = i;
  for (int i = 0; i < nrec; i++) {
    int d = is(&recs[i], layer, "tsr_conv3d_bwd_data"), e = is(&recs[i], layer, "tsr_conv3d_bwd_data_range");
    int w = is(&recs[i], layer, "tsr_conv3d_bwd_weights_range");
    if ((d || e || w) && first < 0) first = i;
    if (d && dx < 0) dx = i;
    if (w && dw < 0 && fwd >= 0 && reads(&recs[i], recs[fwd].h[0])) dw = i; /* the block, the interior's input */
    edges += e;
  }
  if (fwd < 0 || dw < 0) {
    printf("FAIL: rank %d: layer '%s': no interior forward or weight-gradient task reading the block\n", rank, layer);
    return 1;
  }
  starpu_data_handle_t target = NULL;
  for (int i = 0; dx >= 0 && i < recs[dx].n; i++)
    if (recs[dx].writes[i]) target = recs[dx].h[i];
  int exchange = 0;
  for (int k = first; k < nrec; k++) exchange += is(&recs[k], layer, "tsr_box_copy");
  if (dx < 0) { /* the input needs no gradient: no data gradient, nothing to send back */
    bad = edges || exchange;
    printf("%s: rank %d: layer '%s': no input gradient, no edge data-gradient task and no backward exchange "
           "(%d, %d)\n", bad ? "FAIL" : "PASS", rank, layer, edges, exchange);
    return bad;
  }
  int waits = 0;
  for (int t = 0; t < 2; t++) {
    ancestors(t ? dw : dx, anc);
    for (int k = first; k < nrec; k++) waits |= anc[k] && is(&recs[k], layer, "tsr_box_copy");
  }
  printf("%s: rank %d: layer '%s': the interior data- and weight-gradient tasks wait for no task of its backward "
         "exchange\n", waits ? "FAIL" : "PASS", rank, layer);
  for (int k = first; k < nrec; k++) {
    if (!is(&recs[k], layer, "tsr_box_copy")) continue;
    if (writes(&recs[k], target)) { /* a received gradient added into the input gradient */
      adds++;
      continue;
    }
    packs++;
    ancestors(k, anc);
    int fed = 0;
    for (int j = 0; j < k; j++) fed |= anc[j] && is(&recs[j], layer, "tsr_conv3d_bwd_data_range");
    if (!fed || anc[dx] || anc[dw]) bad = 1;
  }
  printf("%s: rank %d: layer '%s': its %d backward halo packing(s) wait for its %d edge data-gradient task(s), not "
         "for the interior (%d addition(s) of received halo gradients)\n",
         bad || !packs || !adds ? "FAIL" : "PASS", rank, layer, packs, edges, adds);
  return waits || bad || !packs || !adds;
}

static void die(const char *what) {
  fprintf(stderr, "mpi_overlap: %s: %s\n", what, tsr_last_error());
  exit(1);
}

static void add3(tsr_model *m, const char *name, const char *kind, const char *in, int co, int k, int s, int p) {
  tsr_layer_kind kd;
  if (tsr_layer_kind_parse(kind, &kd)) die(kind);
  tsr_layer_spec sp = tsr_layer_spec_default(kd);
  sp.out_channels = co, sp.kernel_d = sp.kernel_h = sp.kernel_w = k, sp.stride_d = sp.stride_h = sp.stride_w = s;
  sp.pad_d = sp.pad_h = sp.pad_w = p, sp.dilation_d = sp.dilation_h = sp.dilation_w = 1;
  if (tsr_model_add(m, name, &sp, &in, 1)) die(name);
}

static int fill(void *user, int64_t step, int index, float *x, float *y) {
  for (int i = 0; i < C * D * H * W; i++) x[i] = (float)((i * 37 + index * 11) % 17) / 17.0f - 0.5f;
  for (int i = 0; i < 2; i++) y[i] = 0.1f * (float)(i + index);
  return 0;
}

int main(int argc, char **argv) {
  int grid[3] = {0, 0, 0}, k = 3;
  tsr_context_opts co;
  tsr_context_opts_default(&co);
  co.verbose = 0;
  tsr_context *ctx;
  if (tsr_context_create(&ctx, &co, &argc, &argv)) die("context");
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--spatial") && i + 1 < argc && sscanf(argv[++i], "%dx%d", &grid[0], &grid[1]) < 1)
      grid[0] = 1;
    if (!strcmp(argv[i], "--k5")) k = 5;
    if (!strcmp(argv[i], "--wide")) D = H = 32, W = 2;
  }
  tsr_model *m;
  tsr_layer_spec in = tsr_layer_spec_default(TSR_LAYER_INPUT);
  in.channels = C, in.depth = D, in.height = H, in.width = W;
  if (tsr_model_create(&m, "overlap") || tsr_model_add(m, "in", &in, NULL, 0)) die("model");
  add3(m, "a", "conv3d", "in", 4, k, 1, k / 2);
  add3(m, "p", "maxpool3d", "a", 0, 2, 2, 0);
  add3(m, "c", "conv3d", "p", 3, 3, 1, 1);
  tsr_layer_spec fl = tsr_layer_spec_default(TSR_LAYER_FLATTEN), de = tsr_layer_spec_default(TSR_LAYER_DENSE);
  de.out_channels = 2;
  const char *c = "c", *f = "f";
  if (tsr_model_add(m, "f", &fl, &c, 1) || tsr_model_add(m, "d", &de, &f, 1)) die("head");
  tsr_optim_spec sgd = tsr_optim_spec_default(TSR_OPTIM_SGD);
  tsr_trainer_opts to;
  tsr_trainer_opts_default(&to);
  to.batch = 2, to.slices = 1, to.seed = 3;
  memcpy(to.spatial, grid, sizeof to.spatial);
  tsr_trainer *t;
  if (tsr_trainer_create(&t, ctx, m, &sgd, &to)) die("trainer");
  if (!(recs = calloc(MAXT, sizeof *recs))) die("memory");
  _tsr_submit_set_hook(record);
  if (tsr_trainer_step(t, fill, NULL, NULL) || tsr_trainer_sync(t)) die("step");
  _tsr_submit_set_hook(NULL);
  int rank = tsr_context_rank(ctx), bad = overflow, checked = 0;
  if (overflow) printf("FAIL: rank %d: more than %d tasks or %d buffers in a task\n", rank, MAXT, MAXB);
  char *anc = malloc((size_t)nrec + 1);
  const char *layers[2] = {"a", "c"};
  int backward = 0; /* layers whose backward exchange was checked */
  for (int l = 0; l < 2 && !bad; l++) {
    int f = check_forward(rank, layers[l], anc);
    if (f == 0) continue;
    checked++;
    bad |= f < 0 || check_backward(rank, layers[l], anc);
    backward += l > 0;
  }
  if (!checked) printf("FAIL: rank %d: no layer ran from edge slabs\n", rank), bad = 1;
  if (!bad && !backward) printf("rank %d: no layer with an input gradient ran from edge slabs (backward not checked)\n", rank);
  free(anc), free(recs);
  tsr_trainer_destroy(t);
  tsr_model_destroy(m);
  tsr_context_destroy(ctx);
  return bad;
}

/* Start-up agreement between ranks through StarPU-MPI point-to-point messages (no raw MPI calls
 * beside StarPU-MPI's progress thread): rank 0 gathers every rank's entry hashes, finds the first
 * entry that differs and tells every rank, so all of them stop with the same error. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <starpu_mpi.h>

#include "comm/collective.h"
#include "train/fingerprint.h"
#include "train/trainer.h"
#include "runtime/communicator.h"
#include "runtime/error.h"

#define AGREE_TAG ((starpu_mpi_tag_t)0x7A6E0000)

uint64_t _tsr_hash(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

struct verdict {
  int32_t index, rank; /* first differing entry (INT32_MAX: none) and a rank where it differs */
  int32_t n0;
  char label0[200];    /* rank 0's description of that entry */
};

static int first_difference(const uint64_t *a, int na, const uint64_t *b, int nb) {
  int n = na < nb ? na : nb;
  for (int i = 0; i < n; i++)
    if (a[i] != b[i]) return i;
  return na == nb ? INT32_MAX : n;
}

tsr_status _tsr_agree(int rank, int size, int n, const uint64_t *hashes,
                      const char *(*label)(void *, int, char *, size_t), void *user) {
  struct verdict v = {INT32_MAX, -1, n, ""};
  int ret = 0;
  int64_t count = n;
  if (rank != 0) {
    ret = _tsr_comm_xfer(&count, sizeof count, 0, 1, AGREE_TAG);
    if (!ret && n > 0) ret = _tsr_comm_xfer((void *)hashes, n * sizeof *hashes, 0, 1, AGREE_TAG + 1);
    if (!ret) ret = _tsr_comm_xfer(&v, sizeof v, 0, 0, AGREE_TAG + 2);
  } else {
    for (int r = 1; !ret && r < size; r++) {
      int64_t nr = 0;
      ret = _tsr_comm_xfer(&nr, sizeof nr, r, 0, AGREE_TAG);
      uint64_t *hr = calloc(nr > 0 ? nr : 1, sizeof *hr);
      if (!hr) return _tsr_error(TSR_ERR_NOMEM, "rank agreement: out of memory");
      if (!ret && nr > 0) ret = _tsr_comm_xfer(hr, nr * sizeof *hr, r, 0, AGREE_TAG + 1);
      int d = first_difference(hashes, n, hr, (int)nr);
      if (d < v.index) v.index = d, v.rank = r;
      free(hr);
    }
    if (v.index != INT32_MAX) {
      if (v.index < n)
        label(user, v.index, v.label0, sizeof v.label0);
      else
        snprintf(v.label0, sizeof v.label0, "nothing (it has %d entries)", n);
    }
    for (int r = 1; !ret && r < size; r++) ret = _tsr_comm_xfer(&v, sizeof v, r, 1, AGREE_TAG + 2);
  }
  if (ret) return _tsr_error(TSR_ERR_RUNTIME, "rank agreement: StarPU-MPI transfer failed (%d)", ret);
  if (v.index == INT32_MAX) return TSR_OK;
  char mine[200] = "nothing";
  if (v.index < n) label(user, v.index, mine, sizeof mine);
  if (rank == 0)
    return _tsr_error(TSR_ERR_MISMATCH, "ranks disagree: at entry %d rank 0 has %s, rank %d has something else",
                      v.index, v.label0, v.rank);
  return _tsr_error(TSR_ERR_MISMATCH, "ranks disagree: at entry %d rank 0 has %s, rank %d has %s", v.index, v.label0,
                    rank, mine);
}

/* ---- the trainer's fingerprint: one entry per layer, then optimizer, loss, batch, groups, values ---- */

enum { EXTRA_OPT, EXTRA_LOSS, EXTRA_BATCH, EXTRA_GROUPS, EXTRA_PARAMS, EXTRA_COUNT };

static const char *trainer_label(void *user, int i, char *buf, size_t len) {
  const tsr_trainer *t = user;
  const tsr_model *m = t->model;
  if (i < m->n) {
    const struct _tsr_layer *l = &m->layers[i];
    if (l->d > 0)
      snprintf(buf, len, "layer '%s' (%s -> [%d, %d, %d, %d])", l->name, tsr_layer_kind_name(l->spec.kind), l->c, l->d,
               l->h, l->w);
    else
      snprintf(buf, len, "layer '%s' (%s -> [%d, %d, %d])", l->name, tsr_layer_kind_name(l->spec.kind), l->c, l->h,
               l->w);
    return buf;
  }
  static const char *const extra[EXTRA_COUNT] = {"the optimizer settings", "the loss", "the local batch size",
                                                 "the gradient group layout", "the initial parameter values"};
  switch (i - m->n) {
  case EXTRA_OPT:
    snprintf(buf, len, "%s (%s, lr %g)", extra[EXTRA_OPT], tsr_optim_kind_name(t->opt.kind), t->opt.lr);
    break;
  case EXTRA_BATCH: snprintf(buf, len, "%s (%d)", extra[EXTRA_BATCH], t->batch); break;
  case EXTRA_GROUPS:
    snprintf(buf, len, "%s (%d groups, reduced in %s by %s, staleness %d)", extra[EXTRA_GROUPS], t->groups.n,
             t->groups.name, t->groups.ncand ? "auto" : t->groups.ops ? t->groups.ops->impl : "none", t->staleness);
    break;
  default: snprintf(buf, len, "%s", extra[i - m->n]);
  }
  return buf;
}

tsr_status _tsr_fingerprint_check(tsr_trainer *t) {
  const tsr_model *m = t->model;
  int n = m->n + EXTRA_COUNT;
  uint64_t *h = calloc(n, sizeof *h);
  if (!h) return _tsr_error(TSR_ERR_NOMEM, "trainer: out of memory");
  for (int i = 0; i < m->n; i++) {
    const struct _tsr_layer *l = &m->layers[i];
    uint64_t x = _tsr_hash(TSR_HASH_INIT, l->name, strlen(l->name));
    x = _tsr_hash(x, &l->spec, sizeof l->spec);
    x = _tsr_hash(x, l->inputs, l->ninputs * sizeof(int));
    int shape[4] = {l->c, l->h, l->w, l->d};
    h[i] = _tsr_hash(x, shape, sizeof shape);
  }
  h[m->n + EXTRA_OPT] = _tsr_hash(TSR_HASH_INIT, &t->opt, sizeof t->opt);
  int loss[2] = {(int)m->loss, t->output_layer};
  h[m->n + EXTRA_LOSS] = _tsr_hash(_tsr_hash(TSR_HASH_INIT, loss, sizeof loss), &m->huber_delta, sizeof(float));
  h[m->n + EXTRA_BATCH] = _tsr_hash(TSR_HASH_INIT, &t->batch, sizeof t->batch);
  uint64_t g = TSR_HASH_INIT;
  for (int i = 0; i < t->groups.n; i++) g = _tsr_hash(g, &t->groups.g[i].n, sizeof t->groups.g[i].n);
  const char *algo = t->groups.ncand ? "auto" : t->groups.ops ? t->groups.ops->impl : "";
  g = _tsr_hash(_tsr_hash(g, algo, strlen(algo) + 1), t->groups.name, strlen(t->groups.name) + 1);
  h[m->n + EXTRA_GROUPS] = _tsr_hash(g, &t->staleness, sizeof t->staleness);
  h[m->n + EXTRA_PARAMS] = _tsr_hash(_tsr_hash(TSR_HASH_INIT, t->params, t->nparams * sizeof(float)), t->state,
                                     t->nstate * sizeof(float));
  tsr_status s = _tsr_agree(t->rank, t->size, n, h, trainer_label, t);
  free(h);
  return s;
}

/* ---- public: any caller-defined value (e.g. a dataset's sample shapes) ---- */

struct label_arg {
  const char *what;
};

static const char *plain_label(void *user, int i, char *buf, size_t len) {
  snprintf(buf, len, "%s", ((struct label_arg *)user)->what);
  return buf;
}

tsr_status tsr_context_check_same(tsr_context *ctx, const char *what, const void *data, size_t len) {
  if (!ctx || !what || (!data && len)) return _tsr_error(TSR_ERR_ARG, "tsr_context_check_same: bad arguments");
  if (tsr_context_size(ctx) < 2) return TSR_OK;
  uint64_t h = _tsr_hash(TSR_HASH_INIT, data, len);
  struct label_arg a = {what};
  return _tsr_agree(tsr_context_rank(ctx), tsr_context_size(ctx), 1, &h, plain_label, &a);
}

/* Losses with PyTorch's definitions (MSELoss, L1Loss, HuberLoss, CrossEntropyLoss with class
 * probability targets), mean-reduced over the whole batch: each slice's task writes its share of the
 * mean (scale = 1 / count over the batch) in double, so the slices' values add up to the batch loss,
 * and the matching gradient, zero for padding samples. */
#include <math.h>
#include <string.h>

#include "codelets.h"
#include "cuda_util.h"

static double elementwise(const struct _tsr_loss_desc *d, size_t len, const float *restrict yhat,
                          const float *restrict y, float *restrict dyhat) {
  double sum = 0;
  const double scale = d->scale;
  switch (d->kind) {
  case TSR_L_MSE:
    for (size_t i = 0; i < len; i++) {
      double e = (double)yhat[i] - y[i];
      sum += e * e;
      dyhat[i] = (float)(2.0 * scale * e);
    }
    break;
  case TSR_L_L1:
    for (size_t i = 0; i < len; i++) {
      double e = (double)yhat[i] - y[i];
      sum += fabs(e);
      dyhat[i] = e > 0 ? (float)scale : e < 0 ? (float)-scale : 0.0f; /* torch.sign: 0 at 0 */
    }
    break;
  case TSR_L_HUBER: {
    const double delta = d->delta;
    for (size_t i = 0; i < len; i++) {
      double e = (double)yhat[i] - y[i], a = fabs(e);
      if (a < delta) {
        sum += 0.5 * e * e;
        dyhat[i] = (float)(scale * e);
      } else {
        sum += delta * (a - 0.5 * delta);
        dyhat[i] = (float)(e > 0 ? scale * delta : -scale * delta);
      }
    }
    break;
  }
  case TSR_L_SOFTMAX_CE:
    break;
  }
  return sum;
}

/* Softmax over channels at each (h, w) of one sample; positions are handled in blocks so that the
 * per-position maxima and sums live on the stack and the inner loops run over contiguous memory. */
static double softmax_ce_sample(int c, size_t hw, double scale, const float *yhat, const float *y,
                                float *dyhat) {
  enum { BLOCK = 64 };
  float mx[BLOCK], se[BLOCK], tsum[BLOCK];
  double sum = 0;
  for (size_t p0 = 0; p0 < hw; p0 += BLOCK) {
    size_t m = hw - p0 < BLOCK ? hw - p0 : BLOCK;
    for (size_t j = 0; j < m; j++) {
      mx[j] = -INFINITY;
      se[j] = 0;
      tsum[j] = 0;
    }
    for (int k = 0; k < c; k++) {
      const float *z = yhat + k * hw + p0;
      for (size_t j = 0; j < m; j++) mx[j] = z[j] > mx[j] ? z[j] : mx[j];
    }
    for (int k = 0; k < c; k++) {
      const float *z = yhat + k * hw + p0, *t = y + k * hw + p0;
      for (size_t j = 0; j < m; j++) {
        se[j] += expf(z[j] - mx[j]);
        tsum[j] += t[j];
      }
    }
    /* log p = (z - max) - log(sum): never forms max + log(sum), which would round at the
     * magnitude of the largest logit */
    for (size_t j = 0; j < m; j++) se[j] = logf(se[j]);
    for (int k = 0; k < c; k++) {
      const float *z = yhat + k * hw + p0, *t = y + k * hw + p0;
      float *g = dyhat + k * hw + p0;
      for (size_t j = 0; j < m; j++) {
        float logp = (z[j] - mx[j]) - se[j];
        sum -= (double)t[j] * logp;
        g[j] = (float)(scale * ((double)expf(logp) * tsum[j] - t[j]));
      }
    }
  }
  return sum;
}

void _tsr_loss_cpu(const struct _tsr_loss_desc *d, const float *yhat, const float *y, float *dyhat, double *loss) {
  size_t hw = (size_t)d->h * d->w, per = (size_t)d->c * hw;
  int nv = d->nvalid < 0 ? 0 : d->nvalid > d->n ? d->n : d->nvalid;
  double sum = 0;
  if (d->kind == TSR_L_SOFTMAX_CE) {
    for (int s = 0; s < nv; s++)
      sum += softmax_ce_sample(d->c, hw, d->scale, yhat + s * per, y + s * per, dyhat + s * per);
  } else {
    sum = elementwise(d, nv * per, yhat, y, dyhat);
  }
  memset(dyhat + nv * per, 0, (d->n - nv) * per * sizeof(*dyhat));
  *loss = d->scale * sum;
}

/* ---- codelet: buffers yhat, y, dyhat, loss (one double) ---- */

static void loss_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  _tsr_loss_cpu(cl_arg, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1), TSR_BUF(buffers, 2),
                (double *)STARPU_VECTOR_GET_PTR(buffers[3]));
}

#ifdef TSR_CUDA_CODELETS
/* CUDA (loss_cuda.cu) */
static void loss_cpu_cuda(void *b[], void *a) {
  TSR_CUDA_RUN(_tsr_loss_cuda(TSR_CUDA_WORKER, TSR_CUDA_STREAM, a, TSR_BUF(b, 0), TSR_BUF(b, 1), TSR_BUF(b, 2), TSR_DBUF(b, 3)));
}
#endif

static struct starpu_perfmodel loss_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_loss"};

static struct starpu_codelet cl_loss = {
    .cpu_funcs = {loss_cpu}, TSR_CUDA_FUNCS(loss_cpu_cuda)
    .cpu_funcs_name = {"loss_cpu"},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "tsr_loss",
    .model = &loss_model,
};

int _tsr_insert_loss(const struct _tsr_loss_desc *d, starpu_data_handle_t yhat, starpu_data_handle_t y,
                     starpu_data_handle_t dyhat, starpu_data_handle_t loss, const char *name) {
  struct _tsr_buf bufs[] = {{yhat, STARPU_R}, {y, STARPU_R}, {dyhat, STARPU_W}, {loss, STARPU_W}};
  return _tsr_submit(&cl_loss, d, sizeof(*d), STARPU_DEFAULT_PRIO, name, 4, bufs);
}

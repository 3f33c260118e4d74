/* The CBED simulator as a sample producer of a pool (tsr_loader_open_pool): the options copied,
 * and one multislice work space per StarPU worker, made by the worker at its first sample (a
 * worker runs one task at a time, so it needs no lock); calls from a thread that is not a worker
 * (the input statistics at open) use a work space of their own. */
#include <stdlib.h>

#include "runtime/error.h"
#include "runtime/submit.h"
#include "sim/cbed/cbed.h"

struct worker_ws {
  int ready;
  struct cbed_work w;
  double *buf;
};

struct producer {
  tsr_cbed_opts o;
  struct worker_ws ws[STARPU_NMAXWORKERS];
};

static tsr_status produce(void *user, int64_t index, float *x, float *y) {
  struct producer *p = user;
  int id = starpu_worker_get_id();
  if (id < 0 || id >= STARPU_NMAXWORKERS) return tsr_cbed_sample(&p->o, index, x, y);
  struct worker_ws *ws = &p->ws[id];
  if (!ws->ready) {
    ws->buf = malloc(sizeof(double) * 2 * p->o.grid * p->o.grid);
    if (!ws->buf || _tsr_cbed_work_init(&ws->w, p->o.grid) != 0) {
      _tsr_cbed_work_free(&ws->w);
      free(ws->buf);
      ws->buf = NULL;
      return _tsr_error(TSR_ERR_NOMEM, "cbed: out of memory for a %d x %d work space", p->o.grid, p->o.grid);
    }
    ws->ready = 1;
  }
  return _tsr_cbed_sample_with(&p->o, &ws->w, ws->buf, index, x, y, NULL);
}

static void destroy(void *user) {
  struct producer *p = user;
  for (int i = 0; i < STARPU_NMAXWORKERS; i++)
    if (p->ws[i].ready) {
      _tsr_cbed_work_free(&p->ws[i].w);
      free(p->ws[i].buf);
    }
  free(p);
}

tsr_status tsr_cbed_producer(const tsr_cbed_opts *o, tsr_sample_producer *out) {
  if (!out) return _tsr_error(TSR_ERR_ARG, "tsr_cbed_producer: the producer is NULL");
  TSR_TRY(tsr_cbed_opts_check(o));
  struct producer *p = calloc(1, sizeof *p);
  if (!p) return _tsr_error(TSR_ERR_NOMEM, "cbed: out of memory");
  p->o = *o;
  *out = (tsr_sample_producer){.name = "cbed_sample", .c = o->probes * o->probes, .h = o->pattern, .w = o->pattern,
                               .tc = 1, .th = o->target, .tw = o->target, .produce = produce, .destroy = destroy,
                               .user = p};
  return TSR_OK;
}

/* The CBED simulator as a sample producer of a pool (tsr_loader_open_pool): the options copied,
 * and one multislice work space per StarPU worker, made by the worker at its first sample (a
 * worker runs one task at a time, so it needs no lock); calls from a thread that is not a worker
 * (the input and target statistics at open) use a work space of their own. */
#include <stdlib.h>

#include "runtime/error.h"
#include "runtime/submit.h"
#include "sim/cbed/cbed.h"

struct producer {
  tsr_cbed_opts o;
  struct cbed_work ws[STARPU_NMAXWORKERS]; /* sized by each sample (_tsr_cbed_work_resize) */
};

static tsr_status produce(void *user, int64_t index, float *x, float *y) {
  struct producer *p = user;
  int id = starpu_worker_get_id();
  if (id < 0 || id >= STARPU_NMAXWORKERS) return tsr_cbed_sample(&p->o, index, x, y);
  return _tsr_cbed_sample_with(&p->o, &p->ws[id], index, x, y, NULL);
}

static void destroy(void *user) {
  struct producer *p = user;
  for (int i = 0; i < STARPU_NMAXWORKERS; i++) _tsr_cbed_work_free(&p->ws[i]);
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

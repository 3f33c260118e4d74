/* NaN/Inf scan of a gradient tensor. The scan is one pass of OR-ed exponent tests that gcc
 * vectorises; only when it finds something is the record taken under the lock, keeping the lowest
 * step (tasks of consecutive steps may finish out of order across tensors) and within it the tensor
 * nearest the output (where a NaN coming from the loss shows first), so the report is reproducible. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codelets.h"
#include "check_finite.h"

void _tsr_finite_init(struct _tsr_finite *f) {
  pthread_mutex_init(&f->lock, NULL);
  _tsr_finite_reset(f);
}

void _tsr_finite_reset(struct _tsr_finite *f) {
  pthread_mutex_lock(&f->lock);
  f->step = -1, f->name[0] = '\0', f->value = 0;
  pthread_mutex_unlock(&f->lock);
}

size_t _tsr_find_nonfinite(const float *x, size_t n) {
  enum { BLOCK = 1024 };
  for (size_t b = 0; b < n; b += BLOCK) {
    size_t e = b + BLOCK < n ? b + BLOCK : n;
    uint32_t bad = 0;
    for (size_t i = b; i < e; i++) {
      uint32_t u;
      memcpy(&u, &x[i], 4);
      bad |= (uint32_t)((u & 0x7F800000u) == 0x7F800000u);
    }
    if (bad)
      for (size_t i = b; i < e; i++)
        if (!isfinite(x[i])) return i;
  }
  return n;
}

struct finite_arg {
  struct _tsr_finite *f;
  int64_t step;
  int index;
  char name[96];
};

static void check_finite_cpu(void *buffers[], void *cl_arg) {
  const struct finite_arg *a = cl_arg;
  const float *x = TSR_BUF(buffers, 0);
  size_t n = TSR_NX(buffers, 0), i = _tsr_find_nonfinite(x, n);
  if (i == n) return;
  struct _tsr_finite *f = a->f;
  pthread_mutex_lock(&f->lock);
  if (f->step < 0 || a->step < f->step || (a->step == f->step && a->index < f->index)) {
    f->step = a->step, f->index = a->index, f->value = x[i];
    snprintf(f->name, sizeof f->name, "%s", a->name);
  }
  pthread_mutex_unlock(&f->lock);
}

static struct starpu_perfmodel check_finite_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_check_finite"};
static struct starpu_codelet cl_check_finite = {
    .cpu_funcs = {check_finite_cpu}, .cpu_funcs_name = {"check_finite_cpu"}, .nbuffers = 1,
    .modes = {STARPU_R}, .name = "tsr_check_finite", .model = &check_finite_model};

int _tsr_insert_check_finite(starpu_data_handle_t h, const char *name, int index, struct _tsr_finite *f, int64_t step) {
  struct finite_arg a = {.f = f, .step = step, .index = index};
  snprintf(a.name, sizeof a.name, "%s", name);
  struct _tsr_buf b = {h, STARPU_R};
  return _tsr_submit(&cl_check_finite, &a, sizeof a, STARPU_DEFAULT_PRIO, "check_finite", 1, &b);
}

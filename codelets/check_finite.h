/* Finiteness check of gradients: a task per trainable tensor and step that records the first
 * (lowest step) tensor holding a NaN or Inf, so the trainer can report it by name. */
#ifndef TSR_CODELETS_CHECK_FINITE_H
#define TSR_CODELETS_CHECK_FINITE_H

#include <pthread.h>
#include <stdint.h>
#include <starpu.h>

struct _tsr_finite {
  pthread_mutex_t lock;
  int64_t step;   /* -1: nothing non-finite seen */
  int index;      /* tensor index (backward order): the lowest wins within a step */
  char name[96];  /* tensor of the first non-finite value seen in `step` */
  float value;    /* that value */
};

void _tsr_finite_init(struct _tsr_finite *f);
void _tsr_finite_reset(struct _tsr_finite *f);
/* First index of a non-finite value in x[0..n), or n. */
size_t _tsr_find_nonfinite(const float *x, size_t n);
/* Reads `h` (STARPU_R) after the gradient of `name` in step `step` is final. */
int _tsr_insert_check_finite(starpu_data_handle_t h, const char *name, int index, struct _tsr_finite *f, int64_t step);

#endif

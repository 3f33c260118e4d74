/* tessera-train's early stopping and best checkpoint: the lowest loss seen at an epoch end (the
 * validation loss, else the training loss), the epochs since it last improved by more than the
 * minimum delta, kept in <checkpoint-dir>/best.json so that a resumed run continues the count. */
#ifndef TSR_TRAIN_BEST_H
#define TSR_TRAIN_BEST_H

#include <stddef.h>

struct best {
  double loss;  /* lowest epoch loss so far; NAN before the first epoch */
  int epoch;    /* its epoch (0: none yet) */
  int stale;    /* epochs since then without an improvement */
};

void best_init(struct best *b);
/* Counts an epoch's loss: returns 1 when it improves on the best by more than min_delta (it then
 * becomes the best), else 0 (stale grows; a non-finite loss never improves). */
int best_update(struct best *b, int epoch, double loss, double min_delta);
/* dir/best.json: read (a missing file leaves *b as it is) or written; 0, or -1 with err. */
int best_load(struct best *b, const char *dir, char *err, size_t cap);
int best_save(const struct best *b, const char *dir, char *err, size_t cap);
/* dir/best.h5 into buf. */
void best_path(const char *dir, char *buf, size_t cap);

#endif

/* Pictures of a trained model's predictions: for each of the first `count` samples of a loader
 * range, one PNG with the target, the prediction and their difference side by side, with titles,
 * axes and colour bars (gnuplot; without it, bare panels written with libpng). */
#ifndef TSR_PREDICT_PNG_H
#define TSR_PREDICT_PNG_H

#include <stdint.h>
#include <tessera.h>

/* Writes DIR/sample_NNNNN.png for samples first .. first + count - 1 of `l` (count is capped by the
 * data); `units` labels the colour bars (data_target_units). Returns 0, or -1 with a message in `err`. */
int predict_png(tsr_trainer *t, tsr_loader *l, int64_t first, int count, const char *units, const char *dir, char *err,
                size_t errlen);

#endif

/* Early stopping and the best checkpoint's bookkeeping (see train_best.h). best.json is written
 * through a temporary file and a rename, so a kill leaves the old or the new one. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train_best.h"

void best_init(struct best *b) { *b = (struct best){.loss = NAN}; }

int best_update(struct best *b, int epoch, double loss, double min_delta) {
  if (isfinite(loss) && (isnan(b->loss) || loss < b->loss - min_delta)) {
    b->loss = loss, b->epoch = epoch, b->stale = 0;
    return 1;
  }
  b->stale++;
  return 0;
}

void best_path(const char *dir, char *buf, size_t cap) { snprintf(buf, cap, "%s/best.h5", dir); }

int best_load(struct best *b, const char *dir, char *err, size_t cap) {
  char path[4200];
  snprintf(path, sizeof path, "%s/best.json", dir);
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) {
    FILE *f = fopen(path, "r");
    if (!f && errno == ENOENT) return 0;
    if (f) fclose(f);
    snprintf(err, cap, "%s: %s", path, je.text);
    return -1;
  }
  json_t *loss = json_object_get(root, "loss"), *epoch = json_object_get(root, "epoch"),
         *stale = json_object_get(root, "stale");
  int ok = (json_is_number(loss) || json_is_null(loss)) && json_is_integer(epoch) && json_is_integer(stale);
  if (ok) b->loss = json_is_null(loss) ? NAN : json_number_value(loss), b->epoch = (int)json_integer_value(epoch), b->stale = (int)json_integer_value(stale);
  else snprintf(err, cap, "%s: expected 'loss' (a number or null), 'epoch' and 'stale' (integers)", path);
  json_decref(root);
  return ok ? 0 : -1;
}

int best_save(const struct best *b, const char *dir, char *err, size_t cap) {
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/best.json", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  /* %.17g reads back bitwise; before any finite epoch loss there is no best (null) */
  int ok = f && (isnan(b->loss) ? fprintf(f, "{\"loss\": null") : fprintf(f, "{\"loss\": %.17g", b->loss)) > 0 &&
           fprintf(f, ", \"epoch\": %d, \"stale\": %d}\n", b->epoch, b->stale) > 0;
  if (f && fclose(f) != 0) ok = 0;
  if (ok && rename(tmp, path) != 0) ok = 0;
  if (!ok) snprintf(err, cap, "%s: cannot write: %s", path, strerror(errno));
  return ok ? 0 : -1;
}

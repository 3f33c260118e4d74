/* Boxes of a sample's spatial axes (box.h): checks that name the axis, and the cut from a whole
 * sample in memory, row by row along the last axis. */
#include <string.h>

#include "data/box.h"
#include "runtime/error.h"

static const char *axis_name(int nsp, int a) {
  static const char *const names3[] = {"D", "H", "W"}, *const names2[] = {"H", "W"};
  return nsp == 3 ? names3[a] : nsp == 2 ? names2[a] : "?";
}

tsr_status _tsr_box_check(const char *what, const tsr_shape *s, const int64_t *start, const int64_t *extent) {
  if (!start || !extent)
    return _tsr_error(TSR_ERR_ARG, "%s: box read without %s", what, start ? "extents" : "start offsets");
  int nsp = s->ndim - 1;
  char shape[96];
  for (int a = 0; a < nsp; a++) {
    int64_t n = s->dims[a + 1];
    if (start[a] < 0 || extent[a] < 1 || start[a] > n || extent[a] > n - start[a])
      return _tsr_error(TSR_ERR_ARG,
                        "%s: box axis %d (%s): start %lld with extent %lld does not fit in the sample's %lld (per-sample "
                        "shape %s)",
                        what, a, axis_name(nsp, a), (long long)start[a], (long long)extent[a], (long long)n,
                        tsr_shape_str(s, shape, sizeof shape));
  }
  return TSR_OK;
}

int64_t _tsr_box_numel(const tsr_shape *s, const int64_t *extent) {
  int64_t n = s->dims[0];
  for (int a = 0; a < s->ndim - 1; a++) n *= extent[a];
  return n;
}

void _tsr_box_cut(const tsr_shape *s, const int64_t *start, const int64_t *extent, const float *whole, float *out) {
  int nsp = s->ndim - 1;
  /* rows along the last axis: one memcpy per (channel, outer spatial index) */
  int64_t rows = s->dims[0], row = extent[nsp - 1];
  for (int a = 0; a < nsp - 1; a++) rows *= extent[a];
  for (int64_t r = 0; r < rows; r++) {
    int64_t rem = r, off[3] = {0};
    for (int a = nsp - 2; a >= 0; a--) off[a] = rem % extent[a], rem /= extent[a];
    /* rem is now the channel; offset in the whole sample: ((c * D + d) * H + h) * W + w */
    int64_t at = rem;
    for (int a = 0; a < nsp; a++) at = at * s->dims[a + 1] + start[a] + (a < nsp - 1 ? off[a] : 0);
    memcpy(out + r * row, whole + at, sizeof(float) * row);
  }
}

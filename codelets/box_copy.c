/* Sub-box copies between arrays (halo slabs, blocks inside halo'd copies, gathered maps) and
 * fixed-order sums of double vectors over a group: the CPU kernels and their tasks (box.h). */
#include <string.h>

#include "box_copy.h"
#include "codelets.h"

/* The descriptor's axes padded in front to TSR_BOX_AXES (extent 1, offset 0). */
static void pad_axes(const struct _tsr_box_desc *d, int *se, int *de, int *sl, int *dl, int *len) {
  int off = TSR_BOX_AXES - d->nd;
  for (int a = 0; a < TSR_BOX_AXES; a++) {
    int in = a - off;
    se[a] = in < 0 ? 1 : d->src_ext[in], de[a] = in < 0 ? 1 : d->dst_ext[in];
    sl[a] = in < 0 ? 0 : d->src_lo[in], dl[a] = in < 0 ? 0 : d->dst_lo[in];
    len[a] = in < 0 ? 1 : d->len[in];
  }
}

static int64_t count(const struct _tsr_box_desc *d, const int *ext) {
  int64_t n = d->outer;
  for (int a = 0; a < d->nd; a++) n *= ext[a];
  return n;
}

int64_t _tsr_box_dst_count(const struct _tsr_box_desc *d) { return count(d, d->dst_ext); }
int64_t _tsr_box_src_count(const struct _tsr_box_desc *d) { return count(d, d->src_ext); }

void _tsr_box_copy_cpu(const struct _tsr_box_desc *d, const float *src, float *dst) {
  int se[3], de[3], sl[3], dl[3], len[3];
  pad_axes(d, se, de, sl, dl, len);
  if (d->fill) {
    int64_t n = _tsr_box_dst_count(d);
    for (int64_t i = 0; i < n; i++) dst[i] = d->value;
  }
  const float scale = d->scale;
  for (int64_t o = 0; o < d->outer; o++)
    for (int i0 = 0; i0 < len[0]; i0++)
      for (int i1 = 0; i1 < len[1]; i1++) {
        const float *s = src + ((o * se[0] + sl[0] + i0) * (int64_t)se[1] + sl[1] + i1) * se[2] + sl[2];
        float *t = dst + ((o * de[0] + dl[0] + i0) * (int64_t)de[1] + dl[1] + i1) * de[2] + dl[2];
        if (d->add)
          for (int i2 = 0; i2 < len[2]; i2++) t[i2] += scale * s[i2];
        else if (scale == 1.0f)
          memcpy(t, s, (size_t)len[2] * sizeof *t);
        else
          for (int i2 = 0; i2 < len[2]; i2++) t[i2] = scale * s[i2];
      }
}

void _tsr_sum_doubles_cpu(int n, int own, const double *const *parts, double *acc, size_t len) {
  for (size_t i = 0; i < len; i++) {
    double s = 0;
    for (int k = 0; k < n; k++) s += k == own ? acc[i] : parts[k][i];
    acc[i] = s;
  }
}

/* buffers: 0 src, 1 dst */
static void box_copy_cpu(void *buffers[], void *cl_arg) {
  _tsr_worker_enter();
  _tsr_box_copy_cpu(cl_arg, TSR_BUF(buffers, 0), TSR_BUF(buffers, 1));
}

/* cl_arg: {n, own}; buffers: the n parts in order, part `own` being the accumulator */
static void sum_doubles_task_cpu(void *buffers[], void *cl_arg) {
  int a[2];
  memcpy(a, cl_arg, sizeof a);
  const double *parts[a[0]];
  for (int k = 0; k < a[0]; k++) parts[k] = TSR_DBUF(buffers, k);
  _tsr_sum_doubles_cpu(a[0], a[1], parts, TSR_DBUF(buffers, a[1]), TSR_NX(buffers, a[1]));
}

static struct starpu_perfmodel box_copy_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_box_copy"};
static struct starpu_perfmodel sum_doubles_model = {.type = STARPU_HISTORY_BASED, .symbol = "tsr_sum_doubles"};
static struct starpu_codelet cl_box_copy = {.cpu_funcs = {box_copy_cpu},
                                            .cpu_funcs_name = {"box_copy_cpu"},
                                            .nbuffers = STARPU_VARIABLE_NBUFFERS,
                                            .name = "tsr_box_copy",
                                            .model = &box_copy_model};
static struct starpu_codelet cl_sum_doubles = {.cpu_funcs = {sum_doubles_task_cpu},
                                               .cpu_funcs_name = {"sum_doubles_task_cpu"},
                                               .nbuffers = STARPU_VARIABLE_NBUFFERS,
                                               .name = "tsr_sum_doubles",
                                               .model = &sum_doubles_model};

int _tsr_insert_box_copy(const struct _tsr_box_desc *d, starpu_data_handle_t src, starpu_data_handle_t dst,
                         const char *name) {
  int covers = 1;
  for (int a = 0; a < d->nd; a++) covers &= d->dst_lo[a] == 0 && d->len[a] == d->dst_ext[a];
  struct _tsr_buf b[2] = {{src, STARPU_R}, {dst, d->fill || (covers && !d->add) ? STARPU_W : STARPU_RW}};
  return _tsr_submit(&cl_box_copy, d, sizeof *d, STARPU_MAX_PRIO, name, 2, b);
}

int _tsr_insert_sum_doubles(int n, int own, const starpu_data_handle_t *parts, const char *name) {
  struct _tsr_buf b[n];
  for (int k = 0; k < n; k++) b[k] = (struct _tsr_buf){parts[k], k == own ? STARPU_RW : STARPU_R};
  int a[2] = {n, own};
  return _tsr_submit(&cl_sum_doubles, a, sizeof a, STARPU_MAX_PRIO, name, n, b);
}

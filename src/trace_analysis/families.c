/* Operation families of a trace: the codelets grouped by what they do (forward and backward of the
 * convolution and dense layers, the other layers, the loss, gradient reductions, optimizer updates,
 * data loading), so that the summary and the timeline show a handful of kinds of work instead of
 * forty operation names. A task is classified by its operation and, for the sums that both the ring
 * reduction and the gradient accumulation run, by its name. */
#include <string.h>

#include "trace_analysis/timeline.h"

static const char *const names[TSR_TL_NFAMILIES] = {
    "data loading",         "conv/dense forward", "conv/dense backward (data)", "conv/dense backward (weights)",
    "other layers forward", "other layers backward", "loss", "gradient reduction", "optimizer update", "other"};

const char *_tsr_tl_family_name(int f) { return f >= 0 && f < TSR_TL_NFAMILIES ? names[f] : "?"; }

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

int _tsr_tl_family(const char *name, const char *op) {
  if (!strcmp(op, "load")) return TSR_TL_LOAD;
  int heavy = starts(op, "conv2d_") || starts(op, "deconv2d_") || starts(op, "dense_");
  if (heavy && strstr(op, "_fwd")) return TSR_TL_HEAVY_FWD;
  if (heavy && strstr(op, "_bwd_data")) return TSR_TL_HEAVY_BWD_DATA;
  if (heavy && strstr(op, "_bwd_weights")) return TSR_TL_HEAVY_BWD_WEIGHTS;
  if (starts(op, "loss")) return TSR_TL_LOSS;
  if (starts(op, "wire_") || starts(op, "nccl_") || (!strcmp(op, "accumulate") && starts(name, "allreduce")))
    return TSR_TL_REDUCE;
  if (starts(op, "opt_update")) return TSR_TL_UPDATE;
  if (strstr(op, "_fwd") || !strcmp(op, "bn_stats") || !strcmp(op, "bn_finalize") || !strcmp(op, "copy"))
    return TSR_TL_OTHER_FWD;
  if (strstr(op, "_bwd") || !strcmp(op, "accumulate")) return TSR_TL_OTHER_BWD;
  return TSR_TL_OTHER;
}

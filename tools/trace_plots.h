/* tessera-trace's pictures, drawn with gnuplot: the timeline of a window of steps (one lane per
 * worker of each rank and two for its MPI transfers, operation families in distinct colours, step
 * starts and spans, the critical path outlined) and the loss curves of a run (per step and per epoch,
 * training and validation, with the log's other columns as metrics in panels below). */
#ifndef TSR_TRACE_PLOTS_H
#define TSR_TRACE_PLOTS_H

#include <stddef.h>
#include <stdint.h>

/* OUT_DIR/timeline.png (and its data, OUT_DIR/timeline.dat) of steps first..last of trace folder
 * DIR (last < 0: to the end). chosen = 0: the steps were not chosen, and a trace of more than
 * three steps is drawn for the three in its middle. Returns 0; 1 when gnuplot is missing (the data
 * is written); -1 on an error (err). */
int plot_timeline(const char *dir, const char *out_dir, int64_t first, int64_t last, int chosen, char *err, size_t cap);
/* OUT_DIR/loss.png from tessera-train's CSV log (--log, one row per epoch) and/or its step log
 * (--step-log, one row per step); either may be NULL. Returns as plot_timeline. */
int plot_losses(const char *log, const char *step_log, const char *out_dir, char *err, size_t cap);

#endif

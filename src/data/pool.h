/* The pool behind a stream loader (tsr_loader_open_pool): slots of sample buffers registered with
 * StarPU, refilled by production tasks, and the schedule that maps a stream position to a slot and
 * the sample it holds then; the spill of produced samples to HDF5. loader.c is its only user. */
#ifndef TSR_DATA_POOL_H
#define TSR_DATA_POOL_H

#include <starpu.h>
#include <stdint.h>

#include <tessera/loader.h>

struct _tsr_pool;

tsr_status _tsr_pool_create(struct _tsr_pool **p, const tsr_sample_producer *prod, const tsr_pool_opts *o);
/* Waits for the pool's tasks, closes the spill file (renamed into place unless a sample failed);
 * calls the producer's destroy when asked (not when the open fails: the caller keeps it then). */
tsr_status _tsr_pool_destroy(struct _tsr_pool *p, int destroy_producer);
int _tsr_pool_slots(const struct _tsr_pool *p);

/* The sample of stream position `pos`, produced on the calling thread. */
tsr_status _tsr_pool_produce_now(struct _tsr_pool *p, int64_t pos, float *x, float *y);
/* Producer sample `index` (not a stream position) into x and y, on the calling thread: the samples
 * every rank reads alike (the statistics, stats.c). Errors name the rank, producer and sample. */
tsr_status _tsr_pool_produce_index(struct _tsr_pool *p, int64_t index, float *x, float *y);
/* The slot handles (input, target) a task reading position `pos` must read; submits the slot's
 * production first when it does not hold (or will not hold) that position's sample. */
tsr_status _tsr_pool_acquire(struct _tsr_pool *p, int64_t pos, starpu_data_handle_t h[2]);
/* Called once the task reading `pos` is submitted: after a sample's last read, its replacement. */
tsr_status _tsr_pool_read_submitted(struct _tsr_pool *p, int64_t pos);
/* Inside a task that read `pos`: TSR_OK, or the producer's error for that slot's sample. */
tsr_status _tsr_pool_check(struct _tsr_pool *p, int64_t pos);
void _tsr_pool_counts(const struct _tsr_pool *p, int64_t *produced, int *filled, const char **error);

/* ---- spill (spill.c): produced samples appended to HDF5 as the data generators write them ---- */
struct _tsr_spill;
/* Creates path.tmp with datasets inputs [0, c, h, w], targets [0, tc, th, tw] and index [0] (int64,
 * the producer's index of each row), growing as rows are written. */
tsr_status _tsr_spill_open(struct _tsr_spill **s, const char *path, const char *generator, const int shape[6]);
/* Row `row` (thread-safe; rows may come in any order). */
tsr_status _tsr_spill_write(struct _tsr_spill *s, int64_t row, int64_t index, const float *x, const float *y);
/* keep = 1: renamed to path; 0: removed. */
tsr_status _tsr_spill_close(struct _tsr_spill *s, int keep);

#endif

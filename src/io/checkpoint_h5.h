/* What the parts of a checkpoint file share in HDF5 terms: scalar and string attributes
 * (checkpoint_attr.c) and the learning-rate schedule's record (checkpoint_schedule.c). Callers hold
 * the HDF5 lock. */
#ifndef TSR_IO_CHECKPOINT_H5_H
#define TSR_IO_CHECKPOINT_H5_H

#include <hdf5.h>

#include "io/checkpoint_int.h"

/* Scalar attribute of obj, stored as ftype from mtype; a string attribute. < 0 on failure. */
herr_t _tsr_ck_attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v);
herr_t _tsr_ck_attr_write_str(hid_t obj, const char *name, const char *v);
/* Reads scalar attribute `name` of obj converted to mtype; a fixed-size string of at most cap - 1
 * bytes. TSR_ERR_FORMAT naming the file and the attribute. */
tsr_status _tsr_ck_attr_read(hid_t obj, const char *file, const char *name, hid_t mtype, void *v);
tsr_status _tsr_ck_attr_read_str(hid_t obj, const char *file, const char *name, char *buf, size_t cap);

/* The group /schedule: written and hashed only when m->has_schedule; read sets has_schedule to
 * whether the file has one. */
uint64_t _tsr_ck_schedule_hash(uint64_t h, const tsr_checkpoint_meta *m);
herr_t _tsr_ck_schedule_write(hid_t f, const tsr_checkpoint_meta *m);
tsr_status _tsr_ck_schedule_read(hid_t f, const char *file, tsr_checkpoint_meta *m);

#endif

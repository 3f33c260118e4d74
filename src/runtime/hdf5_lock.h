/* Debian's HDF5 is not thread-safe: every HDF5 call after start-up goes through this one
 * process-wide lock (load tasks on several workers, parameter export, the generator's writer). */
#ifndef TSR_HDF5_LOCK_H
#define TSR_HDF5_LOCK_H

void _tsr_hdf5_lock(void);
void _tsr_hdf5_unlock(void);
/* HDF5's innermost error message of the failed call, for error reports. */
const char *_tsr_hdf5_reason(char buf[256]);

#include <hdf5.h>
/* Scalar attribute `name` of type `type` (or a string) on an HDF5 object; 1 on success. */
int _tsr_h5_attr(hid_t obj, const char *name, hid_t type, const void *value);
int _tsr_h5_attr_str(hid_t obj, const char *name, const char *value);

#endif

/* Debian's HDF5 is not thread-safe: every HDF5 call after start-up goes through this one
 * process-wide lock (load tasks on several workers, parameter export, the generator's writer). */
#ifndef TSR_HDF5_LOCK_H
#define TSR_HDF5_LOCK_H

void _tsr_hdf5_lock(void);
void _tsr_hdf5_unlock(void);
/* HDF5's innermost error message of the failed call, for error reports. */
const char *_tsr_hdf5_reason(char buf[256]);

#endif

/* StarPU's bus calibration, done by one process at a time on a machine (bus_calibration.c). */
#ifndef TSR_RUNTIME_BUS_CALIBRATION_H
#define TSR_RUNTIME_BUS_CALIBRATION_H

/* Makes sure StarPU's bus calibration files for this host exist before StarPU starts for real:
 * under a lock file beside them, the first process that finds no `<host>.config` starts and stops a
 * bare StarPU, which measures the bus and writes them; processes that wait for the lock find them
 * written. Without it, ranks started together on a machine whose StarPU has not measured its bus
 * all measure at once and read each other's half-written files (StarPU 1.3 then aborts in
 * check_bus_affinity_file). 0 when done or not needed; when the folder or the lock cannot be made
 * (a read-only home) it returns -1 and StarPU calibrates as it would have. */
int _tsr_bus_calibrate_once(void);

#endif

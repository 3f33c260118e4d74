/* Hang diagnostics, a debugging aid switched on by TESSERA_HANG_DUMP (the test suite sets it): a
 * process that stops making progress prints every thread's stack (gdb attached to itself) to stderr
 * under a line starting "tessera: hang detected", so that a rare hang leaves its trace in a log. */
#ifndef TSR_RUNTIME_HANG_H
#define TSR_RUNTIME_HANG_H

/* Prints "tessera: hang detected (WHAT)" and every thread's stack, once per process; nothing without
 * TESSERA_HANG_DUMP. */
void _tsr_hang_dump(const char *what);

/* Before StarPU starts: with TESSERA_HANG_DUMP set, turns on StarPU's watchdog (a process with
 * submitted tasks of which none ends for TESSERA_HANG_DUMP seconds, 60 if it is not a number above
 * 1, dumps its stacks and aborts). The user's STARPU_WATCHDOG_* settings take precedence. */
void _tsr_hang_watch_prepare(void);
/* After StarPU started: the watchdog's hook. */
void _tsr_hang_watch_start(void);

#endif

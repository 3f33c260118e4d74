/* Internal error reporting: set the thread's last error message and return the status. */
#ifndef TSR_ERROR_H
#define TSR_ERROR_H

#include <tessera/status.h>

#if defined(__GNUC__)
#define TSR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TSR_PRINTF(a, b)
#endif

/* Formats the message, stores it for tsr_last_error() and returns `s`. */
tsr_status _tsr_error(tsr_status s, const char *fmt, ...) TSR_PRINTF(2, 3);
void _tsr_error_clear(void);
/* Logging to stderr, filtered by the context's verbosity (0 quiet, 1 info, 2 debug). */
void _tsr_log(int level, const char *fmt, ...) TSR_PRINTF(2, 3);
void _tsr_set_verbosity(int level);
int _tsr_get_verbosity(void);

#define TSR_TRY(expr)                                                                              \
  do {                                                                                             \
    tsr_status _s = (expr);                                                                        \
    if (_s != TSR_OK) return _s;                                                                   \
  } while (0)

#endif

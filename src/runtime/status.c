/* Status names and the per-thread last-error message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/error.h"

static _Thread_local char last_error[1024];
static int verbosity = 1;

const char *tsr_last_error(void) { return last_error; }

tsr_status _tsr_error(tsr_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return s;
}

void _tsr_error_clear(void) { last_error[0] = '\0'; }

void _tsr_set_verbosity(int level) { verbosity = level; }
int _tsr_get_verbosity(void) { return verbosity; }

void _tsr_log(int level, const char *fmt, ...) {
  if (level > verbosity) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("tessera: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

const char *tsr_status_name(tsr_status s) {
  switch (s) {
  case TSR_OK: return "TSR_OK";
  case TSR_ERR_ARG: return "TSR_ERR_ARG";
  case TSR_ERR_SHAPE: return "TSR_ERR_SHAPE";
  case TSR_ERR_IO: return "TSR_ERR_IO";
  case TSR_ERR_FORMAT: return "TSR_ERR_FORMAT";
  case TSR_ERR_RUNTIME: return "TSR_ERR_RUNTIME";
  case TSR_ERR_NOMEM: return "TSR_ERR_NOMEM";
  case TSR_ERR_STATE: return "TSR_ERR_STATE";
  case TSR_ERR_MISMATCH: return "TSR_ERR_MISMATCH";
  case TSR_ERR_NUMERIC: return "TSR_ERR_NUMERIC";
  }
  return "TSR_ERR_UNKNOWN";
}

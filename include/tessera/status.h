/* Status codes and the per-thread error message of the last failed call. */
#ifndef TESSERA_STATUS_H
#define TESSERA_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tsr_status {
  TSR_OK = 0,
  TSR_ERR_ARG = -1,      /* an argument is invalid (the message names it) */
  TSR_ERR_SHAPE = -2,    /* shapes do not fit (the message names the layer and the shapes) */
  TSR_ERR_IO = -3,       /* a file could not be read or written */
  TSR_ERR_FORMAT = -4,   /* a file's content is malformed (the message gives file, position, field) */
  TSR_ERR_RUNTIME = -5,  /* StarPU, MPI or a kernel library failed */
  TSR_ERR_NOMEM = -6,    /* an allocation failed */
  TSR_ERR_STATE = -7,    /* the call is not valid in the object's current state */
  TSR_ERR_MISMATCH = -8, /* ranks disagree (model, data shapes) */
  TSR_ERR_NUMERIC = -9   /* NaN or Inf found */
} tsr_status;

/* Message of the last failed call on this thread ("" if none). */
const char *tsr_last_error(void);
/* Short name of a status code ("TSR_ERR_SHAPE"). */
const char *tsr_status_name(tsr_status s);

#ifdef __cplusplus
}
#endif
#endif

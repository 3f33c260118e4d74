/* Tessera public API: include this one header.
 * Every call returns tsr_status (0 = TSR_OK, negative = error) and leaves a message for
 * tsr_last_error(). Tensors are float32 NCHW; names are tsr_<noun>_<verb>. */
#ifndef TESSERA_H
#define TESSERA_H

#include <tessera/status.h>
#include <tessera/context.h>
#include <tessera/tensor.h>
#include <tessera/model.h>
#include <tessera/train.h>
#include <tessera/schedule.h>
#include <tessera/data.h>
#include <tessera/params.h>
#include <tessera/trace.h>
#include <tessera/scale.h>
#include <tessera/cbed.h>
#include <tessera/cosmo.h>
#include <tessera/loader.h>
#include <tessera/checkpoint.h>
#include <tessera/memory.h>
#include <tessera/metrics.h>

#endif

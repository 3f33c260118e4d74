/* Process-wide switches (see switches.h). */
#include "runtime/switches.h"

static int deterministic, precision;
static uint32_t only_where;
static int gpu_only;
static int plain_layouts; /* 0: blocked layouts and fusions allowed (the default) */

void _tsr_set_deterministic(int on) { deterministic = on; }
int _tsr_get_deterministic(void) { return deterministic; }
void _tsr_set_precision(int p) { precision = p; }
int _tsr_get_precision(void) { return precision; }
void _tsr_set_where(uint32_t where) { only_where = where; }
void _tsr_set_gpu_only(int on) { gpu_only = on; }
int _tsr_get_gpu_only(void) { return gpu_only; }
uint32_t _tsr_get_where(void) { return only_where; }
void _tsr_set_blocked_fused(int on) { plain_layouts = !on; }
int _tsr_get_blocked_fused(void) { return !plain_layouts; }

/* Process-wide switches, owned by the runtime and set by the context (tsr_context_opts) before any
 * task runs: numerical precision of convolutions, deterministic mode, placement restriction. The
 * codelets and the training code read them here; nothing else keeps a copy. */
#ifndef TSR_RUNTIME_SWITCHES_H
#define TSR_RUNTIME_SWITCHES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Deterministic mode: fixed accumulation order, deterministic GPU algorithms, CUDA twins preferred. */
void _tsr_set_deterministic(int on);
int _tsr_get_deterministic(void);
/* Precision of conv and transposed conv (TSR_PRECISION_* of tessera/context.h); cached oneDNN
 * plans are keyed by it. */
void _tsr_set_precision(int precision);
int _tsr_get_precision(void);
/* Tests: tasks whose codelet has an implementation for `where` (STARPU_CPU or STARPU_CUDA) run
 * only there, the others wherever they can; 0 (the default) restricts nothing. */
void _tsr_set_where(uint32_t where);
uint32_t _tsr_get_where(void);
/* tsr_context_opts.gpu_only: tasks that have a CUDA kernel run on CUDA workers (as in deterministic
 * mode with GPUs, without its other restrictions). */
void _tsr_set_gpu_only(int on);
int _tsr_get_gpu_only(void);
/* Activations between layers in oneDNN's blocked layout where every layer around them handles it,
 * and fused layers (batchnorm + relu): on by default; off keeps every activation plain NCHW and
 * every layer its own tasks (tests compare the two). Read when a trainer is created. */
void _tsr_set_blocked_fused(int on);
int _tsr_get_blocked_fused(void);

#ifdef __cplusplus
}
#endif
#endif

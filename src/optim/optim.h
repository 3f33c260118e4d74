/* Optimizers as an interface: one entry (struct _tsr_optim_ops) per optimizer, defined in the
 * optimizer's own file (sgd.c; adam.c holds Adam and AdamW) and listed in registry.c. An entry
 * names the optimizer, lists its hyperparameters (fields of tsr_optim_spec, with their defaults and
 * model-file keys), the state tensors it keeps per trainable tensor (the trainer allocates exactly
 * those; checkpoints store each under its name) and its update kernels, which update.c runs as one
 * task per tensor. Adding an optimizer: its file (+ its CUDA twin <name>_cuda.cu, optional), one
 * line in registry.c, Makefile.am. LARC wraps the entries that name a larc_cpu kernel (update.c);
 * LAMB is an entry of its own (lamb.c). Learning-rate schedules are entries too: schedule.h. */
#ifndef TSR_OPTIM_OPTIM_H
#define TSR_OPTIM_OPTIM_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>
#include <tessera/train.h>

#include "cuda_util.h" /* TSR_CUDA_CODELETS */

#ifdef __cplusplus /* the CUDA kernels (*_cuda.cu) read struct _tsr_optim_args */
extern "C" {
#endif

#define TSR_OPTIM_MAX_STATE 4
/* The `kind` of an entry that is not in the public enum: it gets a tsr_optim_kind value after
 * TSR_OPTIM_KIND_COUNT, in registry order (stable within one build; files name kinds by string). */
#define TSR_OPTIM_REGISTERED (-1)

struct _tsr_scale_state; /* codelets.h */

/* What an update kernel reads: the hyperparameters (h.lr is this step's rate), the 1-based count
 * of applied updates (bias corrections) and the factor every gradient is multiplied by first. */
struct _tsr_optim_args {
  tsr_optim_spec h;
  int64_t step;
  float grad_scale;
};

/* How a model file gives a hyperparameter (and the range it must be in). */
enum _tsr_hyper_type {
  TSR_HYPER_POSITIVE, /* a number > 0: a float field */
  TSR_HYPER_NONNEG,   /* a number >= 0 */
  TSR_HYPER_PROB,     /* a number in [0, 1) */
  TSR_HYPER_BOOL,     /* true or false: an int field */
  TSR_HYPER_PROB_PAIR, /* [a, b], each in [0, 1): two float fields */
  TSR_HYPER_NAMES      /* a string or an array of strings: joined by commas into a char[TSR_OPTIM_NAMES] */
};

struct _tsr_optim_hyper {
  const char *key; /* in model files; NULL ends a list */
  enum _tsr_hyper_type type;
  const char *name[2]; /* the fields as reports of changed hyperparameters name them; [1]: pairs only */
  size_t offset[2];    /* of the fields in tsr_optim_spec (an extra[] slot for what it has no field for) */
  float def[2];        /* defaults */
};
#define TSR_HYPER(key, type, field, def) {key, type, {#field, NULL}, {offsetof(tsr_optim_spec, field), 0}, {def, 0}}
#define TSR_HYPER_PAIR(key, f1, f2, d1, d2)                                                                  \
  {key, TSR_HYPER_PROB_PAIR, {#f1, #f2}, {offsetof(tsr_optim_spec, f1), offsetof(tsr_optim_spec, f2)}, {d1, d2}}

/* Update kernels, on one tensor of n values: w -= f(g, state). state: the entry's nstate buffers of n
 * values each, zero before the first update. The CUDA one gets the loss scaler's state in device
 * memory (gate, or NULL): when given, it skips the update unless gate->apply, and otherwise uses
 * gate->unscale for grad_scale and step - gate->skipped for step (update_cuda.h reads it). */
typedef void _tsr_optim_cpu_fn(const struct _tsr_optim_args *a, size_t n, float *w, const float *g,
                               float *const *state);
/* The two halves of an update for reductions that combine update directions instead of gradients
 * (the sign reductions of src/comm/sign.c): `direction` overwrites the gradient g with this rank's
 * direction and advances the state; `apply` moves w along the direction d the ranks agreed on. */
typedef void _tsr_optim_dir_fn(const struct _tsr_optim_args *a, size_t n, float *g, float *const *state);
typedef void _tsr_optim_apply_fn(const struct _tsr_optim_args *a, size_t n, float *w, const float *d);
typedef int _tsr_optim_cuda_fn(void *stream, const struct _tsr_optim_args *a, size_t n, float *w, const float *g,
                               float *const *state, const struct _tsr_scale_state *gate);
/* CUDA twins of the halves, queued on `stream` (state: a host array of device pointers). 0, or -1
 * after reporting the failed call. */
typedef int _tsr_optim_dir_cuda_fn(void *stream, const struct _tsr_optim_args *a, size_t n, float *g,
                                   float *const *state);
typedef int _tsr_optim_apply_cuda_fn(void *stream, const struct _tsr_optim_args *a, size_t n, float *w,
                                     const float *d);

struct _tsr_optim_ops {
  const char *name; /* in model files, checkpoints and messages; NULL ends a table */
  int kind;         /* its tsr_optim_kind, or TSR_OPTIM_REGISTERED */
  const struct _tsr_optim_hyper *hyper;
  int nstate; /* state tensors per trainable tensor (its shape), in this order */
  const char *state[TSR_OPTIM_MAX_STATE]; /* their names: checkpoint groups */
  _tsr_optim_cpu_fn *cpu;
  _tsr_optim_cuda_fn *cuda; /* NULL: updates run on CPU workers only */
  /* (optional) the kernel LARC wraps: one that adds h.weight_decay * w to the gradient (L2), to
   * which LARC hands its scaled decay (AdamW: Adam's kernel, since apex's LARC turns the decoupled
   * decay into a gradient term). NULL: LARC is refused for this optimizer. CPU only. */
  _tsr_optim_cpu_fn *larc_cpu;
  _tsr_optim_dir_fn *direction; /* (optional, with apply) for sign reductions */
  _tsr_optim_apply_fn *apply;
  _tsr_optim_dir_cuda_fn *direction_cuda; /* NULL: the halves run on CPU workers only */
  _tsr_optim_apply_cuda_fn *apply_cuda;
};

/* The model-file keys of LARC, in the hyperparameter list of every entry that has larc_cpu. */
#define TSR_LARC_HYPERS                                                                                      \
  TSR_HYPER("larc", TSR_HYPER_BOOL, larc, 0), TSR_HYPER("larc_eta", TSR_HYPER_POSITIVE, larc_eta, 0.02f),     \
      TSR_HYPER("larc_clip", TSR_HYPER_BOOL, larc_clip, 1)

/* The extra[] slot of Lion's momentum_sync_every (float32 averaging of the momenta across ranks
 * every k steps under a sign reduction; 0: never; only the layers of momentum_sync_layers when set). */
#define TSR_HYPER_SYNC_EVERY 0

/* In an entry: its CUDA kernel, named only when StarPU can run CUDA tasks. */
/* TSR_OPTIM_SIGN_CUDA(d, a): the CUDA kernels of its direction and apply halves, likewise. */
#ifdef TSR_CUDA_CODELETS
#define TSR_OPTIM_CUDA(f) .cuda = f
#define TSR_OPTIM_SIGN_CUDA(d, a) .direction_cuda = d, .apply_cuda = a
#else
#define TSR_OPTIM_CUDA(f) .cuda = NULL
#define TSR_OPTIM_SIGN_CUDA(d, a) .direction_cuda = NULL, .apply_cuda = NULL
#endif

/* ---- lion_cuda.cu (CUDA builds): its kernels' per-index code run on the host, for tests ---- */
void _tsr_lion_update_host(const struct _tsr_optim_args *a, size_t n, float *w, const float *g, float *m);
void _tsr_lion_direction_host(const struct _tsr_optim_args *a, size_t n, float *g, float *m);
void _tsr_lion_apply_host(const struct _tsr_optim_args *a, size_t n, float *w, const float *d);

/* ---- registry.c ---- */
/* The entry of kind `kind` (a tsr_optim_kind or a registry index), NULL if none. */
const struct _tsr_optim_ops *_tsr_optim_ops_of(int kind);
/* "sgd, adam, adamw": the registered names, for messages. */
const char *_tsr_optim_names(char *buf, size_t cap);

/* ---- update.c ---- */
/* TSR_OK if the optimizer of spec can run as given (LARC only around an entry with larc_cpu), else
 * an error naming the optimizer. */
tsr_status _tsr_optim_check(const tsr_optim_spec *spec);
/* Runs the kind's CPU kernel (the task's CPU function; tests call it directly). */
void _tsr_optim_update_cpu(const struct _tsr_optim_args *a, size_t n, float *w, const float *g, float *const *state);
/* One update task: w (RW), g (R), the entry's state handles (RW) and, when scaler is not NULL, the
 * loss scaler's state (R): the update then skips overflowing steps, which do not count in `step`
 * (as torch.cuda.amp skips optimizer.step()). */
int _tsr_optim_submit(const struct _tsr_optim_args *a, starpu_data_handle_t w, starpu_data_handle_t g,
                      const starpu_data_handle_t *state, starpu_data_handle_t scaler, const char *name);
/* The entry's direction task: g (RW, becomes the direction), its state handles (RW). */
int _tsr_optim_submit_direction(const struct _tsr_optim_args *a, starpu_data_handle_t g,
                                const starpu_data_handle_t *state, const char *name);
/* The entry's apply task: w (RW) along d (R). */
int _tsr_optim_submit_apply(const struct _tsr_optim_args *a, starpu_data_handle_t w, starpu_data_handle_t d,
                            const char *name);

#ifdef __cplusplus
}
#endif
#endif

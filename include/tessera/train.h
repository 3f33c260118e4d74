/* Training: a trainer binds a model to a context and a batch size, owns parameters, gradients,
 * optimizer state and per-slice activations, and submits each step as a StarPU task graph. */
#ifndef TESSERA_TRAIN_H
#define TESSERA_TRAIN_H

#include <stdint.h>
#include <tessera/status.h>
#include <tessera/context.h>
#include <tessera/model.h>
#include <tessera/loader.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The optimizers built in; optimizers added to the library's registry get the values after
 * TSR_OPTIM_KIND_COUNT and are found by name (tsr_optim_kind_parse). */
typedef enum tsr_optim_kind {
  TSR_OPTIM_SGD,
  TSR_OPTIM_ADAM,
  TSR_OPTIM_ADAMW,
  TSR_OPTIM_LION,
  TSR_OPTIM_KIND_COUNT
} tsr_optim_kind;

#define TSR_OPTIM_EXTRA 4
#define TSR_OPTIM_NAMES 128
typedef struct tsr_optim_spec {
  tsr_optim_kind kind;
  float lr;
  float momentum;       /* SGD */
  int nesterov;         /* SGD */
  float weight_decay;   /* SGD and Adam: L2 added to the gradient; AdamW and Lion: decoupled */
  float beta1, beta2, eps; /* Adam, AdamW; Lion: beta1, beta2 */
  float extra[TSR_OPTIM_EXTRA]; /* hyperparameters of registry optimizers that have no field above */
  /* LARC (layer-wise adaptive rate clipping, as NVIDIA apex's LARC) around SGD, Adam or AdamW: per
   * tensor, trust = larc_eta |w| / (|g| + weight_decay |w| + 1e-8); with larc_clip the gradient and
   * the decay are scaled by min(trust / lr, 1), else by trust. Off by default; eta 0.02, clip on. */
  int larc;
  float larc_eta;
  int larc_clip;
  /* Lion under a sign reduction (momentum_sync_every >= 1 with a float grad_reduce is refused): the
   * layers whose momenta momentum_sync_every (extra[0]) averages, comma-separated shell patterns
   * (fnmatch) matched against layer and tensor names ("conv*", "out.weight"); "" (the default):
   * every layer. */
  char momentum_sync_layers[TSR_OPTIM_NAMES];
} tsr_optim_spec;

/* SGD: lr 0.01, momentum 0.9; Adam/AdamW: lr 1e-3, betas 0.9/0.999, eps 1e-8; AdamW decay 0.01;
 * Lion: lr 1e-4, betas 0.9/0.99, decay 0.
 * Fields the kind does not use hold Adam's defaults. */
tsr_optim_spec tsr_optim_spec_default(tsr_optim_kind kind);
const char *tsr_optim_kind_name(tsr_optim_kind kind); /* "sgd", "adam", "adamw", "lion"; "?" for none */
tsr_status tsr_optim_kind_parse(const char *name, tsr_optim_kind *kind);
/* The hyperparameters that `to`'s kind uses and that differ in `from`, written to out (cap bytes) as
 * "lr 0.001 -> 0.002, beta2 0.999 -> 0.99"; returns how many. */
int tsr_optim_spec_diff(const tsr_optim_spec *from, const tsr_optim_spec *to, char *out, size_t cap);

typedef struct tsr_trainer tsr_trainer;

/* Number format of gradient chunks on the wire in reductions across ranks: bf16 and fp16 send half
 * the bytes; received chunks are summed in float32, and every rank ends with the same values (the
 * reduced chunk is rounded once and shared). The control word stays float32. */
typedef enum tsr_reduce_precision { TSR_REDUCE_F32 = 0, TSR_REDUCE_BF16 = 1, TSR_REDUCE_FP16 = 2 } tsr_reduce_precision;
/* Names and values come from the library's registry of collectives: a reduction added there is
 * selected by its name through parse, without a constant here. */
const char *tsr_reduce_precision_name(int p); /* "f32", "bf16", "fp16" */
tsr_status tsr_reduce_precision_parse(const char *name, int *p);

/* tsr_trainer_opts.loss_scale: multiply the loss gradient by a scale adjusted from step to step:
 * halved when a step's reduced gradients hold an Inf or NaN (the step's updates are skipped on
 * every rank), doubled after loss_scale_interval finite steps in a row. */
#define TSR_LOSS_SCALE_DYNAMIC (-1.0)

/* Most spatial axes a sample is split along (tsr_trainer_opts.spatial). */
#define TSR_SPATIAL_MAX_AXES 3

typedef struct tsr_trainer_opts {
  int batch;        /* samples per step on this rank */
  int slices;       /* micro-batch slices per step; 0 = one per CPU worker (at most batch) */
  int window;       /* steps in flight before tsr_trainer_step blocks; default 2 */
  uint64_t seed;    /* parameter initialisation and dropout; 0 = the context's seed */
  int check_finite; /* 1 = scan every gradient for NaN/Inf before its update (tsr_trainer_check_finite);
                       ignored with dynamic loss scaling, which skips such steps instead */
  long long group_bytes; /* gradient group size in bytes for the reductions across ranks: 0 =
                            TESSERA_GROUP_BYTES ("layer" = one group per layer), else the model
                            file's, else 256 KiB; -1 = one group per layer */
  int grad_reduce;  /* tsr_reduce_precision of the reductions across ranks; default f32. The sign
                       reductions (sign1, signp, signp_mean) need an optimizer with a direction
                       (Lion), no dynamic loss scaling and no spatial split (`spatial`): refused */
  double loss_scale;       /* 0 = off, > 0 = static scale, TSR_LOSS_SCALE_DYNAMIC */
  double loss_scale_init;  /* dynamic: first scale (0 = 65536) */
  int loss_scale_interval; /* dynamic: finite steps before the scale doubles (0 = 2000) */
  /* Multi-rank runs. 0 in the fields below means "not set": the environment variable named, else
   * the default (README, "Environment variables"). */
  double step_timeout; /* seconds a rank waits for a step before concluding that another rank died
                          or hung (the step then fails): 0 = TESSERA_STEP_TIMEOUT (<= 0 there: wait
                          forever), else 30 s plus 20 times the slowest step so far (before the
                          first step ends: 20 times its FLOPs at 1 GFLOP/s per worker); < 0 = forever */
  int skip_reduce;     /* benchmarks only, results are wrong: 1 = gradients are not reduced across
                          ranks; 0 = TESSERA_SKIP_ALLREDUCE (a nonzero integer: skip), else reduce;
                          -1 = reduce */
  int nccl;            /* with CUDA workers, reduce over NCCL instead of the StarPU-MPI ring:
                          0 = yes unless TESSERA_NO_NCCL is set; 1 = yes; -1 = never */
  const char *collective; /* the reductions' algorithm: "ring", "rd" (recursive doubling), "tree"
                          (binomial tree), "hier" (inside nodes, then a ring across them), "nccl",
                          or "auto" (per group, the least time by the alpha-beta model of links
                          measured at start-up); NULL = TESSERA_COLLECTIVE, else NCCL where it
                          runs, else the ring */
  int spatial[TSR_SPATIAL_MAX_AXES]; /* spatial parallelism: the parts every sample is split into
                          along its spatial axes in order ([H, W] of [C, H, W] samples); 0 or 1 = not
                          split. Their product P must divide the ranks: ranks [r P, r P + P) hold the
                          blocks of the same samples (replica r, block rank % P in row-major order)
                          and the batch (per replica) is split over the size / P replicas. */
  int staleness;       /* stale-synchronous parallel: 0 = synchronous (default); s > 0: step k's
                          updates are applied after step k + s is submitted, so step k's forward
                          and backward use the parameters after the updates of steps 0 .. k - s - 1
                          and a rank runs at most s steps ahead of the slowest reduction it needs.
                          At most TSR_MAX_STALENESS; refused with deterministic contexts, dynamic loss
                          scaling, sign reductions and spatial parallelism. tsr_trainer_sync, an
                          evaluation step and every read or write of tensors apply the pending
                          updates first. */
  int async_slices;    /* 1 = asynchronous updates inside the rank (Hogwild style): each slice keeps
                          its own weight gradients and updates the shared parameters right after its
                          own backward, with lr * (its samples / batch) and its gradient times
                          (batch / its samples), one optimizer step per slice update (shared optimizer
                          state); slice s's next forward of a layer waits only for slice s's own
                          update of that layer, and updates of different slices run in any order,
                          one at a time per tensor. Batch normalisation then normalises each
                          slice with its own statistics (not the batch's) and every slice updates
                          the running statistics, in any order. 0 = synchronous (default). One
                          rank only; refused with deterministic contexts, loss scaling,
                          staleness > 0 and spatial parallelism. tsr_trainer_sync, an evaluation
                          step and every read or write of tensors first wait for every update. */
  int separate_grads;  /* 1 = every activation gradient in a buffer of its own, and every later
                          consumer's contribution to one too, added by a task of its own; 0
                          (default) = gradients whose lifetimes in a step do not overlap share
                          memory, and batch normalisation adds its contribution into the gradient
                          in its own task (same results, less memory and fewer passes). Always
                          separate buffers with spatial parallelism, asynchronous slices and CUDA
                          workers. */
  int act_block;       /* CPUs: the channel block of the activations' blocked layout (8: nChw8c, 16:
                          nChw16c); 0 = TESSERA_ACT_BLOCK, else the trainer's choice: the CPU's widest
                          (16 on AVX-512, 8 on AVX2), except in float32 on CPUs that run 512-bit FMAs
                          as two halves (AMD Zen 4): 8 where blocks of 16 would pad the convolutions'
                          channels into 5% more work or more. Refused (TSR_ERR_ARG): other values, 16 without AVX-512, 8 with bf16 */
  int skip_reduce_block; /* benchmarks only, the results are wrong: K > 0 = training steps alternate in
                          blocks of K with their reductions across ranks (steps 0..K-1, 2K..3K-1, ...)
                          and without them (K..2K-1, ...), so that one run measures both; 0 =
                          TESSERA_SKIP_ALLREDUCE=alternate:K, else none; -1 = none. Refused
                          (TSR_ERR_ARG) with skip_reduce, staleness > 0, asynchronous slices and sign
                          reductions, whose steps depend on earlier ones' reductions */
} tsr_trainer_opts;

/* Largest tsr_trainer_opts.staleness (each step in flight holds its own gradient buffer). */
#define TSR_MAX_STALENESS 16

void tsr_trainer_opts_default(tsr_trainer_opts *o);
/* The model must not change after this call; it must outlive the trainer. TSR_ERR_NOMEM, naming the
 * largest layer, before anything large is allocated when the buffers exceed tsr_memory_limit. */
tsr_status tsr_trainer_create(tsr_trainer **t, tsr_context *ctx, tsr_model *m,
                              const tsr_optim_spec *opt, const tsr_trainer_opts *o);
void tsr_trainer_destroy(tsr_trainer *t);

/* Changes the learning rate used by steps submitted from now on. */
void tsr_trainer_set_lr(tsr_trainer *t, float lr);
/* The optimizer given to tsr_trainer_create (lr: that base rate, whatever tsr_trainer_set_lr set). */
void tsr_trainer_optim(const tsr_trainer *t, tsr_optim_spec *opt);
/* The loss-scaling options in effect: tsr_trainer_opts.loss_scale and, with dynamic scaling, the
 * initial scale and growth interval after defaults (else 0 and 0). Any pointer may be NULL. */
void tsr_trainer_loss_scale_options(const tsr_trainer *t, double *loss_scale, double *init, int *interval);

/* Per-sample input and target shapes the trainer expects ([C, D, H, W] given as [C, D*H, W], the
 * same memory; tsr_model_layer_depth gives D). */
void tsr_trainer_input_shape(const tsr_trainer *t, int *c, int *h, int *w);
void tsr_trainer_target_shape(const tsr_trainer *t, int *c, int *h, int *w);
int tsr_trainer_batch(const tsr_trainer *t);

/* A source of batches: fill(user, step, sample_index_in_batch, x, y) writes one sample's input and
 * target (float32, per-sample shapes above); it runs inside load tasks, one call per sample.
 * Returns 0 on success, nonzero on failure (the step then fails). */
typedef int (*tsr_sample_fn)(void *user, int64_t step, int index, float *x, float *y);

/* Submits one training step (load, forward, loss, backward, update) and returns without waiting,
 * unless `window` steps are already in flight. Returns the step number in *step_id if not NULL. */
tsr_status tsr_trainer_step(tsr_trainer *t, tsr_sample_fn fill, void *user, int64_t *step_id);
/* The same with the samples of a loader: sample idx[i] of `l` goes to batch position i (idx is
 * copied). The load tasks read them themselves; for a stream (tsr_loader_open_pool) they wait for
 * exactly the pool slots they read, and idx are stream positions (at most the pool's size per step,
 * submitted in increasing order for the refills to run ahead). */
tsr_status tsr_trainer_step_loader(tsr_trainer *t, tsr_loader *l, const int64_t *idx, int64_t *step_id);
/* Submits a forward-only evaluation step (eval mode: running batch-norm statistics, no dropout);
 * `nvalid` samples (<= batch) count in the loss, the rest are padding. */
tsr_status tsr_trainer_eval(tsr_trainer *t, tsr_sample_fn fill, void *user, int nvalid, int64_t *step_id);
/* The same, and a task of the step copies the output layer's values of the nvalid samples to `out`
 * ([nvalid, C', H', W']), which must stay valid until tsr_trainer_loss of the step (or
 * tsr_trainer_sync) has returned: then they are there. */
tsr_status tsr_trainer_eval_out(tsr_trainer *t, tsr_sample_fn fill, void *user, int nvalid, float *out,
                                int64_t *step_id);
/* Waits for a submitted step's loss (mean over its valid samples). */
tsr_status tsr_trainer_loss(tsr_trainer *t, int64_t step_id, double *loss);
/* Control word: every training step carries one float per rank, summed over ranks by the step's
 * gradient reduction (no extra communication); ranks that read it at the same step ids agree on it,
 * e.g. to stop together. set_flag sets this rank's value for training steps submitted from now on
 * (default 0); tsr_trainer_flag waits for a step like tsr_trainer_loss and returns the sum over
 * ranks of that step's values (on one rank, this rank's value; 0 for evaluation steps). Sums are
 * exact for integers up to 2^24. */
void tsr_trainer_set_flag(tsr_trainer *t, float value);
tsr_status tsr_trainer_flag(tsr_trainer *t, int64_t step_id, double *sum);
/* Waits for every submitted step. */
tsr_status tsr_trainer_sync(tsr_trainer *t);

/* Runs the model forward in eval mode on `n` samples (n <= batch) of raw inputs (the trainer's
 * input normalisation is applied to them, as to every sample) and copies the output layer's values
 * to `out` ([n, C', H', W']). Synchronous. */
tsr_status tsr_trainer_predict(tsr_trainer *t, const float *x, int n, float *out);

/* Input normalisation, part of the model: every input sample a fill callback writes (training,
 * evaluation, tsr_trainer_predict) becomes (x - mean[c]) / std[c] per input channel, in float32,
 * before the first layer sees it. Checkpoints and exported parameters carry it, so a restored or
 * imported model takes the same raw inputs. `channels` must be the input layer's; std finite and
 * > 0. NULL mean and std, or mean 0 and std 1 in every channel: none (inputs used as written).
 * Waits for the steps in flight. */
tsr_status tsr_trainer_set_input_norm(tsr_trainer *t, const float *mean, const float *std, int channels);
/* The normalisation ([input channels] each), or NULL in both when there is none. */
void tsr_trainer_input_norm(const tsr_trainer *t, const float **mean, const float **std);

/* Target standardisation, part of the model too: every target a fill callback or loader writes
 * (training and evaluation steps) becomes (y - mean[c]) / std[c] per output channel, in float32, in
 * the step's load task, so the loss and its gradient are computed in standardised units and
 * tsr_trainer_loss reports the loss in those units (for MSE with one output channel, the loss in
 * target units is std[0]^2 times it; for L1, std[0] times it). Outputs that leave the trainer
 * (tsr_trainer_eval_out, tsr_trainer_predict) are turned back into target units, out * std[c] +
 * mean[c], as they are copied out. Checkpoints and exported parameters carry it. `channels` must be
 * the output layer's; std finite and > 0. Refused for the softmax cross-entropy loss (its targets are
 * class probabilities). NULL, or mean 0 and std 1 in every channel: none. Waits for the steps in
 * flight. */
tsr_status tsr_trainer_set_target_norm(tsr_trainer *t, const float *mean, const float *std, int channels);
/* The target standardisation ([output channels] each), or NULL in both when there is none. */
void tsr_trainer_target_norm(const tsr_trainer *t, const float **mean, const float **std);
/* What tsr_trainer_loss's values are multiplied by to be in target units: 1 without target
 * standardisation; with it, std^2 for MSE and std for L1 when every output channel has the same std
 * (exact: the loss is a mean over channels and positions); NAN where no one factor converts them
 * (channels with different stds, or the Huber loss, whose delta applies in standardised units). */
double tsr_trainer_target_loss_factor(const tsr_trainer *t);

/* Parameter access by PyTorch state_dict name ("enc1.weight", "bn1.running_mean"); synchronous. */
int tsr_trainer_num_tensors(const tsr_trainer *t);
/* Name, shape (PyTorch layout: OIHW conv, IOHW transposed conv, [out,in] dense) and whether the
 * tensor is trainable (running statistics are not). */
tsr_status tsr_trainer_tensor_info(const tsr_trainer *t, int index, const char **name, tsr_shape *shape,
                                   int *trainable);
tsr_status tsr_trainer_tensor_get(tsr_trainer *t, int index, float *out);
tsr_status tsr_trainer_tensor_set(tsr_trainer *t, int index, const float *in);
int tsr_trainer_tensor_find(const tsr_trainer *t, const char *name);

/* Gradient groups (reduced across ranks as units): their count, and group g's first tensor index,
 * tensor count and size in bytes (group 0's includes the 64-byte control word). Tensors are in backward order (the output layer's first). */
int tsr_trainer_num_groups(const tsr_trainer *t);
tsr_status tsr_trainer_group_info(const tsr_trainer *t, int g, int *first_tensor, int *count, size_t *bytes);
/* The algorithm reducing group g ("ring", "rd", ...; "none" on one rank or for a bad g). */
const char *tsr_trainer_group_collective(const tsr_trainer *t, int g);

/* Optimizer state tensor `moment` of trainable tensor `index` (same shape as the tensor): SGD and
 * Lion keep one (0: the momentum buffer), Adam and AdamW two (0 and 1: the first and second moments).
 * Synchronous; TSR_ERR_ARG for a moment the optimizer does not keep. */
tsr_status tsr_trainer_moment_get(tsr_trainer *t, int index, int moment, float *out);
tsr_status tsr_trainer_moment_set(tsr_trainer *t, int index, int moment, const float *in);
/* Counters that make a resumed run continue exactly: steps submitted (train and eval; dropout masks
 * depend on it) and optimizer updates (Adam's bias correction). Set them only when no step is in
 * flight (after tsr_trainer_sync). */
void tsr_trainer_counters(const tsr_trainer *t, int64_t *steps, int64_t *updates);
tsr_status tsr_trainer_set_counters(tsr_trainer *t, int64_t steps, int64_t updates);

/* Bytes this rank has sent for gradient reductions so far: the StarPU-MPI collectives' sends, or, with
 * NCCL, 2 (N - 1) / N of each collective's payload (what NCCL's ring algorithm sends); with a sign
 * reduction its packed directions, control words and momentum averaging; 0 on one rank. Counted at
 * submission. */
int64_t tsr_trainer_reduce_bytes(const tsr_trainer *t);

/* Loss scaler state (opts.loss_scale): the scale the next step's loss gradient is multiplied by,
 * finite steps in a row since the last change, and steps decided and skipped (overflow). Get and
 * set synchronously (they wait for the steps in flight); set only restores a saved state. */
typedef struct tsr_loss_scale_state {
  double scale;
  int64_t good_steps, steps, skipped;
} tsr_loss_scale_state;
/* TSR_ERR_STATE when the trainer has no dynamic loss scaling. */
tsr_status tsr_trainer_loss_scale_get(tsr_trainer *t, tsr_loss_scale_state *s);
tsr_status tsr_trainer_loss_scale_set(tsr_trainer *t, const tsr_loss_scale_state *s);

/* With opts.check_finite: TSR_ERR_NUMERIC, naming the step, the tensor and its layer, when a gradient
 * of a completed step held a NaN or Inf (the lowest such step; *step set if not NULL); TSR_OK
 * otherwise. Call after tsr_trainer_loss or tsr_trainer_sync; tsr_trainer_set_counters clears it. */
tsr_status tsr_trainer_check_finite(tsr_trainer *t, int64_t *step);

#ifdef __cplusplus
}
#endif
#endif

/* Internal state of a trainer: parameter storage (one buffer, backward order), per-slice
 * activations and gradients, and the bookkeeping of steps in flight. */
#ifndef TSR_GRAPH_TRAINER_H
#define TSR_GRAPH_TRAINER_H

#include <stdatomic.h>
#include <tessera.h>
#include "codelets.h"
#include "check_finite.h"
#include "comm/groups.h"
#include "graph/model.h"
#include "optim/loss_scale.h"
#include "optim/optim.h"
#include "runtime/communicator.h"
#include "tensor/dist.h"
#include "train/spatial.h"

struct _tsr_ptensor {
  char name[TSR_NAME_MAX + 16];
  tsr_shape shape;
  size_t n;
  int layer, index, trainable;
  float *w, *g;                         /* g NULL for running statistics */
  float *st[TSR_OPTIM_MAX_STATE];       /* the optimizer's state tensors (trainable tensors) */
  starpu_data_handle_t hw, hg, hst[TSR_OPTIM_MAX_STATE];
};

/* Per layer: handles per slice and the layer's state. */
struct _tsr_lstate {
  int live;             /* on a path to the output */
  int needs_grad;       /* some parameter lies upstream, so its output gradient is needed */
  int first_tensor;     /* index of its first tensor in trainer->tensors, -1 if none */
  size_t elems;         /* per sample, with the padding channels of a blocked layout */
  int blk;              /* channel block of its output's layout: 0 plain NCHW (layout.c) */
  int bf16;             /* its output stored in bf16 (layout.c) */
  int gbf16;            /* its output's gradient stored in bf16 too (layout.c) */
  int relu;             /* the relu layer whose tasks this layer runs fused, -1 none */
  int fused;            /* a relu run by its input's tasks: submits nothing itself */
  /* Copies of input 0 (TSR_EDGE_IN in `edges`) or of the output (TSR_EDGE_OUT) in the layout its
   * kernels take (channel blocks copy_blk[0], [1]; 0 plain) where the activation has another one:
   * the layer's tasks read and write them and reorder tasks of their own convert (layout.c).
   * reorders_left: the sides its tasks still reorder themselves (no single layout serves every
   * pass). ex/edx: input 0 and its gradient; ey: the output, then in backward its gradient (the
   * forward's copy is dead once reordered), [slices] */
  int edges, copy_blk[2], reorders_left;
  starpu_data_handle_t *ex, *edx, *ey;
  float **exbuf, **edxbuf, **eybuf;
  int dw_first;         /* entries with wgrad_first: a task of the layer's backward writes its
                         * gradients first in each step, so the step does not zero them */
  starpu_data_handle_t *y, *g, *tmp, *ws; /* [slices]; tmp for second and later gradient contributions
                                           * and the entry's scratch; ws the entry's workspace */
  float **ybuf, **gbuf, **tmpbuf;
  void **wsbuf;
  /* per tensor of an entry with private_wgrad, with several slices, NULL otherwise: [slices] later
   * slices' own weight gradients (entry 0 unused; trainable tensors only) */
  starpu_data_handle_t *wp[TSR_LAYER_MAX_TENSORS];
  float **wpbuf[TSR_LAYER_MAX_TENSORS];
  /* the entry's state (batchnorm's sums): [_tsr_state_sets] sets, one shared by the slices, or each
   * slice's own with asynchronous slices (whose batch statistics are the slice's own) */
  starpu_data_handle_t *state[TSR_LAYER_MAX_STATE];
  void **statebuf[TSR_LAYER_MAX_STATE];
};

struct _tsr_pending {
  struct starpu_task *task;
  double value;
  int64_t step;
  double submitted;     /* starpu_timing_now() at submission, in us */
  double flag;          /* train steps: the control word's element 0 summed over ranks */
};

/* A training step whose updates are not submitted yet (staleness > 0): what they read. */
struct _tsr_delayed {
  int64_t step;         /* its id (trace) */
  int64_t nupdates;     /* the optimizer step number its updates use */
  float lr;             /* the learning rate when it was submitted */
  int set;              /* its gradient set */
};

/* The control word: TSR_CTL_FLOATS floats at the start of the gradient buffer, the first child of
 * gradient group 0, so the allreduce sums it with the gradients (tsr_trainer_set_flag). */
#define TSR_CTL_FLOATS 16

struct tsr_trainer {
  tsr_context *ctx;
  tsr_model *model;
  tsr_optim_spec opt;
  const struct _tsr_optim_ops *optim; /* opt.kind's registry entry */
  int batch, slices, window, input_layer, output_layer;
  int *slice_n, *slice_off;
  uint64_t seed;
  float lr;

  int ntensors;
  struct _tsr_ptensor *tensors;
  float *params, *grads, *opt_state, *state; /* contiguous buffers; opt_state: the optimizer's
                                                state tensors, nparams floats each */
  size_t nparams, nstate;

  struct _tsr_lstate *ls;
  int act_blk;          /* channel block of the blocked activation layout here, 0 none (layout.c) */
  char *edge_first;     /* per (layer, input slot): first gradient contribution in backward order */
  char *edge_add;       /* per (layer, input slot): a later contribution the layer's backward adds into
                         * the gradient itself (_tsr_layer_call.dx_add), with no buffer of its own */
  /* activation gradients sharing memory (grad_share.c). Members: layer l's output gradient (id l)
   * and contribution i (id model->n + i: consumer gs_cl[i]'s gradient of its input gs_ck[i] that
   * is added into that input's gradient, handles gs_ch[i][slices]; gs_cidx[l * TSR_MAX_CONCAT + k]
   * numbers them, -1 none). Per member its buffer (-1 none), the buffer's member before it (-1
   * none) and the backward position of its first writer; per buffer its floats per sample and its
   * memory per slice. */
  int gs_n, gs_nc, *gs_buf, *gs_prev, *gs_start, *gs_cidx, *gs_cl, *gs_ck;
  size_t *gs_elems;
  float ***gs_mem;
  starpu_data_handle_t **gs_ch;

  /* inputs/targets, double-buffered by step parity so loading step t+1 overlaps step t */
  starpu_data_handle_t *x[2], *t[2], *loss; /* loss: [nloss][slices], step k uses row k % nloss */
  int nloss;
  float **xbuf[2], **tbuf[2];
  double *lossbuf;

  int64_t nsteps;       /* steps submitted (train and eval) */
  int64_t nupdates;     /* optimizer steps (Adam's bias correction) */
  struct _tsr_pending *pending; /* [window + 1] */
  double *history;      /* loss per step, filled when waited */
  double *flag_history; /* control word sum per step (0 for eval steps), same indexing */
  float flag;           /* this rank's control value for steps submitted from now on */
  starpu_data_handle_t ctl; /* the control word: the kept word of the gradient groups (groups.head) */
  int64_t history_cap;
  int rank, size;        /* this process in the world */
  int skip_reduce;      /* benchmarks: no reduction across ranks (tsr_trainer_opts.skip_reduce) */
  int skip_block;       /* benchmarks: > 0, every other block of this many training steps skips its
                           reductions (tsr_trainer_opts.skip_reduce_block; step.c, skipped); -1: the
                           variable was malformed */
  int use_nccl;         /* reduce over NCCL when CUDA workers exist (tsr_trainer_opts.nccl) */
  double step_timeout;  /* seconds a multi-rank step may take; 0 = adaptive, < 0 = no limit */
  double longest_step;  /* seconds from submission to loss of the slowest step so far */
  double first_step;    /* the step deadline's stand-in for longest_step before a step is timed */
  /* data parallelism: the batch is split over the world, gradient groups summed over it (src/comm) */
  struct _tsr_comm world;
  struct _tsr_dist batch_dist;
  struct _tsr_groups groups;
  /* spatial parallelism (tsr_trainer_opts.spatial): NULL when samples are whole */
  struct _tsr_spatial *sp;
  /* with a sign reduction: the momenta averaged every msync_every steps (0: never; grad_reduce.c) */
  int64_t msync_every;
  int msync_next; /* the next momentum group to average in this step */
  struct _tsr_comm msync_comm;
  struct _tsr_groups msync;
  /* stale-synchronous parallel (tsr_trainer_opts.staleness, staleness.c): the gradients rotate over
   * staleness + 1 sets (set 0 is `groups`, set k > 0 is gsets[k - 1] over gbufs[k - 1]); step k's
   * updates wait in `delayed` until step k + staleness is submitted */
  int staleness;
  double slow_ms;       /* TESSERA_SLOW_RANK on this rank: milliseconds of sleep per training step */
  int slow_jitter;      /* TESSERA_SLOW_RANK=jitter:MS: only in about half of the steps */
  int slow_slices;      /* TESSERA_SLOW_RANK=slices:MS: one slice of every step, chosen by a hash */
  int64_t ntrain;       /* training steps submitted: the set of a step is ntrain % (staleness + 1) */
  int cur_set;          /* the set of tensors[].hg and ctl (_tsr_grad_set_use) */
  struct _tsr_groups *gsets;
  float **gbufs;
  struct _tsr_delayed *delayed; /* [staleness + 1], a ring from delayed_first, delayed_n entries */
  int delayed_first, delayed_n;
  /* asynchronous slices (tsr_trainer_opts.async_slices, async_slices.c): slice s >= 1's own weight
   * gradients, agrad[s - 1][i] for tensor i over agbuf[s - 1] (slice 0 uses tensors[].hg); the
   * parameters and optimizer state of trainable tensors have StarPU's sequential consistency off */
  int async;
  starpu_data_handle_t **agrad;
  float **agbuf;
  int last_train;       /* the kind of the last step submitted (1 training, 0 evaluation, -1 none) */
  /* loss scaling: a fixed scale, or the dynamic scaler's state in a handle read by the step's tasks */
  double loss_scale;    /* 0 off, > 0 static, TSR_LOSS_SCALE_DYNAMIC */
  struct _tsr_loss_scaler scaler;
  struct _tsr_scale_state *scaler_state;
  starpu_data_handle_t scaler_h;
  double loss_scale_init;       /* dynamic: the first scale (tsr_trainer_opts.loss_scale_init or its default) */
  float *norm_mean, *norm_std;  /* input normalisation per input channel; NULL: none */
  float *tnorm_mean, *tnorm_std; /* target standardisation per output channel; NULL: none */
  int check_finite;             /* scan gradients for NaN/Inf (tsr_trainer_check_finite) */
  struct _tsr_finite nonfinite;
  atomic_int load_failed;
  char load_error[512];
};

/* trainer.c: layer l keeps a second gradient buffer per slice (concat, or an output read twice). */
int _tsr_layer_needs_tmp(const tsr_trainer *t, int l);
/* grad_share.c: which activation gradients share memory (after _tsr_trainer_plan, before the
 * footprint; spatial: samples split), the memory of member id's slice s (allocated on first use,
 * NULL when out of memory), the contributions' handles (after the layers' buffers), consumer c's
 * handles for the contribution to input k's gradient (NULL: it goes through the input's tmp), the
 * release, and the gates before the first writers at backward position `at` (-1: the loss; layer
 * l's backward is model->n - 1 - l). */
tsr_status _tsr_grad_share_plan(tsr_trainer *t, const tsr_trainer_opts *o, int spatial);
float *_tsr_grad_share_mem(tsr_trainer *t, int id, int s);
tsr_status _tsr_grad_share_alloc(tsr_trainer *t);
starpu_data_handle_t *_tsr_grad_share_contribution(const tsr_trainer *t, int c, int k);
void _tsr_grad_share_free(tsr_trainer *t);
int _tsr_grad_share_gates(tsr_trainer *t, int at);
/* footprint.c: refuses, before anything large is allocated, a trainer whose buffers exceed the
 * memory limit or a StarPU vector's 2^32 - 1 elements. Needs ls[].live, edge_first and edge_add. */
tsr_status _tsr_trainer_footprint(const tsr_trainer *t, const tsr_trainer_opts *o);
/* grad_reduce.c: the world, the batch's distribution, the gradient groups and their collective
 * (after the tensors are laid out; agrees with the other ranks on the trainer's fingerprint). */
tsr_status _tsr_reduce_setup(tsr_trainer *t, const tsr_trainer_opts *o);
void _tsr_reduce_teardown(tsr_trainer *t);
/* The gradient groups of the trainer's tensors over gradient buffer buf (laid out as t->grads). */
tsr_status _tsr_grad_groups_build(tsr_trainer *t, const tsr_trainer_opts *o, struct _tsr_groups *gs, float *buf);
/* The momentum synchronisation of group g after its sign reduction, when this update is one. */
int _tsr_momentum_sync(tsr_trainer *t, int g, int64_t step);

/* spatial.c: the spatial group, the batch split over the replicas (or over every rank without
 * spatial parts), the plan and its buffers; called by _tsr_reduce_setup after the world. */
tsr_status _tsr_spatial_setup(tsr_trainer *t, const tsr_trainer_opts *o);
void _tsr_spatial_teardown(tsr_trainer *t);
/* The plan of this rank's blocks (malloc'd, *plan NULL without spatial parts) and the parts, before
 * any buffer exists: for the footprint. Values of a per-sample shape. */
tsr_status _tsr_spatial_blocks(const tsr_trainer *t, const tsr_trainer_opts *o, struct _tsr_sp_layer **plan,
                               int *parts);
int64_t _tsr_spatial_block_elems(const struct _tsr_chw *s);
/* Layer l's shapes on this rank: its blocks, halo'd or gathered input, spec without the padding
 * the halos hold. Nothing without spatial parts. */
void _tsr_spatial_view(const tsr_trainer *t, int l, struct _tsr_layer_view *v);
/* Before layer l's forward of slice s: x (its input 0) into the halo'd copy or gathered whole. */
int _tsr_spatial_before(tsr_trainer *t, int l, int s, starpu_data_handle_t x, int64_t step);
/* After layer l wrote its halo'd or whole input gradient of slice s: this rank's block into target. */
int _tsr_spatial_dx(tsr_trainer *t, int l, int s, starpu_data_handle_t target, int64_t step);
/* A vector of doubles summed over the spatial group (layer l's call's group_sum). */
int _tsr_spatial_sum(tsr_trainer *t, int l, starpu_data_handle_t acc, int kind, int64_t step);
/* The loss gradient times 1 / parts (see _tsr_spatial_dx); nothing without spatial parts or with a
 * gathered output. */
int _tsr_spatial_share(tsr_trainer *t, starpu_data_handle_t dy);
/* A split output: gathers slice s's blocks into the whole output for the loss and points *y and *dy
 * at it and its gradient; nothing (handles unchanged) otherwise. */
int _tsr_spatial_output(tsr_trainer *t, int s, int64_t step, starpu_data_handle_t *y, starpu_data_handle_t *dy);
/* After the loss: this rank's block of the whole output's gradient into the output layer's. */
int _tsr_spatial_output_grad(tsr_trainer *t, int s);
/* The crop of one whole input sample ([C, spatial...]) to this rank's block. */
struct _tsr_box_desc _tsr_spatial_input_box(const tsr_trainer *t);
/* layout.c: each activation's layout (ls[].blk) and the fused relus (ls[].relu, ls[].fused); needs
 * ls[].live, before anything is allocated. All plain and unfused when samples are split spatially. */
tsr_status _tsr_trainer_plan(tsr_trainer *t, const tsr_trainer_opts *o, int spatial);
/* layout.c: the copies of inputs and outputs in the layout a layer's kernels take (ls[].edges), where
 * some activation is blocked; after _tsr_trainer_plan and a first footprint check (it plans oneDNN
 * primitives, which a model that cannot fit must not reach). */
tsr_status _tsr_trainer_plan_edges(tsr_trainer *t);
/* Layer l as its entry sees it, with the layouts of its inputs and output. */
void _tsr_trainer_view(const tsr_trainer *t, int l, struct _tsr_layer_view *v);
/* Per sample: floats of layer l's copy of its input (side TSR_EDGE_IN) or output (TSR_EDGE_OUT). */
size_t _tsr_edge_elems(const tsr_trainer *t, int l, int side);
/* The reorder tasks around layer l's tasks of slice s: before its forward (its input into the
 * copy), after it (the copy of the output into the activation), before its backward (the
 * output's gradient into the copy); _tsr_edge_dx: after its backward wrote the copy of input 0's
 * gradient, into `target`. 0, or the failed submission's code. */
int _tsr_edge_before_forward(tsr_trainer *t, int l, int s, starpu_data_handle_t x);
int _tsr_edge_after_forward(tsr_trainer *t, int l, int s);
int _tsr_edge_before_backward(tsr_trainer *t, int l, int s);
int _tsr_edge_dx(tsr_trainer *t, int l, int s, starpu_data_handle_t target);

/* staleness.c: the extra gradient sets (after _tsr_reduce_setup), their teardown, the set whose
 * handles (tensors[].hg, ctl) the next tasks use, and the refusals of unsupported combinations. */
tsr_status _tsr_staleness_check_opts(const tsr_trainer *t, const tsr_trainer_opts *o);
tsr_status _tsr_staleness_setup(tsr_trainer *t, const tsr_trainer_opts *o);
void _tsr_staleness_teardown(tsr_trainer *t);
void _tsr_grad_set_use(tsr_trainer *t, int set);
struct _tsr_groups *_tsr_grad_set(tsr_trainer *t, int set);

/* async_slices.c: the refusals of what asynchronous slices do not combine with (before anything is
 * planned), slice s's gradient handle of tensor i, the extra gradient buffers and the sequential
 * consistency switch (after the tensors and the groups exist), their teardown, slice s's updates of
 * layer l's tensors with the task that orders slice s's next forward of l after them, and the host
 * wait that every read, evaluation or switch between evaluation and training does first. */
tsr_status _tsr_async_check_opts(const tsr_trainer *t, const tsr_trainer_opts *o);
starpu_data_handle_t _tsr_async_grad(const tsr_trainer *t, int i, int s);
tsr_status _tsr_async_setup(tsr_trainer *t);
void _tsr_async_teardown(tsr_trainer *t);
int _tsr_async_update(tsr_trainer *t, int l, int s, int64_t step);
tsr_status _tsr_async_quiesce(tsr_trainer *t);
/* Sets of each layer's state buffers: one per slice with asynchronous slices, else one. */
int _tsr_state_sets(const tsr_trainer *t);

/* slow_rank.c: TESSERA_SLOW_RANK (a benchmark aid), and the sleep task of a training step on a
 * slice's input of parity p. */
tsr_status _tsr_slow_setup(tsr_trainer *t);
int _tsr_slow_submit(tsr_trainer *t, int p, int64_t step);

/* step.c */
/* Submits the updates of every delayed step (staleness > 0), oldest first. */
tsr_status _tsr_flush_updates(tsr_trainer *t);
tsr_status _tsr_submit_step(tsr_trainer *t, tsr_sample_fn fill, void *user, int train, int nvalid, int64_t *id);
tsr_status _tsr_wait_step(tsr_trainer *t, int64_t step);
/* Seconds a rank waits for the next step of a multi-rank run (<= 0: forever); step.c. */
double _tsr_step_deadline(const tsr_trainer *t);
/* Grows the loss and flag histories to hold step `step`. */
tsr_status _tsr_history_reserve(tsr_trainer *t, int64_t step);

/* layers.c: forward and backward of layer l for slice s of step `step` (parity p), through the
 * layer's registry entry. */
int _tsr_layer_forward(tsr_trainer *t, int l, int s, int p, int train, int64_t step);
int _tsr_layer_backward(tsr_trainer *t, int l, int s, int p, int64_t step);
/* The distinct handles layer l's backward of slice s writes its inputs' gradients into (at most
 * TSR_MAX_INPUTS): the tasks that write them read the layer's parameters. */
int _tsr_layer_dx_handles(tsr_trainer *t, int l, int s, starpu_data_handle_t *h);
/* [slice] The handles layer l's tasks write as its output (grad 0) and read as its output's gradient
 * (grad 1): its copy in the kernels' layout when reorder tasks of their own convert it (layout.c;
 * the copy's buffer carries both), else those of the relu fused into it, else its own. */
starpu_data_handle_t *_tsr_layer_out_handles(const tsr_trainer *t, int l, int grad);

#endif

/* The layer registry: one entry (struct _tsr_layer_ops) per layer kind holds everything the rest of
 * the library knows about that kind: its name and JSON fields, how many inputs it takes, shape
 * inference, parameter tensors, FLOPs, initialisation, and the StarPU tasks of its forward and
 * backward pass. The model (src/graph) and the trainer (src/train) call through the entry and never
 * switch on the kind; entries see a layer through plain views (shapes, spec, handles), never the
 * model or the trainer. Kinds of the public enum keep their values as registry indices; further
 * kinds get the indices after TSR_LAYER_KIND_COUNT and are found by name. */
#ifndef TSR_LAYERS_LAYER_H
#define TSR_LAYERS_LAYER_H

#include <stddef.h>
#include <stdint.h>
#include <starpu.h>
#include <tessera/model.h>

/* Most inputs of one layer (concat, add). */
#define TSR_MAX_INPUTS 32
/* Most parameter tensors and per-layer state buffers of one layer. */
#define TSR_LAYER_MAX_TENSORS 4
#define TSR_LAYER_MAX_STATE 4
/* The `kind` of an entry that is not in the public enum: it gets a registry index after
 * TSR_LAYER_KIND_COUNT. */
#define TSR_LAYER_REGISTERED (-1)

/* Per-sample shape [C, H, W], or [C, D, H, W] when d > 0 (NCDHW memory: D planes of H x W). */
struct _tsr_chw {
  int c, h, w;
  int d; /* depth of a [C, D, H, W] shape; 0 for [C, H, W] */
};
/* D of a [C, D, H, W] shape, 1 for [C, H, W]: entries that only need planes of H x W treat the
 * shape as [C, D*H, W]. */
static inline int _tsr_chw_depth(const struct _tsr_chw *s) { return s->d > 0 ? s->d : 1; }

/* One layer as its entry sees it: name, parameters and per-sample shapes, and the layout of each
 * activation (trainer's choice): channel block 0 = plain NCHW, B = blocked nChw{B}c (channels
 * padded to a multiple of B with zeros; oneDNN's layout for convolutions). */
struct _tsr_layer_view {
  const char *name;
  const tsr_layer_spec *spec;
  int ninputs;
  struct _tsr_chw in[TSR_MAX_INPUTS];
  struct _tsr_chw out;
  int in_blk[TSR_MAX_INPUTS], out_blk;
  int in_bf16[TSR_MAX_INPUTS], out_bf16; /* 1: the activation is stored in bf16; only for entries
                                          * with a bf16 capability */
  int din_bf16[TSR_MAX_INPUTS], dout_bf16; /* 1: the activation's gradient is stored in bf16 too;
                                            * only for entries with bf16_grad */
};

/* Which activations an entry can read and write in bf16 (struct _tsr_layer_ops.bf16). The trainer
 * stores an activation in bf16 (with --precision bf16 on CPUs) where its producer and every
 * consumer can. */
enum _tsr_bf16_cap {
  TSR_BF16_NONE = 0, /* float32 only (the default) */
  TSR_BF16_EACH,     /* each input and the output bf16 or float32, independently */
  TSR_BF16_SAME      /* every input and the output alike: all bf16 or all float32 */
};

/* Which activation layouts an entry handles (struct _tsr_layer_ops.layout). The trainer keeps an
 * activation blocked where its producer and every consumer handle that. */
enum _tsr_layout_cap {
  TSR_LAYOUT_PLAIN = 0, /* inputs and output plain NCHW (the default) */
  TSR_LAYOUT_FOLLOW,    /* output in the layout of the inputs (all inputs alike) */
  TSR_LAYOUT_PRODUCE    /* any input layout; output blocked (convolutions) */
};

/* The sides of a layer whose layout the trainer changes in tasks of their own (_tsr_layer_ops.reorders). */
enum { TSR_EDGE_IN = 1, TSR_EDGE_OUT = 2 };

/* How a layer runs on one block of a spatially split sample (tsr_trainer_opts.spatial). */
enum _tsr_spatial_kind {
  TSR_SPATIAL_WHOLE,     /* needs whole samples: the trainer gathers a split input first (the default) */
  TSR_SPATIAL_POINTWISE, /* each output value from the same position of its inputs; per-channel
                            statistics through the call's group_sum */
  TSR_SPATIAL_WINDOW,    /* each output value from a window of input 0 (the spec's kernel, stride,
                            padding, dilation): the trainer exchanges halos around its blocks; zero
                            padding */
  TSR_SPATIAL_WINDOW_MAX, /* the same with padding that never wins (max pooling): -FLT_MAX */
  TSR_SPATIAL_UPSCALE     /* each output block from the same block of input 0, f times larger along
                             every axis (nearest upsampling by the spec's scale_factor; transposed
                             convolutions whose windows do not overlap: stride f, kernel at most f,
                             no padding, checked by the plan); no messages */
};

/* How a JSON field is read into tsr_layer_spec (src/graph/model_json.c reads it). */
enum _tsr_field_type {
  TSR_FIELD_SHAPE,    /* [C, H, W] or [C, D, H, W] of positive integers: three ints, D at offset_d (0 if absent) */
  TSR_FIELD_COUNT,    /* a positive integer */
  TSR_FIELD_SIZE2,    /* a positive integer or [h, w]: two ints */
  TSR_FIELD_PAD2,     /* a non-negative integer or [h, w]: two ints */
  TSR_FIELD_SIZE3,    /* a positive integer or [d, h, w]: h, w as SIZE2, d at offset_d */
  TSR_FIELD_PAD3,     /* a non-negative integer or [d, h, w]: h, w as PAD2, d at offset_d */
  TSR_FIELD_BOOL,     /* true or false: an int */
  TSR_FIELD_REAL,     /* any finite number: a float */
  TSR_FIELD_POSITIVE, /* a number > 0 */
  TSR_FIELD_PROB,     /* a number in [0, 1) */
  TSR_FIELD_UNIT      /* a number in [0, 1] */
};

/* A layer field of the model file beyond name, type and input(s). Lists end with {NULL}. */
struct _tsr_layer_field {
  const char *name;
  enum _tsr_field_type type;
  size_t offset; /* in tsr_layer_spec, of the first int or float the field fills */
  int required;
  size_t offset_d; /* SHAPE, SIZE3, PAD3: of the int that takes the depth */
};

#define TSR_LAYER_FIELD(name_, type_, member, required_)                                           \
  {.name = name_, .type = type_, .offset = offsetof(tsr_layer_spec, member), .required = required_}
/* A field with a depth: `member` takes (h, w) and `member_d` takes d. */
#define TSR_LAYER_FIELD3(name_, type_, member, member_d, required_)                                \
  {.name = name_, .type = type_, .offset = offsetof(tsr_layer_spec, member), .required = required_,    \
   .offset_d = offsetof(tsr_layer_spec, member_d)}

/* What a forward or backward function may use: filled by the trainer per (layer, slice). Arrays
 * marked [slice] hold every slice's handle (batch normalisation spans slices). */
struct _tsr_layer_call {
  const struct _tsr_layer_view *v;
  int s, slices;                            /* this slice, slices in the batch */
  const int *slice_n;                       /* [slice] samples */
  int batch;                                /* samples in the whole batch */
  int train;                                /* forward: training (batch statistics, dropout) or evaluation */
  int parts;                                /* blocks each sample is split into here (1: whole samples);
                                               batch statistics count the values of all of them */
  uint64_t seed;                            /* random seed of this (step, layer, slice) */
  starpu_data_handle_t *x[TSR_MAX_INPUTS];  /* [slice] input k */
  /* With halos (TSR_SPATIAL_WINDOW): [slice] input 0's block without them, which the interior of
   * the output can be computed from before the halos arrive, and the halo widths below and above
   * along the (D,) H, W axes of x[0]; NULL otherwise. */
  starpu_data_handle_t *block;
  int lo[3], hi[3];
  /* Entries with split_edges whose halos lie along one or more axes a (of D, H, W; equal widths,
   * stride 1): x[0] is the block itself (no halo'd copy) and the trainer fills edge[a][side][slice],
   * the edge slabs of comm/halo.h (_tsr_halo_edges_forward), before the forward; dedge[a][side]
   * [slice] is where the gradient of that slab goes, which the trainer sends back to that neighbour
   * after dx_done (NULL on a side without a neighbour, where the halo is padding, and where dx[0] is
   * NULL). edge[a] NULL along axes without halos, and everywhere otherwise. edge_nb[a][side]: a
   * neighbour on that side (else the interior's padding is the halo). */
  starpu_data_handle_t *edge[3][2], *dedge[3][2];
  int edge_nb[3][2];
  starpu_data_handle_t *dx[TSR_MAX_INPUTS]; /* [slice] where input k's gradient goes; NULL: not needed */
  /* Entries with dx_add: 1 when dx[k] is input k's gradient itself, already holding the contributions
   * of the consumers before this one in backward order, and the entry adds its own into it (in the
   * gradient's format, as ops.dx_add says) instead of writing it; dx_done is still called. 0: dx[k] is written whole. */
  int dx_add[TSR_MAX_INPUTS];
  starpu_data_handle_t *y, *dy;             /* [slice] output and its gradient */
  starpu_data_handle_t *scratch, *ws;       /* [slice] scratch of the output's size, workspace (or NULL) */
  starpu_data_handle_t w[TSR_LAYER_MAX_TENSORS], dw[TSR_LAYER_MAX_TENSORS]; /* dw NULL: not trainable */
  /* With private_wgrad and several slices: slice s >= 1's own buffer for tensor i's gradient (NULL:
   * the slice adds into dw itself); see _tsr_layer_wgrad. */
  starpu_data_handle_t dwp[TSR_LAYER_MAX_TENSORS];
  /* Entries with wgrad_first, in a training step: 1 when the trainer did not zero dw, so the step's
   * first task that puts gradients into dw writes them instead of adding into them. */
  int dw_first;
  /* 1: dw is this slice's own (asynchronous slices): no other slice's task touches it, so the slice's
   * first task that puts gradients into it writes them as slice 0's does, whatever c->s */
  int dw_own;
  /* 1: batch statistics over this slice's samples alone (asynchronous slices, no join between
   * slices); state[] is then the slice's own. 0: over the whole batch, state[] shared by the slices. */
  int slice_stats;
  starpu_data_handle_t state[TSR_LAYER_MAX_STATE];
  /* Entries with fuse_relu: 1 when the layer's only consumer is a relu whose tasks this entry runs
   * fused (y and dy are then the relu's output and its gradient). */
  int relu;
  /* Tells the trainer that input k's gradient of slice `s` is written into dx[k][s] (it adds the
   * contributions of several consumers). Returns 0 or the failed submission's code. */
  int (*dx_done)(void *owner, int k, int s);
  /* With parts > 1: sums a vector of doubles (per-channel sums of this rank's block) over the ranks
   * holding the other blocks, the same result on all; kind (< 16) tells the sums of one step apart.
   * NULL with parts == 1. Returns 0 or the failed submission's code. */
  int (*group_sum)(void *owner, starpu_data_handle_t acc, int kind);
  void *owner;
};

/* One layer kind. Members marked (optional) may be NULL. */
struct _tsr_layer_ops {
  const char *name; /* in model files and messages: "conv2d" */
  int kind;         /* its tsr_layer_kind, or TSR_LAYER_REGISTERED */
  const struct _tsr_layer_field *fields; /* (optional) */
  int min_inputs, max_inputs;
  /* Defaults beyond those of tsr_layer_spec_default (optional). */
  void (*defaults)(tsr_layer_spec *s);
  /* Checks the spec against the inputs' shapes v->in and sets v->out, or returns an error naming
   * the layer (v->name) and the inputs (in_names). May complete the spec (`spec` is v->spec). */
  tsr_status (*infer)(struct _tsr_layer_view *v, tsr_layer_spec *spec, const char *const *in_names);
  /* Parameter tensors in PyTorch order (optional: none): count, then each one's shape, name suffix
   * ("weight") and whether the optimizer updates it. */
  int (*num_tensors)(const tsr_layer_spec *s);
  void (*tensor)(const struct _tsr_layer_view *v, int i, tsr_shape *shape, const char **suffix, int *trainable);
  /* Initial values of tensor i (optional: PyTorch's uniform in +-1/sqrt(fan_in) of tensor 0). */
  void (*init)(const struct _tsr_layer_view *v, int i, float *w, size_t n, uint64_t seed);
  /* Multiply-adds of one sample's forward pass (optional: 0). */
  double (*flops)(const struct _tsr_layer_view *v);
  /* Bytes of the workspace a slice of n samples keeps from forward to backward (optional: none). */
  tsr_status (*workspace)(const struct _tsr_layer_view *v, int n, size_t *bytes);
  /* Per-layer state buffers shared by the slices' tasks, or one set per slice when the call's
   * slice_stats is set (optional: none): count, then buffer i's element count and element size. */
  int (*num_state)(const struct _tsr_layer_view *v);
  void (*state)(const struct _tsr_layer_view *v, int i, size_t *count, size_t *elemsize);
  int scratch; /* 1: backward needs a per-slice scratch buffer of the output's size where some input
               * needs no gradient (the trainer allocates it only then) */
  enum _tsr_spatial_kind spatial; /* how it runs on blocks of spatially split samples */
  /* 1: a window layer whose blocks with halos (equal widths, stride 1 along each axis that has them)
   * it runs from the block and two thin edge slabs per such axis instead of a halo'd copy
   * (_tsr_layer_call.edge), on CPUs */
  int split_edges;
  int layout;                     /* an enum _tsr_layout_cap */
  int fuse_relu;                  /* 1: can apply a following relu to its output (see _tsr_layer_call.relu) */
  int bf16;                       /* an enum _tsr_bf16_cap (CPU kernels) */
  /* 1: its backward can add input 0's gradient into a buffer holding other contributions
   * (_tsr_layer_call.dx_add), saving the trainer's separate sum; entries without `reorders` only.
   * A bf16 gradient (din_bf16) gets the contribution rounded to bf16 and the sum rounded, the
   * accumulate task's arithmetic on two bf16 buffers. */
  int dx_add;
  int bf16_grad;                  /* 1: its backward reads its output's gradient and writes each input's
                                   * in bf16 or float32 independently, where the activation is bf16
                                   * (the view's dout_bf16, din_bf16; CPU kernels) */
  /* (optional) Which of its activations the entry's tasks for a slice of n samples would reorder
   * inside themselves, given the layouts in v (TSR_EDGE_IN: input 0 and its gradient, TSR_EDGE_OUT:
   * the output and its gradient; bwd_data: input 0's gradient is computed), or -1 when that cannot
   * be planned. Where a plain activation costs such a reorder and the blocked layout would not, the
   * trainer gives the entry a blocked copy and reorders it in a task of its own (layout.c). */
  int (*reorders)(const struct _tsr_layer_view *v, int n, int bwd_data);
  /* 1: with several slices, slices after the first compute their weight gradients into buffers of
   * their own (_tsr_layer_wgrad) and add them afterwards: tasks that add into one handle run one at
   * a time, so the slices' weight-gradient convolutions, the first layer's above all, ran serially */
  int private_wgrad;
  /* 1: in each training step the first task that puts a gradient into the layer's trainable tensors'
   * gradients writes them (when c->dw_first) instead of adding into them, and no later task of the
   * step writes them before it: slice 0's weight-gradient task (private_wgrad), or one task for all
   * slices (batchnorm). The trainer then does not zero those gradients each step. */
  int wgrad_first;
  /* Submit the tasks of slice c->s; 0 or the failed submission's code (optional: the input layer). */
  int (*forward)(const struct _tsr_layer_call *c);
  int (*backward)(const struct _tsr_layer_call *c);
};

/* ---- the families, one file each; registry.c lists their tables (each ends with {.name = NULL}) ---- */
extern const struct _tsr_layer_ops _tsr_layers_input[];      /* input.c: input, flatten */
extern const struct _tsr_layer_ops _tsr_layers_conv[];       /* conv.c: conv2d, conv_transpose2d */
extern const struct _tsr_layer_ops _tsr_layers_conv3d[];     /* conv3d.c: conv3d, conv_transpose3d */
extern const struct _tsr_layer_ops _tsr_layers_pool[];       /* pool.c: maxpool2d, avgpool2d */
extern const struct _tsr_layer_ops _tsr_layers_pool3d[];     /* pool.c: maxpool3d, avgpool3d */
extern const struct _tsr_layer_ops _tsr_layers_upsample[];   /* upsample.c: upsample3d */
extern const struct _tsr_layer_ops _tsr_layers_activation[]; /* activation.c: relu, leaky_relu, tanh, ... */
extern const struct _tsr_layer_ops _tsr_layers_batchnorm[];  /* batchnorm.c */
extern const struct _tsr_layer_ops _tsr_layers_dropout[];    /* dropout.c: dropout, spatial_dropout */
extern const struct _tsr_layer_ops _tsr_layers_merge[];      /* merge.c: concat, add */
extern const struct _tsr_layer_ops _tsr_layers_dense[];      /* dense.c */

/* ---- registry.c ---- */
/* The entry of kind `kind` (a tsr_layer_kind or a registry index), NULL if none. */
const struct _tsr_layer_ops *_tsr_layer_ops_of(int kind);
/* Registry indices run from 0 to this count - 1. */
int _tsr_layer_kind_count(void);

/* ---- common.c: pieces several families share ---- */
/* infer: the output has the shape of input 0. */
tsr_status _tsr_infer_same(struct _tsr_layer_view *v, tsr_layer_spec *spec, const char *const *in_names);
/* Uniform values in +-bound from `seed` (SplitMix64, runtime/rng.h): PyTorch's default law. */
void _tsr_init_uniform(float *w, size_t n, double bound, uint64_t seed);
/* Initial values of tensor i: the entry's init, else PyTorch's default uniform(+-1/sqrt(fan_in)). */
void _tsr_layer_init(const struct _tsr_layer_ops *ops, const struct _tsr_layer_view *v, int i, float *w, size_t n,
                     uint64_t seed);
/* Elements of one sample's output (with the blocked layout's padding channels). */
size_t _tsr_view_out_elems(const struct _tsr_layer_view *v);
/* Channels c padded to the layout's block (blk 0: plain, c itself). */
int _tsr_blk_channels(int c, int blk);
/* Tensor i of a convolution (conv2d/3d and their transposes): 0 the weight, OI[D]HW, or IO[D]HW when
 * transposed; 1 the bias [out]. depth 1 for the 3-D kinds (kernel_d). */
void _tsr_conv_tensor_shape(const struct _tsr_layer_view *v, int i, int transposed, int depth, tsr_shape *shape,
                            const char **suffix, int *trainable);
/* Refuses an input of the wrong rank: want_d 1 for a [C, D, H, W] input, 0 for [C, H, W]. */
tsr_status _tsr_check_rank(const struct _tsr_layer_view *v, int k, const char *const *in_names, int want_d);
/* Calls c->dx_done(k, s) when input k wants a gradient (0 otherwise). */
int _tsr_layer_dx_done(const struct _tsr_layer_call *c, int k, int s);
/* Weight gradients of entries with private_wgrad, around the task that puts slice c->s's gradients
 * of its first n tensors into handles: _tsr_layer_wgrad sets dw[i] to the handle that task should
 * write tensor i's gradient into (c->dw[i], or the slice's own buffer) and returns in *overwrite
 * whether the task writes it (the slice's own buffer, or c->dw in slice 0 when c->dw_first) or adds into it;
 * _tsr_layer_wgrad_done then adds the slice's own buffers into c->dw (in the accumulation mode,
 * _tsr_accum_mode: in submission order when deterministic, so the sums are those of adding in
 * place). No task zeroes anything. _tsr_layer_wgrad_done returns 0 or the failed submission's code. */
void _tsr_layer_wgrad(const struct _tsr_layer_call *c, int n, starpu_data_handle_t *dw, int *overwrite);
int _tsr_layer_wgrad_done(const struct _tsr_layer_call *c, int n);

#endif

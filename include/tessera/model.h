/* Model builder: a DAG of layers over per-sample shapes [C, H, W] (2-D layers) or [C, D, H, W]
 * (3-D layers), with shape inference at each add. Layer outputs are referred to by name; each
 * layer has one output. */
#ifndef TESSERA_MODEL_H
#define TESSERA_MODEL_H

#include <tessera/status.h>
#include <tessera/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsr_model tsr_model;

/* Layer kinds: each is an entry of the library's layer registry, and its value the entry's index.
 * The kinds below are the built-in ones; kinds added to the registry later take the values from
 * TSR_LAYER_KIND_COUNT on and have no constant here: tsr_layer_kind_parse() gives their value from
 * their name (model files always name kinds). */
typedef enum tsr_layer_kind {
  TSR_LAYER_INPUT,
  TSR_LAYER_CONV2D,
  TSR_LAYER_CONV_TRANSPOSE2D,
  TSR_LAYER_MAXPOOL2D,
  TSR_LAYER_AVGPOOL2D,
  TSR_LAYER_RELU,
  TSR_LAYER_LEAKY_RELU,
  TSR_LAYER_TANH,
  TSR_LAYER_SIGMOID,
  TSR_LAYER_BATCHNORM,
  TSR_LAYER_DROPOUT,
  TSR_LAYER_SPATIAL_DROPOUT,
  TSR_LAYER_CONCAT,
  TSR_LAYER_ADD,
  TSR_LAYER_DENSE,
  TSR_LAYER_FLATTEN,
  TSR_LAYER_KIND_COUNT /* the built-in kinds */
} tsr_layer_kind;

typedef enum tsr_loss_kind {
  TSR_LOSS_MSE,
  TSR_LOSS_L1,
  TSR_LOSS_HUBER,
  TSR_LOSS_SOFTMAX_CROSS_ENTROPY, /* softmax over channels; targets are class probabilities */
  TSR_LOSS_KIND_COUNT
} tsr_loss_kind;

/* Parameters of one layer; fields that do not apply to a kind are ignored. */
typedef struct tsr_layer_spec {
  tsr_layer_kind kind;
  int channels, height, width;     /* input: per-sample shape */
  int out_channels;                /* conv2d, conv_transpose2d; dense: out features */
  int kernel_h, kernel_w;          /* conv, pooling */
  int stride_h, stride_w;          /* conv, pooling (pooling: 0 = kernel) */
  int pad_h, pad_w;
  int dilation_h, dilation_w;      /* conv; 1 = none */
  int output_pad_h, output_pad_w;  /* conv_transpose2d */
  int bias;                        /* conv, dense: 1 = with bias */
  float alpha;                     /* leaky_relu slope */
  float p;                         /* dropout probability */
  float eps, momentum;             /* batchnorm (PyTorch meaning of momentum) */
  /* The depth axis of 3-D layers (conv3d, conv_transpose3d, maxpool3d, avgpool3d), beside the
   * _h and _w fields above; unused by 2-D layers. */
  int depth;                       /* input: D of a [C, D, H, W] shape; 0 = a [C, H, W] shape */
  int kernel_d, stride_d, pad_d, dilation_d, output_pad_d;
  int scale_factor;                /* upsample3d: integer factor of nearest upsampling on D, H, W */
  float scale;                     /* tanh: y = scale * tanh(x) */
} tsr_layer_spec;

/* Defaults: stride 1, no padding, dilation 1, bias on, alpha 0.01, p 0.5, eps 1e-5, momentum 0.1,
 * scale 1. */
tsr_layer_spec tsr_layer_spec_default(tsr_layer_kind kind);
const char *tsr_layer_kind_name(tsr_layer_kind kind);          /* "conv2d"; "?" for no kind */
tsr_status tsr_layer_kind_parse(const char *name, tsr_layer_kind *kind);
const char *tsr_loss_kind_name(tsr_loss_kind kind);
tsr_status tsr_loss_kind_parse(const char *name, tsr_loss_kind *kind);

tsr_status tsr_model_create(tsr_model **m, const char *name);
void tsr_model_destroy(tsr_model *m);

/* Adds a layer named `name` reading the outputs of `inputs` (layer names; concat and add take
 * several, input takes none). Shape errors name the layer and the shapes. */
tsr_status tsr_model_add(tsr_model *m, const char *name, const tsr_layer_spec *spec,
                         const char *const *inputs, int ninputs);
/* Convenience wrappers over tsr_model_add. */
tsr_status tsr_model_add_input(tsr_model *m, const char *name, int c, int h, int w);
tsr_status tsr_model_add_conv2d(tsr_model *m, const char *name, const char *input, int out_channels,
                                int kernel, int stride, int pad);
tsr_status tsr_model_add_simple(tsr_model *m, const char *name, tsr_layer_kind kind, const char *input);

/* The layer whose output is compared with the targets, and the loss. */
tsr_status tsr_model_set_output(tsr_model *m, const char *layer, tsr_loss_kind loss, float huber_delta);

/* Gradient group size for reductions across ranks (bytes; -1 = one group per layer; 0 = default). */
tsr_status tsr_model_set_group_bytes(tsr_model *m, long long bytes);

int tsr_model_num_layers(const tsr_model *m);
const char *tsr_model_name(const tsr_model *m);
/* Per-sample output shape [C, H, W] of a layer; returns TSR_ERR_ARG for an unknown name. A
 * [C, D, H, W] output is given as [C, D*H, W], the same NCDHW memory. */
tsr_status tsr_model_layer_shape(const tsr_model *m, const char *layer, int *c, int *h, int *w);
/* Depth D of a layer's [C, D, H, W] output, 0 for a [C, H, W] output. */
tsr_status tsr_model_layer_depth(const tsr_model *m, const char *layer, int *d);
const char *tsr_model_layer_name(const tsr_model *m, int index);
tsr_layer_kind tsr_model_layer_kind(const tsr_model *m, int index);
const tsr_layer_spec *tsr_model_layer_spec(const tsr_model *m, int index);
/* Trainable parameter count (INT64_MAX if it is larger). */
int64_t tsr_model_num_params(const tsr_model *m);
/* Multiply-add FLOPs of one sample's forward pass (x2 = FLOPs). */
double tsr_model_forward_flops(const tsr_model *m);
/* Writes a one-line-per-layer summary (name, kind, inputs, output shape, parameters). */
void tsr_model_print(const tsr_model *m, void *file /* FILE* */);

/* Reads a model (layers, loss and optimizer) from a JSON file; see docs/model-format.md.
 * Errors give the file, the position and the field. `opt` may be NULL. */
struct tsr_optim_spec;
tsr_status tsr_model_load_json(tsr_model **m, struct tsr_optim_spec *opt, const char *path);
/* The same, and the optimizer's learning-rate schedule (tessera/schedule.h): *has_schedule 0 and a
 * constant schedule when the file has none. The file is read once (it may be a pipe). */
struct tsr_schedule_spec;
tsr_status tsr_model_load_json_schedule(tsr_model **m, struct tsr_optim_spec *opt, struct tsr_schedule_spec *sched,
                                        int *has_schedule, const char *path);

#ifdef __cplusplus
}
#endif
#endif

/* Internal view of a model: layers in insertion (topological) order with inferred shapes and
 * their registry entries (src/layers). */
#ifndef TSR_GRAPH_MODEL_H
#define TSR_GRAPH_MODEL_H

#include <tessera/model.h>
#include "layers/layer.h"

#define TSR_NAME_MAX 64

struct _tsr_layer {
  char name[TSR_NAME_MAX];
  tsr_layer_spec spec;
  const struct _tsr_layer_ops *ops; /* its kind's registry entry */
  int ninputs;
  int inputs[TSR_MAX_INPUTS]; /* indices of earlier layers */
  int c, h, w;          /* per-sample output shape */
  int d;                /* depth of a [C, D, H, W] output; 0 for [C, H, W] */
};

struct tsr_model {
  char name[128];
  int n, cap;
  struct _tsr_layer *layers;
  int output;           /* index of the output layer, -1 = last */
  tsr_loss_kind loss;
  float huber_delta;
  long long group_bytes; /* gradient group size from the model file (0 = not set, -1 = per layer) */
};

int _tsr_model_find(const tsr_model *m, const char *name);
int _tsr_model_output(const tsr_model *m);
/* Layer l as its registry entry sees it (spec, input and output shapes). */
void _tsr_model_view(const tsr_model *m, int l, struct _tsr_layer_view *v);
/* Elements of one sample of the layer's output. */
size_t _tsr_layer_elems(const struct _tsr_layer *l);
/* Parameter tensors of a layer in PyTorch order (weight, bias, running_mean, running_var). */
int _tsr_layer_num_tensors(const struct _tsr_layer *l);
/* Shape of tensor i of the layer, its suffix ("weight") and whether it is trainable. */
void _tsr_layer_tensor(const struct _tsr_layer *l, const tsr_model *m, int i, tsr_shape *shape,
                       const char **suffix, int *trainable);

#endif

/* Output sizes of sliding-window layers, PyTorch's formulas: read by shape inference (src/graph)
 * and by tests that build operation descriptors. */
#ifndef TSR_TENSOR_SHAPE_H
#define TSR_TENSOR_SHAPE_H

#include <stdint.h>

/* Convolution (and pooling) and transposed convolution along one axis: input size, kernel,
 * stride, padding, dilation (1 = none), output padding. */
int64_t _tsr_conv_out(int in, int k, int s, int p, int d);
int64_t _tsr_deconv_out(int in, int k, int s, int p, int d, int op);

#endif

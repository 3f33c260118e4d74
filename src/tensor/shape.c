/* Output sizes of sliding-window layers (convolution, transposed convolution, pooling). */
#include "tensor/shape.h"

/* PyTorch's formulas, with floor division also for sizes that come out non-positive. */
int _tsr_conv_out(int in, int k, int s, int p, int d) {
  int num = in + 2 * p - d * (k - 1) - 1;
  return (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
}

int _tsr_deconv_out(int in, int k, int s, int p, int d, int op) { return (in - 1) * s - 2 * p + d * (k - 1) + op + 1; }

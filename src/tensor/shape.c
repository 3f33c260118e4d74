/* Output sizes of sliding-window layers (convolution, transposed convolution, pooling). */
#include "tensor/shape.h"

/* PyTorch's formulas, with floor division also for sizes that come out non-positive; in 64 bits, where
 * any int arguments fit (a model may ask for sizes beyond int, which the builder then refuses). */
int64_t _tsr_conv_out(int in, int k, int s, int p, int d) {
  int64_t num = (int64_t)in + 2 * (int64_t)p - (int64_t)d * (k - 1) - 1;
  return (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
}

int64_t _tsr_deconv_out(int in, int k, int s, int p, int d, int op) {
  return ((int64_t)in - 1) * s - 2 * (int64_t)p + (int64_t)d * (k - 1) + op + 1;
}

/* Converged sampling from the physics: the highest scattering angle theta to be simulated sets the
 * band limit k_max = theta / lambda; the grid's anti-aliasing limit (2/3 of Nyquist, cbed_sim.c)
 * must reach it on the longer cell edge L, so n >= 3 L k_max; and the slice thickness keeps the
 * Fresnel phase of one slice at the band limit, pi lambda dz k_max^2, below pi (Kirkland 2010,
 * sec. 6.8 discusses both), with dz <= 2 A. The grid size has only factors 2, 3, 5, 7 (FFTW's
 * fast sizes). check_cbed_physics measures the patterns' error against a refined grid. */
#include <math.h>

#include "sim/cbed/cbed.h"

static int smooth(int n) {
  int m = n;
  for (int f = 2; f <= 7; f++)
    while (m % f == 0) m /= f;
  return m == 1;
}

int _tsr_cbed_grid_for(double lx, double ly, double lambda, double theta_mrad, int min_n) {
  double kmax = theta_mrad * 1e-3 / lambda, need = 3 * fmax(lx, ly) * kmax;
  int n = need > 1 << 20 ? 1 << 20 : (int)ceil(need - 1e-9);
  n = n < min_n ? min_n : n;
  n += n & 1;
  while (!smooth(n)) n += 2; /* bounded: every power of two is smooth */
  return n;
}

double _tsr_cbed_slice_for(double lambda, double theta_mrad) {
  double kmax = theta_mrad * 1e-3 / lambda;
  return fmin(2.0, 1.0 / (lambda * kmax * kmax));
}

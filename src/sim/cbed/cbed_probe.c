/* The probe: an aperture of semi-angle alpha in the back focal plane with the aberration phase
 * chi(k) of the lens, shifted to the probe position. Krivanek's polar notation with theta = lambda k:
 * chi = 2 pi / lambda [theta^2 (C1 + A1 cos 2(phi - phi_A1)) / 2 + theta^3 B2 cos(phi - phi_B2) / 3
 *                      + theta^4 C3 / 4],
 * C1 = -defocus (Kirkland's defocus, positive = underfocus), C3 = Cs. The round terms keep the
 * arithmetic of the original code, so a probe without astigmatism and coma is bitwise unchanged. */
#include <math.h>

#include "sim/cbed/cbed.h"

static int freq(int i, int n) { return i < (n + 1) / 2 ? i : i - n; }

double _tsr_cbed_chi(const struct cbed_optics *op, double lambda, double kx, double ky) {
  double l = lambda, k2 = kx * kx + ky * ky, cs = op->cs_mm * 1e7;
  double chi = M_PI * l * k2 * (0.5 * cs * l * l * k2 - op->defocus);
  if (op->a1 != 0) /* k^2 cos 2(phi - phi_A1) = (kx^2 - ky^2) cos 2 phi_A1 + 2 kx ky sin 2 phi_A1 */
    chi += M_PI * l * op->a1 * ((kx * kx - ky * ky) * cos(2 * op->a1_angle) + 2 * kx * ky * sin(2 * op->a1_angle));
  if (op->b2 != 0) /* k^3 cos(phi - phi_B2) = k^2 (kx cos phi_B2 + ky sin phi_B2) */
    chi += 2 * M_PI / 3 * l * l * op->b2 * k2 * (kx * cos(op->b2_angle) + ky * sin(op->b2_angle));
  return chi;
}

void _tsr_cbed_probe(struct cbed_work *w, const struct cbed_optics *op, double px, double py) {
  int n = w->n;
  size_t nn = (size_t)n * n;
  double kap = op->alpha_mrad * 1e-3 / w->lambda;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++) {
      double kx = freq(i, n) / w->lx, ky = freq(j, n) / w->ly, k2 = kx * kx + ky * ky;
      size_t p = (size_t)j * n + i;
      if (k2 > kap * kap || !_tsr_cbed_in_band(w, i, j)) {
        w->tmp[p][0] = w->tmp[p][1] = 0;
        continue;
      }
      double ph = -_tsr_cbed_chi(op, w->lambda, kx, ky) - 2 * M_PI * (kx * px + ky * py);
      w->tmp[p][0] = cos(ph), w->tmp[p][1] = sin(ph);
    }
  fftw_execute(w->bwd);
  double e = 0;
  for (size_t p = 0; p < nn; p++) e += w->psi[p][0] * w->psi[p][0] + w->psi[p][1] * w->psi[p][1];
  double s = e > 0 ? 1 / sqrt(e) : 0;
  for (size_t p = 0; p < nn; p++) w->psi[p][0] *= s, w->psi[p][1] *= s;
}

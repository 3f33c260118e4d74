/* Physical constants of the CBED simulator: the relativistic electron wavelength and the interaction
 * constant sigma. The scattering factors f_e(q), whose 2-D Fourier transform gives the projected
 * potential v(q) = 2 pi a0 e f_e(q) / area of one atom in a periodic cell, are in cbed_kirkland.c. */
#include <math.h>

#include "sim/cbed/cbed.h"

/* CODATA 2018: h c (keV A) and the electron rest energy m0 c^2 (keV). */
#define HC_KEV_A 12.398419843320026
#define MC2_KEV 510.99895000

double tsr_cbed_wavelength(double kv) {
  /* lambda = h c / sqrt(E (2 m0 c^2 + E)) */
  return HC_KEV_A / sqrt(kv * (2 * MC2_KEV + kv));
}

double tsr_cbed_sigma(double kv) {
  /* Kirkland eq. 5.6: sigma = (2 pi / (lambda V)) (m0 c^2 + eV) / (2 m0 c^2 + eV), in rad / (V A) */
  double lambda = tsr_cbed_wavelength(kv);
  return 2 * M_PI / (lambda * kv * 1e3) * (MC2_KEV + kv) / (2 * MC2_KEV + kv);
}

/* Frozen phonons (Kirkland 2010, sec. 7.5): thermal diffuse scattering as the mean of patterns of
 * specimens whose atoms are displaced by independent Gaussians, per-axis variance <u^2> = B / 8 pi^2
 * of each element (Einstein model). The mean of a displaced atom's potential is the static one
 * damped by the Debye-Waller factor exp(-2 pi^2 <u^2> k^2), which check_cbed_physics tests. The
 * displaced specimen spans several periods along the beam, so that periods differ. */
#include <math.h>
#include <stdlib.h>

#include "sim/cbed/cbed.h"

/* Built-in room-temperature values. Si: U = 0.00577 A^2 at 300 K (Rietveld refinement of Si powder,
 * Table 2 of PMC8086158). Every other element: 0.0075 A^2 (B = 0.59 A^2, typical of metals and
 * oxides at room temperature) until measured values are set with tsr_cbed_opts.u2 (--u2). */
#define U2_DEFAULT 0.0075
static double builtin(int z) { return z == 14 ? 0.00577 : U2_DEFAULT; }

double _tsr_cbed_u2(const tsr_cbed_opts *o, int z) {
  if (z >= 0 && z <= TSR_CBED_ZMAX && o->u2[z] > 0) return o->u2[z];
  return builtin(z);
}

double _tsr_cbed_normal(double (*uniform)(void *), void *rng) {
  double u = 1 - uniform(rng), v = uniform(rng); /* u in (0, 1] */
  return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
}

static double wrap(double x, double l) {
  x = fmod(x, l);
  return x < 0 ? x + l : x >= l ? 0 : x;
}

int _tsr_cbed_displaced(struct cbed_atoms *out, const struct cbed_atoms *a, int copies, const tsr_cbed_opts *o,
                        double (*uniform)(void *), void *rng) {
  size_t m = (size_t)a->n * copies;
  *out = (struct cbed_atoms){.n = (int)m, .cap = (int)m, .lx = a->lx, .ly = a->ly, .lz = a->lz * copies,
                             .tilt = {a->tilt[0], a->tilt[1]}};
  out->x = malloc(sizeof(double) * (m ? m : 1)), out->y = malloc(sizeof(double) * (m ? m : 1));
  out->z = malloc(sizeof(double) * (m ? m : 1)), out->zn = malloc(sizeof(int) * (m ? m : 1));
  if (!out->x || !out->y || !out->z || !out->zn) return -1;
  for (int c = 0; c < copies; c++)
    for (int k = 0; k < a->n; k++) {
      size_t q = (size_t)c * a->n + k;
      double u = sqrt(_tsr_cbed_u2(o, a->zn[k]));
      out->x[q] = wrap(a->x[k] + u * _tsr_cbed_normal(uniform, rng), out->lx);
      out->y[q] = wrap(a->y[k] + u * _tsr_cbed_normal(uniform, rng), out->ly);
      out->z[q] = wrap(a->z[k] + c * a->lz + u * _tsr_cbed_normal(uniform, rng), out->lz);
      out->zn[q] = a->zn[k];
    }
  return 0;
}

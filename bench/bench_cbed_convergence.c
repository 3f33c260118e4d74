/* bench_cbed_convergence: how far a CBED pattern at a given sampling is from a refined one. For each
 * of SrTiO3, Cu and Si along [001] (or --zone; fixed origin, probe at the cell centre, one thickness), the
 * pattern at the chosen sampling (default: tsr_cbed_opts_default's band limit and slice) against a
 * reference of a wider band limit and thinner slices over the same cell, so the diffraction pixels
 * coincide: relative L2 error over the pattern, largest pixel error relative to the largest
 * intensity, and the fraction of the beam the reference scatters outside the pattern. --old adds the
 * old example's sampling (32 x 32 grid, 10 A cell, 2 A slices) against a reference over its cell. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tessera.h>

static void usage(const char *prog) {
  printf("Usage: %s [--thickness A] [--fov A] [--pattern P] [--kv E] [--alpha MRAD] [--max-angle MRAD]\n"
         "          [--slice A] [--ref-angle MRAD] [--ref-slice A] [--zone 1|2|4] [--old]\n"
         "Relative error of CBED patterns at a sampling against a refined one, for SrTiO3, Cu, Si [001].\n",
         prog);
}

struct run {
  double *x;
  int p;
};

static struct run simulate(const tsr_cbed_opts *base, tsr_cbed_structure s, double max_angle, double slice,
                           int grid) {
  tsr_cbed_opts o = *base;
  o.structures = 1u << s, o.max_angle_mrad = max_angle, o.slice = slice, o.grid = grid;
  struct run r = {malloc(sizeof(double) * o.pattern * o.pattern), o.pattern};
  float *x = malloc(sizeof(float) * o.pattern * o.pattern), *v = malloc(sizeof(float) * o.target * o.target);
  if (!r.x || !x || !v || tsr_cbed_sample(&o, 0, x, v) != TSR_OK) {
    fprintf(stderr, "bench_cbed_convergence: %s\n", tsr_last_error());
    exit(1);
  }
  for (int k = 0; k < o.pattern * o.pattern; k++) r.x[k] = x[k];
  free(x), free(v);
  return r;
}

static void compare(const char *what, const struct run *a, const struct run *ref) {
  double e = 0, n = 0, mx = 0, dmax = 0, tot = 0;
  for (int k = 0; k < a->p * a->p; k++) {
    double d = a->x[k] - ref->x[k];
    e += d * d, n += ref->x[k] * ref->x[k], tot += ref->x[k];
    mx = fmax(mx, ref->x[k]), dmax = fmax(dmax, fabs(d));
  }
  printf("  %-34s relative L2 %.4f   max |dI| / max I %.4f   reference outside the pattern %.4f\n", what, sqrt(e / n),
         dmax / mx, 1 - tot);
}

int main(int argc, char **argv) {
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  double thick = 60, ref_angle = 2 * o.max_angle_mrad, ref_slice = 0.25, angle = o.max_angle_mrad, slice = 0;
  int old = 0, zone = 1, c;
  static const struct option longopts[] = {
      {"thickness", required_argument, NULL, 't'}, {"fov", required_argument, NULL, 'f'},
      {"pattern", required_argument, NULL, 'p'},   {"kv", required_argument, NULL, 'k'},
      {"alpha", required_argument, NULL, 'a'},     {"max-angle", required_argument, NULL, 'm'},
      {"ref-angle", required_argument, NULL, 'r'}, {"ref-slice", required_argument, NULL, 's'},
      {"old", no_argument, NULL, 'o'},             {"help", no_argument, NULL, 'h'},
      {"slice", required_argument, NULL, 'z'},      {"zone", required_argument, NULL, 'Z'},
      {NULL, 0, NULL, 0}};
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 't': thick = atof(optarg); break;
    case 'f': o.fov = atof(optarg); break;
    case 'p': o.pattern = atoi(optarg); break;
    case 'k': o.kv = atof(optarg); break;
    case 'a': o.alpha_mrad = atof(optarg); break;
    case 'm': angle = atof(optarg); break;
    case 'r': ref_angle = atof(optarg); break;
    case 's': ref_slice = atof(optarg); break;
    case 'o': old = 1; break;
    case 'z': slice = atof(optarg); break;
    case 'Z': zone = atoi(optarg); break;
    case 'h': usage(argv[0]); return 0;
    default: usage(argv[0]); return 2;
    }
  }
  o.zones = zone == 4 ? 4 : zone == 2 ? 2 : 1, o.shift = 0, o.thickness_min = o.thickness_max = thick, o.probes = 1, o.target = 16;
  o.intensity = TSR_CBED_LINEAR;
  printf("%g kV, alpha %g mrad, %g A thick, %g A field of view, %d x %d pattern; reference: %g mrad, %g A slices\n",
         o.kv, o.alpha_mrad, thick, o.fov, o.pattern, o.pattern, ref_angle, ref_slice);
  const tsr_cbed_structure s[] = {TSR_CBED_SRTIO3, TSR_CBED_CU, TSR_CBED_SI};
  for (int k = 0; k < 3; k++) {
    printf("%s [%s]\n", tsr_cbed_structure_name(s[k]), o.zones == 4 ? "111" : o.zones == 2 ? "110" : "001");
    struct run ref = simulate(&o, s[k], ref_angle, ref_slice, 0), def = simulate(&o, s[k], angle, slice, 0);
    char what[64];
    if (slice > 0) snprintf(what, sizeof what, "band limit %g mrad, %g A slices", angle, slice);
    else snprintf(what, sizeof what, "band limit %g mrad, chosen slice", angle);
    compare(what, &def, &ref);
    free(ref.x), free(def.x);
    if (old) {
      tsr_cbed_opts q = o;
      q.fov = 10, q.pattern = 32;
      struct run oref = simulate(&q, s[k], ref_angle, ref_slice, 0), oo = simulate(&q, s[k], angle, 2, 32);
      compare("old example: grid 32, 10 A, 2 A slices", &oo, &oref);
      free(oref.x), free(oo.x);
    }
  }
  return 0;
}

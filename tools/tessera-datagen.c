/* tessera-datagen: writes a phase-object diffraction data set (inputs log(1 + |FFT(P exp(i sigma V))|^2)
 * under a defocused convergent probe P, targets V) to an HDF5 file that tessera-train reads. Every sample depends only on (seed, index). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <tessera.h>

#include "cli.h"

static void usage(void) {
  tsr_phase_gen_opts d;
  tsr_phase_gen_opts_default(&d);
  printf("Usage: %s --out FILE.h5 --samples N [options]\n"
         "Generates phase-object diffraction patterns (inputs) and their projected potentials (targets).\n\n"
         "  -o, --out FILE         output HDF5 file (written to FILE.tmp, then renamed)\n"
         "  -n, --samples N        number of samples\n"
         "      --size S           pattern side in pixels (default %d)\n"
         "      --seed S           random seed (default %llu)\n"
         "      --atoms-min A      fewest atoms per sample (default %d)\n"
         "      --atoms-max B      most atoms per sample (default %d)\n"
         "      --sigma X          interaction constant x potential scale (default %g)\n"
         "      --width-min W      narrowest Gaussian atom, pixels (default %g)\n"
         "      --width-max W      widest Gaussian atom, pixels (default %g)\n"
"      --aperture A       probe aperture, fraction of Nyquist; 0 = plane wave (default %g)\n"
         "      --magnification M  defocus as shadow-image magnification (default %g)\n"
         "      --workers N        threads generating samples (default: one per core, as StarPU's choice\n"
         "                         in the other programs); the data do not depend on it\n"
         "  -q, --quiet            no progress line or summary\n"
         "  -V, --version          print the version\n"
         "  -h, --help             this text\n",
         cli_program(), d.size, (unsigned long long)d.seed, d.atoms_min, d.atoms_max, d.sigma, d.width_min,
         d.width_max, d.aperture, d.magnification);
}


int main(int argc, char **argv) {
  cli_set_program("tessera-datagen");
  enum { O_SIZE = 256, O_SEED, O_AMIN, O_AMAX, O_SIGMA, O_WMIN, O_WMAX, O_APER, O_MAG, O_WORKERS };
  static const struct option longopts[] = {
      {"out", required_argument, NULL, 'o'},       {"samples", required_argument, NULL, 'n'},
      {"size", required_argument, NULL, O_SIZE},   {"seed", required_argument, NULL, O_SEED},
      {"atoms-min", required_argument, NULL, O_AMIN}, {"atoms-max", required_argument, NULL, O_AMAX},
      {"sigma", required_argument, NULL, O_SIGMA}, {"width-min", required_argument, NULL, O_WMIN},
      {"width-max", required_argument, NULL, O_WMAX}, {"quiet", no_argument, NULL, 'q'},
      {"aperture", required_argument, NULL, O_APER}, {"magnification", required_argument, NULL, O_MAG},
      {"workers", required_argument, NULL, O_WORKERS},
      {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}};
  tsr_phase_gen_opts o;
  tsr_phase_gen_opts_default(&o);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  o.workers = cores > 0 && cores <= 4096 ? (int)cores : 1;
  const char *out = NULL;
  int64_t n = 0;
  int quiet = 0, c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "o:n:qhV", longopts, NULL)) != -1) {
    switch (c) {
    case 'o': out = optarg; break;
    case 'n': n = cli_parse_int64("--samples", optarg, 1, INT64_C(1) << 40); break;
    case O_SIZE: o.size = cli_parse_int("--size", optarg, 2, 8192); break;
    case O_SEED: o.seed = cli_parse_u64("--seed", optarg); break;
    case O_AMIN: o.atoms_min = cli_parse_int("--atoms-min", optarg, 1, 1000000); break;
    case O_AMAX: o.atoms_max = cli_parse_int("--atoms-max", optarg, 1, 1000000); break;
    case O_SIGMA: o.sigma = cli_parse_float("--sigma", optarg, 1e-30, 1e30); break;
    case O_WMIN: o.width_min = cli_parse_float("--width-min", optarg, 1e-6, 1e6); break;
    case O_WMAX: o.width_max = cli_parse_float("--width-max", optarg, 1e-6, 1e6); break;
    case O_APER: o.aperture = cli_parse_float("--aperture", optarg, 0, 1); break;
    case O_WORKERS: o.workers = cli_parse_int("--workers", optarg, 1, 4096); break;
    case O_MAG: o.magnification = cli_parse_float("--magnification", optarg, 1e-6, 1e6); break;
    case 'q': quiet = 1; break;
    case 'h': usage(); return 0;
    case 'V': cli_version(); return 0;
    default: cli_usage_error("unknown option or missing value: %s", argv[optind - 1]);
    }
  }
  if (optind < argc) cli_usage_error("unexpected argument '%s'", argv[optind]);
  if (!out) cli_usage_error("--out is required");
  if (n == 0) cli_usage_error("--samples is required");
  if (o.atoms_max < o.atoms_min) cli_usage_error("--atoms-max %d is below --atoms-min %d", o.atoms_max, o.atoms_min);
  if (o.width_max < o.width_min) cli_usage_error("--width-max %g is below --width-min %g", o.width_max, o.width_min);

  cli_samples p;
  cli_samples_init(&p, quiet);
  tsr_status s = tsr_phase_gen_write(&o, n, out, cli_samples_update, &p);
  cli_progress_clear(&p.line);
  if (s != TSR_OK) cli_die("%s", tsr_last_error());
  if (!quiet) {
    char el[32];
    double t = cli_now() - p.start;
    printf("wrote %s: %lld samples, inputs and targets [1, %d, %d], in %s (%.0f samples/s)\n", out, (long long)n,
           o.size, o.size, cli_duration(t, el, sizeof el), n / t);
  }
  return 0;
}

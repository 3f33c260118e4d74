/* tessera-cosmogen: writes a CosmoFlow-style data set to HDF5: 3-D Gaussian random fields with a
 * parametrised power spectrum, one channel per redshift, the spectrum's parameters as regression
 * targets (standardised to [-1, 1], the formula printed and stored); or halos and voids in such a
 * field with one class per voxel (segmentation, for the 3-D U-Net). Every sample depends only on
 * (seed, index), whatever the number of threads. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tessera.h>

#include "cli.h"

static void usage(void) {
  tsr_cosmo_opts d;
  tsr_cosmo_opts_default(&d);
  printf("Usage: %s --out FILE.h5 --samples N [options]\n"
         "Generates 3-D Gaussian random fields of power spectrum P(k) = A (k / k_p)^n_s exp(-(k / k_c)^2) on a\n"
         "periodic cube, each evolved to several redshifts (one channel per redshift: the linear growth factor\n"
         "D(z) of flat LambdaCDM with matter density omega_m, then a lognormal transform). Regression targets are\n"
         "the parameters omega_m, sigma (rms of the linear field at z = 0; sets A), n_s and k_c, each drawn\n"
         "uniformly in its range and stored standardised: t = 2 (p - min) / (max - min) - 1, in [-1, 1] (0 for\n"
         "a fixed parameter); the physical values go to dataset 'params' with names, units and ranges.\n\n"
         "  -o, --out FILE          output HDF5 file (written to FILE.tmp, then renamed)\n"
         "  -n, --samples N         number of samples\n"
         "      --task T            regression (inputs [Z, S, S, S], targets [4, 1, 1]) or segmentation\n"
         "                          (inputs [1, S, S, S]: the z = 0 field with halo and void spheres; targets\n"
         "                          [3, S, S, S]: background, halo, void per voxel, one-hot) (default regression)\n"
         "      --size S            cells per side (default %d)\n"
         "      --cell L            cell side, Mpc/h (default %g: box %g Mpc/h)\n"
         "      --pivot K           pivot wavenumber k_p, h/Mpc (default %g)\n"
         "      --omega-m A[:B]     matter density range (default %g:%g)\n"
         "      --sigma A[:B]       rms of the linear density contrast at z = 0 (default %g:%g)\n"
         "      --n-s A[:B]         spectral index range (default %g:%g)\n"
         "      --k-c A[:B]         cutoff wavenumber range, h/Mpc (default %g:%g)\n"
         "      --redshifts LIST    channels' redshifts, comma-separated (default 3,2,1,0)\n"
         "      --transform T       lognormal: exp(D delta - D^2 sigma^2 / 2) - 1, or linear: D delta (default\n"
         "                          lognormal)\n"
         "      --blobs A:B         segmentation: spheres per sample (default %d:%d)\n"
         "      --radius A:B        segmentation: sphere radius in cells (default %g:%g)\n"
         "      --contrast X        segmentation: halo +X sigma, void -X sigma (default %g)\n"
         "      --seed S            random seed (default %llu)\n"
         "      --first I           index of the first sample (default 0; another range of the same seed gives\n"
         "                          disjoint validation data)\n"
         "      --chunk K           HDF5 chunk side along D, H, W (default: the whole cube, one chunk per channel\n"
         "                          and sample; smaller chunks for reading boxes of each sample)\n"
         "      --workers N         threads generating samples (default: one per core); the data do not depend on it\n"
         "  -q, --quiet             no progress line or summary\n"
         "  -V, --version           print the version\n"
         "  -h, --help              this text\n",
         cli_program(), d.size, d.cell, d.size * d.cell, d.pivot, d.lo[0], d.hi[0], d.lo[1], d.hi[1], d.lo[2], d.hi[2],
         d.lo[3], d.hi[3], d.blobs_min, d.blobs_max, d.radius_min, d.radius_max, d.contrast,
         (unsigned long long)d.seed);
}

/* "A" or "A:B" into lo, hi. */
static void parse_range(const char *opt, const char *arg, double *lo, double *hi) {
  char *end;
  *lo = *hi = strtod(arg, &end);
  int ok = end != arg;
  if (ok && *end == ':') {
    const char *b = end + 1;
    *hi = strtod(b, &end);
    ok = end != b;
  }
  if (!ok || *end || !isfinite(*lo) || !isfinite(*hi))
    cli_usage_error("%s: '%s' is not a number A or a range A:B", opt, arg);
}

static void parse_redshifts(const char *arg, tsr_cosmo_opts *o) {
  char *copy = strdup(arg), *save = NULL;
  if (!copy) cli_die("out of memory");
  o->nz = 0;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (o->nz == TSR_COSMO_MAX_CHANNELS)
      cli_usage_error("--redshifts: '%s' lists more than %d redshifts", arg, TSR_COSMO_MAX_CHANNELS);
    o->z[o->nz++] = cli_parse_double("--redshifts", t, 0, 1000);
  }
  free(copy);
  if (o->nz == 0) cli_usage_error("--redshifts: '%s' lists no redshift", arg);
}


static void summary(const tsr_cosmo_opts *o, const char *out, int64_t n, double t) {
  int c, s, tc, th;
  tsr_cosmo_shapes(o, &c, &s, &tc, &th);
  char el[32], depth[16] = ""; /* segmentation targets are [3, S, S, S] */
  if (o->task == TSR_COSMO_SEGMENTATION) snprintf(depth, sizeof depth, ", %d", th);
  printf("wrote %s: samples %lld..%lld, inputs [%d, %d, %d, %d], targets [%d, %d, %d%s], in %s (%.1f samples/s)\n",
         out, (long long)o->first, (long long)(o->first + n - 1), c, s, s, s, tc, th, th, depth,
         cli_duration(t, el, sizeof el), n / t);
  if (o->task == TSR_COSMO_SEGMENTATION) {
    printf("targets: one-hot classes background, halo, void per voxel\n");
    return;
  }
  printf("targets: t = 2 (p - min) / (max - min) - 1 with");
  for (int i = 0; i < TSR_COSMO_PARAMS; i++)
    printf("%s %s %g..%g%s%s", i ? "," : "", tsr_cosmo_param_name(i), o->lo[i], o->hi[i],
           strcmp(tsr_cosmo_param_unit(i), "1") ? " " : "", strcmp(tsr_cosmo_param_unit(i), "1") ? tsr_cosmo_param_unit(i) : "");
  printf("\n");
}

int main(int argc, char **argv) {
  cli_set_program("tessera-cosmogen");
  enum { O_TASK = 256, O_SIZE, O_CELL, O_PIVOT, O_OM, O_SIGMA, O_NS, O_KC, O_Z, O_TRANSFORM, O_BLOBS, O_RADIUS,
         O_CONTRAST, O_SEED, O_FIRST, O_CHUNK, O_WORKERS };
  static const struct option longopts[] = {
      {"out", required_argument, NULL, 'o'},         {"samples", required_argument, NULL, 'n'},
      {"task", required_argument, NULL, O_TASK},     {"size", required_argument, NULL, O_SIZE},
      {"cell", required_argument, NULL, O_CELL},     {"pivot", required_argument, NULL, O_PIVOT},
      {"omega-m", required_argument, NULL, O_OM},    {"sigma", required_argument, NULL, O_SIGMA},
      {"n-s", required_argument, NULL, O_NS},        {"k-c", required_argument, NULL, O_KC},
      {"redshifts", required_argument, NULL, O_Z},   {"transform", required_argument, NULL, O_TRANSFORM},
      {"blobs", required_argument, NULL, O_BLOBS},   {"radius", required_argument, NULL, O_RADIUS},
      {"contrast", required_argument, NULL, O_CONTRAST}, {"seed", required_argument, NULL, O_SEED},
      {"first", required_argument, NULL, O_FIRST},   {"chunk", required_argument, NULL, O_CHUNK},
      {"workers", required_argument, NULL, O_WORKERS}, {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},              {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  static const char *const param_opts[TSR_COSMO_PARAMS] = {"--omega-m", "--sigma", "--n-s", "--k-c"};
  tsr_cosmo_opts o;
  tsr_cosmo_opts_default(&o);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  o.workers = cores > 0 && cores <= 4096 ? (int)cores : 1;
  const char *out = NULL;
  int64_t n = 0;
  int quiet = 0, c;
  double lo, hi;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "o:n:qhV", longopts, NULL)) != -1) {
    switch (c) {
    case 'o': out = optarg; break;
    case 'n': n = cli_parse_int64("--samples", optarg, 1, INT64_C(1) << 40); break;
    case O_TASK:
      if (!strcmp(optarg, "regression")) o.task = TSR_COSMO_REGRESSION;
      else if (!strcmp(optarg, "segmentation")) o.task = TSR_COSMO_SEGMENTATION;
      else cli_usage_error("--task: '%s' is not regression or segmentation", optarg);
      break;
    case O_SIZE: o.size = cli_parse_int("--size", optarg, 4, 1024); break;
    case O_CELL: o.cell = cli_parse_double("--cell", optarg, 1e-6, 1e6); break;
    case O_PIVOT: o.pivot = cli_parse_double("--pivot", optarg, 1e-6, 1e6); break;
    case O_OM: case O_SIGMA: case O_NS: case O_KC:
      parse_range(param_opts[c - O_OM], optarg, &o.lo[c - O_OM], &o.hi[c - O_OM]);
      if (!(o.lo[c - O_OM] <= o.hi[c - O_OM]))
        cli_usage_error("%s: '%s': the low end is above the high end", param_opts[c - O_OM], optarg);
      break;
    case O_Z: parse_redshifts(optarg, &o); break;
    case O_TRANSFORM:
      if (!strcmp(optarg, "lognormal")) o.transform = TSR_COSMO_LOGNORMAL;
      else if (!strcmp(optarg, "linear")) o.transform = TSR_COSMO_LINEAR;
      else cli_usage_error("--transform: '%s' is not lognormal or linear", optarg);
      break;
    case O_BLOBS:
      parse_range("--blobs", optarg, &lo, &hi);
      if (lo != (int)lo || hi != (int)hi || lo < 0 || hi < lo || hi > 100000)
        cli_usage_error("--blobs: '%s' is not a count or a range A:B of counts in [0, 100000]", optarg);
      o.blobs_min = (int)lo, o.blobs_max = (int)hi;
      break;
    case O_RADIUS: parse_range("--radius", optarg, &o.radius_min, &o.radius_max); break;
    case O_CONTRAST: o.contrast = cli_parse_double("--contrast", optarg, 0, 1e6); break;
    case O_SEED: o.seed = cli_parse_u64("--seed", optarg); break;
    case O_FIRST: o.first = cli_parse_int64("--first", optarg, 0, INT64_C(1) << 50); break;
    case O_CHUNK: o.chunk = cli_parse_int("--chunk", optarg, 1, 1024); break;
    case O_WORKERS: o.workers = cli_parse_int("--workers", optarg, 1, 4096); break;
    case 'q': quiet = 1; break;
    case 'h': usage(); return 0;
    case 'V': cli_version(); return 0;
    default: cli_usage_error("unknown option or missing value: %s", argv[optind - 1]);
    }
  }
  if (optind < argc) cli_usage_error("unexpected argument '%s'", argv[optind]);
  if (!out) cli_usage_error("--out is required");
  if (n == 0) cli_usage_error("--samples is required");
  if (tsr_cosmo_opts_check(&o) != TSR_OK) cli_usage_error("%s", tsr_last_error());

  cli_samples p;
  cli_samples_init(&p, quiet);
  tsr_status s = tsr_cosmo_write(&o, n, out, cli_samples_update, &p);
  cli_progress_clear(&p.line);
  if (s != TSR_OK) cli_die("%s", tsr_last_error());
  if (!quiet) summary(&o, out, n, cli_now() - p.start);
  return 0;
}

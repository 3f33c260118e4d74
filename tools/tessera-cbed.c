/* tessera-cbed: simulates CBED training data with the multislice method and writes HDF5 (datasets
 * `cbed` [N, P, H, W] and `potential` [N, 1, H', W']). Samples are StarPU tasks; under mpirun each
 * rank simulates a disjoint index range and writes its own shard NAME.rankR.h5. Every sample depends
 * only on (seed, index), so the data are the same for any number of ranks and workers. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <tessera.h>

#include "cli.h"

static void usage(void) {
  tsr_cbed_opts d;
  tsr_cbed_opts_default(&d);
  printf("Usage: %s --out FILE.h5 --samples N [options]\n"
         "Simulates convergent-beam electron diffraction (multislice) of crystals (built-in, CIF files or\n"
         "random crystals of Z = 1..103) and random atoms. The record of every sample (structure, cell,\n"
         "zone axis, supercell, thickness, tilt, rotation, origin, the optics drawn, sampling, detector,\n"
         "scan window) is the compound dataset 'meta'. Values given as A:B are drawn uniformly per sample.\n"
         "Each sample: P = probes^2 diffraction patterns [P, H, W] ('cbed') and the projected potential\n"
         "[1, H', W'] ('potential', V A). Under mpirun, rank R writes FILE.rankR.h5 with its share of samples.\n\n"
         "  -o, --out FILE          output HDF5 file\n"
         "  -n, --samples N         number of samples (over all ranks)\n"
         "      --seed S            random seed (default %llu)\n"
         "      --kv E[:E2]         accelerating voltage, kV (default %g)\n"
         "      --alpha A[:A2]      probe convergence semi-angle, mrad (default %g)\n"
         "      --defocus D[:D2]    defocus, A, positive = underfocus, C1 = -D (default %g)\n"
         "      --cs C[:C2]         spherical aberration C3, mm (default %g)\n"
         "      --a1 A[:A2]         two-fold astigmatism |A1|, A, random azimuth (default 0)\n"
         "      --b2 B[:B2]         axial coma |B2|, A, random azimuth (default 0)\n"
         "      --source S          partial spatial coherence: rms source size at the specimen, A;\n"
         "                          incoherent mean over probe positions drawn from it (default 0)\n"
         "      --coherence-samples M  probe positions per scan point when --source > 0 (default %d)\n"
         "      --phonons N         frozen-phonon configurations averaged (default 0: static lattice)\n"
         "      --u2 LIST           per-element mean square displacement, A^2, e.g. Si:0.0058,O:0.0074\n"
         "                          (default: Si 0.00577, others 0.0075)\n"
         "      --max-angle M       highest scattering angle simulated, mrad: sets the grid and slice\n"
         "                          thickness per sample when --grid / --slice are 0 (default %g)\n"
         "      --grid N            simulation pixels per side, even; 0 = from --max-angle (default %d)\n"
         "      --pattern H         pattern side H x H (default %d)\n"
         "      --detector-mrad D   detector pixel, mrad; 0 = the simulation's pixels, centre crop (default 0)\n"
         "      --dose E            electrons per pattern, Poisson noise; 0 = noiseless (default 0)\n"
         "      --psf S             detector point spread, rms in detector pixels (default 0)\n"
         "      --target T          target side: T x T samples of the cell's potential (default %d)\n"
         "      --scan S            probes and target over a centred square of S A (default 0: the cell)\n"
         "      --probes K          probe positions per side, P = K^2 (default %d)\n"
         "      --fov L             field of view (supercell side), A (default %g)\n"
         "      --thickness A:B     specimen thickness range, A (default %g:%g)\n"
         "      --slice DZ          slice thickness, A; 0 = from --max-angle (default %g)\n"
         "      --blur B            rms Gaussian blur of the target, A (default %g)\n"
         "      --structures LIST   of si, srtio3, cu, random (atoms), crystal (random crystals),\n"
         "                          prototype (random crystals of common structure types)\n"
         "                          (default si,srtio3,cu)\n"
         "      --cif FILES         CIF files, comma-separated, drawn as further structures\n"
         "      --zones LIST        zone axes of 001, 110, 111 (default 001,110)\n"
         "      --zone-index N      instead: a random zone axis [uvw] with |u|,|v|,|w| <= N per sample\n"
         "      --tilt T            largest specimen tilt off the zone axis, mrad (default 0)\n"
         "      --rotation R        in-plane rotation drawn in [0, R) degrees (default 0; 360: any)\n"
         "      --elements A:B      random and prototype crystals: atomic numbers in [A, B] (default %d:%d)\n"
         "      --sites N           random crystals: at most N atoms per cell (default %d)\n"
         "      --min-distance D    random and prototype crystals: closest approach of two atoms, A (default %g)\n"
         "      --density A:B       random crystals: atoms per A^3 (default %g:%g)\n"
         "      --prototypes LIST   prototype crystals: types drawn from, of fcc (A1), bcc (A2), hcp (A3),\n"
         "                          diamond (A4), rocksalt (B1), cscl (B2), zincblende (B3), wurtzite (B4),\n"
         "                          nias (B8_1), fluorite (C1), rutile (C4), corundum (D5_1), perovskite\n"
         "                          (E2_1), l12 (L1_2), spinel (H1_1) (default all); distinct random\n"
         "                          elements of --elements per element type, no two atoms closer than\n"
         "                          --min-distance, lattice constant 0.85-1.10 x the one at which the\n"
         "                          tightest contact is the sum of covalent radii (Cordero et al. 2008)\n"
         "      --exclude-formulas LIST  prototype crystals: compositions redrawn (e.g. SrTiO3,Cu,TiO2)\n"
         "      --no-shift          crystal origin fixed (default: random in-plane origin per sample)\n"
         "      --atoms A:B         atoms per sample in random mode (default %d:%d)\n"
         "      --intensity S       log, sqrt or linear (default log: log(1 + I / floor))\n"
         "      --floor F           intensity floor of the log scaling (default %g)\n"
         "      --half              store float16 (IEEE half; readers convert to float32)\n"
         "      --first I           index of the first sample (default 0)\n"
         "      --workers N         CPU workers (default: StarPU's choice)\n"
         "  -q, --quiet             no progress line or summary\n"
         "  -V, --version           print the version\n"
         "  -h, --help              this text\n",
         cli_program(), (unsigned long long)d.seed, d.kv, d.alpha_mrad, d.defocus, d.cs_mm, d.coherence_samples,
         d.max_angle_mrad, d.grid, d.pattern, d.target, d.probes, d.fov, d.thickness_min, d.thickness_max, d.slice,
         d.blur, d.zmin, d.zmax, d.sites, d.min_distance, d.density_min, d.density_max, d.random_atoms_min,
         d.random_atoms_max, d.intensity_floor);
}

static void parse_range(const char *opt, const char *arg, double *lo, double *hi) {
  char *end;
  *lo = strtod(arg, &end);
  if (*end == ':') *hi = strtod(end + 1, &end);
  else *hi = *lo;
  if (*end || !(*lo > 0) || *hi < *lo) cli_usage_error("%s: '%s' is not A or A:B with 0 < A <= B", opt, arg);
}

/* A value drawn per sample: V or A:B in [min, max], as centre and half-width. */
static void parse_drawn(const char *opt, const char *arg, double min, double max, double *value, double *spread) {
  char *end;
  double lo = strtod(arg, &end), hi = lo;
  if (end != arg && *end == ':') hi = strtod(end + 1, &end);
  if (*end || end == arg || !(lo >= min && hi <= max && lo <= hi))
    cli_usage_error("%s: '%s' is not V or A:B with %g <= A <= B <= %g", opt, arg, min, max);
  *value = lo == hi ? lo : 0.5 * (lo + hi), *spread = 0.5 * (hi - lo);
}

static unsigned parse_structures(const char *arg) {
  unsigned mask = 0;
  char *copy = strdup(arg), *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    tsr_cbed_structure s;
    if (tsr_cbed_structure_parse(t, &s) != TSR_OK) cli_usage_error("--structures: %s", tsr_last_error());
    mask |= 1u << s;
  }
  free(copy);
  return mask;
}

static unsigned parse_zones(const char *arg) {
  unsigned mask = 0;
  char *copy = strdup(arg), *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (!strcmp(t, "001") || !strcmp(t, "100")) mask |= 1;
    else if (!strcmp(t, "110")) mask |= 2;
    else if (!strcmp(t, "111")) mask |= 4;
    else cli_usage_error("--zones: unknown zone axis '%s' (known: 001, 110, 111)", t);
  }
  free(copy);
  return mask;
}

struct prog {
  cli_progress line;
  double start;
  int rank, size;
};

static void on_progress(void *user, int64_t done, int64_t total) {
  struct prog *p = user;
  double el = cli_now() - p->start, rate = done > 0 ? done / el : 0;
  char eta[32];
  cli_progress_update(&p->line, done == total, "rank %d/%d: simulated %lld/%lld samples (%.1f%%), %.1f samples/s, ETA %s",
                      p->rank, p->size, (long long)done, (long long)total, 100.0 * done / total, rate,
                      cli_duration(rate > 0 ? (total - done) / rate : -1, eta, sizeof eta));
}

int main(int argc, char **argv) {
  cli_set_program("tessera-cbed");
  enum { O_SEED = 256, O_KV, O_ALPHA, O_DF, O_CS, O_GRID, O_PAT, O_TGT, O_PROBES, O_FOV, O_THICK, O_SLICE, O_BLUR,
         O_STRUCT, O_ZONES, O_NOSHIFT, O_ATOMS, O_INT, O_FLOOR, O_HALF, O_FIRST, O_WORKERS, O_CIF, O_ZINDEX,
         O_TILT, O_ROT, O_ELEM, O_SITES, O_DMIN, O_DENS, O_PROTO, O_EXCL, O_A1, O_B2, O_SOURCE, O_COH, O_PHONONS, O_U2, O_MAXANG,
         O_DET, O_DOSE, O_PSF, O_SCAN };
  static const struct option longopts[] = {
      {"out", required_argument, NULL, 'o'}, {"samples", required_argument, NULL, 'n'},
      {"seed", required_argument, NULL, O_SEED}, {"kv", required_argument, NULL, O_KV},
      {"alpha", required_argument, NULL, O_ALPHA}, {"defocus", required_argument, NULL, O_DF},
      {"cs", required_argument, NULL, O_CS}, {"grid", required_argument, NULL, O_GRID},
      {"pattern", required_argument, NULL, O_PAT}, {"target", required_argument, NULL, O_TGT},
      {"probes", required_argument, NULL, O_PROBES}, {"fov", required_argument, NULL, O_FOV},
      {"thickness", required_argument, NULL, O_THICK}, {"slice", required_argument, NULL, O_SLICE},
      {"blur", required_argument, NULL, O_BLUR}, {"structures", required_argument, NULL, O_STRUCT},
      {"zones", required_argument, NULL, O_ZONES}, {"no-shift", no_argument, NULL, O_NOSHIFT},
      {"atoms", required_argument, NULL, O_ATOMS}, {"intensity", required_argument, NULL, O_INT},
      {"floor", required_argument, NULL, O_FLOOR}, {"cif", required_argument, NULL, O_CIF},
      {"zone-index", required_argument, NULL, O_ZINDEX}, {"tilt", required_argument, NULL, O_TILT},
      {"rotation", required_argument, NULL, O_ROT}, {"elements", required_argument, NULL, O_ELEM},
      {"sites", required_argument, NULL, O_SITES}, {"min-distance", required_argument, NULL, O_DMIN},
      {"density", required_argument, NULL, O_DENS}, {"prototypes", required_argument, NULL, O_PROTO},
      {"exclude-formulas", required_argument, NULL, O_EXCL},
      {"half", no_argument, NULL, O_HALF}, {"first", required_argument, NULL, O_FIRST},
      {"workers", required_argument, NULL, O_WORKERS}, {"quiet", no_argument, NULL, 'q'},
      {"a1", required_argument, NULL, O_A1}, {"b2", required_argument, NULL, O_B2},
      {"source", required_argument, NULL, O_SOURCE}, {"coherence-samples", required_argument, NULL, O_COH},
      {"phonons", required_argument, NULL, O_PHONONS}, {"u2", required_argument, NULL, O_U2},
      {"max-angle", required_argument, NULL, O_MAXANG}, {"detector-mrad", required_argument, NULL, O_DET},
      {"dose", required_argument, NULL, O_DOSE}, {"psf", required_argument, NULL, O_PSF},
      {"scan", required_argument, NULL, O_SCAN},
      {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}};
  tsr_cbed_opts o;
  tsr_cbed_opts_default(&o);
  const char *out = NULL;
  int64_t n = 0, first = 0;
  int quiet = 0, half = 0, workers = -1, c;
  double lo, hi;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "o:n:qhV", longopts, NULL)) != -1) {
    switch (c) {
    case 'o': out = optarg; break;
    case 'n': n = cli_parse_int64("--samples", optarg, 1, INT64_C(1) << 40); break;
    case O_SEED: o.seed = cli_parse_u64("--seed", optarg); break;
    case O_KV: parse_drawn("--kv", optarg, 1, 3000, &o.kv, &o.kv_spread); break;
    case O_ALPHA: parse_drawn("--alpha", optarg, 0.01, 200, &o.alpha_mrad, &o.alpha_spread); break;
    case O_DF: parse_drawn("--defocus", optarg, -1e6, 1e6, &o.defocus, &o.defocus_spread); break;
    case O_CS: parse_drawn("--cs", optarg, 0, 100, &o.cs_mm, &o.cs_spread); break;
    case O_A1: parse_drawn("--a1", optarg, 0, 1e5, &o.a1, &o.a1_spread); break;
    case O_B2: parse_drawn("--b2", optarg, 0, 1e6, &o.b2, &o.b2_spread); break;
    case O_SOURCE: o.source_A = cli_parse_float("--source", optarg, 0, 100); break;
    case O_COH: o.coherence_samples = cli_parse_int("--coherence-samples", optarg, 1, 1024); break;
    case O_PHONONS: o.phonons = cli_parse_int("--phonons", optarg, 0, 10000); break;
    case O_U2:
      if (tsr_cbed_u2_parse(optarg, &o) != TSR_OK) cli_usage_error("--u2: %s", tsr_last_error());
      break;
    case O_MAXANG: o.max_angle_mrad = cli_parse_float("--max-angle", optarg, 0.1, 500); break;
    case O_DET: o.det_mrad = cli_parse_float("--detector-mrad", optarg, 0, 1000); break;
    case O_DOSE: o.dose = cli_parse_float("--dose", optarg, 0, 1e15); break;
    case O_PSF: o.det_psf = cli_parse_float("--psf", optarg, 0, 64); break;
    case O_SCAN: o.scan_A = cli_parse_float("--scan", optarg, 0, 1000); break;
    case O_GRID: o.grid = cli_parse_int("--grid", optarg, 0, 4096); break;
    case O_PAT: o.pattern = cli_parse_int("--pattern", optarg, 1, 4096); break;
    case O_TGT: o.target = cli_parse_int("--target", optarg, 1, 4096); break;
    case O_PROBES: o.probes = cli_parse_int("--probes", optarg, 1, 64); break;
    case O_FOV: o.fov = cli_parse_float("--fov", optarg, 2, 1000); break;
    case O_THICK: parse_range("--thickness", optarg, &o.thickness_min, &o.thickness_max); break;
    case O_SLICE: o.slice = cli_parse_float("--slice", optarg, 0, 100); break;
    case O_BLUR: o.blur = cli_parse_float("--blur", optarg, 0, 99); break;
    case O_STRUCT: o.structures = parse_structures(optarg); break;
    case O_ZONES: o.zones = parse_zones(optarg); break;
    case O_NOSHIFT: o.shift = 0; break;
    case O_ATOMS:
      parse_range("--atoms", optarg, &lo, &hi);
      o.random_atoms_min = (int)lo, o.random_atoms_max = (int)hi;
      break;
    case O_INT:
      if (!strcmp(optarg, "log")) o.intensity = TSR_CBED_LOG;
      else if (!strcmp(optarg, "sqrt")) o.intensity = TSR_CBED_SQRT;
      else if (!strcmp(optarg, "linear")) o.intensity = TSR_CBED_LINEAR;
      else cli_usage_error("--intensity: '%s' is not log, sqrt or linear", optarg);
      break;
    case O_FLOOR: o.intensity_floor = cli_parse_float("--floor", optarg, 1e-30, 1e30); break;
    case O_CIF:
      if (strlen(optarg) >= sizeof o.cif) cli_usage_error("--cif: the list is longer than %zu characters", sizeof o.cif - 1);
      snprintf(o.cif, sizeof o.cif, "%s", optarg);
      break;
    case O_ZINDEX: o.zone_index = cli_parse_int("--zone-index", optarg, 0, 6); break;
    case O_TILT: o.tilt_mrad = cli_parse_float("--tilt", optarg, 0, 200); break;
    case O_ROT: o.rotation_deg = cli_parse_float("--rotation", optarg, 0, 360); break;
    case O_ELEM:
      parse_range("--elements", optarg, &lo, &hi);
      o.zmin = (int)lo, o.zmax = (int)hi;
      break;
    case O_SITES: o.sites = cli_parse_int("--sites", optarg, 1, 256); break;
    case O_DMIN: o.min_distance = cli_parse_float("--min-distance", optarg, 0.5, 5); break;
    case O_DENS: parse_range("--density", optarg, &o.density_min, &o.density_max); break;
    case O_PROTO:
      if (tsr_cbed_prototypes_parse(optarg, &o.prototypes) != TSR_OK) cli_usage_error("--prototypes: %s", tsr_last_error());
      break;
    case O_EXCL:
      if (strlen(optarg) >= sizeof o.exclude) cli_usage_error("--exclude-formulas: list longer than %zu characters", sizeof o.exclude - 1);
      snprintf(o.exclude, sizeof o.exclude, "%s", optarg);
      break;
    case O_HALF: half = 1; break;
    case O_FIRST: first = cli_parse_int64("--first", optarg, 0, INT64_C(1) << 50); break;
    case O_WORKERS: workers = cli_parse_int("--workers", optarg, 1, 4096); break;
    case 'q': quiet = 1; break;
    case 'h': usage(); return 0;
    case 'V': cli_version(); return 0;
    default: cli_usage_error("unknown option or missing value: %s", argv[optind - 1]);
    }
  }
  if (optind < argc) cli_usage_error("unexpected argument '%s'", argv[optind]);
  if (!out) cli_usage_error("--out is required");
  if (n == 0) cli_usage_error("--samples is required");
  if (tsr_cbed_opts_check(&o) != TSR_OK) cli_usage_error("%s", tsr_last_error());

  tsr_context_opts copts;
  tsr_context_opts_default(&copts);
  copts.ncpus = workers;
  copts.use_mpi = -1;
  copts.verbose = 0;
  tsr_context *ctx;
  if (tsr_context_create(&ctx, &copts, &argc, &argv) != TSR_OK) cli_die("%s", tsr_last_error());
  int rank = tsr_context_rank(ctx), size = tsr_context_size(ctx);
  int64_t lo_i = n * rank / size, hi_i = n * (rank + 1) / size;
  char *path = size > 1 ? cli_shard_name(out, rank) : strdup(out);
  struct prog p = {.start = cli_now(), .rank = rank, .size = size};
  cli_progress_init(&p.line, quiet || (size > 1 && rank != 0));
  tsr_status s = hi_i > lo_i ? tsr_cbed_write(ctx, &o, first + lo_i, hi_i - lo_i, half, path, on_progress, &p) : TSR_OK;
  cli_progress_clear(&p.line);
  int nw = tsr_context_nworkers(ctx);
  char msg[1100];
  snprintf(msg, sizeof msg, "%s", s == TSR_OK ? "" : tsr_last_error());
  tsr_context_destroy(ctx);
  if (s != TSR_OK) cli_die("%s", msg);
  if (!quiet) {
    char el[32];
    double t = cli_now() - p.start;
    /* CPU time of the whole process (workers, writer, runtime): samples per CPU second is the
     * throughput per core that a loaded machine does not distort as much as wall time */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    printf("rank %d/%d wrote %s: samples %lld..%lld, cbed [%d, %d, %d], potential [1, %d, %d], %s, in %s "
           "(%.3g samples/s on %d workers; %.3g CPU s per sample)\n",
           rank, size, path, (long long)(first + lo_i), (long long)(first + hi_i - 1), o.probes * o.probes,
           o.pattern, o.pattern, o.target, o.target, half ? "float16" : "float32", cli_duration(t, el, sizeof el),
           (hi_i - lo_i) / t, nw, hi_i > lo_i ? cpu / (hi_i - lo_i) : 0.0);
  }
  free(path);
  return 0;
}

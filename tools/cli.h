/* Helpers shared by the command-line programs: option values parsed with range checks (errors name
 * the option and exit with status 2), fatal errors, output folders (mkdir -p), a progress line that
 * rewrites itself on a terminal and prints every few seconds into a log, and durations for ETAs. */
#ifndef TSR_CLI_H
#define TSR_CLI_H

#include <stddef.h>
#include <stdint.h>

/* Program name used as the prefix of every message ("tessera-train"); also makes stdout line
 * buffered, so that output keeps its order when stdout and stderr go to one file. */
void cli_set_program(const char *name);
const char *cli_program(void);
/* --version: "tessera-train (Tessera) 0.1.0" (configure's PACKAGE_VERSION) on stdout. */
void cli_version(void);

/* Prints "prog: message" to stderr and exits with status 1. */
void cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Prints "prog: message" and a pointer to --help, exits with status 2 (bad command line). */
void cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* mkdir -p: creates folder `path` and its missing parents. Returns 0, or -1 with the reason (naming
 * the part that failed) in err. */
int cli_mkdirs(const char *path, char *err, size_t cap);

/* Parse `arg` given to option `opt` ("--epochs"); values outside [min, max] are errors. */
int cli_parse_int(const char *opt, const char *arg, int min, int max);
int64_t cli_parse_int64(const char *opt, const char *arg, int64_t min, int64_t max);
uint64_t cli_parse_u64(const char *opt, const char *arg);
/* Finite float in [min, max]. */
float cli_parse_float(const char *opt, const char *arg, double min, double max);
double cli_parse_double(const char *opt, const char *arg, double min, double max);

/* A rank's own file: NAME.h5 -> NAME.rankR.h5 (NAME -> NAME.rankR without .h5); malloc'd. */
char *cli_shard_name(const char *path, int rank);

/* Monotonic clock in seconds. */
double cli_now(void);
/* "45s", "12m05s", "3h07m", "2d04h"; "--" for a negative or non-finite time. Returns buf. */
const char *cli_duration(double seconds, char *buf, size_t len);

/* One status line on stderr: on a terminal it is rewritten in place at most ~10 times a second;
 * otherwise (a log file) a line is printed at most every `log_every` seconds. Quiet: nothing. */
typedef struct cli_progress {
  int tty, quiet, shown; /* shown: length of the line now on the terminal */
  double last, log_every;
} cli_progress;

void cli_progress_init(cli_progress *p, int quiet);
/* Updates the line; `force` bypasses the rate limit (use for the final state). */
void cli_progress_update(cli_progress *p, int force, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Clears the status line so that ordinary output can follow. */
void cli_progress_clear(cli_progress *p);

/* A generator's progress line ("generating N/M samples (x%), rate, ETA"): cli_samples_init, then
 * cli_samples_update as the generator's progress callback with the struct as its user pointer. */
typedef struct cli_samples {
  cli_progress line;
  double start;
} cli_samples;
void cli_samples_init(cli_samples *p, int quiet);
void cli_samples_update(void *user, int64_t done, int64_t total);

#endif

/* Option parsing, fatal errors, output folders, the progress line and durations for the command-line
 * programs. */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char *program = "tessera";

void cli_set_program(const char *name) {
  program = name;
  /* stdout line by line, also into a file or pipe: header lines then come before the progress
   * lines on stderr when both go to one log */
  setvbuf(stdout, NULL, _IOLBF, 0);
}
const char *cli_program(void) { return program; }

void cli_version(void) { printf("%s (Tessera) %s\n", program, PACKAGE_VERSION); }

void cli_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", program);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

void cli_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", program);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry '%s --help' for the options.\n", program);
  va_end(ap);
  exit(2);
}

int cli_mkdirs(const char *path, char *err, size_t cap) {
  char p[4096];
  if (!*path || strlen(path) >= sizeof p) return snprintf(err, cap, "folder name empty or too long"), -1;
  strcpy(p, path);
  for (char *s = p + 1;; s++) {
    if (*s && *s != '/') continue;
    char c = *s;
    *s = '\0';
    if (mkdir(p, 0777) != 0) {
      int e = errno;
      struct stat st;
      if (e != EEXIST) return snprintf(err, cap, "cannot create %s: %s", p, strerror(e)), -1;
      if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) return snprintf(err, cap, "%s exists and is not a folder", p), -1;
    }
    *s = c;
    if (!c) return 0;
  }
}

int64_t cli_parse_int64(const char *opt, const char *arg, int64_t min, int64_t max) {
  char *end;
  errno = 0;
  long long v = strtoll(arg, &end, 10);
  if (end == arg || *end != '\0') cli_usage_error("%s: '%s' is not an integer", opt, arg);
  if (errno == ERANGE || v < min || v > max)
    cli_usage_error("%s: %s is out of range [%" PRId64 ", %" PRId64 "]", opt, arg, min, max);
  return v;
}

int cli_parse_int(const char *opt, const char *arg, int min, int max) {
  return (int)cli_parse_int64(opt, arg, min, max);
}

uint64_t cli_parse_u64(const char *opt, const char *arg) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(arg, &end, 0);
  if (end == arg || *end != '\0' || arg[0] == '-') cli_usage_error("%s: '%s' is not a non-negative integer", opt, arg);
  if (errno == ERANGE) cli_usage_error("%s: %s does not fit in 64 bits", opt, arg);
  return v;
}

float cli_parse_float(const char *opt, const char *arg, double min, double max) {
  return (float)cli_parse_double(opt, arg, min, max);
}

double cli_parse_double(const char *opt, const char *arg, double min, double max) {
  char *end;
  errno = 0;
  double v = strtod(arg, &end);
  if (end == arg || *end != '\0' || !isfinite(v)) cli_usage_error("%s: '%s' is not a number", opt, arg);
  if (v < min || v > max) cli_usage_error("%s: %s is out of range [%g, %g]", opt, arg, min, max);
  return v;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

const char *cli_duration(double s, char *buf, size_t len) {
  if (!(s >= 0) || !isfinite(s) || s > 1e9) {
    snprintf(buf, len, "--");
    return buf;
  }
  long t = lround(s);
  if (s < 10)
    snprintf(buf, len, "%.1fs", s);
  else if (t < 60)
    snprintf(buf, len, "%lds", t);
  else if (t < 3600)
    snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
  else if (t < 86400)
    snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else
    snprintf(buf, len, "%ldd%02ldh", t / 86400, t / 3600 % 24);
  return buf;
}

void cli_progress_init(cli_progress *p, int quiet) {
  *p = (cli_progress){.tty = isatty(STDERR_FILENO), .quiet = quiet, .log_every = 5.0};
  p->last = p->tty ? -1e30 : cli_now(); /* a log's first line comes after log_every, when rates mean something */
}

void cli_progress_update(cli_progress *p, int force, const char *fmt, ...) {
  if (p->quiet) return;
  double now = cli_now();
  if (!force && now - p->last < (p->tty ? 0.1 : p->log_every)) return;
  p->last = now;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n >= (int)sizeof line) n = (int)sizeof line - 1;
  if (p->tty) {
    /* pad with spaces so a shorter line fully covers the previous one */
    fprintf(stderr, "\r%s%*s", line, p->shown > n ? p->shown - n : 0, "");
    p->shown = n;
  } else {
    fprintf(stderr, "%s\n", line);
  }
  fflush(stderr);
}

void cli_progress_clear(cli_progress *p) {
  if (p->quiet || !p->tty || p->shown == 0) return;
  fprintf(stderr, "\r%*s\r", p->shown, "");
  fflush(stderr);
  p->shown = 0;
}

char *cli_shard_name(const char *path, int rank) {
  size_t len = strlen(path), base = len > 3 && !strcmp(path + len - 3, ".h5") ? len - 3 : len;
  char *s = malloc(len + 32);
  if (!s) cli_die("out of memory");
  snprintf(s, len + 32, "%.*s.rank%d%s", (int)base, path, rank, path + base);
  return s;
}

void cli_samples_init(cli_samples *p, int quiet) {
  cli_progress_init(&p->line, quiet);
  p->start = cli_now();
}

void cli_samples_update(void *user, int64_t done, int64_t total) {
  cli_samples *p = user;
  double el = cli_now() - p->start, rate = done > 0 ? done / el : 0;
  char eta[32];
  cli_progress_update(&p->line, done == total, "generating %lld/%lld samples (%.1f%%), %.1f samples/s, ETA %s",
                      (long long)done, (long long)total, 100.0 * done / total, rate,
                      cli_duration(rate > 0 ? (total - done) / rate : -1, eta, sizeof eta));
}

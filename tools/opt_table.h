/* Options declared once, in a table: each entry gives the long name (its run-file key is the name
 * with '_' for '-'), a short letter, the type and the field it fills, the default, the range and the
 * help text. From the table come the getopt_long parsing, --help, --version, run files (--config
 * FILE.json: every option as a key; the command line overrides the file) and the effective
 * configuration as JSON text. Errors name the option (or the file and key) and exit with status 2. */
#ifndef TSR_OPT_TABLE_H
#define TSR_OPT_TABLE_H

#include <stddef.h>

enum opt_type {
  OPT_SECTION, /* a heading in --help, no option */
  OPT_STR,     /* const char * */
  OPT_INT,     /* int in [min, max] */
  OPT_INT64,   /* int64_t in [min, max] */
  OPT_U64,     /* uint64_t (0x... accepted) */
  OPT_FLOAT,   /* float in [min, max] */
  OPT_DOUBLE,  /* double in [min, max] */
  OPT_FLAG,    /* int 0/1: no value on the command line, true/false in run files */
  OPT_CHOICE,  /* int: index of the value in choices[] */
  OPT_CUSTOM,  /* parse() and text() below */
  OPT_CONFIG,  /* --config FILE: the run file (not itself a run-file key) */
  OPT_HELP,    /* --help */
  OPT_VERSION  /* --version */
};

struct opt_def {
  const char *name; /* long name; for OPT_SECTION the heading */
  char letter;      /* short option, 0 for none */
  enum opt_type type;
  size_t off;       /* offsetof(options struct, field) */
  const char *arg;  /* value name in --help ("N", "FILE") */
  const char *def;  /* default, as it would be typed; NULL: unset (numbers then hold `none`) */
  const char *help; /* one paragraph, wrapped by --help; "(default X)" is appended from def / deftext */
  double min, max;  /* numbers: range */
  double none;      /* numbers without a default: the value meaning "not given" (written as null) */
  const char *deftext; /* shown as the default when def is NULL ("StarPU's choice") */
  const char *const *choices; /* OPT_CHOICE: NULL-terminated names */
  /* OPT_CUSTOM: parse `arg` (NULL: reset to "not given"), naming `what` in errors; text() writes the
   * value as it would be typed and returns 0 when it is not given. */
  void (*parse)(void *opts, const char *what, const char *arg);
  int (*text)(const void *opts, char *buf, size_t cap);
};

struct opt_table {
  const struct opt_def *defs;
  int n;
  const char *usage; /* "--model MODEL.json --data TRAIN.h5 [options]" */
  const char *intro, *outro; /* paragraphs before and after the option list (may be NULL) */
};

/* Sets every default, then the run file's values (when --config is given), then the command line's.
 * --help and --version print and exit with 0. Positional arguments are refused. */
void opt_parse(const struct opt_table *t, void *opts, int argc, char **argv);
/* The value of every option (not --config) as a JSON object, in table order; unset ones are null.
 * Read back with --config it gives the same options. malloc'ed; NULL when out of memory. */
char *opt_effective_json(const struct opt_table *t, const void *opts);
/* Writes opt_effective_json to `path`; 0, or -1 with the reason in err. */
int opt_write_effective(const struct opt_table *t, const void *opts, const char *path, char *err, size_t cap);
void opt_help(const struct opt_table *t);

#endif

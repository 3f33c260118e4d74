/* The option-table engine (see opt_table.h): getopt_long tables built from the entries, run files
 * read with jansson (every JSON scalar goes through the same parser as the command line's text, so
 * both refuse the same values with the same words), --help wrapped from the entries' paragraphs, and
 * the effective configuration written as flat JSON with numbers that read back bitwise. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "opt_table.h"

enum { HELP_COL = 28, HELP_WIDTH = 104 };

#define FIELD(o, d, T) ((T *)((char *)(o) + (d)->off))
#define CFIELD(o, d, T) ((const T *)((const char *)(o) + (d)->off))

static int is_option(const struct opt_def *d) { return d->type != OPT_SECTION; }
static int is_setting(const struct opt_def *d) {
  return d->type != OPT_SECTION && d->type != OPT_CONFIG && d->type != OPT_HELP && d->type != OPT_VERSION;
}

/* The run-file key of an option: its name with '_' for '-'. */
static void json_key(const struct opt_def *d, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", d->name);
  for (char *p = buf; *p; p++)
    if (*p == '-') *p = '_';
}

/* Sets option d from text `arg` (NULL: back to "not given"); `what` names it in errors. */
static void apply(const struct opt_def *d, void *o, const char *what, const char *arg) {
  switch (d->type) {
  case OPT_STR: *FIELD(o, d, const char *) = arg; break;
  case OPT_INT: *FIELD(o, d, int) = arg ? cli_parse_int(what, arg, (int)d->min, (int)d->max) : (int)d->none; break;
  case OPT_INT64:
    *FIELD(o, d, int64_t) = arg ? cli_parse_int64(what, arg, (int64_t)d->min, (int64_t)d->max) : (int64_t)d->none;
    break;
  case OPT_U64: *FIELD(o, d, uint64_t) = arg ? cli_parse_u64(what, arg) : (uint64_t)d->none; break;
  case OPT_FLOAT: *FIELD(o, d, float) = arg ? cli_parse_float(what, arg, d->min, d->max) : (float)d->none; break;
  case OPT_DOUBLE: *FIELD(o, d, double) = arg ? cli_parse_double(what, arg, d->min, d->max) : d->none; break;
  case OPT_FLAG:
    if (arg && strcmp(arg, "true") && strcmp(arg, "false")) cli_usage_error("%s: '%s' (true or false)", what, arg);
    *FIELD(o, d, int) = arg && !strcmp(arg, "true");
    break;
  case OPT_CHOICE: {
    int k = 0;
    for (; arg && d->choices[k] && strcmp(d->choices[k], arg); k++) continue;
    if (arg && !d->choices[k]) {
      char list[256] = "";
      for (int i = 0; d->choices[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", d->choices[i]);
      cli_usage_error("%s: '%s' (one of %s)", what, arg, list);
    }
    *FIELD(o, d, int) = arg ? k : 0;
    break;
  }
  case OPT_CUSTOM: d->parse(o, what, arg); break;
  default: break;
  }
}

static void set_defaults(const struct opt_table *t, void *o) {
  for (int i = 0; i < t->n; i++) {
    const struct opt_def *d = &t->defs[i];
    if (!is_setting(d)) continue;
    char what[96];
    snprintf(what, sizeof what, "the default of --%s", d->name);
    apply(d, o, what, d->type == OPT_FLAG ? (d->def ? d->def : "false") : d->def);
  }
}

/* A run file: a JSON object of scalars; strings, numbers and booleans go through apply(). */
static void read_run_file(const struct opt_table *t, void *o, const char *path) {
  json_error_t err;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  if (!root) cli_usage_error("%s:%d:%d: %s", path, err.line, err.column, err.text);
  if (!json_is_object(root)) cli_usage_error("%s: a run file is a JSON object of options", path);
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    const struct opt_def *d = NULL;
    char k[128], what[4300], text[64];
    for (int i = 0; i < t->n && !d; i++) {
      json_key(&t->defs[i], k, sizeof k);
      if (is_setting(&t->defs[i]) && !strcmp(k, key)) d = &t->defs[i];
    }
    if (!d) cli_usage_error("%s: unknown key '%s' (keys are the long options with '_' for '-': --help)", path, key);
    snprintf(what, sizeof what, "%s: '%s'", path, key);
    if (json_is_null(v)) { /* what the effective configuration writes for an option not given */
      apply(d, o, what, d->type == OPT_FLAG ? "false" : d->def);
      continue;
    }
    if (json_is_boolean(v) != (d->type == OPT_FLAG))
      cli_usage_error("%s: %s", what, d->type == OPT_FLAG ? "a flag takes true or false" : "true/false is for flags only");
    if (json_is_integer(v)) snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v)) snprintf(text, sizeof text, "%.17g", json_real_value(v));
    else if (json_is_boolean(v)) snprintf(text, sizeof text, "%s", json_is_true(v) ? "true" : "false");
    else if (!json_is_string(v)) cli_usage_error("%s: a string, number, boolean or null, not an array or object", what);
    char *arg = strdup(json_is_string(v) ? json_string_value(v) : text); /* kept: string options point into it */
    if (!arg) cli_usage_error("%s: out of memory", path);
    apply(d, o, what, arg);
  }
  json_decref(root);
}

/* getopt_long's table: entry i answers 256 + i (and its letter). */
static struct option *long_options(const struct opt_table *t, char *shorts) {
  struct option *lo = calloc(t->n + 1, sizeof *lo);
  if (!lo) cli_die("out of memory");
  int k = 0, s = 0;
  for (int i = 0; i < t->n; i++) {
    const struct opt_def *d = &t->defs[i];
    if (!is_option(d)) continue;
    int takes = d->type != OPT_FLAG && d->type != OPT_HELP && d->type != OPT_VERSION;
    lo[k++] = (struct option){d->name, takes ? required_argument : no_argument, NULL, 256 + i};
    if (d->letter) {
      shorts[s++] = d->letter;
      if (takes) shorts[s++] = ':';
    }
  }
  shorts[s] = '\0';
  return lo;
}

static const struct opt_def *entry_of(const struct opt_table *t, int c) {
  if (c >= 256 && c < 256 + t->n) return &t->defs[c - 256];
  for (int i = 0; i < t->n; i++)
    if (c > 0 && t->defs[i].letter == c) return &t->defs[i];
  return NULL;
}

void opt_parse(const struct opt_table *t, void *o, int argc, char **argv) {
  char shorts[2 * 64 + 1];
  struct option *lo = long_options(t, shorts);
  set_defaults(t, o);
  /* pass 1: --help, --version and the run file, whose values the command line then overrides */
  const char *config = NULL;
  opterr = 0;
  for (int pass = 0; pass < 2; pass++) {
    optind = 0; /* glibc: a full reset */
    int c;
    while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
      const struct opt_def *d = entry_of(t, c);
      if (!d) cli_usage_error("unknown option or missing value: %s", argv[optind - 1]);
      if (pass == 0) {
        if (d->type == OPT_HELP) opt_help(t), exit(0);
        if (d->type == OPT_VERSION) cli_version(), exit(0);
        if (d->type == OPT_CONFIG) config = optarg, *FIELD(o, d, const char *) = optarg;
        continue;
      }
      char what[80];
      snprintf(what, sizeof what, "--%s", d->name);
      if (d->type == OPT_FLAG) apply(d, o, what, "true");
      else if (is_setting(d)) apply(d, o, what, optarg);
    }
    if (optind < argc) cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (pass == 0 && config) read_run_file(t, o, config);
  }
  free(lo);
}

/* Shortest %g text that reads back as the same value (float: as the same float). */
static void number_text(double v, int is_float, char *buf, size_t cap) {
  for (int p = 6; p <= 17; p++) {
    snprintf(buf, cap, "%.*g", p, v);
    double r = strtod(buf, NULL);
    if (is_float ? (float)r == (float)v : r == v) return;
  }
}

/* The value of setting d as typed on the command line; 0 when it is not given. */
static int value_text(const struct opt_def *d, const void *o, char *buf, size_t cap, int *quote) {
  *quote = 0;
  switch (d->type) {
  case OPT_STR: {
    const char *s = *CFIELD(o, d, const char *);
    if (s) snprintf(buf, cap, "%s", s), *quote = 1;
    return s != NULL;
  }
  case OPT_INT: snprintf(buf, cap, "%d", *CFIELD(o, d, int)); return d->def || *CFIELD(o, d, int) != (int)d->none;
  case OPT_INT64:
    snprintf(buf, cap, "%" PRId64, *CFIELD(o, d, int64_t));
    return d->def || *CFIELD(o, d, int64_t) != (int64_t)d->none;
  case OPT_U64: /* beyond JSON's integers: a string */
    snprintf(buf, cap, "%" PRIu64, *CFIELD(o, d, uint64_t)), *quote = *CFIELD(o, d, uint64_t) > INT64_MAX;
    return d->def || *CFIELD(o, d, uint64_t) != (uint64_t)d->none;
  case OPT_FLOAT: number_text(*CFIELD(o, d, float), 1, buf, cap); return d->def || *CFIELD(o, d, float) != (float)d->none;
  case OPT_DOUBLE: number_text(*CFIELD(o, d, double), 0, buf, cap); return d->def || *CFIELD(o, d, double) != d->none;
  case OPT_FLAG: snprintf(buf, cap, "%s", *CFIELD(o, d, int) ? "true" : "false"); return 1;
  case OPT_CHOICE: snprintf(buf, cap, "%s", d->choices[*CFIELD(o, d, int)]), *quote = 1; return 1;
  case OPT_CUSTOM: *quote = 1; return d->text(o, buf, cap);
  default: return 0;
  }
}

static void append(char **s, size_t *len, size_t *cap, const char *text) {
  size_t n = strlen(text);
  if (!*s) return;
  if (*len + n + 1 > *cap) {
    *cap = 2 * (*len + n + 1);
    char *p = realloc(*s, *cap);
    if (!p) free(*s);
    *s = p;
    if (!p) return;
  }
  memcpy(*s + *len, text, n + 1);
  *len += n;
}

char *opt_effective_json(const struct opt_table *t, const void *o) {
  size_t len = 0, cap = 1024;
  char *s = malloc(cap);
  if (s) s[0] = '\0';
  append(&s, &len, &cap, "{");
  int first = 1;
  for (int i = 0; i < t->n; i++) {
    const struct opt_def *d = &t->defs[i];
    if (!is_setting(d)) continue;
    char key[128], val[4200], line[8800];
    int quote;
    json_key(d, key, sizeof key);
    if (!value_text(d, o, val, sizeof val, &quote)) snprintf(val, sizeof val, "null"), quote = 0;
    json_t *str = quote ? json_string(val) : NULL;
    char *esc = str ? json_dumps(str, JSON_ENCODE_ANY) : NULL;
    json_decref(str);
    snprintf(line, sizeof line, "%s\n  \"%s\": %s", first ? "" : ",", key, esc ? esc : val);
    free(esc);
    append(&s, &len, &cap, line);
    first = 0;
  }
  append(&s, &len, &cap, "\n}\n");
  return s;
}

int opt_write_effective(const struct opt_table *t, const void *o, const char *path, char *err, size_t cap) {
  char *text = opt_effective_json(t, o);
  FILE *f = text ? fopen(path, "w") : NULL;
  int ok = f && fputs(text, f) >= 0;
  if (f && fclose(f) != 0) ok = 0;
  free(text);
  if (!ok) snprintf(err, cap, "%s: cannot write the effective configuration", path);
  return ok ? 0 : -1;
}

/* Prints `text` wrapped to HELP_WIDTH, lines after the first indented to HELP_COL. */
static void wrap(const char *text, int col) {
  while (*text) {
    int room = HELP_WIDTH - col, n = (int)strlen(text);
    if (n > room) {
      n = room;
      while (n > 0 && text[n] != ' ') n--;
      if (n == 0) n = room;
    }
    printf("%.*s\n", n, text);
    text += n;
    while (*text == ' ') text++;
    if (*text) printf("%*s", HELP_COL, "");
    col = HELP_COL;
  }
}

void opt_help(const struct opt_table *t) {
  printf("Usage: %s %s\n", cli_program(), t->usage);
  if (t->intro) printf("%s\n", t->intro);
  for (int i = 0; i < t->n; i++) {
    const struct opt_def *d = &t->defs[i];
    if (d->type == OPT_SECTION) {
      printf("\n%s:\n", d->name);
      continue;
    }
    char head[96], text[2048];
    int n = d->letter ? snprintf(head, sizeof head, "  -%c, --%s", d->letter, d->name)
                      : snprintf(head, sizeof head, "      --%s", d->name);
    if (d->arg) n += snprintf(head + n, sizeof head - n, " %s", d->arg);
    const char *def = d->type == OPT_FLAG ? NULL : d->def ? d->def : d->deftext;
    snprintf(text, sizeof text, "%s%s%s%s", d->help, def ? " (default " : "", def ? def : "", def ? ")" : "");
    printf("%s%*s", head, n < HELP_COL - 2 ? HELP_COL - n : 2, "");
    wrap(text, n < HELP_COL - 2 ? HELP_COL : n + 2);
  }
  if (t->outro) printf("\n%s\n", t->outro);
}

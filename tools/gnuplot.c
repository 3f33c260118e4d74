/* gnuplot scripts built in memory and run by one gnuplot process (see gnuplot.h). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "gnuplot.h"

int gp_open(struct gp *g, int width, int height) {
  g->buf = NULL, g->len = 0;
  if (!(g->f = open_memstream(&g->buf, &g->len))) return -1;
  fprintf(g->f, "set terminal pngcairo size %d,%d font 'DejaVu Sans,10' noenhanced\n", width, height);
  return 0;
}

int gp_run(struct gp *g, const char *what, char *err, size_t cap) {
  if (fclose(g->f) != 0) {
    free(g->buf);
    snprintf(err, cap, "%s: out of memory for the gnuplot script", what);
    return -1;
  }
  /* gnuplot stopping early on an error must not kill us through SIGPIPE */
  struct sigaction ign = {.sa_handler = SIG_IGN}, old;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, &old);
  FILE *p = popen("gnuplot", "w");
  int st = -1;
  if (p) {
    fwrite(g->buf, 1, g->len, p);
    st = pclose(p);
  }
  sigaction(SIGPIPE, &old, NULL);
  free(g->buf);
  if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 127) {
    snprintf(err, cap, "%s: gnuplot is not installed (Debian package gnuplot-nox)", what);
    return 1;
  }
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    snprintf(err, cap, "%s: gnuplot failed (status %d)", what, st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    return -1;
  }
  return 0;
}

const char *gp_quote(const char *s, char *out, size_t cap) {
  size_t o = 0;
  out[o++] = '\'';
  for (; *s && o + 3 < cap; s++) {
    if (*s == '\'') out[o++] = '\'';
    out[o++] = *s;
  }
  out[o++] = '\'';
  out[o] = 0;
  return out;
}

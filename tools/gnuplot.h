/* Drawing through gnuplot (Debian package gnuplot-nox): a script is written into memory, then fed to
 * one gnuplot process. Shared by tessera-trace's plots and tessera-train's prediction pictures. */
#ifndef TSR_GNUPLOT_H
#define TSR_GNUPLOT_H

#include <stddef.h>
#include <stdio.h>

struct gp {
  FILE *f; /* the script: write it with fprintf */
  char *buf;
  size_t len;
};

/* Starts a script with the PNG terminal (cairo, anti-aliased) at the given size. Returns 0, -1 on
 * failure (out of memory). */
int gp_open(struct gp *g, int width, int height);
/* Runs gnuplot on the script and frees it. Returns 0; 1 when gnuplot is not installed; -1 when it
 * failed (gnuplot printed why on stderr). `what` names the picture in the message in err. */
int gp_run(struct gp *g, const char *what, char *err, size_t cap);
/* A string as a gnuplot single-quoted literal (quotes doubled), into out. */
const char *gp_quote(const char *s, char *out, size_t cap);

#endif

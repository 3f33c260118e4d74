/* One training step's concatenations of the STEMDL example (examples/stemdl/fcdensenet.json: its 17
 * concat layers, inputs of these channels on these sides), forward and backward, float32, in slices
 * of --n samples (default 4: batch 8 in 2 slices), --slices of them, channel block --blk (16: nChw16c
 * as on AVX-512; 8; 0 plain NCHW), --reps times. The buffers are allocated once, outside
 * step(). For instruction counts that do not depend on the load or on the CPU the trainer would
 * pick a block for: make bench/bench_concat; valgrind --tool=callgrind --toggle-collect=step
 * bench/bench_concat --blk 16 (under valgrind oneDNN sees AVX2 and the trainer would pick 8). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codelets.h"

static const struct {
  int c[2], side;
} cats[] = {{{16, 8}, 64}, {{24, 8}, 64}, {{32, 8}, 32}, {{40, 8}, 32}, {{48, 8}, 16}, {{56, 8}, 16},
            {{64, 8}, 8},  {{8, 8}, 8},   {{16, 64}, 16}, {{80, 8}, 16}, {{8, 8}, 16},  {{16, 48}, 32},
            {{64, 8}, 32}, {{8, 8}, 32},  {{16, 32}, 64}, {{48, 8}, 64}, {{56, 8}, 64}};
enum { NCAT = sizeof cats / sizeof cats[0] };

static size_t padded(int c, int blk) { return blk ? (size_t)(c + blk - 1) / blk * blk : (size_t)c; }

static float *x[NCAT][2], *y[NCAT];
static struct _tsr_concat_desc desc[NCAT];

__attribute__((noinline)) void step(int slices) {
  for (int s = 0; s < slices; s++)
    for (int i = 0; i < NCAT; i++) _tsr_concat_fwd_cpu(&desc[i], (const float *const *)x[i], y[i]);
  for (int s = 0; s < slices; s++)
    for (int i = NCAT - 1; i >= 0; i--) _tsr_concat_bwd_cpu(&desc[i], y[i], x[i]);
}

int main(int argc, char **argv) {
  int n = 4, slices = 2, blk = 16, reps = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    int v = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--n")) n = v;
    else if (!strcmp(argv[i], "--slices")) slices = v;
    else if (!strcmp(argv[i], "--blk")) blk = v;
    else if (!strcmp(argv[i], "--reps")) reps = v;
    else argc = 0;
  }
  if (argc % 2 != 1 || n < 1 || slices < 1 || reps < 1 || (blk != 0 && blk != 8 && blk != 16)) {
    fprintf(stderr, "usage: bench_concat [--n N] [--slices S] [--blk 0|8|16] [--reps R]\n");
    return 2;
  }
  for (int i = 0; i < NCAT; i++) {
    size_t hw = (size_t)cats[i].side * cats[i].side;
    desc[i] = (struct _tsr_concat_desc){.n = n, .h = cats[i].side, .w = cats[i].side, .k = 2, .blk = blk};
    desc[i].c[0] = cats[i].c[0], desc[i].c[1] = cats[i].c[1];
    y[i] = calloc((size_t)n * padded(cats[i].c[0] + cats[i].c[1], blk) * hw, sizeof(float));
    for (int k = 0; k < 2; k++) x[i][k] = calloc((size_t)n * padded(cats[i].c[k], blk) * hw, sizeof(float));
    if (!y[i] || !x[i][0] || !x[i][1]) {
      fprintf(stderr, "bench_concat: out of memory\n");
      return 1;
    }
  }
  for (int r = 0; r < reps; r++) step(slices);
  printf("%d steps of %d concatenations, %d slices of %d samples, block %d\n", reps, NCAT, slices, n, blk);
  for (int i = 0; i < NCAT; i++) free(y[i]), free(x[i][0]), free(x[i][1]);
  return 0;
}

/* One 1-bit pack (sign1's _tsr_sign_pack1_cpu) of --n directions, for counting its instructions
 * under callgrind, which do not depend on the machine's load:
 *   valgrind --tool=callgrind --toggle-collect=_tsr_sign_pack1_cpu bench/bench_sign_pack --n 1000000
 * and divide the "Collected" count by n. The directions are +1 and -1 from a fixed xorshift stream,
 * with every --zero-every-th one 0 (default 0: none; a 0 costs a coin), so runs are repeatable.
 * Build: make bench/bench_sign_pack. Prints the bytes' checksum, so the pack cannot be skipped (and
 * two builds of the kernel can be compared). The vote and unpack are counted the same way on
 * bench/bench_sign_kernels (bench/README.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sign_wire.h"

int main(int argc, char **argv) {
  size_t n = 1000000, zero_every = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--n") && i + 1 < argc) n = (size_t)atoll(argv[++i]);
    else if (!strcmp(argv[i], "--zero-every") && i + 1 < argc) zero_every = (size_t)atoll(argv[++i]);
    else return fprintf(stderr, "usage: bench_sign_pack [--n N] [--zero-every K]\n"), 2;
  }
  float *x = malloc((n ? n : 1) * sizeof *x);
  uint8_t *bits = malloc(_tsr_packed_bytes(n, 1) + 1);
  if (!x || !bits) return fprintf(stderr, "bench_sign_pack: out of memory\n"), 1;
  uint64_t s = 88172645463325252u;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x[i] = zero_every && i % zero_every == zero_every - 1 ? 0.0f : (s >> 63) ? 1.0f : -1.0f;
  }
  _tsr_sign_pack1_cpu(x, n, 12345, 7, bits);
  uint64_t sum = 0;
  for (size_t b = 0; b < _tsr_packed_bytes(n, 1); b++) sum = sum * 31 + bits[b];
  printf("n %zu, zero every %zu: %zu bytes, checksum %016llx\n", n, zero_every, _tsr_packed_bytes(n, 1),
         (unsigned long long)sum);
  free(x), free(bits);
  return 0;
}

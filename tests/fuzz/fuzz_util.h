/* Shared by the libFuzzer targets: the readers take paths, so each input is written to a per-process
 * file in /tmp (tmpfs on most systems) first. */
#ifndef TSR_FUZZ_UTIL_H
#define TSR_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

static const char *fuzz_file(const uint8_t *data, size_t size, const char *ext) {
  static char path[64];
  snprintf(path, sizeof path, "/tmp/tessera-fuzz-%d%s", (int)getpid(), ext);
  FILE *f = fopen(path, "wb");
  if (!f) return NULL;
  if (size && fwrite(data, 1, size, f) != size) {
    fclose(f);
    return NULL;
  }
  fclose(f);
  return path;
}

#endif

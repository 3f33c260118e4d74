/* The temporary name of a file written whole or not at all (files.h). */
#include <stdlib.h>
#include <string.h>

#include "runtime/files.h"

char *_tsr_tmp_path(const char *path) {
  size_t len = strlen(path);
  char *tmp = malloc(len + 5);
  if (tmp) memcpy(tmp, path, len), memcpy(tmp + len, ".tmp", 5);
  return tmp;
}

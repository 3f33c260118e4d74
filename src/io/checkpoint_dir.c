/* Folders of checkpoints: dir/ckpt-<step>.h5, the newest K kept, the newest valid one found on
 * resume (invalid ones are reported and skipped), and checking a file without a trainer. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/checkpoint_int.h"
#include "runtime/error.h"

tsr_status tsr_checkpoint_verify(const char *path, tsr_checkpoint_meta *meta, int *ntensors) {
  if (!path) return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_verify: path is NULL");
  struct _tsr_ck ck;
  TSR_TRY(_tsr_ck_read(&ck, path));
  if (meta) *meta = ck.meta;
  if (ntensors) *ntensors = ck.n;
  _tsr_ck_free(&ck);
  return TSR_OK;
}

/* Step of a file named ckpt-<digits>.h5, -1 for any other name. */
static int64_t ckpt_step(const char *name) {
  if (strncmp(name, "ckpt-", 5) != 0) return -1;
  const char *p = name + 5;
  int64_t v = 0;
  int nd = 0;
  for (; *p >= '0' && *p <= '9'; p++, nd++) {
    if (nd >= 18) return -1;
    v = v * 10 + (*p - '0');
  }
  return nd > 0 && strcmp(p, ".h5") == 0 ? v : -1;
}

static int by_step_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps of the checkpoints in dir, newest first (*steps malloc'ed). */
static tsr_status list_steps(const char *dir, int64_t **steps, int *count) {
  *steps = NULL, *count = 0;
  DIR *d = opendir(dir);
  if (!d) return _tsr_error(TSR_ERR_IO, "%s: cannot open the checkpoint folder: %s", dir, strerror(errno));
  int cap = 0;
  tsr_status s = TSR_OK;
  for (struct dirent *e; (e = readdir(d));) {
    int64_t st = ckpt_step(e->d_name);
    if (st < 0) continue;
    if (*count == cap) {
      cap = cap ? 2 * cap : 16;
      int64_t *p = realloc(*steps, cap * sizeof **steps);
      if (!p) {
        s = _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", dir);
        break;
      }
      *steps = p;
    }
    (*steps)[(*count)++] = st;
  }
  closedir(d);
  if (*count) qsort(*steps, *count, sizeof **steps, by_step_desc);
  return s;
}

void _tsr_ck_dir_path(char *out, size_t cap, const char *dir, int64_t step) {
  snprintf(out, cap, "%s/ckpt-%012lld.h5", dir, (long long)step);
}

tsr_status tsr_checkpoint_find_latest(const char *dir, char *path_out, size_t cap, tsr_checkpoint_meta *meta) {
  if (!dir || !path_out || cap == 0)
    return _tsr_error(TSR_ERR_ARG, "tsr_checkpoint_find_latest: dir and path_out are required");
  int64_t *steps;
  int n;
  TSR_TRY(list_steps(dir, &steps, &n));
  int rejected = 0;
  for (int i = 0; i < n; i++) {
    _tsr_ck_dir_path(path_out, cap, dir, steps[i]);
    if (tsr_checkpoint_verify(path_out, meta, NULL) == TSR_OK) {
      free(steps);
      if (rejected) _tsr_log(0, "checkpoint: using %s", path_out);
      return TSR_OK;
    }
    _tsr_log(0, "checkpoint rejected: %s", tsr_last_error());
    rejected++;
  }
  free(steps);
  path_out[0] = '\0';
  if (rejected) return _tsr_error(TSR_ERR_FORMAT, "%s: none of its %d checkpoints is valid", dir, rejected);
  return _tsr_error(TSR_ERR_IO, "%s: no checkpoint (ckpt-<step>.h5) in this folder", dir);
}

tsr_status _tsr_ck_dir_make(const char *dir) {
  struct stat st;
  if (stat(dir, &st) == 0) return S_ISDIR(st.st_mode) ? TSR_OK : _tsr_error(TSR_ERR_IO, "%s: not a folder", dir);
  char *p = strdup(dir);
  if (!p) return _tsr_error(TSR_ERR_NOMEM, "%s: out of memory", dir);
  for (char *q = p + 1; *q; q++) {
    if (*q != '/') continue;
    *q = '\0';
    mkdir(p, 0777);
    *q = '/';
  }
  int r = mkdir(p, 0777), err = errno;
  free(p);
  if (r != 0 && err != EEXIST) return _tsr_error(TSR_ERR_IO, "%s: cannot create the folder: %s", dir, strerror(err));
  return TSR_OK;
}

tsr_status _tsr_ck_dir_prune(const char *dir, int keep) {
  int64_t *steps;
  int n;
  TSR_TRY(list_steps(dir, &steps, &n));
  char path[4096], sum[4200];
  for (int i = keep > 0 ? keep : n; i < n; i++) {
    _tsr_ck_dir_path(path, sizeof path, dir, steps[i]);
    if (remove(path) != 0) _tsr_log(1, "checkpoint: cannot remove %s: %s", path, strerror(errno));
    snprintf(sum, sizeof sum, "%s.sum", path);
    remove(sum); /* its digest (absent for checkpoints written by hand) */
  }
  free(steps);
  return TSR_OK;
}

/* One process at a time measures StarPU's bus (bus_calibration.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <starpu.h>

#include "runtime/bus_calibration.h"
#include "runtime/env.h"
#include "runtime/error.h"

/* mkdir -p */
static int make_dirs(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    int bad = mkdir(path, 0755) != 0 && errno != EEXIST;
    *p = '/';
    if (bad) return -1;
  }
  return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int measure(void) {
  struct starpu_conf conf;
  starpu_conf_init(&conf);
  conf.ncpus = 1;
  conf.sched_policy_name = "eager";
  if (starpu_init(&conf) != 0) return -1;
  starpu_shutdown();
  return 0;
}

int _tsr_bus_calibrate_once(void) {
  char dir[PATH_MAX], host[64], path[PATH_MAX + 96];
  if (_tsr_env_starpu_bus_files(dir, sizeof dir, host, sizeof host) != 0 || make_dirs(dir) != 0) return -1;
  snprintf(path, sizeof path, "%s/tessera-calibration.lock", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  int ret = -1;
  if (flock(fd, LOCK_EX) == 0) {
    snprintf(path, sizeof path, "%s/%s.config", dir, host);
    ret = access(path, F_OK) == 0 ? 0 : measure();
    if (ret == 0) _tsr_log(2, "context: StarPU's bus calibration for host '%s' is in %s", host, dir);
    flock(fd, LOCK_UN);
  }
  close(fd);
  return ret;
}

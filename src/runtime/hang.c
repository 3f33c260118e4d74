/* Hang diagnostics (hang.h). StarPU 1.3's watchdog (STARPU_WATCHDOG_TIMEOUT) calls a hook when
 * tasks are submitted and none has ended for its period; the hook here prints the stacks, and
 * STARPU_WATCHDOG_CRASH then aborts the process, so a test that hung fails in a minute with its
 * stacks in the log instead of waiting for its own time limit. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <starpu.h>

#include "runtime/env.h"
#include "runtime/hang.h"

static int dumped;
static char watch_what[64];

void _tsr_hang_dump(const char *what) {
  if (!_tsr_env_is_set("TESSERA_HANG_DUMP") || __atomic_exchange_n(&dumped, 1, __ATOMIC_SEQ_CST)) return;
#ifdef PR_SET_PTRACER
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); /* Yama: let the child attach to its parent */
#endif
  fprintf(stderr, "tessera: hang detected (%s), pid %d; its threads' stacks follow\n", what, (int)getpid());
  char cmd[256];
  snprintf(cmd, sizeof cmd,
           "timeout 60 gdb -p %d -batch -ex 'thread apply all bt' 2>/dev/null | sed -n '/^Thread\\|^#/p' >&2",
           (int)getpid());
  fflush(stderr);
  if (system(cmd) != 0) fprintf(stderr, "tessera: TESSERA_HANG_DUMP: gdb could not run\n");
}

static int watch_seconds(void) {
  int s = _tsr_env_int("TESSERA_HANG_DUMP", 0);
  return s > 1 ? s : 60;
}

void _tsr_hang_watch_prepare(void) {
  if (!_tsr_env_is_set("TESSERA_HANG_DUMP") || _tsr_env_is_set("STARPU_WATCHDOG_TIMEOUT")) return;
  char us[32];
  snprintf(us, sizeof us, "%lld", (long long)watch_seconds() * 1000000);
  setenv("STARPU_WATCHDOG_TIMEOUT", us, 1);
  setenv("STARPU_WATCHDOG_CRASH", "1", 0);
}

static void on_watchdog(void *arg) {
  (void)arg;
  _tsr_hang_dump(watch_what);
}

void _tsr_hang_watch_start(void) {
  if (!_tsr_env_is_set("TESSERA_HANG_DUMP")) return;
  snprintf(watch_what, sizeof watch_what, "no task ended for %d s", watch_seconds());
  starpu_task_watchdog_set_hook(on_watchdog, NULL);
}

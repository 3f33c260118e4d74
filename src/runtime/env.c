/* Reads the process environment (see env.h): the only getenv calls of the library. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

#include "runtime/env.h"

static const char *nonempty(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

long long _tsr_env_group_bytes(void) {
  const char *v = nonempty("TESSERA_GROUP_BYTES");
  if (!v) return 0;
  return strcmp(v, "layer") == 0 ? -1 : atoll(v);
}

int _tsr_env_skip_reduce(void) {
  const char *v = getenv("TESSERA_SKIP_ALLREDUCE");
  return v && atoi(v) != 0;
}

int _tsr_env_skip_reduce_block(int *steps) {
  const char *v = getenv("TESSERA_SKIP_ALLREDUCE");
  if (!v || strncmp(v, "alternate", 9) != 0) return 0;
  char *end;
  long k = v[9] == ':' ? strtol(v + 10, &end, 10) : 0;
  if (k <= 0 || k > 1000000000 || *end) return -1;
  *steps = (int)k;
  return 1;
}

int _tsr_env_no_nccl(void) { return getenv("TESSERA_NO_NCCL") != NULL; }

int _tsr_env_step_timeout(double *seconds) {
  const char *v = nonempty("TESSERA_STEP_TIMEOUT");
  if (v) *seconds = atof(v);
  return v != NULL;
}

int _tsr_env_slow_rank(int *rank, double *ms) {
  const char *v = nonempty("TESSERA_SLOW_RANK");
  char *end;
  if (!v) return 0;
  int jitter = strncmp(v, "jitter:", 7) == 0, slices = strncmp(v, "slices:", 7) == 0;
  long r = jitter ? -1 : slices ? -2 : strtol(v, &end, 10);
  if (jitter || slices) end = (char *)v + 6;
  else if (end == v || *end != ':' || r < 0) return -1;
  const char *m = end + 1;
  double d = strtod(m, &end);
  if (end == m || *end || !(d >= 0) || d > 60000) return -1;
  *rank = (int)r, *ms = d;
  return 1;
}

int _tsr_env_idle(void) {
  const char *v = nonempty("TESSERA_IDLE");
  if (!v) return 0;
  return strcmp(v, "yield") == 0 ? 1 : strcmp(v, "spin") == 0 ? 2 : -1;
}

int _tsr_env_mpi_progress(void) {
  const char *v = nonempty("TESSERA_MPI_PROGRESS");
  if (!v) return 0;
  return strcmp(v, "thread") == 0 ? 1 : strcmp(v, "worker") == 0 ? 2 : -1;
}

int _tsr_env_act_block(void) {
  const char *v = nonempty("TESSERA_ACT_BLOCK");
  if (!v) return 0;
  return strcmp(v, "8") == 0 ? 8 : strcmp(v, "16") == 0 ? 16 : -1;
}

int _tsr_env_int(const char *name, int fallback) {
  const char *v = nonempty(name);
  return v ? atoi(v) : fallback;
}

int _tsr_env_starpu_getbind(void) {
  const char *v = nonempty("STARPU_WORKERS_GETBIND");
  return v && atoi(v) != 0;
}

const char *_tsr_env_starpu_sched(void) { return nonempty("STARPU_SCHED"); }

int _tsr_env_launched_by_mpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") || getenv("SLURM_STEP_ID");
}

/* StarPU binds its workers before MPI can be asked, so the launcher's variables say it. */
int _tsr_env_local_ranks(void) {
  const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!v) v = getenv("MPI_LOCALNRANKS");
  if (!v) v = getenv("SLURM_NTASKS_PER_NODE");
  int n = v ? atoi(v) : 1;
  return n > 0 ? n : 1;
}

int _tsr_env_local_rank(void) {
  const char *v = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!v) v = getenv("MPI_LOCALRANKID");
  if (!v) v = getenv("SLURM_LOCALID");
  return v ? atoi(v) : 0;
}

int _tsr_env_is_set(const char *name) { return getenv(name) != NULL; }

const char *_tsr_env_memory_limit(void) {
  const char *v = getenv("TESSERA_MEMORY_LIMIT");
  return v && *v ? v : NULL;
}

const char *_tsr_env_collective(void) { return nonempty("TESSERA_COLLECTIVE"); }

int _tsr_env_node_size(void) {
  const char *v = nonempty("TESSERA_NODE_SIZE");
  int k = v ? atoi(v) : 0;
  return k > 0 ? k : 0;
}

const char *_tsr_env_link(void) { return nonempty("TESSERA_LINK"); }

int _tsr_env_sim_delay_ms(void) {
  const char *v = nonempty("TESSERA_SIM_DELAY_MS");
  int ms = v ? atoi(v) : 0;
  return ms > 0 ? ms : 0;
}

int _tsr_env_sim_fail_at(int64_t *index) {
  const char *v = nonempty("TESSERA_SIM_FAIL_AT");
  if (v) *index = atoll(v);
  return v != NULL;
}

int _tsr_env_starpu_bus_files(char *dir, size_t ndir, char *host, size_t nhost) {
  const char *models = nonempty("STARPU_PERF_MODEL_DIR"), *home = NULL;
  static const char *homes[] = {"XDG_CACHE_HOME", "STARPU_HOME", "HOME", "TMPDIR", "TEMP", "TMP"};
  for (size_t i = 0; !models && !home && i < sizeof homes / sizeof *homes; i++) home = getenv(homes[i]);
  int n = models ? snprintf(dir, ndir, "%s/bus", models)
                 : snprintf(dir, ndir, "%s/.starpu/sampling/bus", home ? home : "/tmp");
  if (n < 0 || (size_t)n >= ndir || nhost < 2) return -1;
  const char *forced = nonempty("STARPU_HOSTNAME");
  if (forced) {
    n = snprintf(host, nhost, "%s", forced);
    return n < 0 || (size_t)n >= nhost ? -1 : 0;
  }
  if (gethostname(host, nhost - 1) != 0) return -1;
  host[nhost - 1] = 0;
  char *dot = strchr(host, '.');
  if (dot) *dot = 0;
  return 0;
}

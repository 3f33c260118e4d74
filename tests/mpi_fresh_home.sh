#!/usr/bin/env bash
# Ranks started together on a machine whose StarPU has not measured its bus yet (an empty
# STARPU_HOME): exactly one process measures it (StarPU prints "No performance model for the bus"
# once, not once per rank) and every rank trains (runtime/bus_calibration.c). Without the lock all
# four ranks measured at once in 3 of 3 tries here, and ranks reading each other's half-written files
# aborted StarPU (check_bus_affinity_file) now and then; the check of the count catches the missing
# lock even when no rank happens to abort. Every run is bounded by `timeout 300`.
set -u
. "$(dirname "$0")/script_common.sh"
bin=${TESSERA_BUILDDIR:-.}/tests/mpi_train
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
test_tmp home
for try in 1 2; do
  export STARPU_HOME=$tmp/home$try STARPU_SILENT=0
  if timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 -x STARPU_HOME -x STARPU_SILENT \
    "$bin" --batch 4 --steps 2 --out "$tmp/o$try" >"$tmp/log$try" 2>&1; then ok "try $try: 4 ranks on an empty STARPU_HOME trained"
  else ko "try $try: 4 ranks on an empty STARPU_HOME trained"; cat "$tmp/log$try"; fi
  n=$(grep -c 'No performance model for the bus' "$tmp/log$try")
  if [ "$n" = 1 ]; then ok "try $try: one process measured the bus"
  else ko "try $try: one process measured the bus (StarPU said so $n times)"; fi
  if ls "$STARPU_HOME"/.starpu/sampling/bus/*.config >/dev/null 2>&1; then
    ok "try $try: the calibration files exist"
  else ko "try $try: the calibration files exist"; fi
done
echo "mpi_fresh_home: $pass passed, $fail failed"
[ "$fail" = 0 ]

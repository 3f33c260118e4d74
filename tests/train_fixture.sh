# Sourced by the checkpoint, kill and signal scripts: the programs under test, PASS/FAIL counters,
# a temporary folder (STARPU_HOME inside) removed on exit, a small model with batch norm and dropout
# and a data set for it, the comparison of a step log with the reference run's, waits for progress
# and for processes to end, and the helpers that find mpirun's ranks.
B=${TESSERA_BUILDDIR:-.}
train=$B/tessera-train gen=$B/tessera-datagen
. "$(dirname "${BASH_SOURCE[0]}")/script_common.sh"
fixture_done() { tests_done; }

# fixture_setup NAME SAMPLES: $tmp, $tmp/model.json and $tmp/data.h5 (16x16 samples)
fixture_setup() {
  test_tmp "$1"
  export STARPU_HOME=$tmp/starpu STARPU_SILENT=1
  cat >"$tmp/model.json" <<'JSON'
{"name": "kill", "layers": [
  {"name": "in", "type": "input", "shape": [1, 16, 16]},
  {"name": "c1", "type": "conv2d", "out_channels": 6, "kernel": 3, "padding": 1},
  {"name": "bn1", "type": "batchnorm"},
  {"name": "r1", "type": "relu"},
  {"name": "d1", "type": "dropout", "p": 0.1},
  {"name": "c2", "type": "conv2d", "out_channels": 1, "kernel": 3, "padding": 1}],
 "loss": {"type": "mse"}, "optimizer": {"type": "adam", "lr": 0.003}}
JSON
  "$gen" --out "$tmp/data.h5" --samples "$2" --size 16 --seed 3 -q || { echo "FAIL: tessera-datagen"; exit 1; }
}

# Compares a step log with $tmp/ref.csv: every row (repeated ones too) equal, every step present.
same_as_ref() {
  awk -F, 'NR == FNR { if (FNR > 1) ref[$1] = $3; next }
           FNR > 1 { seen[$1] = 1; if (!($1 in ref) || ref[$1] != $3) { print "step " $1 ": " $3 " vs " ref[$1]; bad = 1 } }
           END { for (s in ref) if (!(s in seen)) { print "step " s " missing"; bad = 1 } exit bad }' "$tmp/ref.csv" "$1"
}

# Waits end at events (rows logged, processes gone), never after a fixed time: HANG_S only bounds
# a hang, far beyond any run here (seconds), and is no measure of speed.
HANG_S=${TSR_TEST_HANG_S:-300}
rows() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }
# wait_rows FILE N PID: until FILE has N lines (0), or PID has ended or HANG_S passed (1)
wait_rows() {
  local end=$((SECONDS + HANG_S))
  until [ "$(rows "$1")" -ge "$2" ]; do
    kill -0 "$3" 2>/dev/null && [ $SECONDS -lt $end ] || return 1
    sleep 0.01
  done
}
# wait_gone PID...: until none of them runs (0) or HANG_S passed (1)
wait_gone() {
  local end=$((SECONDS + HANG_S))
  while kill -0 "$@" 2>/dev/null; do
    [ $SECONDS -lt $end ] || return 1
    sleep 0.1
  done
}

# ---- under mpirun ----
need_mpirun() { command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }; }
# StarPU measures the bus once per STARPU_HOME; two ranks measuring at once have read each other's
# half-written files (a crash in _starpu_load_bus_performance_files): one rank measures first.
# warm_bus TRAIN_ARGS...
warm_bus() {
  "$train" "$@" --epochs 1 --checkpoint-dir "$tmp/warm" -q >"$tmp/warm.log" 2>&1 ||
    { cat "$tmp/warm.log"; echo "FAIL: 1-rank run"; exit 1; }
}
# the ranks (libtool may run .libs/lt-tessera-train), not mpirun nor a wrapper shell
ranks_of() { pgrep -f "^[^ ]*tessera-train .*--checkpoint-dir $1 " | sort -n; }
rank_pid() { # folder rank
  local p
  for p in $(ranks_of "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
# wait_rank FOLDER RANK LAUNCHER: prints the rank's pid once it runs (1: the launcher ended first)
wait_rank() {
  local p end=$((SECONDS + HANG_S))
  until p=$(rank_pid "$1" "$2") && [ -n "$p" ]; do
    kill -0 "$3" 2>/dev/null && [ $SECONDS -lt $end ] || return 1
    sleep 0.02
  done
  echo "$p"
}
# wait_no_ranks FOLDER: until no rank of that run is left (0) or HANG_S passed (1)
wait_no_ranks() {
  local end=$((SECONDS + HANG_S))
  while [ -n "$(ranks_of "$1")" ]; do
    [ $SECONDS -lt $end ] || return 1
    sleep 0.1
  done
}

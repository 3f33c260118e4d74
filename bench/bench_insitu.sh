#!/usr/bin/env bash
# In-situ training against training from a file simulated beforehand, for one wall-clock budget:
# the validation loss each run reaches within BUDGET seconds of training (epochs of EPOCH_STEPS
# steps, validation on the same pre-simulated VAL samples after each epoch, inside the budget). The
# file run is read twice: with the time to simulate its FILE samples not counted (the whole budget
# trains), and counted (the budget minus that time trains). SLOW_MS makes every in-situ simulation
# sleep that long too (TESSERA_SIM_DELAY_MS; a sleep occupies a worker as a dearer simulator would,
# with the same samples) and the counted file time grows by FILE x SLOW_MS / workers. Runs of a
# round alternate, rounds repeat; the load is printed with every row. Crystals sit at a fixed origin
# ("shift": false), so a small model learns within a minute: targets differ by structure and zone.
# Usage: bench/bench_insitu.sh [BUILD_DIR]
#   (env: BUDGET=40 FILE=256 VAL=64 BATCH=8 EPOCH_STEPS=32 REUSES="1 4 16" SLOWS="0 60" ROUNDS=1 WORKERS=2)
set -euo pipefail
build=${1:-build}
BUDGET=${BUDGET:-40} FILE=${FILE:-256} VAL=${VAL:-64} BATCH=${BATCH:-8} EPOCH_STEPS=${EPOCH_STEPS:-32}
REUSES=${REUSES:-1 4 16} SLOWS=${SLOWS:-0 60} ROUNDS=${ROUNDS:-1} WORKERS=${WORKERS:-2}
out=$(mktemp -d /tmp/tessera-bench-insitu.XXXXXX)
export STARPU_HOME=$out/starpu STARPU_SILENT=1
cat >"$out/cbed.json" <<'JSON'
{"grid": 32, "pattern": 32, "target": 32, "probes": 2, "fov": 12, "thickness": [8, 24], "shift": false, "seed": 1}
JSON
cat >"$out/model.json" <<'JSON'
{"name": "insitu", "layers": [
  {"name": "in", "type": "input", "shape": [4, 32, 32]},
  {"name": "c1", "type": "conv2d", "out_channels": 16, "kernel": 3, "padding": 1},
  {"name": "r1", "type": "relu"},
  {"name": "c2", "type": "conv2d", "out_channels": 16, "kernel": 3, "padding": 1},
  {"name": "r2", "type": "relu"},
  {"name": "c3", "type": "conv2d", "out_channels": 1, "kernel": 3, "padding": 1}],
 "loss": {"type": "mse"}, "optimizer": {"type": "adam", "lr": 0.003}}
JSON
cbed=(--grid 32 --pattern 32 --target 32 --probes 2 --fov 12 --thickness 8:24 --no-shift --workers "$WORKERS" -q)
"$build/tessera-cbed" "${cbed[@]}" --seed 99 -n "$VAL" -o "$out/val.h5"
t0=$(date +%s.%N)
"$build/tessera-cbed" "${cbed[@]}" --seed 1 -n "$FILE" -o "$out/train.h5" # samples 0..FILE-1 of the in-situ stream
sim_s=$(echo "$(date +%s.%N) - $t0" | bc)
echo "simulating the $FILE-sample file took $sim_s s on $WORKERS workers; load: $(uptime)"
common=(--model "$out/model.json" --val "$out/val.h5" --batch "$BATCH" --epochs 100000 --workers "$WORKERS" --seed 3 -q)

# best_within LOG SECONDS: the validation loss of the last epoch that ended within SECONDS
best_within() { awk -F, -v t="$2" 'NR > 1 && $6 <= t { v = $4; s = $2 } END { printf "%s %s\n", (v == "" ? "-" : v), (s == "" ? 0 : s) }' "$1"; }
run() { # NAME ENV... -- OPTIONS...
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  rm -f "$out/$name.csv"
  env "${envs[@]}" timeout -s KILL $((BUDGET + 15)) "$build/tessera-train" "${common[@]}" --log "$out/$name.csv" "$@" \
    >"$out/$name.out" 2>&1 || true
}
printf '%-5s %-26s %8s %8s %12s  %s\n' round run slow_ms steps val_loss load
for round in $(seq 1 "$ROUNDS"); do
  for slow in $SLOWS; do
    run file TESSERA_SIM_DELAY_MS=0 -- --data "$out/train.h5"
    load=$(awk '{print $1}' /proc/loadavg)
    read -r v s < <(best_within "$out/file.csv" "$BUDGET")
    printf '%-5s %-26s %8s %8s %12s  %s\n' "$round" "file $FILE, sim not counted" "$slow" "$s" "$v" "$load"
    counted=$(echo "$BUDGET - $sim_s - $FILE * $slow / 1000 / $WORKERS" | bc -l)
    read -r v s < <(best_within "$out/file.csv" "$counted")
    printf '%-5s %-26s %8s %8s %12s  %s\n' "$round" "file $FILE, sim counted" "$slow" "$s" "$v" "$load"
    for r in $REUSES; do
      run "insitu$r" TESSERA_SIM_DELAY_MS="$slow" -- --simulate "$out/cbed.json" --pool $((4 * BATCH)) --reuse "$r" \
        --epoch-steps "$EPOCH_STEPS"
      read -r v s < <(best_within "$out/insitu$r.csv" "$BUDGET")
      printf '%-5s %-26s %8s %8s %12s  %s\n' "$round" "in situ, reuse $r" "$slow" "$s" "$v" "$(awk '{print $1}' /proc/loadavg)"
    done
  done
done
echo "logs in $out"

#!/usr/bin/env bash
# In-situ training against training from files simulated beforehand, for one wall-clock budget, on
# a task where the number of distinct samples matters: crystals at a random in-plane origin per
# sample ("shift" on), so the validation samples are not in any file, and a model (267k parameters,
# encoder / dense / decoder) large enough to overfit a file of FILES samples within the budget.
# Targets are standardised (--standardize-targets; in situ the statistics come from the simulator's
# samples 0..STATS-1, --target-stats, and so do the input statistics, --input-stats; a file run takes
# both from its FILE samples; the start-up simulation of the STATS samples is not in the budget).
# In situ the pool holds POOL samples (default 256: as diverse a window as the largest file; a pool
# of 32 learned far less per step, see bench/README.md). Every run trains for BUDGET seconds;
# validation on the same VAL
# pre-simulated samples after each epoch (the file's FILE / BATCH steps, in situ EPOCH_STEPS), inside
# the budget. Printed per run: steps within the budget, validation MSE of the last epoch within it and
# the best one, and the last training loss, all relative to the mean-image baseline (the MSE of
# predicting the mean validation target: the same denominator for every row), the nearest-neighbour
# baseline among the file's inputs, and the load. Each file run is read twice: its simulation time
# not counted (the whole budget trains) and counted (the budget minus FILE samples' simulation).
# SLOWS makes every in-situ simulation sleep that long (TESSERA_SIM_DELAY_MS; a sleep occupies a
# worker as a dearer simulator would, with the same samples), which raises the simulation-to-training
# cost ratio rho = c_s / c_t (worker-seconds per sample simulated / trained; c_s from simulating the
# largest file plus the sleep, c_t from the largest file's run); the counted file time grows by
# FILE x SLOW_MS / workers. In-situ rows print the steps predicted by 1 / (1 + rho / R) of the
# largest file's steps beside the measured ones. The file runs do not depend on SLOW_MS and run once
# per round. Usage: bench/bench_insitu.sh [BUILD_DIR]
#   (env: BUDGET=40 FILES="64 256" VAL=64 BATCH=8 EPOCH_STEPS=32 POOL=256 STATS=64 REUSES="1 4 16"
#    SLOWS="0 60" ROUNDS=1 WORKERS=2)
set -euo pipefail
build=${1:-build}
BUDGET=${BUDGET:-40} FILES=${FILES:-64 256} VAL=${VAL:-64} BATCH=${BATCH:-8} EPOCH_STEPS=${EPOCH_STEPS:-32}
POOL=${POOL:-256} STATS=${STATS:-64} REUSES=${REUSES:-1 4 16} SLOWS=${SLOWS:-0 60} ROUNDS=${ROUNDS:-1} WORKERS=${WORKERS:-2}
out=$(mktemp -d /tmp/tessera-bench-insitu.XXXXXX)
export STARPU_HOME=$out/starpu STARPU_SILENT=1
cat >"$out/cbed.json" <<'JSON'
{"grid": 32, "pattern": 32, "target": 32, "probes": 2, "fov": 12, "thickness": [8, 24], "shift": true, "seed": 1}
JSON
# 4 patterns of 32 x 32 -> two conv + pool stages -> 128 features -> transposed convolutions -> 32 x 32
cat >"$out/model.json" <<'JSON'
{"name": "insitu", "layers": [
  {"name": "in", "type": "input", "shape": [4, 32, 32]},
  {"name": "c1", "type": "conv2d", "out_channels": 16, "kernel": 3, "padding": 1},
  {"name": "r1", "type": "relu"},
  {"name": "p1", "type": "maxpool2d", "kernel": 2, "stride": 2},
  {"name": "c2", "type": "conv2d", "out_channels": 16, "kernel": 3, "padding": 1},
  {"name": "r2", "type": "relu"},
  {"name": "p2", "type": "maxpool2d", "kernel": 2, "stride": 2},
  {"name": "f", "type": "flatten"},
  {"name": "d1", "type": "dense", "out_features": 128},
  {"name": "r3", "type": "relu"},
  {"name": "t1", "type": "conv_transpose2d", "out_channels": 16, "kernel": 8, "stride": 8},
  {"name": "r4", "type": "relu"},
  {"name": "t2", "type": "conv_transpose2d", "out_channels": 16, "kernel": 2, "stride": 2},
  {"name": "r5", "type": "relu"},
  {"name": "t3", "type": "conv_transpose2d", "out_channels": 16, "kernel": 2, "stride": 2},
  {"name": "r6", "type": "relu"},
  {"name": "c3", "type": "conv2d", "out_channels": 1, "kernel": 3, "padding": 1}],
 "loss": {"type": "mse"}, "optimizer": {"type": "adam", "lr": 0.001}}
JSON
cbed=(--grid 32 --pattern 32 --target 32 --probes 2 --fov 12 --thickness 8:24 --workers "$WORKERS" -q)
"$build/tessera-cbed" "${cbed[@]}" --seed 99 -n "$VAL" -o "$out/val.h5"
declare -A sim_s
big=0
for f in $FILES; do
  t0=$(date +%s.%N)
  "$build/tessera-cbed" "${cbed[@]}" --seed 1 -n "$f" -o "$out/train$f.h5" # samples 0..f-1 of the in-situ stream
  sim_s[$f]=$(echo "$(date +%s.%N) - $t0" | bc)
  echo "simulating the $f-sample file took ${sim_s[$f]} s on $WORKERS workers; load: $(uptime)"
  [ "$f" -gt "$big" ] && big=$f
done
common=(--model "$out/model.json" --val "$out/val.h5" --batch "$BATCH" --epochs 100000 --workers "$WORKERS" --seed 3
  --standardize-targets -q)

# within LOG SECONDS: steps, last and best validation MSE, last training loss (target units) and the
# nearest-neighbour MSE, over the epochs that ended within SECONDS
within() {
  awk -F, -v t="$2" 'NR > 1 && $6 <= t { s = $2; v = $7; tr = $3; nn = $17; if (b == "" || $7 < b) b = $7 }
    END { if (s == "") print 0, "nan", "nan", "nan", "nan"; else print s, v, b, tr, nn }' "$1"
}
run() { # NAME ENV... -- OPTIONS...
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  rm -f "$out/$name.csv"
  (env "${envs[@]}" timeout -s KILL $((BUDGET + 15)) "$build/tessera-train" "${common[@]}" --log "$out/$name.csv" "$@" \
    >"$out/$name.out" 2>&1; true) 2>/dev/null || true # the budget ends the run: the shell's "Killed" is not news
}
rel() { awk -v x="$1" -v b="$2" 'BEGIN { if (x == "nan" || x == "") print "-"; else printf "%.3f", x / b }'; }
fmt='%-5s %-26s %7s %6s %7s %7s %7s %7s %7s  %s\n'
for round in $(seq 1 "$ROUNDS"); do
  declare -A load
  for f in $FILES; do
    run "file$f" TESSERA_SIM_DELAY_MS=0 -- --data "$out/train$f.h5"
    load[file$f]=$(awk '{print $1}' /proc/loadavg)
  done
  for slow in $SLOWS; do
    for r in $REUSES; do
      run "insitu$r-$slow" TESSERA_SIM_DELAY_MS="$slow" -- --simulate "$out/cbed.json" --pool "$POOL" --reuse "$r" \
        --epoch-steps "$EPOCH_STEPS" --input-stats "$STATS" --target-stats "$STATS"
      load[insitu$r-$slow]=$(awk '{print $1}' /proc/loadavg)
    done
  done
  # the mean-image baseline: predicting the mean validation target (an in-situ log's mean_mse)
  first=$(ls "$out"/insitu*.csv | head -n 1)
  base=$(awk -F, 'NR == 2 { print $12 }' "$first")
  read -r fsteps _ < <(within "$out/file$big.csv" "$BUDGET")
  ct=$(echo "$BUDGET * $WORKERS / ($fsteps * $BATCH)" | bc -l)
  echo "round $round: mean-image baseline (mean validation target) MSE $base; training c_t = $ct worker-s/sample" \
    "(file of $big); relative figures below are MSE / baseline"
  printf "$fmt" round run slow_ms steps pred val_last val_best train nn load
  for slow in $SLOWS; do
    cs=$(echo "${sim_s[$big]} * $WORKERS / $big + $slow / 1000" | bc -l)
    rho=$(echo "$cs / $ct" | bc -l)
    printf 'slow %s ms: c_s = %.4f worker-s/sample, rho = %.1f\n' "$slow" "$cs" "$rho"
    for f in $FILES; do
      read -r s v b tr nn < <(within "$out/file$f.csv" "$BUDGET")
      printf "$fmt" "$round" "file $f, sim not counted" "$slow" "$s" - "$(rel "$v" "$base")" "$(rel "$b" "$base")" \
        "$(rel "$tr" "$base")" "$(rel "$nn" "$base")" "${load[file$f]}"
      counted=$(echo "$BUDGET - ${sim_s[$f]} - $f * $slow / 1000 / $WORKERS" | bc -l)
      read -r s v b tr nn < <(within "$out/file$f.csv" "$counted")
      printf "$fmt" "$round" "file $f, sim counted" "$slow" "$s" - "$(rel "$v" "$base")" "$(rel "$b" "$base")" \
        "$(rel "$tr" "$base")" "$(rel "$nn" "$base")" "${load[file$f]}"
    done
    for r in $REUSES; do
      read -r s v b tr _ < <(within "$out/insitu$r-$slow.csv" "$BUDGET")
      pred=$(awk -v n="$fsteps" -v rho="$rho" -v r="$r" 'BEGIN { printf "%d", n / (1 + rho / r) }')
      printf "$fmt" "$round" "in situ, reuse $r" "$slow" "$s" "$pred" "$(rel "$v" "$base")" "$(rel "$b" "$base")" \
        "$(rel "$tr" "$base")" - "${load[insitu$r-$slow]}"
    done
  done
done
echo "logs in $out"

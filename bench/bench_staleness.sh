#!/usr/bin/env bash
# Stale-synchronous training against synchronous training (tessera-train --staleness S) on the STEMDL
# example (examples/stemdl/fcdensenet.json, tessera-datagen phase-object data) at 2 ranks, with the
# ranks artificially slowed by TESSERA_SLOW_RANK (a benchmark aid: a sleep task per training step,
# which changes no value): "slow" makes the last rank sleep MS ms in every step (a persistent straggler),
# "jitter" makes every rank sleep MS ms in about half of its steps, chosen independently per rank
# (transient stragglers), and "none" slows nobody. Prints, per mode and staleness, the last epoch's
# samples/s (of the whole run: every rank's samples), train and validation loss and the elapsed time.
# Synchronous training waits at every step for the slowest rank; with staleness S a rank waits only
# for the reduction of S + 1 steps back, so transient delays on different ranks overlap, while a
# persistent straggler still sets the pace (S steps of slack, once).
# At one rank (RANKS=1, run without mpirun) there is no reduction to wait for, but S still delays each
# update by S steps, so step k + 1's forward need not wait for step k's update: compare with
# bench/bench_async_slices.sh, which lets the slices of one rank update without waiting for each other.
# Usage: bench/bench_staleness.sh [BUILD_DIR]
#   (env: MODES="none slow jitter" STALENESS="0 1 2" MS=100 SAMPLES=640 EPOCHS=1 BATCH=4 RANKS=2 WORKERS=1)
set -euo pipefail
build=${1:-build}
MODES=${MODES:-none slow jitter} STALENESS=${STALENESS:-0 1 2} MS=${MS:-100} SAMPLES=${SAMPLES:-640}
EPOCHS=${EPOCHS:-1} BATCH=${BATCH:-4} RANKS=${RANKS:-2} WORKERS=${WORKERS:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "$build" && pwd)
out=$(mktemp -d /tmp/tessera-bench-ssp.XXXXXX)
trap 'rm -rf "$out"' EXIT
export STARPU_HOME=$out/starpu STARPU_SILENT=1
"$bin/tessera-datagen" --out "$out/train.h5" --samples "$SAMPLES" --size 64 --seed 3 -q
echo "load before: $(uptime)"
printf '%-7s %3s %10s %11s %11s %9s\n' mode S samples/s train_loss val_loss elapsed
for mode in $MODES; do
  case $mode in
    none) slow= ;;
    slow) slow=$((RANKS - 1)):$MS ;; # the last rank
    jitter) slow=jitter:$MS ;;
    *) echo "unknown mode $mode (none, slow, jitter)" >&2; exit 2 ;;
  esac
  for s in $STALENESS; do
    launch=(mpirun --allow-run-as-root --oversubscribe -np "$RANKS" -x STARPU_HOME -x STARPU_SILENT -x TESSERA_SLOW_RANK)
    [ "$RANKS" = 1 ] && launch=() # one rank needs no launcher (under mpirun -np 1 with 2 workers, steps stall at times)
    TESSERA_SLOW_RANK=$slow timeout 1200 "${launch[@]}" "$bin/tessera-train" --model "$root/examples/stemdl/fcdensenet.json" \
      --data "$out/train.h5" --epochs "$EPOCHS" --batch "$BATCH" --workers "$WORKERS" --seed 1 --staleness "$s" \
      >"$out/run.log" 2>&1 || { cat "$out/run.log"; exit 1; }
    grep "^epoch $EPOCHS/$EPOCHS:" "$out/run.log" | sed -E 's/.*train loss ([^,]+), val loss ([^,]+), ([0-9.]+) samples\/s, elapsed ([^ ]+).*/\1 \2 \3 \4/' |
      { read -r tl vl sps el; printf '%-7s %3s %10s %11s %11s %9s\n' "$mode" "$s" "$sps" "$tl" "$vl" "$el"; }
  done
done
echo "load after: $(uptime)"

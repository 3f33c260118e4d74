#!/usr/bin/env bash
# Asynchronous slices (tessera-train --async-slices) against synchronous training at one rank: 2 CPU
# workers, 2 slices, on tessera-datagen phase-object data (64 x 64) with a small plain convolutional
# network (written below), or with MODEL, a model file taking [1, 64, 64] inputs (the STEMDL example:
# MODEL=examples/stemdl/fcdensenet.json; its batch norms then normalise each slice with the slice's
# own statistics under --async-slices, the whole batch's under synchronous training). The slowing is TESSERA_SLOW_RANK's sleep task (it changes no value):
# "slow" (0:MS) makes slice 0 sleep MS ms in every step (a persistent straggler), "slices" (slices:MS)
# makes one slice of every step sleep, chosen by a hash of the step (transient stragglers), "jitter"
# (jitter:MS) makes slice 0 sleep in about half of the steps, "none" slows nothing. Prints per mode the
# last epoch's samples/s, train and validation loss and the elapsed time. Synchronous training joins
# the slices at every step (each layer's update waits for both slices' backward), so every step costs
# a sleep; asynchronous slices update the shared parameters each on its own, so while one slice
# sleeps the other goes on (up to the host's window of 2 steps ahead). A persistent straggler still
# sets the pace: the loss sum of each step needs every slice.
# Usage: bench/bench_async_slices.sh [BUILD_DIR]
#   (env: MODES="none slow slices" MS=50 SAMPLES=640 EPOCHS=2 BATCH=8 WORKERS=2 SLICES=2 MODEL=)
set -euo pipefail
build=${1:-build}
MODES=${MODES:-none slow slices} MS=${MS:-50} SAMPLES=${SAMPLES:-640} EPOCHS=${EPOCHS:-2} BATCH=${BATCH:-8}
WORKERS=${WORKERS:-2} SLICES=${SLICES:-2} MODEL=${MODEL:-}
[ -z "$MODEL" ] || MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
bin=$(cd "$build" && pwd)
out=$(mktemp -d /tmp/tessera-bench-async.XXXXXX)
trap 'rm -rf "$out"' EXIT
export STARPU_HOME=$out/starpu STARPU_SILENT=1
"$bin/tessera-datagen" --out "$out/train.h5" --samples "$SAMPLES" --size 64 --seed 3 -q
conv() { printf '{"name": "%s", "type": "conv2d", "input": "%s", "out_channels": %s, "kernel": 3, "padding": 1}' "$1" "$2" "$3"; }
relu() { printf '{"name": "%s", "type": "relu", "input": "%s"}' "$1" "$2"; }
[ -n "$MODEL" ] || cat >"$out/model.json" <<EOF
{"name": "plain-fcn", "layers": [
 {"name": "input", "type": "input", "shape": [1, 64, 64]},
 $(conv c1 input 16), $(relu r1 c1), $(conv c2 r1 16), $(relu r2 c2), $(conv c3 r2 16), $(relu r3 c3),
 $(conv out r3 1)],
 "output": "out", "loss": {"type": "mse"}}
EOF
model=${MODEL:-$out/model.json}
echo "model: ${MODEL:-plain 4-layer FCN}; samples $SAMPLES, epochs $EPOCHS, batch $BATCH, workers $WORKERS, slices $SLICES"
echo "load before: $(uptime)"
printf '%-7s %-6s %10s %11s %11s %9s\n' mode update samples/s train_loss val_loss elapsed
for mode in $MODES; do
  case $mode in
    none) slow= ;;
    slow) slow=0:$MS ;;
    slices) slow=slices:$MS ;;
    jitter) slow=jitter:$MS ;;
    *) echo "unknown mode $mode (none, slow, slices, jitter)" >&2; exit 2 ;;
  esac
  for upd in sync async; do
    flag=
    [ "$upd" = async ] && flag=--async-slices
    TESSERA_SLOW_RANK=$slow timeout 1200 "$bin/tessera-train" --model "$model" --data "$out/train.h5" \
      --epochs "$EPOCHS" --batch "$BATCH" --workers "$WORKERS" --slices "$SLICES" --seed 1 $flag \
      >"$out/run.log" 2>&1 || { cat "$out/run.log"; exit 1; }
    grep "^epoch $EPOCHS/$EPOCHS:" "$out/run.log" | sed -E 's/.*train loss ([^,]+), val loss ([^,]+), ([0-9.]+) samples\/s, elapsed ([^ ]+).*/\1 \2 \3 \4/' |
      { read -r tl vl sps el; printf '%-7s %-6s %10s %11s %11s %9s\n' "$mode" "$upd" "$sps" "$tl" "$vl" "$el"; }
  done
done
echo "load after: $(uptime)"

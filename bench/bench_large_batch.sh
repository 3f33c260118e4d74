#!/usr/bin/env bash
# Large global batches: the STEMDL FCDenseNet example trained with SGD, Adam, SGD+LARC and LAMB at
# RANKS x BATCH samples per step (under mpirun when RANKS > 1), linear learning-rate scaling with
# warm-up, the same data, seed and epochs for each; prints the validation loss after every epoch and
# the final one. The optimizers alternate within each repeat so that load on a shared machine hits
# them alike. Learning rates are the base rates for one rank (scaled by RANKS).
# Usage: bench/bench_large_batch.sh [BUILD_DIR]
#   (env: RANKS=4 BATCH=64 TRAIN=4096 VAL=512 EPOCHS=6 WARMUP=20 REPS=1 WORKERS=
#         OPTIMIZERS="sgd adam sgd-larc lamb" LR_SGD=0.02 LR_ADAM=0.001 LR_LARC=0.02 LR_LAMB=0.002)
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
RANKS=${RANKS:-4} BATCH=${BATCH:-64} TRAIN=${TRAIN:-4096} VAL=${VAL:-512} EPOCHS=${EPOCHS:-6}
WARMUP=${WARMUP:-20} REPS=${REPS:-1} OPTIMIZERS=${OPTIMIZERS:-sgd adam sgd-larc lamb}
out=$(mktemp -d /tmp/tessera-bench-large-batch.XXXXXX)
trap 'rm -rf "$out"' EXIT
"$build/tessera-datagen" -q -o "$out/train.h5" -n "$TRAIN" --seed 1
"$build/tessera-datagen" -q -o "$out/val.h5" -n "$VAL" --seed 2

# The example's model file with the optimizer section replaced.
model() { # name json
  /usr/bin/python3 - "$here/examples/stemdl/fcdensenet.json" "$out/$1.json" "$2" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m["optimizer"] = json.loads(sys.argv[3])
json.dump(m, open(sys.argv[2], "w"), indent=1)
EOF
}
model sgd "{\"type\": \"sgd\", \"lr\": ${LR_SGD:-0.02}, \"momentum\": 0.9, \"weight_decay\": 0.0001}"
model adam "{\"type\": \"adam\", \"lr\": ${LR_ADAM:-0.001}}"
model sgd-larc "{\"type\": \"sgd\", \"lr\": ${LR_LARC:-0.02}, \"momentum\": 0.9, \"weight_decay\": 0.0001, \"larc\": true}"
model lamb "{\"type\": \"lamb\", \"lr\": ${LR_LAMB:-0.002}}"

launch=()
if [ "$RANKS" -gt 1 ]; then
  launch=(mpirun --allow-run-as-root --oversubscribe -np "$RANKS" -x STARPU_WORKERS_NOBIND=1 -x STARPU_MPI_NOBIND=1)
fi
echo "global batch $((RANKS * BATCH)) ($RANKS x $BATCH), $TRAIN training and $VAL validation samples, $EPOCHS epochs, warm-up $WARMUP steps"
echo "load before: $(uptime)"
printf '%-9s %-4s %9s  %s\n' optimizer rep seconds "validation loss per epoch"
for rep in $(seq 1 "$REPS"); do
  for opt in $OPTIMIZERS; do
    log="$out/$opt-$rep.csv"
    t0=$(date +%s.%N)
    if ! "${launch[@]}" "$build/tessera-train" -q -m "$out/$opt.json" -d "$out/train.h5" --val "$out/val.h5" \
      -e "$EPOCHS" -b "$BATCH" --seed 7 --lr-scaling linear --warmup-steps "$WARMUP" --log "$log" \
      ${WORKERS:+--workers $WORKERS} 2>"$out/err"; then
      printf '%-9s %-4s %s\n' "$opt" "$rep" "failed: $(grep -m1 . "$out/err")"
      continue
    fi
    secs=$(echo "$(date +%s.%N) - $t0" | bc -l)
    printf '%-9s %-4s %9.1f  %s\n' "$opt" "$rep" "$secs" "$(tail -n +2 "$log" | cut -d, -f4 | paste -sd' ')"
  done
done
echo "load after: $(uptime)"

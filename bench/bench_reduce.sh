#!/usr/bin/env bash
# Gradient reductions across ranks in float32 against bf16 and fp16 on the wire (half the bytes,
# summed in float32), side by side: tessera-train on the STEMDL FCDenseNet example under mpirun, the
# formats alternating run by run (same data and seed). Per run: kilobytes rank 0 sent per training
# step, milliseconds per step (epochs after the first; the first warms up), final training loss.
# The ring runs over StarPU-MPI; in GPU builds NCCL reduces instead (bf16/fp16 narrowed on the GPU
# and summed by NCCL in that format), and the same script compares the formats there.
# Usage: bench/bench_reduce.sh [BUILD_DIR]
#   (env: RANKS=2 TRAIN=256 BATCH=8 EPOCHS=2 REPS=2 FORMATS="f32 bf16 fp16" WORKERS=)
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
RANKS=${RANKS:-2} TRAIN=${TRAIN:-256} BATCH=${BATCH:-8} EPOCHS=${EPOCHS:-2} REPS=${REPS:-2}
FORMATS=${FORMATS:-f32 bf16 fp16}
out=$(mktemp -d /tmp/tessera-bench-reduce.XXXXXX)
trap 'rm -rf "$out"' EXIT
export STARPU_HOME=$out/starpu STARPU_SILENT=1
"$build/tessera-datagen" -q -o "$out/train.h5" -n "$TRAIN" --seed 1
echo "load before: $(uptime)"
printf '%-6s %-4s %12s %10s %12s\n' reduce rep KB/step ms/step train_loss
for rep in $(seq 1 "$REPS"); do
  for fmt in $FORMATS; do
    log="$out/$fmt-$rep.csv"
    mpirun --allow-run-as-root --oversubscribe -np "$RANKS" -x STARPU_HOME -x STARPU_SILENT \
      "$build/tessera-train" -m "$here/examples/stemdl/fcdensenet.json" -d "$out/train.h5" --val-fraction 0 \
      -e "$EPOCHS" -b "$BATCH" --seed 7 --grad-reduce "$fmt" --log "$log" ${WORKERS:+--workers $WORKERS} \
      >"$out/$fmt-$rep.txt" 2>&1 || { cat "$out/$fmt-$rep.txt"; exit 1; }
    kb=$(sed -n 's/.*: \([0-9.e+]*\) KB sent by rank 0 per training step/\1/p' "$out/$fmt-$rep.txt")
    # samples/s of the epochs after the first (all ranks together) -> ms per step
    ms=$(awk -F, -v b="$BATCH" -v r="$RANKS" 'NR > 2 { s += $5; n++ } END { print n ? 1000 * b * r / (s / n) : "?" }' "$log")
    loss=$(awk -F, 'END { print $3 }' "$log")
    printf '%-6s %-4s %12s %10.1f %12.6g\n' "$fmt" "$rep" "${kb:-?}" "$ms" "$loss"
  done
done
echo "load after: $(uptime)"

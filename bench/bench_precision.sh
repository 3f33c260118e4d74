#!/usr/bin/env bash
# float32, bf16 and fp16 training of the STEMDL FCDenseNet example, side by side: the precisions
# alternate run by run (same data, seed and workers), and the table gives samples/s and the final
# validation loss of each. On a GPU node (Tessera --with-cuda, StarPU with CUDA) the same script
# runs the cuDNN codelets: bf16 and fp16 there select reduced-precision tensor-core math (fp16 with
# dynamic loss scaling). Without a CUDA worker tessera-train refuses fp16 (no oneDNN f16
# convolutions on CPUs) and its row says so.
# Usage: bench/bench_precision.sh [BUILD_DIR]
#   (env: TRAIN=2048 VAL=256 EPOCHS=3 REPS=2 BATCH=32 WORKERS= PRECISIONS="f32 bf16 fp16")
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
TRAIN=${TRAIN:-2048} VAL=${VAL:-256} EPOCHS=${EPOCHS:-3} REPS=${REPS:-2} BATCH=${BATCH:-32}
PRECISIONS=${PRECISIONS:-f32 bf16 fp16}
out=$(mktemp -d /tmp/tessera-bench-precision.XXXXXX)
"$build/tessera-datagen" -q -o "$out/train.h5" -n "$TRAIN" --seed 1
"$build/tessera-datagen" -q -o "$out/val.h5" -n "$VAL" --seed 2
echo "load before: $(uptime)"
printf '%-6s %-4s %10s %12s %10s\n' precision rep seconds samples/s val_loss
for rep in $(seq 1 "$REPS"); do
  for prec in $PRECISIONS; do
    log="$out/$prec-$rep.csv"
    t0=$(date +%s.%N)
    if ! "$build/tessera-train" -q -m "$here/examples/stemdl/fcdensenet.json" -d "$out/train.h5" --val "$out/val.h5" \
      -e "$EPOCHS" -b "$BATCH" --seed 7 --precision "$prec" --log "$log" ${WORKERS:+--workers $WORKERS} 2>"$out/err"; then
      printf '%-9s %-4s %s\n' "$prec" "$rep" "not run: $(head -1 "$out/err")"
      continue
    fi
    t1=$(date +%s.%N)
    secs=$(echo "$t1 - $t0" | bc -l)
    # the log's last row; the validation loss column is found by name
    vl=$(awk -F, 'NR==1{for(i=1;i<=NF;i++) if($i=="val_loss") c=i} END{print (c? $c : "?")}' "$log")
    printf '%-9s %-4s %10.1f %12.1f %10s\n' "$prec" "$rep" "$secs" "$(echo "$TRAIN * $EPOCHS / $secs" | bc -l)" "$vl"
  done
done
echo "load after: $(uptime)"
rm -rf "$out"

#!/usr/bin/env bash
# Simulates a CBED data set (4x4 probe positions, 64x64 patterns, Si / SrTiO3 / Cu along [001] and
# [110], random thickness and origin), trains the 16-channel FCDenseNet on it and writes PNGs of
# predicted against true projected potentials for a few validation samples.
#   examples/stemdl/run_cbed.sh [OUT_DIR]      (BUILD=build SAMPLES=1536 EPOCHS=8 WORKERS=2 by default)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD:-$top/build}
out=${1:-$top/out/cbed}
samples=${SAMPLES:-1536}
epochs=${EPOCHS:-8}
workers=${WORKERS:-2}
mkdir -p "$out"
for p in tessera-cbed tessera-train; do
  [ -x "$build/$p" ] || { echo "run_cbed.sh: $build/$p not found (build first, or set BUILD=)" >&2; exit 1; }
done
"$build/tessera-cbed" --out "$out/cbed.h5" --samples "$samples" --seed 7 --workers "$workers"
"$build/tessera-train" --model "$here/fcdensenet_cbed.json" --data "$out/cbed.h5" --val-fraction 0.125 \
  --epochs "$epochs" --batch 16 --workers "$workers" --seed 1 --log "$out/train.csv" \
  --export-params "$out/params.h5" --predict-png "$out/png" --predict-count 6
echo "run_cbed.sh: data, log, parameters and PNGs in $out"

#!/usr/bin/env bash
# Simulates a CBED data set (Si / SrTiO3 / Cu along [001] and [110], random thickness and in-plane
# origin; a 4x4 grid of focused 10 mrad probes over a 10 A cell, 32x32 patterns), trains the
# 16-channel FCDenseNet on it and writes PNGs of predicted against true projected potentials for a
# few validation samples. The 2.5 A probe spacing is not a lattice period, so the 16 patterns see
# different places of the unit cell and fix the random origin (README.md, CBED section).
#   examples/stemdl/run_cbed.sh [OUT_DIR]      (BUILD=build SAMPLES=2048 EPOCHS=12 WORKERS=2 by default)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD:-$top/build}
out=${1:-$top/out/cbed}
samples=${SAMPLES:-2048}
epochs=${EPOCHS:-12}
workers=${WORKERS:-2}
mkdir -p "$out"
for p in tessera-cbed tessera-train; do
  [ -x "$build/$p" ] || { echo "run_cbed.sh: $build/$p not found (build first, or set BUILD=)" >&2; exit 1; }
done
# 200 kV, alpha 10 mrad, in focus; 10 A cell on a 32x32 grid: 0.31 A pixels, 0.1 1/A (2.5 mrad)
# diffraction pixels, band limit 27 mrad; the whole diffraction plane and the whole cell are kept
"$build/tessera-cbed" --out "$out/cbed.h5" --samples "$samples" --seed 7 --workers "$workers" \
  --grid 32 --pattern 32 --target 32 --probes 4 --fov 10
"$build/tessera-train" --model "$here/fcdensenet_cbed.json" --data "$out/cbed.h5" --val-fraction 0.125 \
  --epochs "$epochs" --batch 16 --workers "$workers" --seed 1 --log "$out/train.csv" \
  --export-params "$out/params.h5" --predict-png "$out/png" --predict-count 6 --standardize-targets
echo "run_cbed.sh: data, log, parameters and PNGs in $out"

#!/usr/bin/env bash
# Generates a 3-D segmentation data set (tessera-cosmogen --task segmentation: halo and void spheres
# in a Gaussian random field, 32^3, one class per voxel), trains the 3-D U-Net unet3d.json on it and
# reports the validation cross-entropy against predicting the class frequencies everywhere (the mean
# target), the voxel accuracy and each class's IoU (evaluate.py, needs h5py).
#   examples/unet3d/run.sh [OUT_DIR]
# Environment (defaults): BUILD=build TRAIN=256 VAL=32 EPOCHS=8 BATCH=8 WORKERS=2 RANKS=1 (> 1: under
# mpirun, data-parallel) TRAIN_ARGS= (more tessera-train options, e.g. "--spatial 2").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD:-$top/build}
out=${1:-$top/out/unet3d}
ntrain=${TRAIN:-256} nval=${VAL:-32} epochs=${EPOCHS:-8} batch=${BATCH:-8} workers=${WORKERS:-2} ranks=${RANKS:-1}
for p in tessera-cosmogen tessera-train tessera-predict; do
  [ -x "$build/$p" ] || { echo "run.sh: $build/$p not found (build first, or set BUILD=)" >&2; exit 1; }
done
mkdir -p "$out"
launch=()
[ "$ranks" -gt 1 ] && launch=(mpirun --allow-run-as-root --oversubscribe -np "$ranks")
gen=("$build/tessera-cosmogen" --task segmentation --size 32 --seed 1 --workers "$workers")
"${gen[@]}" --out "$out/train.h5" --samples "$ntrain"
"${gen[@]}" --out "$out/val.h5" --samples "$nval" --first "$ntrain"
# shellcheck disable=SC2086
"${launch[@]}" "$build/tessera-train" --model "$here/unet3d.json" --data "$out/train.h5" --val "$out/val.h5" \
  --epochs "$epochs" --batch "$batch" --workers "$workers" --seed 1 --log "$out/train.csv" \
  --export-params "$out/params.h5" ${TRAIN_ARGS:-} | tee "$out/train.log"
"$build/tessera-predict" --model "$here/unet3d.json" --params "$out/params.h5" --data "$out/val.h5" \
  --out "$out/pred.h5" --workers "$workers" -q
py=${PYTHON:-/usr/bin/python3}   # Debian's, with python3-h5py and python3-numpy (scripts/deps)
if "$py" -c 'import h5py, numpy' 2>/dev/null; then
  "$py" "$here/evaluate.py" "$out/train.h5" "$out/val.h5" "$out/pred.h5" | tee "$out/evaluate.txt"
else
  echo "run.sh: no h5py for $py (PYTHON= to choose another): the cross-entropy baseline needs it; validation losses per epoch are in $out/train.csv"
fi
echo "run.sh: data, log, parameters and predictions in $out"

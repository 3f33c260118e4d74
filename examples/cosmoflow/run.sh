#!/usr/bin/env bash
# Generates a CosmoFlow-style data set (tessera-cosmogen: 4 redshift channels of 32^3 Gaussian random
# fields, 4 parameters as targets), trains cosmoflow.json on it and reports the validation loss
# against predicting the mean training target, per parameter too (evaluate.py, needs h5py).
#   examples/cosmoflow/run.sh [OUT_DIR]
# Environment (defaults): BUILD=build SIZE=32 (or 64: cosmoflow64.json) TRAIN=1024 VAL=128 EPOCHS=4
# BATCH=16 WORKERS=2 RANKS=1 (> 1: under mpirun, data-parallel) TRAIN_ARGS= (more tessera-train
# options, e.g. "--spatial 2" for spatial or hybrid runs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD:-$top/build}
out=${1:-$top/out/cosmoflow}
size=${SIZE:-32} ntrain=${TRAIN:-1024} nval=${VAL:-128} epochs=${EPOCHS:-4} batch=${BATCH:-16}
workers=${WORKERS:-2} ranks=${RANKS:-1}
model=$here/cosmoflow.json
[ "$size" = 32 ] || model=$here/cosmoflow$size.json
[ -f "$model" ] || { echo "run.sh: $model not found (python3 $here/make_model.py --size $size)" >&2; exit 1; }
for p in tessera-cosmogen tessera-train tessera-predict; do
  [ -x "$build/$p" ] || { echo "run.sh: $build/$p not found (build first, or set BUILD=)" >&2; exit 1; }
done
mkdir -p "$out"
launch=()
[ "$ranks" -gt 1 ] && launch=(mpirun --allow-run-as-root --oversubscribe -np "$ranks")
# training indices 0..TRAIN-1 and validation indices TRAIN..TRAIN+VAL-1 of one seed: disjoint samples
"$build/tessera-cosmogen" --out "$out/train.h5" --samples "$ntrain" --size "$size" --seed 1 --workers "$workers"
"$build/tessera-cosmogen" --out "$out/val.h5" --samples "$nval" --size "$size" --seed 1 --first "$ntrain" \
  --workers "$workers"
# shellcheck disable=SC2086
"${launch[@]}" "$build/tessera-train" --model "$model" --data "$out/train.h5" --val "$out/val.h5" \
  --epochs "$epochs" --batch "$batch" --workers "$workers" --seed 1 --log "$out/train.csv" \
  --export-params "$out/params.h5" ${TRAIN_ARGS:-} | tee "$out/train.log"
"$build/tessera-predict" --model "$model" --params "$out/params.h5" --data "$out/val.h5" --out "$out/pred.h5" \
  --workers "$workers" -q
py=${PYTHON:-/usr/bin/python3}   # Debian's, with python3-h5py and python3-numpy (scripts/deps)
if "$py" -c 'import h5py, numpy' 2>/dev/null; then
  "$py" "$here/evaluate.py" "$out/train.h5" "$out/val.h5" "$out/pred.h5" | tee "$out/evaluate.txt"
else
  echo "run.sh: no h5py for $py (PYTHON= to choose another): per-parameter scores skipped (the baseline line above compares the losses)"
fi
grep "^baseline:" "$out/train.log" || true
echo "run.sh: data, log, parameters and predictions in $out"

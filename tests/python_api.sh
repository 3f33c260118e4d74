#!/usr/bin/env bash
# The Python package (python/tessera, ctypes over the built libtessera) with /usr/bin/python3:
# training from numpy arrays (and h5py data sets) equals tessera-train on the same .npy files in
# deterministic mode bitwise (step losses, exported parameters), and predictions equal a float64
# numpy forward pass and tessera-train's validation loss (tests/python_api.py states the
# tolerances). Skipped (77) without numpy, or in a sanitizer build (python3 would need libasan
# preloaded).
set -u
B=${TESSERA_BUILDDIR:-.}
src=${TESSERA_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
py=/usr/bin/python3
[ -x $py ] || { echo "SKIP: $py not found"; exit 77; }
$py -c 'import numpy' 2>/dev/null || { echo "SKIP: numpy missing for $py (apt-get install python3-numpy)"; exit 77; }
lib=$(ls "$B"/.libs/libtessera.so.0 2>/dev/null) || { echo "FAIL: $B/.libs/libtessera.so.0 not built"; exit 1; }
if ldd "$lib" | grep -q libasan; then echo "SKIP: sanitizer build (python3 cannot load libasan late)"; exit 77; fi
tmp=$(mktemp -d /tmp/tessera-python-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 TESSERA_LIB=$lib PYTHONPATH=$src/python PYTHONDONTWRITEBYTECODE=1

cat >"$tmp/model.json" <<'JSON'
{"name": "blur", "layers": [
  {"name": "in", "type": "input", "shape": [1, 16, 16]},
  {"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
  {"name": "r1", "type": "relu"},
  {"name": "c2", "type": "conv2d", "out_channels": 1, "kernel": 3, "padding": 1}],
 "loss": {"type": "mse"}, "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9}}
JSON
$py "$src/tests/python_api.py" data "$tmp" || { echo "FAIL: making the .npy data"; exit 1; }
"$B/tessera-train" --model "$tmp/model.json" --data "$tmp/train_x.npy:$tmp/train_y.npy" \
  --val "$tmp/val_x.npy:$tmp/val_y.npy" --epochs 3 --batch 8 --slices 2 --workers 1 --seed 3 --deterministic \
  --step-log "$tmp/steps.csv" --log "$tmp/log.csv" --export-params "$tmp/params" -q >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; echo "FAIL: tessera-train on the .npy data"; exit 1; }
"$B/tessera-train" --model "$tmp/model.json" --data "$tmp/train_x.npy:$tmp/train_y2.npy" \
  --val "$tmp/val_x.npy:$tmp/val_y2.npy" --epochs 3 --batch 8 --slices 2 --workers 1 --seed 3 --deterministic \
  --standardize-targets --step-log "$tmp/steps2.csv" --log "$tmp/log2.csv" -q >"$tmp/train2.log" 2>&1 ||
  { cat "$tmp/train2.log"; echo "FAIL: tessera-train --standardize-targets on the .npy data"; exit 1; }
$py "$src/tests/python_api.py" check "$tmp"

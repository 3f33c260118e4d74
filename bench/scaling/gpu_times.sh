#!/usr/bin/env bash
# Measures FC-DenseNet-103's per-layer GPU times for docs/scaling.md's extrapolation (issue 19):
# gpu_layer_times.py at 512 x 512, channels-last, batch 4 in bf16 and in float32 (TF32 convs), and
# batch 1 in bf16, each under its own time limit so that one hang does not lose the others. Writes
# OUTDIR/NAME.csv (the times, for stemdl_graph.py --times / summit.sh BUILD --times CSV) and
# OUTDIR/NAME.log (per-layer progress), and prints the totals. Expected: under a minute per run on
# an H100 (mostly cuDNN's autotuning of ~300 conv configurations), 5 minutes at most (the limits).
# Usage: bench/scaling/gpu_times.sh OUTDIR   (PYTHON=... the interpreter, default python3; SIZE=32 for
# a quick test on a CPU)
set -u
out=${1:?usage: gpu_times.sh OUTDIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
size=${SIZE:-512}
nvidia-smi -L 2>&1 || echo "(no nvidia-smi)"
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn",
torch.backends.cudnn.version(), "available", torch.cuda.is_available())' 2>&1
t_all=$(date +%s)
run() {  # NAME LIMIT_S gpu_layer_times.py options
  local name=$1 limit=$2 t rc
  shift 2
  echo "== $name: gpu_layer_times.py --size $size --channels-last $* (limit ${limit} s)"
  t=$(date +%s)
  rm -f "$out/$name.csv"
  PYTHONUNBUFFERED=1 timeout -k 5 "$limit" "$py" "$here/gpu_layer_times.py" --size "$size" --channels-last \
    --out "$out/$name.csv" "$@" 2>"$out/$name.log"
  rc=$?
  echo "   exit $rc after $(($(date +%s) - t)) s$([ $rc = 124 ] && echo ' (time limit)')"
  grep -E 'sum of the parts|whole step|Error|error' "$out/$name.log" | sed 's/^/   /' | tail -n 4
  [ -f "$out/$name.csv" ] && grep '^# ' "$out/$name.csv" | sed 's/^/   /'
  [ $rc = 0 ] || tail -n 3 "$out/$name.log" | sed 's/^/   /'
  if [ -s "$out/$name.csv" ]; then  # refused, naming the first missing layer, if the CSV is partial
    "$py" "$here/stemdl_graph.py" "$out/graph-$name" --times "$out/$name.csv" 2>&1 | sed 's/^/   /'
    rm -rf "$out/graph-$name"
  fi
}
run bf16-b4 110 --dtype bf16 --batch 4
run fp32-b4 110 --dtype float32 --batch 4
run bf16-b1 80 --dtype bf16 --batch 1
echo "== all done in $(($(date +%s) - t_all)) s; CSVs and logs in $out"

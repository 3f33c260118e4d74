#!/usr/bin/env bash
# The held-out benchmark's learning curve (issue 17): heldout.sh at several training-set sizes with
# the same number of optimizer steps (so data size and training length are separated), once more at
# the largest size with more steps, and once at the middle size with a wider model; then a table of
# the held-out figures per run and a least-squares line of each against log2(training samples),
# extrapolated to issue 17's targets (+3 dB over the nearest neighbour, 90% of the columns). One command:
#   examples/stemdl/learning_curve.sh [OUT_DIR]
# Settings (environment; defaults in brackets); every other heldout.sh setting passes through:
#   SIZES ["128 512 2048 8192"]: training samples per voltage (3 voltages), a quarter of them from the CIF
#     structures (TRAIN_SAMPLES) and three quarters random crystals (TRAIN_RANDOM)
#   STEPS [3072]: optimizer steps of every run of SIZES (batch 16: 49152 samples seen)
#   LONG_STEPS [6144]: one more run at the largest size with this many steps ("" = none)
#   GROWTH [16]: one more run at the middle size with make_model.py --growth GROWTH (the default
#     model has 8; "" = none)
# Writes OUT_DIR/<run>/ (heldout.sh's outputs per run), OUT_DIR/data/ (the simulated data, shared by
# the runs), OUT_DIR/curve.csv (one row per run and held-out set) and OUT_DIR/curve.md (the table and fits).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(cd "$here/../.." && pwd)/out/learning_curve}
sizes=${SIZES:-128 512 2048 8192} steps=${STEPS:-3072} long_steps=${LONG_STEPS-6144} growth=${GROWTH-16}
mkdir -p "$out/data"
out=$(cd "$out" && pwd)
export DATA_DIR=$out/data
echo "run,samples,steps,growth,seconds,load,label,net_psnr_db,nn_psnr_db,mean_psnr_db,net_columns,nn_columns,mean_columns" >"$out/curve.csv"

run() { # name samples-per-voltage steps model growth
  local name=$1 n=$2 st=$3 model=$4 g=$5 t0 t1 load
  t0=$(date +%s)
  MODEL=$model TRAIN_SAMPLES=$((n / 4)) TRAIN_RANDOM=$((n - n / 4)) STEPS=$st "$here/heldout.sh" "$out/$name" >"$out/$name.log" 2>&1 ||
    { echo "learning_curve.sh: run $name failed, see $out/$name.log" >&2; exit 1; }
  t1=$(date +%s) load=$(cut -d' ' -f1 /proc/loadavg)
  awk -F, -v run="$name" -v n="$((3 * n))" -v st="$st" -v g="$g" -v sec="$((t1 - t0))" -v load="$load" '
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["label"] ~ /^held-out/ { print run "," n "," st "," g "," sec "," load "," $c["label"] "," $c["test_psnr_db"] "," \
      $c["nn_psnr_db"] "," $c["mean_psnr_db"] "," $c["test_columns_found"] "," $c["nn_columns_found"] "," $c["mean_columns_found"] }' \
    "$out/$name/metrics.csv" >>"$out/curve.csv"
  echo "learning_curve.sh: $name ($((3 * n)) samples, $st steps, growth $g): $((t1 - t0)) s, load $load"
}

for n in $sizes; do run "n$((3 * n))_s$steps" "$n" "$steps" "$here/fcdensenet_cbed.json" 8; done
set -- $sizes
largest=${!#} middle=$(echo "$sizes" | awk '{ print $(int((NF + 1) / 2)) }')
[ -z "$long_steps" ] || run "n$((3 * largest))_s$long_steps" "$largest" "$long_steps" "$here/fcdensenet_cbed.json" 8
if [ -n "$growth" ]; then
  python3 "$here/make_model.py" --size 32 --in-channels 16 --growth "$growth" -o "$out/fcdensenet_cbed_g$growth.json" >/dev/null
  run "n$((3 * middle))_s${steps}_g$growth" "$middle" "$steps" "$out/fcdensenet_cbed_g$growth.json" "$growth"
fi
python3 "$here/curve_fit.py" "$out/curve.csv" "$steps" | tee "$out/curve.md"

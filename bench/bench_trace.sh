#!/bin/sh
# Cost of tracing: tessera-train on a generated data set, alternately without and with --trace, REPS
# times each; the step time is taken from the last epoch's samples/s in the CSV log (earlier epochs
# warm up StarPU's performance models). Prints the median step times and the overhead.
# Usage: bench/bench_trace.sh [BUILD_DIR]   (environment: REPS, SAMPLES, EPOCHS, MODEL, BATCH, SIZE)
set -eu
build=${1:-.}
src=$(cd "$(dirname "$0")/.." && pwd)
REPS=${REPS:-5}
SAMPLES=${SAMPLES:-256}
EPOCHS=${EPOCHS:-2}
BATCH=${BATCH:-32}
SIZE=${SIZE:-64}
MODEL=${MODEL:-$src/examples/stemdl/fcdensenet.json}
for p in tessera-train tessera-datagen; do
  [ -x "$build/$p" ] || { echo "bench_trace.sh: $build/$p not found (pass the build folder)" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/tessera-bench-trace-XXXXXX)
export STARPU_HOME="$tmp/starpu" STARPU_SILENT=1
"$build/tessera-datagen" -o "$tmp/train.h5" -n "$SAMPLES" --size "$SIZE" -q
run() { # $1: off|on, $2: rep
  extra=""
  [ "$1" = on ] && extra="--trace $tmp/trace-$2"
  "$build/tessera-train" -m "$MODEL" -d "$tmp/train.h5" --val-fraction 0 -e "$EPOCHS" -b "$BATCH" -q \
    --log "$tmp/$1-$2.csv" $extra
  tail -n 1 "$tmp/$1-$2.csv" | cut -d, -f5
}
run off 0 > /dev/null # calibrates the performance models
echo "rep  off_ms_per_step  on_ms_per_step  on/off"
i=1
: > "$tmp/pairs"
while [ "$i" -le "$REPS" ]; do
  if [ $((i % 2)) -eq 1 ]; then off=$(run off "$i"); on=$(run on "$i"); else on=$(run on "$i"); off=$(run off "$i"); fi
  echo "$i $off $on" | awk -v b="$BATCH" '{printf "%3d  %15.1f  %14.1f  %6.3f\n", $1, 1e3*b/$2, 1e3*b/$3, $2/$3}'
  echo "$off $on" >> "$tmp/pairs"
  i=$((i + 1))
done
sort -n -k1 "$tmp/pairs" | awk -v b="$BATCH" '{off[NR]=1e3*b/$1} END {n=NR; m=(n%2)?off[(n+1)/2]:(off[n/2]+off[n/2+1])/2; printf "median off: %.1f ms/step\n", m}'
awk '{print $1/$2}' "$tmp/pairs" | sort -n | awk '{r[NR]=$1} END {n=NR; m=(n%2)?r[(n+1)/2]:(r[n/2]+r[n/2+1])/2; printf "median on/off step-time ratio: %.4f (tracing overhead %+.2f%%)\n", m, 100*(m-1)}'
du -sh "$tmp/trace-1" | awk '{print "trace folder of one run: " $1}'
echo "load: $(uptime | sed 's/.*load average/load average/')"
rm -rf "$tmp"

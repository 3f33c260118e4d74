#!/usr/bin/env bash
# Measured against predicted step times (docs/scaling.md): for each link (loopback: Open MPI's shared
# memory; netlab at 1 and 10 Gbit/s when it can run here), each group layout (TESSERA_GROUP_BYTES:
# the default 256 KiB, one group per layer, one group for all) and 1..4 ranks, one traced
# tessera-train run of validate_model.json (4 samples per rank per step: --batch is per rank; 14 steps
# at 4 ranks, 13 of them timed; 1 worker per rank); the
# prediction replays that same trace (rank 0's task durations: the same load as the measured steps)
# on the link's machine file, measured by tessera-scale --calibrate (+ --from-trace for the sums).
# Usage: bench/scaling/validate.sh BUILD_DIR [OUT_DIR]   (writes OUT_DIR/validate.csv; its columns 9-10:
# the same replay with --progress thread, messages moving at once, and its error; 11-12: the replay
# with the links' exchange_gbit left out (full duplex, the model before it), and its error; 13-14: the
# replay with timeslice_us left out (a core per rank), and its error)
# A subset, or other reductions: LINKS="loop 1gbit 10gbit" LAYOUTS="262144 layer 1000000000000"
# RANKS="1 2 3 4" COLLECTIVES="ring" (tessera-train --collective names, each predicted with the cost
# model of that name: ring's is f32) RANKS_PER_NODE=1 (k > 1: ranks k to a node, netlab nodes of k
# ranks or TESSERA_NODE_SIZE=k on loopback; the machine file's intra link then comes from a
# calibration over shared memory, and rank counts that are not a multiple of k are skipped).
# Ranks that outnumber this host's CPUs take turns on them (netlab gives each node its share of the
# CPUs): a run of n ranks on c CPUs is predicted with the machine's ranks_per_core at ceil(n / c) and
# its timeslice_us calibrated with two ranks on one CPU (2 nodes of 2 ranks), unless TIMESLICE=0
# (then timeslice_us is 0 and columns 13-14 repeat 5-6).
# KEEP_TRACES=1 keeps each run's trace in OUT_DIR/traces/LINK-RANKS-LAYOUT-COLLECTIVE and the machine
# file it was predicted with beside it (.json): a changed model can replay the same runs.
# Every launch runs under timeout: TRAIN_TIMEOUT s for a training run (default 900), CAL_TIMEOUT s for
# a calibration (default 180; one takes seconds). A calibration is tried CAL_TRIES times (default 3):
# a loaded machine can drown the small sizes' times in scheduling noise (refused), and a try that
# outlives its limit is stopped and counts as failed; then the script gives up, saying why.
set -u
B=$(cd "${1:?usage: validate.sh BUILD_DIR [OUT_DIR]}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
out=${2:-$PWD/validate-out}
mkdir -p "$out"
tmp=$(mktemp -d /tmp/tsr-validate-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
k=${RANKS_PER_NODE:-1}
ncpu=$(nproc)
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 TESSERA_GROUP_BYTES=262144
unset TESSERA_NODE_SIZE # loopback's nodes are set per run (netlab's come from its host names)
netlab=${TESSERA_NETLAB:-$here/../../scripts/netlab}
MPI="mpirun --allow-run-as-root --oversubscribe -x STARPU_HOME -x STARPU_SILENT -x STARPU_WORKERS_NOBIND -x STARPU_MPI_NOBIND -x TESSERA_GROUP_BYTES"
"$B/tessera-datagen" --out "$tmp/data.h5" --samples 224 --size 16 --seed 3 -q || exit 1
"$B/tessera-train" --model "$here/validate_model.json" --data "$tmp/data.h5" --val-fraction 0 --epochs 1 --batch 4 \
  --workers 1 -q >/dev/null 2>&1 # StarPU's bus and kernel models, once
csv=$out/validate.csv
echo "link,ranks,layout,measured_ms,predicted_ms,error,load,collective,predicted_thread_ms,error_thread,predicted_duplex_ms,error_duplex,predicted_noslice_ms,error_noslice" >"$csv"

train_s=${TRAIN_TIMEOUT:-900} cal_s=${CAL_TIMEOUT:-180} cal_tries=${CAL_TRIES:-3}

# launch LINK N K CMD...: runs CMD on N ranks over the link, K to a node, stopped after $limit s
# (exit status 124; netlab removes its lab when stopped)
launch() {
  local link=$1 n=$2 per=$3
  shift 3
  case $link in
  loop) if [ "$n" = 1 ]; then timeout "$limit" "$@"; else
    TESSERA_NODE_SIZE=$per timeout "$limit" $MPI -x TESSERA_NODE_SIZE -np "$n" "$@"; fi ;;
  *) timeout "$limit" "$netlab" run --nodes $((n / per)) --ranks-per-node "$per" --rate "$link" -- $MPI -np "$n" "$@" ;;
  esac
}

train() { # LINK N LAYOUT TRACE COLLECTIVE
  rm -rf "$4"
  local rc limit=$train_s
  TESSERA_GROUP_BYTES=$3 launch "$1" "$2" "$k" "$B/tessera-train" --model "$here/validate_model.json" \
    --data "$tmp/data.h5" --val-fraction 0 --epochs 1 --batch 4 --workers 1 -q --trace "$4" \
    --collective "$5" >"$tmp/train.log" 2>&1
  rc=$?
  [ $rc = 0 ] && return 0
  cat "$tmp/train.log"
  [ $rc = 124 ] && echo "giving up: tessera-train on $2 ranks over $1 (layout $3) ran past ${train_s} s (TRAIN_TIMEOUT)"
  return 1
}

# calibrate LOG WHAT CMD...: CMD (launch ..., or timeout-bounded by it) at most cal_tries times,
# each under cal_s seconds, appending to LOG; gives up saying why
calibrate() {
  local log=$1 what=$2 try rc limit=$cal_s
  shift 2
  for try in $(seq 1 "$cal_tries"); do
    "$@" >>"$log" 2>&1
    rc=$?
    [ $rc = 0 ] && return 0
    if [ $rc = 124 ]; then echo "$what: try $try of $cal_tries ran past ${cal_s} s (CAL_TIMEOUT) and was stopped" >>"$log"
    else echo "$what: try $try of $cal_tries failed (exit status $rc)" >>"$log"; fi
  done
  tail -n 30 "$log"
  echo "giving up: $what failed $cal_tries times (CAL_TRIES); its log: $log"
  return 1
}

links="loop"
if [ -x "$netlab" ] && "$netlab" check >/dev/null 2>&1; then links="loop 1gbit 10gbit"; else
  echo "netlab not usable here ($("$netlab" check 2>&1 | tail -1)): loopback only"; fi
links=${LINKS:-$links}
for link in $links; do
  mf=$out/machine-$link.json
  k=1 train "$link" 2 262144 "$tmp/cal-trace" ring || exit 1
  : >"$out/calibrate-$link.log"
  calibrate "$out/calibrate-$link.log" "calibration over $link" launch "$link" 2 1 "$B/tessera-scale" --calibrate \
    --reps 10 --sizes 8,65536,131072,262144,1048576,4194304 --from-trace "$tmp/cal-trace" --name "$link" --ranks-per-node "$k" \
    --save "$mf" || exit 1
  if [ "$k" -gt 1 ]; then # inside a node: shared memory
    calibrate "$out/calibrate-$link.log" "calibration of the intra link" timeout "$cal_s" $MPI -np 2 \
      "$B/tessera-scale" --calibrate --reps 10 --sizes 8,65536,1048576,4194304 --link intra --machine "$mf" \
      --save "$mf" || exit 1
  fi
  # the time slice of two ranks on one CPU, when some run has more ranks than this host has CPUs
  # (2 nodes of 2 ranks: netlab splits the CPUs among the nodes, so on 2 CPUs a node's ranks share one)
  turns=0
  for n in ${RANKS:-1 2 3 4}; do [ "$n" -gt "$ncpu" ] && turns=1; done
  if [ "${TIMESLICE:-1}" = 1 ] && [ $turns = 1 ]; then
    calibrate "$out/calibrate-$link.log" "calibration of the time slice" launch "$link" 4 2 \
      "$B/tessera-scale" --calibrate --link timeslice --reps 20 --machine "$mf" --save "$mf" || exit 1
  fi
  for layout in ${LAYOUTS:-262144 layer 1000000000000}; do
    for n in ${RANKS:-1 2 3 4}; do
      [ "$link" != loop ] && [ "$n" = 1 ] && continue # one rank uses no link
      [ $((n % k)) != 0 ] && continue
      # this run's machine: ranks taking turns on the CPUs, and the variants of columns 11-14
      rpc=$(((n + ncpu - 1) / ncpu))
      sed "s/\"ranks_per_core\": *[0-9]*/\"ranks_per_core\": $rpc/" "$mf" >"$tmp/machine.json"
      sed 's/"exchange_gbit": *[0-9.e+-]*/"exchange_gbit": 0/' "$tmp/machine.json" >"$tmp/machine-duplex.json"
      sed 's/"timeslice_us": *[0-9.e+-]*/"timeslice_us": 0/' "$tmp/machine.json" >"$tmp/machine-noslice.json"
      for coll in ${COLLECTIVES:-ring}; do
        train "$link" "$n" "$layout" "$tmp/tr" "$coll" || exit 1
        model=$coll && [ "$coll" = ring ] && model=f32
        line=$("$B/tessera-scale" "$tmp/tr" --machine "$tmp/machine.json" --from-trace "$tmp/tr" --ranks "$n" --algo "$model" --csv |
          tail -1)
        # the same replay with messages moving at once (progress `thread`: the model before issue 19's
        # progress rule), for comparison
        thr=$("$B/tessera-scale" "$tmp/tr" --machine "$tmp/machine.json" --from-trace "$tmp/tr" --ranks "$n" --algo "$model" --csv \
          --progress thread | tail -1 | cut -d, -f2)
        dup=$("$B/tessera-scale" "$tmp/tr" --machine "$tmp/machine-duplex.json" --from-trace "$tmp/tr" --ranks "$n" \
          --algo "$model" --csv | tail -1 | cut -d, -f2)
        nos=$("$B/tessera-scale" "$tmp/tr" --machine "$tmp/machine-noslice.json" --from-trace "$tmp/tr" --ranks "$n" \
          --algo "$model" --csv | tail -1 | cut -d, -f2)
        load=$(cut -d' ' -f1 /proc/loadavg)
        if [ "${KEEP_TRACES:-0}" = 1 ]; then
          mkdir -p "$out/traces" && rm -rf "$out/traces/$link-$n-$layout-$coll" && cp -r "$tmp/tr" "$out/traces/$link-$n-$layout-$coll" &&
            cp "$tmp/machine.json" "$out/traces/$link-$n-$layout-$coll.json"
        fi
        echo "$line" | awk -F, -v l="$link" -v n="$n" -v y="$layout" -v ld="$load" -v c="$coll" -v th="$thr" -v du="$dup" -v ns="$nos" \
          '{ printf "%s,%d,%s,%.3f,%.3f,%.4f,%s,%s,%.3f,%.4f,%.3f,%.4f,%.3f,%.4f\n", l, n, y, $3 / 1e3, $2 / 1e3, ($2 - $3) / $3,
             ld, c, th / 1e3, (th - $3) / $3, du / 1e3, (du - $3) / $3, ns / 1e3, (ns - $3) / $3 }' |
          tee -a "$csv"
      done
    done
  done
done
tail -n +2 "$csv" | awk -F, '{ print ($6 < 0 ? -$6 : $6) }' | sort -g |
  awk '{ v[++n] = $1 } END { m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2;
        printf "%d configurations: median |error| %.1f%%, worst %.1f%%\n", n, 100 * m, 100 * v[n] }' | tee "$out/summary.txt"
tail -n +2 "$csv" | awk -F, '{ print ($12 < 0 ? -$12 : $12) }' | sort -g |
  awk '{ v[++n] = $1 } END { m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2;
        printf "without exchange_gbit (full duplex): median |error| %.1f%%, worst %.1f%%\n", 100 * m, 100 * v[n] }' |
  tee -a "$out/summary.txt"
tail -n +2 "$csv" | awk -F, '{ print ($14 < 0 ? -$14 : $14) }' | sort -g |
  awk '{ v[++n] = $1 } END { m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2;
        printf "without timeslice_us (a core per rank): median |error| %.1f%%, worst %.1f%%\n", 100 * m, 100 * v[n] }' |
  tee -a "$out/summary.txt"
if command -v gnuplot >/dev/null; then
  gnuplot <<GP
set terminal pngcairo size 700,600
set output "$out/validate.png"
set datafile separator ","
set xlabel "measured ms/step"; set ylabel "predicted ms/step"; set key top left
set logscale xy
f(x) = x
plot "< grep '^loop' $csv" using 4:5 title "loopback" pt 7, \
     "< grep '^1gbit' $csv" using 4:5 title "netlab 1 Gbit/s" pt 5, \
     "< grep '^10gbit' $csv" using 4:5 title "netlab 10 Gbit/s" pt 9, \
     f(x) title "predicted = measured" lt -1, 1.25*x title "x 1.25, / 1.25" dt 2 lc rgb "gray", x/1.25 notitle dt 2 lc rgb "gray"
GP
fi

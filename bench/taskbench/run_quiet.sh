#!/usr/bin/env bash
# Task Bench's METG(50%) table for the targets of issue 19 on one quiet node, in at most ~8 minutes:
# patterns trivial, stencil_1d, no_comm, tree and spread on 1 rank (2 CPU workers), Tessera's submit
# and bare StarPU interleaved at every grain, each scheduler of $SCHEDS, repeated $REPEATS times
# (repeat-major: every setting gets its first run before any its second); a cell is the median over
# the repeats. Schedulers run as StarPU ships them (TESSERA_IDLE=spin: no Tessera policy wrapper, so
# the "starpu" variant is bare StarPU); "SCHED+yield" runs Tessera's idle-sleeping copy of SCHED
# (the default of a single process, src/runtime/idle.c) for both variants; dmdas+yield is what
# tessera-train runs by default. No new run starts after $LIMIT_S seconds (default 420), and a run
# still going at $HARD_S (default 480) is cut there; the table is printed from the runs done.
# TASKBENCH_PERFMODEL=1 gives the codelet a history-based model, as Tessera's codelets have (dmdas
# then consults it per task; see bench/README.md).
# Usage: bench/taskbench/run_quiet.sh BUILD_DIR [OUT.csv]
# Prints the CSV's path, the load before and after, and metg.py's tables (CPU time, then wall clock)
# with the best scheduler per pattern.
set -u
B=$(cd "${1:?usage: run_quiet.sh BUILD_DIR [OUT.csv]}" && pwd)
out=${2:-taskbench-quiet-$(date -u +%Y%m%d-%H%M).csv}
here=$(cd "$(dirname "$0")" && pwd)
scheds=${SCHEDS:-lws eager ws prio lws+yield dmdas+yield}
repeats=${REPEATS:-3}
limit=${LIMIT_S:-420} hard=${HARD_S:-480}
patterns=${PATTERNS:-trivial,stencil_1d,no_comm,tree,spread}
tmp=$(mktemp -d /tmp/tsr-taskbench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 STARPU_NCPU=2
[ -x "$B/bench/taskbench/taskbench" ] || { echo "run_quiet.sh: build it first: make -C $B bench/taskbench/taskbench" >&2; exit 1; }
# StarPU calibrates the bus in a fresh STARPU_HOME: once, outside the measured runs
"$B/bench/taskbench/taskbench" 1024 1024 0.01 trivial starpu 8 >/dev/null
: >"$out"
echo "# run_quiet.sh $(git -C "$here" rev-parse --short HEAD 2>/dev/null), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out"
start=$SECONDS
for rep in $(seq 1 "$repeats"); do
  for s in $scheds; do
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      echo "# stopped after ${limit}s: repeat $rep, $s and later not run" | tee -a "$out"
      break 2
    fi
    case $s in *+yield) idle=yield sched=${s%+yield} ;; *) idle=spin sched=$s ;; esac
    echo "# $s, repeat $rep, load $(cut -d' ' -f1-3 /proc/loadavg), at $((SECONDS - start))s" >>"$out"
    TESSERA_IDLE=$idle STARPU_SCHED=$sched timeout $((hard - (SECONDS - start))) \
      "$B/bench/taskbench/taskbench" 65536 16 0.05 "$patterns" |
      awk -v s="$s" -v r="$rep" -F, '/^#/ || /^pattern/ { print; next } { print $0 "," s "," r }' >>"$out"
    [ "${PIPESTATUS[0]}" = 124 ] && echo "# $s, repeat $rep: cut at ${hard}s (its last pattern is partial)" | tee -a "$out"
  done
done
echo "# done in $((SECONDS - start))s, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out"
echo "CSV: $out"
echo; echo "METG(50%), us of CPU time per task (median over repeats, range in brackets):"
python3 "$here/metg.py" --best "$out"
echo; echo "METG(50%), us of wall-clock time x cores per task (Task Bench's own measure):"
python3 "$here/metg.py" --best --wall "$out"

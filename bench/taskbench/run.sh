#!/usr/bin/env bash
# Task Bench METG(50%): taskbench on 1 rank (2 CPU workers) and 2 ranks (1 worker each), every
# pattern, Tessera's submit and bare StarPU interleaved, for each scheduler in $SCHEDS (default
# "lws dmdas eager") and rank count in $RANKS (default "1 2"); CSV lines (with the scheduler and the
# load appended) into OUT.csv and the METG table (bench/taskbench/metg.py) on stdout.
# Usage: bench/taskbench/run.sh BUILD_DIR OUT.csv [MAX_GRAIN MIN_GRAIN SECONDS]
set -u
B=$(cd "${1:?usage: run.sh BUILD_DIR OUT.csv}" && pwd)
out=${2:?usage: run.sh BUILD_DIR OUT.csv}
here=$(cd "$(dirname "$0")" && pwd)
args="${3:-65536} ${4:-16} ${5:-0.05}"
tmp=$(mktemp -d /tmp/tsr-taskbench-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# the schedulers as StarPU ships them (one process would otherwise run Tessera's idle-sleeping copy)
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 TESSERA_IDLE=${TESSERA_IDLE:-spin}
: >"$out"
for sched in ${SCHEDS:-lws dmdas eager}; do
  for n in ${RANKS:-1 2}; do
    echo "# $sched, $n rank(s), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out"
    if [ $n = 1 ]; then
      STARPU_SCHED=$sched STARPU_NCPU=2 "$B/bench/taskbench/taskbench" $args
    else
      mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_HOME -x STARPU_SILENT -x STARPU_WORKERS_NOBIND \
        -x STARPU_MPI_NOBIND -x TESSERA_IDLE -x STARPU_SCHED=$sched -x STARPU_NCPU=1 "$B/bench/taskbench/taskbench" $args
    fi | awk -v s="$sched" -F, '/^#/ || /^pattern/ { print; next } { print $0 "," s }' >>"$out"
  done
done
python3 "$here/metg.py" "$out"

#!/usr/bin/env bash
# Instructions per task of the task layer, load-independent: taskbench under callgrind, Tessera's
# submit and bare StarPU, each at two step counts (T1, T2) of the same pattern, grain and width; the
# difference of the instruction counts over the tasks between (W x (T2 - T1), W = 4 x workers)
# cancels start-up and shutdown. Printed per thread group: the submitting thread (`submit`), the rest
# (`workers`: CPU workers, StarPU's other threads, polling included) and their sum, with Tessera's
# extra over bare StarPU. The submitting thread's count repeats to a few instructions; the workers'
# varies with how long idle workers poll under valgrind's serialised threads (a burst adds thousands
# of instructions per task), so each count is the least over REPS runs (default 2). Each valgrind
# run takes a few seconds.
# Usage: bench/taskbench/instructions.sh BUILD_DIR [PATTERN [GRAIN [T1 T2]]]   (STARPU_SCHED, default lws;
# STARPU_NCPU, default 2; KEEP=DIR keeps the callgrind files there for callgrind_annotate; LAUNCH: a
# prefix, e.g. "mpirun -np 1 -x STARPU_HOME -x STARPU_SCHED -x STARPU_NCPU" for StarPU-MPI on one rank)
set -eu
B=$(cd "${1:?usage: instructions.sh BUILD_DIR [PATTERN [GRAIN [T1 T2]]]}" && pwd)
pat=${2:-stencil_1d} grain=${3:-64} t1=${4:-100} t2=${5:-300}
tmp=$(mktemp -d /tmp/tsr-tbcg-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
dir=${KEEP:-$tmp}
mkdir -p "$dir"
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 STARPU_SCHED=${STARPU_SCHED:-lws} STARPU_NCPU=${STARPU_NCPU:-2}
w=$((4 * STARPU_NCPU))
# one untimed run first: StarPU calibrates its bus in a fresh STARPU_HOME
"$B/bench/taskbench/taskbench" "$grain" "$grain" 0.05 "$pat" starpu 8 >/dev/null
count() { # VARIANT STEPS -> "submitting_thread other_threads", each the least over $REPS runs
  for r in $(seq 1 "${REPS:-2}"); do
    local f=$dir/cg.$pat.$STARPU_SCHED.$1.$2.$r
    ${LAUNCH:-} valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$f" \
      "$B/bench/taskbench/taskbench" "$grain" "$grain" 0.05 "$pat" "$1" "$2" >/dev/null 2>"$f.log"
    awk '/^totals:/ { if (FILENAME ~ /-01$/) m += $2; else o += $2 } END { print m, o }' "$f"-[0-9]*
  done | sort -n -k2 | head -1
}
echo "# $pat, grain $grain, width $w, steps $t1 and $t2, STARPU_SCHED=$STARPU_SCHED, STARPU_NCPU=$STARPU_NCPU"
echo "variant,submit_per_task,workers_per_task,total_per_task"
n=$((w * (t2 - t1)))
for v in starpu tessera; do
  read -r m1 o1 <<<"$(count $v "$t1")"
  read -r m2 o2 <<<"$(count $v "$t2")"
  eval "m_$v=$((m2 - m1)) o_$v=$((o2 - o1))"
  awk -v v=$v -v n=$n -v m=$((m2 - m1)) -v o=$((o2 - o1)) 'BEGIN { printf "%s,%.0f,%.0f,%.0f\n", v, m / n, o / n, (m + o) / n }'
done
awk -v n=$n -v m=$((m_tessera - m_starpu)) -v o=$((o_tessera - o_starpu)) \
  'BEGIN { printf "tessera-starpu,%.0f,%.0f,%.0f\n", m / n, o / n, (m + o) / n }'

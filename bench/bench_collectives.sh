#!/usr/bin/env bash
# One gradient reduction of several sizes by each algorithm (ring, recursive doubling, binomial tree,
# hierarchical, halving-doubling, hierarchical with halving-doubling) at 2 and 4 ranks: bench/bench_collectives under mpirun, the algorithms alternating
# round by round; the median time of one reduction, the bytes rank 0 sent, the alpha-beta model's
# estimate on the links measured at start-up and what "auto" picks. On one machine the ranks share
# memory; nodes of 2 ranks are emulated for "hier" and "hier-rh" (TESSERA_NODE_SIZE=2). With NETLAB=path/to/netlab
# (as root) the runs go over an emulated cluster instead: 2 nodes of RANKS/2 ranks joined by links
# of RATE, shared memory inside a node (NETLAB_OPTS: more netlab options; "--cpus all" by default,
# as StarPU-MPI finds no CPU for a worker when 2 nodes split 2 cores).
# Usage: bench/bench_collectives.sh [BUILD_DIR]
#   (env: RANKS="2 4" SIZES=1K,16K,256K,4M REPS=15 ALGOS=ring,rd,tree,hier,rabenseifner,hier-rh NETLAB= RATE=1gbit
#    NETLAB_OPTS="--cpus all")
set -euo pipefail
build=${1:-build}
RANKS=${RANKS:-2 4} SIZES=${SIZES:-1K,16K,256K,4M} REPS=${REPS:-15} ALGOS=${ALGOS:-ring,rd,tree,hier,rabenseifner,hier-rh}
RATE=${RATE:-1gbit} NETLAB=${NETLAB:-} NETLAB_OPTS=${NETLAB_OPTS:---cpus all}
make -s -C "$build" bench/bench_collectives >/dev/null
bin=$(cd "$build" && pwd)/bench/bench_collectives
out=$(mktemp -d /tmp/tessera-bench-coll.XXXXXX)
trap 'rm -rf "$out"' EXIT
export STARPU_HOME=$out/starpu STARPU_SILENT=1
args=(--sizes "$SIZES" --reps "$REPS" --algos "$ALGOS")
echo "load before: $(uptime)"
for n in $RANKS; do
  if [ -n "$NETLAB" ]; then
    echo "== $n ranks: netlab, 2 nodes x $((n / 2)) ranks, links of $RATE"
    # shellcheck disable=SC2086
    "$NETLAB" run --nodes 2 --ranks-per-node $((n / 2)) --rate "$RATE" $NETLAB_OPTS -- \
      mpirun --allow-run-as-root --oversubscribe -np "$n" -x STARPU_HOME -x STARPU_SILENT "$bin" "${args[@]}"
  else
    echo "== $n ranks: shared memory, nodes of 2 ranks emulated for hier and hier-rh"
    TESSERA_NODE_SIZE=2 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 mpirun --allow-run-as-root --oversubscribe \
      -np "$n" -x STARPU_HOME -x STARPU_SILENT -x STARPU_WORKERS_NOBIND -x STARPU_MPI_NOBIND -x TESSERA_NODE_SIZE \
      "$bin" "${args[@]}"
  fi
done
echo "load after: $(uptime)"

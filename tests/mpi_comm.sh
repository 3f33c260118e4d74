#!/usr/bin/env bash
# Sub-communicators on 1 rank and under mpirun (4, 3, 2 and 6 ranks, oversubscribed; 6: halving-doubling
# folding 2 ranks into 4 that run two rounds, hier-rh over 3 nodes): splits by colour and key give the
# members MPI_Comm_split would, and every collective (ring, recursive doubling, tree, hierarchical,
# halving-doubling, hierarchical with halving-doubling, auto) in float32, bf16 and fp16 on them, all
# running at once for the same step, sums each communicator's buffer over its own members only and
# sends the bytes its formula says; float32 sums of inexact values are within (p - 1) 2^-24 sum |x|
# of the float64 sum and identical on every rank (tests/mpi_comm.c).
set -u
bin=${TESSERA_BUILDDIR:-.}/tests/mpi_comm
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
tmp=$(mktemp -d /tmp/tessera-comm-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1
fail=0
# one rank first, without mpirun: every communicator is this process alone (and StarPU's bus files
# get written once, not by several ranks at the same time)
# (timeouts only bound a hang: a run takes well under a second)
timeout 300 "$bin" >"$tmp/np1.log" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q 'every check held' "$tmp/np1.log"; then
  echo "PASS: 1 rank: every communicator is this process alone"
else
  echo "FAIL: 1 rank (exit status $rc)"
  cat "$tmp/np1.log"
  fail=1
fi
for n in 4 3 2 6; do
  if timeout 300 mpirun --allow-run-as-root --oversubscribe -np $n -x STARPU_HOME -x STARPU_SILENT "$bin" >"$tmp/np$n.log" 2>&1 &&
    [ "$(grep -c 'every check held' "$tmp/np$n.log")" = $n ]; then
    echo "PASS: $n ranks: sub-communicators split as MPI_Comm_split does and their collectives sum over their members only"
  else
    echo "FAIL: $n ranks: sub-communicators and their collectives"
    cat "$tmp/np$n.log"
    fail=1
  fi
done
exit $fail

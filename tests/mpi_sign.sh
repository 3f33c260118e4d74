#!/usr/bin/env bash
# The sign reductions (sign1, signp, signp_mean) on 1 rank and under mpirun at 2, 3 and 4 ranks
# (oversubscribed): each rank's own directions combined equal the reference computed from every
# rank's directions bitwise, the control word sums exactly, and the bytes counted equal the formula
# (tests/mpi_sign.c).
set -u
bin=${TESSERA_BUILDDIR:-.}/tests/mpi_sign
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
tmp=$(mktemp -d /tmp/tessera-sign-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1
fail=0
# (timeouts only bound a hang: a run takes well under a second)
if timeout 300 "$bin" >"$tmp/np1.log" 2>&1 && grep -q 'every check held' "$tmp/np1.log"; then
  echo "PASS: 1 rank: nothing to combine, the directions stay"
else
  echo "FAIL: 1 rank"; cat "$tmp/np1.log"; fail=1
fi
for n in 2 3 4; do
  if timeout 300 mpirun --allow-run-as-root --oversubscribe -np $n -x STARPU_HOME -x STARPU_SILENT "$bin" >"$tmp/np$n.log" 2>&1 &&
    [ "$(grep -c 'every check held' "$tmp/np$n.log")" = $n ]; then
    echo "PASS: $n ranks: votes and averages equal the reference of all ranks' directions bitwise; bytes as the formula"
  else
    echo "FAIL: $n ranks"; cat "$tmp/np$n.log"; fail=1
  fi
done
exit $fail

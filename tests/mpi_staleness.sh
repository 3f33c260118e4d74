#!/usr/bin/env bash
# Stale-synchronous training across ranks (tsr_trainer_opts.staleness, --staleness S), 2 ranks under
# mpirun with rank 1 slowed by TESSERA_SLOW_RANK=1:30 (a 30 ms sleep task per step; it changes no
# value): for S = 1 and 2 (and S = 1 at 4 ranks) every rank ends with identical parameters, equal
# (relative 1e-4) to a 1-rank run of the N-times batch with the same staleness, and the trace shows that no rank computed step u
# before the updates of step u - S - 1 (which wait for every rank's gradient of that step) were
# applied; S = 0 is the synchronous trainer bitwise (deterministic runs with and without the field);
# a deterministic run with S > 0 is refused on every rank naming both options. Every run is bounded
# by `timeout 300` (status 124).
set -u
. "$(dirname "$0")/script_common.sh"
bin=${TESSERA_BUILDDIR:-.}/tests/mpi_train
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
test_tmp ssp
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 TESSERA_HANG_DUMP=1
run() { # ranks out extra...
  local n=$1 out=$2; shift 2
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$n" -x STARPU_HOME -x STARPU_SILENT -x TESSERA_SLOW_RANK \
    "$bin" --batch 4 --steps 8 --out "$out" "$@" >"$out.log" 2>&1
}

export TESSERA_SLOW_RANK=
for s in 1 2; do
  "$bin" --batch 8 --steps 8 --out "$tmp/ref$s" --staleness "$s" >"$tmp/ref$s.log" 2>&1 ||
    { ko "staleness $s: 1-rank reference ran"; cat "$tmp/ref$s.log"; }
  if TESSERA_SLOW_RANK=1:30 run 2 "$tmp/ssp$s" --staleness "$s" --trace "$tmp/trace$s"; then ok "staleness $s: 2 ranks ran"
  else ko "staleness $s: 2 ranks ran"; cat "$tmp/ssp$s.log"; fi
  if cmp -s "$tmp/ssp$s.rank0.params" "$tmp/ssp$s.rank1.params"; then ok "staleness $s: both ranks hold identical parameters"
  else ko "staleness $s: both ranks hold identical parameters"; fi
  if "$bin" --compare "$tmp/ref$s.rank0.params" "$tmp/ssp$s.rank0.params" 1e-4 1e-6; then
    ok "staleness $s: 2 ranks equal a 1-rank run of the 2-times batch"
  else ko "staleness $s: 2 ranks equal a 1-rank run of the 2-times batch"; fi
  if "$bin" --check-ahead "$tmp/trace$s" "$s"; then ok "staleness $s: no rank ran more than $s steps ahead (trace)"
  else ko "staleness $s: no rank ran more than $s steps ahead (trace)"; fi
  # the checks of the checks: the trace of S = 1 breaks the bound of S = 0 (step u's loss always
  # precedes step u - 1's updates, submitted after it), and the 1-rank run with staleness differs
  # from the synchronous one
  if [ "$s" = 1 ]; then
    if ! "$bin" --check-ahead "$tmp/trace1" 0 >/dev/null 2>&1; then ok "the trace check fails staleness 1 against a bound of 0"
    else ko "the trace check fails staleness 1 against a bound of 0"; fi
    "$bin" --batch 8 --steps 8 --out "$tmp/sync" >"$tmp/sync.log" 2>&1
    if ! "$bin" --compare "$tmp/sync.rank0.params" "$tmp/ref1.rank0.params" 1e-4 1e-6 >/dev/null; then
      ok "staleness 1 trains differently from synchronous training"
    else ko "staleness 1 trains differently from synchronous training"; fi
  fi
done

# 4 ranks, rank 2 slowed, S = 1: against a 1-rank run of the 4-times batch, and the trace
"$bin" --batch 16 --steps 8 --out "$tmp/ref4" --staleness 1 >"$tmp/ref4.log" 2>&1 || ko "4-rank reference ran"
if TESSERA_SLOW_RANK=2:30 run 4 "$tmp/four" --staleness 1 --trace "$tmp/trace4" &&
  "$bin" --compare "$tmp/ref4.rank0.params" "$tmp/four.rank3.params" 1e-4 1e-6 &&
  cmp -s "$tmp/four.rank0.params" "$tmp/four.rank3.params" && "$bin" --check-ahead "$tmp/trace4" 1; then
  ok "staleness 1 at 4 ranks: equal to a 1-rank run, identical ranks, at most 1 step ahead"
else ko "staleness 1 at 4 ranks: equal to a 1-rank run, identical ranks, at most 1 step ahead"; cat "$tmp/four.log"; fi

# S = 0: the synchronous trainer, bitwise (deterministic mode fixes the order of sums); its trace
# shows lock-step: no step before the previous step's updates
run 2 "$tmp/det" --deterministic || ko "deterministic 2-rank run"
if run 2 "$tmp/zero" --deterministic --staleness 0 --trace "$tmp/trace0" && cmp -s "$tmp/det.rank0.params" "$tmp/zero.rank0.params" &&
  cmp -s "$tmp/det.rank0.losses" "$tmp/zero.rank0.losses"; then ok "staleness 0 is synchronous training bitwise"
else ko "staleness 0 is synchronous training bitwise"; fi
if "$bin" --check-ahead "$tmp/trace0" 0; then ok "staleness 0: lock-step in the trace"; else ko "staleness 0: lock-step in the trace"; fi

run 2 "$tmp/refused" --deterministic --staleness 1
rc=$?
if [ $rc = 3 ] && [ "$(grep -c 'staleness 1 (--staleness) does not work with deterministic mode' "$tmp/refused.log")" = 2 ]; then
  ok "staleness with --deterministic is refused on both ranks, naming both"
else ko "staleness with --deterministic is refused on both ranks, naming both (status $rc)"; cat "$tmp/refused.log"; fi

echo "mpi_staleness: $pass passed, $fail failed"
[ $fail = 0 ]

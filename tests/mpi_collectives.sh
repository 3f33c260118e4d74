#!/usr/bin/env bash
# The reduction algorithms in training under mpirun (2, 3 and 4 ranks, oversubscribed): recursive
# doubling, the binomial tree and the hierarchical one (nodes of 2 ranks emulated with
# TESSERA_NODE_SIZE=2: 2 nodes x 2 ranks at 4, nodes {0,1} and {2} at 3) each leave every rank with
# identical parameters, equal (relative 1e-4) to a 1-rank run of the N-times batch, and repeat
# bitwise in deterministic mode; in bf16 they keep the ranks identical within a stated tolerance of
# float32; "auto" picks by the link model: the ring on a link of tiny latency and bandwidth, recursive
# doubling on one of huge latency (TESSERA_LINK fixes the links so the choice is known). Every run
# is bounded by `timeout 300` (status 124), far beyond the seconds a run takes.
set -u
bin=${TESSERA_BUILDDIR:-.}/tests/mpi_train
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
tmp=$(mktemp -d /tmp/tessera-coll-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 TESSERA_NODE_SIZE=2 TESSERA_SKIP_ALLREDUCE=0
unset TESSERA_COLLECTIVE TESSERA_LINK
pass=0 fail=0
ok() { echo "PASS: $1"; pass=$((pass + 1)); }
ko() { echo "FAIL: $1"; fail=$((fail + 1)); }
run() { # ranks out extra...
  local n=$1 out=$2; shift 2
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$n" -x STARPU_HOME -x STARPU_SILENT -x TESSERA_NODE_SIZE \
    -x TESSERA_SKIP_ALLREDUCE ${TESSERA_LINK:+-x TESSERA_LINK} "$bin" --batch 4 --steps 6 --out "$out" "$@" >"$out.log" 2>&1
}
same_ranks() { # prefix n
  local r
  for ((r = 1; r < $2; r++)); do cmp -s "$1.rank0.params" "$1.rank$r.params" || return 1; done
}
check_run() { # what n prefix
  if run "$2" "$3" "${@:4}"; then ok "$1 ran"; else ko "$1 ran"; cat "$3.log"; fi
}

for n in 2 3 4; do
  "$bin" --batch $((4 * n)) --steps 6 --out "$tmp/ref$n" --deterministic >"$tmp/ref$n.log" 2>&1 ||
    ko "1-rank reference with batch $((4 * n)) ran"
  for algo in rd tree hier; do
    p=$tmp/$algo$n
    check_run "$n ranks, $algo" $n "$p" --deterministic --collective $algo
    if same_ranks "$p" $n; then ok "$n ranks, $algo: every rank holds identical parameters"
    else ko "$n ranks, $algo: every rank holds identical parameters"; fi
    if "$bin" --compare "$tmp/ref$n.rank0.params" "$p.rank0.params" 1e-4 1e-6; then
      ok "$n ranks, $algo: equal to a 1-rank run of the $n-times batch"
    else ko "$n ranks, $algo: equal to a 1-rank run of the $n-times batch"; fi
    if grep -q "^collectives\( $algo\)*$" "$p.rank0.stats"; then ok "$n ranks, $algo: every group reduced by $algo"
    else ko "$n ranks, $algo: every group reduced by $algo ($(grep collectives "$p.rank0.stats"))"; fi
  done
done

# Run to run in deterministic mode (3 ranks: recursive doubling's hand-over, a node of 1 rank).
for algo in rd tree hier; do
  check_run "3 ranks, $algo again" 3 "$tmp/${algo}3b" --deterministic --collective $algo
  if cmp -s "$tmp/${algo}3.rank0.params" "$tmp/${algo}3b.rank0.params" &&
    cmp -s "$tmp/${algo}3.rank0.losses" "$tmp/${algo}3b.rank0.losses"; then
    ok "3 ranks, $algo: deterministic runs are bitwise identical"
  else ko "3 ranks, $algo: deterministic runs are bitwise identical"; fi
done

# bf16 on the wire with each algorithm (3 ranks): at most 3 roundings of a gradient (hand-over,
# exchange, result), so within 6 steps x 2 x 1.5 x 2^-8 x lr 1e-2 = 7.0e-4 of the float32 run.
for algo in rd tree hier; do
  p=$tmp/${algo}bf
  check_run "3 ranks, $algo in bf16" 3 "$p" --deterministic --collective $algo --grad-reduce bf16
  if same_ranks "$p" 3; then ok "3 ranks, $algo in bf16: every rank holds identical parameters"
  else ko "3 ranks, $algo in bf16: every rank holds identical parameters"; fi
  if "$bin" --compare "$tmp/${algo}3.rank0.params" "$p.rank0.params" 0 7.0e-4 && ! cmp -s "$tmp/${algo}3.rank0.params" "$p.rank0.params"; then
    ok "3 ranks, $algo in bf16: within 7.0e-4 of float32 and not equal to it"
  else ko "3 ranks, $algo in bf16: within 7.0e-4 of float32 and not equal to it"; fi
  if grep -q "control_word_exact 1" "$p.rank2.stats"; then ok "3 ranks, $algo in bf16: the control word sums exactly"
  else ko "3 ranks, $algo in bf16: the control word sums exactly"; fi
done

# auto: 4 ranks on one node, links fixed. 1 ns + 0.001 Gbit/s: bytes dominate, the ring sends
# least (1.5 group sizes against 2 for recursive doubling); 1 ms + 100 Gbit/s: messages dominate,
# recursive doubling sends fewest (2 rounds against the ring's 6 and the tree's 4).
for link in 0.001,0.001:ring 1000,100:rd; do
  want=${link#*:}
  export TESSERA_LINK=${link%:*}
  p=$tmp/auto$want
  TESSERA_NODE_SIZE=4 check_run "4 ranks, auto on a link of $TESSERA_LINK" 4 "$p" --deterministic --collective auto
  if same_ranks "$p" 4 && "$bin" --compare "$tmp/ref4.rank0.params" "$p.rank0.params" 1e-4 1e-6; then
    ok "4 ranks, auto: identical parameters on every rank, equal to the 1-rank run"
  else ko "4 ranks, auto: identical parameters on every rank, equal to the 1-rank run"; fi
  if grep -q "^collectives\( $want\)*$" "$p.rank0.stats" && grep -q "^collectives\( $want\)*$" "$p.rank3.stats"; then
    ok "4 ranks, auto on a link of $TESSERA_LINK: every group by $want on every rank"
  else ko "4 ranks, auto on a link of $TESSERA_LINK: every group by $want ($(grep collectives "$p.rank0.stats"))"; fi
done
unset TESSERA_LINK

run 2 "$tmp/bad" --collective ring2
if grep -q "collective 'ring2' (.*ring, rd, tree, hier, .*or auto)" "$tmp/bad.log"; then
  ok "an unknown collective is refused by name"
else ko "an unknown collective is refused by name"; cat "$tmp/bad.log"; fi

TESSERA_SKIP_ALLREDUCE=1 run 3 "$tmp/skip" --deterministic --collective rd
if ! same_ranks "$tmp/skip" 3; then ok "without reductions the ranks diverge (the checks above can fail)"
else ko "without reductions the ranks diverge (the checks above can fail)"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]

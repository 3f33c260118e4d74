#!/usr/bin/env bash
# The reduction algorithms in training under mpirun (2, 3 and 4 ranks, oversubscribed): recursive
# doubling, the binomial tree, the hierarchical one, recursive halving-doubling (rabenseifner) and
# the hierarchical one with halving-doubling across nodes (hier-rh) (nodes of 2 ranks emulated with
# TESSERA_NODE_SIZE=2: 2 nodes x 2 ranks at 4, nodes {0,1} and {2} at 3, which hier-rh refuses)
# each leave every rank with identical parameters, equal (relative 1e-4) to a 1-rank run of the
# N-times batch, and repeat bitwise in deterministic mode; in bf16 they keep the ranks identical
# within a stated tolerance of float32; "auto" picks by the link model: halving-doubling on a link
# of tiny latency and bandwidth at 4 ranks on one node (the ring's bytes in fewer messages), the
# ring at 3 (fewer bytes than the fold of halving-doubling), recursive doubling on one of huge
# latency, hier-rh with 2 nodes x 2 ranks on a slow link between nodes (TESSERA_LINK fixes the
# links so the choice is known). Every run is bounded by `timeout 300` (status 124), far beyond
# the seconds a run takes.
set -u
. "$(dirname "$0")/script_common.sh"
bin=${TESSERA_BUILDDIR:-.}/tests/mpi_train
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
test_tmp coll
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 TESSERA_NODE_SIZE=2 TESSERA_SKIP_ALLREDUCE=0
unset TESSERA_COLLECTIVE TESSERA_LINK
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
  for algo in rd tree hier rabenseifner hier-rh; do
    p=$tmp/$algo$n
    if [ $algo = hier-rh ] && [ $n = 3 ]; then # nodes {0,1} and {2}
      run $n "$p" --deterministic --collective $algo
      if grep -q "hier-rh: the nodes do not all have the same number of ranks" "$p.log"; then
        ok "3 ranks, hier-rh on nodes of 2 and 1 ranks: refused, saying why"
      else ko "3 ranks, hier-rh on nodes of 2 and 1 ranks: refused, saying why"; cat "$p.log"; fi
      continue
    fi
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

# halving-doubling adds along recursive doubling's tree: the same bits (4 ranks; 3: with the fold)
for n in 3 4; do
  if cmp -s "$tmp/rd$n.rank0.params" "$tmp/rabenseifner$n.rank0.params"; then
    ok "$n ranks, rabenseifner: bitwise equal to rd"
  else ko "$n ranks, rabenseifner: bitwise equal to rd"; fi
done

# Run to run in deterministic mode (3 ranks: recursive doubling's hand-over, a node of 1 rank;
# hier-rh at 4, its smallest even nodes of several ranks).
nr() { if [ "$1" = hier-rh ]; then echo 4; else echo 3; fi; }
for algo in rd tree hier rabenseifner hier-rh; do
  n=$(nr $algo)
  check_run "$n ranks, $algo again" $n "$tmp/${algo}${n}b" --deterministic --collective $algo
  if cmp -s "$tmp/${algo}$n.rank0.params" "$tmp/${algo}${n}b.rank0.params" &&
    cmp -s "$tmp/${algo}$n.rank0.losses" "$tmp/${algo}${n}b.rank0.losses"; then
    ok "$n ranks, $algo: deterministic runs are bitwise identical"
  else ko "$n ranks, $algo: deterministic runs are bitwise identical"; fi
done

# bf16 on the wire with each algorithm (3 ranks; hier-rh 4): at most 3 roundings of a gradient
# (hand-over, exchange, result), so within 6 steps x 2 x 1.5 x 2^-8 x lr 1e-2 = 7.0e-4 of the
# float32 run.
for algo in rd tree hier rabenseifner hier-rh; do
  p=$tmp/${algo}bf n=$(nr $algo)
  check_run "$n ranks, $algo in bf16" $n "$p" --deterministic --collective $algo --grad-reduce bf16
  if same_ranks "$p" $n; then ok "$n ranks, $algo in bf16: every rank holds identical parameters"
  else ko "$n ranks, $algo in bf16: every rank holds identical parameters"; fi
  if "$bin" --compare "$tmp/${algo}$n.rank0.params" "$p.rank0.params" 0 7.0e-4 && ! cmp -s "$tmp/${algo}$n.rank0.params" "$p.rank0.params"; then
    ok "$n ranks, $algo in bf16: within 7.0e-4 of float32 and not equal to it"
  else ko "$n ranks, $algo in bf16: within 7.0e-4 of float32 and not equal to it"; fi
  if grep -q "control_word_exact 1" "$p.rank2.stats"; then ok "$n ranks, $algo in bf16: the control word sums exactly"
  else ko "$n ranks, $algo in bf16: the control word sums exactly"; fi
done

# auto, links fixed. 4 ranks on one node, 1 ns + 0.001 Gbit/s: bytes dominate; the ring and
# halving-doubling both send 1.5 group sizes, halving-doubling in 4 messages against 6 (recursive
# doubling: 2 group sizes); 3 ranks on one node, the same link: the ring sends 4/3 group sizes,
# halving-doubling 3 (its fold hands a whole group over and back); 1 ms + 100 Gbit/s: messages
# dominate, recursive doubling sends fewest (2 rounds against the ring's 6 and the tree's 4);
# 2 nodes x 2 ranks, 1 ms + 0.001 Gbit/s between nodes and 1 ns + 1000 Gbit/s inside: hier-rh puts
# half a group across nodes in 2 messages (hier: a whole one, the ring: 1.5 in 6).
for link in 4:4:0.001,0.001:rabenseifner 3:3:0.001,0.001:ring 4:4:1000,100:rd 4:2:1000,0.001,0.001,1000:hier-rh; do
  n=${link%%:*} rest=${link#*:}
  node=${rest%%:*} rest=${rest#*:}
  want=${rest#*:}
  export TESSERA_LINK=${rest%:*}
  p=$tmp/auto$want
  TESSERA_NODE_SIZE=$node check_run "$n ranks, auto on a link of $TESSERA_LINK" $n "$p" --deterministic --collective auto
  if same_ranks "$p" $n && "$bin" --compare "$tmp/ref$n.rank0.params" "$p.rank0.params" 1e-4 1e-6; then
    ok "$n ranks, auto: identical parameters on every rank, equal to the 1-rank run"
  else ko "$n ranks, auto: identical parameters on every rank, equal to the 1-rank run"; fi
  if grep -q "^collectives\( $want\)*$" "$p.rank0.stats" && grep -q "^collectives\( $want\)*$" "$p.rank$((n - 1)).stats"; then
    ok "$n ranks, auto on a link of $TESSERA_LINK: every group by $want on every rank"
  else ko "$n ranks, auto on a link of $TESSERA_LINK: every group by $want ($(grep collectives "$p.rank0.stats"))"; fi
done
unset TESSERA_LINK

run 2 "$tmp/bad" --collective ring2
if grep -q "collective 'ring2' (.*ring, rd, tree, hier, .*or auto)" "$tmp/bad.log"; then
  ok "an unknown collective is refused by name"
else ko "an unknown collective is refused by name"; cat "$tmp/bad.log"; fi

TESSERA_SKIP_ALLREDUCE=1 run 3 "$tmp/skip" --deterministic --collective rd
if ! same_ranks "$tmp/skip" 3; then ok "without reductions the ranks diverge (the checks above can fail)"
else ko "without reductions the ranks diverge (the checks above can fail)"; fi

tests_done

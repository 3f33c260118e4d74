#!/usr/bin/env bash
# Lion Cub's sign reductions in training (tests/mpi_train.c under mpirun, oversubscribed): with the
# same samples on every rank, 1-bit (sign1) and p-bit (signp vote, signp_mean average) Lion equal a
# 1-rank Lion run bitwise at 2, 3 and 4 ranks (every rank's direction is the same, so the vote and
# the average are that direction); momentum averaging every 2 steps keeps that at 2 ranks (x + x and
# its half are exact); with a different share of the batch per rank, every rank still ends with
# identical parameters (and, as a check of the checks, others than the 1-rank run's), and the
# control word sums exactly; averaging the momenta of chosen layers only makes those equal across
# ranks and adds their float32 bytes; momentum averaging without a sign reduction, Adam with one and
# one with reductions in alternate blocks of steps are refused.
set -u
. "$(dirname "$0")/script_common.sh"
bin=${TESSERA_BUILDDIR:-.}/tests/mpi_train
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
test_tmp lion
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1
run() { # ranks out extra...
  local n=$1 out=$2; shift 2
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$n" -x STARPU_HOME -x STARPU_SILENT \
    "$bin" --batch 4 --steps 6 --deterministic --lion --out "$out" "$@" >"$out.log" 2>&1
}
same_ranks() { # prefix n
  local r
  for ((r = 1; r < $2; r++)); do cmp -s "$1.rank0.params" "$1.rank$r.params" || return 1; done
}
exact_word() { # prefix n
  local r
  for ((r = 0; r < $2; r++)); do grep -q "control_word_exact 1" "$1.rank$r.stats" || return 1; done
}

"$bin" --batch 4 --steps 6 --deterministic --lion --out "$tmp/ref" >"$tmp/ref.log" 2>&1 || { ko "1-rank Lion ran"; cat "$tmp/ref.log"; }
for n in 2 3 4; do
  for red in sign1 signp signp_mean; do
    if run $n "$tmp/$red$n" --same-data --grad-reduce $red; then ok "$n ranks, $red ran"
    else ko "$n ranks, $red ran"; cat "$tmp/$red$n.log"; continue; fi
    if same_ranks "$tmp/$red$n" $n && cmp -s "$tmp/ref.rank0.params" "$tmp/$red$n.rank0.params" &&
      cmp -s "$tmp/ref.rank0.losses" "$tmp/$red$n.rank0.losses"; then
      ok "$n ranks, same data, $red: parameters and losses equal 1-rank Lion's bitwise"
    else ko "$n ranks, same data, $red: parameters and losses equal 1-rank Lion's bitwise"; fi
    exact_word "$tmp/$red$n" $n && ok "$n ranks, $red: the control word sums exactly" ||
      ko "$n ranks, $red: the control word sums exactly"
  done
  if run $n "$tmp/diff$n" --grad-reduce sign1 && same_ranks "$tmp/diff$n" $n && exact_word "$tmp/diff$n" $n; then
    ok "$n ranks, own data, sign1: every rank holds identical parameters"
  else ko "$n ranks, own data, sign1: every rank holds identical parameters"; cat "$tmp/diff$n.log"; fi
  if ! cmp -s "$tmp/ref.rank0.params" "$tmp/diff$n.rank0.params"; then ok "$n ranks: other data gives other parameters"
  else ko "$n ranks: other data gives other parameters (the comparison cannot tell)"; fi
done
# momentum averaging every 2 steps: same data at 2 ranks is exact; own data keeps ranks identical
if run 2 "$tmp/sync2" --same-data --grad-reduce sign1 --momentum-sync 2 && cmp -s "$tmp/ref.rank0.params" "$tmp/sync2.rank0.params"; then
  ok "2 ranks, same data, sign1 with momentum averaging: equal to 1-rank Lion bitwise"
else ko "2 ranks, same data, sign1 with momentum averaging: equal to 1-rank Lion bitwise"; cat "$tmp/sync2.log"; fi
b1=$(awk '$1 == "reduce_bytes" { print $2 }' "$tmp/sign12.rank0.stats")
b2=$(awk '$1 == "reduce_bytes" { print $2 }' "$tmp/sync2.rank0.stats")
[ -n "$b1" ] && [ "$b2" -gt "$b1" ] 2>/dev/null && ok "momentum averaging adds its float32 bytes ($b1 -> $b2)" ||
  ko "momentum averaging adds its float32 bytes ($b1 -> $b2)"
if run 3 "$tmp/sync3" --grad-reduce signp --momentum-sync 2 && same_ranks "$tmp/sync3" 3; then
  ok "3 ranks, own data, signp with momentum averaging: every rank holds identical parameters"
else ko "3 ranks, own data, signp with momentum averaging: identical parameters"; cat "$tmp/sync3.log"; fi
# momentum averaging of chosen layers only (momentum_sync_layers "a,out": two runs of tensors apart,
# b between them): after the last step (6, an averaging step of period 2) the chosen tensors'
# momenta are equal on both ranks and b's differ (own data per rank); each of the 3 averagings adds
# 2 (N - 1)/N x 4 bytes per float of the chosen tensors (padded to 16 floats) to sign1's bytes: at
# 2 ranks 4 bytes a float
if run 2 "$tmp/sel2" --grad-reduce sign1 --momentum-sync 2 --momentum-sync-layers a,out --moments; then
  same=1 differ=1 floats=0
  for t in a.weight a.bias out.weight out.bias; do
    cmp -s "$tmp/sel2.rank0.m.$t" "$tmp/sel2.rank1.m.$t" || same=0
    n=$(($(stat -c %s "$tmp/sel2.rank0.m.$t") / 4)); floats=$((floats + (n + 15) / 16 * 16))
  done
  for t in b.weight b.bias; do cmp -s "$tmp/sel2.rank0.m.$t" "$tmp/sel2.rank1.m.$t" && differ=0; done
  [ $same = 1 ] && ok "2 ranks, own data, momenta of chosen layers a, out equal on both ranks" ||
    ko "2 ranks, own data, momenta of chosen layers a, out equal on both ranks"
  [ $differ = 1 ] && ok "2 ranks, own data, momenta of the other layer b differ" ||
    ko "2 ranks, own data, momenta of the other layer b differ"
  b1=$(awk '$1 == "reduce_bytes" { print $2 }' "$tmp/diff2.rank0.stats")
  b3=$(awk '$1 == "reduce_bytes" { print $2 }' "$tmp/sel2.rank0.stats")
  [ -n "$b1" ] && [ "$b3" = $((b1 + 3 * 4 * floats)) ] && ok "chosen layers' averaging bytes: $b1 + 3 x 4 x $floats = $b3" ||
    ko "chosen layers' averaging bytes: $b1 + 3 x 4 x $floats = $b3"
else ko "2 ranks, sign1 with momentum averaging of layers a, out ran"; cat "$tmp/sel2.log"; fi
if run 2 "$tmp/sels" --same-data --grad-reduce sign1 --momentum-sync 2 --momentum-sync-layers 'o*,a.bias' &&
  cmp -s "$tmp/ref.rank0.params" "$tmp/sels.rank0.params"; then
  ok "2 ranks, same data, sign1 with averaging of chosen layers: equal to 1-rank Lion bitwise"
else ko "2 ranks, same data, sign1 with averaging of chosen layers: equal to 1-rank Lion bitwise"; cat "$tmp/sels.log"; fi
# chosen layers need a period and must name a tensor with parameters (checked at 1 rank too)
"$bin" --batch 4 --steps 1 --lion --out "$tmp/nop" --momentum-sync-layers a >"$tmp/nop.log" 2>&1
grep -q "momentum_sync_layers 'a' needs momentum_sync_every" "$tmp/nop.log" && ok "chosen layers without a period are refused" ||
  { ko "chosen layers without a period are refused"; cat "$tmp/nop.log"; }
"$bin" --batch 4 --steps 1 --lion --out "$tmp/nom" --momentum-sync 2 --momentum-sync-layers 'ra,zz*' >"$tmp/nom.log" 2>&1
grep -q "momentum_sync_layers 'ra,zz\*' matches no layer" "$tmp/nom.log" && ok "patterns naming no tensor with parameters are refused" ||
  { ko "patterns naming no tensor with parameters are refused"; cat "$tmp/nom.log"; }
# momentum averaging needs a sign reduction (under a float one every rank already holds the same
# momenta), refused the same at 1 and 2 ranks, naming the key, the option and the reduction
"$bin" --batch 4 --steps 1 --lion --out "$tmp/nof" --momentum-sync 2 >"$tmp/nof.log" 2>&1
grep -q "momentum_sync_every 2 needs a sign reduction (grad_reduce, --grad-reduce: sign1, signp or signp_mean), got gradient reduction 'f32'" \
  "$tmp/nof.log" && ok "1 rank: momentum averaging under f32 is refused" ||
  { ko "1 rank: momentum averaging under f32 is refused"; cat "$tmp/nof.log"; }
if run 2 "$tmp/nob" --grad-reduce bf16 --momentum-sync 3 --momentum-sync-layers a; then
  ko "2 ranks: momentum averaging under bf16 is refused"
else
  grep -q "momentum_sync_every 3 needs a sign reduction .*got gradient reduction 'bf16'" "$tmp/nob.log" &&
    ok "2 ranks: momentum averaging under bf16 is refused" ||
    { ko "2 ranks: momentum averaging under bf16 is refused"; cat "$tmp/nob.log"; }
fi
# reductions in alternate blocks of steps (a benchmark aid) cannot go with a sign reduction, whose
# momenta stay in step across ranks only through every step's vote
if TESSERA_SKIP_ALLREDUCE=alternate:2 run 2 "$tmp/alt" --grad-reduce sign1; then
  ko "sign1 with TESSERA_SKIP_ALLREDUCE=alternate:2 is refused"
else
  grep -q "skip_reduce_block 2 (reductions in alternate blocks of steps) cannot go with sign reductions" "$tmp/alt.log" &&
    ok "sign1 with TESSERA_SKIP_ALLREDUCE=alternate:2 is refused naming both" ||
    { ko "sign1 with TESSERA_SKIP_ALLREDUCE=alternate:2 is refused naming both"; cat "$tmp/alt.log"; }
fi
# a sign reduction needs an optimizer that splits its update
if timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_HOME -x STARPU_SILENT "$bin" --batch 4 \
  --steps 2 --out "$tmp/adam" --grad-reduce sign1 >"$tmp/adam.log" 2>&1; then
  ko "Adam with sign1 is refused"
else
  grep -q "combines update directions: optimizer adam has none" "$tmp/adam.log" &&
    ok "Adam with sign1 is refused naming both" || { ko "Adam with sign1 is refused naming both"; cat "$tmp/adam.log"; }
fi
tests_done

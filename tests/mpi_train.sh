#!/usr/bin/env bash
# Multi-rank training under mpirun (2 and 4 ranks, oversubscribed): every rank ends with identical
# parameters, equal (relative 1e-4) to a 1-rank run of the N-times batch; deterministic runs repeat
# bitwise; bf16/fp16 reductions keep ranks identical, stay within a stated tolerance of float32 ones
# and send half the bytes; fp16 reductions with dynamic loss scaling skip overflowing steps alike on
# all ranks; a model that differs on one rank stops every rank with an error naming the layer (and
# does not hang: every run is bounded by `timeout 300`, status 124, far beyond the seconds a run
# takes); StarPU-MPI's progress as worker 0 (the default) and as a thread of its own give bitwise the
# same deterministic runs; as a check of the checks, skipping the reductions breaks the equality; and
# TESSERA_SKIP_ALLREDUCE=alternate:K skips them in every other block of K steps.
set -u
. "$(dirname "$0")/script_common.sh"
bin=${TESSERA_BUILDDIR:-.}/tests/mpi_train
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
test_tmp mpi
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 TESSERA_HANG_DUMP=1 # a rank past its step deadline prints its stacks
run() { # ranks out extra...
  local n=$1 out=$2; shift 2
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$n" -x STARPU_HOME -x STARPU_SILENT \
    -x TESSERA_SKIP_ALLREDUCE -x TESSERA_MPI_PROGRESS "$bin" --batch 4 --steps 6 --out "$out" "$@" >"$out.log" 2>&1
}
same_ranks() { # prefix n
  local r
  for ((r = 1; r < $2; r++)); do cmp -s "$1.rank0.params" "$1.rank$r.params" || return 1; done
}

export TESSERA_SKIP_ALLREDUCE=0 TESSERA_MPI_PROGRESS=worker
for n in 2 4; do
  "$bin" --batch $((4 * n)) --steps 6 --out "$tmp/ref$n" --deterministic >"$tmp/ref$n.log" 2>&1 ||
    ko "1-rank reference with batch $((4 * n)) ran"
  for kind in det det2 nondet; do
    flag=--deterministic; [ $kind = nondet ] && flag=
    if run $n "$tmp/$kind$n" $flag; then ok "$n ranks ($kind) ran"; else ko "$n ranks ($kind) ran"; cat "$tmp/$kind$n.log"; fi
    if same_ranks "$tmp/$kind$n" $n; then ok "$n ranks ($kind): every rank holds identical parameters"
    else ko "$n ranks ($kind): every rank holds identical parameters"; fi
    if "$bin" --compare "$tmp/ref$n.rank0.params" "$tmp/$kind$n.rank0.params" 1e-4 1e-6; then
      ok "$n ranks ($kind) equal a 1-rank run of the $n-times batch"
    else ko "$n ranks ($kind) equal a 1-rank run of the $n-times batch"; fi
  done
  if cmp -s "$tmp/det$n.rank0.params" "$tmp/det2$n.rank0.params" && cmp -s "$tmp/det$n.rank0.losses" "$tmp/det2$n.rank0.losses"; then
    ok "$n ranks: deterministic runs are bitwise identical"
  else ko "$n ranks: deterministic runs are bitwise identical"; fi
done

for n in 2 4; do
  if TESSERA_MPI_PROGRESS=thread run $n "$tmp/thread$n" --deterministic; then ok "$n ranks, progress thread: ran"
  else ko "$n ranks, progress thread: ran"; cat "$tmp/thread$n.log"; fi
  if cmp -s "$tmp/det$n.rank0.params" "$tmp/thread$n.rank0.params" && cmp -s "$tmp/det$n.rank0.losses" "$tmp/thread$n.rank0.losses"; then
    ok "$n ranks: progress as worker 0 and as a thread give bitwise the same run"
  else ko "$n ranks: progress as worker 0 and as a thread give bitwise the same run"; fi
done

# Gradient chunks on the wire in bf16/fp16, summed in float32 (2 ranks, deterministic, against the
# float32 run det2 above). Each of 6 Adam steps (lr 1e-2) moves a parameter by at most ~lr, and a
# relative gradient error e (two roundings: 2^-8 bf16, 2^-11 fp16) moves it by ~2 e lr more, so the
# parameters must agree within 6 * 2 * e * lr: 4.7e-4 (bf16), 5.9e-5 (fp16).
bytes() { awk '$1 == "reduce_bytes" { print $2 }' "$1"; }
for fmt in bf16:4.7e-4 fp16:5.9e-5; do
  tol=${fmt#*:} fmt=${fmt%:*}
  if run 2 "$tmp/$fmt" --deterministic --grad-reduce $fmt; then ok "2 ranks, $fmt reductions ran"
  else ko "2 ranks, $fmt reductions ran"; cat "$tmp/$fmt.log"; fi
  if same_ranks "$tmp/$fmt" 2; then ok "$fmt reductions: every rank holds identical parameters"
  else ko "$fmt reductions: every rank holds identical parameters"; fi
  if "$bin" --compare "$tmp/det22.rank0.params" "$tmp/$fmt.rank0.params" 0 "$tol"; then
    ok "$fmt reductions: parameters within $tol of the float32 reduction's"
  else ko "$fmt reductions: parameters within $tol of the float32 reduction's"; fi
  if grep -q "control_word_exact 1" "$tmp/$fmt.rank0.stats" && grep -q "control_word_exact 1" "$tmp/$fmt.rank1.stats"; then
    ok "$fmt reductions: the control word sums exactly (257 + 258 at every step)"
  else ko "$fmt reductions: the control word sums exactly (257 + 258 at every step)"; fi
  if ! cmp -s "$tmp/det22.rank0.params" "$tmp/$fmt.rank0.params"; then ok "$fmt reductions differ from float32 ones"
  else ko "$fmt reductions differ from float32 ones (they ran in float32?)"; fi
  b32=$(bytes "$tmp/det22.rank0.stats") b16=$(bytes "$tmp/$fmt.rank0.stats")
  # half the bytes, plus the float32 control word (16 floats: 32 bytes more per step and rank here)
  if [ -n "$b16" ] && [ -n "$b32" ] && [ $((2 * b16)) -le $((b32 + 6 * 64)) ] && [ $((2 * b16)) -ge "$b32" ]; then
    ok "$fmt reductions send half the bytes ($b16 against $b32)"
  else ko "$fmt reductions send half the bytes ($b16 against $b32)"; fi
done

# fp16 on the wire overflows beyond 65504: with a dynamic loss scale starting at 2^24 the first
# steps overflow on the wire and are skipped on every rank, the scale halves each time, and the run
# still trains.
if run 2 "$tmp/ls" --deterministic --grad-reduce fp16 --loss-scale dynamic --loss-scale-init 16777216 --steps 20; then
  ok "fp16 reductions with dynamic loss scaling ran"
else ko "fp16 reductions with dynamic loss scaling ran"; cat "$tmp/ls.log"; fi
skipped=$(awk '$1 == "skipped" { print $2 }' "$tmp/ls.rank0.stats") scale=$(awk '$1 == "scale" { print $2 }' "$tmp/ls.rank0.stats")
if same_ranks "$tmp/ls" 2 && cmp -s "$tmp/ls.rank0.stats" "$tmp/ls.rank1.stats" && [ "${skipped:-0}" -ge 1 ] &&
  [ "$skipped" -lt 20 ] && awk -v s="$scale" -v k="$skipped" 'BEGIN { exit !(s == 2^(24 - k)) }'; then
  ok "overflowing steps skipped alike on both ranks ($skipped of 20), scale halved to $scale"
else ko "overflowing steps skipped alike on both ranks (skipped ${skipped:-?}, scale ${scale:-?})"; fi
if od -An -v -tf4 "$tmp/ls.rank0.losses" | awk '{ for (i = 1; i <= NF; i++) l[n++] = $i } END { exit !(n == 20 && l[n - 1] < 0.5 * l[0]) }'; then
  ok "fp16 reductions with loss scaling train (last loss below half the first)"
else ko "fp16 reductions with loss scaling train (last loss below half the first)"; fi

start=$(date +%s)
run 2 "$tmp/mismatch" --variant-rank 1
rc=$? end=$(date +%s)
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1 has layer 'b' (conv2d -> \[6, 8, 8\])" "$tmp/mismatch.log" &&
  grep -q "rank 0: ranks disagree" "$tmp/mismatch.log"; then
  ok "a model differing on rank 1 stops every rank with an error naming layer 'b' ($((end - start)) s)"
else
  ko "a model differing on rank 1 stops every rank with an error naming layer 'b' (rc $rc, $((end - start)) s)"
  cat "$tmp/mismatch.log"
fi

# A rank that dies (SIGKILL) or hangs (SIGSTOP) must not leave the others waiting: the first is the
# launcher's job (mpirun aborts), the second the trainer's step deadline (TESSERA_STEP_TIMEOUT).
for sig in KILL STOP; do
  ( TESSERA_STEP_TIMEOUT=5 timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_HOME \
      -x STARPU_SILENT -x TESSERA_STEP_TIMEOUT "$bin" --batch 4 --steps 1000000 --mark-training \
      --out "$tmp/die$sig" >"$tmp/die$sig.log" 2>&1 ) &
  launcher=$!
  # once both ranks are training (3 steps done; a rank stopped in start-up would meet no step deadline)
  until [ -e "$tmp/die$sig.rank0.training" ] && [ -e "$tmp/die$sig.rank1.training" ]; do
    kill -0 $launcher 2>/dev/null || break
    sleep 0.05
  done
  victim=$(pgrep -f "^$bin --batch 4 --steps 1000000 --mark-training --out $tmp/die$sig" | sort -n | tail -1) # a rank
  start=$(date +%s)
  kill -$sig "$victim" 2>/dev/null
  wait $launcher
  rc=$? end=$(date +%s)
  if [ $rc -ne 0 ] && [ $rc -ne 124 ]; then
    ok "a rank stopped with SIG$sig makes the others exit with an error ($((end - start)) s)"
  else
    ko "a rank stopped with SIG$sig makes the others exit with an error (rc $rc, $((end - start)) s)"
    tail -5 "$tmp/die$sig.log"
  fi
  pkill -KILL -f "^$bin --batch 4 --steps 1000000 --mark-training --out $tmp/die$sig" 2>/dev/null
done
if grep -q "has probably died or hung" "$tmp/dieSTOP.log"; then ok "the step deadline names the problem"
else ko "the step deadline names the problem"; fi

TESSERA_SKIP_ALLREDUCE=1 run 2 "$tmp/skip" --deterministic
if ! same_ranks "$tmp/skip" 2; then ok "without reductions the ranks diverge (the checks above can fail)"
else ko "without reductions the ranks diverge (the checks above can fail)"; fi

# Reductions in alternate blocks of steps (benchmarks: one run measures with and without them).
# alternate:2 reduces steps 0-1 and 4-5, not 2-3: the losses of steps 0-2 (weights from reduced
# updates) are bitwise those of the deterministic 2-rank run above, step 3's (after step 2's update
# from this rank's gradient alone) is not. alternate:6 reduces all 6 steps: bitwise that run.
loss_bytes() { head -c "$2" "$1.rank0.losses" | od -An -tx1; } # prefix bytes (4 per step)
TESSERA_SKIP_ALLREDUCE=alternate:2 run 2 "$tmp/alt2" --deterministic || { ko "alternate:2 ran"; cat "$tmp/alt2.log"; }
if [ "$(loss_bytes "$tmp/alt2" 12)" = "$(loss_bytes "$tmp/det2" 12)" ] &&
  [ "$(loss_bytes "$tmp/alt2" 16)" != "$(loss_bytes "$tmp/det2" 16)" ] && ! same_ranks "$tmp/alt2" 2; then
  ok "alternate:2: steps 0-1 reduce (losses 0-2 as with reductions), steps 2-3 do not (loss 3 differs)"
else ko "alternate:2: steps 0-1 reduce (losses 0-2 as with reductions), steps 2-3 do not (loss 3 differs)"; fi
TESSERA_SKIP_ALLREDUCE=alternate:6 run 2 "$tmp/alt6" --deterministic
if cmp -s "$tmp/alt6.rank0.params" "$tmp/det2.rank0.params" && same_ranks "$tmp/alt6" 2; then
  ok "alternate:6 over 6 steps reduces every step (bitwise the run with reductions)"
else ko "alternate:6 over 6 steps reduces every step (bitwise the run with reductions)"; fi
TESSERA_SKIP_ALLREDUCE=alternate run 2 "$tmp/altbad"
if grep -q "TESSERA_SKIP_ALLREDUCE: 'alternate' takes a block of steps" "$tmp/altbad.log"; then
  ok "TESSERA_SKIP_ALLREDUCE=alternate without a block is refused by name"
else ko "TESSERA_SKIP_ALLREDUCE=alternate without a block is refused by name"; cat "$tmp/altbad.log"; fi

tests_done

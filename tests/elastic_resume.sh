#!/usr/bin/env bash
# Elastic resume: a checkpoint taken at an epoch end continues on another number of ranks. Each
# epoch's order is a permutation drawn from (seed, epoch) alone; at step k of an epoch, R ranks of
# batch b train on its positions [k R b, (k+1) R b), rank r on k R b + r + R i. So with R x b kept
# (2 x 4 -> 1 x 8, 1 x 12 -> 3 x 4) every step sees the samples of the uninterrupted run and the
# resumed run must end where it ends: validation losses within relative 1e-4 (as tests/mpi_train.sh
# for 2 ranks against 1) and parameters within $ptol (absolute; they are of order 0.1 to 1): the
# rounding of a different summation order. Resuming with another global batch (2 x 4 -> 1 x 4) runs, numbers its steps on from the
# checkpoint's, and lands elsewhere (the check of the checks); a checkpoint taken inside an epoch is
# refused on another rank count, naming both layouts. Model without batch norm or dropout (their
# statistics and masks are per rank).
set -u
. "$(dirname "$0")/train_fixture.sh"
need_mpirun
command -v h5diff >/dev/null || { echo "SKIP: h5diff not found (apt-get install hdf5-tools)"; exit 77; }
fixture_setup elastic 96
ptol=1e-5
cat >"$tmp/elastic.json" <<'JSON'
{"name": "elastic", "layers": [
  {"name": "in", "type": "input", "shape": [1, 16, 16]},
  {"name": "c1", "type": "conv2d", "out_channels": 6, "kernel": 3, "padding": 1},
  {"name": "r1", "type": "relu"},
  {"name": "c2", "type": "conv2d", "out_channels": 1, "kernel": 3, "padding": 1}],
 "loss": {"type": "mse"}, "optimizer": {"type": "sgd", "lr": 0.02, "momentum": 0.9}}
JSON
"$gen" --out "$tmp/val.h5" --samples 24 --size 16 --seed 4 -q || { echo "FAIL: tessera-datagen"; exit 1; }
common=(--model "$tmp/elastic.json" --data "$tmp/data.h5" --val "$tmp/val.h5" --deterministic --seed 5 --workers 1 --slices 2)
mpi() { # ranks args...
  local n=$1
  shift
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$n" -x STARPU_HOME -x STARPU_SILENT -x STARPU_WORKERS_NOBIND \
    -x STARPU_MPI_NOBIND "$train" "${common[@]}" "$@"
}
export STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1
warm_bus "${common[@]}" --batch 8

# val_losses LOG: the validation losses of epochs 2 and 3
val_losses() { awk -F, 'NR > 1 && $1 >= 2 { print $4 }' "$1"; }
# close A B: every pair of numbers within relative 1e-4
close() { paste -d' ' <(val_losses "$1") <(val_losses "$2") |
  awk 'NF != 2 { exit 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * ($2 < 0 ? -$2 : $2)) exit 1; n++ } END { exit n != 2 }'; }

# maxdiff A B: the largest difference between the parameters of runs A and B
maxdiff() { h5diff -r -d 0 "$1/params.h5" "$2/params.h5" | awk '$1 == "[" { d = $NF < 0 ? -$NF : $NF; if (d > m) m = d } END { print m + 0 }'; }
# elastic NAME FROM_RANKS FROM_BATCH TO_RANKS TO_BATCH: epoch 1 on one layout, epochs 2-3 on the other
elastic() {
  local d=$tmp/$1
  mkdir -p "$d"
  if mpi "$2" --batch "$3" --epochs 1 --checkpoint-dir "$d/ck" --log "$d/log.csv" >"$d/run1.log" 2>&1 &&
    mpi "$4" --batch "$5" --epochs 3 --checkpoint-dir "$d/ck" --resume --log "$d/log.csv" \
      --export-params "$d/params.h5" >"$d/run2.log" 2>&1; then
    ok "$1: epoch 1 on $2 x $3, resumed on $4 x $5 for epochs 2-3"
  else
    ko "$1: epoch 1 on $2 x $3, resumed on $4 x $5 for epochs 2-3"
    cat "$d/run1.log" "$d/run2.log"
  fi
}
# reference NAME RANKS BATCH: 3 epochs without a stop
reference() {
  mkdir -p "$tmp/$1"
  mpi "$2" --batch "$3" --epochs 3 --log "$tmp/$1/log.csv" --export-params "$tmp/$1/params.h5" >"$tmp/$1/run.log" 2>&1 ||
    { ko "reference $1 ($2 x $3) ran"; cat "$tmp/$1/run.log"; }
}

reference ref2 2 4
reference ref1 1 12
elastic e21 2 4 1 8
elastic e13 1 12 3 4
for c in e21:ref2 e13:ref1; do
  e=${c%:*} r=${c#*:}
  if grep -q "written on $( [ $e = e21 ] && echo "2 rank(s) x batch 4" || echo "1 rank(s) x batch 12")" "$tmp/$e/run2.log"; then
    ok "$e: the resumed run says it re-shards"
  else ko "$e: the resumed run says it re-shards"; cat "$tmp/$e/run2.log"; fi
  if close "$tmp/$e/log.csv" "$tmp/$r/log.csv"; then
    ok "$e: validation losses of epochs 2-3 equal the uninterrupted run's (relative 1e-4): $(val_losses "$tmp/$e/log.csv" | tr '\n' ' ')"
  else
    ko "$e: validation losses of epochs 2-3 equal the uninterrupted run's (relative 1e-4)"
    paste -d' ' <(val_losses "$tmp/$e/log.csv") <(val_losses "$tmp/$r/log.csv")
  fi
  if h5diff -d $ptol "$tmp/$e/params.h5" "$tmp/$r/params.h5" >/dev/null 2>&1; then
    ok "$e: parameters equal the uninterrupted run's (absolute $ptol; largest difference $(maxdiff "$tmp/$e" "$tmp/$r"))"
  else
    ko "$e: parameters equal the uninterrupted run's (absolute $ptol)"
    h5diff -d $ptol "$tmp/$e/params.h5" "$tmp/$r/params.h5" | head -5
  fi
done

# Another global batch: 12 steps per epoch become 24, numbered on from the checkpoint's 12.
elastic half 2 4 1 4
if [ "$(awk -F, 'NR > 1 { printf "%s ", $2 }' "$tmp/half/log.csv")" = "12 36 60 " ] &&
  [ -e "$tmp/half/ck/ckpt-000000000060.h5" ]; then
  ok "2 x 4 -> 1 x 4: steps numbered on from the checkpoint's (log steps 12 36 60, ckpt-...60.h5)"
else
  ko "2 x 4 -> 1 x 4: steps numbered on from the checkpoint's (log steps $(awk -F, 'NR > 1 { printf "%s ", $2 }' "$tmp/half/log.csv"))"
  ls "$tmp/half/ck"
fi
if ! close "$tmp/half/log.csv" "$tmp/ref2/log.csv" && ! h5diff -d $ptol "$tmp/half/params.h5" "$tmp/ref2/params.h5" >/dev/null 2>&1; then
  ok "with another global batch the run lands elsewhere (the comparisons above can fail; parameters $(maxdiff "$tmp/half" "$tmp/ref2") apart)"
else ko "with another global batch the run lands elsewhere (the comparisons above can fail)"; fi

# Inside an epoch: the newest checkpoint after step 5 of 12 (the epoch-end ones removed).
d=$tmp/mid
mpi 2 --batch 4 --epochs 1 --checkpoint-dir "$d" --checkpoint-every 5 --keep 0 >"$tmp/mid.log" 2>&1 ||
  { ko "2-rank run with a checkpoint every 5 steps"; cat "$tmp/mid.log"; }
rm -f "$d"/ckpt-000000000012.h5* "$d"/ckpt-000000000010.h5*
mpi 1 --batch 8 --epochs 2 --checkpoint-dir "$d" --resume >"$tmp/mid2.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
  grep -q "ckpt-000000000005.h5: taken inside epoch 1 (5 steps done) by a run on 2 rank(s) with batch 4; this run has 1 rank(s), batch 8" "$tmp/mid2.log" &&
  grep -q "one taken at an epoch end (position 0) continues with any" "$tmp/mid2.log"; then
  ok "a checkpoint taken inside an epoch is refused on another rank count: $(grep -o 'cannot resume.*batch 8' "$tmp/mid2.log")"
else
  ko "a checkpoint taken inside an epoch is refused on another rank count (rc $rc)"
  cat "$tmp/mid2.log"
fi
fixture_done

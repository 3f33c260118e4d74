#!/usr/bin/env bash
# tessera-train --async-slices: with one slice it repeats the synchronous step log bitwise (also
# with TESSERA_SLOW_RANK=slices:MS, whose sleep tasks change no value); with 2
# slices it trains with validation and checkpoints (which wait for every update), writes
# "async_slices": true into the effective configuration; a run file's async_slices with
# --deterministic is refused naming both; with batch normalisation one slice repeats the synchronous
# step log bitwise and two slices train with validation and checkpoints.
set -u
. "$(dirname "$0")/train_fixture.sh"
fixture_setup async 48
cp "$tmp/model.json" "$tmp/bn.json"
cat >"$tmp/model.json" <<'JSON'
{"name": "async", "layers": [
  {"name": "in", "type": "input", "shape": [1, 16, 16]},
  {"name": "c1", "type": "conv2d", "out_channels": 6, "kernel": 3, "padding": 1},
  {"name": "r1", "type": "relu"},
  {"name": "d1", "type": "dropout", "p": 0.1},
  {"name": "c2", "type": "conv2d", "out_channels": 1, "kernel": 3, "padding": 1}],
 "loss": {"type": "mse"}, "optimizer": {"type": "adam", "lr": 0.003}}
JSON
args=(--model "$tmp/model.json" --data "$tmp/data.h5" --val-fraction 0.25 --epochs 2 --batch 4 --workers 2 --seed 5 -q)

timeout 300 "$train" "${args[@]}" --slices 1 --step-log "$tmp/ref.csv" >"$tmp/ref.log" 2>&1 ||
  { cat "$tmp/ref.log"; ko "the reference run"; }
timeout 300 "$train" "${args[@]}" --slices 1 --async-slices --step-log "$tmp/one.csv" >"$tmp/one.log" 2>&1 ||
  { cat "$tmp/one.log"; ko "--async-slices --slices 1 ran"; }
if same_as_ref "$tmp/one.csv"; then ok "--async-slices with one slice repeats the synchronous step log bitwise"
else ko "--async-slices with one slice repeats the synchronous step log bitwise"; fi
TESSERA_SLOW_RANK=slices:5 timeout 300 "$train" "${args[@]}" --slices 1 --async-slices --step-log "$tmp/slow.csv" \
  >"$tmp/slow.log" 2>&1 || { cat "$tmp/slow.log"; ko "TESSERA_SLOW_RANK=slices:5 ran"; }
if same_as_ref "$tmp/slow.csv"; then ok "TESSERA_SLOW_RANK=slices:5 changes no value"
else ko "TESSERA_SLOW_RANK=slices:5 changes no value"; fi

timeout 300 "$train" "${args[@]}" --slices 2 --async-slices --checkpoint-dir "$tmp/ck" --checkpoint-every 3 \
  --step-log "$tmp/two.csv" >"$tmp/two.log" 2>&1
rc=$?
rows=$(($(wc -l <"$tmp/two.csv") - 1))
if [ $rc = 0 ] && [ "$rows" = "$(($(wc -l <"$tmp/ref.csv") - 1))" ] &&
  awk -F, 'NR > 1 && !($3 + 0 == $3 + 0 && $3 < 1e30) { exit 1 }' "$tmp/two.csv"; then
  ok "--async-slices with 2 slices trains with validation and checkpoints ($rows steps)"
else cat "$tmp/two.log"; ko "--async-slices with 2 slices trains with validation and checkpoints (status $rc, $rows steps)"; fi
if grep -q '"async_slices": true' "$tmp/ck/config.json"; then ok "the effective configuration holds async_slices"
else ko "the effective configuration holds async_slices"; fi

echo '{"async_slices": true, "deterministic": true}' >"$tmp/run.json"
timeout 120 "$train" "${args[@]}" --config "$tmp/run.json" >"$tmp/det.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q -- "--async-slices) do not work with deterministic mode (--deterministic)" "$tmp/det.log"; then
  ok "a run file's async_slices with --deterministic is refused naming both"
else cat "$tmp/det.log"; ko "a run file's async_slices with --deterministic is refused naming both (status $rc)"; fi

# batch normalisation (fused with its relu): one slice repeats the synchronous step log bitwise, two
# slices (each normalised with its own statistics) train with validation and checkpoints
bn=(--model "$tmp/bn.json" --step-log "$tmp/ref.csv")
rm -f "$tmp/ref.csv" # a step log is appended to
timeout 300 "$train" "${args[@]}" "${bn[@]}" --slices 1 >"$tmp/bnref.log" 2>&1 ||
  { cat "$tmp/bnref.log"; ko "the batchnorm reference run"; }
bn[3]=$tmp/bn1.csv
timeout 300 "$train" "${args[@]}" "${bn[@]}" --slices 1 --async-slices >"$tmp/bn1.log" 2>&1 ||
  { cat "$tmp/bn1.log"; ko "--async-slices with batchnorm, one slice, ran"; }
what="--async-slices with a batchnorm layer and one slice repeats the synchronous step log bitwise"
if same_as_ref "$tmp/bn1.csv"; then ok "$what"; else ko "$what"; fi
bn[3]=$tmp/bn2.csv
timeout 300 "$train" "${args[@]}" "${bn[@]}" --slices 2 --async-slices --checkpoint-dir "$tmp/ckbn" \
  --checkpoint-every 3 >"$tmp/bn2.log" 2>&1
rc=$?
rows=$(($(wc -l <"$tmp/bn2.csv") - 1))
if [ $rc = 0 ] && [ "$rows" = "$(($(wc -l <"$tmp/ref.csv") - 1))" ] &&
  awk -F, 'NR > 1 && !($3 + 0 == $3 + 0 && $3 < 1e30) { exit 1 }' "$tmp/bn2.csv" &&
  [ -f "$tmp/ckbn/ckpt-000000000018.h5" ]; then
  ok "--async-slices with a batchnorm layer and 2 slices trains with validation and checkpoints ($rows steps)"
else
  cat "$tmp/bn2.log"
  ko "--async-slices with a batchnorm layer and 2 slices trains with validation and checkpoints (status $rc, $rows steps)"
fi
fixture_done

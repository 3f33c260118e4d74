#!/usr/bin/env bash
# tessera-train --staleness S: S = 0 gives bitwise the step log of a run without the option
# (deterministic); S = 2 trains with validation and checkpoints (which apply the pending updates),
# writes "staleness": 2 into the effective configuration and reads it back from a run file; and
# --staleness with --deterministic, or past the largest staleness, is refused naming the option.
set -u
. "$(dirname "$0")/train_fixture.sh"
fixture_setup staleness 48
args=(--model "$tmp/model.json" --data "$tmp/data.h5" --val-fraction 0.25 --epochs 2 --batch 4 --workers 2 --slices 2
  --seed 5 -q)

timeout 300 "$train" "${args[@]}" --deterministic --step-log "$tmp/ref.csv" >"$tmp/ref.log" 2>&1 ||
  { cat "$tmp/ref.log"; ko "the reference run"; }
timeout 300 "$train" "${args[@]}" --deterministic --staleness 0 --step-log "$tmp/zero.csv" >"$tmp/zero.log" 2>&1 ||
  { cat "$tmp/zero.log"; ko "--staleness 0 ran"; }
if same_as_ref "$tmp/zero.csv"; then ok "--staleness 0 repeats the synchronous step log bitwise"
else ko "--staleness 0 repeats the synchronous step log bitwise"; fi

timeout 300 "$train" "${args[@]}" --staleness 2 --checkpoint-dir "$tmp/ck" --checkpoint-every 3 \
  --step-log "$tmp/two.csv" >"$tmp/two.log" 2>&1
rc=$?
rows=$(($(wc -l <"$tmp/two.csv") - 1))
if [ $rc = 0 ] && [ "$rows" = "$(($(wc -l <"$tmp/ref.csv") - 1))" ] &&
  awk -F, 'NR > 1 && !($3 + 0 == $3 + 0 && $3 < 1e30) { exit 1 }' "$tmp/two.csv"; then
  ok "--staleness 2 trains with validation and checkpoints ($rows steps)"
else cat "$tmp/two.log"; ko "--staleness 2 trains with validation and checkpoints (status $rc, $rows steps)"; fi
if grep -q '"staleness": 2' "$tmp/ck/config.json"; then ok "the effective configuration holds the staleness"
else ko "the effective configuration holds the staleness"; fi

echo '{"staleness": 1, "deterministic": true}' >"$tmp/run.json"
timeout 120 "$train" "${args[@]}" --config "$tmp/run.json" >"$tmp/det.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q "staleness 1 (--staleness) does not work with deterministic mode (--deterministic)" "$tmp/det.log"; then
  ok "a run file's staleness with --deterministic is refused naming both"
else cat "$tmp/det.log"; ko "a run file's staleness with --deterministic is refused naming both (status $rc)"; fi

timeout 120 "$train" "${args[@]}" --staleness 17 >"$tmp/big.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q -- "--staleness" "$tmp/big.log"; then ok "--staleness 17 is refused naming the option"
else cat "$tmp/big.log"; ko "--staleness 17 is refused naming the option (status $rc)"; fi
fixture_done

#!/usr/bin/env bash
# In-situ training (tessera-train --simulate cbed.json): two runs with one seed log bitwise the same
# losses, also with every simulation slowed down (TESSERA_SIM_DELAY_MS) and with the samples spilled
# to HDF5; an injected simulator failure (TESSERA_SIM_FAIL_AT) stops the run naming rank, producer and
# sample once and writes a checkpoint, and --resume from its checkpoints finishes with the
# uninterrupted run's losses; a real simulator error keeps the simulator's text; bad settings are named.
set -u
. "$(dirname "$0")/train_fixture.sh"
tmp=$(mktemp -d /tmp/tessera-insitu-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 STARPU_NCPU=2
cat >"$tmp/cbed.json" <<'JSON'
{"grid": 16, "pattern": 16, "target": 16, "probes": 1, "fov": 8, "thickness": [4, 8],
 "structures": ["si", "cu"], "zones": ["001"], "seed": 11}
JSON
cat >"$tmp/model.json" <<'JSON'
{"name": "insitu", "layers": [
  {"name": "in", "type": "input", "shape": [1, 16, 16]},
  {"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
  {"name": "r1", "type": "relu"},
  {"name": "c2", "type": "conv2d", "out_channels": 1, "kernel": 3, "padding": 1}],
 "loss": {"type": "mse"}, "optimizer": {"type": "adam", "lr": 0.003}}
JSON
args=(--model "$tmp/model.json" --simulate "$tmp/cbed.json" --epochs 3 --batch 4 --pool 8 --reuse 2
  --deterministic --seed 5 --workers 2 --slices 2 -q)

run() { # NAME [ENV=VALUE...] -- [options]: runs, keeps the status in $rc and the output in $tmp/NAME.log
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$train" "${args[@]}" "$@" >"$tmp/$name.log" 2>&1
  rc=$?
}

run ref -- --step-log "$tmp/ref.csv"
n=$(($(rows "$tmp/ref.csv") - 1))
[ $rc -eq 0 ] && [ $n -eq 12 ] && ok "in-situ run logged $n steps" || { cat "$tmp/ref.log"; ko "in-situ run (rc $rc, $n steps)"; }

run again -- --step-log "$tmp/again.csv"
[ $rc -eq 0 ] && cmp -s "$tmp/ref.csv" "$tmp/again.csv" && ok "a second run with the same seed logs bitwise the same losses" ||
  { cat "$tmp/again.log"; ko "a second run logs the same losses (rc $rc)"; }

run slow TESSERA_SIM_DELAY_MS=40 -- --step-log "$tmp/slow.csv" --spill "$tmp/spill.h5"
[ $rc -eq 0 ] && cmp -s "$tmp/ref.csv" "$tmp/slow.csv" &&
  ok "with every simulation slowed by 40 ms and spilled, the same losses" ||
  { cat "$tmp/slow.log"; ko "a slowed simulator gives the same losses (rc $rc)"; }
[ -s "$tmp/spill.h5" ] && [ ! -e "$tmp/spill.h5.tmp" ] && ok "the spill file was written" || ko "the spill file was written"

run other -- --step-log "$tmp/other.csv" --seed 6
cmp -s "$tmp/ref.csv" "$tmp/other.csv" && ko "another seed gives other losses" || ok "another seed gives other losses"

# sample 20 is slot 4's third sample, read in steps 9 and 10 (pool 8, reuse 2, batch 4)
run fail TESSERA_SIM_FAIL_AT=20 -- --step-log "$tmp/steps.csv" --checkpoint-dir "$tmp/ck" --checkpoint-every 2
# the message names rank, producer and sample once, and a checkpoint is written after the last good step
msg=$(grep "simulator error:" "$tmp/fail.log")
if [ $rc -eq 1 ] && [[ $msg == *"simulator error: rank 0, producer cbed_sample: sample 20: injected failure"* ]] &&
  [ "$(grep -o "sample 20" <<<"$msg" | wc -l)" -eq 1 ] && [ "$(grep -o cbed_sample <<<"$msg" | wc -l)" -eq 1 ] &&
  [[ $msg =~ checkpoint\ .*\ written\ after\ training\ step\ [0-9]+ ]]; then
  ok "a simulator failure stops the run with its message, naming the sample once, and a checkpoint: $msg"
else
  cat "$tmp/fail.log"; ko "a simulator failure stops the run with its message and a checkpoint (rc $rc)"
fi
run resume -- --step-log "$tmp/steps.csv" --checkpoint-dir "$tmp/ck" --checkpoint-every 2 --resume
if [ $rc -eq 0 ] && msg=$(same_as_ref "$tmp/steps.csv"); then
  ok "resumed from its checkpoint, the run ends with the uninterrupted run's losses"
else
  cat "$tmp/resume.log"; ko "resumed run equals the uninterrupted one (rc $rc) ${msg:-}"
fi

echo '{"grid": 16, "kvv": 200}' >"$tmp/bad.json"
"$train" --model "$tmp/model.json" --simulate "$tmp/bad.json" -q >"$tmp/bad.log" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "bad.json: unknown field 'kvv'" "$tmp/bad.log" && ok "an unknown cbed.json field is named" ||
  { cat "$tmp/bad.log"; ko "an unknown cbed.json field is named (rc $rc)"; }
# a real simulator error (Cu's 7.23 A cell is narrower than an 11 A scan window), met by the input
# statistics at start-up: the simulator's own text, after the rank and producer, the sample named once
sed 's/"seed": 11}/"seed": 11, "scan": 11}/' "$tmp/cbed.json" >"$tmp/scan.json"
"$train" --model "$tmp/model.json" --simulate "$tmp/scan.json" -q >"$tmp/scan.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "scan.json: rank 0, producer cbed_sample: cbed: sample [0-9]*: the scan window of 11 A is larger than" \
  "$tmp/scan.log" && [ "$(grep -o "sample [0-9]" "$tmp/scan.log" | wc -l)" -eq 1 ]; then
  ok "a simulator error at start-up keeps the simulator's message: $(cat "$tmp/scan.log")"
else
  cat "$tmp/scan.log"; ko "a simulator error at start-up keeps the simulator's message (rc $rc)"
fi
bad_cli() { # WANT OPTIONS...: a usage error (status 2) naming WANT
  local want=$1; shift
  "$train" --model "$tmp/model.json" "$@" >"$tmp/cli.log" 2>&1
  local rc=$?
  [ $rc -eq 2 ] && grep -q -- "$want" "$tmp/cli.log" && ok "refused: $want" || { cat "$tmp/cli.log"; ko "refused: $want (rc $rc)"; }
}
bad_cli "--pool 2 holds fewer samples than a --batch of 4" --simulate "$tmp/cbed.json" --pool 2 --batch 4
bad_cli "--data and --simulate exclude each other" --simulate "$tmp/cbed.json" --data x.h5
bad_cli "need --simulate" --data x.h5 --reuse 2
fixture_done

#!/usr/bin/env bash
# tessera-train's run files: the same options from a run file (--config) and from the command line
# give byte-identical effective configurations (beside the log and in the checkpoint folder); the
# effective configuration read back as a run file gives itself again; the command line overrides
# the run file wherever it stands; each checkpoint carries the configuration (attribute
# run_config); an unknown key is named with the file, and a bad value with the file and the key.
set -u
. "$(dirname "$0")/train_fixture.sh"
fixture_setup runfile 32
train=$(realpath "$train") # the runs below start in $tmp
cd "$tmp" || exit 1
tr() { timeout 300 "$train" "$@" >"$tmp/out.log" 2>&1; }
cat >run.json <<JSON
{"model": "model.json", "data": "data.h5", "epochs": 1, "batch": 8, "workers": 2, "lr": 0.002,
 "seed": 5, "deterministic": true, "loss_scale": "off", "val_fraction": 0.25, "log": "log.csv",
 "checkpoint_dir": "ck", "keep": 2, "on_nan": "stop", "trace_steps": "1:2", "min_delta": 0.5}
JSON
cli=(--model model.json --data data.h5 --epochs 1 --batch 8 --workers 2 --lr 0.002 --seed 5 --deterministic
  --loss-scale off --val-fraction 0.25 --log log.csv --checkpoint-dir ck --keep 2 --on-nan stop --trace-steps 1:2
  --min-delta 0.5)
fresh() { mv log.config.json "$1"; rm -rf ck log.csv; }

tr --config run.json && cmp -s log.config.json ck/config.json && fresh from_file.json || { cat out.log; ko "a run from run.json"; }
tr "${cli[@]}" && fresh from_cli.json || { cat out.log; ko "a run from the command line"; }
cmp from_file.json from_cli.json && grep -q '"lr": 0.002,' from_cli.json && grep -q '"val": null,' from_cli.json &&
  ok "run file and command line give the same effective configuration" ||
  { diff from_file.json from_cli.json; ko "run file and command line give the same effective configuration"; }
tr --config from_cli.json && cmp -s log.config.json from_cli.json &&
  ok "the effective configuration read back gives itself" || { cat out.log; ko "the effective configuration read back gives itself"; }
h5dump -a run_config ck/ckpt-*.h5 2>/dev/null | grep -q 'checkpoint_dir.*: .*ck' &&
  ok "checkpoints carry the configuration" || ko "checkpoints carry the configuration (attribute run_config)"
rm -rf ck log.csv log.config.json

tr --epochs 2 --config run.json --seed 6 && grep -q '"epochs": 2,' log.config.json && grep -q '"seed": 6,' log.config.json &&
  grep -q '"batch": 8,' log.config.json && [ "$(wc -l <log.csv)" = 3 ] &&
  ok "the command line overrides the run file, before or after --config" ||
  { cat out.log log.config.json; ko "the command line overrides the run file"; }

echo '{"model": "model.json", "data": "data.h5", "epochz": 3}' >bad.json
tr --config bad.json; rc=$?
[ $rc -eq 2 ] && grep -q "bad.json: unknown key 'epochz'" out.log && ok "an unknown key is named: $(head -1 out.log)" ||
  { cat out.log; ko "an unknown key is named with the file (status 2, got $rc)"; }
echo '{"model": "model.json", "data": "data.h5", "batch": "many"}' >bad.json
tr --config bad.json; rc=$?
[ $rc -eq 2 ] && grep -q "bad.json: 'batch': 'many' is not an integer" out.log && ok "a bad value is named: $(head -1 out.log)" ||
  { cat out.log; ko "a bad value is named with the file and key (status 2, got $rc)"; }
echo '{"model": "model.json", "data": "data.h5", "deterministic": 1}' >bad.json
tr --config bad.json; rc=$?
[ $rc -eq 2 ] && grep -q "bad.json: 'deterministic': a flag takes true or false" out.log && ok "a flag needs a boolean" ||
  { cat out.log; ko "a flag needs a boolean (status 2, got $rc)"; }
tr --config missing.json; rc=$?
[ $rc -eq 2 ] && grep -q "missing.json" out.log && ok "a missing run file is named" || { cat out.log; ko "a missing run file is named"; }
fixture_done

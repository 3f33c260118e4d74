#!/usr/bin/env bash
# tessera-train --simulate: the input statistics (--input-stats N) and, with --standardize-targets,
# the target statistics (--target-stats M) come from the simulator's samples 0..N-1 and 0..M-1 by
# index, one start-up simulation serving both. The input mean and std of the exported parameters
# (float32) and the target mean and std the trainer reports equal a float64 computation (awk) over
# the samples tessera-cbed writes for the same settings and indices (relative 1e-5: float32
# rounding, and the log prints 6 digits); a 2-rank run, whose ranks simulate other training samples
# than 1 rank does, has bitwise the same input statistics (export and log, %.9g) and the same
# target statistics as 1 rank (same samples, same summation order) and trains; the validation loss
# is in target units.
set -u
. "$(dirname "$0")/train_fixture.sh"
tmp=$(mktemp -d /tmp/tessera-insitu-norm-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1
cat >"$tmp/cbed.json" <<'JSON'
{"grid": 16, "pattern": 16, "target": 16, "probes": 1, "fov": 8, "thickness": [4, 8],
 "structures": ["si", "cu"], "zones": ["001"], "seed": 11}
JSON
cbed=(--grid 16 --pattern 16 --target 16 --probes 1 --fov 8 --thickness 4:8 --structures si,cu --zones 001 --seed 11)
cat >"$tmp/model.json" <<'JSON'
{"name": "insitu", "layers": [
  {"name": "in", "type": "input", "shape": [1, 16, 16]},
  {"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
  {"name": "r1", "type": "relu"},
  {"name": "c2", "type": "conv2d", "out_channels": 1, "kernel": 3, "padding": 1}],
 "loss": {"type": "mse"}, "optimizer": {"type": "adam", "lr": 0.003}}
JSON
# validation data: other indices of the same simulator
"$B/tessera-cbed" --out "$tmp/val.h5" --samples 8 --first 1000 --workers 2 -q "${cbed[@]}" ||
  { echo "FAIL: tessera-cbed (validation data)"; exit 1; }
args=(--model "$tmp/model.json" --simulate "$tmp/cbed.json" --val "$tmp/val.h5" --standardize-targets --target-stats 24
  --input-stats 12 --epochs 1 --batch 4 --pool 8 --epoch-steps 4 --deterministic --seed 5 --slices 2)
stats() { sed -n 's/^targets standardised in the trainer: channel 0 mean \([^,]*\), std \([^ ]*\) (from 24 simulated samples, indices 0..23).*/\1 \2/p' "$1"; }
istats() { sed -n 's/^inputs standardised in the trainer: channel 0 mean \([^,]*\), std \([^ ]*\) (from 12 simulated samples, indices 0..11)$/\1 \2/p' "$1"; }
# NAME of an export, float32 [1], as %.9g (the float exactly)
exported() { h5dump -d "$2" -m %.9g -y -w 1 "$1" 2>/dev/null | sed -n '/DATA {/,/}/p' | grep -Eo '[-0-9.eE+]+' | tr '\n' ' '; }
# VALUES REF: both pairs agree within relative 1e-5
close() { awk -v a="$1" -v b="$2" 'BEGIN { if (split(a, x, " ") != 2 || split(b, y, " ") != 2) exit 1
    for (i = 1; i <= 2; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (!(y[i] > 0 && d <= 1e-5 * y[i])) exit 1 } }'; }
# DATASET SAMPLES: float64 mean and population std of the first SAMPLES samples of ref.h5's DATASET
refstats() { h5dump -d "$1" -y -w 1 "$tmp/ref.h5" 2>/dev/null | sed -n '/DATA {/,/}/p' | grep -Eo '[-0-9.eE+]+' |
  awk -v n=$(($2 * 256)) 'NR <= n { v[NR] = $1; s += $1 } END { if (NR < n) exit 1; m = s / n
    for (i = 1; i <= n; i++) q += (v[i] - m) ^ 2; printf "%.9g %.9g", m, sqrt(q / n) }'; }
col() { awk -F, -v n="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == n) c = i; next } END { print $c }' "$1"; }

timeout 300 "$train" "${args[@]}" --workers 2 --log "$tmp/r1.csv" --export-params "$tmp/p1.h5" >"$tmp/r1.log" 2>&1
rc=$? s1=$(stats "$tmp/r1.log") i1=$(istats "$tmp/r1.log") e1="$(exported "$tmp/p1.h5" input_mean)$(exported "$tmp/p1.h5" input_std)"
[ $rc -eq 0 ] && [ -n "$s1" ] && ok "in-situ run with --standardize-targets (mean, std: $s1)" ||
  { cat "$tmp/r1.log"; ko "in-situ run with --standardize-targets (rc $rc, statistics '$s1')"; }

# the reference: samples 0..23 written by tessera-cbed, their mean and population std in awk
"$B/tessera-cbed" --out "$tmp/ref.h5" --samples 24 --first 0 --workers 2 -q "${cbed[@]}" ||
  { echo "FAIL: tessera-cbed (reference samples)"; exit 1; }
ref=$(refstats potential 24) iref=$(refstats cbed 12)
if [ -n "$ref" ] && [ -n "$s1" ] && close "$s1" "$ref"; then
  ok "the target statistics $s1 equal the float64 mean and std $ref of tessera-cbed's samples 0..23"
else
  ko "the target statistics '$s1' equal the float64 mean and std '$ref' of tessera-cbed's samples 0..23 (relative 1e-5)"
fi
if [ -n "$iref" ] && [ -n "$i1" ] && close "$e1" "$iref" && [ "$e1" = "$i1 " ]; then
  ok "the exported input statistics $e1(logged alike) equal the float64 mean and std $iref of tessera-cbed's samples 0..11"
else
  ko "the exported input statistics '$e1' (logged '$i1') equal the float64 mean and std '$iref' of samples 0..11 (relative 1e-5)"
fi
[ "$(col "$tmp/r1.csv" loss_unit)" = target ] && ok "the losses are logged in target units" ||
  { head -3 "$tmp/r1.csv"; ko "the losses are logged in target units"; }

if command -v mpirun >/dev/null; then
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_HOME -x STARPU_SILENT -x STARPU_WORKERS_NOBIND \
    -x STARPU_MPI_NOBIND "$train" "${args[@]}" --workers 1 --spill "$tmp/spill.h5" --export-params "$tmp/p2.h5" \
    >"$tmp/r2.log" 2>&1
  rc=$? s2=$(stats "$tmp/r2.log") i2=$(istats "$tmp/r2.log") e2="$(exported "$tmp/p2.h5" input_mean)$(exported "$tmp/p2.h5" input_std)"
  [ $rc -eq 0 ] && [ -n "$s1" ] && [ "$s2" = "$s1" ] &&
    ok "2 ranks (their own training samples) report the target statistics of 1 rank: $s2" ||
    { cat "$tmp/r2.log"; ko "2 ranks report the target statistics of 1 rank (rc $rc, '$s2' against '$s1')"; }
  [ $rc -eq 0 ] && [ -n "$e1" ] && [ "$e2" = "$e1" ] && [ "$i2" = "$i1" ] &&
    ok "2 ranks export and log bitwise the input statistics of 1 rank: $e2" ||
    ko "2 ranks have the input statistics of 1 rank (export '$e2' against '$e1', log '$i2' against '$i1')"
else
  echo "(no mpirun: the 2-rank case is not run)"
fi
fixture_done

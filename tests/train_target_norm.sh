#!/usr/bin/env bash
# tessera-train --standardize-targets: the log says its losses are in target units (loss_unit
# "target") and its validation loss, std^2 times the standardised loss the trainer computed,
# equals the validation MSE the metrics compute in float64 from the outputs turned back into
# target units against the raw targets (relative 1e-5); the exported parameters carry the
# statistics, so tessera-predict gives the same MSE from raw inputs; a resumed run logs the same
# steps bitwise; parameters imported with their statistics log in target units without the flag;
# without the flag the log has no loss_unit column; 2 ranks give the validation losses of 1 rank
# (a cross-entropy model's refusal: tests/check_target_norm; with --simulate: tests/insitu_norm.sh).
set -u
. "$(dirname "$0")/train_fixture.sh"
predict=$B/tessera-predict
fixture_setup target-norm 64
"$gen" --out "$tmp/val.h5" --samples 16 --size 16 --seed 4 -q || { echo "FAIL: tessera-datagen"; exit 1; }
run() { timeout 300 "$train" --model "$tmp/model.json" --data "$tmp/data.h5" --val "$tmp/val.h5" --batch 8 \
  --workers 2 "$@"; }
col() { awk -F, -v n="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == n) c = i; next } END { print $c }' "$1"; }
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b > 0 && d <= 1e-5 * b) }'; }

run --epochs 2 --standardize-targets --log "$tmp/log.csv" --export-params "$tmp/p.h5" >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; ko "tessera-train --standardize-targets ran"; fixture_done; exit; }
val=$(col "$tmp/log.csv" val_loss) vmse=$(col "$tmp/log.csv" val_mse) unit=$(col "$tmp/log.csv" loss_unit)
std=$(sed -n 's/^targets standardised in the trainer: channel 0 mean [^,]*, std \([^ ]*\) .*/\1/p' "$tmp/train.log")
if [ "$unit" = target ] && [ -n "$std" ] && close "$val" "$vmse"; then
  ok "validation loss $val in target units (std $std) equals the metrics' MSE $vmse of the turned-back outputs"
else
  cat "$tmp/train.log"; head -3 "$tmp/log.csv"; ko "validation loss '$val' (loss_unit '$unit') equals the metrics' MSE '$vmse' (relative 1e-5)"
fi
timeout 300 "$predict" --model "$tmp/model.json" --workers 2 --params "$tmp/p.h5" --data "$tmp/val.h5" \
  --out "$tmp/pred.h5" >"$tmp/pred.log" 2>&1
mse=$(sed -n 's/^MSE \([^,]*\),.*/\1/p' "$tmp/pred.log")
close "$mse" "$val" && h5ls "$tmp/p.h5" 2>/dev/null | grep -q '^target_std' &&
  ok "tessera-predict with the exported parameters (target_mean, target_std): MSE $mse = the validation loss" ||
  { cat "$tmp/pred.log"; ko "tessera-predict's MSE '$mse' equals the validation loss $val, the export holds target_std"; }

# resume: 3 epochs with a checkpoint after each, stopped after epoch 1 and resumed, against 3 straight
run --epochs 3 --standardize-targets --step-log "$tmp/ref.csv" >"$tmp/ref.log" 2>&1 || { cat "$tmp/ref.log"; ko "reference run"; }
run --epochs 1 --standardize-targets --checkpoint-dir "$tmp/ck" --step-log "$tmp/res.csv" >"$tmp/r1.log" 2>&1 &&
  run --epochs 3 --standardize-targets --checkpoint-dir "$tmp/ck" --resume --step-log "$tmp/res.csv" >"$tmp/r2.log" 2>&1 ||
  { cat "$tmp/r1.log" "$tmp/r2.log"; ko "the resumed runs ran"; }
diffs=$(same_as_ref "$tmp/res.csv") && ok "a resumed run logs every step's loss as the uninterrupted one" ||
  { echo "$diffs" | head; ko "a resumed run logs every step's loss as the uninterrupted one"; }

# parameters imported with their statistics, without the flag: the same units
run --epochs 1 --import-params "$tmp/p.h5" --log "$tmp/imp.csv" >"$tmp/imp.log" 2>&1
ival=$(col "$tmp/imp.csv" val_loss) imse=$(col "$tmp/imp.csv" val_mse)
[ "$(col "$tmp/imp.csv" loss_unit)" = target ] && close "$ival" "$imse" &&
  ok "imported statistics without the flag: validation loss $ival in target units = the metrics' MSE" ||
  { cat "$tmp/imp.log"; head -3 "$tmp/imp.csv"; ko "imported statistics without the flag: loss_unit target, validation loss = MSE"; }
run --epochs 1 --log "$tmp/plain.csv" >"$tmp/plain.log" 2>&1 && [ -z "$(head -1 "$tmp/plain.csv" | grep loss_unit)" ] &&
  ok "without the flag the log has no loss_unit column" || { cat "$tmp/plain.log"; ko "without the flag: no loss_unit column"; }

# 2 ranks x batch 4 against 1 rank x batch 8 (the same samples per step; a model without batch norm
# or dropout, whose statistics and masks are per rank): validation losses within relative 1e-4
if command -v mpirun >/dev/null; then
  sed -e '/"bn1"/d' -e '/"d1"/d' "$tmp/model.json" >"$tmp/plain.json"
  export STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1
  common=(--model "$tmp/plain.json" --data "$tmp/data.h5" --val "$tmp/val.h5" --deterministic --seed 5 --workers 1
    --slices 2 --epochs 2 --standardize-targets -q)
  timeout 300 "$train" "${common[@]}" --batch 8 --log "$tmp/r1.csv" >"$tmp/m1.log" 2>&1
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_HOME -x STARPU_SILENT -x STARPU_WORKERS_NOBIND \
    -x STARPU_MPI_NOBIND "$train" "${common[@]}" --batch 4 --log "$tmp/r2.csv" >"$tmp/m2.log" 2>&1
  if paste -d' ' <(awk -F, 'NR > 1 { print $4 }' "$tmp/r1.csv" 2>/dev/null) <(awk -F, 'NR > 1 { print $4 }' "$tmp/r2.csv" 2>/dev/null) |
    awk 'NF != 2 { exit 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $1) exit 1; n++ } END { exit n != 2 }'; then
    ok "2 ranks x batch 4: validation losses (target units) equal 1 rank x batch 8's: $(awk -F, 'NR > 1 { printf "%s ", $4 }' "$tmp/r2.csv")"
  else
    cat "$tmp/m1.log" "$tmp/m2.log" "$tmp/r1.csv" "$tmp/r2.csv" 2>/dev/null; ko "2 ranks x batch 4: validation losses equal 1 rank x batch 8's (relative 1e-4)"
  fi
else
  echo "(no mpirun: the 2-rank case is not run)"
fi
fixture_done

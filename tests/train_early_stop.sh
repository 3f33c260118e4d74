#!/usr/bin/env bash
# Early stopping and --keep-best in tessera-train: with a minimum delta no epoch can beat, a run
# stops exactly `patience` epochs after its first; the count survives --resume (best.json); with a
# learning rate far too high the validation loss stops improving and the run stops early, and
# best.h5 then holds the best epoch: tessera-predict with it reproduces the lowest validation loss
# of the log (relative 1e-5), and the run stopped `patience` epochs after that epoch.
set -u
. "$(dirname "$0")/train_fixture.sh"
predict=$B/tessera-predict
fixture_setup earlystop 64
"$gen" --out "$tmp/val.h5" --samples 16 --size 16 --seed 4 -q || { echo "FAIL: tessera-datagen"; exit 1; }
tr() { timeout 300 "$train" --model "$tmp/model.json" --data "$tmp/data.h5" --val "$tmp/val.h5" --batch 8 --workers 2 "$@"; }
rows() { echo $(($(wc -l <"$1") - 1)); }

tr --epochs 10 --patience 2 --min-delta 1e9 --checkpoint-dir "$tmp/ck1" --keep-best --log "$tmp/log1.csv" >"$tmp/r1.log" 2>&1
[ "$(rows "$tmp/log1.csv")" = 3 ] && grep -q "early stop after epoch 3" "$tmp/r1.log" && grep -q '"epoch": 1, "stale": 2' "$tmp/ck1/best.json" &&
  [ -s "$tmp/ck1/best.h5" ] && ok "nothing beats epoch 1 by 1e9: the run stops after epoch 1 + patience 2" ||
  { cat "$tmp/r1.log"; ko "nothing beats epoch 1 by 1e9: the run stops after epoch 3 with best.h5 of epoch 1"; }

tr --epochs 2 --patience 3 --min-delta 1e9 --checkpoint-dir "$tmp/ck2" --log "$tmp/log2.csv" -q >"$tmp/r2.log" 2>&1 &&
  tr --epochs 10 --patience 3 --min-delta 1e9 --checkpoint-dir "$tmp/ck2" --log "$tmp/log2.csv" --resume >"$tmp/r2b.log" 2>&1
[ "$(rows "$tmp/log2.csv")" = 4 ] && grep -q "early stop after epoch 4" "$tmp/r2b.log" &&
  ok "the count of epochs without improvement goes on after --resume" ||
  { cat "$tmp/r2.log" "$tmp/r2b.log"; ko "the count goes on after --resume (stop after epoch 4)"; }

tr --epochs 30 --patience 2 --lr 0.3 --deterministic --checkpoint-dir "$tmp/ck3" --keep-best --log "$tmp/log3.csv" >"$tmp/r3.log" 2>&1
n=$(rows "$tmp/log3.csv")
read -r best_ep best_val < <(awk -F, 'NR > 1 && (b == "" || $4 < b) { b = $4; e = $1 } END { print e, b }' "$tmp/log3.csv")
if [ "$n" -lt 30 ] && [ $((n - best_ep)) -eq 2 ] && grep -q "early stop after epoch $n" "$tmp/r3.log"; then
  ok "lr 0.3: the validation loss stops improving and the run stops after epoch $n, 2 after the best ($best_ep)"
else
  cat "$tmp/r3.log"; ko "lr 0.3: the run stops 2 epochs after its best (ran $n epochs, best $best_ep)"
fi
timeout 300 "$predict" --model "$tmp/model.json" --checkpoint "$tmp/ck3/best.h5" --data "$tmp/val.h5" --out "$tmp/p.h5" \
  --workers 2 >"$tmp/p.log" 2>&1
mse=$(sed -n 's/^MSE \([^,]*\),.*/\1/p' "$tmp/p.log")
if awk -v a="$mse" -v b="$best_val" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b > 0 && d <= 1e-5 * b) }'; then
  ok "best.h5 predicts the best epoch's validation loss ($mse vs $best_val)"
else
  cat "$tmp/p.log"; ko "best.h5 predicts the best epoch's validation loss ('$mse' vs $best_val, relative 1e-5)"
fi
fixture_done

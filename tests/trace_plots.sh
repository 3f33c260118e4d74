#!/usr/bin/env bash
# tessera-trace's report and pictures on a real traced run: the default report is a one-screen
# summary (at most 24 lines; --detail has every step), the timeline data of a 2-rank run has MPI
# transfers in the ranks' MPI lanes and critical-path tasks, and with gnuplot: timeline.png of three
# steps from the middle without --steps (the chosen ones with it), loss.png from the epoch and step
# logs, and tessera-train --predict-png's pictures at the labelled size (1500 x 520; without
# gnuplot, bare pictures of 3 x 4 x 16 + 8 = 200 x 64 pixels and a message). The PNGs' contents
# were looked at by eye (docs/traces.md describes them); here their sizes are checked. Status 77
# after the other checks when gnuplot is missing.
set -u
. "$(dirname "$0")/train_fixture.sh"
fixture_setup traceplots 96
tracer=$B/tessera-trace
"$train" --model "$tmp/model.json" --data "$tmp/data.h5" --val-fraction 0.25 --epochs 3 --batch 8 --workers 2 -q \
  --trace "$tmp/trace" --log "$tmp/log.csv" --step-log "$tmp/steps.csv" --predict-png "$tmp/png" --predict-count 2 \
  >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; echo "FAIL: traced run"; exit 1; }

"$tracer" "$tmp/trace" >"$tmp/summary" 2>&1 || { cat "$tmp/summary"; ko "tessera-trace DIR"; }
"$tracer" "$tmp/trace" --detail >"$tmp/detail" 2>&1 || ko "tessera-trace DIR --detail"
lines=$(wc -l <"$tmp/summary") dlines=$(wc -l <"$tmp/detail")
if [ "$lines" -le 24 ] && grep -q "^rank  steps  wall/step  critical path  computing   idle" "$tmp/summary" &&
  grep -q "^  family: " "$tmp/summary" && grep -q "^critical path of step" "$tmp/summary" && [ "$dlines" -gt $((3 * lines)) ]; then
  ok "the default report is a summary of $lines lines (--detail: $dlines)"
else
  ko "the default report is a summary of at most 24 lines with the rank table, families and a critical path ($lines lines; --detail $dlines)"
  cat "$tmp/summary"
fi

png_size() { od -An -j16 -N8 -tu1 "$1" | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 "x" $5 * 16777216 + $6 * 65536 + $7 * 256 + $8 }'; }

if command -v mpirun >/dev/null; then
  args=(--model "$tmp/model.json" --data "$tmp/data.h5" --val-fraction 0 --epochs 1 --batch 4 --workers 1 -q)
  warm_bus "${args[@]}"
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_HOME -x STARPU_SILENT "$train" "${args[@]}" \
    --trace "$tmp/trace2" >"$tmp/train2.log" 2>&1 || { cat "$tmp/train2.log"; ko "2-rank traced run"; }
  "$tracer" "$tmp/trace2" --steps 4:5 --plots --out-dir "$tmp/p2" -q >"$tmp/plot2.log" 2>&1
  dat=$tmp/p2/timeline.dat
  send_row=$(grep -o '"r0 MPI send" [0-9]*' "$dat" | awk '{ print $NF }')
  if [ -n "$send_row" ] && awk -v r="$send_row" '/^# transfers/ { on = 1; next } /^# steps/ { on = 0 }
      on && NF == 6 && $3 == r && $4 == 1 { n++ } END { exit !(n > 0) }' "$dat" &&
    awk '/^# tasks/ { on = 1; next } /^$/ { on = 0 } on && $5 == 1 { n++ } END { exit !(n > 0) }' "$dat" &&
    [ "$(awk '/^# steps/ { on = 1; next } on && NF == 3 { print $3 }' "$dat" | tr '\n' ' ')" = "4 5 " ]; then
    ok "2 ranks: the timeline data of steps 4-5 has rank 0's sends in its MPI lane (row $send_row), a critical path, both steps"
  else ko "2 ranks: the timeline data of steps 4-5 has MPI sends, a critical path and both steps"; head -3 "$dat"; fi
fi

# without gnuplot (an empty PATH: popen's shell finds no gnuplot) the pictures are bare, and it says so
PATH=/nonexistent "$train" --model "$tmp/model.json" --data "$tmp/data.h5" --val-fraction 0.25 --epochs 1 --batch 8 \
  --workers 1 -q --predict-png "$tmp/bare" --predict-count 1 >"$tmp/bare.log" 2>&1
if [ "$(png_size "$tmp/bare/sample_00072.png" 2>/dev/null)" = 200x64 ] &&
  grep -q "gnuplot is not installed (Debian package gnuplot-nox): PNGs without titles or colour bars" "$tmp/bare.log"; then
  ok "without gnuplot --predict-png writes bare 200 x 64 pictures and says why"
else ko "without gnuplot --predict-png writes bare pictures and says why"; cat "$tmp/bare.log"; fi

if ! command -v gnuplot >/dev/null; then
  echo "SKIP: gnuplot not found (apt-get install gnuplot-nox): the PNGs are not checked"
  [ $fail -eq 0 ] && exit 77
  fixture_done
fi
"$tracer" "$tmp/trace" --plots -q >"$tmp/plot.log" 2>&1
if grep -q "wrote $tmp/trace/timeline.png (steps [0-9]* to [0-9]*)" "$tmp/plot.log" &&
  [ "$(png_size "$tmp/trace/timeline.png" | cut -dx -f1)" = 1600 ] &&
  [ "$(awk '/^# steps/ { on = 1; next } on && NF == 3' "$tmp/trace/timeline.dat" | wc -l)" = 3 ]; then
  ok "without --steps the timeline shows three steps: $(cat "$tmp/plot.log")"
else ko "without --steps the timeline shows three steps"; cat "$tmp/plot.log"; fi
"$tracer" "$tmp/trace" --plots --steps 2-3 -q >"$tmp/plot.log" 2>&1
if grep -q "timeline.png (steps 2 to 3)" "$tmp/plot.log"; then ok "--steps 2-3 draws steps 2 to 3"
else ko "--steps 2-3 draws steps 2 to 3"; cat "$tmp/plot.log"; fi
"$tracer" "$tmp/trace" --log "$tmp/log.csv" --step-log "$tmp/steps.csv" -q >"$tmp/loss.log" 2>&1
size=$(png_size "$tmp/trace/loss.png" 2>/dev/null)
# three metric panels (samples_per_s, val_psnr_db, val_ssim) below the loss panel: 560 + 3 x 230 pixels high
if grep -q "wrote $tmp/trace/loss.png" "$tmp/loss.log" && [ "$size" = 1100x1250 ]; then
  ok "loss.png from the epoch and step logs, with three metric panels ($size)"
else ko "loss.png from the epoch and step logs, with three metric panels (${size:-none})"; cat "$tmp/loss.log"; fi
"$tracer" "$tmp/trace" --log "$tmp/summary" -q >"$tmp/bad.log" 2>&1
if [ $? -eq 1 ] && grep -q "not a tessera-train log" "$tmp/bad.log"; then ok "a file that is no log is refused naming it"
else ko "a file that is no log is refused naming it"; cat "$tmp/bad.log"; fi
n=0
for f in "$tmp"/png/sample_*.png; do [ "$(png_size "$f")" = 1500x520 ] && n=$((n + 1)); done
if [ $n -eq 2 ]; then ok "--predict-png writes 2 labelled pictures of 1500 x 520"
else ko "--predict-png writes 2 labelled pictures of 1500 x 520 ($n; sizes: $(for f in "$tmp"/png/*.png; do png_size "$f"; done))"; fi
fixture_done

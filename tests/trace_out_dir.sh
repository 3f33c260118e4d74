#!/usr/bin/env bash
# tessera-trace --out-dir: a missing folder is created with its parents (mkdir -p) and receives the
# timeline data (and its PNG when gnuplot is installed); a folder that cannot be created (a file is in
# the way) ends the run with status 1 and a message naming the option and the file.
set -u
. "$(dirname "$0")/train_fixture.sh"
fixture_setup traceout 32
tracer=$B/tessera-trace
"$train" --model "$tmp/model.json" --data "$tmp/data.h5" --val-fraction 0 --epochs 1 --batch 4 --workers 1 -q \
  --trace "$tmp/trace" >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; echo "FAIL: traced run"; exit 1; }

out=$tmp/new/plots/here
"$tracer" "$tmp/trace" --plots --out-dir "$out" -q >"$tmp/log1" 2>&1
rc=$?
# without gnuplot the run stops after writing the data (status 1, a message naming gnuplot-nox)
if command -v gnuplot >/dev/null; then want=0 png=$out/timeline.png; else want=1 png=$out/timeline.dat; fi
if [ $rc -eq $want ] && [ -s "$out/timeline.dat" ] && [ -s "$png" ]; then
  ok "--out-dir creates $out with its parents and writes $(basename "$png") there"
else
  ko "--out-dir creates a missing folder with its parents (rc $rc, expected $want)"
  cat "$tmp/log1"
fi

touch "$tmp/file"
"$tracer" "$tmp/trace" --plots --out-dir "$tmp/file/sub" -q >"$tmp/log2" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q -- "--out-dir $tmp/file/sub: $tmp/file exists and is not a folder" "$tmp/log2" &&
  [ ! -e "$tmp/file/sub" ]; then
  ok "an --out-dir that cannot be created is an error naming it: $(cat "$tmp/log2")"
else
  ko "an --out-dir that cannot be created is an error naming it (rc $rc)"
  cat "$tmp/log2"
fi

fixture_done

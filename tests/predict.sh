#!/usr/bin/env bash
# tessera-predict: a model trained and exported by tessera-train, applied to its validation file,
# gives an MSE equal to the trainer's own last validation loss (relative 1e-5: float32 sums in a
# different order); 2 ranks write the same outputs as 1 rank, in the input's order (absolute 1e-5:
# other batch compositions); a .npy input gives the same outputs as the HDF5 file it came from; PNGs
# are drawn; the validation metrics in tessera-train's log come from the predictions the loss was
# computed on (their MSE equals the validation loss, relative 1e-5) and tessera-predict --train
# reports the same figures, with a nearest-neighbour baseline of MSE 0 when the training data are
# the test data (every sample its own neighbour), also on a tessera-cbed file whose pixel size
# comes from its per-sample record meta.pixel_A (no --pixel-size); and wrong inputs fail naming the problem: a shape
# mismatch, a parameter file without a tensor of the model, no parameters at all, PNGs without
# targets, a bad --pixel-size.
set -u
. "$(dirname "$0")/train_fixture.sh"
predict=$B/tessera-predict
command -v h5diff >/dev/null || { echo "SKIP: h5diff not found (apt-get install hdf5-tools)"; exit 77; }
fixture_setup predict 96
"$gen" --out "$tmp/val.h5" --samples 20 --size 16 --seed 4 -q || { echo "FAIL: tessera-datagen"; exit 1; }
timeout 300 "$train" --model "$tmp/model.json" --data "$tmp/data.h5" --val "$tmp/val.h5" --epochs 2 --batch 8 \
  --workers 2 --log "$tmp/log.csv" --export-params "$tmp/p.h5" -q >"$tmp/train.log" 2>&1 ||
  { cat "$tmp/train.log"; ko "tessera-train ran"; fixture_done; exit; }
val=$(awk -F, 'END { print $4 }' "$tmp/log.csv")
pr() { timeout 300 "$predict" --model "$tmp/model.json" --workers 2 "$@"; }

pr --params "$tmp/p.h5" --data "$tmp/val.h5" --out "$tmp/pred.h5" --batch 6 >"$tmp/pred.log" 2>&1
mse=$(sed -n 's/^MSE \([^,]*\),.*/\1/p' "$tmp/pred.log")
if awk -v a="$mse" -v b="$val" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b > 0 && d <= 1e-5 * b) }'; then
  ok "predicted MSE $mse equals the trainer's validation loss $val"
else
  cat "$tmp/pred.log"; ko "predicted MSE '$mse' equals the trainer's validation loss $val (relative 1e-5)"
fi
col() { awk -F, -v n="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == n) c = i; next } END { print $c }' "$1"; }
vmse=$(col "$tmp/log.csv" val_mse) vpsnr=$(col "$tmp/log.csv" val_psnr_db) nnpsnr=$(col "$tmp/log.csv" nn_psnr_db)
if awk -v a="$vmse" -v b="$val" -v p="$vpsnr" -v q="$nnpsnr" 'BEGIN { d = a - b; if (d < 0) d = -d
     exit !(a != "" && b > 0 && d <= 1e-5 * b && p + 0 > 0 && p != "nan" && q + 0 > 0 && q != "nan") }'; then
  ok "the log's validation MSE $vmse (PSNR $vpsnr dB, nearest neighbour $nnpsnr dB) is the validation loss $val"
else
  head -2 "$tmp/log.csv"; ko "the log's validation MSE '$vmse' is the validation loss $val (relative 1e-5), PSNRs finite"
fi
pr --params "$tmp/p.h5" --data "$tmp/val.h5" --out "$tmp/pm.h5" --batch 6 --train "$tmp/val.h5" --pixel-size 0.3 \
  --metrics "$tmp/m.csv" --label self >"$tmp/pm.log" 2>&1
tmse=$(col "$tmp/m.csv" test_mse) nnmse=$(col "$tmp/m.csv" nn_mse) found=$(col "$tmp/m.csv" test_columns_found)
if awk -v a="$tmse" -v b="$mse" -v n="$nnmse" -v f="$found" 'BEGIN { d = a - b; if (d < 0) d = -d
     exit !(a != "" && d <= 1e-6 * b && n == 0 && f != "nan" && f >= 0 && f <= 1) }' &&
  grep -q "^self,20," "$tmp/m.csv" && grep -q "^baseline, nearest neighbour on the inputs: MSE 0," "$tmp/pm.log"; then
  ok "--train --metrics: test MSE $tmse, nearest neighbour MSE $nnmse on its own data, columns found $found"
else
  cat "$tmp/pm.log" "$tmp/m.csv"; ko "--train --metrics: test MSE '$tmse' = $mse, nearest neighbour MSE 0, columns found"
fi
"$B/tessera-cbed" --out "$tmp/cbed.h5" --samples 3 --grid 16 --pattern 16 --target 16 --probes 1 --fov 8 \
  --structures si --workers 2 -q >"$tmp/cbed.log" 2>&1 || { cat "$tmp/cbed.log"; ko "tessera-cbed wrote a small file"; }
pr --params "$tmp/p.h5" --data "$tmp/cbed.h5" --out "$tmp/pc.h5" --train "$tmp/cbed.h5" --metrics "$tmp/mc.csv" \
  --label cbed >"$tmp/pc.log" 2>&1
found=$(col "$tmp/mc.csv" nn_columns_found) err=$(col "$tmp/mc.csv" nn_column_error_A)
awk -v f="$found" -v e="$err" 'BEGIN { exit !(f != "" && f != "nan" && f + 0 == 1 && e + 0 == 0) }' &&
  ok "tessera-cbed's per-sample meta.pixel_A gives column metrics without --pixel-size (nearest neighbour on itself: $found found, error $err A)" ||
  { cat "$tmp/pc.log" "$tmp/mc.csv"; ko "column metrics from tessera-cbed's meta.pixel_A (nearest neighbour on itself: all found, error 0)"; }
pr --params "$tmp/p.h5" --data "$tmp/val.h5" --out "$tmp/bad.h5" --train "$tmp/val.h5" --pixel-size 0.3:-1 >"$tmp/e.log" 2>&1
[ $? -eq 2 ] && grep -q "pixel-size '0.3:-1'" "$tmp/e.log" && ok "a bad --pixel-size is refused" ||
  { cat "$tmp/e.log"; ko "a bad --pixel-size is refused with status 2"; }
h5dump -H -d predictions "$tmp/pred.h5" 2>/dev/null | grep -q "( 20, 1, 16, 16 )" &&
  ok "the output holds predictions [20, 1, 16, 16]" || ko "the output holds predictions [20, 1, 16, 16]"

if command -v mpirun >/dev/null; then
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_HOME -x STARPU_SILENT \
    -x STARPU_WORKERS_NOBIND=1 -x STARPU_MPI_NOBIND=1 "$predict" --model "$tmp/model.json" --workers 1 \
    --params "$tmp/p.h5" --data "$tmp/val.h5" --out "$tmp/pred2.h5" --batch 4 >"$tmp/pred2.log" 2>&1
  if h5diff -d 1e-5 "$tmp/pred.h5" "$tmp/pred2.h5" predictions >"$tmp/diff2.log" 2>&1 && ! ls "$tmp"/pred2.h5.part-* 2>/dev/null &&
    grep -q "^MSE $mse," "$tmp/pred2.log"; then
    ok "2 ranks write the 1-rank outputs in order, the same MSE, and no part file is left"
  else
    cat "$tmp/pred2.log" "$tmp/diff2.log"; ko "2 ranks write the 1-rank outputs in order (absolute 1e-5)"
  fi
else
  echo "SKIP: mpirun not found: the 2-rank comparison"
fi

if /usr/bin/python3 -c "import numpy, h5py" 2>/dev/null; then
  /usr/bin/python3 -c "import numpy, h5py; numpy.save('$tmp/x.npy', h5py.File('$tmp/val.h5', 'r')['inputs'][:])"
  pr --params "$tmp/p.h5" --data "$tmp/x.npy" --out "$tmp/pred_npy.h5" --batch 6 >"$tmp/npy.log" 2>&1
  /usr/bin/python3 -c "import h5py, numpy, sys
a, b = (h5py.File(f, 'r')['predictions'][:] for f in sys.argv[1:])
sys.exit(not numpy.array_equal(a, b))" "$tmp/pred.h5" "$tmp/pred_npy.h5" && ! grep -q "^MSE" "$tmp/npy.log" &&
    ok "a .npy input gives the same outputs (no metrics without targets)" ||
    { cat "$tmp/npy.log"; ko "a .npy input gives the same outputs as its HDF5 file"; }
  pr --params "$tmp/p.h5" --data "$tmp/x.npy" --out "$tmp/bad.h5" --png "$tmp/png" >"$tmp/e.log" 2>&1
  [ $? -eq 2 ] && grep -q "x.npy has no targets" "$tmp/e.log" && ok "--png without targets is refused" ||
    { cat "$tmp/e.log"; ko "--png without targets is refused with status 2"; }
else
  echo "SKIP: python3 with numpy and h5py not found: the .npy input"
fi

pr --params "$tmp/p.h5" --data "$tmp/val.h5" --out "$tmp/o.h5" --png "$tmp/png" --png-count 2 -q >"$tmp/png.log" 2>&1 &&
  [ -s "$tmp/png/sample_00000.png" ] && [ -s "$tmp/png/sample_00001.png" ] && [ ! -e "$tmp/png/sample_00002.png" ] &&
  ok "--png draws the first 2 samples" || { cat "$tmp/png.log"; ko "--png draws the first 2 samples"; }

"$gen" --out "$tmp/small.h5" --samples 4 --size 8 --seed 5 -q
pr --params "$tmp/p.h5" --data "$tmp/small.h5" --out "$tmp/bad.h5" >"$tmp/e.log" 2>&1
[ $? -ne 0 ] && grep -q "small.h5: inputs have per-sample shape \[1, 8, 8\] but model 'kill' takes \[1, 16, 16\]" "$tmp/e.log" &&
  ok "a shape mismatch is named: $(head -c 150 "$tmp/e.log")" || { cat "$tmp/e.log"; ko "a shape mismatch is named"; }
sed 's/"c2", "type": "conv2d", "out_channels": 1/"c2", "type": "conv2d", "out_channels": 3/; s/"padding": 1}],/"padding": 1},\n  {"name": "c3", "type": "conv2d", "out_channels": 1, "kernel": 1}],/' \
  "$tmp/model.json" >"$tmp/model3.json"
timeout 300 "$predict" --model "$tmp/model3.json" --params "$tmp/p.h5" --data "$tmp/val.h5" --out "$tmp/bad.h5" >"$tmp/e.log" 2>&1
[ $? -ne 0 ] && grep -q "c2.weight\|c3.weight" "$tmp/e.log" && grep -q "p.h5" "$tmp/e.log" &&
  ok "parameters that do not fit the model are named: $(head -c 150 "$tmp/e.log")" ||
  { cat "$tmp/e.log"; ko "parameters that do not fit the model are named (tensor and file)"; }
pr --data "$tmp/val.h5" --out "$tmp/bad.h5" >"$tmp/e.log" 2>&1
[ $? -eq 2 ] && grep -q "\-\-params P or --checkpoint FILE" "$tmp/e.log" && ok "missing parameters are named" ||
  { cat "$tmp/e.log"; ko "missing parameters are named (status 2)"; }
! ls "$tmp"/bad.h5* 2>/dev/null && ok "failed runs leave no output file" || ko "failed runs leave no output file"
fixture_done

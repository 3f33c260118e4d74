#!/usr/bin/env bash
# The 3-D examples' model files: each is what its make_model.py writes, passes tests/validate_model.py
# (JSON, layer types and fields, shapes from tessera-cosmogen's data to the targets), and broken
# copies fail it (so the check can fail); and the CosmoFlow and U-Net models each train one epoch on
# a few samples from tessera-cosmogen through tessera-train.
set -u
. "$(dirname "$0")/script_common.sh"
B=${TESSERA_BUILDDIR:-.}
S=${TESSERA_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
test_tmp examples3d
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1
val="$S/tests/validate_model.py"
cf=$S/examples/cosmoflow un=$S/examples/unet3d

# name | model file | make_model.py arguments | input shape | target shape
models=("cosmoflow|$cf/cosmoflow.json|$cf/make_model.py|4,32,32,32|4,1,1"
  "cosmoflow64|$cf/cosmoflow64.json|$cf/make_model.py --size 64|4,64,64,64|4,1,1"
  "unet3d|$un/unet3d.json|$un/make_model.py|1,32,32,32|3,32,32,32")
for m in "${models[@]}"; do
  IFS='|' read -r name file make in outs <<<"$m"
  # shellcheck disable=SC2086
  python3 $make -o "$tmp/$name.json" && cmp -s "$tmp/$name.json" "$file" && ok "$name: the JSON is what make_model.py writes" ||
    ko "$name: $file differs from what $make writes"
  python3 "$val" "$file" --input "$in" --output "$outs" && ok "$name: valid for inputs [$in], targets [$outs]" ||
    ko "$name: valid for inputs [$in], targets [$outs]"
done

# broken copies must fail: a misspelt field, a wrong input size, a concat of different sizes, an
# unknown type, a bad tanh scale
broken() { # WHAT PYTHON-STATEMENT-ON-m FILE INPUT OUTPUT
  python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(m, sys.stdout)' \
    "$3" "$2" >"$tmp/broken.json" || { ko "editing $3 for $1"; return; }
  python3 "$val" "$tmp/broken.json" --input "$4" --output "$5" >/dev/null 2>"$tmp/err" &&
    ko "the validator accepts $1" || ok "the validator refuses $1: $(cat "$tmp/err")"
}
broken "a misspelt field" 'm["layers"][1]["kernal"] = m["layers"][1].pop("kernel")' "$cf/cosmoflow.json" 4,32,32,32 4,1,1
broken "a 64^3 input for 32^3 data" 'm["layers"][0]["shape"] = [4, 64, 64, 64]' "$cf/cosmoflow.json" 4,32,32,32 4,1,1
broken "a concat of different sizes" '[l.update(kernel=3) for l in m["layers"] if l["type"] == "conv_transpose3d"]' \
  "$un/unet3d.json" 1,32,32,32 3,32,32,32
broken "an unknown layer type" 'm["layers"][4]["type"] = "maxpool4d"' "$cf/cosmoflow.json" 4,32,32,32 4,1,1
broken "a bad tanh scale" 'm["layers"][-1]["scale"] = "big"' "$cf/cosmoflow.json" 4,32,32,32 4,1,1
broken "a dense head without flatten" 'm["layers"] = [l for l in m["layers"] if l["type"] != "flatten"]' \
  "$cf/cosmoflow.json" 4,32,32,32 4,1,1

# through the library
if ! [ -x "$B/tessera-train" ] || ! [ -x "$B/tessera-cosmogen" ]; then
  ko "$B/tessera-train and $B/tessera-cosmogen are built (set TESSERA_BUILDDIR)"
elif ! { "$B/tessera-cosmogen" --out "$tmp/reg.h5" --samples 8 -q &&
  "$B/tessera-cosmogen" --out "$tmp/seg.h5" --samples 8 --task segmentation -q; }; then
  ko "tessera-cosmogen writes the example data"
else
  for m in "cosmoflow|$cf/cosmoflow.json|reg" "unet3d|$un/unet3d.json|seg"; do
    IFS='|' read -r name file data <<<"$m"
    timeout 600 "$B/tessera-train" --model "$file" --data "$tmp/$data.h5" --epochs 1 --batch 4 --workers 2 \
      >"$tmp/$name.log" 2>&1 && ok "$name: tessera-train runs an epoch" ||
      { cat "$tmp/$name.log"; ko "$name: tessera-train runs an epoch"; }
  done
fi
tests_done

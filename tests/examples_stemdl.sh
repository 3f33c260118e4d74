#!/usr/bin/env bash
# The STEMDL example's model files: each is what examples/stemdl/make_model.py writes and passes
# tests/validate_model.py for its data's shapes; the global-mixing bottleneck (--bottleneck dense:N)
# has the stated layers and shapes, a broken copy of it (transposed-conv kernel not the lowest
# resolution) is refused by the validator and by tessera-train, and the bottleneck model trains one
# step on tessera-cbed data, its exported parameters of the stated shapes.
set -u
. "$(dirname "$0")/script_common.sh"
B=${TESSERA_BUILDDIR:-.}
S=${TESSERA_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
test_tmp stemdl
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1
val="$S/tests/validate_model.py" ex=$S/examples/stemdl make=$S/examples/stemdl/make_model.py

# name | model file | make_model.py arguments | input shape | target shape
models=("fcdensenet|$ex/fcdensenet.json||1,64,64|1,64,64"
  "fcdensenet_cbed|$ex/fcdensenet_cbed.json|--size 32 --in-channels 16|16,32,32|1,32,32"
  "fcdensenet_cbed_dense256|$ex/fcdensenet_cbed_dense256.json|--size 32 --in-channels 16 --bottleneck dense:256|16,32,32|1,32,32")
for m in "${models[@]}"; do
  IFS='|' read -r name file args in outs <<<"$m"
  # shellcheck disable=SC2086 # args is a list of options
  python3 "$make" $args -o "$tmp/$name.json" 2>/dev/null && cmp -s "$tmp/$name.json" "$file" &&
    ok "$name: the JSON is what make_model.py${args:+ $args} writes" || ko "$name: $file differs from what make_model.py${args:+ $args} writes"
  python3 "$val" "$file" --input "$in" --output "$outs" && ok "$name: valid for inputs [$in], targets [$outs]" ||
    ko "$name: valid for inputs [$in], targets [$outs]"
done

# the bottleneck's layers: at the lowest resolution (32 / 2^3 = 4) the 64 maps entering the
# bottleneck block are flattened (1024), mixed by dense 256, and a 4x4 transposed conv gives back
# 16 maps of 4x4, concatenated to the block's 16 new ones before the first transition up
d256=$ex/fcdensenet_cbed_dense256.json
python3 - "$d256" <<'EOF' && ok "dense:256: flatten 1024 -> dense 256 -> conv_transpose2d 4x4 -> concat at 4x4" || ko "dense:256 layers"
import json, sys
L = {l["name"]: l for l in json.load(open(sys.argv[1]))["layers"]}
assert L["gmix_bn"]["input"] == "td3_pool", L["gmix_bn"]
assert L["gmix_dense"]["out_features"] == 256, L["gmix_dense"]
assert (L["gmix_up"]["type"], L["gmix_up"]["kernel"], L["gmix_up"]["out_channels"]) == ("conv_transpose2d", 4, 16)
assert L["gmix_cat"]["inputs"] == ["db4_new", "gmix_up"], L["gmix_cat"]
assert L["tu3"]["input"] == "gmix_cat", L["tu3"]
EOF
# --input-mix dense:N: the input (16 x 32 x 32, batchnorm, no relu) flattened (16384), dense 256, and
# a 32x32 transposed conv gives back 16 full-size maps, concatenated to conv0's 16 (no model file)
inmix=$tmp/inmix.json
python3 "$make" --size 32 --in-channels 16 --input-mix dense:256 -o "$inmix" 2>/dev/null &&
  python3 "$val" "$inmix" --input 16,32,32 --output 1,32,32 && python3 - "$inmix" <<'EOF' &&
import json, sys
L = {l["name"]: l for l in json.load(open(sys.argv[1]))["layers"]}
assert L["imix_bn"]["input"] == "input" and L["imix_flat"]["input"] == "imix_bn", L["imix_flat"]
assert L["imix_dense"]["out_features"] == 256, L["imix_dense"]
assert (L["imix_up"]["type"], L["imix_up"]["kernel"], L["imix_up"]["out_channels"]) == ("conv_transpose2d", 32, 16)
assert L["imix_cat"]["inputs"] == ["conv0", "imix_up"] and L["db1_l1_bn"]["input"] == "imix_cat", L["imix_cat"]
EOF
  ok "input-mix dense:256: bn -> flatten 16384 -> dense 256 -> conv_transpose2d 32x32 -> concat with conv0" ||
  ko "input-mix dense:256 layers"
python3 "$make" --size 32 --in-channels 16 --bottleneck dense:0 -o "$tmp/bad.json" 2>/dev/null &&
  ko "make_model.py accepts --bottleneck dense:0" || ok "make_model.py refuses --bottleneck dense:0"
# a transposed conv whose kernel is not the lowest resolution: its output is not 4x4, the concat fails
python3 -c 'import json, sys; m = json.load(open(sys.argv[1]))
[l.update(kernel=3) for l in m["layers"] if l["name"] == "gmix_up"]
json.dump(m, open(sys.argv[2], "w"))' "$d256" "$tmp/broken.json"
python3 "$val" "$tmp/broken.json" --input 16,32,32 --output 1,32,32 >/dev/null 2>&1 &&
  ko "the validator accepts a 3x3 gmix_up kernel" || ok "the validator refuses a 3x3 gmix_up kernel"

# through the library: one training step (8 samples, 7 of them for training, batch 4), the parameters of the stated shapes
if ! [ -x "$B/tessera-train" ] || ! [ -x "$B/tessera-cbed" ]; then
  ko "$B/tessera-train and $B/tessera-cbed are built (set TESSERA_BUILDDIR)"
elif ! "$B/tessera-cbed" --out "$tmp/cbed.h5" --samples 8 --seed 3 --grid 32 --pattern 32 --target 32 --probes 4 \
  --fov 10 --workers 2 -q; then
  ko "tessera-cbed writes 8 samples"
else
  # model | name | the global path's layer prefix | its dense weight's shape | its transposed conv's
  for m in "$d256|dense:256|gmix|256, 1024|256, 16, 4, 4" "$inmix|input-mix dense:256|imix|256, 16384|256, 16, 32, 32"; do
    IFS='|' read -r file name p wd wu <<<"$m"
    rm -f "$tmp/log.csv" "$tmp/p.h5"
    if timeout 600 "$B/tessera-train" --model "$file" --data "$tmp/cbed.h5" --epochs 1 --batch 4 --workers 2 \
      --standardize-targets --export-params "$tmp/p.h5" --log "$tmp/log.csv" >"$tmp/train.log" 2>&1 &&
      awk -F, 'NR == 2 && $2 == 1 && $3 + 0 > 0 && $3 + 0 < 1e9 { ok = 1 } END { exit !ok }' "$tmp/log.csv"; then
      ok "$name: tessera-train runs a step (train loss $(awk -F, 'NR == 2 { print $3 }' "$tmp/log.csv"))"
    else
      cat "$tmp/train.log"; ko "$name: tessera-train runs a step"
    fi
    shapes=$(h5ls "$tmp/p.h5" 2>/dev/null | grep -E "^${p}_(dense|up)\.weight ")
    echo "$shapes" | grep -q "^${p}_dense\.weight .*{$wd}" && echo "$shapes" | grep -q "^${p}_up\.weight .*{$wu}" &&
      ok "$name: exported weights ${p}_dense [$wd], ${p}_up [$wu]" ||
      ko "$name: exported weights of the stated shapes (got: $shapes)"
  done
  timeout 600 "$B/tessera-train" --model "$tmp/broken.json" --data "$tmp/cbed.h5" --epochs 1 --batch 8 --workers 2 \
    >"$tmp/broken.log" 2>&1 && ko "tessera-train accepts a 3x3 gmix_up kernel" ||
    { grep -q gmix "$tmp/broken.log" && ok "tessera-train refuses a 3x3 gmix_up kernel: $(grep -m1 gmix "$tmp/broken.log")" ||
      { cat "$tmp/broken.log"; ko "tessera-train's message names the layer"; }; }
fi
tests_done

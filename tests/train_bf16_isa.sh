#!/usr/bin/env bash
# --precision bf16 on a CPU without oneDNN's bf16 kernels (oneDNN 2.6: AVX-512 only), emulated here
# by capping oneDNN at AVX2 (ONEDNN_MAX_CPU_ISA): the example trains, says once that bf16 falls back,
# stores nothing in bf16, and its deterministic step log equals the float32 run's bitwise.
set -u
. "$(dirname "$0")/train_fixture.sh"
fixture_setup bf16isa 16
model=${TESSERA_SRCDIR:-..}/examples/stemdl/fcdensenet.json
"$gen" --out "$tmp/d64.h5" --samples 16 --size 64 -q || ko "tessera-datagen wrote 64x64 samples"
for p in bf16 f32; do
  ONEDNN_MAX_CPU_ISA=AVX2 timeout 300 "$train" --model "$model" --data "$tmp/d64.h5" --epochs 1 --batch 8 \
    --precision $p --val-fraction 0 --deterministic --step-log "$tmp/steps.$p" >"$tmp/out.$p" 2>&1 &&
    ok "capped at AVX2, --precision $p trains the example" ||
    { cat "$tmp/out.$p"; ko "capped at AVX2, --precision $p trains the example"; }
done
grep -q "bf16 was asked for" "$tmp/out.bf16" && ok "the fallback to float32 is said" ||
  { cat "$tmp/out.bf16"; ko "the fallback to float32 is said"; }
[ -s "$tmp/steps.f32" ] && cmp -s "$tmp/steps.bf16" "$tmp/steps.f32" &&
  ok "capped at AVX2, bf16's step log equals float32's bitwise (nothing ran or was stored in bf16)" ||
  { paste "$tmp/steps.bf16" "$tmp/steps.f32"; ko "capped at AVX2, bf16's step log equals float32's"; }
fixture_done

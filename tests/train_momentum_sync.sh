#!/usr/bin/env bash
# tessera-train's --momentum-sync-every and --momentum-sync-layers (Lion's momentum_sync_every and
# momentum_sync_layers): refused naming the flag when the optimizer is not Lion, when the layers have
# no period (none, or --momentum-sync-every 0), when the patterns match no tensor with parameters and,
# as the model file's key, without a sign reduction (--grad-reduce sign1, signp or signp_mean);
# recorded in the effective configuration; under mpirun (2 ranks, sign1, own data per rank) the flags
# give the model file keys' run bitwise (losses and bytes), and they take effect: averaging every
# layer's momenta sends more bytes than averaging c1's only, which sends more than none, and
# --momentum-sync-every 0 turns the model file's averaging off.
set -u
. "$(dirname "$0")/train_fixture.sh"
fixture_setup msync 64
lion='"optimizer": {"type": "lion", "lr": 0.0003}'
sed "s/\"optimizer\": {[^}]*}/$lion/" "$tmp/model.json" >"$tmp/lion.json"
sed "s/\"optimizer\": {[^}]*}/\"optimizer\": {\"type\": \"lion\", \"lr\": 0.0003, \"momentum_sync_every\": 2, \"momentum_sync_layers\": \"c1\"}/" \
  "$tmp/model.json" >"$tmp/lion_keys.json"
grep -q '"type": "lion"' "$tmp/lion.json" && grep -q 'momentum_sync_layers' "$tmp/lion_keys.json" ||
  { ko "the Lion model files"; fixture_done; exit; }
args=(--data "$tmp/data.h5" --val-fraction 0.125 --batch 4 --seed 5 --workers 1 --deterministic)

# refused BAD_OUTPUT_PATTERN WHAT ARGS...: the run fails and its output holds the pattern
refused() {
  local pat=$1 what=$2
  shift 2
  if timeout 300 "$train" "${args[@]}" --epochs 1 "$@" >"$tmp/bad.out" 2>&1; then
    ko "$what: not refused"
  elif grep -q -- "$pat" "$tmp/bad.out"; then
    ok "$what: refused naming the flag"
  else
    cat "$tmp/bad.out"
    ko "$what: refused without '$pat'"
  fi
}
refused "--momentum-sync-every: the optimizer of .* is adam" "--momentum-sync-every with Adam" \
  --model "$tmp/model.json" --momentum-sync-every 2
refused "--momentum-sync-layers: the optimizer of .* is adam" "--momentum-sync-layers with Adam" \
  --model "$tmp/model.json" --momentum-sync-layers c1
refused "--momentum-sync-layers 'c1' needs a period" "--momentum-sync-layers without a period" \
  --model "$tmp/lion.json" --momentum-sync-layers c1
refused "--momentum-sync-layers 'c1' needs a period" "--momentum-sync-layers with --momentum-sync-every 0" \
  --model "$tmp/lion_keys.json" --momentum-sync-every 0 --momentum-sync-layers c1
refused "--momentum-sync-layers: optimizer: momentum_sync_layers 'zz\*,bn9' matches no layer" \
  "--momentum-sync-layers matching nothing" --model "$tmp/lion.json" --momentum-sync-every 2 --momentum-sync-layers 'zz*,bn9'
refused "--momentum-sync-every: -1 is out of range" "--momentum-sync-every -1" --model "$tmp/lion.json" --momentum-sync-every -1
# averaging needs a sign reduction: under a float one every rank already holds the same momenta
refused "--momentum-sync-every: optimizer: momentum_sync_every 2 needs a sign reduction (grad_reduce, --grad-reduce: sign1" \
  "--momentum-sync-every without a sign reduction" --model "$tmp/lion.json" --momentum-sync-every 2
refused "--momentum-sync-layers: optimizer: momentum_sync_every 3 needs a sign reduction (grad_reduce, --grad-reduce: .*'bf16'" \
  "--momentum-sync-layers with --grad-reduce bf16" --model "$tmp/lion.json" --momentum-sync-every 3 --momentum-sync-layers c1 \
  --grad-reduce bf16
refused "optimizer: momentum_sync_every 2 needs a sign reduction (grad_reduce, --grad-reduce: .*'f32'" \
  "the model file's momentum_sync_every without a sign reduction" --model "$tmp/lion_keys.json"

# the effective configuration records the flags
if timeout 300 "$train" "${args[@]}" --epochs 1 --model "$tmp/lion.json" --grad-reduce sign1 --momentum-sync-every 3 \
  --momentum-sync-layers 'c*' --log "$tmp/one.csv" -q >"$tmp/one.out" 2>&1 &&
  grep -q '"momentum_sync_every": 3' "$tmp/one.config.json" && grep -q '"momentum_sync_layers": "c\*"' "$tmp/one.config.json"; then
  ok "1 rank: the flags run and are in the effective configuration"
else
  cat "$tmp/one.out" "$tmp/one.config.json"
  ko "1 rank: the flags run and are in the effective configuration"
fi

need_mpirun
warm_bus "${args[@]}" --model "$tmp/lion.json"
# mrun NAME MODEL ARGS...: 2 ranks, sign1; $tmp/NAME.csv (losses) and $tmp/NAME.out (bytes)
mrun() {
  local name=$1 model=$2
  shift 2
  timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_HOME -x STARPU_SILENT "$train" "${args[@]}" \
    --epochs 2 --model "$model" --grad-reduce sign1 --log "$tmp/$name.csv" "$@" >"$tmp/$name.out" 2>&1 ||
    { cat "$tmp/$name.out"; ko "2 ranks, $name ran"; return 1; }
  cut -d, -f1-4 "$tmp/$name.csv" >"$tmp/$name.losses"
}
kb() { sed -n 's/.* \([0-9.e+]*\) KB sent by rank 0 per training step.*/\1/p' "$tmp/$1.out"; }
mrun none "$tmp/lion.json"
mrun keys "$tmp/lion_keys.json"
mrun flags "$tmp/lion.json" --momentum-sync-every 2 --momentum-sync-layers c1
mrun all "$tmp/lion.json" --momentum-sync-every 2
mrun off "$tmp/lion_keys.json" --momentum-sync-every 0
echo "KB per step: none $(kb none), keys $(kb keys), flags $(kb flags), all $(kb all), off $(kb off)"
cmp -s "$tmp/keys.losses" "$tmp/flags.losses" && [ -n "$(kb flags)" ] && [ "$(kb keys)" = "$(kb flags)" ] &&
  ok "2 ranks: the flags give the model file keys' losses and bytes" ||
  { diff "$tmp/keys.losses" "$tmp/flags.losses"; ko "2 ranks: the flags give the model file keys' losses and bytes"; }
awk -v n="$(kb none)" -v c="$(kb flags)" -v a="$(kb all)" 'BEGIN { exit !(n > 0 && c > n && a > c) }' &&
  ok "2 ranks: averaging c1's momenta adds bytes, every layer's more" ||
  ko "2 ranks: averaging c1's momenta adds bytes, every layer's more"
! cmp -s "$tmp/none.losses" "$tmp/flags.losses" && ok "2 ranks: averaging changes the losses" ||
  ko "2 ranks: averaging changes the losses (the comparisons above cannot tell)"
[ "$(kb off)" = "$(kb none)" ] && cmp -s "$tmp/none.losses" "$tmp/off.losses" &&
  ok "2 ranks: --momentum-sync-every 0 turns the model file's averaging off" ||
  ko "2 ranks: --momentum-sync-every 0 turns the model file's averaging off"
fixture_done

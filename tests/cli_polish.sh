#!/usr/bin/env bash
# The programs' common behaviour: --version prints configure's version and --help exits 0 on every
# program; every --seed defaults to 1; redirected into one file, tessera-train's standard output
# keeps its place before a later error on standard error; the gradient-group layout lines appear
# only with --verbose; tessera-datagen writes the same file with 1 and 2 --workers.
set -u
. "$(dirname "$0")/train_fixture.sh"
fixture_setup polish 32
version=$(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"/\1/p' "$B/config.h")
for p in tessera-train tessera-predict tessera-datagen tessera-trace tessera-cbed tessera-cosmogen tessera-scale; do
  [ "$("$B/$p" --version)" = "$p (Tessera) $version" ] && ok "$p --version" || ko "$p --version prints '$p (Tessera) $version'"
  "$B/$p" --help >"$tmp/help.txt" && grep -q "^Usage: $p" "$tmp/help.txt" || ko "$p --help"
  if grep -q -- "--seed" "$tmp/help.txt"; then
    grep -- "--seed" "$tmp/help.txt" | grep -q "default 1)" && ok "$p: --seed defaults to 1" || ko "$p: --seed defaults to 1"
  fi
done

args=(--model "$tmp/model.json" --data "$tmp/data.h5" --epochs 1 --batch 8 --workers 2)
timeout 300 "$train" "${args[@]}" --export-params /nonexistent-folder/p.h5 >"$tmp/order.log" 2>&1
base=$(grep -n "^baseline:" "$tmp/order.log" | cut -d: -f1) err=$(grep -n "nonexistent-folder" "$tmp/order.log" | cut -d: -f1)
[ -n "$base" ] && [ -n "$err" ] && [ "$base" -lt "$err" ] && head -1 "$tmp/order.log" | grep -q "^model 'kill'" &&
  ok "redirected, the header comes first and stdout lines stay before a later error" ||
  { cat "$tmp/order.log"; ko "redirected, stdout lines stay before a later error (baseline line ${base:-none}, error ${err:-none})"; }

timeout 300 "$train" "${args[@]}" >"$tmp/quiet.log" 2>&1
timeout 300 "$train" "${args[@]}" --verbose >"$tmp/verbose.log" 2>&1
! grep -q "gradient groups" "$tmp/quiet.log" && grep -q "gradient groups" "$tmp/verbose.log" &&
  ok "gradient-group lines only with --verbose" || { cat "$tmp/quiet.log"; ko "gradient-group lines only with --verbose"; }

"$gen" --out "$tmp/w1.h5" --samples 70 --size 16 --workers 1 -q && "$gen" --out "$tmp/w2.h5" --samples 70 --size 16 --workers 2 -q &&
  h5diff "$tmp/w1.h5" "$tmp/w2.h5" >/dev/null && ok "tessera-datagen: 1 and 2 workers write the same data" ||
  ko "tessera-datagen: 1 and 2 workers write the same data"
fixture_done

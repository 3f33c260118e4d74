#!/usr/bin/env bash
# tessera-train and the memory limit: a model that cannot fit (the issue's 1e9 output channels) stops
# at start-up with a message naming the layer, the bytes needed and the bytes available, and a
# nonzero status (within seconds: it allocates nothing); the small fixture model trains under the
# same limit; and a malformed TESSERA_MEMORY_LIMIT is reported by name.
set -u
. "$(dirname "$0")/train_fixture.sh"
fixture_setup limits 64
args=(--data "$tmp/data.h5" --epochs 1 --batch 4 --workers 2 -q)

sed 's/"out_channels": 6/"out_channels": 1000000000/' "$tmp/model.json" >"$tmp/huge.json"
TESSERA_MEMORY_LIMIT=1G timeout 120 "$train" --model "$tmp/huge.json" "${args[@]}" >"$tmp/huge.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "conv2d 'c1'" "$tmp/huge.log" &&
  grep -qE "needs [0-9]+ bytes .*more than the 1073741824 bytes \(1.0 GiB\) available \(TESSERA_MEMORY_LIMIT\)" "$tmp/huge.log"; then
  ok "a model that cannot fit is refused with status $rc: $(head -c 160 "$tmp/huge.log")..."
else
  cat "$tmp/huge.log"
  ko "a model that cannot fit is refused naming the layer and the bytes (rc $rc)"
fi

TESSERA_MEMORY_LIMIT=1G timeout 300 "$train" --model "$tmp/model.json" "${args[@]}" >"$tmp/small.log" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "the fixture model trains under a 1 GiB limit" ||
  { cat "$tmp/small.log"; ko "the fixture model trains under a 1 GiB limit (rc $rc)"; }

TESSERA_MEMORY_LIMIT=lots timeout 120 "$train" --model "$tmp/model.json" "${args[@]}" >"$tmp/bad.log" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "TESSERA_MEMORY_LIMIT='lots'" "$tmp/bad.log" && ok "a malformed TESSERA_MEMORY_LIMIT is named" ||
  { cat "$tmp/bad.log"; ko "a malformed TESSERA_MEMORY_LIMIT is named (rc $rc)"; }
fixture_done

#!/usr/bin/env bash
# TESSERA_HANG_DUMP (src/runtime/hang.c): a run whose tasks stop ending (here a slowed rank's sleep
# task of 60 s, TESSERA_SLOW_RANK, against a watchdog of 2 s) prints "tessera: hang detected" and
# every thread's stacks (with gdb; the stack check skips without it), and aborts long before the
# sleep ends; without the variable the same run is not stopped by a watchdog (it is stopped here by
# `timeout` after 8 s: status 124).
set -u
. "$(dirname "$0")/train_fixture.sh"
fixture_setup hang-dump 16
args=(--model "$tmp/model.json" --data "$tmp/data.h5" --batch 8 --workers 2 --epochs 1 -q)
start=$SECONDS
TESSERA_HANG_DUMP=2 TESSERA_SLOW_RANK=0:60000 timeout 50 "$train" "${args[@]}" >"$tmp/dump.log" 2>&1
rc=$? took=$((SECONDS - start))
if [ $rc -ne 124 ] && [ $took -lt 50 ] && grep -q "^tessera: hang detected (no task ended for 2 s)" "$tmp/dump.log"; then
  ok "a run whose tasks stop ending says so and stops (status $rc after $took s)"
else
  cat "$tmp/dump.log"; ko "a run whose tasks stop ending says 'tessera: hang detected' and stops (status $rc, $took s)"
fi
if command -v gdb >/dev/null; then
  grep -q "^#[0-9].* in _starpu_cpu_worker" "$tmp/dump.log" && grep -q "^Thread .*watchdog" "$tmp/dump.log" &&
    ok "the dump holds the threads' stacks (CPU workers, the watchdog)" ||
    { cat "$tmp/dump.log"; ko "the dump holds the threads' stacks"; }
else
  echo "(no gdb: the stacks are not checked)"
fi
env -u TESSERA_HANG_DUMP TESSERA_SLOW_RANK=0:60000 timeout 8 "$train" "${args[@]}" >"$tmp/plain.log" 2>&1
rc=$?
[ $rc -eq 124 ] && ! grep -q "hang detected" "$tmp/plain.log" && ok "without TESSERA_HANG_DUMP nothing watches (stopped by timeout)" ||
  { cat "$tmp/plain.log"; ko "without TESSERA_HANG_DUMP nothing watches (status $rc, want 124)"; }
fixture_done

# Sourced by the test scripts: PASS/FAIL counters, a temporary folder removed on exit, and the
# summary line whose status is the script's.
pass=0 fail=0
ok() { echo "PASS: $1"; pass=$((pass + 1)); }
ko() { echo "FAIL: $1"; fail=$((fail + 1)); }
# test_tmp NAME: $tmp, a new folder /tmp/tessera-NAME-*, removed when the script exits.
test_tmp() {
  tmp=$(mktemp -d "/tmp/tessera-$1-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
}
# The summary; its status is 0 when no check failed.
tests_done() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }

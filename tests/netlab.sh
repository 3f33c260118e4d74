#!/usr/bin/env bash
# Multi-rank training over the emulated network (scripts/netlab: one namespace per node, veth links
# through a bridge shaped to 1 Gbit/s, Open MPI on TCP between nodes): at 2 ranks (2 nodes) and 4
# ranks (2 nodes x 2, shared memory inside a node) every rank ends with identical parameters, equal
# (relative 1e-4) to a 1-rank run of the N-times batch and bitwise equal to the same deterministic run
# over shared memory, and the reductions' bytes went over the shaped links; a model that differs on
# one rank stops every rank naming the layer; a rank whose link goes down makes every rank fail with
# the step deadline's error instead of hanging; and the lab leaves no namespace, process or state
# behind, also when netlab is killed with SIGKILL (its guard cleans up) and when its guard is killed
# too (`netlab cleanup`); the lab's Open MPI options leave out the TCP transport's emulated put.
# Skips (77) without root, ip, tc, unshare or namespaces. Waits end on events; HANG_S only bounds
# hangs.
set -u
. "$(dirname "$0")/script_common.sh"
bin=${TESSERA_BUILDDIR:-.}/tests/mpi_train
netlab=${TESSERA_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/scripts/netlab
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
why=$("$netlab" check) || { echo "SKIP: ${why:-netlab check failed}"; exit 77; }
HANG_S=${HANG_S:-300}
test_tmp netlab
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 TESSERA_SKIP_ALLREDUCE=0
same_ranks() { # prefix n
  local r
  for ((r = 1; r < $2; r++)); do cmp -s "$1.rank0.params" "$1.rank$r.params" || return 1; done
}
lab() { # nodes ranks-per-node out extra...: mpi_train over a lab, status of the run
  local nodes=$1 k=$2 out=$3
  shift 3
  timeout "$HANG_S" "$netlab" run --nodes "$nodes" --ranks-per-node "$k" --rate 1gbit -- mpirun \
    -np $((nodes * k)) -x STARPU_HOME -x STARPU_SILENT "$bin" --batch 4 --steps 6 --out "$out" "$@" >"$out.log" 2>&1
}
lab_gone() { # id: no namespace, no state, no process left
  ! ip netns list | grep -q "^tsrlab-$1-" && [ ! -e "/run/tsrlab/$1" ] && ! pgrep -f "$tmp/" >/dev/null
}
wait_gone() { # id
  local i
  for ((i = 0; i < HANG_S * 10; i++)); do lab_gone "$1" && return 0; sleep 0.1; done
  return 1
}
links_before=$(ip -o link | wc -l)

# Open MPI's TCP transport goes without its emulated RDMA put where this Open MPI has it (with put,
# ranks sending to each other take turns on the link), and a user's own btl_tcp_flags is kept
if command -v ompi_info >/dev/null && ompi_info --param btl tcp --level 9 --parsable 2>/dev/null |
  grep -q '^mca:btl:tcp:param:btl_tcp_flags:value:.*\bput\b'; then
  id=$("$netlab" up --nodes 2)
  opts=$("$netlab" mpirun-opts "$id")
  mine=$(OMPI_MCA_btl_tcp_flags=send "$netlab" mpirun-opts "$id")
  "$netlab" down "$id"
  flags=
  [[ $opts =~ --mca\ btl_tcp_flags\ ([^ ]+) ]] && flags=,${BASH_REMATCH[1]},
  if [[ -n $flags && $flags != *,put,* && $flags == *,send,* ]]; then
    ok "the lab's mpirun options drop put from btl_tcp_flags ($flags)"
  else ko "the lab's mpirun options drop put from btl_tcp_flags: $opts"; fi
  if [[ $mine != *btl_tcp_flags* ]]; then ok "a user's OMPI_MCA_btl_tcp_flags is left to Open MPI"
  else ko "a user's OMPI_MCA_btl_tcp_flags is left to Open MPI: $mine"; fi
fi

for n in 2 4; do
  nodes=2 k=$((n / 2))
  "$bin" --batch $((4 * n)) --steps 6 --out "$tmp/ref$n" --deterministic >"$tmp/ref$n.log" 2>&1 ||
    ko "1-rank reference with batch $((4 * n)) ran"
  timeout "$HANG_S" mpirun --allow-run-as-root --oversubscribe -np $n -x STARPU_HOME -x STARPU_SILENT "$bin" --batch 4 \
    --steps 6 --out "$tmp/shm$n" --deterministic >"$tmp/shm$n.log" 2>&1 || ko "$n ranks over shared memory ran"
  if lab $nodes $k "$tmp/lab$n" --deterministic; then ok "$n ranks ($nodes nodes x $k) over the lab ran"
  else ko "$n ranks ($nodes nodes x $k) over the lab ran"; cat "$tmp/lab$n.log"; fi
  if same_ranks "$tmp/lab$n" $n; then ok "$n ranks over the lab: every rank holds identical parameters"
  else ko "$n ranks over the lab: every rank holds identical parameters"; fi
  if "$bin" --compare "$tmp/ref$n.rank0.params" "$tmp/lab$n.rank0.params" 1e-4 1e-6; then
    ok "$n ranks over the lab equal a 1-rank run of the $n-times batch"
  else ko "$n ranks over the lab equal a 1-rank run of the $n-times batch"; fi
  if cmp -s "$tmp/shm$n.rank0.params" "$tmp/lab$n.rank0.params"; then
    ok "$n ranks: deterministic runs over the lab and over shared memory are bitwise identical"
  else ko "$n ranks: deterministic runs over the lab and over shared memory are bitwise identical"; fi
  # In the ring one rank of node 0 sends to node 1 as many bytes as rank 0 sends for its reductions:
  # node 0's link carries at least that much more than in a run whose reductions are skipped.
  TESSERA_SKIP_ALLREDUCE=1 lab $nodes $k "$tmp/skip$n" --deterministic || ko "$n ranks without reductions ran"
  sent=$(awk '$1 == "reduce_bytes" { print $2 }' "$tmp/lab$n.rank0.stats")
  with=$(sed -n 's/^netlab: n0 sent \([0-9]*\) bytes.*/\1/p' "$tmp/lab$n.log")
  without=$(sed -n 's/^netlab: n0 sent \([0-9]*\) bytes.*/\1/p' "$tmp/skip$n.log")
  if [ -n "$sent" ] && [ -n "$with" ] && [ -n "$without" ] && [ $((with - without)) -ge "$sent" ]; then
    ok "$n ranks: the reductions crossed the shaped link (node 0 sent $with bytes, $without without reductions; rank 0 reduced $sent)"
  else ko "$n ranks: the reductions crossed the shaped link (node 0 sent ${with:-?} bytes, ${without:-?} without reductions; rank 0 reduced ${sent:-?})"; fi
done

lab 2 1 "$tmp/mismatch" --variant-rank 1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1 has layer 'b' (conv2d -> \[6, 8, 8\])" "$tmp/mismatch.log"; then
  ok "over the lab, a model differing on rank 1 stops the run with an error naming layer 'b'"
else ko "over the lab, a model differing on rank 1 stops the run with an error naming layer 'b' (rc $rc)"; cat "$tmp/mismatch.log"; fi

# A long run whose ranks write their own stderr (a rank cut off from mpirun cannot forward it).
cat >"$tmp/job.sh" <<'EOF2'
#!/bin/sh
echo "$NETLAB_ID" >"$OUT.id"
exec mpirun $NETLAB_MPIRUN_OPTS -np 2 -x STARPU_HOME -x STARPU_SILENT -x TESSERA_STEP_TIMEOUT -x BIN -x OUT "$0.rank"
EOF2
cat >"$tmp/job.sh.rank" <<'EOF2'
#!/bin/sh
exec "$BIN" --batch 4 --steps 1000000 --mark-training --out "$OUT" 2>"$OUT.rank$OMPI_COMM_WORLD_RANK.err"
EOF2
chmod +x "$tmp/job.sh" "$tmp/job.sh.rank"
long_run() { # out
  BIN=$bin OUT=$1 TESSERA_STEP_TIMEOUT=5 "$netlab" run --nodes 2 --rate 1gbit -- "$tmp/job.sh" >"$1.log" 2>&1 &
}
wait_training() { # out launcher
  local i
  for ((i = 0; i < HANG_S * 20; i++)); do
    [ -e "$1.rank0.training" ] && [ -e "$1.rank1.training" ] && [ -s "$1.id" ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

long_run "$tmp/down"
launcher=$!
if wait_training "$tmp/down" $launcher; then
  id=$(cat "$tmp/down.id")
  ip -n "tsrlab-$id-n1" link set eth0 down
  for ((i = 0; i < HANG_S * 10; i++)); do
    grep -qs "has probably died or hung" "$tmp/down.rank0.err" && grep -qs "has probably died or hung" "$tmp/down.rank1.err" && break
    sleep 0.1
  done
  if grep -qs "has probably died or hung" "$tmp/down.rank0.err" && grep -qs "has probably died or hung" "$tmp/down.rank1.err"; then
    ok "a link set down makes both ranks fail with the step deadline's error"
  else ko "a link set down makes both ranks fail with the step deadline's error"; tail -3 "$tmp"/down.rank*.err; fi
  kill -TERM $launcher 2>/dev/null
  wait $launcher
  if wait_gone "$id"; then ok "netlab stopped with SIGTERM leaves nothing behind"
  else ko "netlab stopped with SIGTERM leaves nothing behind"; ip netns list; fi
else
  kill -TERM $launcher 2>/dev/null
  wait $launcher
  ko "the run for the link test started training (netlab's status $?)"; tail -n 5 "$tmp/down.log" "$tmp"/down.rank*.err
fi

for victim in netlab netlab+guard; do
  rm -f "$tmp/kill.id" "$tmp"/kill.rank*
  long_run "$tmp/kill"
  launcher=$!
  if wait_training "$tmp/kill" $launcher; then
    id=$(cat "$tmp/kill.id")
    guard=$(cat "/run/tsrlab/$id/guard")
    [ $victim = netlab+guard ] && kill -KILL "$guard"
    kill -KILL $launcher
    wait $launcher 2>/dev/null
    [ $victim = netlab+guard ] && "$netlab" cleanup
    what="after SIGKILL of netlab, its guard removes everything"
    [ $victim = netlab+guard ] && what="after SIGKILL of netlab and its guard, netlab cleanup removes everything"
    if wait_gone "$id"; then ok "$what"; else ko "$what"; ip netns list; pgrep -af "$tmp/"; fi
  else
    kill -TERM $launcher 2>/dev/null
    wait $launcher
    ko "the run for the SIGKILL test ($victim) started training (netlab's status $?)"; tail -n 5 "$tmp/kill.log" "$tmp"/kill.rank*.err
  fi
done
if [ "$(ip -o link | wc -l)" -eq "$links_before" ]; then ok "no link was left in this namespace"
else ko "no link was left in this namespace"; fi

tests_done

#!/usr/bin/env bash
# Signals under mpirun: every rank of a 2-rank tessera-train run must stop after the same step (the
# trainer's control word), write one checkpoint and exit (HANG_S of train_fixture.sh bounds a hang),
# whether mpirun forwards the signal (SIGTERM, SIGINT or SIGUSR1 sent to mpirun: Open MPI turns SIGTERM
# and SIGINT into SIGTERM to the ranks) or the ranks get SIGTERM or SIGINT at different moments (as from
# a batch system or a launcher that forwards SIGINT); the run then resumes to per-step losses equal to
# an uninterrupted run's bitwise. A SIGTERM during start-up (rank 1 held stopped, so rank 0 waits in
# MPI_Init or the start-up agreement and has written no checkpoint) must be handled the same way,
# after the first steps.
set -u
. "$(dirname "$0")/train_fixture.sh"
need_mpirun
fixture_setup mpisig 576
args=(--model "$tmp/model.json" --data "$tmp/data.h5" --val-fraction 0.125 --epochs 4 --batch 4 --deterministic
  --seed 5 --workers 1 --slices 2 -q --checkpoint-every 5 --keep 2)
# On SIGTERM or SIGINT Open MPI waits odls_base_sigkill_timeout seconds (default 1), sends the ranks
# SIGTERM, waits as long again and sends SIGKILL: with the default a checkpoint under load can race
# the kill. 5 s leaves the checkpoint room; those two cases train for 400 epochs (25,200 steps: about
# 100 s here uninterrupted, far longer than that wait on any machine; 40 epochs once ended before the
# ranks got the signal on a quiet machine) and are not resumed: the other cases check resuming.
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2 --mca odls_base_sigkill_timeout 5 -x STARPU_HOME -x STARPU_SILENT)

warm_bus "${args[@]}"
"${mpi[@]}" "$train" "${args[@]}" --checkpoint-dir "$tmp/ref" --step-log "$tmp/ref.csv" >"$tmp/ref.log" 2>&1 ||
  { cat "$tmp/ref.log"; echo "FAIL: 2-rank reference run"; exit 1; }
nsteps=$(($(wc -l <"$tmp/ref.csv") - 1))
[ "$nsteps" -eq 252 ] && ok "2-rank reference run logged $nsteps steps" || ko "reference run logged $nsteps steps, expected 252"

handles_term() { local m; m=$(awk '/^SigCgt/ { print $2 }' "/proc/$1/status" 2>/dev/null); [ -n "$m" ] && ((0x$m & 0x4000)); }

# how: mpirun-TERM, mpirun-INT, mpirun-USR1 (mpirun forwards it), ranks-TERM or ranks-INT (rank 1
# first, rank 0 0.3 s later) or startup-TERM (rank 0 during start-up)
long_epochs=400
for how in mpirun-USR1 ranks-TERM ranks-INT mpirun-TERM mpirun-INT startup-TERM; do
  d=$tmp/$how
  mkdir -p "$d"
  # a background job of a script starts with SIGINT ignored (and so would the ranks): a job of its own
  [ $how = ranks-INT ] && set -m
  long=()
  case $how in mpirun-TERM | mpirun-INT) long=(--epochs $long_epochs) ;; esac
  "${mpi[@]}" "$train" "${args[@]}" "${long[@]}" --checkpoint-dir "$d/ck" --step-log "$d/steps.csv" >"$d/log" 2>&1 &
  launcher=$!
  set +m
  early=0
  if [ $how = startup-TERM ]; then
    r1=$(wait_rank "$d/ck" 1 $launcher)
    kill -STOP "$r1"
    r0=$(wait_rank "$d/ck" 0 $launcher)
    end=$((SECONDS + HANG_S))
    until handles_term "$r0" || ! kill -0 "$r0" 2>/dev/null || [ $SECONDS -ge $end ]; do sleep 0.02; done
    early=$(ls "$d/ck" 2>/dev/null | grep -c '\.h5$')
    handles_term "$r0" || early=-1
    echo "$how: rank 0 handles SIGTERM (-1: never), checkpoints written by then: $early"
  else
    wait_rows "$d/steps.csv" 21 $launcher # until training is under way (20 steps logged)
    echo "$how: signal after $(rows "$d/steps.csv") lines logged"
  fi
  ranks=$(ranks_of "$d/ck")
  start=$(date +%s.%N)
  case $how in
  mpirun-*) kill -"${how#mpirun-}" "$launcher" ;;
  ranks-*) for p in $(echo "$ranks" | sort -rn); do kill -"${how#ranks-}" "$p" 2>/dev/null; sleep 0.3; done ;; # the second may be gone already
  startup-TERM) kill -TERM "$r0"; sleep 0.3; kill -CONT "$r1" ;;
  esac
  if wait_gone "$launcher"; then hung=0
  else
    kill -KILL "$launcher" $ranks 2>/dev/null
    hung=1
  fi
  wait "$launcher"
  rc=$?
  took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  done_before=$(($(cat "$d/steps.csv" 2>/dev/null | wc -l) - 1))
  nck=$(grep -c "received: checkpoint .* written after training step" "$d/log")
  steps=$(grep -o "written after training step [0-9]*" "$d/log" | awk '{ print $NF }' | sort -u | tr '\n' ' ')
  rrc=0 msg=
  if [ ${#long[@]} = 0 ]; then
    "${mpi[@]}" "$train" "${args[@]}" --checkpoint-dir "$d/ck" --resume --step-log "$d/steps.csv" >>"$d/log" 2>&1
    rrc=$?
  fi
  named=1 # rank 1 got SIGINT before any rank stopped: it names it
  [ $how = ranks-INT ] && ! grep -q "SIGINT received: checkpoint" "$d/log" && named=0
  if [ $hung = 0 ] && [ "$nck" -eq 2 ] && [ "$(echo $steps | wc -w)" -eq 1 ] && [ $rrc -eq 0 ] && [ "$early" -eq 0 ] &&
    [ "$done_before" -lt "$([ ${#long[@]} = 0 ] && echo $nsteps || echo $((nsteps / 4 * long_epochs)))" ] && [ $named = 1 ] && { [ ${#long[@]} != 0 ] || msg=$(same_as_ref "$d/steps.csv"); }; then
    ok "$how: both ranks stopped after step $steps(status $rc, $took s after the signal)$([ ${#long[@]} = 0 ] && echo "; the resumed run matches bitwise")"
  else
    ko "$how: ranks agree, checkpoint, resume (hung $hung, rc $rc, $took s, rank messages $nck, steps '$steps', resume rc $rrc, $done_before steps before, early $early, signal named $named) ${msg:-}"
    grep "^tessera" "$d/log" | tail -10 # the ranks' own messages (mpirun's come last)
  fi
done

fixture_done

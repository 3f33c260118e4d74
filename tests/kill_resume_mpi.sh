#!/usr/bin/env bash
# Kill tests under mpirun -np 2: deterministic 2-rank training with frequent checkpoints is killed
# with SIGKILL at random points of its progress (rank 1, mpirun, rank 0 in turn) and resumed
# (--resume) until it finishes. After every kill no rank may outlive the run; every resume must start
# from the newest complete checkpoint (named in its log), ignoring a planted newer temporary file;
# and every step's loss, rows logged twice around a kill included, must equal the uninterrupted
# run's bitwise. Then a rank that hangs (SIGSTOP) must make the other end the job with an error (its
# step deadline, TESSERA_STEP_TIMEOUT). Waits end on events; HANG_S (train_fixture.sh) only bounds a
# hang. KILL_TRIALS (default 3) sets the number of trials, each with up to 2 kills.
set -u
. "$(dirname "$0")/train_fixture.sh"
TRIALS=${KILL_TRIALS:-3}
need_mpirun
fixture_setup killmpi 320
# not -q: a resumed run names the checkpoint it starts from
args=(--model "$tmp/model.json" --data "$tmp/data.h5" --val-fraction 0.125 --epochs 3 --batch 4 --deterministic
  --seed 5 --workers 1 --slices 2 --checkpoint-every 4 --keep 2)
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_HOME -x STARPU_SILENT)

warm_bus "${args[@]}"
"${mpi[@]}" "$train" "${args[@]}" --checkpoint-dir "$tmp/ref" --step-log "$tmp/ref.csv" >"$tmp/ref.log" 2>&1 ||
  { cat "$tmp/ref.log"; echo "FAIL: 2-rank reference run"; exit 1; }
nsteps=$(($(wc -l <"$tmp/ref.csv") - 1))
[ "$nsteps" -eq 105 ] && ok "2-rank reference run logged $nsteps steps" ||
  ko "reference run logged $nsteps steps, expected 105"


# One run of a trial: starts (or resumes) the run, kills `victim` at a random point of its progress;
# status 0 = killed, 1 = finished, 2 = failed. Checks the resume message.
victims=(rank1 mpirun rank0)
kills_total=0
attempt() { # folder attempt victim
  local d=$1 a=$2 victim=$3 newest used step p= i start r
  newest=$(ls "$d/ck"/ckpt-*.h5 2>/dev/null | sort | tail -1)
  if [ -n "$newest" ]; then # a partial checkpoint newer than every complete one (as a kill mid-write leaves)
    step=$(basename "$newest" .h5)
    step=$((10#${step#ckpt-} + 1))
    head -c 2000 "$newest" >"$(printf '%s/ck/ckpt-%012d.h5.tmp' "$d" "$step")"
  fi
  local logged=$(rows "$d/steps.csv")
  "${mpi[@]}" "$train" "${args[@]}" --resume --checkpoint-dir "$d/ck" --step-log "$d/steps.csv" >"$d/log.$a" 2>&1 &
  local launcher=$!
  # once the run has logged a random 0-39 more steps (start-up, training, validation, checkpoint
  # writing): a point of progress, not a delay, so speed and load cannot decide whether it is killed
  if [ "$victim" != none ] && wait_rows "$d/steps.csv" $((logged + RANDOM % 40)) $launcher; then
    case $victim in
    mpirun) p=$launcher ;;
    rank*) p=$(wait_rank "$d/ck" "${victim#rank}" $launcher) ;;
    esac
  fi
  start=$(date +%s)
  if [ -n "$p" ] && kill -KILL "$p" 2>/dev/null; then
    kills_total=$((kills_total + 1))
    wait $launcher 2>/dev/null
    if ! wait_no_ranks "$d/ck"; then
      local left=$(ranks_of "$d/ck")
      ko "$(basename "$d"): ranks $left still running $HANG_S s after $victim was killed"
      kill -KILL $left 2>/dev/null
    fi
    echo "$(basename "$d") run $a: SIGKILL to $victim; every process gone after $(($(date +%s) - start)) s" >>"$tmp/kills"
    r=0
  else
    wait $launcher && r=1 || r=2
  fi
  used=$(grep -m1 "^resuming from" "$d/log.$a")
  if [ -n "$newest" ] && [ -n "$used" ]; then
    if [[ $used == "resuming from $newest:"* ]]; then echo "$(basename "$d") run $a: $used" >>"$tmp/resumes"
    else ko "$(basename "$d") run $a resumes from the newest complete checkpoint $(basename "$newest"): $used"; fi
  elif [ -n "$newest" ] && [ $r -ne 0 ]; then
    ko "$(basename "$d") run $a names the checkpoint it resumes from ($(basename "$newest"))"
  elif [ -z "$newest" ] && [ -n "$used" ]; then
    ko "$(basename "$d") run $a: no checkpoint was there, yet: $used"
  fi
  # files appear under their final name only once complete: none may be found invalid
  grep -q "checkpoint rejected" "$d/log.$a" && ko "$(basename "$d") run $a: $(grep -m1 'checkpoint rejected' "$d/log.$a")"
  return $r
}

for trial in $(seq 1 "$TRIALS"); do
  d=$tmp/t$trial
  mkdir -p "$d"
  status=0 a=0
  for k in 0 1; do
    a=$((a + 1))
    attempt "$d" $a "${victims[$(((trial - 1 + k) % 3))]}"
    status=$?
    [ $status -ne 0 ] && break
  done
  while [ $status -eq 0 ] && [ $a -lt 4 ]; do # to the end (a kill can not happen again)
    a=$((a + 1))
    attempt "$d" $a none
    status=$?
  done
  if [ $status -eq 1 ] && msg=$(same_as_ref "$d/steps.csv"); then
    ok "trial $trial: $(grep -c "^t$trial " "$tmp/kills" 2>/dev/null) kill(s), $(grep -c "^t$trial " "$tmp/resumes" 2>/dev/null) resume(s) from the newest checkpoint; losses equal the uninterrupted run's bitwise ($(($(wc -l <"$d/steps.csv") - 1)) rows)"
  else
    ko "trial $trial: resumed run finishes and equals the uninterrupted one (last status $status) ${msg:-}"
    tail -5 "$d/log.$a"
  fi
done
cat "$tmp/kills" "$tmp/resumes" 2>/dev/null
if [ "$kills_total" -ge "$TRIALS" ] && [ -s "$tmp/resumes" ]; then
  ok "SIGKILLs sent: $kills_total, resumes checked: $(wc -l <"$tmp/resumes")"
else
  ko "SIGKILLs sent: $kills_total (fewer than the $TRIALS trials) or no resume checked"
fi

# A rank that hangs (SIGSTOP) must not leave the other waiting: it stops at its step deadline
# (TESSERA_STEP_TIMEOUT) with an error naming the problem, and the job ends.
d=$tmp/hang
mkdir -p "$d"
TESSERA_STEP_TIMEOUT=5 "${mpi[@]}" -x TESSERA_STEP_TIMEOUT "$train" "${args[@]}" --epochs 50 --checkpoint-dir "$d/ck" \
  --step-log "$d/steps.csv" >"$d/log" 2>&1 &
launcher=$!
wait_rows "$d/steps.csv" 6 $launcher
p=$(rank_pid "$d/ck" 1)
start=$(date +%s)
kill -STOP $p
wait_gone $launcher && hung=0 || hung=1
took=$(($(date +%s) - start))
left=$(ranks_of "$d/ck")
kill -KILL $left $launcher 2>/dev/null
wait $launcher 2>/dev/null
rc=$?
if [ $hung = 0 ] && [ -z "$left" ] && [ $rc -ne 0 ] && grep -q "rank 0: .*another rank has probably died or hung" "$d/log"; then
  ok "a hung rank (SIGSTOP) ends the job with an error naming the problem after $took s (status $rc)"
else
  ko "a hung rank (SIGSTOP) ends the job with an error (status $rc, $took s, hung $hung, ranks left: ${left:-none})"
  tail -5 "$d/log"
fi

fixture_done

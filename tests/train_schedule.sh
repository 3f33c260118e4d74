#!/usr/bin/env bash
# tessera-train's learning-rate schedules: a deterministic run stopped after its second epoch and
# resumed (--resume) to its fourth logs every training step's loss bitwise as the uninterrupted run,
# for reduce-on-plateau (its state is in the checkpoint; the run must have lowered its rate for the
# test to mean anything) and for a per-step cosine schedule with warm-up; a schedule's rates differ
# from the constant rate's; a schedule in the model file is used; bad schedules are refused naming
# the field.
set -u
. "$(dirname "$0")/train_fixture.sh"
fixture_setup schedule 64
export STARPU_NCPU=2
args=(--model "$tmp/model.json" --data "$tmp/data.h5" --val-fraction 0.125 --batch 4 --deterministic --seed 5
  --workers 2 --slices 2)

# run NAME EPOCHS SCHEDULE [more options]: a run into $tmp/NAME (checkpoints, step log, output)
run() {
  local name=$1 epochs=$2 sched=$3
  shift 3
  "$train" "${args[@]}" --epochs "$epochs" --lr-schedule "$sched" --checkpoint-dir "$tmp/$name/ck" \
    --step-log "$tmp/$name/steps.csv" "$@" >>"$tmp/$name/out" 2>&1
}

for sched in "plateau,patience=0,threshold=0.5,factor=0.5" "cosine,t0=9,t_mult=2,per_step=1,warmup_steps=5"; do
  kind=${sched%%,*}
  mkdir -p "$tmp/$kind-whole" "$tmp/$kind-parts"
  run "$kind-whole" 4 "$sched" || { cat "$tmp/$kind-whole/out"; ko "$kind: the whole run failed"; continue; }
  cp "$tmp/$kind-whole/steps.csv" "$tmp/ref.csv"
  if run "$kind-parts" 2 "$sched" && run "$kind-parts" 4 "$sched" --resume; then
    grep -q "resuming from" "$tmp/$kind-parts/out" || ko "$kind: the second part did not resume"
    if msg=$(same_as_ref "$tmp/$kind-parts/steps.csv"); then
      ok "$kind: stopped after epoch 2 and resumed, every step's loss is the whole run's"
    else
      ko "$kind: resumed run differs: $msg"
    fi
  else
    cat "$tmp/$kind-parts/out"
    ko "$kind: the run in two parts failed"
  fi
done
grep -q "learning rate 0.0015" "$tmp/plateau-whole/out" && ok "plateau lowered the rate" ||
  { cat "$tmp/plateau-whole/out"; ko "plateau never lowered the rate: the test above checks nothing"; }

mkdir -p "$tmp/constant"
run constant 4 constant || ko "constant schedule run failed"
if cmp -s "$tmp/constant/steps.csv" "$tmp/cosine-whole/steps.csv"; then
  ko "the cosine schedule's losses are the constant rate's"
else
  ok "the cosine schedule changes the losses"
fi

# a schedule in the model file, used unless --lr-schedule replaces it
sed 's/"lr": 0.003}/"lr": 0.003, "schedule": {"type": "step", "step_size": 1, "gamma": 0.1}}/' "$tmp/model.json" >"$tmp/step.json"
"$train" "${args[@]}" --model "$tmp/step.json" --epochs 1 >"$tmp/step.out" 2>&1 &&
  grep -q "learning-rate schedule: step per epoch" "$tmp/step.out" && ok "the model file's schedule is used" ||
  { cat "$tmp/step.out"; ko "the model file's schedule"; }

for bad in "cosine,t0=0:'t0'" "one_cycle,pct=0.2:'pct'" "exponential:'gamma'" "plateau,factor=2:'factor'"; do
  "$train" "${args[@]}" --epochs 1 --lr-schedule "${bad%%:*}" >"$tmp/bad.out" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && grep -q "${bad#*:}" "$tmp/bad.out"; then
    ok "--lr-schedule ${bad%%:*} refused naming ${bad#*:}"
  else
    cat "$tmp/bad.out"
    ko "--lr-schedule ${bad%%:*}: status $rc"
  fi
done
"$train" "${args[@]}" --val-fraction 0 --epochs 1 --lr-schedule plateau >"$tmp/bad.out" 2>&1 &&
  ko "plateau without validation data was accepted" || ok "plateau without validation data is refused"
fixture_done

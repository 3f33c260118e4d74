#!/usr/bin/env bash
# Kill tests of tessera-train's checkpoints: deterministic training with frequent checkpoints is killed
# with SIGKILL at random points of its progress and resumed (--resume) until it finishes; every
# training step's loss, including steps logged twice around a kill, must equal the uninterrupted run's
# bitwise. Then a truncated newest checkpoint must be rejected (message naming it) and the previous
# one used, resuming with another optimizer must be refused and with another learning rate be said,
# SIGTERM must end a run with a checkpoint and status 143 (during training and during validation),
# SIGINT likewise with 130 (a second SIGINT at once, without the checkpoint; without --checkpoint-dir
# at once), and a NaN must stop naming the step (or be skipped).
set -u
. "$(dirname "$0")/train_fixture.sh"
TRIALS=${KILL_TRIALS:-5}
fixture_setup kill 96
# KILL_OPTIM (tests/kill_resume_lion.sh): the model's optimizer section instead of Adam's, and the
# kill trials only
if [ -n "${KILL_OPTIM:-}" ]; then
  sed -i "s/\"adam\", \"lr\": 0.003/$KILL_OPTIM/" "$tmp/model.json"
  grep -qF "$KILL_OPTIM" "$tmp/model.json" || { echo "FAIL: optimizer $KILL_OPTIM not set"; exit 1; }
fi
export STARPU_NCPU=2
args=(--model "$tmp/model.json" --data "$tmp/data.h5" --val-fraction 0.125 --epochs 4 --batch 4 --deterministic
  --seed 5 --workers 2 --slices 2 -q --checkpoint-every 3 --keep 2)

# uninterrupted reference (with the same checkpoints: a checkpoint must not change the numbers)
"$train" "${args[@]}" --checkpoint-dir "$tmp/ref" --step-log "$tmp/ref.csv" >"$tmp/ref.log" 2>&1 ||
  { cat "$tmp/ref.log"; echo "FAIL: reference run"; exit 1; }
nsteps=$(($(wc -l <"$tmp/ref.csv") - 1))
[ "$nsteps" -eq 84 ] && ok "reference run logged $nsteps steps" || ko "reference run logged $nsteps steps, expected 84"

# Runs until the run finishes, killing it with SIGKILL at random points (at most 8 kills).
kills_total=0
for trial in $(seq 1 "$TRIALS"); do
  d=$tmp/t$trial
  rm -rf "$d" && mkdir -p "$d"
  done_ok=0
  for attempt in $(seq 1 8); do
    logged=$(rows "$d/steps.csv")
    "$train" "${args[@]}" --checkpoint-dir "$d/ck" --resume --step-log "$d/steps.csv" >>"$d/log" 2>&1 &
    pid=$!
    # once the run has logged a random 0-29 more steps: in start-up, mid-epoch, around validation and
    # checkpoint writing. A point of progress, not a delay: the machine's speed and load cannot
    # decide whether anything is killed (the first run of a trial, 84 steps, always is).
    if wait_rows "$d/steps.csv" $((logged + RANDOM % 30)) $pid && kill -KILL "$pid" 2>/dev/null; then
      wait "$pid" 2>/dev/null
      kills_total=$((kills_total + 1))
    else
      kill -KILL "$pid" 2>/dev/null && echo "trial $trial: no progress in $HANG_S s" # hung
      wait "$pid" && { done_ok=1; break; }
      echo "trial $trial: run failed"; tail -5 "$d/log"; break
    fi
  done
  if [ $done_ok = 0 ]; then
    "$train" "${args[@]}" --checkpoint-dir "$d/ck" --resume --step-log "$d/steps.csv" >>"$d/log" 2>&1 && done_ok=1
  fi
  if [ $done_ok = 1 ] && msg=$(same_as_ref "$d/steps.csv"); then
    ok "trial $trial: killed $((attempt - 1)) time(s), resumed losses equal the uninterrupted run's bitwise"
  else
    ko "trial $trial: resumed run equals the uninterrupted one (finished: $done_ok) $msg"
    tail -5 "$d/log"
  fi
done
if [ "$kills_total" -ge "$TRIALS" ]; then ok "SIGKILLs sent: $kills_total"
else ko "SIGKILLs sent: $kills_total, fewer than the $TRIALS trials"; fi

[ -n "${KILL_OPTIM:-}" ] && { fixture_done; exit; }

# A truncated newest checkpoint is rejected and the previous one is used.
d=$tmp/trunc
mkdir -p "$d"
"$train" "${args[@]}" --epochs 1 --checkpoint-dir "$d/ck" --step-log "$d/steps.csv" >"$d/log1" 2>&1
newest=$(ls "$d/ck"/ckpt-*.h5 | sort | tail -1)
prev=$(ls "$d/ck"/ckpt-*.h5 | sort | tail -2 | head -1)
truncate -s $(($(stat -c %s "$newest") / 2)) "$newest"
"$train" "${args[@]}" --checkpoint-dir "$d/ck" --resume --step-log "$d/steps.csv" >"$d/log2" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "checkpoint rejected: $newest" "$d/log2" && grep -q "using $prev" "$d/log2" &&
  same_as_ref "$d/steps.csv" >/dev/null; then
  ok "a truncated checkpoint is rejected by name, $(basename "$prev") is used, and the losses still match"
else
  ko "truncated checkpoint rejected and previous one used (rc $rc)"
  cat "$d/log2"
fi

# Resuming with another optimizer kind is refused naming both; another learning rate is accepted and
# said (old -> new). The reference run's last checkpoint is past its last epoch, so these runs train
# nothing; the second exports its parameters, which carry the input normalisation.
d=$tmp/optim
mkdir -p "$d"
cp -r "$tmp/ref" "$d/ck"
sed 's/"adam", "lr": 0.003/"sgd", "lr": 0.01/' "$tmp/model.json" >"$d/sgd.json"
oargs=("${args[@]}")
oargs[1]=$d/sgd.json
"$train" "${oargs[@]}" --checkpoint-dir "$d/ck" --resume >"$d/kind" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "cannot resume: .*ckpt-.*written by adam; this run uses sgd" "$d/kind"; then
  ok "resuming with another optimizer is refused: $(grep -o 'written by adam; this run uses sgd' "$d/kind")"
else
  ko "resuming with another optimizer is refused naming both (rc $rc)"
  cat "$d/kind"
fi
"$train" "${args[@]}" --lr 0.001 --checkpoint-dir "$d/ck" --resume --export-params "$d/p.h5" >"$d/lr" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "optimizer adam: lr 0.003 -> 0.001 (this run's values apply" "$d/lr" &&
  h5ls "$d/p.h5" | grep -q "^input_mean .*{1}" && h5ls "$d/p.h5" | grep -q "^input_std .*{1}"; then
  ok "resuming with another learning rate says so; the export holds input_mean and input_std"
else
  ko "resuming with another learning rate is accepted and said; export with normalisation (rc $rc)"
  cat "$d/lr"
  h5ls "$d/p.h5"
fi

# SIGTERM: checkpoint, message, status 143; the run then resumes to the same losses.
d=$tmp/term
mkdir -p "$d"
"$train" "${args[@]}" --checkpoint-dir "$d/ck" --step-log "$d/steps.csv" >"$d/log" 2>&1 &
pid=$!
# signal it once it is training (a fixed sleep raced with the whole run on an idle machine)
wait_rows "$d/steps.csv" 3 $pid
kill -TERM "$pid"
wait "$pid"
rc=$?
"$train" "${args[@]}" --checkpoint-dir "$d/ck" --resume --step-log "$d/steps.csv" >>"$d/log" 2>&1
if [ $rc -eq 143 ] && grep -q "SIGTERM received: checkpoint" "$d/log" && same_as_ref "$d/steps.csv" >/dev/null; then
  ok "SIGTERM writes a checkpoint and exits with 143; the resumed run matches"
else
  ko "SIGTERM writes a checkpoint and exits with 143 (rc $rc)"
  cat "$d/log"
fi

# SIGTERM during validation (a large validation set, so the pass is long): the run stops inside it
# (the epoch's line is not logged yet) with a checkpoint and status 143, and --resume repeats the
# pass and then trains on to the same losses, validation ones included, as an uninterrupted run.
d=$tmp/vterm
mkdir -p "$d"
"$gen" --out "$d/val.h5" --samples 3000 --size 16 --seed 4 -q || ko "tessera-datagen (validation set)"
vargs=("${args[@]}")
vargs[4]=--val vargs[5]=$d/val.h5 vargs[7]=2
"$train" "${vargs[@]}" --checkpoint-dir "$d/ref" --step-log "$d/ref.csv" --log "$d/ref.log" >"$d/out" 2>&1 ||
  ko "reference run with a validation set"
"$train" "${vargs[@]}" --checkpoint-dir "$d/ck" --step-log "$d/steps.csv" --log "$d/run.log" >>"$d/out" 2>&1 &
pid=$!
# the last training step of epoch 1 is logged just before its validation pass starts (3000
# samples: ~50 polls here)
wait_rows "$d/steps.csv" 25 $pid
kill -TERM "$pid"
wait "$pid"
rc=$?
logged=$(($(wc -l <"$d/run.log") - 1))
"$train" "${vargs[@]}" --checkpoint-dir "$d/ck" --resume --step-log "$d/steps.csv" --log "$d/run.log" >>"$d/out" 2>&1
if [ $rc -eq 143 ] && [ $logged -eq 0 ] && grep -q "SIGTERM received: checkpoint" "$d/out" &&
  cmp -s "$d/ref.csv" "$d/steps.csv" && [ "$(cut -d, -f1-4 "$d/ref.log")" = "$(cut -d, -f1-4 "$d/run.log")" ]; then
  ok "SIGTERM during validation: checkpoint and status 143 before the pass ends; the resumed run matches"
else
  ko "SIGTERM during validation: checkpoint, status 143 (rc $rc), stopped inside the pass (epochs logged: $logged)"
  cat "$d/out" "$d/ref.log" "$d/run.log"
fi

# Background jobs of a script start with SIGINT ignored, and tessera-train leaves an ignored SIGINT
# ignored: start the runs that get one as jobs of their own (job control), as a terminal does.
start_job() { set -m; "$@" & pid=$!; set +m; }
# wait_for FILE PATTERN: until FILE holds a line matching PATTERN or the run ($pid) ends (at most 30 s)
wait_for() {
  for i in $(seq 1 3000); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.01
  done
  return 1
}

# SIGINT (Ctrl-C) as SIGTERM: checkpoint, message, status 130; the run then resumes to the same losses.
d=$tmp/int
mkdir -p "$d"
start_job "$train" "${args[@]}" --checkpoint-dir "$d/ck" --step-log "$d/steps.csv" >"$d/log" 2>&1
wait_for "$d/steps.csv" "^3,"
kill -INT "$pid"
wait "$pid"
rc=$?
"$train" "${args[@]}" --checkpoint-dir "$d/ck" --resume --step-log "$d/steps.csv" >>"$d/log" 2>&1
if [ $rc -eq 130 ] && grep -q "SIGINT received: checkpoint" "$d/log" && same_as_ref "$d/steps.csv" >/dev/null; then
  ok "SIGINT writes a checkpoint and exits with 130; the resumed run matches"
else
  ko "SIGINT writes a checkpoint and exits with 130 (rc $rc)"
  cat "$d/log"
fi

# A second SIGINT exits at once with 130, without the checkpoint: the model file is a FIFO nobody
# writes, so the run is held in its start-up (after the handlers are installed) and can write no
# checkpoint; the first SIGINT is acknowledged, the second must end it. Then the same with one SIGINT
# and the model written into the FIFO: the run trains its first steps, checkpoints and exits with 130.
d=$tmp/int2
mkdir -p "$d"
mkfifo "$d/model.json"
fargs=("${args[@]}")
fargs[1]=$d/model.json
for n in 2 1; do
  start_job "$train" "${fargs[@]}" --checkpoint-dir "$d/ck$n" >"$d/log$n" 2>&1
  for i in $(seq 1 3000); do # until tessera-train (not libtool's wrapper script) catches SIGINT, SIGTERM, SIGUSR1
    m=$(awk '/^SigCgt/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
    [ -n "$m" ] && (((0x$m & 0x4202) == 0x4202)) && break
    sleep 0.01
  done
  kill -INT "$pid"
  acked=0
  wait_for "$d/log$n" "SIGINT received: stopping after a checkpoint" && acked=1
  if [ $n = 2 ]; then
    kill -INT "$pid" 2>/dev/null
    for i in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null # held for good if the second SIGINT was not acted on (not reaped yet: no other process)
  else
    timeout 30 sh -c 'cat "$1" >"$2"' - "$tmp/model.json" "$d/model.json" # (the FIFO has no reader if it died)
  fi
  wait "$pid"
  rc=$?
  nck=$(ls "$d/ck$n" 2>/dev/null | grep -c '\.h5$')
  if [ $n = 2 ] && [ $rc -eq 130 ] && [ $acked = 1 ] && [ "$nck" -eq 0 ] && grep -q "second SIGINT: exiting without a checkpoint" "$d/log2"; then
    ok "a second SIGINT exits at once with 130 and no checkpoint while the first waits for one"
  elif [ $n = 1 ] && [ $rc -eq 130 ] && [ $acked = 1 ] && [ "$nck" -ge 2 ] && grep -q "SIGINT received: checkpoint" "$d/log1"; then
    ok "a SIGINT during start-up is acknowledged at once; the run checkpoints after its first steps and exits with 130"
  else
    ko "SIGINT x $n during start-up (rc $rc, acknowledged $acked, checkpoints $nck)"
    cat "$d/log$n"
  fi
done

# Without --checkpoint-dir, SIGINT stops the run at once with 130, as SIGTERM does with 143. The run
# is 25 times the reference's (100 epochs: 2100 steps) and held (SIGSTOP) while the signal is sent,
# so the steps it logs after the signal are those already under way, however late this script's
# polling saw step 3 (a run of 84 steps once ended before the signal came).
d=$tmp/int0
mkdir -p "$d"
start_job "$train" "${args[@]:0:${#args[@]}-4}" --epochs 100 --step-log "$d/steps.csv" >"$d/log" 2>&1 # no --checkpoint-every, --keep
wait_for "$d/steps.csv" "^3,"
kill -STOP "$pid"
at=$(rows "$d/steps.csv")
kill -INT "$pid"
kill -CONT "$pid"
wait "$pid"
rc=$?
after=$(rows "$d/steps.csv")
if [ $rc -eq 130 ] && [ "$after" -lt $((at + 30)) ] && [ "$after" -lt 2101 ]; then
  ok "without --checkpoint-dir, SIGINT stops the run with 130 ($((after - at)) steps logged after it)"
else
  ko "without --checkpoint-dir, SIGINT stops the run with 130 (rc $rc, $at lines logged at the signal, $after at the end)"
  cat "$d/log"
fi

# NaN: SGD with lr 1000 makes the loss overflow within a few steps; stop names the step and the
# layer; skip rolls back to the last checkpoint and skips batches (every later batch overflows too;
# it gives up after 32 skips) and finishes without hanging.
d=$tmp/nan
mkdir -p "$d"
sed 's/"adam", "lr": 0.003/"sgd", "lr": 1000, "momentum": 0.9/' "$tmp/model.json" >"$d/model.json"
nargs=("${args[@]}")
nargs[1]=$d/model.json
timeout 60 "$train" "${nargs[@]}" --epochs 1 --checkpoint-dir "$d/ck0" >"$d/stop" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -qE "training step [0-9]+: .*gradient of '[a-z0-9]+\.(weight|bias)' \(layer" "$d/stop"; then
  ok "a non-finite loss stops the run naming the step and the layer: $(grep -oE 'training step [0-9]+: [^;]*; [^;]*' "$d/stop" | head -1)"
else
  ko "a non-finite loss stops the run naming the step and the layer (rc $rc)"
  cat "$d/stop"
fi
timeout 120 "$train" "${nargs[@]}" --epochs 1 --checkpoint-dir "$d/ck" --on-nan skip >"$d/skip" 2>&1
rc=$?
if [ $rc -le 1 ] && [ "$(grep -c "rolled back to" "$d/skip")" -ge 2 ]; then
  ok "--on-nan skip rolls back and skips the bad batches ($(grep -c 'rolled back' "$d/skip") roll-backs, status $rc)"
else
  ko "--on-nan skip rolls back and skips (rc $rc)"
  tail -5 "$d/skip"
fi

fixture_done

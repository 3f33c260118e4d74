#!/usr/bin/env bash
# Signals under mpirun: every rank of a 2-rank tessera-train run must stop after the same step (the
# trainer's control word), write one checkpoint and exit within 30 s, whether mpirun forwards the
# signal (SIGTERM or SIGUSR1 sent to mpirun) or the ranks get SIGTERM at different moments (as from
# a batch system); the run then resumes to per-step losses equal to an uninterrupted run's bitwise.
set -u
B=${TESSERA_BUILDDIR:-.}
train=$B/tessera-train gen=$B/tessera-datagen
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
tmp=$(mktemp -d /tmp/tessera-mpisig-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1
pass=0 fail=0
ok() { echo "PASS: $1"; pass=$((pass + 1)); }
ko() { echo "FAIL: $1"; fail=$((fail + 1)); }

cat >"$tmp/model.json" <<'EOF'
{"name": "sig", "layers": [
  {"name": "in", "type": "input", "shape": [1, 16, 16]},
  {"name": "c1", "type": "conv2d", "out_channels": 6, "kernel": 3, "padding": 1},
  {"name": "bn1", "type": "batchnorm"},
  {"name": "r1", "type": "relu"},
  {"name": "d1", "type": "dropout", "p": 0.1},
  {"name": "c2", "type": "conv2d", "out_channels": 1, "kernel": 3, "padding": 1}],
 "loss": {"type": "mse"}, "optimizer": {"type": "adam", "lr": 0.003}}
EOF
"$gen" --out "$tmp/data.h5" --samples 576 --size 16 --seed 3 -q || { echo "FAIL: tessera-datagen"; exit 1; }
args=(--model "$tmp/model.json" --data "$tmp/data.h5" --val-fraction 0.125 --epochs 4 --batch 4 --deterministic
  --seed 5 --workers 1 --slices 2 -q --checkpoint-every 5 --keep 2)
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_HOME -x STARPU_SILENT)

"${mpi[@]}" "$train" "${args[@]}" --checkpoint-dir "$tmp/ref" --step-log "$tmp/ref.csv" >"$tmp/ref.log" 2>&1 ||
  { cat "$tmp/ref.log"; echo "FAIL: 2-rank reference run"; exit 1; }
nsteps=$(($(wc -l <"$tmp/ref.csv") - 1))
[ "$nsteps" -eq 252 ] && ok "2-rank reference run logged $nsteps steps" || ko "reference run logged $nsteps steps, expected 252"

same_as_ref() { # step log: every row (repeated ones too) equal to the reference's, every step present
  awk -F, 'NR == FNR { if (FNR > 1) ref[$1] = $3; next }
           FNR > 1 { seen[$1] = 1; if (!($1 in ref) || ref[$1] != $3) { print "step " $1 ": " $3 " vs " ref[$1]; bad = 1 } }
           END { for (s in ref) if (!(s in seen)) { print "step " s " missing"; bad = 1 } exit bad }' "$tmp/ref.csv" "$1"
}

# how: mpirun-TERM, mpirun-USR1 (mpirun forwards it) or ranks-TERM (rank 1 first, rank 0 0.3 s later)
for how in mpirun-USR1 ranks-TERM mpirun-TERM; do
  d=$tmp/$how
  mkdir -p "$d"
  "${mpi[@]}" "$train" "${args[@]}" --checkpoint-dir "$d/ck" --step-log "$d/steps.csv" >"$d/log" 2>&1 &
  launcher=$!
  for i in $(seq 1 1800); do # until training is under way (20 steps logged; slow under sanitizers and load)
    [ -f "$d/steps.csv" ] && [ "$(wc -l <"$d/steps.csv")" -gt 20 ] && break
    sleep 0.1
  done
  echo "$how: signal after $i polls, $(wc -l <"$d/steps.csv" 2>/dev/null) lines logged"
  # the ranks (libtool may run .libs/lt-tessera-train), not mpirun nor a wrapper shell
  ranks=$(pgrep -f "^[^ ]*tessera-train .*--checkpoint-dir $d/ck " | sort -n)
  start=$(date +%s.%N)
  case $how in
  mpirun-*) kill -"${how#mpirun-}" "$launcher" ;;
  ranks-TERM) for p in $(echo "$ranks" | sort -rn); do kill -TERM "$p" 2>/dev/null; sleep 0.3; done ;; # the second may be gone already
  esac
  for i in $(seq 1 300); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2>/dev/null; then
    kill -KILL "$launcher" $ranks 2>/dev/null
    hung=1
  else hung=0; fi
  wait "$launcher"
  rc=$?
  took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  done_before=$(($(wc -l <"$d/steps.csv") - 1))
  nck=$(grep -c "received: checkpoint .* written after training step" "$d/log")
  steps=$(grep -o "written after training step [0-9]*" "$d/log" | awk '{ print $NF }' | sort -u | tr '\n' ' ')
  "${mpi[@]}" "$train" "${args[@]}" --checkpoint-dir "$d/ck" --resume --step-log "$d/steps.csv" >>"$d/log" 2>&1
  rrc=$?
  if [ $hung = 0 ] && [ "$nck" -eq 2 ] && [ "$(echo $steps | wc -w)" -eq 1 ] && [ $rrc -eq 0 ] &&
    [ "$done_before" -lt "$nsteps" ] && msg=$(same_as_ref "$d/steps.csv"); then
    ok "$how: both ranks stopped after step $steps(status $rc, $took s after the signal); the resumed run matches bitwise"
  else
    ko "$how: ranks agree, checkpoint, resume (hung $hung, rc $rc, $took s, rank messages $nck, steps '$steps', resume rc $rrc, $done_before steps before) ${msg:-}"
    tail -8 "$d/log"
  fi
done

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]

#!/usr/bin/env bash
# In-situ training on 2 ranks (tessera-train --simulate under mpirun): each rank simulates its own
# samples (rank r of 2 spills the simulator's samples with index = r mod 2, none twice), and a
# second run with the same seed logs bitwise the same losses.
set -u
. "$(dirname "$0")/train_fixture.sh"
need_mpirun
command -v h5dump >/dev/null || { echo "SKIP: h5dump not found (apt-get install hdf5-tools)"; exit 77; }
tmp=$(mktemp -d /tmp/tessera-insitu-mpi-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1
echo '{"grid": 16, "pattern": 16, "target": 16, "probes": 1, "fov": 8, "thickness": [4, 8], "seed": 11}' >"$tmp/cbed.json"
cat >"$tmp/model.json" <<'JSON'
{"name": "insitu", "layers": [
  {"name": "in", "type": "input", "shape": [1, 16, 16]},
  {"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
  {"name": "r1", "type": "relu"},
  {"name": "c2", "type": "conv2d", "out_channels": 1, "kernel": 3, "padding": 1}],
 "loss": {"type": "mse"}, "optimizer": {"type": "adam", "lr": 0.003}}
JSON
args=(--model "$tmp/model.json" --simulate "$tmp/cbed.json" --epochs 2 --batch 4 --pool 8 --reuse 2
  --deterministic --seed 5 --workers 1 --slices 2 -q)
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2 -x STARPU_HOME -x STARPU_SILENT -x STARPU_WORKERS_NOBIND -x STARPU_MPI_NOBIND)
"$train" "${args[@]}" --epochs 1 >"$tmp/warm.log" 2>&1 || { cat "$tmp/warm.log"; echo "FAIL: 1-rank run"; exit 1; }

for run in a b; do
  "${mpi[@]}" "$train" "${args[@]}" --step-log "$tmp/$run.csv" --spill "$tmp/$run.h5" >"$tmp/$run.log" 2>&1 ||
    { cat "$tmp/$run.log"; ko "2-rank in-situ run $run"; }
done
n=$(($(rows "$tmp/a.csv") - 1))
[ $n -eq 8 ] && cmp -s "$tmp/a.csv" "$tmp/b.csv" && ok "two 2-rank runs log the same $n losses bitwise" ||
  ko "two 2-rank runs log the same losses ($n steps)"
# the index datasets as one number a line
indices() { h5dump -d index -y -w 1 "$1" 2>/dev/null | sed -n '/DATA {/,/}/p' | grep -Eo '[0-9]+' ; }
for r in 0 1; do
  f=$tmp/a.rank$r.h5
  all=$(indices "$f" | wc -l) wrong=$(indices "$f" | awk -v r=$r '$1 % 2 != r' | wc -l) dup=$(indices "$f" | sort | uniq -d | wc -l)
  [ "$all" -ge 16 ] && [ "$wrong" -eq 0 ] && [ "$dup" -eq 0 ] &&
    ok "rank $r spilled $all samples of its own (index = $r mod 2), none twice" ||
    ko "rank $r spilled its own samples ($all in $f, $wrong of another rank, $dup twice)"
done
fixture_done

#!/usr/bin/env bash
# Spatial and hybrid parallelism on the CosmoFlow-mini (examples/cosmoflow/cosmoflow64.json, 4x64^3
# samples from tessera-cosmogen): for each layout RANKS:SPATIAL (1:1, 2:2, 4:2x2, and hybrid 4:2 =
# 2 replicas x 2 blocks; 4:4 along D is refused for this model: pool5's output depth 2 does not
# split in 4) it trains EPOCHS epochs under mpirun and prints per rank the batch buffers the trainer
# allocates (its footprint accounting, logged with -v: activations and their gradients, halo'd or
# gathered copies, edge slabs, inputs, targets; the largest over the ranks, and as a share of the
# 1-rank run's when 1:1 comes first), the peak resident memory
# (ru_maxrss from /usr/bin/time: activations, parameters, the runtime and the libraries), the time
# per step of the last epoch (from tessera-train's log) and the halo bytes a
# spatial group sends per step, computed from the plan's halo widths (each face between blocks of a
# window layer of kernel k, padding p, stride s moves p + max(0, k - p - s) planes forward, and as
# many back in backward). --batch BATCH is per replica: hybrid layouts take replicas x BATCH samples
# a step. Nothing is asserted; run on a quiet machine, one rank per core, to compare.
# Usage: bench/bench_spatial.sh [BUILD_DIR]
#   (env: SIZE=64 TRAIN=32 BATCH=4 EPOCHS=2 WORKERS=1 LAYOUTS="1:1 2:2 4:2x2 4:2")
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
SIZE=${SIZE:-64} TRAIN=${TRAIN:-32} BATCH=${BATCH:-4} EPOCHS=${EPOCHS:-2} WORKERS=${WORKERS:-1}
LAYOUTS=${LAYOUTS:-1:1 2:2 4:2x2 4:2}
model=$here/examples/cosmoflow/cosmoflow.json
[ "$SIZE" = 32 ] || model=$here/examples/cosmoflow/cosmoflow$SIZE.json
for p in tessera-cosmogen tessera-train; do
  [ -x "$build/$p" ] || { echo "bench_spatial: $build/$p not found (build first)" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "bench_spatial: mpirun not found" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench_spatial: /usr/bin/time not found (apt-get install time)" >&2; exit 1; }
out=$(mktemp -d /tmp/tessera-bench-spatial.XXXXXX)
trap 'rm -rf "$out"' EXIT
export STARPU_HOME=$out/starpu STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1
"$build/tessera-cosmogen" --out "$out/train.h5" --samples "$TRAIN" --size "$SIZE" --seed 1 --workers "$WORKERS" >/dev/null

# Halo bytes a spatial group sends per step: model, grid (N or NxM along D, H), samples per replica.
halo_bytes() {
  /usr/bin/python3 - "$model" "$1" "$2" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
grid = [int(g) for g in sys.argv[2].split("x")] + [1, 1]
batch = int(sys.argv[3])
def three(v): return v if isinstance(v, list) else [v] * 3
total, shape = 0, None
for L in m["layers"]:
    t = L["type"]
    if t == "input":
        shape = list(L["shape"])
        continue
    if shape is None or len(shape) != 4:
        break
    c, ext = shape[0], shape[1:]
    if t in ("conv3d", "maxpool3d", "avgpool3d"):
        k = three(L.get("kernel", 1)); s = three(L.get("stride", k if t != "conv3d" else 1)); p = three(L.get("padding", 0))
        own = [e // g for e, g in zip(ext, grid[:3])]
        for a in range(3):
            if grid[a] == 1:
                continue
            lo, hi = p[a], max(0, k[a] - 1 - p[a] - s[a] + 1)
            cross, faces = 1, grid[a] - 1  # faces between blocks along a
            for b in range(3):
                if b != a:
                    cross *= own[b]
                    faces *= grid[b]
            total += 2 * faces * (lo + hi) * cross * c * batch * 4  # forward halos and their gradients back
        if t == "conv3d":
            c = L["out_channels"]
        ext = [(e + 2 * pp - kk) // ss + 1 for e, kk, ss, pp in zip(ext, k, s, p)]
    elif t in ("flatten", "dense"):
        break
    shape = [c] + ext
print(total)
EOF
}

printf '%-8s %-6s %-6s %22s %20s %10s %16s\n' layout ranks split "act_MB/rank (of 1)" "maxrss_MB/rank" "s/step" \
  "halo_MB/step"
act1=
for lay in $LAYOUTS; do
  n=${lay%%:*} sp=${lay#*:}
  rm -f "$out"/rss.* "$out/log.csv"
  mpirun --allow-run-as-root --oversubscribe -np "$n" -x STARPU_HOME -x STARPU_SILENT -x STARPU_WORKERS_NOBIND \
    -x STARPU_MPI_NOBIND sh -c '/usr/bin/time -f %M -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$out/rss" \
    "$build/tessera-train" --model "$model" --data "$out/train.h5" --epochs "$EPOCHS" --batch "$BATCH" \
    --workers "$WORKERS" --seed 1 --spatial "$sp" --log "$out/log.csv" -v >"$out/run.log" 2>&1 ||
    { echo "bench_spatial: $lay failed: $(grep -m1 -v '^tessera: \|^[- ]' "$out/run.log")" >&2; continue; }
  rss=$(cat "$out"/rss.* | awk '{ s += $1; n++; if ($1 > m) m = $1 } END { printf "%.0f (max %.0f)", s / n / 1024, m / 1024 }')
  # the last epoch: its steps and seconds (elapsed_s is cumulative)
  step=$(awk -F, 'NR > 1 { pe = e; ps = st; e = $6; st = $2 } END { printf "%.3f", (e - pe) / (st - ps) }' "$out/log.csv")
  halo=$(halo_bytes "$sp" "$BATCH" | awk '{ printf "%.2f", $1 / 1e6 }')
  # "trainer: rank R holds N bytes ... of batch buffers": the largest over the ranks
  act=$(sed -n 's/.*trainer: rank [0-9]* holds \([0-9]*\) bytes.*/\1/p' "$out/run.log" | sort -n | tail -1)
  [ "$lay" = 1:1 ] && act1=$act
  acts=$(awk -v a="${act:-0}" -v b="${act1:-0}" 'BEGIN { if (b > 0) printf "%.1f (%.3f)", a / 1e6, a / b;
                                                        else printf "%.1f", a / 1e6 }')
  printf '%-8s %-6s %-6s %22s %20s %10s %16s\n' "$lay" "$n" "$sp" "$acts" "$rss" "$step" "$halo"
done
echo "load: $(uptime)"

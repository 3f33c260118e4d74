#!/usr/bin/env bash
# The extrapolation of docs/scaling.md: FC-DenseNet-103 task graphs (stemdl_graph.py: per-layer GPU
# times from FLOPs at a sustained rate, or measured) replayed by tessera-scale on summit.json from 6 to 27,600
# GPUs, for Tessera's grouping (default 256 KiB and 8 MiB groups), one group per layer, and one group
# at the end of backward, with the ring (f32), the hierarchical ring (hier) and the cheapest exact
# model per group (best). Usage: bench/scaling/summit.sh BUILD_DIR [extra stemdl_graph.py options]
# (--times CSV: per-layer times measured on a GPU by gpu_layer_times.py / gpu_times.sh instead, e.g.
# bench/scaling/h100-bf16-b4.csv; --scale whole: those times x the CSV's whole step / sum of parts).
# ALGOS="f32 hier best" (the default) picks the cost models (tessera-scale --list), e.g. ALGOS="rd tree".
set -eu
B=$(cd "${1:?usage: summit.sh BUILD_DIR}" && pwd)
shift
extra=("$@")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/tsr-summit-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
ranks=6,24,96,384,1536,6144,27600
printf "%-22s %-6s" layout model
echo "$ranks" | tr , '\n' | while read -r r; do printf " %7s" "$r"; done
echo
for layout in "tessera 262144" "tessera 8388608" "layer 0" "end 0"; do
  set -- $layout
  python3 "$here/stemdl_graph.py" "$tmp/g" --layout "$1" --group-bytes "$2" ${extra[@]+"${extra[@]}"} >"$tmp/info"
  name="$1"; [ "$1" = tessera ] && name="tessera $(($2 / 1024)) KiB"
  for algo in ${ALGOS:-f32 hier best}; do
    printf "%-22s %-6s" "$name" "$algo"
    "$B/tessera-scale" "$tmp/g" --machine "$here/summit.json" --ranks "$ranks" --algo "$algo" --csv |
      awk -F, 'NR > 1 { printf " %7.3f", $5 }'
    echo
  done
  sed 's/^/  # /' "$tmp/info"
done

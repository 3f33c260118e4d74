#!/usr/bin/env bash
# The GPU scripts' parts that run without a GPU: scripts/gpu-run (the `run` of a bundle) finds the
# CUDA libraries a bundle lists in the folders it searches and refuses, naming them, when one is
# missing; scripts/build-starpu and scripts/gpu-bundle refuse what they cannot build from, naming it;
# bench/bench_gpu.py runs end to end on CPUs (--device cpu: the harness, not a measurement) and
# writes one row per model with Tessera's and PyTorch's rates and their ratio.
set -u
. "$(dirname "$0")/script_common.sh"
top=${TESSERA_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
B=${TESSERA_BUILDDIR:-.}
test_tmp gpu-scripts

# ---- gpu-run, over a bundle of its own making: two "CUDA" libraries in two folders ----
b=$tmp/bundle
mkdir -p "$b/lib" "$b/bin" "$tmp/cudaA" "$tmp/cudaB"
cp "$top/scripts/gpu-run" "$b/run"
echo "test bundle" >"$b/BUNDLE"
printf 'libfakecudart.so.13\nlibfakecudnn.so.9\n' >"$b/CUDA_NEEDS"
touch "$tmp/cudaA/libfakecudart.so.13" "$tmp/cudaB/libfakecudnn.so.9"
printf '#!/bin/sh\necho "LD=$LD_LIBRARY_PATH"\n' >"$b/bin/show-path"
chmod +x "$b/bin/show-path"
out=$(CUDA_LIBS="$tmp/cudaA:$tmp/cudaB" "$b/run" show-path 2>&1)
if [[ $out == "LD=$b/lib:$tmp/cudaA:$tmp/cudaB"* ]]; then ok "gpu-run puts the bundle's and each CUDA library's folder on the path"
else ko "gpu-run's library path: $out"; fi
out=$(CUDA_LIBS="$tmp/cudaA" "$b/run" show-path 2>&1)
rc=$?
if [ $rc = 1 ] && [[ $out == *"not found: libfakecudnn.so.9"* ]] && [[ $out != *LD=* ]]; then
  ok "gpu-run refuses a missing CUDA library, naming it"
else ko "gpu-run with a library missing: exit $rc, $out"; fi

# ---- refusals ----
out=$("$top/scripts/build-starpu" "$tmp/nothing-here" "$tmp/prefix" 2>&1)
rc=$?
if [ $rc != 0 ] && [[ $out == *"$tmp/nothing-here"* ]]; then ok "build-starpu refuses a source that does not exist, naming it"
elif [ $rc != 0 ] && [[ $out == *"nvcc"* || $out == *"mpicc"* ]]; then ok "build-starpu refuses (no CUDA toolkit or MPI here): $out"
else ko "build-starpu on a missing source: exit $rc, $out"; fi
if [ -x /usr/local/cuda/bin/nvcc ] && command -v mpicc >/dev/null; then
  mkdir -p "$tmp/notstarpu"
  echo 'AC_INIT([other], [1])' >"$tmp/notstarpu/configure.ac"
  out=$("$top/scripts/build-starpu" "$tmp/notstarpu" "$tmp/prefix" 2>&1)
  rc=$?
  if [ $rc != 0 ] && [[ $out == *"holds no StarPU sources"* ]]; then ok "build-starpu refuses a folder of other sources"
  else ko "build-starpu on other sources: exit $rc, $out"; fi
  # a checkout without configure on a machine without the libtool program (a PATH that hides it)
  mkdir -p "$tmp/checkout" "$tmp/nolibtool"
  echo 'AC_INIT([starpu], [1]) STARPU_MAJOR_VERSION' >"$tmp/checkout/configure.ac"
  for f in /usr/bin/* /bin/*; do
    [ "$(basename "$f")" = libtool ] || ln -sf "$f" "$tmp/nolibtool/$(basename "$f")"
  done
  out=$(PATH="$tmp/nolibtool" "$top/scripts/build-starpu" "$tmp/checkout" "$tmp/prefix" 2>&1)
  rc=$?
  if [ $rc != 0 ] && [[ $out == *"needs libtool (Debian: apt-get install libtool-bin)"* ]]; then
    ok "build-starpu refuses a checkout it cannot run autogen.sh on, naming the package"
  else ko "build-starpu on a checkout without libtool: exit $rc, $out"; fi
fi
out=$("$top/scripts/gpu-bundle" "$B" /usr "$tmp/b.tar.xz" 2>&1)
rc=$?
if [ $rc != 0 ] && [[ $out == *"--with-cuda"* || $out == *"has no CUDA"* ]] && [ ! -e "$tmp/b.tar.xz" ]; then
  ok "gpu-bundle refuses a build or a StarPU without CUDA"
else ko "gpu-bundle without a CUDA StarPU: exit $rc, $out"; fi

# ---- bench_gpu.py's harness on CPUs ----
py=/usr/bin/python3
if $py -c 'import torch' 2>/dev/null; then
  if STARPU_HOME=$tmp/starpu $py "$top/bench/bench_gpu.py" --tessera-train "$B/tessera-train" --device cpu \
    --no-gpu-only --precisions f32 --rounds 1 --epochs 2 --steps-per-epoch 1 --variant 0.5,32,4 --example-batch 4 \
    --workers 1 --torch-seconds 0.1 --alt "variant:f32 STARPU_SCHED=eager" --out "$tmp/bench.json" >"$tmp/bench.log" 2>&1 &&
    $py - "$tmp/bench.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
rows = {(s["model"], s["precision"]): s for s in r["summary"]}
assert set(rows) == {("example", "f32"), ("variant", "f32")}, rows
for s in rows.values():
    assert s["tessera"] > 0 and s["torch_best"] > 0 and abs(s["ratio"] - s["tessera"] / s["torch_best"]) < 1e-9, s
assert rows[("variant", "f32")]["tessera_alts"]["STARPU_SCHED=eager"] > 0
assert not rows[("example", "f32")]["tessera_alts"]
EOF
  then ok "bench_gpu.py runs on CPUs: both models' rates, the ratio and the other setting's rate"
  else ko "bench_gpu.py on CPUs:"; tail -20 "$tmp/bench.log"; fi
else
  echo "(bench_gpu.py not run: no torch for $py)"
fi
tests_done

#!/usr/bin/env bash
# Spatial and hybrid parallelism under mpirun (tests/mpi_spatial.c): halo exchanges of a known field
# (2x1, 4x1 and 2x2 blocks) and max-pooling gradients handed back across blocks adding up to the
# outputs'; a small conv / batch-norm / pooling / dense model trained with each sample split over 2
# ranks (along H), 4 ranks (4x1 and 2x2) and as 2 replicas x 2 blocks (hybrid): forward outputs of
# a fixed batch, losses and parameters (batch-norm running statistics included, so its statistics
# equal the unsplit ones) after 4 Adam steps (eps 1e-3: with the default 1e-8 one dense weight whose
# gradient nearly cancels moved by 6e-4 of lr between orders of sums, 5.8 times the tolerance, on this
# machine's oneDNN and OpenBLAS of 2026-11-29) equal the 1-rank run within 1e-5 relative (1e-6
# absolute: float sums in another order); every rank of a run holds the same parameters; a
# checkpoint of a spatial run resumes to the uninterrupted run's parameters; the same for a 3-D model
# split along D (2 ranks), D and H (4 ranks), and 2 replicas x 2 blocks, also along H only, and with
# kernels 5 (2, 2x2, 2 replicas x 2), on wider samples split 2x2 (kernels 3 and 5; edge slabs
# along two axes) and as 2 replicas x 2x2 blocks; [2, 20, 20, 20] samples split 2x2x2 over 8 ranks
# (two conv3d from edge slabs along three axes) after 2 steps within 4 times the float32 spread of
# the 1-rank run under another order of its sums; that the interior of a conv3d split along one or two
# axes does not wait for the halo exchange, forward and backward, by task dependencies (mpi_overlap); a small 3-D U-Net (split
# output gathered for the loss) split 2, 2x2 and 4 ways; tessera-train --spatial 2
# (an HDF5 file made with h5import, a model file) logs the 1-rank run's losses; and, as a check of the
# checks, skipping the gradient reductions breaks the equality. Every run is bounded by 300 s (mpi below).
set -u
. "$(dirname "$0")/script_common.sh"
bin=${TESSERA_BUILDDIR:-.}/tests/mpi_spatial
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
test_tmp spatial
export STARPU_HOME=$tmp/starpu STARPU_SILENT=1 STARPU_WORKERS_NOBIND=1 STARPU_MPI_NOBIND=1 TESSERA_SKIP_ALLREDUCE=0 TESSERA_HANG_DUMP=1
# TESSERA_HANG_DUMP: a tessera-train rank past its step deadline prints its threads' stacks (gdb) into its log
# mpi ARGS: mpirun ARGS, limited to 300 s. A run still going then has hung: an unexplained rare
# hang (issue 13: seen in about 1 of 100-300 sanitized 2-rank runs under heavy load, output empty)
# that this test is not about. Its processes' stacks (gdb) go to $tmp/hangs, it is killed and run once
# more; a second hang fails as before. The test's log ends with any hang's stacks.
hang_s=300
mpi() {
  local try t p q
  for try in 1 2; do
    mpirun --allow-run-as-root --oversubscribe "$@" &
    p=$!
    for ((t = 0; t < hang_s * 5; t++)); do kill -0 $p 2>/dev/null || break; sleep 0.2; done
    kill -0 $p 2>/dev/null || { wait $p; return; }
    { echo "HANG (try $try, killed after $hang_s s): mpirun $*"
      for q in $(pgrep -P $p); do
        echo "--- pid $q: $(tr '\0' ' ' </proc/$q/cmdline 2>/dev/null | cut -c1-120)"
        command -v gdb >/dev/null && timeout 60 gdb -p $q -batch -ex "thread apply all bt" 2>&1 | grep -E "^Thread|^#" 
      done; } >>"$tmp/hangs"
    pkill -KILL -P $p; kill -KILL $p 2>/dev/null; wait $p 2>/dev/null
  done
  return 124
}
run() { # ranks out extra...
  local n=$1 out=$2; shift 2
  mpi -np "$n" -x STARPU_HOME -x STARPU_SILENT \
    -x STARPU_WORKERS_NOBIND -x STARPU_MPI_NOBIND -x TESSERA_SKIP_ALLREDUCE "$bin" --steps 4 --out "$out" \
    --deterministic "$@" >"$out.log" 2>&1 || { cat "$out.log"; return 1; }
}
same_ranks() { # prefix n [stride]: ranks 0, stride, 2 stride... hold rank 0's parameters
  local r
  for ((r = ${3:-1}; r < $2; r += ${3:-1})); do cmp -s "$1.rank0.params" "$1.rank$r.params" || return 1; done
}
equal() { # what reference run
  local k ok=1
  for k in params losses pred; do "$bin" --compare "$2.rank0.$k" "$3.rank0.$k" 1e-5 1e-6 || ok=0; done
  if [ $ok = 1 ]; then ok "$1: outputs, losses and parameters equal the 1-rank run"
  else ko "$1: outputs, losses and parameters equal the 1-rank run"; fi
}

for g in 2x1:2 4x1:4 2x2:4; do
  n=${g#*:} g=${g%:*}
  if mpi -np "$n" -x STARPU_HOME -x STARPU_SILENT \
    -x STARPU_WORKERS_NOBIND -x STARPU_MPI_NOBIND "$bin" --halo "$g" >"$tmp/halo$g.log" 2>&1; then
    ok "halo exchange of a known field over $g blocks, gradients back to their owners, pooling gradients conserved"
  else ko "halo exchange over $g blocks"; cat "$tmp/halo$g.log"; fi
done

run 1 "$tmp/ref" --batch 4 || ko "1-rank reference ran"
for g in 2:2 4:4 2x2:4; do
  n=${g#*:} g=${g%:*}
  if run "$n" "$tmp/sp$g" --batch 4 --spatial "$g"; then ok "$n ranks, samples split $g, ran"; else ko "$n ranks, samples split $g, ran"; fi
  equal "samples split $g over $n ranks" "$tmp/ref" "$tmp/sp$g"
  if same_ranks "$tmp/sp$g" "$n"; then ok "split $g: every rank holds the same parameters"
  else ko "split $g: every rank holds the same parameters"; fi
done

# Hybrid, 2 replicas x 2 blocks. Without batch norm it equals one rank with the 2-times batch; with
# it, each replica normalises over its own samples (as data parallelism does), so it equals 2 ranks
# of data parallelism.
run 1 "$tmp/refnb" --batch 8 --no-bn || ko "1-rank reference (no batch norm, batch 8) ran"
if run 4 "$tmp/hyb" --batch 4 --spatial 2 --no-bn; then ok "hybrid 2 x 2 ran"; else ko "hybrid 2 x 2 ran"; fi
for k in params pred; do "$bin" --compare "$tmp/refnb.rank0.$k" "$tmp/hyb.rank0.$k" 1e-5 1e-6 || h=bad; done
# the 1-rank loss of 8 samples is the mean of the replicas' losses of 4
paste <(od -An -v -tf4 -w4 "$tmp/refnb.rank0.losses") <(od -An -v -tf4 -w4 "$tmp/hyb.rank0.losses") \
  <(od -An -v -tf4 -w4 "$tmp/hyb.rank2.losses") >"$tmp/hyb.cmp"
if [ "${h:-}" != bad ] && awk '{ m = ($2 + $3) / 2; if ((m - $1)^2 > (1e-6 + 1e-5 * ($1 < 0 ? -$1 : $1))^2) bad = 1; n++ }
     END { exit bad || n != 4 }' "$tmp/hyb.cmp"; then
  ok "hybrid 2 x 2: outputs, losses (mean over replicas) and parameters equal the 1-rank run of the 2-times batch"
else ko "hybrid 2 x 2 equals the 1-rank run of the 2-times batch"; cat "$tmp/hyb.cmp"; fi
if same_ranks "$tmp/hyb" 4; then ok "hybrid 2 x 2: every rank holds the same parameters"
else ko "hybrid 2 x 2: every rank holds the same parameters"; fi
run 2 "$tmp/dp" --batch 4 || ko "2-rank data parallelism ran"
if run 4 "$tmp/hybn" --batch 4 --spatial 2; then ok "hybrid 2 x 2 with batch norm ran"; else ko "hybrid 2 x 2 with batch norm ran"; fi
equal "hybrid 2 x 2 with batch norm (against 2 ranks of data parallelism)" "$tmp/dp" "$tmp/hybn"

# A checkpoint after step 3 of 6, loaded by a new trainer, gives the uninterrupted run's parameters.
run 2 "$tmp/full" --batch 4 --spatial 2 --steps 6 || ko "6 steps split over 2 ranks ran"
if run 2 "$tmp/resumed" --batch 4 --spatial 2 --steps 6 --resume-at 3 &&
  cmp -s "$tmp/full.rank0.params" "$tmp/resumed.rank0.params" && cmp -s "$tmp/full.rank0.losses" "$tmp/resumed.rank0.losses"; then
  ok "a checkpoint of a spatial run resumes to the same parameters and losses (bitwise)"
else ko "a checkpoint of a spatial run resumes to the same parameters and losses"; fi

# The same for the 3-D model (conv3d, batch norm, leaky ReLU, max pooling 3-D; [2, 8, 8, 4] samples)
# split along D over 2 ranks and along D and H over 4, and 2 replicas x 2 blocks along D.
run 1 "$tmp/ref3" --batch 4 --3d || ko "3-D: 1-rank reference ran"
for g in 2:2 2x2:4; do
  n=${g#*:} g=${g%:*}
  if run "$n" "$tmp/sp3$g" --batch 4 --3d --spatial "$g"; then ok "3-D: $n ranks, samples split $g, ran"
  else ko "3-D: $n ranks, samples split $g, ran"; fi
  equal "3-D: samples split $g (D, H) over $n ranks" "$tmp/ref3" "$tmp/sp3$g"
  if same_ranks "$tmp/sp3$g" "$n"; then ok "3-D split $g: every rank holds the same parameters"
  else ko "3-D split $g: every rank holds the same parameters"; fi
done
run 2 "$tmp/dp3" --batch 4 --3d || ko "3-D: 2-rank data parallelism ran"
if run 4 "$tmp/hyb3" --batch 4 --3d --spatial 2; then ok "3-D: hybrid 2 x 2 ran"; else ko "3-D: hybrid 2 x 2 ran"; fi
equal "3-D: hybrid 2 x 2 (against 2 ranks of data parallelism)" "$tmp/dp3" "$tmp/hyb3"

# Convolutions split along one axis run from the block and two edge slabs (no halo'd copy) where the
# slabs take less memory than the copy (the first conv3d here; the second one's blocks of 2 planes
# take a copy): the 3-D model split along H only (1x2), and with kernels 5 (halos of 2, samples
# [2, 16, 8, 2]) along D, D and H (a copy: halos along two axes), and as 2 replicas x 2 blocks.
for g in 1x2:2; do
  n=${g#*:} g=${g%:*}
  if run "$n" "$tmp/sp3e$g" --batch 4 --3d --spatial "$g"; then ok "3-D: $n ranks, samples split $g, ran"
  else ko "3-D: $n ranks, samples split $g, ran"; fi
  equal "3-D: samples split $g over $n ranks" "$tmp/ref3" "$tmp/sp3e$g"
done
run 1 "$tmp/ref5" --batch 4 --3d --k5 || ko "3-D, kernels 5: 1-rank reference ran"
for g in 2:2 2x2:4; do
  n=${g#*:} g=${g%:*}
  if run "$n" "$tmp/sp5$g" --batch 4 --3d --k5 --spatial "$g"; then ok "3-D, kernels 5: samples split $g, ran"
  else ko "3-D, kernels 5: samples split $g, ran"; fi
  equal "3-D, kernels 5: samples split $g over $n ranks" "$tmp/ref5" "$tmp/sp5$g"
done
run 2 "$tmp/dp5" --batch 4 --3d --k5 || ko "3-D, kernels 5: 2-rank data parallelism ran"
if run 4 "$tmp/hyb5" --batch 4 --3d --k5 --spatial 2; then ok "3-D, kernels 5: hybrid 2 x 2 ran"
else ko "3-D, kernels 5: hybrid 2 x 2 ran"; fi
equal "3-D, kernels 5: hybrid 2 x 2 (against 2 ranks of data parallelism)" "$tmp/dp5" "$tmp/hyb5"

# Convolutions split along two axes run from the block and edge slabs along D and H (corners from
# the diagonal neighbours through the two-phase exchange, their gradients routed back the same way)
# where the slabs take less memory than the copy: the 3-D model on wider samples (--wide: [2, 32,
# 32, 2], the conv3d's blocks 16 x 16 and 8 x 8, the second one with an input gradient; with kernels
# 5 [2, 64, 64, 2], blocks twice that with halos of 2) split 2x2, and as 2 replicas x 2x2 blocks (8
# ranks, against 2 ranks of data parallelism).
run 1 "$tmp/refw" --batch 4 --3d --wide || ko "3-D, wide: 1-rank reference ran"
run 1 "$tmp/refw5" --batch 4 --3d --wide --k5 || ko "3-D, wide, kernels 5: 1-rank reference ran"
for g in "2x2:4:" "2x2:4:--k5"; do
  n=${g#*:} g=${g%%:*} k=${n#*:} n=${n%%:*}
  w="3-D, wide${k:+, kernels 5}"
  if run "$n" "$tmp/spw$g$k" --batch 4 --3d --wide $k --spatial "$g"; then ok "$w: samples split $g, ran"
  else ko "$w: samples split $g, ran"; fi
  equal "$w: samples split $g over $n ranks (edge slabs along D and H)" "$tmp/refw${k:+5}" "$tmp/spw$g$k"
  if same_ranks "$tmp/spw$g$k" "$n"; then ok "$w, split $g: every rank holds the same parameters"
  else ko "$w, split $g: every rank holds the same parameters"; fi
done
run 2 "$tmp/dpw" --batch 4 --3d --wide || ko "3-D, wide: 2-rank data parallelism ran"
if run 8 "$tmp/hybw" --batch 4 --3d --wide --spatial 2x2; then ok "3-D, wide: hybrid 2 x 2x2 ran"
else ko "3-D, wide: hybrid 2 x 2x2 ran"; fi
equal "3-D, wide: hybrid 2 replicas x 2x2 blocks (against 2 ranks of data parallelism)" "$tmp/dpw" "$tmp/hybw"

# Three axes: the 3-D model on [2, 20, 20, 20] samples with its pooling after the second conv3d
# (--cube) split 2x2x2 over 8 ranks: both conv3d run from the block and edge slabs along D, H and W
# (blocks of 10^3; mpi_spatial stops if either takes a halo'd copy), the second one with an input
# gradient, so halos, edges and corners come from all 7 neighbours through the three-phase exchange
# and their gradients go back the same way. Tolerance calibrated on float32 rounding: the first
# conv3d feeds batch norm, so its weight gradient is a sum of 32000 terms (8000 positions x 4) that nearly
# cancel, whose relative rounding error Adam's per-component normalisation turns into parameter
# error that grows fast from step to step (another order of the 1-rank run's batch sums, --slices 1
# against 2: 0.13, 4 and 15 times 1e-5 relative after 2, 3 and 4 steps with Adam's default eps; 0.09
# after 2 with the eps of 1e-3 used now), so 2 steps keep
# the chaotic growth out, and the split must stay within 4 times that spread of the 1-rank run (never
# below 1e-5 relative, 1e-6 absolute; a spread above 10 times that fails as too chaotic).
run 1 "$tmp/refc" --batch 4 --3d --cube --steps 2 || ko "3-D, cube: 1-rank reference ran"
run 1 "$tmp/calc" --batch 4 --3d --cube --steps 2 --slices 1 || ko "3-D, cube: 1-rank run, another order of sums, ran"
if run 8 "$tmp/spc" --batch 4 --3d --cube --steps 2 --spatial 2x2x2; then
  ok "3-D, cube: 8 ranks, samples split 2x2x2 (both conv3d from edge slabs along D, H and W), ran"
else ko "3-D, cube: 8 ranks, samples split 2x2x2, ran"; fi
c=1
for k in params losses pred; do
  "$bin" --calibrated "$tmp/refc.rank0.$k" "$tmp/calc.rank0.$k" "$tmp/spc.rank0.$k" 4 || c=0
done
if [ $c = 1 ]; then ok "3-D, cube: samples split 2x2x2: outputs, losses and parameters equal the 1-rank run (calibrated)"
else ko "3-D, cube: samples split 2x2x2: outputs, losses and parameters equal the 1-rank run (calibrated)"; fi
if same_ranks "$tmp/spc" 8; then ok "3-D, cube, split 2x2x2: every rank holds the same parameters"
else ko "3-D, cube, split 2x2x2: every rank holds the same parameters"; fi

# Overlap by task dependencies (tests/mpi_overlap.c): the interior forward of a conv3d run from edge
# slabs depends on none of its layer's halo tasks, its edge tasks do; backward, its interior data-
# and weight-gradient tasks wait for no task of its backward exchange, whose packings wait for the
# edge data-gradient tasks and not for the interior; split along D, H, D with kernels 5, hybrid
# 2 replicas x 2 blocks, and along D and H (2x2, wider samples: edge slabs along both axes).
for g in 2:2 1x2:2 "2 --k5:2" 2:4 "2x2 --wide:4"; do
  n=${g##*:} g=${g%:*}
  if mpi -np "$n" -x STARPU_HOME -x STARPU_SILENT \
    -x STARPU_WORKERS_NOBIND -x STARPU_MPI_NOBIND "${bin%/*}/mpi_overlap" --spatial $g >"$tmp/overlap.log" 2>&1; then
    ok "split $g over $n ranks: interior conv3d tasks do not wait for the halo exchange, edge tasks do"
  else ko "split $g over $n ranks: interior conv3d tasks do not wait for the halo exchange"; cat "$tmp/overlap.log"; fi
done

# A small 3-D U-Net (conv3d, batch norm, max pooling, conv_transpose3d and upsample3d back up,
# concatenation with the skip connection, softmax cross-entropy per voxel): every layer stays split
# and the output is gathered whole for the loss; along D over 2 ranks, D and H over 4 (2x2), D over
# 4 (blocks of one plane at the bottom).
run 1 "$tmp/refu" --batch 4 --unet || ko "U-Net: 1-rank reference ran"
for g in 2:2 2x2:4 4:4; do
  n=${g#*:} g=${g%:*}
  if run "$n" "$tmp/spu$g" --batch 4 --unet --spatial "$g"; then ok "U-Net: $n ranks, samples split $g, ran"
  else ko "U-Net: $n ranks, samples split $g, ran"; fi
  equal "U-Net: samples split $g (D, H) over $n ranks" "$tmp/refu" "$tmp/spu$g"
  if same_ranks "$tmp/spu$g" "$n"; then ok "U-Net split $g: every rank holds the same parameters"
  else ko "U-Net split $g: every rank holds the same parameters"; fi
done

# tessera-train --spatial 2 (HDF5 data through the loader, a model file with a dense head): the log's
# losses equal the 1-rank run's within 1e-5 relative.
train=${TESSERA_BUILDDIR:-.}/tessera-train
if command -v h5import >/dev/null; then
  awk 'BEGIN { for (s = 0; s < 64; s++) { for (p = 0; p < 256; p++) printf "%.5f ", 0.8 * sin(0.37 * (p + 1) * (s % 31 + 1)); print "" } }' >"$tmp/x.txt"
  awk 'BEGIN { for (s = 0; s < 64; s++) printf "%.5f %.5f\n", sin(0.37 * (s % 31 + 1)), cos(0.11 * (s % 31 + 1)) }' >"$tmp/y.txt"
  printf 'PATH inputs\nINPUT-CLASS TEXTFP\nRANK 4\nDIMENSION-SIZES 64 1 16 16\nOUTPUT-CLASS FP\nOUTPUT-SIZE 32\n' >"$tmp/x.cfg"
  printf 'PATH targets\nINPUT-CLASS TEXTFP\nRANK 4\nDIMENSION-SIZES 64 2 1 1\nOUTPUT-CLASS FP\nOUTPUT-SIZE 32\n' >"$tmp/y.cfg"
  cat >"$tmp/reg.json" <<'JSON'
{"name": "reg", "layers": [
  {"name": "in", "type": "input", "shape": [1, 16, 16]},
  {"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1, "bias": false},
  {"name": "bn1", "type": "batchnorm"},
  {"name": "r1", "type": "relu"},
  {"name": "p1", "type": "maxpool2d", "kernel": 2},
  {"name": "c2", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
  {"name": "f", "type": "flatten"},
  {"name": "d", "type": "dense", "out_features": 2}],
 "loss": {"type": "mse"}, "optimizer": {"type": "adam", "lr": 0.003}}
JSON
  h5import "$tmp/x.txt" -c "$tmp/x.cfg" "$tmp/y.txt" -c "$tmp/y.cfg" -o "$tmp/reg.h5" || ko "h5import wrote the data"
  for n in 1 2; do
    mpi -np $n -x STARPU_HOME -x STARPU_SILENT \
      -x STARPU_WORKERS_NOBIND -x STARPU_MPI_NOBIND "$train" --model "$tmp/reg.json" --data "$tmp/reg.h5" --epochs 2 \
      --batch 8 --deterministic --seed 5 --spatial $n --log "$tmp/cli$n.csv" -q >"$tmp/cli$n.log" 2>&1 ||
      { ko "tessera-train --spatial $n ran"; cat "$tmp/cli$n.log"; }
  done
  if awk -F, 'NR == FNR { if (FNR > 1) { a[FNR] = $3; b[FNR] = $4 }; next }
       FNR > 1 { n++; d = $3 - a[FNR]; e = $4 - b[FNR]; if (d * d > (1e-5 * a[FNR])^2 || e * e > (1e-5 * b[FNR])^2) bad = 1 }
       END { exit bad || n != 2 }' "$tmp/cli1.csv" "$tmp/cli2.csv"; then
    ok "tessera-train --spatial 2: training and validation losses equal the 1-rank run's"
  else ko "tessera-train --spatial 2: losses equal the 1-rank run's"; cat "$tmp/cli1.csv" "$tmp/cli2.csv"; fi
  # 3-D samples [1, 4, 8, 8] split along D: each load task reads its rank's half as an HDF5 hyperslab
  printf 'PATH inputs\nINPUT-CLASS TEXTFP\nRANK 5\nDIMENSION-SIZES 64 1 4 8 8\nOUTPUT-CLASS FP\nOUTPUT-SIZE 32\n' >"$tmp/x3.cfg"
  h5import "$tmp/x.txt" -c "$tmp/x3.cfg" "$tmp/y.txt" -c "$tmp/y.cfg" -o "$tmp/reg3.h5" || ko "h5import wrote the 3-D data"
  cat >"$tmp/reg3.json" <<'JSON'
{"name": "reg3", "layers": [
  {"name": "in", "type": "input", "shape": [1, 4, 8, 8]},
  {"name": "c1", "type": "conv3d", "out_channels": 4, "kernel": 3, "padding": 1, "bias": false},
  {"name": "bn1", "type": "batchnorm"},
  {"name": "r1", "type": "leaky_relu"},
  {"name": "p1", "type": "maxpool3d", "kernel": 2},
  {"name": "f", "type": "flatten"},
  {"name": "d", "type": "dense", "out_features": 2}],
 "loss": {"type": "mse"}, "optimizer": {"type": "adam", "lr": 0.003}}
JSON
  for n in 1 2; do
    mpi -np $n -x STARPU_HOME -x STARPU_SILENT \
      -x STARPU_WORKERS_NOBIND -x STARPU_MPI_NOBIND "$train" --model "$tmp/reg3.json" --data "$tmp/reg3.h5" --epochs 2 \
      --batch 8 --deterministic --seed 5 --spatial $n --log "$tmp/cli3d$n.csv" -q >"$tmp/cli3d$n.log" 2>&1 ||
      { ko "tessera-train 3-D --spatial $n ran"; cat "$tmp/cli3d$n.log"; }
  done
  if awk -F, 'NR == FNR { if (FNR > 1) { a[FNR] = $3; b[FNR] = $4 }; next }
       FNR > 1 { n++; d = $3 - a[FNR]; e = $4 - b[FNR]; if (d * d > (1e-5 * a[FNR])^2 || e * e > (1e-5 * b[FNR])^2) bad = 1 }
       END { exit bad || n != 2 }' "$tmp/cli3d1.csv" "$tmp/cli3d2.csv"; then
    ok "tessera-train 3-D --spatial 2 (hyperslab reads): training and validation losses equal the 1-rank run's"
  else ko "tessera-train 3-D --spatial 2: losses equal the 1-rank run's"; cat "$tmp/cli3d1.csv" "$tmp/cli3d2.csv"; fi
else echo "(no h5import: tessera-train --spatial not run)"; fi

TESSERA_SKIP_ALLREDUCE=1 run 2 "$tmp/skip" --batch 4 --spatial 2
if ! "$bin" --compare "$tmp/ref.rank0.params" "$tmp/skip.rank0.params" 1e-5 1e-6 >/dev/null; then
  ok "without the gradient sums over the blocks the parameters differ (the checks above can fail)"
else ko "without the gradient sums over the blocks the parameters differ"; fi

[ -s "$tmp/hangs" ] && { echo "Hangs met (killed, run once more):"; cat "$tmp/hangs"; }
tests_done

#!/usr/bin/env bash
# Cluster recipes: the Slurm batch scripts (examples/slurm) parse (bash -n) and pass tessera-train
# only options its --help lists; the Spack recipe (spack/packages/tessera/package.py) compiles and,
# run against a stub of Spack's package API (Spack itself is not needed), passes
# configure only options that configure.ac defines, with and without +cuda; every option configure.ac
# defines is passed by the recipe or named below as not for packages; every library configure
# requires is a dependency of the recipe.
set -u
. "$(dirname "$0")/script_common.sh"
top=${TESSERA_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
B=${TESSERA_BUILDDIR:-.}
py=/usr/bin/python3
[ -x $py ] || { echo "SKIP: $py not found (the recipe check runs it)"; exit 77; }
test_tmp recipes

# ---- Slurm ----
"$B/tessera-train" --help >"$tmp/help" || ko "tessera-train --help"
for f in "$top"/examples/slurm/*.sbatch; do
  name=examples/slurm/$(basename "$f")
  if bash -n "$f"; then ok "$name parses"; else ko "$name parses"; fi
  # the options of the command that runs "$TRAIN" (its continuation lines included)
  opts=$(awk '/"\$TRAIN"/ { on = 1; sub(/.*"\$TRAIN"/, "") } on { print } on && !/\\$/ { on = 0 }' "$f" |
    grep -o -- '--[a-z][a-z-]*' | sort -u)
  bad=
  for o in $opts; do grep -q -- "$o[ =,]" "$tmp/help" || bad="$bad $o"; done
  if [ -n "$opts" ] && [ -z "$bad" ]; then ok "$name passes tessera-train only options of its --help ($(echo $opts | wc -w))"
  else ko "$name passes tessera-train options its --help lacks:${bad:- (none found)}"; fi
  if grep -q '^#SBATCH --signal=USR1@' "$f" && grep -q -- '--resume' "$f"; then
    ok "$name checkpoints on Slurm's SIGUSR1 and resumes"
  else ko "$name checkpoints on Slurm's SIGUSR1 and resumes"; fi
done
if grep -q '^#SBATCH --gpus-per-task=1' "$top/examples/slurm/train-gpu.sbatch" &&
  grep -q '^export STARPU_NCUDA=1' "$top/examples/slurm/train-gpu.sbatch"; then
  ok "train-gpu.sbatch runs one rank per GPU with one CUDA worker"
else ko "train-gpu.sbatch runs one rank per GPU with one CUDA worker"; fi

# ---- Spack ----
recipe=$top/spack/packages/tessera/package.py
if $py -c "import py_compile, sys; py_compile.compile(sys.argv[1], cfile='$tmp/recipe.pyc', doraise=True)" "$recipe"; then
  ok "the Spack recipe compiles"
else ko "the Spack recipe compiles"; fi
cat >"$tmp/run_recipe.py" <<'PY'
# Loads the recipe with Spack's package API replaced by a recorder, then calls configure_args for
# each value of the cuda variant. Prints "option NAME" and "dep NAME" lines.
import importlib.util, sys, types

recorded = {"depends_on": [], "variant": [], "conflicts": []}
api = types.ModuleType("spack.package")
for kind in recorded:
    setattr(api, kind, lambda *a, _k=kind, **kw: recorded[_k].append(a))
api.version = lambda *a, **kw: None
api.which = lambda name: (lambda *a: None)
class AutotoolsPackage: pass
class CudaPackage: pass
api.AutotoolsPackage, api.CudaPackage = AutotoolsPackage, CudaPackage
class Spec:
    def __init__(self, cuda): self.cuda = cuda
    def satisfies(self, s):
        if s in ("+cuda", "~cuda"): return (s == "+cuda") == self.cuda
        raise SystemExit("stub spec: unknown constraint " + s)
    def __getitem__(self, name): return types.SimpleNamespace(prefix="/opt/" + name)
spack = types.ModuleType("spack")
spack.package = api
sys.modules["spack"], sys.modules["spack.package"] = spack, api
spec = importlib.util.spec_from_file_location("tessera_recipe", sys.argv[1])
recipe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(recipe)
for cuda in (True, False):
    pkg = recipe.Tessera.__new__(recipe.Tessera)
    pkg.spec = Spec(cuda)
    for a in pkg.configure_args():
        print("option", ("+cuda " if cuda else "~cuda ") + a.split("=")[0])
for a in recorded["depends_on"]:
    print("dep", a[0].split("@")[0].split("+")[0].split("~")[0])
for a in recorded["variant"]:
    print("variant", a[0])
PY
if $py "$tmp/run_recipe.py" "$recipe" >"$tmp/recipe.out" 2>"$tmp/recipe.err"; then ok "the recipe runs against a stub of Spack's package API"
else ko "the recipe runs against a stub of Spack's package API"; cat "$tmp/recipe.err"; fi

# Options configure.ac (and its own m4 macros, not libtool's) define, as --with-X/--without-X and --enable-X/--disable-X.
defined=$(cat "$top/configure.ac" "$top"/m4/tsr_*.m4 | grep -o 'AC_ARG_\(WITH\|ENABLE\)(\[[a-z0-9-]*' |
  sed 's/AC_ARG_WITH(\[/with /; s/AC_ARG_ENABLE(\[/enable /' | sort -u)
allowed=$(echo "$defined" | awk '$1 == "with" { print "--with-" $2; print "--without-" $2 }
                                 $1 == "enable" { print "--enable-" $2; print "--disable-" $2 }')
not_for_packages="enable sanitizers" # a developer's check (AddressSanitizer builds), not an installation
used=$(awk '$1 == "option" { print $3 }' "$tmp/recipe.out" | sort -u)
bad=
for o in $used; do echo "$allowed" | grep -qx -- "$o" || bad="$bad $o"; done
if [ -n "$used" ] && [ -z "$bad" ]; then ok "the recipe passes only options configure.ac defines: $(echo $used)"
else ko "the recipe passes options configure.ac does not define:${bad:- (none passed)}"; fi
for v in "+cuda --with-cuda" "~cuda --without-cuda"; do
  if grep -qx "option $v" "$tmp/recipe.out"; then ok "the recipe's ${v% *} passes ${v#* }"
  else ko "the recipe's ${v% *} passes ${v#* }"; fi
done
missing=
while read -r kind name; do
  [ "$kind $name" = "$not_for_packages" ] && continue
  echo "$used" | grep -q -- "^--\(with\|without\|enable\|disable\)-$name\$" || missing="$missing --$kind-$name"
done <<<"$defined"
if [ -n "$defined" ] && [ -z "$missing" ]; then ok "every configure option is the recipe's or named as not for packages"
else ko "configure options the recipe ignores:$missing (pass them, or add them to not_for_packages)"; fi
for v in cuda mpi; do
  if grep -qx "variant $v" "$tmp/recipe.out" || { [ $v = cuda ] && grep -q 'CudaPackage' "$recipe"; }; then
    ok "the recipe has the variant $v"
  else ko "the recipe has the variant $v"; fi
done

# Libraries configure requires (TSR_REQUIRE_* in configure.ac), by their Spack package names.
spack_name() {
  case $1 in
  STARPU) echo starpu ;; MPI) echo mpi ;; DNNL) echo onednn ;; check) echo check ;; hdf5) echo hdf5 ;;
  fftw3) echo fftw ;; jansson) echo jansson ;; libpng) echo libpng ;; openblas) echo openblas ;;
  libcif) echo cif-api ;; spglib) echo spglib ;;
  *) echo "?$1" ;;
  esac
}
required=$(grep -o 'TSR_REQUIRE_\(STARPU\|MPI\|DNNL\)\|TSR_REQUIRE_PKG(\[[A-Z0-9]*\], \[[a-z0-9]*' "$top/configure.ac" |
  sed 's/TSR_REQUIRE_PKG(\[[A-Z0-9]*\], \[//; s/TSR_REQUIRE_//')
missing=
for r in $required; do
  n=$(spack_name "$r")
  grep -qx "dep $n" "$tmp/recipe.out" || missing="$missing $n"
done
if [ -n "$required" ] && [ -z "$missing" ]; then ok "every library configure requires is a dependency: $(echo $required)"
else ko "libraries configure requires that the recipe lacks:$missing"; fi

tests_done

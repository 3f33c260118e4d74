#!/bin/bash
# The branches that only a StarPU with CUDA compiles (the CUDA functions of the codelets, the
# codelet tables naming them, NCCL's codelet, the GPU tests), compiled here with STARPU_USE_CUDA
# defined against the StarPU headers found: Debian's StarPU has no CUDA, so nothing else in CI
# compiles them. Syntax and types only: without a CUDA StarPU they can be neither linked nor run.
set -u
: "${TSR_CUDA_PATHS_CC:?set by make check in CUDA builds (the C compiler and the flags of the library)}"
src=${TESSERA_SRCDIR:?set by make check}
fail=0
for f in "$src"/codelets/*.c "$src"/src/optim/*.c "$src"/src/comm/nccl.c "$src"/tests/gpu/*.c; do
  # implicit declarations and pointer mismatches are only warnings in C: make them count
  if ! out=$($TSR_CUDA_PATHS_CC -DSTARPU_USE_CUDA -Wno-deprecated-declarations -Werror=implicit-function-declaration \
    -Werror=incompatible-pointer-types -Werror=int-conversion -fsyntax-only "$f" 2>&1); then
    echo "FAIL: $f does not compile with STARPU_USE_CUDA:"
    echo "$out"
    fail=1
  fi
done
[ $fail = 0 ] && echo "PASS: the STARPU_USE_CUDA branches compile"
exit $fail

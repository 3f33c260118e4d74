# Dependency checks for Tessera. Every failure names the Debian package to install.

# TSR_REQUIRE_PKG(VAR, MODULES, DEBIAN-PACKAGE)
AC_DEFUN([TSR_REQUIRE_PKG], [
  PKG_CHECK_MODULES([$1], [$2], [],
    [AC_MSG_ERROR([$2 not found: install the Debian package '$3' (apt-get install $3)])])
])

# StarPU >= 1.3 with StarPU-MPI. starpumpi's .pc file omits MPI's own flags: TSR_REQUIRE_MPI adds them.
AC_DEFUN([TSR_REQUIRE_STARPU], [
  STARPU_PKG=
  for v in 1.4 1.3; do
    PKG_CHECK_EXISTS([starpu-$v starpumpi-$v], [STARPU_PKG=starpu-$v; STARPUMPI_PKG=starpumpi-$v; break])
  done
  AS_IF([test -z "$STARPU_PKG"],
    [AC_MSG_ERROR([StarPU >= 1.3 with StarPU-MPI not found: install the Debian package 'libstarpu-dev' (apt-get install libstarpu-dev starpu-tools)])])
  PKG_CHECK_MODULES([STARPU], [$STARPU_PKG $STARPUMPI_PKG])
  AC_SUBST([STARPU_PKG])
  AC_SUBST([STARPUMPI_PKG])
  tsr_save_CPPFLAGS=$CPPFLAGS
  CPPFLAGS="$CPPFLAGS $STARPU_CFLAGS"
  AC_MSG_CHECKING([whether StarPU was built with CUDA])
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <starpu.h>]], [[
#ifndef STARPU_USE_CUDA
#error no cuda
#endif
]])], [tsr_starpu_cuda=yes], [tsr_starpu_cuda=no])
  AC_MSG_RESULT([$tsr_starpu_cuda])
  CPPFLAGS=$tsr_save_CPPFLAGS
])

AC_DEFUN([TSR_REQUIRE_MPI], [
  PKG_CHECK_MODULES([MPI], [ompi-c], [],
    [PKG_CHECK_MODULES([MPI], [mpi], [],
      [AC_MSG_ERROR([MPI not found: install the Debian packages 'libopenmpi-dev' and 'openmpi-bin'])])])
])

AC_DEFUN([TSR_REQUIRE_DNNL], [
  tsr_save_LIBS=$LIBS
  AC_CHECK_HEADER([dnnl.h], [],
    [AC_MSG_ERROR([oneDNN headers not found: install the Debian package 'libdnnl-dev'])])
  AC_CHECK_LIB([dnnl], [dnnl_primitive_desc_create], [DNNL_LIBS=-ldnnl],
    [AC_MSG_ERROR([oneDNN library not found: install the Debian package 'libdnnl-dev'])])
  AC_SUBST([DNNL_LIBS])
  LIBS=$tsr_save_LIBS
])

AC_DEFUN([TSR_CHECK_OPENMP], [
  AC_OPENMP
  AC_SUBST([OPENMP_CFLAGS])
])

# --with-cuda[=DIR]: compile the CUDA side of the codelets. Default: yes when /usr/local/cuda exists.
AC_DEFUN([TSR_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [compile CUDA codelets (default: auto, /usr/local/cuda)])],
    [], [AS_IF([test -x /usr/local/cuda/bin/nvcc], [with_cuda=/usr/local/cuda], [with_cuda=no])])
  AS_IF([test "x$with_cuda" = xyes], [with_cuda=/usr/local/cuda])
  tsr_with_cuda=no
  AS_IF([test "x$with_cuda" != xno], [
    AC_PATH_PROG([NVCC], [nvcc], [], [$with_cuda/bin])
    AS_IF([test -z "$NVCC"], [AC_MSG_ERROR([--with-cuda: nvcc not found under $with_cuda/bin])])
    CUDA_CFLAGS="-I$with_cuda/include"
    dnl the .cu objects are C++ (kernel launch stubs use guarded statics, exception tables): a C
    dnl link of the static library needs the C++ runtime named
    CUDA_LIBS="-L$with_cuda/lib64 -Wl,-rpath,$with_cuda/lib64 -lcudart -lcublas -lcudnn -lnccl -lstdc++"
    tsr_with_cuda="yes ($with_cuda)"
    AC_DEFINE([TSR_WITH_CUDA], [1], [CUDA codelets compiled])
    AS_IF([test "$tsr_starpu_cuda" = no],
      [AC_MSG_WARN([the StarPU found has no CUDA: CUDA codelets are compiled but StarPU will never run them. Build StarPU from source with --enable-cuda, or take it from Spack (spack install starpu+cuda+mpi).])])
  ])
  AC_SUBST([NVCC])
  dnl without -arch/-gencode nvcc builds its default architecture (sm_75 for CUDA 13) and other GPUs
  dnl JIT-compile its PTX at start-up: e.g. NVCCFLAGS=-gencode=arch=compute_90,code=sm_90 for an H100
  AC_ARG_VAR([NVCCFLAGS], [flags for nvcc on the CUDA codelets, e.g. -gencode=arch=compute_90,code=sm_90 (one word per flag)])
  AC_SUBST([CUDA_CFLAGS])
  AC_SUBST([CUDA_LIBS])
  AM_CONDITIONAL([WITH_CUDA], [test "x$with_cuda" != xno])
])

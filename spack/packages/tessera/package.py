# Spack recipe for Tessera (spack repo add <checkout>/spack). Builds the checkout it is run in:
# `spack dev-build tessera@develop [+cuda cuda_arch=90]` from the top folder (Tessera has no public
# release to download yet; a release adds version("X.Y.Z", sha256=...) and its url).
# tests/recipes.sh checks that configure_args passes only options that configure.ac defines and
# that every library configure requires is a dependency.
from spack.package import *


class Tessera(AutotoolsPackage, CudaPackage):
    """Task-based training of neural networks for scientific inverse problems on StarPU: every
    piece of a training step is a StarPU task; data parallelism across MPI ranks."""

    version("develop")

    # Gradient reductions, start-up agreement and checkpoints go through StarPU-MPI: there is no
    # build without MPI (one process needs no mpirun at run time).
    variant("mpi", default=True, description="StarPU-MPI data parallelism (required)")
    conflicts("~mpi", msg="Tessera is built on StarPU-MPI; a build without MPI does not exist")

    depends_on("autoconf", type="build")
    depends_on("automake", type="build")
    depends_on("libtool", type="build")
    depends_on("pkgconfig", type="build")

    depends_on("mpi")
    depends_on("starpu@1.3:+mpi")
    depends_on("starpu+cuda", when="+cuda")
    depends_on("onednn@2:")
    depends_on("openblas")
    depends_on("hdf5~mpi")
    depends_on("fftw")
    depends_on("jansson@2.7:")
    depends_on("libpng")
    depends_on("cif-api")  # CIF files of crystal structures (this repo's spack/packages/cif-api)
    depends_on("spglib")
    depends_on("check@0.10:")
    depends_on("cudnn", when="+cuda")
    depends_on("nccl", when="+cuda")

    def autoreconf(self, spec, prefix):
        which("autoreconf")("-fi")  # a checkout holds configure.ac, not configure

    def configure_args(self):
        if self.spec.satisfies("+cuda"):
            return ["--with-cuda={0}".format(self.spec["cuda"].prefix)]
        return ["--without-cuda"]

# Spack recipe for the CIF API (COMCIFS), the CIF parser Tessera's CBED simulator reads crystal
# structures with (Debian: libcif-dev). Spack has no package of it; this repo's Spack repo does.
from spack.package import *


class CifApi(AutotoolsPackage):
    """The COMCIFS reference implementation of an API for CIF 1.1 and CIF 2.0 files."""

    homepage = "https://github.com/COMCIFS/cif_api"
    url = "https://github.com/COMCIFS/cif_api/archive/refs/tags/v0.4.2.tar.gz"

    version("0.4.2", sha256="803fa1d0525bb51407754fa63b9439ba350178f45372103e84773ed4871b3924")

    depends_on("icu4c")
    depends_on("sqlite")

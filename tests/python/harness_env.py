"""The ORTMODULE_* variables the test run was started with, read before conftest.py clears
them for every test.

Tests run with no ORTMODULE_* variable set (a stray ORTMODULE_FALLBACK_POLICY in a shell
would otherwise turn parity tests into eager-vs-eager comparisons); a test that needs one
sets it itself (monkeypatch.setenv, or a subprocess's env). What describes the build under
test, rather than options of the engine, is read from here:

- ORTMODULE_EXPECT_CUDA_BUILD=1 (make cuda-check): the build must have its CUDA kernels;
- ORTMODULE_CUDA, ORTMODULE_WERROR, ORTMODULE_PROTOBUF_SRC: how setup.py builds, handed
  on to the builds tests make themselves (the wheel test).
"""

from __future__ import annotations

import os

STARTUP: dict[str, str] = {k: v for k, v in os.environ.items() if k.startswith("ORTMODULE_")}
# The build variables of setup.py that were set, for the builds tests make.
BUILD: dict[str, str] = {k: v for k, v in STARTUP.items()
                         if k in ("ORTMODULE_CUDA", "ORTMODULE_WERROR", "ORTMODULE_PROTOBUF_SRC")}


def startup(name: str) -> str | None:
    return STARTUP.get(name)

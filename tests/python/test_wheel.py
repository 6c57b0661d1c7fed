"""The CPU wheel: built with `python -m build`, installed into a clean venv, trains an MLP.

The venv starts with only pip and the torch this suite runs on; the wheel brings the rest
(its dependencies come from the package index, held to locks/main.txt, and the venv is then
checked to hold nothing else). Its _C
must need no system protobuf or flatbuffers library and must find torch in the venv.
"""

from __future__ import annotations

import email.parser
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest
import torch

from tests.python import harness_env

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAIN_SCRIPT = ROOT / "tests" / "wheel" / "train_mlp_from_wheel.py"
TORCH_RELEASE = torch.__version__.split("+")[0]
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")

pytestmark = pytest.mark.slow


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(cmd)} exited {result.returncode}:\n{result.stdout[-4000:]}\n"
        f"{result.stderr[-4000:]}"
    )
    return result


def _clean_env() -> dict[str, str]:
    """The environment without this checkout on the import or library paths."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env.pop("VIRTUAL_ENV", None)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("dist")
    # setuptools stages files under build/lib* and build/bdist*: a module deleted from the
    # tree would otherwise still be packaged.
    for stale in [*ROOT.glob("build/lib.*"), *ROOT.glob("build/bdist.*")]:
        shutil.rmtree(stale)
    _run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), "."],
        cwd=ROOT, env={**os.environ, **harness_env.BUILD},
    )
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_holds_the_package_and_its_metadata(wheel: pathlib.Path) -> None:
    assert re.fullmatch(r"ortmodule-0\.1\.0-cp311-cp311-linux_x86_64\.whl", wheel.name), wheel
    tracked = _run(["git", "ls-files", "ortmodule"], cwd=ROOT).stdout.split()
    expected = {p for p in tracked if p.endswith(".py")} | {f"ortmodule/_C{EXT_SUFFIX}"}
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = email.parser.Parser().parsestr(
            zf.read("ortmodule-0.1.0.dist-info/METADATA").decode()
        )
        tags = zf.read("ortmodule-0.1.0.dist-info/WHEEL").decode()
    package = {n for n in names if not n.startswith("ortmodule-0.1.0.dist-info/")}
    assert package == expected, (
        f"missing: {sorted(expected - package)}, unexpected: {sorted(package - expected)}"
    )
    assert "Tag: cp311-cp311-linux_x86_64" in tags, tags
    requires = sorted(r for r in metadata.get_all("Requires-Dist") if "extra ==" not in r)
    assert requires == sorted([f"torch=={TORCH_RELEASE}", "onnx>=1.17", "onnxscript", "numpy"])


def test_wheel_installs_into_a_clean_venv_and_trains(
    wheel: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    env = _clean_env()
    # Every distribution held to the lock this checkout is tested with (locks/main.txt).
    lock = str(ROOT / "locks" / "main.txt")
    _run([python, "-m", "pip", "install", "-q", "-c", lock, "pip", "setuptools",
          f"torch=={TORCH_RELEASE}"],
         env=env)
    before = _run([python, "-m", "pip", "list", "--format=json"], env=env).stdout
    present = {p["name"].lower() for p in json.loads(before)}
    assert not present & {"ortmodule", "onnx", "onnxscript", "numpy"}, present

    _run([python, "-m", "pip", "install", "-q", "-c", lock, str(wheel)], env=env)
    # Nothing outside the lock, nothing at another version than the lock's.
    _run([python, str(ROOT / "tools" / "check_lock.py"), "--subset", lock], env=env)

    site = pathlib.Path(
        _run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"]
        ).stdout.strip()
    )
    lib = site / "ortmodule" / f"_C{EXT_SUFFIX}"
    dynamic = _run(["readelf", "-d", str(lib)]).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
    assert not [n for n in needed if "protobuf" in n or "flatbuffers" in n], needed
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r\w*path: \[(.*?)\]", dynamic)
    assert runpath == ["$ORIGIN/../torch/lib"], runpath
    ldd = _run(["ldd", str(lib)], env=env).stdout
    assert "not found" not in ldd and "protobuf" not in ldd and "flatbuffers" not in ldd, ldd
    resolved = {m[0]: pathlib.Path(m[1]).resolve() for m in re.findall(r"(\S+) => (\S+)", ldd)}
    torch_lib = (site / "torch" / "lib").resolve()
    for name in ("libc10.so", "libtorch_cpu.so", "libtorch_python.so", "libgomp.so.1"):
        assert resolved[name].parent == torch_lib, (name, resolved[name], torch_lib)
    exported = _run(["nm", "-D", "--defined-only", str(lib)]).stdout
    assert "google8protobuf" not in exported, "_C exports protobuf symbols"

    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    script = workdir / TRAIN_SCRIPT.name
    shutil.copy(TRAIN_SCRIPT, script)
    result = _run([python, str(script), str(ROOT)], cwd=workdir, env=env)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert pathlib.Path(report["package"]) == (site / "ortmodule").resolve(), report
    assert len(report["losses"]["ortmodule"]) == len(report["losses"]["eager"]) > 0, report

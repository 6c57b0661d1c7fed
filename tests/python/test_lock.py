"""The locks (locks/*.txt) and their check (tools/check_lock.py): a venv holding another
version than its lock's, a distribution the lock lacks, or missing one it has, fails and
names the package; requirements.txt's pins and the locks agree."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tools" / "check_lock.py"
sys.path.insert(0, str(ROOT / "tools"))
import check_lock

# The lock of each venv and the requirement file (with the Makefile's rewrites) it comes from.
LOCKS = {
    "main.txt": (ROOT / "requirements.txt", {}),
    "cuda.txt": (ROOT / "requirements.txt", {"torch": "2.14.1"}),
    "torch-range.txt": (ROOT / "requirements.txt", {"torch": "2.11.0", "setuptools": "81.0.0"}),
    "ref.txt": (ROOT / "tests" / "interop" / "requirements-ref.txt",
                {"onnxruntime-training-cpu": "1.19.2"}),
}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv without pip holding one distribution, demo-pkg 1.0."""
    root = tmp_path_factory.mktemp("lock") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)}))
    info = site / "demo_pkg-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n")
    return root


def _check(venv: Path, tmp_path: Path, lock_text: str,
           *flags: str) -> subprocess.CompletedProcess[str]:
    lock = tmp_path / "lock.txt"
    lock.write_text(lock_text)
    return subprocess.run([str(venv / "bin" / "python"), str(CHECK), *flags, str(lock)],
                          capture_output=True, text=True, check=False)


def test_matching_venv_passes(venv: Path, tmp_path: Path) -> None:
    done = _check(venv, tmp_path, "# header\nDemo_Pkg==1.0\n")
    assert done.returncode == 0, done.stderr
    assert "matches" in done.stdout


def test_other_version_fails_naming_the_package(venv: Path, tmp_path: Path) -> None:
    done = _check(venv, tmp_path, "demo-pkg==2.0\n")
    assert done.returncode == 1
    assert "demo-pkg==1.0 is installed, the lock says demo-pkg==2.0" in done.stderr


def test_unlocked_and_missing_distributions_fail(venv: Path, tmp_path: Path) -> None:
    done = _check(venv, tmp_path, "other==3.1\n")
    assert done.returncode == 1
    assert "demo-pkg==1.0 is installed but not locked" in done.stderr
    assert "other==3.1 is locked but not installed" in done.stderr
    # --subset: a venv may hold part of the lock, never more nor other versions.
    assert _check(venv, tmp_path, "demo-pkg==1.0\nother==3.1\n", "--subset").returncode == 0
    assert _check(venv, tmp_path, "other==3.1\n", "--subset").returncode == 1


def test_malformed_lock_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("numpy>=2\n")
    with pytest.raises(ValueError, match=r"lock.txt:1: expected 'name==version', got 'numpy>=2'"):
        check_lock.read_lock(lock)


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_lock_holds_the_requirements_pins(name: str) -> None:
    """Each exact pin of the requirement file (after the Makefile's rewrites) is in the
    lock at that version: a pin changed without `make lock` fails here."""
    requirements, rewrites = LOCKS[name]
    lock = check_lock.read_lock(ROOT / "locks" / name)
    pins = {}
    for line in requirements.read_text().splitlines():
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.split("#", 1)[0].strip())
        if m:
            pins[check_lock.normalize(m.group(1))] = m.group(2)
    pins.update({check_lock.normalize(k): v for k, v in rewrites.items()})
    unpinned = [line.strip() for line in requirements.read_text().splitlines()
                if re.fullmatch(r"[A-Za-z0-9_.-]+", line.split("#", 1)[0].strip())]
    assert pins
    for package, version in pins.items():
        # torch's local label (+cpu) is the lock's detail, not the requirement's.
        assert lock.get(package, "").split("+")[0] == version, (
            f"{name}: {package}=={version} required, the lock has {lock.get(package)}; "
            "run `make lock`")
    for package in unpinned:
        assert check_lock.normalize(package) in lock, f"{name}: {package} is not locked"

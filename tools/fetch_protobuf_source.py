"""Fetches the protobuf source that matches the installed protoc, for the static runtime.

ortmodule._C links the protobuf-lite runtime statically with hidden symbols, so that
neither a wheel nor an editable install needs a system libprotobuf at run time. Debian's
libprotobuf-lite.a cannot go into a shared object (it uses local-exec TLS), so CMake
compiles the runtime from source (CMakeLists.txt, ORTMODULE_PROTOBUF_SRC). This script
downloads Debian's source package of exactly the installed libprotobuf-dev version (same
headers, same patches as protoc's), unpacks it under DEST and prints the source folder.

Use: python tools/fetch_protobuf_source.py [DEST]   (default: build/third_party)
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAMP = ".ortmodule-debian-version"
HOW_TO_SKIP = (
    "or set ORTMODULE_PROTOBUF_SRC to an unpacked protobuf source tree of the same version "
    "as `protoc --version`"
)


def _fail(message: str) -> None:
    sys.exit(f"fetch_protobuf_source: {message}")


def installed_version() -> str:
    """The Debian version of the installed libprotobuf-dev (the headers CMake compiles with)."""
    if not all(shutil.which(tool) for tool in ("dpkg-query", "apt-get", "dpkg-source")):
        _fail(
            "dpkg-query, apt-get or dpkg-source not found: this script fetches Debian's source "
            f"(dpkg-source is in the dpkg-dev package); {HOW_TO_SKIP}"
        )
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", "libprotobuf-dev"],
        check=False,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 or not result.stdout.strip():
        _fail(f"libprotobuf-dev is not installed: run `make system-deps`, {HOW_TO_SKIP}")
    return result.stdout.strip()


def _deb_src_sources() -> tuple[str, str]:
    """The system's `deb` entries as `deb-src` entries (the system's apt setup is left alone)."""
    entries = []
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        with open(path) as f:
            text = f.read()
        entries.append(
            "\n".join(
                "Types: deb-src" if line.strip() == "Types: deb" else line
                for line in text.splitlines()
            )
        )
    lines = []
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        if os.path.exists(path):
            with open(path) as f:
                lines += ["deb-src " + s[4:] for s in f.read().splitlines() if s.startswith("deb ")]
    if not entries and not lines:
        _fail(f"no Debian package source found under /etc/apt; {HOW_TO_SKIP}")
    return "\n\n".join(entries) + "\n", "\n".join(lines) + "\n"


def fetch(dest: str) -> str:
    version = installed_version()
    upstream = version.split(":")[-1].split("-")[0].split("+")[0]
    target = os.path.join(dest, f"protobuf-{upstream}")
    stamp = os.path.join(target, STAMP)
    if os.path.exists(stamp):
        with open(stamp) as f:
            if f.read().strip() == version:
                return target
    os.makedirs(dest, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        apt_dir = os.path.join(tmp, "apt")
        for sub in ("sources", "lists/partial", "cache/archives/partial"):
            os.makedirs(os.path.join(apt_dir, sub))
        deb822, one_line = _deb_src_sources()
        with open(os.path.join(apt_dir, "sources", "debian.sources"), "w") as f:
            f.write(deb822)
        with open(os.path.join(apt_dir, "sources.list"), "w") as f:
            f.write(one_line)
        apt = [
            "apt-get",
            "-q",
            "-o", f"Dir::Etc::SourceList={apt_dir}/sources.list",
            "-o", f"Dir::Etc::SourceParts={apt_dir}/sources",
            "-o", f"Dir::State::Lists={apt_dir}/lists",
            "-o", f"Dir::Cache={apt_dir}/cache",
            "-o", "APT::Sandbox::User=root",
        ]  # fmt: skip
        unpack = os.path.join(tmp, "src")
        os.makedirs(unpack)
        for step in (["update"], ["source", f"protobuf={version}"]):
            result = subprocess.run(
                apt + step, check=False, cwd=unpack, capture_output=True, text=True
            )
            if result.returncode != 0:
                _fail(
                    f"`apt-get {' '.join(step)}` failed (exit {result.returncode}):\n"
                    f"{result.stdout[-2000:]}{result.stderr[-2000:]}\n"
                    f"Upgrade libprotobuf-dev and protobuf-compiler to a version Debian still "
                    f"serves (apt-get install --only-upgrade), {HOW_TO_SKIP}"
                )
        unpacked = os.path.join(unpack, f"protobuf-{upstream}")
        if not os.path.exists(os.path.join(unpacked, "cmake", "libprotobuf-lite.cmake")):
            _fail(f"the source package has no {unpacked}/cmake/libprotobuf-lite.cmake")
        with open(os.path.join(unpacked, STAMP), "w") as f:
            f.write(version + "\n")
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(unpacked, target)
    return target


def main() -> None:
    dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "third_party")
    print(fetch(os.path.abspath(dest)))


if __name__ == "__main__":
    main()

"""Checks that a Python environment holds exactly the distributions of its lock file.

Run it with the environment's own interpreter:

    .venv/bin/python tools/check_lock.py locks/main.txt
    VENV/bin/python tools/check_lock.py --subset locks/main.txt   # a venv that holds part of it

Every installed distribution must be in the lock at the lock's version; without --subset
every locked distribution must also be installed. The project's own distribution
(ortmodule, installed in editable mode) is not locked. Exits 1 naming each package that
differs, is missing or is not locked; 0 when the environment matches.
Regenerate the locks with `make lock` (tools/lock.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
from pathlib import Path

# Distributions a lock never lists: the project itself.
UNLOCKED = {"ortmodule"}


def normalize(name: str) -> str:
    """A distribution name as the package index compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    """`name==version` lines (comments and blank lines aside) as {normalized name: version}."""
    pins: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9_.-]*)==(\S+)", line)
        if m is None:
            raise ValueError(f"{path}:{lineno}: expected 'name==version', got {raw!r}")
        pins[normalize(m.group(1))] = m.group(2)
    return pins


def installed() -> dict[str, str]:
    """The distributions this interpreter sees on its site paths, {normalized name: version}."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(normalize(name), dist.version)
    return found


def differences(have: dict[str, str], lock: dict[str, str], subset: bool) -> list[str]:
    """One line per package that differs from the lock; empty when the environment matches."""
    problems = []
    for name in sorted(have):
        if name in UNLOCKED:
            continue
        if name not in lock:
            problems.append(f"{name}=={have[name]} is installed but not locked")
        elif have[name] != lock[name]:
            problems.append(f"{name}=={have[name]} is installed, the lock says {name}=={lock[name]}")
    if not subset:
        problems += [f"{name}=={lock[name]} is locked but not installed"
                     for name in sorted(set(lock) - set(have))]
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lock", type=Path)
    parser.add_argument("--subset", action="store_true",
                        help="the environment may hold only part of the lock")
    args = parser.parse_args(argv)
    problems = differences(installed(), read_lock(args.lock), args.subset)
    if problems:
        print(f"{sys.prefix} does not match {args.lock}:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        print("Recreate the venv (remove it and rerun make), or, to move to new versions on "
              "purpose, run `make lock` and commit the locks.", file=sys.stderr)
        return 1
    print(f"{sys.prefix} matches {args.lock}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

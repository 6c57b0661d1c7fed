"""Runs `make STAGE` for each stage in turn and prints each stage's wall time at the end.

    python3 tools/stages.py MAKE build test-cpp test-python ...

The first stage is run as is; the later ones with `-o build -o system-deps` (make takes those
as done), so the build runs once. Stops at the first stage that fails, with its exit code;
the table then marks it and the stages not run.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    make, stages = shlex.split(argv[0]), argv[1:]
    times: list[tuple[str, float, str]] = []
    rc = 0
    start = time.monotonic()
    for i, stage in enumerate(stages):
        cmd = [*make, stage] if i == 0 else [*make, "-o", "build", "-o", "system-deps", stage]
        print(f"==== stage {stage}: {' '.join(cmd)}", flush=True)
        t0 = time.monotonic()
        rc = subprocess.call(cmd)
        times.append((stage, time.monotonic() - t0, "ok" if rc == 0 else f"FAILED ({rc})"))
        if rc != 0:
            break
    times += [(stage, 0.0, "not run") for stage in stages[len(times):]]
    print("==== stage times")
    for stage, seconds, status in times:
        print(f"  {stage:<16} {seconds / 60:6.1f} min  {seconds:7.0f} s  {status}")
    total = time.monotonic() - start
    print(f"  {'total':<16} {total / 60:6.1f} min  {total:7.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

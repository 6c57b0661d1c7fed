"""Smoke runs of benchmarks/run.py: the report is produced and failures become rows.

No timing is asserted. torch.compile is left out: its first step compiles C++ and takes from
seconds to minutes depending on the machine; the runners share one code path.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "benchmarks/run.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)


def table_row(out: str, first_cells: str) -> list[str]:
    """The cells of the table row that starts with `first_cells` (e.g. "mlp | eager")."""
    match = re.search(rf"^\| {re.escape(first_cells)} \|.*$", out, re.MULTILINE)
    assert match is not None, f"no row {first_cells!r} in:\n{out}"
    return [cell.strip() for cell in match.group(0).strip("|").split("|")]


def test_quick_mlp_run_prints_the_table() -> None:
    done = run_bench("--quick", "--models", "mlp", "--steps", "2", "--warmup", "1",
                     "--runners", "eager", "ortmodule")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "| model | runner | ms/step |" in out
    assert re.search(r"SGEMM ceiling \d+ GFLOP/s", out), out
    for runner in ("eager", "ortmodule"):
        cells = table_row(out, f"mlp | {runner}")
        assert float(cells[2]) > 0, cells  # ms/step
        assert re.fullmatch(r"\d+\.\d+x", cells[3]), cells  # vs eager
        # peak RSS from the child: steady (first calls) +the runner's libraries, once
        assert re.fullmatch(r"-?\d+ \(-?\d+\) \+-?\d+", cells[7]), cells
    cells = table_row(out, "mlp | ortmodule")
    assert re.fullmatch(r"\d+", cells[8]), cells  # engine allocator peak
    assert re.fullmatch(r"\d+\.\d+ \(\d+\.\d+ / \d+\.\d+ / \d+\.\d+\)", cells[9]), cells
    framework = table_row(out.split("## ORTModule framework time")[1], "mlp")
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", cell) for cell in framework[1:]), framework
    # eager's products (the MLP's are its three Linear layers' mm/addmm) and the bound
    products = table_row(out.split("## Eager's products")[1], "mlp")
    eager_ms, products_ms = float(products[1]), float(products[2])
    assert products_ms > 0, products
    assert abs(float(products[3].rstrip("%")) - 100 * products_ms / eager_ms) <= 0.6, products
    assert abs(float(products[4].rstrip("x")) - eager_ms / products_ms) <= 0.011, products
    assert products[5] == table_row(out, "mlp | ortmodule")[3], products
    assert "| MLP: ORTModule vs eager | >= 1.3x |" in out
    assert "| BERT-small: ORTModule vs eager | >= 1.5x | not measured |" in out
    assert "| GPT-2-124M: ORTModule peak RSS growth / eager's | <= 0.6x | not measured |" in out
    assert re.search(r"ISA: engine kernels (baseline|avx2|avx512|avx512bf16|amx), torch kernels", out)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the row of a missing GPU")
def test_missing_device_becomes_a_row() -> None:
    done = run_bench("--quick", "--models", "mlp", "--steps", "1", "--device", "cuda")
    assert done.returncode == 1, done.stdout + done.stderr
    for runner in ("eager", "compile", "ortmodule"):
        cells = table_row(done.stdout, f"mlp | {runner}")
        assert cells[2].startswith("failed: RuntimeError: --device cuda"), cells
    assert "SGEMM ceiling n/a" in done.stdout


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_autocast_run_trains_every_runner_in_mixed_precision(precision: str) -> None:
    """--autocast: each runner's forward under torch.autocast (fp16 with a GradScaler, in the
    memory children too); the header says so."""
    done = run_bench("--quick", "--models", "mlp", "--steps", "1", "--warmup", "1",
                     "--runners", "eager", "ortmodule", "--autocast", precision)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"; torch.autocast {precision}" in done.stdout
    for runner in ("eager", "ortmodule"):
        cells = table_row(done.stdout, f"mlp | {runner}")
        assert float(cells[2]) > 0, cells
        assert re.fullmatch(r"-?\d+ \(-?\d+\) \+-?\d+", cells[7]), cells

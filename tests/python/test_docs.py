"""The supported-ops page is generated from the op table and must be up to date."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_supported_ops_doc_is_current() -> None:
    result = subprocess.run([sys.executable, "tools/gen_ops_doc.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ops_header_is_current() -> None:
    result = subprocess.run([sys.executable, "tools/gen_ops_header.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_onnx_arity_header_is_current() -> None:
    result = subprocess.run([sys.executable, "tools/gen_onnx_arity.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr

"""Writes the fuzz seed corpus: the ONNX backend corpus models (node cases and recorded
models, small ones only) and the crafted models of tests/python/test_model_safety.py, one
serialized ModelProto per file. Run at fuzz time; the seeds are not kept in git.

    python tests/fuzz/make_seeds.py OUT_DIR [--max-bytes N]
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import sys
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.python.onnx_corpus import all_cases
from tests.python.test_model_safety import CASES


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--max-bytes", type=int, default=64 * 1024)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=RuntimeWarning)  # the corpus generators
    args.out.mkdir(parents=True, exist_ok=True)
    written = skipped = 0
    blobs = [case.model.SerializeToString() for case in all_cases()]
    blobs += [builder()[0] for builder, _ in CASES.values()]
    for blob in blobs:
        if len(blob) > args.max_bytes:
            skipped += 1
            continue
        (args.out / hashlib.sha1(blob).hexdigest()).write_bytes(blob)
        written += 1
    print(f"{written} seed models written to {args.out} ({skipped} larger than "
          f"{args.max_bytes} bytes left out)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

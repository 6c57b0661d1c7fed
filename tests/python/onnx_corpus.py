"""The ONNX backend test corpus, replayed through the engine.

Cases come from the pinned onnx wheel: the node cases are generated in-process from
`onnx.backend.test.case.node.collect_testcases` (the wheel ships the generators, not their
data folders) and the recorded model cases are read from `onnx/backend/test/data/{kind}`
(`pytorch-converted`, `pytorch-operator`, `simple`, `light`).

A case is *covered* when every node's op is a public row of the op table (any opset: a case
whose opset the row does not accept fails with the loader's error, which is the point).
`python -m tests.python.onnx_corpus` runs every covered case and prints a summary per op;
`tests/python/test_onnx_corpus.py` runs them under pytest against the expectations file
`tests/python/onnx_corpus_expected.txt`.
"""

from __future__ import annotations

import functools
import glob
import os
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

DATA_DIR = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data"
RECORDED_KINDS = ("pytorch-converted", "pytorch-operator", "simple", "light")
EXPECTATIONS = Path(__file__).resolve().parent / "onnx_corpus_expected.txt"


@dataclass
class CorpusCase:
    name: str
    kind: str  # "node" or one of RECORDED_KINDS
    model: onnx.ModelProto
    # Each data set: (inputs in graph-input order, expected outputs in graph-output order).
    data_sets: list[tuple[list[np.ndarray], list[np.ndarray]]] = field(default_factory=list)
    rtol: float = 1e-3
    atol: float = 1e-7

    def op_types(self) -> set[tuple[str, str]]:
        return {(n.domain if n.domain != "ai.onnx" else "", n.op_type)
                for n in self.model.graph.node}

    def opset(self) -> int:
        for o in self.model.opset_import:
            if o.domain in ("", "ai.onnx"):
                return o.version
        return -1


def _normalize(value: object) -> object:
    # Sequence, map and optional values stay as they are: no op of the table takes them.
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.ndarray | np.generic):
        return np.asarray(value)
    return value


def _node_cases() -> Iterator[CorpusCase]:
    from onnx.backend.test.case import node as node_cases

    # The generators compute their expected outputs with numpy, overflowing and dividing by
    # zero on purpose (Cast to narrow types, reductions over empty sets).
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        testcases = node_cases.collect_testcases(None)
    for tc in testcases:
        data_sets = [([_normalize(x) for x in ins], [_normalize(y) for y in outs])
                     for ins, outs in tc.data_sets]
        yield CorpusCase(tc.name, "node", tc.model, data_sets, tc.rtol, tc.atol)


def _load_pb(path: str) -> np.ndarray:
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    return numpy_helper.to_array(tensor)


def _data_dir_sets(case_dir: str) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    sets = []
    for d in sorted(glob.glob(os.path.join(case_dir, "test_data_set_*"))):
        n_in = len(glob.glob(os.path.join(d, "input_*.pb")))
        n_out = len(glob.glob(os.path.join(d, "output_*.pb")))
        sets.append(([_load_pb(os.path.join(d, f"input_{i}.pb")) for i in range(n_in)],
                     [_load_pb(os.path.join(d, f"output_{i}.pb")) for i in range(n_out)]))
    return sets


def _light_inputs(model: onnx.ModelProto) -> list[np.ndarray]:
    # The inputs onnx's backend runner generates for the light models (deterministic ramps);
    # the recorded outputs were computed from them.
    inits = {i.name for i in model.graph.initializer}
    inputs = []
    for x in model.graph.input:
        if x.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                      for d in x.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        inputs.append((np.arange(n).reshape(shape) / n).astype(np.float32))
    return inputs


def _recorded_cases(kind: str) -> Iterator[CorpusCase]:
    kind_dir = DATA_DIR / kind
    if kind == "light":
        for path in sorted(kind_dir.glob("light_*.onnx")):
            model = onnx.load(str(path))
            prefix = str(path)[: -len(".onnx")]
            outputs = [_load_pb(f"{prefix}_output_{i}.pb") for i in range(len(model.graph.output))]
            name = "test_" + path.stem[len("light_"):]
            yield CorpusCase(name, kind, model, [(_light_inputs(model), outputs)])
        return
    for case_dir in sorted(kind_dir.iterdir()):
        if not (case_dir / "model.onnx").exists():
            continue
        model = onnx.load(str(case_dir / "model.onnx"))
        yield CorpusCase(case_dir.name, kind, model, _data_dir_sets(str(case_dir)))


@functools.lru_cache(maxsize=1)
def all_cases() -> tuple[CorpusCase, ...]:
    cases = list(_node_cases())
    for kind in RECORDED_KINDS:
        cases.extend(_recorded_cases(kind))
    return tuple(cases)


def case_id(case: CorpusCase) -> str:
    return f"{case.kind}/{case.name}"


def public_ops() -> set[tuple[str, str]]:
    from ortmodule import _C

    return {(r["domain"], r["op_type"]) for r in _C.op_table() if not r["internal"]}


def covered(case: CorpusCase, ops: set[tuple[str, str]]) -> bool:
    return bool(case.model.graph.node) and case.op_types() <= ops


def _expectation_lines(path: Path) -> Iterator[tuple[bool, str, str]]:
    """(undefined?, kind/case_name, reason) per line; '#' starts a comment."""
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        undefined = line.startswith("undefined ")
        name, sep, reason = line.removeprefix("undefined ").partition(":")
        if not sep or not reason.strip():
            raise ValueError(f"{path}:{lineno}: expected '[undefined ]kind/case: reason', "
                             f"got {line!r}")
        yield undefined, name.strip(), reason.strip()


def load_expectations(path: Path = EXPECTATIONS) -> dict[str, str]:
    """The cases that must fail: `kind/case_name: reason` lines."""
    return {name: reason for undefined, name, reason in _expectation_lines(path)
            if not undefined}


def load_undefined(path: Path = EXPECTATIONS) -> dict[str, str]:
    """The cases some of whose inputs have results ONNX leaves undefined, which the replay
    leaves out: `undefined kind/case_name: reason` lines."""
    return {name: reason for undefined, name, reason in _expectation_lines(path) if undefined}


def undefined_elements(case: CorpusCase, inputs: list[np.ndarray],
                       expected: list[np.ndarray]) -> np.ndarray | None:
    """The elements of a one-node Cast/CastLike case whose results ONNX leaves undefined (a
    float out of the integer output type's range; the engine's rule for them is
    docs/behaviour.md's and tests/python/test_cast_low_bit.py checks it), or None."""
    from tests.python import cast_rule

    nodes = case.model.graph.node
    if len(nodes) != 1 or nodes[0].op_type not in ("Cast", "CastLike") or not inputs:
        return None
    x, y = np.asarray(inputs[0]), np.asarray(expected[0])
    dst = cast_rule.NUMPY_INTEGER_TYPES.get(y.dtype)
    # numpy's floats, and ml_dtypes' (bfloat16, the float8/float4/float6 types).
    floating = x.dtype.kind == "f" or (
        (str(x.dtype) == "bfloat16" or str(x.dtype) in LOW_BIT_TORCH_DTYPES)
        and x.dtype not in cast_rule.NUMPY_INTEGER_TYPES)
    if dst is None or not floating or x.shape != y.shape:
        return None
    mask = ~cast_rule.in_range(x, dst)
    return mask if mask.any() else None


# The low-bit types (numpy_helper gives them as ml_dtypes arrays, one element per byte) and
# the torch dtype each crosses the engine boundary as: torch's own float8 dtypes and its
# storage-only int4/uint4/int2/uint2, and uint8 holding the bit pattern for float4/float6.
_LOW_BIT_INTEGERS = {np.dtype(getattr(ml_dtypes, n)) for n in ("int4", "uint4", "int2", "uint2")}
LOW_BIT_TORCH_DTYPES = {
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e4m3fnuz": "float8_e4m3fnuz",
    "float8_e5m2": "float8_e5m2",
    "float8_e5m2fnuz": "float8_e5m2fnuz",
    "float8_e8m0fnu": "float8_e8m0fnu",
    "uint4": "uint4",
    "int4": "int4",
    "uint2": "uint2",
    "int2": "int2",
    "float4_e2m1fn": "uint8",
    "float6_e2m3fn": "uint8",
    "float6_e3m2fn": "uint8",
}


def low_bit_differs(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Elementwise: two arrays of one low-bit type differ bit for bit, except that any NaN
    code matches any other (the sign and payload of a NaN are left undefined)."""
    bad = got.view(np.uint8) != expected.view(np.uint8)
    if expected.dtype.kind != "V" or np.dtype(expected.dtype) in _LOW_BIT_INTEGERS:
        return bad
    with np.errstate(all="ignore"):
        both_nan = np.isnan(got.astype(np.float32)) & np.isnan(expected.astype(np.float32))
    return bad & ~both_nan


def _to_torch(value: np.ndarray):  # torch is imported lazily
    import torch

    value = np.ascontiguousarray(value)
    if value.dtype == np.dtype("V2") or str(value.dtype) == "bfloat16":
        return torch.from_numpy(value.view(np.int16).copy()).view(torch.bfloat16)
    if str(value.dtype) in LOW_BIT_TORCH_DTYPES:
        bits = torch.from_numpy(value.view(np.uint8).copy())
        return bits.view(getattr(torch, LOW_BIT_TORCH_DTYPES[str(value.dtype)]))
    return torch.from_numpy(value.copy())


def _to_numpy(t, like: np.dtype | None = None) -> np.ndarray:
    """`like`: the dtype expected, which tells a float4/float6 result from a uint8 one."""
    import ml_dtypes
    import torch

    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    name = str(t.dtype).removeprefix("torch.")
    if name in LOW_BIT_TORCH_DTYPES and name != "uint8":
        return t.view(torch.uint8).numpy().view(getattr(ml_dtypes, name))
    if t.dtype == torch.uint8 and like is not None and str(like) in LOW_BIT_TORCH_DTYPES:
        return t.numpy().view(like)
    return t.numpy()


def run_case(case: CorpusCase, leave_out_undefined: bool = False) -> None:
    """Runs every data set of the case; raises AssertionError on a mismatch and lets the
    engine's own exceptions through. `leave_out_undefined`: elements whose results ONNX
    leaves undefined (undefined_elements) are not fed nor compared."""
    from ortmodule import _C

    program = _C.Program(case.model.SerializeToString(), [], [])
    for inputs, expected in case.data_sets:
        mask = undefined_elements(case, inputs, expected) if leave_out_undefined else None
        if mask is not None:
            keep = ~mask
            inputs = [np.asarray(inputs[0])[keep], *inputs[1:]]
            expected = [np.asarray(expected[0])[keep], *expected[1:]]
        got = _C.run(program, [_to_torch(x) for x in inputs])
        assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            e = np.asarray(e)
            g_np = _to_numpy(g, e.dtype)
            if str(e.dtype) == "bfloat16":
                e = e.astype(np.float32)
            assert g_np.shape == e.shape, f"output {i}: shape {g_np.shape} != {e.shape}"
            assert g_np.dtype == e.dtype, f"output {i}: dtype {g_np.dtype} != {e.dtype}"
            if str(e.dtype) in LOW_BIT_TORCH_DTYPES:  # bit patterns (a NaN is any NaN)
                bad = low_bit_differs(g_np, e)
                assert not bad.any(), (
                    f"output {i} ({e.dtype} bits): {bad.sum()} of {bad.size} differ; got "
                    f"{g_np[bad][:8]} expected {e[bad][:8]}")
            elif e.dtype.kind in "fc":
                np.testing.assert_allclose(g_np, e, rtol=case.rtol, atol=case.atol,
                                           err_msg=f"output {i}")
            else:
                np.testing.assert_array_equal(g_np, e, err_msg=f"output {i}")


def main(argv: list[str]) -> int:
    ops = public_ops()
    cases = all_cases()
    undefined = load_undefined()
    filt = argv[0] if argv else ""
    results: dict[str, str] = {}
    for case in cases:
        if not covered(case, ops) or filt not in case_id(case):
            continue
        try:
            run_case(case, leave_out_undefined=case_id(case) in undefined)
            results[case_id(case)] = "ok"
        except Exception as e:  # noqa: BLE001 (the report lists every failure)
            results[case_id(case)] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    passed = sum(r == "ok" for r in results.values())
    for name, r in sorted(results.items()):
        if r != "ok":
            print(f"{name}: {r}")
    print(f"{len(cases)} cases, {len(results)} covered, {passed} pass "
          f"({100.0 * passed / max(len(results), 1):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

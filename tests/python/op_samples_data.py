"""Samples for the math, logic, selection, region and index ops (see op_samples.py)."""

from __future__ import annotations

import math

import numpy as np

from tests.python.sample_utils import Sample, distinct, i64, rand

S = Sample


def b(values: object) -> np.ndarray:
    return np.asarray(values, dtype=np.bool_)


def _compare(op_name: str) -> list[Sample]:
    return [
        S({"a": np.array([[0.5, -1.0, 2.0], [0.5, 0.25, -3.0]]), "b": np.array([0.5, 0.25, 2.0])}),
        S({"a": i64([[1, 5, -2], [3, 3, 0]]), "b": i64([[3], [0]])}),
    ]


def _gelu(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """float64 Gelu (onnx.reference evaluates it in lower precision, off by 2e-6)."""
    x = inputs["x"]
    return [0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))]


def _gelu_tanh(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    x = inputs["x"]
    return [0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))]


def _pad_cropping(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """pads [0, -1, 1, 2]: onnx.reference rejects negative pads."""
    return [np.pad(inputs["x"][:, 1:], ((0, 1), (0, 2)))]


def _with_zeros(*shape: int) -> np.ndarray:
    """Random values with about half of them zero (one of those -0.0); its own generator, so
    the samples after it keep their values."""
    x = np.random.default_rng(5).uniform(-1.0, 1.0, size=shape)
    x[x < 0] = 0.0
    x.flat[0] = -0.0
    return x


def _embedding(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [inputs["weight"][inputs["indices"]]]


DATA_SAMPLES: dict[str, list[Sample]] = {
    # ---- unary math ----
    "Sin": [S({"x": rand(3, 4, low=-3, high=3)})],
    "Cos": [S({"x": rand(3, 4, low=-3, high=3)})],
    "Reciprocal": [S({"x": rand(3, 4, low=0.5, high=2.0)}),
                   S({"x": rand(5, low=-2.0, high=-0.5)})],
    "Softplus": [S({"x": rand(3, 4, low=-4, high=4)}, reference_rtol=1e-7),
                 S({"x": np.array([-40.0, -3.0, 0.0, 3.0, 40.0])}, reference_rtol=1e-7)],
    "Gelu": [S({"x": rand(3, 4, low=-3, high=3)}, opset=20, expected=_gelu),
             S({"x": rand(3, 4, low=-3, high=3)}, attrs={"approximate": "tanh"}, opset=20,
               expected=_gelu_tanh)],
    "Floor": [S({"x": np.array([-1.5, -0.2, 0.0, 0.7, 2.0, 3.9])})],
    "Ceil": [S({"x": np.array([-1.5, -0.2, 0.0, 0.7, 2.0, 3.9])})],
    # ---- selection ----
    "Min": [S({"a": distinct(2, 3), "b": distinct(3) + 0.01}),
            S({"a": distinct(4), "b": distinct(2, 1, 4) + 0.003, "c": distinct(1, 3, 1) + 0.007}),
            S({"a": i64([[1, 5, -2], [3, 3, 0]]), "b": i64([2, 2, 2])})],
    "Max": [S({"a": distinct(2, 3), "b": distinct(3) + 0.01}),
            S({"a": distinct(4), "b": distinct(2, 1, 4) + 0.003, "c": distinct(1, 3, 1) + 0.007}),
            # A tie: the gradient is shared evenly, matching the central difference.
            S({"a": np.array([0.5, 0.2]), "b": np.array([0.5, 0.1])}),
            S({"a": i64([[1, 5, -2], [3, 3, 0]]), "b": i64([2, 2, 2])})],
    "Mod": [S({"a": np.array([2.3, -2.7, 1.45, 5.1]), "b": np.array([1.0, 1.2, 0.6, -1.4])},
              attrs={"fmod": 1}),
            S({"a": i64([7, -7, 7, -7, 0]), "b": i64([3, 3, -3, -3, 5])}),
            S({"a": i64([7, -7, 7, -7, 0]), "b": i64([3, 3, -3, -3, 5])}, attrs={"fmod": 1})],
    "Where": [
        S({"p": rand(2, 3), "q": rand(3)}, constants={"c": b([[True, False, True],
                                                             [False, False, True]])},
          order=["c", "p", "q"]),
        S({"p": rand(2, 1), "q": rand(1, 3)}, constants={"c": b([True, False, True])},
          order=["c", "p", "q"]),
        S({"c": b([[True], [False]]), "p": i64([1, 2, 3]), "q": i64([[-1, -2, -3]])}),
    ],
    # ---- comparisons and logic ----
    "Equal": _compare("Equal") + [S({"a": b([True, False, True]), "b": b([True, True, False])})],
    "Less": _compare("Less"),
    "Greater": _compare("Greater"),
    "LessOrEqual": _compare("LessOrEqual"),
    "GreaterOrEqual": _compare("GreaterOrEqual"),
    "Not": [S({"x": b([[True, False], [False, False]])})],
    "And": [S({"a": b([[True, False], [True, True]]), "b": b([True, False])})],
    "Or": [S({"a": b([[True, False], [False, False]]), "b": b([[False], [True]])})],
    "Xor": [S({"a": b([True, False, True, False]), "b": b([True, True, False, False])})],
    "IsNaN": [S({"x": np.array([1.0, np.nan, -np.inf, 0.0])})],
    "IsInf": [S({"x": np.array([1.0, np.nan, -np.inf, np.inf])}),
              S({"x": np.array([1.0, np.nan, -np.inf, np.inf])}, attrs={"detect_negative": 0}),
              S({"x": np.array([1.0, -np.inf, np.inf])}, attrs={"detect_positive": 0})],
    # ---- regions ----
    "Slice": [
        S({"x": rand(4, 5)}, constants={"s": i64([1, 0]), "e": i64([3, 5])},
          order=["x", "s", "e"], opset=13),
        S({"x": rand(3, 6, 2)}, constants={"s": i64([-1, 1]), "e": i64([-100, 100]),
                                           "a": i64([1, 0]), "st": i64([-2, 1])},
          order=["x", "s", "e", "a", "st"], opset=13),
        S({"x": rand(2, 7)}, constants={"s": i64([0]), "e": i64([64]), "a": i64([-1]),
                                        "st": i64([3])}, order=["x", "s", "e", "a", "st"],
          opset=13),
        S({"x": i64([[1, 2, 3], [4, 5, 6]])}, constants={"s": i64([1]), "e": i64([3]),
                                                         "a": i64([1])},
          order=["x", "s", "e", "a"], opset=13),
    ],
    "Split": [
        S({"x": rand(2, 6)}, constants={"sizes": i64([1, 2, 3])}, order=["x", "sizes"],
          attrs={"axis": 1}, num_outputs=3, opset=18),
        S({"x": rand(5, 2)}, attrs={"num_outputs": 2}, num_outputs=2, opset=18),
        S({"x": rand(4, 3)}, num_outputs=2, opset=13),
    ],
    "Tile": [S({"x": rand(2, 3)}, constants={"r": i64([2, 3])}, order=["x", "r"]),
             S({"x": rand(1, 2, 1)}, constants={"r": i64([3, 1, 2])}, order=["x", "r"])],
    "Pad": [
        S({"x": rand(2, 3)}, constants={"p": i64([1, 0, 2, 1]), "v": np.asarray(0.5)},
          order=["x", "p", "v"]),
        S({"x": rand(2, 4)}, constants={"p": i64([0, -1, 1, 2])}, order=["x", "p"],
          expected=_pad_cropping),
        S({"x": rand(3, 4)}, constants={"p": i64([2, 1, 1, 3])}, attrs={"mode": "reflect"},
          order=["x", "p"]),
        S({"x": rand(2, 3)}, constants={"p": i64([1, 2, 2, 0])}, attrs={"mode": "edge"},
          order=["x", "p"]),
        S({"x": rand(2, 3)}, constants={"p": i64([1, 4, 2, 0])}, attrs={"mode": "wrap"},
          order=["x", "p"], opset=19),
        S({"x": rand(2, 3, 2)}, constants={"p": i64([1, 2]), "v": np.asarray(0.0),
                                           "a": i64([-2])},
          order=["x", "p", "v", "a"], opset=18),
        S({"x": i64([[1, 2], [3, 4]])}, constants={"p": i64([0, 0, 0, 1]),
                                                   "v": np.asarray(-100, dtype=np.int64)},
          order=["x", "p", "v"], opset=18),
    ],
    "Trilu": [S({"x": rand(2, 3, 4)}),
              S({"x": rand(4, 3)}, constants={"k": np.asarray(-1, dtype=np.int64)},
                attrs={"upper": 0}, order=["x", "k"]),
              S({"x": i64([[1, 2, 3], [4, 5, 6], [7, 8, 9]])},
                constants={"k": np.asarray(1, dtype=np.int64)}, order=["x", "k"])],
    "CumSum": [
        S({"x": rand(2, 5)}, constants={"axis": np.asarray(1, dtype=np.int64)},
          order=["x", "axis"]),
        S({"x": rand(3, 2, 2)}, constants={"axis": np.asarray(0, dtype=np.int64)},
          attrs={"exclusive": 1, "reverse": 1}, order=["x", "axis"]),
        S({"x": i64([[1, 0, 1, 1]])}, constants={"axis": np.asarray(-1, dtype=np.int64)},
          attrs={"exclusive": 1}, order=["x", "axis"]),
    ],
    "Range": [
        S({"start": np.asarray(0, dtype=np.int64), "limit": np.asarray(7, dtype=np.int64),
           "delta": np.asarray(2, dtype=np.int64)}),
        S({"start": np.asarray(1.0), "limit": np.asarray(-1.0), "delta": np.asarray(-0.5)},
          grad=[]),
        S({"start": np.asarray(3, dtype=np.int64), "limit": np.asarray(3, dtype=np.int64),
           "delta": np.asarray(1, dtype=np.int64)}),
    ],
    # ---- indexing ----
    "GatherElements": [
        S({"x": rand(3, 4)}, constants={"i": i64([[0, 3, -1], [2, 2, 0], [1, 0, 3]])},
          attrs={"axis": 1}, order=["x", "i"]),
        S({"x": rand(3, 2)}, constants={"i": i64([[2, 0], [2, 1], [0, 0], [1, 1]])},
          order=["x", "i"]),
    ],
    "ScatterElements": [
        S({"x": rand(3, 4), "u": rand(3, 2)}, constants={"i": i64([[1, 3], [0, 2], [3, 0]])},
          attrs={"axis": 1}, order=["x", "i", "u"], opset=16),
        S({"x": rand(3, 2), "u": rand(4, 2)}, constants={"i": i64([[2, 0], [2, 1], [0, 0],
                                                                   [1, 1]])},
          attrs={"reduction": "add"}, order=["x", "i", "u"], opset=16),
        S({"x": i64([[0, 0, 0]]), "u": i64([[7, 9]])}, constants={"i": i64([[2, 0]])},
          attrs={"axis": 1}, order=["x", "i", "u"], opset=16),
        # max / min: the gradient goes to the data element or the updates equal to the result.
        S({"x": rand(3, 4), "u": rand(3, 3)}, constants={"i": i64([[1, 3, 1], [0, 2, 2],
                                                                   [3, 0, 0]])},
          attrs={"axis": 1, "reduction": "max"}, order=["x", "i", "u"], opset=18),
        S({"x": rand(3, 2), "u": rand(4, 2)}, constants={"i": i64([[2, 0], [2, 1], [0, 0],
                                                                   [1, 1]])},
          attrs={"reduction": "min"}, order=["x", "i", "u"], opset=18),
    ],
    "GatherND": [
        S({"x": rand(3, 4, 2)}, constants={"i": i64([[0, 1], [2, -1], [1, 0]])},
          order=["x", "i"]),
        S({"x": rand(2, 3, 4)}, constants={"i": i64([[[1], [0]], [[2], [2]]])},
          attrs={"batch_dims": 1}, order=["x", "i"]),
        S({"x": b([[True, False], [False, True]])}, constants={"i": i64([[1, 1], [0, 1]])},
          order=["x", "i"]),
    ],
    "ScatterND": [
        S({"x": rand(4, 3), "u": rand(2, 3)}, constants={"i": i64([[3], [1]])},
          order=["x", "i", "u"], opset=16),
        S({"x": rand(3, 3), "u": rand(3)}, constants={"i": i64([[0, 1], [2, 2], [0, 1]])},
          attrs={"reduction": "add"}, order=["x", "i", "u"], opset=16),
        S({"x": rand(4, 3), "u": rand(3, 3)}, constants={"i": i64([[3], [1], [3]])},
          attrs={"reduction": "max"}, order=["x", "i", "u"], opset=18),
    ],
    # Coordinates of the non-zero elements, row-major: NaN counts, -0.0 does not; none at all,
    # an empty input and scalars ([0, n]).
    "NonZero": [
        S({"x": i64([0, 3, 0, -1, 5, 0])}),
        S({"x": b([[True, False, True], [False, False, True]])}),
        S({"x": _with_zeros(2, 3, 4)}),
        S({"x": np.array([[0, 7, 0], [-2, 0, 1]], np.int32)}, opset=9),
        S({"x": np.array([0.0, -0.0, np.nan, 1.5, -2.0], np.float32)}),
        S({"x": np.zeros((2, 3), np.float32)}),
        S({"x": np.zeros((0, 3), np.int64)}),
        S({"x": np.asarray(2.5)}),
        S({"x": np.asarray(0, np.int64)}),
    ],
    "Embedding": [
        S({"weight": rand(5, 3)}, constants={"indices": i64([[4, 1], [1, 3]])},
          attrs={"padding_idx": 0}, order=["weight", "indices"], domain="ai.ortmodule",
          expected=_embedding),
    ],
    "StopGradient": [
        S({"x": rand(2, 3)}, domain="ai.ortmodule", expected=lambda f: [f["x"]]),
        S({"x": i64([[1, -2, 3]])}, domain="ai.ortmodule", expected=lambda f: [f["x"]]),
    ],
}

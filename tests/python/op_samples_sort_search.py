"""Samples for the sort- and search-based ops (ai.ortmodule SearchSorted; see op_samples.py),
against torch.searchsorted in float64 and int64: shared and per-row sequences, repeated
elements (left and right insertion points), infinities and NaN, an empty sequence."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.python.sample_utils import Sample, i64

OWN = "ai.ortmodule"
inf, nan = np.inf, np.nan


def _searchsorted(right: int) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    def reference(d: dict[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        seq, values = torch.from_numpy(d["seq"]), torch.from_numpy(d["values"])
        return [torch.searchsorted(seq, values, right=bool(right)).numpy()]
    return reference


def _search(seq: np.ndarray, values: np.ndarray, right: int) -> Sample:
    return Sample({"seq": seq, "values": values}, attrs={"right": right}, domain=OWN,
                  grad=[], expected=_searchsorted(right))


_ROW = np.array([-2.0, -1.0, 0.5, 0.5, 0.5, 3.0, inf, nan])
_VALUES = np.array([[nan, -inf, -2.0, 0.5], [0.7, 3.0, inf, 9.0]])
_ROWS = np.array([[1.0, 2.0, 3.0, 3.0], [-4.0, 0.0, 6.0, 8.0]])

SORT_SEARCH_SAMPLES: dict[str, list[Sample]] = {
    "SearchSorted": [
        _search(_ROW, _VALUES, 0),
        _search(_ROW, _VALUES, 1),
        _search(_ROWS, np.array([[2.5, 3.0, 0.0], [-9.0, 8.0, 0.0]]), 0),
        _search(_ROWS, np.array([[2.5, 3.0, 0.0], [-9.0, 8.0, 0.0]]), 1),
        _search(i64([0, 2, 2, 5, 9]), i64([-1, 2, 3, 9, 10]), 1),
        _search(np.array([1.0, 2.0]), np.array(1.5), 0),
        _search(np.zeros(0), np.array([1.0, -1.0]), 0),
    ],
}


_large = np.random.default_rng(7)

# Large shapes (op_samples_large.py): 64 rows of 512 sorted elements with repeats, 2048
# values per row, and one row shared by 100k values.
SORT_SEARCH_LARGE_SAMPLES: dict[str, list[Sample]] = {
    "SearchSorted": [
        _search(np.sort(np.round(_large.uniform(-4, 4, (64, 512)), 2), axis=1).astype(np.float32),
                np.round(_large.uniform(-5, 5, (64, 2048)), 2).astype(np.float32), 0),
        _search(np.sort(_large.uniform(-4, 4, 4096)).astype(np.float32),
                _large.uniform(-5, 5, 100_000).astype(np.float32), 1),
    ],
}

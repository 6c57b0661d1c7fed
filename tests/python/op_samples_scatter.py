"""Samples for ScatterReduceTorch, AsStridedScatterTorch and InfNormTorch (see op_samples.py):
they pass their input 0 (the result, computed by ScatterElements or ReduceMax) through, so the
forward is compared with it; their gradient rules are eager's scatter_reduce,
as_strided_scatter and p = inf cdist / pdist backward formulas, which no finite difference of
that forward shows (the output does not depend on the inputs they differentiate):
test_scatter_strided_parity.py checks them against eager PyTorch, ties, zeros and
include_self=False among its cases.
"""

from __future__ import annotations

import numpy as np

from tests.python.sample_utils import Sample, i64, rand

S = Sample
OWN = "ai.ortmodule"


def _result(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [d["result"].copy()]


def _scatter_reduce_sample(reduction: str, include_self: int) -> Sample:
    import torch

    data = np.array([[1.0, 0.0, 3.0], [2.0, 2.0, -1.0]])
    index = i64([[0, 1, 0], [1, 1, 0]])
    updates = np.array([[2.0, 0.0, 3.0], [2.0, 5.0, -4.0]])
    result = torch.from_numpy(data).scatter_reduce(
        0, torch.from_numpy(index), torch.from_numpy(updates), reduction,
        include_self=bool(include_self)).numpy()
    return S({"result": result, "data": data, "indices": index, "updates": updates},
             attrs={"axis": 0, "reduction": reduction, "include_self": include_self},
             domain=OWN, grad=[], expected=_result)


SCATTER_SAMPLES: dict[str, list[Sample]] = {
    "ScatterReduceTorch": [_scatter_reduce_sample("amax", 0), _scatter_reduce_sample("amin", 1),
                           _scatter_reduce_sample("prod", 0)],
    "AsStridedScatterTorch": [S({"result": rand(6), "data": rand(6), "positions": i64([0, 2, 4]),
                                 "updates": rand(3)}, domain=OWN, grad=[], expected=_result)],
    "InfNormTorch": [S({"result": np.array([[2.0], [0.5]]),
                        "diff": np.array([[1.0, -2.0, 2.0], [0.5, 0.0, -0.25]])},
                       domain=OWN, grad=[], expected=_result)],
}

"""The fx lowering's translations, one module per op family (``elementwise``, ``inplace``,
``shapes``, ...; helpers they share in ``common``). A translation receives the lowering, the
FX node and the op's arguments bound to its schema (FX nodes, Python numbers, lists), and
returns the value of the node: an ONNX value name, a list of them, or a Python number
(integer arithmetic on sizes that folds). In-place ops rebind the value of the tensor they
modify. Importing this package registers every family into ``registry.TABLE``.
"""

from ortmodule.capture.fx.ops import (  # noqa: F401
    activations,
    adaptive_avg,
    antialias,
    attention,
    bessel,
    bridge,
    casts,
    conv,
    data_dependent,
    decompose,
    distances,
    einsum,
    elementary,
    elementwise,
    embedding_bag,
    factories,
    gamma,
    grid_sample_3d,
    indexing,
    inplace,
    linalg_lu,
    linalg_qr,
    linalg_spectral,
    linear_loss,
    matmul,
    normalization,
    polynomial,
    pool_indices,
    precise,
    recurrent,
    reductions,
    resampling,
    scatter,
    segment_reduce,
    shapes,
    sort_search,
    spaced,
    strided,
    views,
)

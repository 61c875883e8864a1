"""MLIR element types and their numpy types.

Imports only numpy (and ml_dtypes for ``bf16``, when asked for), so that
bundles run on machines without falcon_mlir can carry a copy (see
:mod:`falcon_mlir.bundles`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["np_type"]

_NUMPY = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i8": np.int8, "i16": np.int16,
          "i32": np.int32, "i64": np.int64}


def np_type(t: str):
    """The numpy type of MLIR element type ``t`` (``f32``, ``f16``, ``bf16``
    (``ml_dtypes.bfloat16``), ``f64``, ``i8``, ``i16``, ``i32``, ``i64``).

    Raises:
        KeyError: another type.
        ImportError: ``bf16`` without ml_dtypes installed.
    """
    if t == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return _NUMPY[t]

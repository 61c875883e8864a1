"""Comparing a computed result with a reference: the max-norm relative error.

The one definition every benchmark, test, fuzzer and calibration uses::

    rel_err(x, ref) = max|x - ref| / max|ref|

This module imports only numpy, so that bundles run on machines without
falcon_mlir (``falcon-calibrate --prepare``, ``scripts/gpu_check.py``) can
carry a copy of this file (see :mod:`falcon_mlir.bundles`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["rel_err"]

#: Elements per block: arrays are compared in row blocks of about this many
#: elements, so a large result needs no full float64 copy (4 Mi elements:
#: 32 MiB per float64 block).
BLOCK_ELEMENTS = 1 << 22


def rel_err(x, ref, *, block_elements: int = BLOCK_ELEMENTS) -> float:
    """Max-norm relative error ``max|x - ref| / max|ref|`` (dimensionless).

    ``x`` and ``ref`` are array-likes of the same shape and any numeric
    dtype (bf16 via ml_dtypes included). The difference is computed in
    float64, or in the reference's own floating type when that is wider
    (``np.longdouble``, as the f64 accuracy sweep's reference is), block by
    block over the leading axis (about ``block_elements`` elements each).

    * A reference that is all zeros (or empty) has denominator 1: the result
      is the absolute error ``max|x - ref|``.
    * Any non-finite element of ``x`` (NaN, +-inf) gives ``inf``.

    Returns:
        The error as a Python float (0.0 when ``x`` equals ``ref``).

    Raises:
        ValueError: the shapes differ.
    """
    x, ref = np.asarray(x), np.asarray(ref)
    if x.shape != ref.shape:
        raise ValueError(f"rel_err: shape {x.shape} vs reference {ref.shape}")
    wide = ref.dtype if (ref.dtype.kind == "f" and ref.dtype.itemsize > 8) else np.float64
    rows_x = x.reshape(len(x), -1) if x.ndim > 1 else x.reshape(1, -1)
    rows_r = ref.reshape(rows_x.shape)
    step = max(1, block_elements // max(1, rows_x.shape[1]))
    num = den = 0.0
    for i in range(0, len(rows_x), step):
        xb = rows_x[i:i + step].astype(wide)
        if not np.all(np.isfinite(xb)):
            return float("inf")
        rb = rows_r[i:i + step].astype(wide)
        num = max(num, np.abs(xb - rb).max(initial=0.0))
        den = max(den, np.abs(rb).max(initial=0.0))
    return float(num / (den if den else 1.0))

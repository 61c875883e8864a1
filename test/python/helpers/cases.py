"""Builders of contraction test modules and numerics helpers shared by the tests."""

from __future__ import annotations

import numpy as np

from falcon_mlir.compare import rel_err  # noqa: F401 - the tests' max-norm relative error
from falcon_mlir.ir.matmul_text import matmul_mlir
from repo_paths import ROOT

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

NP_TYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16,
            "i8": np.int8, "i32": np.int32, "i64": np.int64}
if ml_dtypes is not None:
    NP_TYPES["bf16"] = ml_dtypes.bfloat16

#: A test profile on which every compute-bound plan is predicted to win, so
#: ``auto`` choices are decided by the error budget and the shape alone
#: (shared with the lit tests).
FLAT_PROFILE = str(ROOT / "test" / "lit" / "lcma-rewrite" / "Inputs" / "flat_profile.json")

#: Machine epsilon of the accumulation type; bounds below scale with it.
EPS = {"f32": 2.0 ** -23, "f64": 2.0 ** -52, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}


def contraction_mlir(M, N, K, *, lhs="f32", rhs=None, acc=None, batch=0, transpose_a=False,
                     transpose_b=False, form="matmul") -> tuple:
    """MLIR text of ``@f(A, B, C) -> C + A*B`` and the operand shapes.

    ``form`` is ``"matmul"`` (``linalg.matmul`` / ``linalg.batch_matmul`` with
    explicit indexing maps) or ``"generic"`` (``linalg.generic`` contraction);
    the text comes from :func:`falcon_mlir.ir.matmul_text.matmul_mlir`.
    Returns ``(text, [shape_a, shape_b, shape_c])``.
    """
    text = matmul_mlir(M, N, K, lhs, acc, rhs=rhs, func="f", init="arg", batch=batch,
                       transpose_a=transpose_a, transpose_b=transpose_b, form=form, maps=True)
    bs = [batch] if batch else []
    shapes = [bs + ([K, M] if transpose_a else [M, K]), bs + ([N, K] if transpose_b else [K, N]),
              bs + [M, N]]
    return text, shapes


def matmul_of_types(lt, at, M=8, N=8, K=8):
    """``@f(A, B, C)``: a plain ``linalg.matmul`` (default maps, no attributes)
    of ``lt`` operands into an ``at`` accumulator, as written by hand."""
    ta, tb, tc = f"tensor<{M}x{K}x{lt}>", f"tensor<{K}x{N}x{lt}>", f"tensor<{M}x{N}x{at}>"
    return (f"func.func @f(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{\n"
            f"  %0 = linalg.matmul ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) -> {tc}\n"
            f"  return %0 : {tc}\n}}\n")


def random_inputs(shapes, types, seed=0):
    """Random operands (never zeros/ones): normals for floats, small ints for integers."""
    rng = np.random.default_rng(seed)
    out = []
    for s, t in zip(shapes, types):
        if t.startswith("i"):
            out.append(rng.integers(-8, 9, size=s).astype(NP_TYPES[t]))
        else:
            out.append(rng.standard_normal(s).astype(NP_TYPES[t]))
    return out


def reference(a, b, c, *, batch=0, transpose_a=False, transpose_b=False):
    """``C + A @ B`` in float64 (or exact int64) from the operands as stored."""
    is_int = np.issubdtype(np.asarray(c).dtype, np.integer)
    cast = (lambda x: np.asarray(x).astype(np.int64)) if is_int else (lambda x: np.asarray(x).astype(np.float64))
    A, B, C = cast(a), cast(b), cast(c)
    if transpose_a:
        A = np.swapaxes(A, -1, -2)
    if transpose_b:
        B = np.swapaxes(B, -1, -2)
    return C + A @ B


def rewrite(text: str, options: str):
    """Run lcma-rewrite with ``options`` on MLIR text; returns ``(new_text, report)``."""
    from iree.compiler import ir

    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, run_lcma_rewrite

    with ir.Context():
        module = ir.Module.parse(text)
        report = run_lcma_rewrite(module.operation, LcmaOptions.parse(options))
        assert module.operation.verify()
        return str(module), report

"""Builders of contraction test modules and numerics helpers shared by the tests."""

from __future__ import annotations

import numpy as np

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

NP_TYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16,
            "i8": np.int8, "i32": np.int32, "i64": np.int64}
if ml_dtypes is not None:
    NP_TYPES["bf16"] = ml_dtypes.bfloat16

#: Machine epsilon of the accumulation type; bounds below scale with it.
#: A test profile on which every compute-bound plan is predicted to win, so
#: ``auto`` choices are decided by the error budget and the shape alone.
FLAT_PROFILE = str(__import__("pathlib").Path(__file__).resolve().parents[1]
                   / "lit" / "Inputs" / "flat_profile.json")

EPS = {"f32": 2.0 ** -23, "f64": 2.0 ** -52, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}


def contraction_mlir(M, N, K, *, lhs="f32", rhs=None, acc=None, batch=0, transpose_a=False,
                     transpose_b=False, form="matmul") -> tuple:
    """MLIR text of ``@f(A, B, C) -> C + A*B`` and the operand shapes.

    ``form`` is ``"matmul"`` (``linalg.matmul`` / ``linalg.batch_matmul`` with
    explicit indexing maps) or ``"generic"`` (``linalg.generic`` contraction).
    Returns ``(text, [shape_a, shape_b, shape_c])``.
    """
    rhs = rhs or lhs
    acc = acc or lhs
    b = ["b"] if batch else []
    bs = [batch] if batch else []
    a_idx = b + (["k", "m"] if transpose_a else ["m", "k"])
    b_idx = b + (["n", "k"] if transpose_b else ["k", "n"])
    c_idx = b + ["m", "n"]
    size = {"b": batch, "m": M, "n": N, "k": K}
    shape = lambda idx: [size[i] for i in idx]
    sa, sb, sc = shape(a_idx), shape(b_idx), shape(c_idx)
    ty = lambda s, e: "tensor<" + "x".join(map(str, s)) + f"x{e}>"
    ta, tb, tc = ty(sa, lhs), ty(sb, rhs), ty(sc, acc)
    dims = b + ["m", "n", "k"]
    amap = lambda idx: f"affine_map<({', '.join(dims)}) -> ({', '.join(idx)})>"
    maps = f"[{amap(a_idx)}, {amap(b_idx)}, {amap(c_idx)}]"
    if form == "matmul":
        op = "linalg.batch_matmul" if batch else "linalg.matmul"
        body = (f"  %0 = {op} indexing_maps = {maps} ins(%a, %b : {ta}, {tb}) "
                f"outs(%c : {tc}) -> {tc}\n")
    else:
        iters = ", ".join(['"parallel"'] * (len(dims) - 1) + ['"reduction"'])
        is_float = acc.startswith(("f", "bf"))

        def cast(v, src):
            if src == acc:
                return v, ""
            if is_float:
                return f"%{v}x", f"    %{v}x = arith.extf %{v} : {src} to {acc}\n"
            return f"%{v}x", f"    %{v}x = arith.extsi %{v} : {src} to {acc}\n"

        xa, ca = cast("x", lhs)
        ya, cb = cast("y", rhs)
        xa = xa if ca else "%x"
        ya = ya if cb else "%y"
        mul, add = ("arith.mulf", "arith.addf") if is_float else ("arith.muli", "arith.addi")
        body = (f"  %0 = linalg.generic {{indexing_maps = {maps}, iterator_types = [{iters}]}} "
                f"ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) {{\n"
                f"  ^bb0(%x: {lhs}, %y: {rhs}, %o: {acc}):\n{ca}{cb}"
                f"    %p = {mul} {xa}, {ya} : {acc}\n    %s = {add} %o, %p : {acc}\n"
                f"    linalg.yield %s : {acc}\n  }} -> {tc}\n")
    text = (f"func.func @f(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{\n{body}"
            f"  return %0 : {tc}\n}}\n")
    return text, [sa, sb, sc]


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


def rel_err(x, ref) -> float:
    """Max-norm relative error ``max|x - ref| / max|ref|``."""
    x = np.asarray(x).astype(np.float64)
    ref = np.asarray(ref).astype(np.float64)
    return float(np.abs(x - ref).max() / np.abs(ref).max())


def rewrite(text: str, options: str):
    """Run lcma-rewrite with ``options`` on MLIR text; returns ``(new_text, report)``."""
    from iree.compiler import ir

    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, run_lcma_rewrite

    with ir.Context():
        module = ir.Module.parse(text)
        report = run_lcma_rewrite(module.operation, LcmaOptions.parse(options))
        assert module.operation.verify()
        return str(module), report

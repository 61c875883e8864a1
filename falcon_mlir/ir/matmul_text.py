"""MLIR text of one matrix multiplication: the generator every benchmark,
calibration, sweep and test builds its ``C = A @ B`` module with.

    matmul_mlir(64, 48, 80)                       # @mm(A, B) -> A @ B, zero-filled C
    matmul_mlir(64, 48, 80, "bf16", "f32", func="f", init="arg")   # @f(A, B, C) -> C + A @ B
    matmul_mlir(8, 8, 8, b_const="dense<1.0>")    # @mm(A) with B a module constant
    matmul_mlir(9, 10, 11, batch=2, transpose_b=True, form="generic")

Shapes: A is M x K (K x M with ``transpose_a``), B is K x N (N x K with
``transpose_b``), C is M x N; with ``batch`` > 0 each has a leading batch
dimension of that size (``linalg.batch_matmul``).
"""

from __future__ import annotations

from typing import Optional

__all__ = ["matmul_mlir", "tensor_type"]


def tensor_type(shape, elt: str) -> str:
    """``tensor<4x8xf32>`` for ``shape = [4, 8]`` and ``elt = "f32"``."""
    return "tensor<" + "x".join(str(d) for d in shape) + f"x{elt}>"


def _is_float(elt: str) -> bool:
    return elt.startswith(("f", "bf"))


def _generic(maps: str, dims: list, ta: str, tb: str, tc: str, lhs: str, rhs: str, acc: str) -> str:
    """A ``linalg.generic`` contraction: casts of the inputs to ``acc``, multiply, add."""
    iters = ", ".join(['"parallel"'] * (len(dims) - 1) + ['"reduction"'])
    ext = "arith.extf" if _is_float(acc) else "arith.extsi"
    casts, operands = "", []
    for v, src in (("x", lhs), ("y", rhs)):
        if src == acc:
            operands.append(f"%{v}")
        else:
            casts += f"    %{v}x = {ext} %{v} : {src} to {acc}\n"
            operands.append(f"%{v}x")
    mul, add = ("arith.mulf", "arith.addf") if _is_float(acc) else ("arith.muli", "arith.addi")
    return (f"  %0 = linalg.generic {{indexing_maps = {maps}, iterator_types = [{iters}]}} "
            f"ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) {{\n"
            f"  ^bb0(%x: {lhs}, %y: {rhs}, %o: {acc}):\n{casts}"
            f"    %p = {mul} {operands[0]}, {operands[1]} : {acc}\n    %s = {add} %o, %p : {acc}\n"
            f"    linalg.yield %s : {acc}\n  }} -> {tc}\n")


def matmul_mlir(M: int, N: int, K: int, dtype: str = "f32", acc: Optional[str] = None, *,
                rhs: Optional[str] = None, func: str = "mm", init: str = "zero",
                b_const: Optional[str] = None, batch: int = 0, transpose_a: bool = False,
                transpose_b: bool = False, form: str = "matmul", maps: Optional[bool] = None) -> str:
    """MLIR text of ``@func`` computing ``C = A @ B`` (see the module docstring for shapes).

    Args:
        M, N, K: sizes (positive ints).
        dtype: element type of A (``"f32"``, ``"f16"``, ``"bf16"``, ``"f64"``, ``"i8"``, ...).
        acc: element type of C (default ``dtype``).
        rhs: element type of B (default ``dtype``).
        func: function name.
        init: ``"zero"``: C starts zero-filled (``linalg.fill``) and ``@func``
            takes A, B; ``"arg"``: C is the last argument and the result is
            ``C + A @ B``.
        b_const: an attribute (``dense<...>``, ``dense_resource<name>``): B is
            ``arith.constant b_const`` and ``@func`` does not take B.
        batch: 0, or the batch size (``linalg.batch_matmul``).
        transpose_a, transpose_b: the operand is stored transposed (explicit
            ``indexing_maps``).
        form: ``"matmul"`` (the named op) or ``"generic"`` (``linalg.generic``).
        maps: write the named op's ``indexing_maps`` even when they are the
            defaults (None: only for transposed operands).

    Returns:
        The module text (a ``func.func``, newline-terminated).

    Raises:
        ValueError: ``init`` or ``form`` unknown.
    """
    if init not in ("zero", "arg") or form not in ("matmul", "generic"):
        raise ValueError(f"matmul_mlir: init={init!r}, form={form!r}")
    acc, rhs = acc or dtype, rhs or dtype
    bdim = ["b"] if batch else []
    a_idx = bdim + (["k", "m"] if transpose_a else ["m", "k"])
    b_idx = bdim + (["n", "k"] if transpose_b else ["k", "n"])
    c_idx = bdim + ["m", "n"]
    size = {"b": batch, "m": M, "n": N, "k": K}
    ta, tb, tc = (tensor_type([size[i] for i in idx], elt)
                  for idx, elt in ((a_idx, dtype), (b_idx, rhs), (c_idx, acc)))
    dims = bdim + ["m", "n", "k"]
    amap = lambda idx: f"affine_map<({', '.join(dims)}) -> ({', '.join(idx)})>"  # noqa: E731
    all_maps = f"[{amap(a_idx)}, {amap(b_idx)}, {amap(c_idx)}]"
    args = [f"%a: {ta}"] + ([] if b_const is not None else [f"%b: {tb}"])
    args += [f"%c: {tc}"] if init == "arg" else []
    lines = f"func.func @{func}({', '.join(args)}) -> {tc} {{\n"
    if b_const is not None:
        lines += f"  %b = arith.constant {b_const} : {tb}\n"
    if init == "zero":
        zero = "0.0" if _is_float(acc) else "0"
        lines += (f"  %z = arith.constant {zero} : {acc}\n  %e = tensor.empty() : {tc}\n"
                  f"  %c = linalg.fill ins(%z : {acc}) outs(%e : {tc}) -> {tc}\n")
    if form == "generic":
        lines += _generic(all_maps, dims, ta, tb, tc, dtype, rhs, acc)
    else:
        op = "linalg.batch_matmul" if batch else "linalg.matmul"
        explicit = maps if maps is not None else (transpose_a or transpose_b)
        lines += (f"  %0 = {op}" + (f" indexing_maps = {all_maps}" if explicit else "")
                  + f" ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) -> {tc}\n")
    return lines + f"  return %0 : {tc}\n}}\n"

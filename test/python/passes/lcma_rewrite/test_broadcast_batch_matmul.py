"""A batch_matmul whose B has no batch dimension (the 3-D x 2-D projection form).

Its batch dimension is an M dimension (A and C carry it, B does not): the op
is a plain matmul over (batch x M). The rewrite folds batch and M into one
(collapse_shape, one linalg.matmul, expand_shape) and rewrites that matmul;
the report gives the op's sizes (M = batch x M, ``dims`` lists the factors),
never zeros. Compiled with IREE's best CPU flags (data tiling on) and run on
random inputs against float64 (exact int64 for integers).
"""

from __future__ import annotations

import numpy as np
import pytest

from cases import EPS, random_inputs, rel_err, rewrite
from falcon_mlir import compile_str
from falcon_mlir.catalog import get_scheme
from falcon_mlir.runner import BEST_CPU_FLAGS, Module


def projection(batch, M, N, K, *, lhs="f32", acc="f32", transpose_b=False, form="named"):
    """``@f(A, B, C) -> C + A @ B`` with A: batch x M x K, B: K x N (N x K
    with ``transpose_b``), C: batch x M x N; ``batch`` may be ``"?"``."""
    ta = f"tensor<{batch}x{M}x{K}x{lhs}>"
    tb = f"tensor<{N}x{K}x{lhs}>" if transpose_b else f"tensor<{K}x{N}x{lhs}>"
    tc = f"tensor<{batch}x{M}x{N}x{acc}>"
    bmap = "(n, k)" if transpose_b else "(k, n)"
    maps = (f"[affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> {bmap}>, "
            "affine_map<(b, m, n, k) -> (b, m, n)>]")
    if form == "named":
        op = f"linalg.batch_matmul indexing_maps = {maps} ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) -> {tc}"
    else:  # linalg.generic, operands extended to the accumulator type
        fl = acc.startswith(("f", "bf"))
        ext = ("arith.extf" if fl else "arith.extsi") if lhs != acc else None
        x, y = ("%x", "%y") if ext else ("%i", "%j")
        casts = (f"    %x = {ext} %i : {lhs} to {acc}\n    %y = {ext} %j : {lhs} to {acc}\n"
                 if ext else "")
        mul, add = ("arith.mulf", "arith.addf") if fl else ("arith.muli", "arith.addi")
        op = (f'linalg.generic {{indexing_maps = {maps}, iterator_types = ["parallel", "parallel", '
              f'"parallel", "reduction"]}} ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) {{\n'
              f"  ^bb0(%i: {lhs}, %j: {lhs}, %o: {acc}):\n{casts}"
              f"    %p = {mul} {x}, {y} : {acc}\n    %s = {add} %o, %p : {acc}\n"
              f"    linalg.yield %s : {acc}\n  }} -> {tc}")
    return (f"func.func @f(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{\n  %r = {op}\n"
            f"  return %r : {tc}\n}}\n")


def _reference(a, b, c, transpose_b=False):
    is_int = np.issubdtype(np.asarray(c).dtype, np.integer)
    cast = (lambda x: np.asarray(x).astype(np.int64)) if is_int else \
        (lambda x: np.asarray(x).astype(np.float64))
    B = cast(b).T if transpose_b else cast(b)
    return cast(c) + cast(a) @ B


def _tolerance(K, schemes, acc="f32"):
    e = 1.0
    for name in schemes:
        e *= float(get_scheme(name).stability_e)
    return min(8 * EPS[acc] * K * e, 1e-2)


def _compile(text, lcma):
    return compile_str(text, target_backends=["llvm-cpu"], extra_args=list(BEST_CPU_FLAGS),
                       lcma=lcma, return_report=True)


@pytest.mark.parametrize("shape,kw,options,schemes,products", [
    # 3 x 37 = 111 rows, K = 67: blocks of 55 rows that straddle batch
    # elements (the folded view is one matmul), a peeled row strip and a K strip
    ((3, 37, 50, 67), {}, "scheme=strassen", ["strassen"], 7 + 2),
    ((3, 37, 50, 67), {}, "scheme=strassen form=grouped", ["strassen"], 1 + 2),
    # two levels: stacked, one batched product for the 49
    ((4, 32, 48, 64), {}, "scheme=strassen levels=2 edge=pad", ["strassen", "strassen"], 1),
    ((3, 37, 50, 66), {"lhs": "bf16", "transpose_b": True, "form": "generic"}, "scheme=strassen",
     ["strassen"], 7 + 1),
])
def test_projection_is_served_and_matches_float64(shape, kw, options, schemes, products):
    batch, M, N, K = shape
    text = projection(batch, M, N, K, **kw)
    vmfb, report = _compile(text, options)
    e = report[0]
    kind = "generic" if kw.get("form") == "generic" else "batch_matmul"
    assert e["op"] == f"linalg.{kind}" and e["kind"].startswith(f"{kind} as matmul"), e["kind"]
    assert (e["M"], e["N"], e["K"], e["batch"], e["dims"]) == (batch * M, N, K, [], {"M": [batch, M]})
    assert e["plan"]["schemes"] == schemes and e["products"] == products, e
    lhs = kw.get("lhs", "f32")
    tb = kw.get("transpose_b", False)
    a, b, c = random_inputs([[batch, M, K], [N, K] if tb else [K, N], [batch, M, N]],
                            [lhs, lhs, "f32"], seed=M + N)
    got = Module(vmfb)("f", a, b, c)
    ref = _reference(a, b, c, tb)
    assert got.shape == (batch, M, N)
    assert rel_err(got, ref) <= _tolerance(K, schemes), rel_err(got, ref)
    classical, _ = _compile(text, None)
    assert not np.array_equal(got, Module(classical)("f", a, b, c))  # the plan ran, not classical


def test_integer_projection_is_exact():
    text = projection(2, 33, 20, 30, lhs="i8", acc="i32", form="generic")
    vmfb, report = _compile(text, "scheme=strassen")
    assert report[0]["plan"]["schemes"] == ["strassen"] and report[0]["M"] == 66
    a, b, c = random_inputs([[2, 33, 30], [30, 20], [2, 33, 20]], ["i8", "i8", "i32"], seed=3)
    got = Module(vmfb)("f", a, b, c)
    np.testing.assert_array_equal(got.astype(np.int64), _reference(a, b, c))


def test_dynamic_batch_folds_into_a_dynamic_m():
    """``tensor<?x40x..>``: the folded M (? x 40) is dynamic, the run-time
    dispatch serves it (chunks of 32 rows through the plan, the rest classical)."""
    text = projection("?", 40, 50, 66)
    vmfb, report = _compile(text, "scheme=strassen chunk=32")
    e = report[0]
    assert e["M"] is None and e["dims"] == {"M": [None, 40]}
    assert e["dispatch"] == {"threshold_M": 32, "chunk_M": 32}
    m = Module(vmfb)
    for batch in (1, 2, 5):
        a, b, c = random_inputs([[batch, 40, 66], [66, 50], [batch, 40, 50]], ["f32"] * 3, seed=batch)
        got = m("f", a, b, c)
        assert got.shape == (batch, 40, 50)
        assert rel_err(got, _reference(a, b, c)) <= _tolerance(66, ["strassen"])


def test_classical_projection_is_left_as_it_was():
    """Kept classical (auto on the host profile), the op is not touched: no folded view."""
    text = projection(4, 64, 48, 96)
    new, report = rewrite(text, "")
    assert report[0]["plan"] == "classical" and report[0]["M"] == 256
    assert "collapse_shape" not in new and "expand_shape" not in new
    assert new.count("linalg.batch_matmul") == 1


def test_unfoldable_roles_report_their_real_sizes():
    """A broadcast A (B and C carry the batch): batch and N are both N
    dimensions, not side by side in B and C, so they do not fold; the op
    stays classical with its sizes (N = 4 x 48) and a remark, not zeros."""
    text = """func.func @f(%a: tensor<64x96xf32>, %b: tensor<4x96x48xf32>, %c: tensor<4x64x48xf32>) -> tensor<4x64x48xf32> {
  %r = linalg.batch_matmul indexing_maps = [affine_map<(b, m, n, k) -> (m, k)>, affine_map<(b, m, n, k) -> (b, k, n)>, affine_map<(b, m, n, k) -> (b, m, n)>] ins(%a, %b : tensor<64x96xf32>, tensor<4x96x48xf32>) outs(%c : tensor<4x64x48xf32>) -> tensor<4x64x48xf32>
  return %r : tensor<4x64x48xf32>
}
"""
    new, report = rewrite(text, "scheme=strassen")
    e = report[0]
    assert (e["M"], e["N"], e["K"], e["dims"]) == (64, 192, 96, {"N": [4, 48]})
    assert e["plan"] == "classical" and e["remark"]
    assert "N = 4 x 48" in e["reason"] and "do not fold" in e["reason"]
    assert new.count("linalg.batch_matmul") == 1

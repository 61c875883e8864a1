"""The grouped (group-parallel) form of lcma-rewrite over unusual loop orders,
operand layouts, element types and schemes, through the pass, the Python API
(StableHLO, bytecode input, data tiling without barriers) and --compile-to;
and its limits (rational schemes on integers, odd integer widths, too many
constants per combine).

Rewritten modules are compiled with IREE (llvm-cpu) and compared with a float64
(or exact integer) reference. ``test_fixed_*`` tests are regression tests for
the bugs found in this form (each with its minimal input).
"""

from __future__ import annotations

import numpy as np
import pytest

import cases
from cases import contraction_mlir, random_inputs, reference, rel_err, rewrite
from cases import matmul_of_types as _mm
from falcon_mlir.runner import CPU_FLAGS, Module, run_mlir


cases.NP_TYPES.setdefault("i16", np.int16)


F64_FLAGS = CPU_FLAGS + ("--iree-input-demote-f64-to-f32=false",)
HOST = ["--iree-llvmcpu-target-cpu=host"]
FLOATS = ("f16", "bf16", "f32", "f64")
TOL = {"f16": 2e-3, "bf16": 2e-2, "f32": 2e-5, "f64": 1e-12}


# --------------------------------------------------------------------------
# helpers: linalg.generic contractions with any loop order and operand layout
# --------------------------------------------------------------------------


def generic_mlir(sizes, loops, a_idx, b_idx, c_idx, lhs="f32", rhs=None, acc=None, attrs=""):
    """``@f(A, B, C) -> C + A*B`` as a linalg.generic whose loop order is ``loops``
    (e.g. ``"knm"``: K outermost) and whose operands are indexed by the loop
    names in ``a_idx``, ``b_idx``, ``c_idx`` (``"kbm"``: A stored K x batch x M)."""
    rhs = rhs or lhs
    acc = acc or lhs
    ty = lambda idx, e: "tensor<" + "x".join(str(sizes[i]) for i in idx) + f"x{e}>"
    ta, tb, tc = ty(a_idx, lhs), ty(b_idx, rhs), ty(c_idx, acc)
    amap = lambda idx: f"affine_map<({', '.join(loops)}) -> ({', '.join(idx)})>"
    iters = ", ".join('"reduction"' if d == "k" else '"parallel"' for d in loops)
    fl = acc in FLOATS

    def cast(v, src):
        if src == acc:
            return f"%{v}", ""
        op = "arith.extf" if fl else "arith.extsi"
        return f"%{v}x", f"    %{v}x = {op} %{v} : {src} to {acc}\n"

    xa, ca = cast("x", lhs)
    ya, cb = cast("y", rhs)
    mul, add = ("arith.mulf", "arith.addf") if fl else ("arith.muli", "arith.addi")
    return (f"func.func @f(%a: {ta}, %b: {tb}, %c: {tc}) -> {tc} {{\n"
            f"  %0 = linalg.generic {{indexing_maps = [{amap(a_idx)}, {amap(b_idx)}, "
            f"{amap(c_idx)}], iterator_types = [{iters}]{attrs}}} "
            f"ins(%a, %b : {ta}, {tb}) outs(%c : {tc}) {{\n"
            f"  ^bb0(%x: {lhs}, %y: {rhs}, %o: {acc}):\n{ca}{cb}"
            f"    %p = {mul} {xa}, {ya} : {acc}\n    %s = {add} %o, %p : {acc}\n"
            f"    linalg.yield %s : {acc}\n  }} -> {tc}\n  return %0 : {tc}\n}}\n")


def check_generic(sizes, loops, a_idx, b_idx, c_idx, options, lhs="f32", rhs=None, acc=None,
                  seed=0, schemes=None):
    rhs = rhs or lhs
    acc = acc or lhs
    text = generic_mlir(sizes, loops, a_idx, b_idx, c_idx, lhs, rhs, acc)
    new, report = rewrite(text, options)
    assert len(report) == 1
    assert report[0]["plan"] != "classical", report[0]["reason"]
    if schemes is not None:
        assert report[0]["plan"]["schemes"] == schemes
    shp = lambda idx: [sizes[i] for i in idx]
    a, b, c = random_inputs([shp(a_idx), shp(b_idx), shp(c_idx)], [lhs, rhs, acc], seed=seed)
    got = run_mlir(new, "f", a, b, c, flags=F64_FLAGS if "f64" in (lhs, acc) else CPU_FLAGS)
    assert got.dtype == c.dtype
    exact = acc not in FLOATS
    cv = (lambda x: np.asarray(x).astype(np.int64)) if exact else \
        (lambda x: np.asarray(x).astype(np.float64))
    ref = cv(c) + np.einsum(f"{a_idx},{b_idx}->{c_idx}", cv(a), cv(b))
    if exact:
        np.testing.assert_array_equal(got.astype(np.int64), ref)
    else:
        assert rel_err(got, ref) <= TOL[acc], rel_err(got, ref)
    return report[0]


# --------------------------------------------------------------------------
# numerics on odd layouts, types and schemes
# --------------------------------------------------------------------------


GROUPED = [
    # K outermost, odd sizes in every dimension (peel in M, N and K)
    dict(sizes=dict(m=9, n=7, k=11), loops="knm", a="mk", b="kn", c="mn",
         options="scheme=strassen form=grouped"),
    # N before M, both operands and C transposed, two levels
    dict(sizes=dict(m=9, n=7, k=11), loops="nkm", a="km", b="nk", c="nm",
         options="scheme=strassen levels=2 form=grouped"),
    # batch dimension last in the loops and in every operand
    dict(sizes=dict(m=9, n=7, k=11, b=3), loops="mnkb", a="mkb", b="knb", c="mnb",
         options="scheme=strassen form=grouped"),
    # batch in the middle, permuted scheme name, everything transposed
    dict(sizes=dict(m=9, n=7, k=11, b=3), loops="kbnm", a="kmb", b="bnk", c="nbm",
         options="scheme=3x2x4:20 form=grouped"),
    # unit batch dimension, 2x2x2 (1-element blocks)
    dict(sizes=dict(m=2, n=2, k=2, b=1), loops="bmnk", a="bmk", b="bkn", c="bmn",
         options="scheme=strassen form=grouped"),
    # mixed precision f16 x f16 -> f32
    dict(sizes=dict(m=12, n=8, k=16), loops="mnk", a="mk", b="kn", c="mn",
         options="scheme=strassen form=grouped", types=("f16", "f16", "f32")),
    # bf16 -> f32, two Winograd levels, padding, batch in the middle
    dict(sizes=dict(m=13, n=9, k=10, b=1), loops="nbkm", a="bkm", b="nkb", c="bnm",
         options="scheme=winograd levels=2 form=grouped edge=pad", types=("bf16", "bf16", "f32")),
    # i16 x i16 -> i64, two Winograd levels
    dict(sizes=dict(m=12, n=8, k=16), loops="mnk", a="mk", b="kn", c="mn",
         options="scheme=winograd levels=2 form=grouped", types=("i16", "i16", "i64")),
    # i8 x i16 -> i32 (different operand widths)
    dict(sizes=dict(m=12, n=8, k=16), loops="mnk", a="mk", b="kn", c="mn",
         options="scheme=winograd form=grouped", types=("i8", "i16", "i32")),
    # i8 -> i32, permuted scheme, K outermost, transposed B and C
    dict(sizes=dict(m=20, n=15, k=24), loops="kmn", a="km", b="nk", c="nm",
         options="scheme=4x3x2:20 form=grouped", types=("i8", "i8", "i32")),
    # f64 with a rational scheme
    dict(sizes=dict(m=16, n=18, k=12), loops="mnk", a="mk", b="kn", c="mn",
         options="scheme=3x3x6:40 form=grouped", types=("f64", "f64", "f64")),
    # rational scheme, f16 -> f32, padding
    dict(sizes=dict(m=18, n=24, k=36), loops="mnk", a="mk", b="kn", c="mn",
         options="scheme=3x3x6:40 form=grouped edge=pad", types=("f16", "f16", "f32")),
    # two levels with different (permuted) schemes, padding
    dict(sizes=dict(m=17, n=13, k=19), loops="mnk", a="mk", b="kn", c="mn",
         options="scheme=4x3x2:20,strassen form=grouped edge=pad"),
]


@pytest.mark.parametrize("case", GROUPED, ids=lambda c: f"{c['loops']}-{c['options'].split()[0][7:]}"
                         + ("-" + "x".join(c["types"]) if "types" in c else ""))
def test_grouped_numerics(case):
    lhs, rhs, acc = case.get("types", ("f32",) * 3)
    check_generic(case["sizes"], case["loops"], case["a"], case["b"], case["c"], case["options"],
                  lhs, rhs, acc)


def test_grouped_rational_integer_stays_classical():
    text, _ = contraction_mlir(16, 16, 16, lhs="i8", acc="i32")
    new, report = rewrite(text, "scheme=4x4x4:48 form=grouped")
    assert report[0]["plan"] == "classical"
    assert "non-integer" in report[0]["reason"]
    assert report[0]["remark"] is True


def test_grouped_stablehlo_dot_general_batch_in_the_middle():
    """StableHLO dot_general with batch and contracting dims in odd places,
    grouped 4x4x4:48 with padding, through the Python API."""
    import falcon_mlir

    B, M, N, K = 3, 18, 10, 14
    src = (f"func.func @f(%a: tensor<{K}x{B}x{M}xf32>, %b: tensor<{N}x{K}x{B}xf32>) -> "
           f"tensor<{B}x{M}x{N}xf32> {{\n"
           f"  %0 = stablehlo.dot_general %a, %b, batching_dims = [1] x [2], contracting_dims = "
           f"[0] x [1] : (tensor<{K}x{B}x{M}xf32>, tensor<{N}x{K}x{B}xf32>) -> "
           f"tensor<{B}x{M}x{N}xf32>\n  return %0 : tensor<{B}x{M}x{N}xf32>\n}}\n")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((K, B, M)).astype(np.float32)
    b = rng.standard_normal((N, K, B)).astype(np.float32)
    out, report = falcon_mlir.compile_str(src, extra_args=HOST, input_type="stablehlo",
                                          lcma="scheme=4x4x4:48 form=grouped edge=pad",
                                          return_report=True)
    assert report[0]["plan"]["schemes"] == ["4x4x4:48"]
    ref = np.einsum("kbm,nkb->bmn", a.astype(np.float64), b.astype(np.float64))
    assert rel_err(Module(out)("f", a, b), ref) < 2e-5


def test_grouped_bytecode_input_with_data_tiling_and_no_barriers(tmp_path):
    """Bytecode input (compile_file), transposed batch_matmul, grouped, data tiling
    with barriers=false: compiles and is right."""
    import io

    import falcon_mlir
    from iree.compiler import ir

    text, shapes = contraction_mlir(20, 12, 16, batch=2, transpose_a=True)
    with ir.Context():
        buf = io.BytesIO()
        ir.Module.parse(text).operation.write_bytecode(buf)
    path = tmp_path / "m.mlirbc"
    path.write_bytes(buf.getvalue())
    a, b, c = random_inputs(shapes, ["f32"] * 3, seed=2)
    out, report = falcon_mlir.compile_file(
        path, extra_args=HOST + ["--iree-opt-data-tiling=true"],
        lcma="scheme=3x2x4:20 form=grouped barriers=false", return_report=True)
    assert report[0]["plan"]["form"] == "grouped"
    got = Module(out)("f", a, b, c)
    assert rel_err(got, reference(a, b, c, transpose_a=True)) < 2e-5


def test_compile_to_input_shows_grouped_rewrite():
    import falcon_mlir

    text, _ = contraction_mlir(33, 27, 41, transpose_b=True)
    out = falcon_mlir.compile_str(text, extra_args=HOST + ["--compile-to=input"],
                                  lcma="scheme=strassen form=grouped")
    assert b"linalg.batch_matmul" in out and b"iree_tensor_ext.compute_barrier.start" in out
    assert b"falcon.plan" not in out


# --------------------------------------------------------------------------
# Bugs (regressions): each with its minimal input
# --------------------------------------------------------------------------


def test_fixed_grouped_odd_integer_width_keyerror():
    new, report = rewrite(_mm("i8", "i24"), "scheme=strassen form=grouped")
    assert report[0]["plan"]["form"] == "grouped"


def test_fixed_grouped_three_levels_too_many_constants():
    text, shapes = contraction_mlir(16, 16, 16)
    new, report = rewrite(text, "scheme=strassen levels=3 form=grouped")
    # 64 products per C block is over MAX_GROUPED_TERMS: per-product form, said so.
    assert report[0]["plan"]["form"] == "per-product", report[0]
    assert "per-product form" in report[0]["reason"]
    a, b, c = random_inputs(shapes, ["f32"] * 3)
    assert rel_err(run_mlir(new, "f", a, b, c), reference(a, b, c)) < 2e-5


def test_forced_grouped_form_that_falls_back_warns(capfd):
    """Were: form=grouped on a plan whose grouped combines would read more blocks
    than one op may became per-product with the reason in the report only
    (break-it review of issue 13). Now one warning line on stderr, and the
    entry's form_warning; a grouped plan that fits says nothing."""
    text, _ = contraction_mlir(96, 96, 96)
    capfd.readouterr()
    _, report = rewrite(text, "scheme=2x3x4:20 levels=2 form=grouped")
    err = capfd.readouterr().err
    assert report[0]["plan"]["form"] == "per-product"
    lines = [ln for ln in err.splitlines() if "form=grouped asked for" in ln]
    assert len(lines) == 1 and lines[0] == report[0]["form_warning"], err
    assert "emitted in the per-product form" in lines[0] and "at most 24" in lines[0]
    _, report = rewrite(text, "scheme=strassen levels=2 form=grouped")
    assert report[0]["plan"]["form"] == "grouped" and "form_warning" not in report[0]
    assert "asked for" not in capfd.readouterr().err

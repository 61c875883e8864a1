"""Combine C as one op over all output blocks (GPU profiles): numerics on the CPU.

The fused form is what the rewrite emits for GPU targets (``Profile.fused_combine_c``);
it is run here through llvm-cpu against a float64 reference on random inputs,
for the index orders that could go wrong: transposed operands, a batch dim, a
non-square scheme in every order, two levels, an accumulating C, i32.
"""

from __future__ import annotations

import pytest

from cases import EPS, contraction_mlir, random_inputs, reference, rel_err, rewrite
from falcon_mlir.runner import run_mlir

# (M, N, K, contraction_mlir kwargs, lcma options)
CASES = [
    (64, 96, 32, {}, "scheme=strassen form=grouped"),
    (64, 96, 32, {}, "scheme=strassen"),
    (64, 96, 32, {"transpose_a": True, "transpose_b": True}, "scheme=strassen form=grouped"),
    (48, 64, 40, {"batch": 3}, "scheme=strassen form=grouped"),
    (48, 64, 40, {"batch": 3, "form": "generic"}, "scheme=strassen"),
    (64, 96, 48, {}, "scheme=2x3x2:11 form=grouped"),
    (96, 64, 48, {}, "scheme=3x2x2:11 form=grouped"),
    (64, 96, 48, {"form": "generic", "transpose_b": True}, "scheme=2x3x2:11"),
    (64, 64, 64, {}, "scheme=strassen levels=2 form=grouped"),
    (64, 64, 64, {}, "scheme=strassen levels=2"),
    # stacked levels with the fused combine C at both levels: batch, transposed B, mixed schemes
    (72, 96, 48, {"batch": 2, "transpose_b": True}, "scheme=strassen,2x3x2:11 levels=2"),
    (50, 70, 30, {}, "scheme=strassen form=grouped edge=pad"),
    (50, 70, 30, {}, "scheme=strassen edge=peel"),
]


@pytest.mark.parametrize("M,N,K,kw,opts", CASES)
def test_fused_combine_c_numerics(M, N, K, kw, opts):
    text, shapes = contraction_mlir(M, N, K, **kw)
    out, report = rewrite(text, f"{opts} target=h200-iree")
    assert "tensor.expand_shape" in out and "falcon.combine" in out
    assert report[0]["plan"] != "classical"
    a, b, c = random_inputs(shapes, ["f32"] * 3, seed=M + N + K)
    ref = reference(a, b, c, batch=kw.get("batch", 0), transpose_a=kw.get("transpose_a", False),
                    transpose_b=kw.get("transpose_b", False))
    got = run_mlir(out, "f", a, b, c)
    levels = 2 if "levels=2" in opts else 1
    # bound: a few units of f32 rounding per level and block of K; a wrong block
    # index or coefficient gives O(1)
    assert rel_err(got, ref) < 64 * EPS["f32"] * K * levels, rel_err(got, ref)


def test_fused_combine_c_integers_exact():
    text, shapes = contraction_mlir(32, 48, 16, lhs="i8", acc="i32")
    out, report = rewrite(text, "scheme=strassen form=grouped target=h200-iree")
    assert "tensor.expand_shape" in out, report[0]["reason"]
    a, b, c = random_inputs(shapes, ["i8", "i8", "i32"], seed=5)
    got = run_mlir(out, "f", a, b, c)
    assert (got.astype("int64") == reference(a, b, c)).all()


def test_cpu_profile_keeps_block_combines():
    text, _ = contraction_mlir(64, 64, 64)
    out, _ = rewrite(text, "scheme=strassen form=grouped")
    assert "tensor.expand_shape" not in out and out.count("tensor.insert_slice") == 4

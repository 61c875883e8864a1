"""Classical blocking plans (``mxkxn:R``, R = m*k*n) and LCMA over a blocking
base, compiled with IREE's best CPU flags as falcon-compile builds them
(data tiling, compute barriers), run, and compared with float64 on random
inputs at small odd sizes (peeled edges) and with padding."""

from __future__ import annotations

import numpy as np
import pytest

from cases import EPS, ROOT, random_inputs, reference, rel_err, rewrite
from falcon_mlir import compile_str
from falcon_mlir.catalog import get_scheme
from falcon_mlir.runner import BEST_CPU_FLAGS, Module


#: x86-dev with its rate table taken at its word for blocking (forms.blocking_products 1.0)
TABLE = ROOT / "test" / "lit" / "lcma-rewrite" / "Inputs" / "x86_table_profile.json"


def _mm(M, N, K, acc="f32", lhs="f32"):
    a, b, c = f"tensor<{M}x{K}x{lhs}>", f"tensor<{K}x{N}x{lhs}>", f"tensor<{M}x{N}x{acc}>"
    return (f"func.func @mm(%a: {a}, %b: {b}, %c: {c}) -> {c} {{\n"
            f"  %0 = linalg.matmul ins(%a, %b : {a}, {b}) outs(%c : {c}) -> {c}\n"
            f"  return %0 : {c}\n}}\n")


@pytest.mark.parametrize("M,N,K,options,schemes,products", [
    # 2x2x2 blocks, M, N and K odd: 8 block products plus a K, a row and a column strip
    (257, 129, 383, "scheme=2x2x2:8", ["2x2x2:8"], 8 + 3),
    (257, 129, 383, "scheme=2x2x2:8 edge=pad", ["2x2x2:8"], 8),
    (131, 97, 250, "scheme=3x1x2:6", ["3x1x2:6"], 6 + 2),  # M and N strips, K whole
    # Strassen over a blocking base: 7 products, each 8 accumulating block products
    (130, 66, 98, "scheme=strassen,2x2x2:8 levels=2", ["strassen", "2x2x2:8"], None),
    # blocking over Strassen (each of the 8 blocks through Strassen)
    (96, 80, 112, "scheme=2x1x2:4,strassen levels=2", ["2x1x2:4", "strassen"], 4 * 7),
])
def test_blocking_plans_match_float64(M, N, K, options, schemes, products):
    vmfb, report = compile_str(_mm(M, N, K), target_backends=["llvm-cpu"],
                               extra_args=list(BEST_CPU_FLAGS), lcma=options, return_report=True)
    e = report[0]
    assert e["plan"]["schemes"] == schemes, e
    if products is not None:
        assert e["products"] == products, e
    if schemes == ["2x2x2:8"] or schemes == ["3x1x2:6"]:
        assert e["combines"] == 0  # block extracts and accumulation only
    if len(schemes) > 1:
        assert e["emission"] == "recursive"
    a, b, c = random_inputs([[M, K], [K, N], [M, N]], ["f32"] * 3, seed=M * N + K)
    got = Module(vmfb)("mm", a, b, c)
    ref = reference(a, b, c)
    E = 1.0
    for s in schemes:
        if not get_scheme(s).is_blocking:
            E *= float(get_scheme(s).stability_e)
    err = rel_err(got, ref)
    assert err <= 8 * EPS["f32"] * K * E, err
    assert not np.array_equal(got, np.asarray(c))


def test_blocking_on_a_bf16_result_rounds_once():
    # bf16 x bf16 -> bf16: blocks accumulate in f32 from a zero f32 C, one rounding at the end
    M, N, K = 66, 34, 130
    vmfb, report = compile_str(_mm(M, N, K, acc="bf16", lhs="bf16"), target_backends=["llvm-cpu"],
                               extra_args=list(BEST_CPU_FLAGS), lcma="scheme=2x2x2:8",
                               return_report=True)
    assert report[0]["plan"]["schemes"] == ["2x2x2:8"]
    a, b, c = random_inputs([[M, K], [K, N], [M, N]], ["bf16"] * 3, seed=3)
    got = np.asarray(Module(vmfb)("mm", a, b, c)).astype(np.float64)
    ref = reference(a, b, c)
    assert rel_err(got, ref) <= 2 * EPS["bf16"]  # one rounding of the result (u = 2^-8)


def test_scheme_classical_is_plain_iree():
    # auto blocks Llama-3-8B's k/v at 2048 tokens on the x86 table taken at its
    # word (K in two blocks); scheme=classical keeps IREE's one GEMM
    text = _mm(2048, 1024, 4096)
    new, report = rewrite(text, f"scheme=auto profile={TABLE}")
    assert report[0]["plan"]["schemes"] == ["1x2x1:2"]
    new, report = rewrite(text, f"scheme=classical profile={TABLE}")
    assert report[0]["plan"] == "classical" and not report[0]["remark"]
    assert "scheme=classical" in report[0]["reason"]
    assert new.count("linalg.matmul") == 1
    # a dynamic M gets no run-time dispatch either (auto would dispatch it)
    a, b, c = "tensor<?x4096xf32>", "tensor<4096x1024xf32>", "tensor<?x1024xf32>"
    dyn = (f"func.func @mm(%a: {a}, %b: {b}, %c: {c}) -> {c} {{\n"
           f"  %0 = linalg.matmul ins(%a, %b : {a}, {b}) outs(%c : {c}) -> {c}\n"
           f"  return %0 : {c}\n}}\n")
    new, report = rewrite(dyn, f"scheme=auto profile={TABLE}")
    assert "scf.if" in new
    new, report = rewrite(dyn, f"scheme=classical profile={TABLE}")
    assert "scf.if" not in new and new.count("linalg.matmul") == 1, new

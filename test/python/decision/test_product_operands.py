"""What a plan on a bf16 result multiplies (lcma-rewrite's ``products``).

With f32 sums, a product that reads one block alone is ``f32 x bf16``
(``mixed``) or, with the block extended to f32 once, ``f32 x f32``
(``products=f32``); with bf16 sums every product is ``bf16 x bf16``. The
choice follows the profile's GEMM tables (``decision.product_operands``),
the cost model prices each product at the rate of what it multiplies, the
report states it (``rounding.product_operands``), and the extension is exact:
compiled plans measure the same error against float64 either way.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cases import NP_TYPES, contraction_mlir, random_inputs, reference, rel_err, rewrite
from falcon_mlir import decision
from falcon_mlir.decision import numerics
from falcon_mlir.runner import Module, compile_mlir


def _f32_faster():
    """The host profile as on a CPU without bf16 instructions: bf16 GEMM at 0.4x f32."""
    p = decision.load_profile("host")
    return dataclasses.replace(p, gemm={**p.gemm, "bf16": tuple((n, r * 0.4) for n, r in p.gemm["f32"])})


def test_product_operands_follow_the_faster_gemm():
    host = decision.load_profile("host")
    # this x86 host (AVX512-BF16): IREE's bf16 GEMM is the faster one; keep the blocks bf16
    assert host.gemm_rate("bf16", 512, 2048, 2048) > host.gemm_rate("f32", 512, 2048, 2048)
    assert decision.product_operands(host, "bf16", 512, 2048, 2048) == "mixed"
    assert decision.product_operands(_f32_faster(), "bf16", 512, 2048, 2048) == "f32"
    for choice in ("f32", "mixed"):
        assert decision.product_operands(host, "bf16", 512, 2048, 2048, choice) == choice


def test_plan_rounding():
    host = decision.load_profile("host")
    pb = decision.Problem(M=1024, N=4096, K=4096, lhs="bf16", rhs="bf16", acc="bf16")
    budget = numerics.narrow_max_error(4096, "bf16")
    r = decision.plan_rounding
    assert r(pb, host, ("strassen",), "per-product", budget) == ("f32", "mixed")
    assert r(pb, _f32_faster(), ("strassen",), "per-product", budget) == ("f32", "f32")
    assert r(pb, host, ("strassen",), "per-product", None) == ("bf16", "input")  # no limit
    assert r(pb, host, ("strassen",), "per-product", 1e-2) == ("bf16", "input")
    assert r(dataclasses.replace(pb, sums="f32"), host, ("strassen",), "per-product",
             None) == ("f32", "mixed")
    assert r(dataclasses.replace(pb, products="f32"), host, ("strassen",), "per-product",
             budget) == ("f32", "f32")
    assert r(pb, host, ("strassen",), "grouped", budget) == ("f32", "f32")  # all operands formed
    assert r(dataclasses.replace(pb, acc="f32"), host, ("strassen",), "per-product", None) is None


def test_cost_prices_what_the_products_multiply():
    pb = decision.Problem(M=1024, N=4096, K=4096, lhs="bf16", rhs="bf16", acc="bf16")
    for prof in (decision.load_profile("host"), _f32_faster()):
        cm = decision.CostModel(prof)
        est = {rnd: cm.plan(pb, ("strassen",), "peel", "per-product", rnd)
               for rnd in (("bf16", "input"), ("f32", "mixed"), ("f32", "f32"))}
        for (sums, products), e in est.items():
            assert (e.sums, e.products) == (sums, products)
        ext, mixed, narrow = est["f32", "f32"], est["f32", "mixed"], est["bf16", "input"]
        # the extension ops (four blocks of Strassen) are priced
        assert ext.dispatches == mixed.dispatches + 4
        assert ext.parts["combine_a"] > mixed.parts["combine_a"]
        bf16_faster = prof.gemm_rate("bf16", 512, 2048, 2048) > prof.gemm_rate("f32", 512, 2048, 2048)
        if bf16_faster:  # the host: bf16 products are the cheap ones, mixed ones run at f32's rate
            assert narrow.parts["products"] < mixed.parts["products"]
            assert mixed.parts["products"] == pytest.approx(ext.parts["products"])
        else:  # mixed products get the slower (bf16) rate; extended ones the f32 rate
            assert ext.parts["products"] < mixed.parts["products"]
            assert ext.seconds < mixed.seconds


def test_auto_keeps_bf16_classical_on_the_host_and_says_what_it_multiplies():
    """Measured here (docs/benchmarks.md, bf16 plans on this CPU): f32 products run at
    IREE's f32 rate, half its bf16 rate, so no plan with f32 sums pays; auto stays
    classical. A forced plan reports its products' operands."""
    text, _ = contraction_mlir(1024, 4096, 4096, lhs="bf16", acc="bf16")
    _, report = rewrite(text, "scheme=auto")
    assert report[0]["plan"] == "classical", report[0]["reason"]
    for opt, operands in (("products=f32", "f32 x f32 (operands extended)"),
                          ("products=mixed", "f32 x f32 where both are combined, f32 x bf16 "
                                             "(mixed) where one block is read alone"),
                          ("sums=input", "bf16 x bf16")):
        _, report = rewrite(text, f"scheme=strassen {opt}")
        assert report[0]["rounding"]["product_operands"] == operands, opt


@pytest.mark.parametrize("M,K,N,scheme", [(64, 130, 96, "strassen"), (64, 128, 96, "winograd"),
                                          (48, 128, 64, "2x4x4:26")])
def test_extended_products_measure_as_mixed(M, K, N, scheme):
    """products=f32 (every product f32 x f32) against products=mixed, compiled
    (IREE llvm-cpu), vs float64: the extension is exact, so both are within the
    error model's f32-sums prediction and within 2x of classical rounded once."""
    text, shapes = contraction_mlir(M, N, K, lhs="bf16", acc="bf16")
    pred = numerics.rounded_plan_error([scheme], K, "bf16")
    outs = {}
    for products in ("f32", "mixed"):
        new, report = rewrite(text, f"scheme={scheme} sums=f32 products={products}")
        assert report[0]["plan"]["schemes"] == [scheme]
        assert report[0]["predicted_error"]["plan"] == pytest.approx(pred)
        mm = [ln for ln in new.splitlines() if "linalg.matmul" in ln and "ins(" in ln]
        mixed_products = [ln for ln in mm if "xbf16>, tensor" in ln and "xf32>, tensor" in ln
                          or "xf32>, tensor" in ln and "xbf16>) outs" in ln]
        assert bool(mixed_products) == (products == "mixed"), mm
        errs, once = [], []
        module = Module(compile_mlir(new))  # compiled once, run on both seeds
        for seed in range(2):
            a, b, c = random_inputs(shapes, ["bf16"] * 3, seed=seed)
            c[:] = 0
            ref = reference(a, b, c)
            out = module("f", a, b, c)
            outs.setdefault(seed, []).append(np.asarray(out, np.float64))
            errs.append(rel_err(out, ref))
            once.append(rel_err(ref.astype(NP_TYPES["bf16"]), ref))
        assert max(errs) <= pred, (products, errs, pred)
        assert max(errs) <= 2 * max(once), (products, errs, once)
    for seed, (ext, mixed) in outs.items():  # the same sums in f32: equal up to f32 order
        assert rel_err(ext, mixed) <= 2 ** -8, seed


def test_extended_products_compile_with_data_tiling():
    """IREE's data tiling with ukernels would pull an extension op into the
    product's operand packing and llvm-cpu would fail ("exceeded stack
    allocation limit", 66560 bytes at this shape, IREE 3.13); the extended
    blocks sit behind a barrier in IREE's pipeline."""
    from falcon_mlir import compile_str
    from falcon_mlir.ir.matmul_text import matmul_mlir
    from falcon_mlir.runner import BEST_CPU_FLAGS

    vmfb, report = compile_str(matmul_mlir(1024, 4096, 4096, "bf16", "bf16"),
                               target_backends=["llvm-cpu"], extra_args=list(BEST_CPU_FLAGS),
                               lcma="scheme=strassen sums=f32 products=f32", return_report=True)
    assert vmfb and report[0]["rounding"]["product_operands"] == "f32 x f32 (operands extended)"

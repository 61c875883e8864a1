"""The kernel form in the decision: the h200-falcon profile, the cost of four
dispatches, and the error model of falcon's kernels against H200 measurements."""

from __future__ import annotations

import pytest

from falcon_mlir import decision
from falcon_mlir.decision import numerics

#: Measured on the H200 (docs/kernels.md; max-norm relative error vs float64,
#: random normal inputs): (schemes, K, in, out, products, measured error).
MEASURED = [
    ([], 16384, "bf16", "bf16", "bf16", 3.0e-3),
    (["strassen"], 16384, "bf16", "bf16", "bf16", 8.9e-3),
    (["strassen"], 16384, "bf16", "bf16", "f32", 6.2e-3),
    (["strassen", "strassen"], 16384, "bf16", "bf16", "bf16", 1.9e-2),
    (["strassen", "strassen"], 16384, "bf16", "bf16", "f32", 1.32e-2),  # run 4 (was above the model)
    (["strassen"], 8192, "bf16", "bf16", "bf16", 6.9e-3),
    (["strassen"], 4096, "bf16", "bf16", "bf16", 8.1e-3),     # run 7: 16384x14336x4096
    (["strassen"], 28672, "bf16", "bf16", "bf16", 7.3e-3),    # run 7: 16384x8192x28672
    (["strassen"], 7168, "bf16", "bf16", "bf16", 7.4e-3),     # run 7: 16384x18432x7168
    (["strassen"], 32768, "bf16", "bf16", "bf16", 7.4e-3),
    (["strassen", "strassen"], 32768, "bf16", "bf16", "bf16", 1.6e-2),
    (["strassen", "strassen"], 16384, "f32", "f32", "f32", 7.8e-6),
    (["strassen"] * 3, 32768, "f32", "f32", "f32", 2.0e-5),
]


@pytest.mark.parametrize("schemes, K, lhs, out, products, measured", MEASURED)
def test_kernel_error_model_bounds_the_measurements(schemes, K, lhs, out, products, measured):
    pred = numerics.kernel_plan_error(schemes, K, lhs, out, products)
    assert measured <= pred <= 3 * measured


def test_narrow_budget_admits_one_strassen_level_not_two():
    b = numerics.kernel_max_error("bf16")
    assert b == pytest.approx(4 * 2.0 ** -8)
    assert numerics.kernel_plan_error(["strassen"], 16384, "bf16", "bf16") < b
    assert numerics.kernel_plan_error(["strassen", "strassen"], 16384, "bf16", "bf16") > b
    assert numerics.kernel_max_error("f32") == numerics.default_max_error("f32")


def _decide(M, N, K, t):
    p = decision.load_profile("h200-falcon")
    pb = decision.Problem(M, N, K, lhs=t, rhs=t, acc=t)
    return decision.decide(pb, p, forms=p.plan_forms, budget=numerics.default_max_error(t),
                           kernel_budget=numerics.kernel_max_error(t))


def test_h200_falcon_profile_is_the_kernels():
    p = decision.load_profile("h200-falcon")
    assert p.plan_forms == ("kernel",) and p.auto_schemes == ("strassen",)
    assert p.gemm_rate("bf16", 8192, 8192, 8192) == pytest.approx(720e12, rel=0.01)


@pytest.mark.parametrize("M, t, want", [
    (8192, "bf16", ()),                       # measured: Strassen 0.77x of the classical kernel
    (32768, "bf16", ("strassen",)),           # measured: 1.09x (Strassen^2 is over the budget)
    (16384, "f32", ("strassen",) * 3),        # measured: 1.159x over cuBLAS
    (32768, "f32", ("strassen",) * 3),        # measured: 1.18x
])
def test_decisions_on_squares(M, t, want):
    d = _decide(M, M, M, t)
    assert d.choice.schemes == want
    if want:
        assert d.choice.form == "kernel" and d.choice.dispatches == 4


def test_kernel_form_predictions_match_the_h200():
    """Predicted seconds against IREE-run times of 2026-12-01 (within 12%)."""
    cm = decision.CostModel(decision.load_profile("h200-falcon"))
    for (M, t, schemes, measured) in [(16384, "bf16", ("strassen",), 12.26e-3),
                                      (16384, "f32", ("strassen", "strassen"), 160.4e-3),
                                      (32768, "f32", ("strassen",) * 3, 1122.8e-3),
                                      (16384, "f32", ("strassen",) * 3, 143.5e-3)]:
        pb = decision.Problem(M, M, M, lhs=t, rhs=t, acc=t)
        est = cm.plan(pb, schemes, "pad", "kernel")
        assert est.seconds == pytest.approx(measured, rel=0.12), (M, t, schemes)

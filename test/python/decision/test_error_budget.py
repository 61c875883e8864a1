"""The error budget (lcma-rewrite's ``max-error``) in the decision: what auto
and a forced scheme choose under a tight, unlimited or scheme-sized budget,
integers (exactness, not the budget), and an f16-result plan whose sums the
budget decides and whose measured error (IREE, llvm-cpu) stays below the
prediction.
"""

from __future__ import annotations

import pytest

from cases import FLAT_PROFILE, contraction_mlir, random_inputs, reference, rel_err, rewrite
from falcon_mlir.runner import run_mlir


@pytest.mark.parametrize("options,expect", [
    ("max-error=1e-300", "classical"),                      # auto: nothing fits
    ("scheme=strassen max-error=1e-300", "classical"),      # forced: over budget, remark
    ("max-error=inf levels=3", 3),                          # auto, unlimited budget: 3 levels
    ("scheme=4x4x4:48 max-error=1e-5", ["4x4x4:48"]),
])
def test_max_error_decisions_f32(options, expect):
    text, _ = contraction_mlir(1024, 1024, 1024)
    _, report = rewrite(text, options + f" target={FLAT_PROFILE}")
    got = report[0]["plan"]
    if isinstance(expect, int):
        assert got != "classical" and len(got["schemes"]) == expect, report[0]["reason"]
        return
    assert (got if got == "classical" else got["schemes"]) == expect, report[0]["reason"]
    if options.startswith("scheme=") and expect == "classical":
        assert report[0]["remark"] is True


def test_max_error_ignored_for_integers_but_bound_checked():
    text, _ = contraction_mlir(8, 8, 8, lhs="i8", acc="i32")
    _, report = rewrite(text, "scheme=strassen max-error=1e-300 form=grouped")
    assert report[0]["plan"]["schemes"] == ["strassen"]


def test_f16_result_budget_decides_the_sums_and_measured_below_prediction():
    """f16 1024x1024x1200 (f16 result: products and combine C in f32, one
    rounding): with f16 sums Winograd (G = 3) is over a budget of 1.9 u(f16),
    with f32 sums it fits; auto (on a profile where every plan is predicted
    faster) picks a plan within the default budget (1.5x classical), and its
    measured error stays below the prediction."""
    text, shapes = contraction_mlir(1024, 1024, 1200, lhs="f16")
    _, report = rewrite(text, "scheme=winograd sums=input max-error=9.3e-4")
    assert report[0]["plan"] == "classical" and report[0]["remark"] is True
    _, report = rewrite(text, "scheme=winograd sums=f32 max-error=9.3e-4")
    assert report[0]["plan"]["schemes"] == ["winograd"]
    new, report = rewrite(text, f"scheme=auto levels=1 target={FLAT_PROFILE}")
    assert report[0]["plan"] != "classical", report[0]["reason"]
    pred = report[0]["predicted_error"]["plan"]
    assert 2.0 ** -11 < pred <= 1.5 * report[0]["predicted_error"]["classical"]
    a, b, c = random_inputs(shapes, ["f16"] * 3, seed=3)
    c[:] = 0
    got = run_mlir(new, "f", a, b, c)
    assert rel_err(got, reference(a, b, c)) <= pred

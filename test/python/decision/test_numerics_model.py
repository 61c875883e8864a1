"""Tests of falcon_mlir.decision.numerics: unit roundoffs, the predicted-error model
(monotonicity, and an upper bound of errors measured on IREE-compiled
plans), default budgets and the exact integer overflow check."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from falcon_mlir.decision import numerics
from falcon_mlir.catalog import get_scheme
from falcon_mlir.decision.integer_bounds import integer_bound_ok, integer_worst_case
from falcon_mlir.decision.numerics import (classical_error, default_max_error, predicted_error, unit_roundoff,
                                           worst_case_bound)


# ---------------------------------------------------------------- roundoffs
def test_unit_roundoffs():
    assert unit_roundoff("f64") == 2.0 ** -53 == np.finfo(np.float64).eps / 2
    assert unit_roundoff("f32") == 2.0 ** -24 == np.finfo(np.float32).eps / 2
    assert unit_roundoff("f16") == 2.0 ** -11 == np.finfo(np.float16).eps / 2
    assert unit_roundoff("bf16") == 2.0 ** -8
    assert unit_roundoff("float32") == unit_roundoff("f32")
    with pytest.raises(ValueError):
        unit_roundoff("i32")


def test_bf16_roundoff_matches_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert unit_roundoff("bf16") == float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps) / 2


# ---------------------------------------------------------------- the model
@pytest.mark.parametrize("acc", ["f32", "f16", "f64"])
def test_monotone_in_levels_and_k(acc):
    Ks = [64, 256, 1024, 4096, 16384]
    for name in ["strassen", "winograd", "3x3x3:23", "4x4x4:49", "4x4x4:48"]:
        prev_l = classical_error(4096, acc)
        for L in (1, 2, 3):
            cur = predicted_error([name] * L, 4096, acc)
            assert cur > prev_l, (name, L)
            prev_l = cur
            errs = [predicted_error([name] * L, K, acc) for K in Ks]
            assert errs == sorted(errs) and len(set(errs)) == len(errs), (name, L, errs)
    cl = [classical_error(K, acc) for K in Ks]
    assert cl == sorted(cl)


def test_classical_below_strassen_below_two_levels():
    for K in (64, 512, 8192):
        c = classical_error(K, "f32")
        s1 = predicted_error(["strassen"], K, "f32")
        s2 = predicted_error(["strassen", "strassen"], K, "f32")
        assert c < s1 < s2
        assert predicted_error([], K, "f32") == c
        # Scheme objects work like names; lhs narrower than acc is the acc's error.
        assert predicted_error([get_scheme("strassen")], K, "f32") == s1
        assert predicted_error(["strassen"], K, "f32", lhs="bf16") == s1


def test_model_formula_and_factors():
    f = numerics.scheme_factors("strassen")
    assert f["E"] == 12 and f["E"] == get_scheme("strassen").stability_e
    assert f["E2"] == pytest.approx(12 ** 0.5) and f["G"] == pytest.approx(6 ** 0.5)
    for name in ["winograd", "3x3x3:23", "2x3x4:20", "4x4x4:49", "4x4x4:48"]:
        assert numerics.scheme_factors(name)["E"] == get_scheme(name).stability_e
    u, c = unit_roundoff("f32"), numerics.CALIBRATION
    assert classical_error(1024, "f32") == pytest.approx(c * u * 32)
    assert predicted_error(["strassen"], 1024, "f32") == pytest.approx(
        c * u * (512 + f["Q"]) ** 0.5 * f["G"])
    # The worst-case bound is Ballard et al.'s, E^L times the shortened K.
    assert worst_case_bound([], 1024, "f32") == pytest.approx(1024 * u)
    assert worst_case_bound(["strassen"] * 2, 1024, "f32") == pytest.approx(
        (256 + 2 * f["Q"]) * 144 * u)


def test_predicted_error_rejects_bad_input():
    with pytest.raises(ValueError):
        predicted_error(["strassen"], 0, "f32")
    with pytest.raises(ValueError):
        predicted_error(["strassen"], 64, "f32", lhs="i8")
    with pytest.raises(ValueError):
        predicted_error(["strassen"], 64, "f16", lhs="f32")


def test_default_budgets():
    assert default_max_error("f32") == 1e-4
    assert default_max_error("f32", lhs="bf16") == 1e-4
    assert default_max_error("f16") == 3e-2
    assert default_max_error("f64") is None
    assert default_max_error("i32") is None
    # The f32 budget admits classical at large K and two Strassen levels at K = 16384.
    assert classical_error(16384, "f32") < 1e-4
    assert predicted_error(["strassen"] * 2, 16384, "f32") < 1e-4


# ---------------------------------------------------------- measured <= predicted
# (dtype key of tools.accuracy, square size, plan); each compiles once (~2-5 s).
COMPILED = [
    ("f32", 96, "strassen"),
    ("f32", 96, "strassen^2"),
    ("f32", 81, "3x3x3:23"),
    # f16 -> f16 plans accumulate in f32 since the narrow-result emission:
    # measured against their own model in test_narrow_results.py
    ("bf16", 96, "strassen^2"),
    ("bf16", 72, "3x3x3:23"),
]


@pytest.mark.parametrize("dtype,size,plan", COMPILED)
def test_measured_error_below_prediction(dtype, size, plan):
    import accuracy

    r = accuracy.measure(dtype, size, plan, seeds=2)
    lhs, acc = accuracy.DTYPES[dtype]
    pred = predicted_error(accuracy.plan_schemes(plan), size, acc, lhs)
    assert max(r["errors"]) <= pred, (r["errors"], pred)
    # Not vacuous: the plan really rounds (errors well above the classical floor's u).
    assert min(r["errors"]) > unit_roundoff(acc)
    # And the prediction is not wildly pessimistic (the 30x calibration target).
    assert pred <= 30 * float(np.median(r["errors"]))


# ---------------------------------------------------------------- integers
def _strassen_intermediates(A, B):
    """Every intermediate of one Strassen level on 2x2 blocks (K' = A.shape[1] // 2),
    evaluated as the rewrite does (combine A/B, classical products, combine C in
    order r = 0..6), with exact Python ints."""
    s = get_scheme("strassen")
    K = len(A[0])
    Kb = K // 2
    blkA = lambda i, j: [row[j * Kb:(j + 1) * Kb] for row in A[i:i + 1]][0]      # M = 2: 1 row/block
    blkB = lambda j, l: [B[j * Kb + t][l] for t in range(Kb)]                    # N = 2: 1 col/block
    seen, products = [], []
    for r in range(s.R):
        a = [0] * Kb
        for i, j in itertools.product(range(2), range(2)):
            if s.U[r][i][j]:
                a = [x + int(s.U[r][i][j]) * y for x, y in zip(a, blkA(i, j))]
                seen.extend(a)
        b = [0] * Kb
        for j, l in itertools.product(range(2), range(2)):
            if s.V[r][j][l]:
                b = [x + int(s.V[r][j][l]) * y for x, y in zip(b, blkB(j, l))]
                seen.extend(b)
        p = 0
        for x, y in zip(a, b):
            p += x * y
            seen.append(p)
        products.append(p)
    C = [[0, 0], [0, 0]]
    for i, l in itertools.product(range(2), range(2)):
        acc = 0
        for r in range(s.R):
            if s.W[r][i][l]:
                acc += int(s.W[r][i][l]) * products[r]
                seen.append(acc)
        C[i][l] = acc
    return seen, C


def test_integer_i8_strassen_two_levels_k4096_ok():
    ok, why = integer_bound_ok(["strassen", "strassen"], 4096, 8, 32)
    assert ok, why
    value, _ = integer_worst_case(["strassen", "strassen"], 4096, 8)
    assert value == 2 ** 29          # Strassen C11's M1 + M4 - M5 prefix, inner level
    # The classical bound K * 128 * 128 = 2^26 is below it, the crude E^L one above 2^31.
    assert 4096 * 2 ** 14 < value < 1024 * 144 * 2 ** 14
    assert integer_bound_ok([], 4096, 8, 32)[0]


def test_integer_i32_strassen_overflows_on_worst_input():
    ok, why = integer_bound_ok(["strassen"], 2, 32, 32)
    assert not ok and "exceeds" in why
    lo = -2 ** 31
    A = [[lo, lo], [lo, lo]]          # M = 2, K = 2: blocks are 1x1
    B = [[lo, lo], [lo, lo]]
    seen, C = _strassen_intermediates(A, B)
    assert max(abs(x) for x in seen) > 2 ** 31 - 1            # A11 + A22 = -2^32 already
    assert C == [[sum(A[i][t] * B[t][l] for t in range(2)) for l in range(2)] for i in range(2)]


def test_integer_overflow_where_classical_fits():
    # 15-bit inputs, K = 6: classical |C| <= 6 * 2^28 < 2^31 fits, Strassen's products do not.
    assert integer_bound_ok([], 6, 15, 32)[0]
    ok, why = integer_bound_ok(["strassen"], 6, 15, 32)
    assert not ok, why
    lo = -2 ** 14
    A = [[lo] * 6, [lo] * 6]
    B = [[lo, lo] for _ in range(6)]
    seen, C = _strassen_intermediates(A, B)
    true = [[sum(A[i][t] * B[t][l] for t in range(6)) for l in range(2)] for i in range(2)]
    assert C == true and max(abs(x) for row in true for x in row) <= 2 ** 31 - 1
    worst = max(abs(x) for x in seen)
    assert worst > 2 ** 31 - 1                  # M1 = 3 * (2^15)^2 = 3 * 2^30
    assert worst <= integer_worst_case(["strassen"], 6, 15)[0]   # the bound holds


def test_integer_bound_dominates_exhaustive_corners():
    # Every intermediate over all sign corners of 4-bit inputs stays within the bound.
    a = 2 ** 3
    bound = integer_worst_case(["strassen"], 2, 4)[0]
    worst = 0
    for signs in itertools.product((-a, a - 1), repeat=8):
        A = [list(signs[0:2]), list(signs[2:4])]
        B = [list(signs[4:6]), list(signs[6:8])]
        seen, _ = _strassen_intermediates(A, B)
        worst = max(worst, max(abs(x) for x in seen))
    assert worst <= bound


def test_integer_rational_scheme_rejected():
    assert not get_scheme("4x4x4:48").is_integral
    ok, why = integer_bound_ok(["4x4x4:48"], 64, 8, 32)
    assert not ok and "non-integer" in why
    ok, _ = integer_bound_ok(["strassen", "4x4x4:48"], 256, 8, 32)
    assert not ok

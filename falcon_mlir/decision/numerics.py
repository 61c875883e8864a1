"""Numerical error model of LCMA plans: predicted errors, budgets, integer overflow.

(One file over 500 lines by choice: it is one model, where each rounding of a
plan happens and how it grows through the levels, and a fifth of it is the
derivation below; the narrow-result and kernel-form terms share its
constants. The exactness of integer plans, a bound and not an error model,
is in :mod:`.integer_bounds`.)

What is modelled
----------------
``C = A @ B`` with ``A`` M x K and ``B`` K x N is computed by an L-level plan
``s_1, ..., s_L`` (outer level first; level ``l`` uses a scheme
``<m_l, k_l, n_l; R_l>`` with factor tensors ``U, V, W`` in the catalog's
convention, see :mod:`falcon_mlir.catalog.scheme`).  As the rewrite emits it
(:mod:`falcon_mlir.passes.lcma_rewrite`): combine A (``A_r = sum U[r,i,j]
A_ij``) and combine B in the accumulator type, ``R`` products that are
classical contractions of reduction length ``K_L = K / (k_1 ... k_L)`` at the
last level, and combine C (``C_il = C0_il + sum_r W[r,i,l] P_r``) in the
accumulator type.  The error measure is the max-norm relative forward error
``max|C_hat - C| / max|C|`` against an exact product of the *same* (already
rounded) inputs, as :mod:`tools.accuracy` measures it.

Worst case (Ballard, Benson, Druinsky, Lipshitz, Schwartz, "Improving the
numerical stability of fast matrix multiplication", SIMAX 37(4), 2016,
the forward-error bound for L recursive steps, section 3; Higham, "Accuracy and Stability of Numerical
Algorithms", 2nd ed., 2002, section 23.2.2 for Strassen)::

    |C_hat - C|_max <= (K / (k_1...k_L) + Q_1 + ... + Q_L) * E_1 * ... * E_L
                       * |A|_max * |B|_max * u + O(u^2)

with ``E = max_c sum_r |W[r,c]| |U_r|_1 |V_r|_1`` (the scheme's
``stability_e``) and ``Q_l`` the additions on the longest path through the
combines of level ``l``.  For L = 0 it is classical GEMM's ``K u``.  This is
:func:`worst_case_bound`.  It is tight only for adversarial inputs: on normal
inputs at S = M = N = K = 512 (where ``|A|_max |B|_max / |C|_max ~ 0.21``) it
is ~8x above the measured max-norm relative error of classical f32 GEMM but
~850x above Strassen 3 levels (E^3 = 1728) and ~1400x above Winograd 3
levels (E^3 = 5832): E^L grows much faster than the measured error, so it
cannot be calibrated within 30x of the measurements.

Prediction for inputs of random sign (:func:`predicted_error`)
------------------------------------------------------------
The same derivation with rounding errors treated as independent, zero-mean
random variables (errors add in quadrature; Higham and Mary, "A new approach
to probabilistic rounding error analysis", SISC 41(5), 2019, whose bound for
a length-K inner product is ``~ sqrt(K) u`` instead of ``K u``) and entries
of ``A``, ``B`` of random sign:

* a classical inner product of length ``K`` has absolute error with standard
  deviation ``~ u K sigma_A sigma_B / sqrt(2)`` while ``C`` has entries of
  size ``sqrt(K) sigma_A sigma_B``: relative error ``~ u sqrt(K)``;
* product ``r`` of a level has operands of size ``|U_r|_2 sigma_A`` and
  ``|V_r|_2 sigma_B`` (sums of independent entries), so its rounding error,
  pushed through combine C, gives entry ``c`` an error of size
  ``u K_L sigma_A sigma_B e2_c`` with the l2 analogue of Ballard's ``e_c``::

      e2_c = sqrt( sum_r W[r,c]^2 |U_r|_2^2 |V_r|_2^2 ),   E2 = max_c e2_c

  E2 multiplies over the levels of a Kronecker product exactly, like E.
  Relative to ``|C| ~ sqrt(K)``, one level changes classical's ``sqrt(K)``
  into ``sqrt(K / k) * (E2 / sqrt(k))``: a growth ``G = E2 / sqrt(k)`` per
  level on top of the shorter reduction (Strassen: E2 = sqrt(12), G = 2.45;
  Strassen-Winograd 3.0; 3x3x3:23 3.21; 2x3x4:20 3.79; 4x4x4:49 5.66;
  4x4x4:48 4.0);
* the roundings in the combines add ``Q_l`` more terms of the same size
  (``Q_l = max_r (nnz U_r - 1) + max_r (nnz V_r - 1) + max_c nnz W[:,c]``,
  the last counting the add of the live accumulator ``C0``).

Hence, with ``u`` the unit roundoff of the accumulator type::

    predicted_error = CALIBRATION * u * sqrt(K / (k_1...k_L) + Q_1 + ... + Q_L)
                      * G_1 * ... * G_L,          G_l = E2_l / sqrt(k_l)

and classical GEMM (``L = 0``) is ``CALIBRATION * u * sqrt(K)``.  Narrow
inputs with a wider accumulator (bf16 x bf16 -> f32) use the accumulator's
``u``: the inputs are exact in it and the combines run in it (design.md,
Numerics); their input rounding is not part of this error (the reference
uses the same rounded inputs).

Calibration
-----------
``CALIBRATION = 1.0``, fitted to the measurements of ``scripts/accuracy.py``
(``python3 scripts/accuracy.py``: IREE 3.13, llvm-cpu, x86-64 host
with 2 cores; f32, f16 accumulated in f16, bf16 -> f32 and f64; square
sizes 64, 128, 256, 512; classical and 10 LCMA plans of docs/accuracy.md;
5 seeds per cell, normal inputs, zero accumulator: 880 measured cases).
The ratio ``measured / (u * sqrt(K_L + sum Q) * prod G)`` has 99.5th
percentile 0.75 and maximum 0.82 over those cases (classical alone: about
0.6 at K = 512, i.e. IREE's GEMM behaves like recursive summation in the
random-rounding regime).  The constant is that percentile rounded up to
1.0, a ~30% margin for other CPUs, seeds and shapes.  With it the
prediction is at or above the measured error in all 880 cases (>= 99%
asked), and at most 6.6x above a cell's median (median over cells 3.1x,
smallest 1.4x): well inside the 30x target.  The largest overestimates are
for 3-level plans, whose measured growth per level (Strassen about 1.3-1.8,
Strassen-Winograd about 1.6-2.0 relative to classical) is below the model's
``G / sqrt(k)`` (1.73, 2.12).  Re-run the tool and re-fit when the rewrite
(evaluation order of the combines) or IREE's GEMM lowering changes.

Narrow results (bf16 x bf16 -> bf16, f16 -> f16)
------------------------------------------------
A contraction whose result is bf16 or f16 is not computed in that type:
classical IREE code (with data tiling) accumulates in f32 and rounds once,
and a plan does the same (:mod:`falcon_mlir.passes.lcma_rewrite`): the
products accumulate in f32, combine C runs in f32 and C is rounded once at
the end; the combined operands are formed in f32 and kept in f32, or
rounded once to the input type where the budget allows.  Its error is
:func:`rounded_plan_error` (each rounding named: sums, products, result),
its default budget :func:`narrow_max_error`, 1.5 times classical's predicted
error on the same contraction.  The f32 accumulation of the products has no odd-K
penalty: IREE's worse odd-K code is its bf16-result path, which the
products (f32 results) never take.

Integers
--------
:func:`.integer_bounds.integer_bound_ok` bounds, exactly with Python ints, every
intermediate value the plan computes for the worst-case input, see there.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Optional, Sequence

__all__ = [
    "UNIT_ROUNDOFF", "CALIBRATION", "DEFAULT_MAX_ERROR", "unit_roundoff", "scheme_factors",
    "growth_factor", "predicted_error", "classical_error", "worst_case_bound",
    "default_max_error", "plan_schemes", "rounded_plan_error",
    "kernel_plan_error", "kernel_max_error", "is_narrow_result", "narrow_sums_type",
    "narrow_max_error", "NARROW_RESULTS", "NARROW_BUDGET_FACTOR", "KERNEL_OPERAND_TYPES",
    "kernel_operands_unserved",
    "OPERAND_CHOICES", "kernel_operands",
]

#: Unit roundoff u = 2^-p (p = significand bits, implicit bit included) of
#: round-to-nearest arithmetic; machine epsilon is 2u.
UNIT_ROUNDOFF = {"f64": 2.0 ** -53, "f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}

#: The fitted constant of :func:`predicted_error` (see the module docstring).
CALIBRATION = 1.0

#: Default error budgets per accumulator type (see :func:`default_max_error`).
DEFAULT_MAX_ERROR = {"f32": 1e-4, "bf16": 1e-4, "f16": 3e-2, "f64": None}

_ALIASES = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
            "half": "f16", "float": "f32", "double": "f64"}

def _dtype(name: str) -> str:
    key = str(name).lower()
    return _ALIASES.get(key, key)


def unit_roundoff(dtype_name: str) -> float:
    """Unit roundoff ``u`` of a floating-point type (float).

    ``u = 2^-p`` with ``p`` the significand precision including the implicit
    bit (IEEE 754-2008; bfloat16 has p = 8): f64 ``2^-53``, f32 ``2^-24``,
    f16 ``2^-11``, bf16 ``2^-8``.  Accepts MLIR names (``f32``) and numpy
    names (``float32``, ``bfloat16``).

    Raises:
        ValueError: not one of these types (e.g. an integer type).
    """
    key = _dtype(dtype_name)
    if key not in UNIT_ROUNDOFF:
        raise ValueError(f"no unit roundoff for element type {dtype_name!r} "
                         f"(expected one of {', '.join(UNIT_ROUNDOFF)})")
    return UNIT_ROUNDOFF[key]


def _as_scheme(s):
    if isinstance(s, str):
        from falcon_mlir.catalog import get_scheme

        return get_scheme(s)
    return s


def plan_schemes(schemes) -> list:
    """The levels ``schemes`` (a name, or names and :class:`~falcon_mlir.catalog.Scheme` objects;
    ``None``: none) as catalog Schemes, outer level first.

    Raises:
        falcon_mlir.catalog.UnknownSchemeError: an unknown name.
    """
    if schemes is None:
        return []
    if isinstance(schemes, str):
        schemes = [schemes]
    return [_as_scheme(s) for s in schemes]


def _keys(schemes) -> list:
    """Like :func:`_schemes` but names stay names (their factors are cached by name)."""
    if schemes is None:
        return []
    if isinstance(schemes, str):
        return [schemes]
    return list(schemes)


def _algebra(schemes) -> list:
    """The levels of ``schemes`` that are not classical blocking (names or
    Schemes): a blocking level (:attr:`~falcon_mlir.catalog.Scheme.is_blocking`)
    runs the same sums as classical GEMM, its products accumulating into C in
    K order, so the error model leaves it out."""
    from falcon_mlir.catalog import is_blocking_name

    return [s for s in _keys(schemes)
            if not (is_blocking_name(s) if isinstance(s, str) else s.is_blocking)]


def _rows(arr, R: int) -> list:
    return [list(arr[r].reshape(-1)) for r in range(R)]


@lru_cache(maxsize=None)
def _factors_cached(key, U, V, W, R) -> dict:
    u_rows, v_rows, w_rows = U, V, W
    u1 = [sum(abs(x) for x in row) for row in u_rows]
    v1 = [sum(abs(x) for x in row) for row in v_rows]
    u2 = [sum(x * x for x in row) for row in u_rows]
    v2 = [sum(x * x for x in row) for row in v_rows]
    n_c = len(w_rows[0])
    E = max(sum(abs(w_rows[r][c]) * u1[r] * v1[r] for r in range(R)) for c in range(n_c))
    E2sq = max(sum(w_rows[r][c] ** 2 * u2[r] * v2[r] for r in range(R)) for c in range(n_c))
    q = (max(sum(1 for x in row if x != 0) for row in u_rows) - 1
         + max(sum(1 for x in row if x != 0) for row in v_rows) - 1
         + max(sum(1 for r in range(R) if w_rows[r][c] != 0) for c in range(n_c)))
    return {"E": Fraction(E), "E2": math.sqrt(Fraction(E2sq)), "Q": int(q)}


@lru_cache(maxsize=None)
def _factors_by_name(name: str) -> dict:
    return _scheme_factors(name)


def scheme_factors(scheme) -> dict:
    """Stability numbers of one scheme (a name or a :class:`Scheme`).

    Returns a dict:
        ``E`` (Fraction): Ballard et al.'s ``max_c sum_r |W[r,c]| |U_r|_1 |V_r|_1``;
        ``E2`` (float): its l2 analogue ``max_c sqrt(sum_r W[r,c]^2 |U_r|_2^2 |V_r|_2^2)``;
        ``G`` (float): ``E2 / sqrt(k)``, the growth of the random-sign error per level;
        ``Q`` (int): roundings on the longest path through the level's combines;
        ``k`` (int): the scheme's reduction blocking.
    """
    if isinstance(scheme, str):
        return dict(_factors_by_name(scheme))
    return _scheme_factors(scheme)


def _scheme_factors(scheme) -> dict:
    s = _as_scheme(scheme)
    R = s.R
    key = (s.canonical_name, s.name)
    f = dict(_factors_cached(key, tuple(map(tuple, _rows(s.U, R))), tuple(map(tuple, _rows(s.V, R))),
                             tuple(map(tuple, _rows(s.W, R))), R))
    f["G"] = f["E2"] / math.sqrt(s.k)
    f["k"] = s.k
    return f


def growth_factor(schemes) -> float:
    """``G_1 * ... * G_L`` of a plan (1.0 for classical), see the module doc."""
    g = 1.0
    for s in _algebra(schemes):
        g *= scheme_factors(s)["G"]
    return g


def _shape_terms(schemes, K: int):
    ss = _algebra(schemes)
    P = 1
    Q = 0
    for s in ss:
        f = scheme_factors(s)
        P *= f["k"]
        Q += f["Q"]
    return ss, max(K / P, 1.0), Q


def predicted_error(schemes: Sequence, K: int, acc: str, lhs: Optional[str] = None) -> float:
    """Predicted max-norm relative forward error of a plan on random-sign inputs.

    ``CALIBRATION * u(acc) * sqrt(K / (k_1...k_L) + Q_1 + ... + Q_L) * G_1 * ... * G_L``
    (module docstring: derivation, sources and how CALIBRATION was fitted).
    An empty list is classical GEMM (:func:`classical_error`).  It is a
    calibrated *prediction*, an upper bound of what IREE's CPU code produced
    in all measured cases, not a worst-case bound (:func:`worst_case_bound`).

    Args:
        schemes: per-level scheme names or :class:`Scheme` objects, outer
            level first (``["strassen", "strassen"]``); ``[]`` = classical.
        K: the reduction length of the contraction.
        acc: accumulator element type (``f32``, ``f16``, ``bf16``, ``f64``).
        lhs: input element type; only checked: inputs narrower than the
            accumulator are exact in it and the combines run in the
            accumulator type, so ``acc`` decides the error.

    Raises:
        ValueError: K < 1, an unknown float type, an integer type (use
            :func:`.integer_bounds.integer_bound_ok`), or ``lhs`` wider than ``acc``.
    """
    if K < 1:
        raise ValueError(f"K must be >= 1, got {K}")
    u = unit_roundoff(acc)
    if lhs is not None:
        lhs_key = _dtype(lhs)
        if lhs_key.startswith(("i", "ui")):
            raise ValueError(f"integer inputs ({lhs}) are exact or overflow; use integer_bound_ok")
        if unit_roundoff(lhs_key) < u:
            raise ValueError(f"lhs {lhs} is wider than the accumulator {acc}")
    ss, KL, Q = _shape_terms(schemes, K)
    return CALIBRATION * u * math.sqrt(KL + Q) * growth_factor(ss)


#: Narrow-result error coefficients (:func:`rounded_plan_error`), each in units
#: of the unit roundoff of the type rounded to.  ``ROUND_OUT``: the final
#: rounding of C; a round-to-nearest of values at most ``max|C|`` errs by at
#: most ``u max|C|``, so 1.0 is a bound, not a fit (measured: H200 kernels
#: 0.56-0.77 u, IREE llvm-cpu with data tiling up to 0.9 u, docs/accuracy.md).
#: ``ROUND_SUMS`` / ``ROUND_PRODUCTS``: combined operands / stored products
#: rounded to a narrow type, times the plan's growth G; fitted as upper
#: bounds of the H200 measurements of 2026-12-01 (random normal inputs,
#: max-norm relative error against float64, docs/kernels.md): bf16 classical
#: kernel 2.2e-3 to 3.0e-3; grouped Strassen with f32 products 6.2e-3, with
#: bf16 products 8.9e-3 (16384^3) and 7.4e-3 (32768^3), 6.9e-3 to 8.1e-3 on
#: the M = 16384 workload shapes (K 4096 to 28672) and 8192^3; Strassen^2 with
#: bf16 products 1.9e-2 and 1.6e-2, with f32 products 1.3e-2 (which a sums
#: coefficient of 0.4 underestimated: 1.25e-2); and of the llvm-cpu
#: measurements of docs/accuracy.md (bf16 -> bf16 with bf16 sums; 0.45 was
#: just under Strassen with bf16 sums at 64x130x96, 8.3e-3 against 8.2e-3,
#: `scripts/accuracy.py --narrow`, 2026-12-01; 0.5 predicts 8.7e-3 there).
ROUND_OUT = 1.0
ROUND_SUMS = 0.5
ROUND_PRODUCTS = 0.3
#: The same constants under the names the kernel form used first.
KERNEL_ROUND_OUT, KERNEL_ROUND_SUMS, KERNEL_ROUND_PRODUCTS = ROUND_OUT, ROUND_SUMS, ROUND_PRODUCTS
#: The scaled operand type of kernel-form plans per input type, their default: bf16 plans form their
#: combined operands and products in f16 scaled by powers of two into its range
#: (falcon_mlir.kernels.lcma.scale; the same table as ``falcon_mlir.kernels.lcma.SCALED_OPERANDS``,
#: which a test holds equal: the decision does not import the kernels). Why the default:
#: docs/accuracy.md, section *Scaled f16 operands* (never worse than bf16 operands in emulation but
#: where both A and B hold elements 2^16 or more above those C's largest entries are made of).
KERNEL_OPERAND_TYPES = {"bf16": "f16"}
#: lcma-rewrite's ``operands=`` choices for kernel-form plans: ``auto`` (the scaled type of
#: :data:`KERNEL_OPERAND_TYPES` where there is one), ``input`` (the input type), ``f16``.
OPERAND_CHOICES = ("auto", "input", "f16")
#: Default budget of a narrow (bf16/f16) result under the kernel form, in u(out).
KERNEL_NARROW_BUDGET = 4.0
#: Result types whose plans accumulate in f32 and round once (:func:`is_narrow_result`).
NARROW_RESULTS = ("bf16", "f16")
#: Default budget of a narrow result outside the kernel form, as a multiple of
#: classical's own error on the same contraction (:func:`narrow_max_error`).
NARROW_BUDGET_FACTOR = 1.5


def is_narrow_result(out: str) -> bool:
    """Whether a float contraction with result type ``out`` is a narrow-result one
    (bf16 or f16): its plans keep the products' accumulation and combine C in
    f32 and round C once at the end (:mod:`falcon_mlir.passes.lcma_rewrite`)."""
    return _dtype(out) in NARROW_RESULTS


def rounded_plan_error(schemes: Sequence, K: int, out: str, sums: str = "f32",
                       products: str = "f32", sum_roundings: int = 1) -> float:
    """Predicted max-norm relative error of a plan whose sums and products
    accumulate in f32 and whose roundings to narrow types happen in three
    named places: the combined operands (``sums``: rounded once to that type
    after an f32 sum), the stored products (``products``) and the result C
    (``out``, rounded once at the end).  Classical (``schemes == []``) is an
    f32-accumulated GEMM rounded once to ``out``.

    ``e_f32(schemes, K) + ROUND_OUT u(out) + G (S ROUND_SUMS u(sums) + ROUND_PRODUCTS u(products))``

    with ``S = sum_roundings`` the roundings of a combined operand on its
    way to a product: 1 where all levels are composed (grouped and kernel
    forms), L in the per-product form with L levels (each level's combines
    read the level above's rounded operands and round again; every such
    rounding is carried through all levels, growth G; measured Strassen^2
    with bf16 sums: 4.3 u, where one rounding predicts 3.4 u)

    with ``e_f32`` :func:`predicted_error` with an f32 accumulator (the
    products' accumulation and combine C), G the plan's growth
    (:func:`growth_factor`: a rounding of a combined operand or a product is
    carried through combine C like the products' own error) and ``u(t)``
    dropped (0) where ``t`` is f32 or f64.  The inputs' own rounding is not
    part of it (the reference uses the same rounded inputs).  Coefficients:
    :data:`ROUND_OUT`, :data:`ROUND_SUMS`, :data:`ROUND_PRODUCTS`.

    Raises:
        ValueError: K < 1 or a type without a unit roundoff.
    """
    err = predicted_error(list(schemes), K, "f32")

    def narrow(t: str) -> float:
        return 0.0 if _dtype(t) in ("f32", "f64") else unit_roundoff(t)

    err += ROUND_OUT * narrow(out)
    if schemes:
        err += growth_factor(schemes) * (sum_roundings * ROUND_SUMS * narrow(sums)
                                         + ROUND_PRODUCTS * narrow(products))
    return err


def kernel_operands(lhs: str, choice: str = "auto") -> tuple:
    """``(type, why)``: the type a kernel-form plan on ``lhs`` inputs forms its
    combined operands (and stores its products) in, for lcma-rewrite's
    ``operands=`` ``choice``, and one line saying why. ``auto``: the scaled
    type of :data:`KERNEL_OPERAND_TYPES` (f16 for bf16), else ``lhs``;
    ``input``: ``lhs``; ``f16``: f16 for bf16 (scaled) and f16 inputs, ``lhs``
    for others (f32 operands are not narrowed).

    Raises:
        ValueError: ``choice`` not one of :data:`OPERAND_CHOICES`.
    """
    key = _dtype(lhs)
    if choice not in OPERAND_CHOICES:
        raise ValueError(f"operands must be one of {', '.join(OPERAND_CHOICES)}, got {choice!r}")
    scaled = KERNEL_OPERAND_TYPES.get(key)
    if choice == "input":
        return key, f"operands=input: {key}" + (" (not scaled)" if scaled else "")
    if choice == "f16":
        if key in ("bf16", "f16"):
            return "f16", "operands=f16" + (": scaled by powers of two into f16's range" if scaled else "")
        return key, f"operands=f16 applies to bf16 inputs; {key} inputs keep {key}"
    if scaled:
        return scaled, (f"auto: the default for {key} inputs, 0.06-0.8x the error of {key} operands "
                        f"(docs/accuracy.md, Scaled f16 operands); operands=input keeps {key}")
    return key, f"auto: the input type {key}"


def kernel_operands_unserved(lhs: str, operands: str) -> Optional[str]:
    """``None`` where falcon's kernels form the combined operands of a
    kernel-form plan on ``lhs`` inputs in ``operands`` (the input type, or the
    scaled type of :data:`KERNEL_OPERAND_TYPES`: f16 for bf16), else one line
    saying why not (a hand-attached ``falcon.plan`` may name any operand type;
    ``falcon_mlir.kernels.lcma.PlanSpec`` refuses the others)."""
    key, ops = _dtype(lhs), _dtype(operands)
    ok = (key,) + ((KERNEL_OPERAND_TYPES[key],) if key in KERNEL_OPERAND_TYPES else ())
    if ops in ok:
        return None
    return (f"operands = '{operands}' on {key} inputs: falcon's kernels form a kernel-form plan's "
            f"combined operands in {' or '.join(ok)} (the input type"
            + (f" or, scaled, {KERNEL_OPERAND_TYPES[key]}" if key in KERNEL_OPERAND_TYPES else "") + ")")


def kernel_plan_error(schemes: Sequence, K: int, lhs: str, out: str,
                      products: Optional[str] = None, operands: Optional[str] = None) -> float:
    """Predicted max-norm relative error of a GEMM run by falcon's CUDA kernels
    (:mod:`falcon_mlir.kernels`): classical (``schemes == []``) or a grouped plan
    in the kernel form, where every sum and product accumulates in f32, the
    combined operands are rounded once to the operand type (``operands``;
    default :func:`kernel_operands` ``(lhs)``: f16 scaled for bf16 inputs,
    else the input type), the stored products to ``products``
    (default the operand type) and C to ``out``: :func:`rounded_plan_error`
    with ``sums`` the operand type.  The scaling itself is exact; values far
    below max|A| that fall into f16's subnormals err by at most 2^-25 of the
    scaled maximum, below this model's resolution (what it cannot hold:
    docs/accuracy.md, section *Scaled f16 operands*).

    Raises:
        ValueError: K < 1 or a type without a unit roundoff.
    """
    ops = operands or kernel_operands(lhs)[0]
    return rounded_plan_error(schemes, K, out, sums=ops, products=products or ops)


def kernel_max_error(out: str) -> Optional[float]:
    """Default budget under the kernel form: :func:`default_max_error` for f32
    results; ``KERNEL_NARROW_BUDGET * u(out)`` for a bf16 or f16 result (a bf16
    C is itself good to u = 2^-8 of its value; classical GEMM's own rounding
    is about u, so a plan may add about three more units)."""
    key = _dtype(out)
    if key in NARROW_RESULTS:
        return KERNEL_NARROW_BUDGET * unit_roundoff(key)
    return default_max_error(out)


#: Input types whose sums ``auto`` never forms in the input type: their exponent range is narrower than f32's,
#: so a sum can overflow where classical (f32 accumulation) stays finite.
LIMITED_RANGE_SUMS = frozenset({"f16"})


def narrow_sums_type(schemes: Sequence, K: int, lhs: str, out: str,
                     budget: Optional[float], sum_roundings: int = 1) -> str:
    """The type a narrow-result plan forms its combined operands in: the input
    type ``lhs`` (products then run on narrow operands, half the bytes) where
    :func:`rounded_plan_error` with ``sums = lhs`` (``sum_roundings`` as
    there) is within ``budget``, else
    ``"f32"`` (no rounding of the sums).  ``budget=None`` (no limit) gives
    ``lhs``.  Inputs wider than ``out`` (f32 x f32 -> bf16) give ``"f32"``.
    f16 inputs give ``"f32"`` too: the error model judges precision, not range,
    and a sum of two f16 elements overflows to inf where both pass 32752
    (A of +-40000 gave a NaN result where classical's was finite; break-it
    review of issue 13); f16 sums only where the user asks (``sums=input``)."""
    key = _dtype(lhs)
    if key not in NARROW_RESULTS or key in LIMITED_RANGE_SUMS:
        return "f32"
    if budget is None or rounded_plan_error(schemes, K, out, sums=key,
                                            sum_roundings=sum_roundings) <= budget:
        return key
    return "f32"


def narrow_max_error(K: int, out: str) -> float:
    """Default error budget of a narrow-result (bf16, f16) contraction outside
    the kernel form: ``NARROW_BUDGET_FACTOR`` (1.5) times classical's own
    error on the same contraction, :func:`rounded_plan_error` ``([], K, out)``:
    an f32 accumulation rounded once to ``out``, about ``u(out)``.  (The fixed
    :data:`DEFAULT_MAX_ERROR` budgets are below a bf16 result's own rounding,
    so no plan met them.)  The factor is 1.5, not 2, because the prediction
    of classical is a bound (one rounding errs by at most ``u max|C|``) while
    IREE's data-tiled classical measures 0.5-0.9 u: plans within 1.5x of the
    prediction stay within 2x of the measured classical (docs/accuracy.md).
    Every plan with f32 sums fits for practical K (its error is classical's
    plus the f32 terms); sums rounded to bf16/f16 (``G * ROUND_SUMS`` more
    units) do not for any catalog scheme with G > 1.25.

    Raises:
        ValueError: K < 1 or ``out`` not a float type.
    """
    return NARROW_BUDGET_FACTOR * rounded_plan_error([], K, out)


def classical_error(K: int, acc: str) -> float:
    """Predicted error of classical GEMM: ``CALIBRATION * u(acc) * sqrt(K)``."""
    return predicted_error([], K, acc)


def worst_case_bound(schemes: Sequence, K: int, acc: str) -> float:
    """Ballard et al.'s first-order worst-case bound, in units of ``|A|_max |B|_max``.

    ``(K / (k_1...k_L) + Q_1 + ... + Q_L) * E_1 * ... * E_L * u`` (SIMAX 2016);
    ``K u`` for classical.  ``|C_hat - C|_max <= this * |A|_max |B|_max``.
    """
    ss, KL, Q = _shape_terms(schemes, K)
    e = 1.0
    for s in ss:
        e *= float(scheme_factors(s)["E"])
    return (KL + Q) * e * unit_roundoff(acc)


def default_max_error(acc: str, lhs: Optional[str] = None) -> Optional[float]:
    """Default error budget for :func:`predicted_error` of a contraction (float or None).

    * ``f32`` (and bf16/f16 inputs accumulated in f32): ``1e-4``, about
      1700 u.  With CALIBRATION = 1: classical f32 GEMM predicts 3.8e-6 at
      K = 4096 and 7.6e-6 at K = 16384; two Strassen levels 2.3e-5 and
      three 4.0e-5 at K = 16384 (three fit up to K ~ 10^5); two levels of
      the rational 4x4x4:48 3.2e-5.  So every plan of docs/accuracy.md is
      admitted for practical K, while a plan 25x worse than classical at
      K = 16384 is not.  For bf16 inputs the budget is 40x below their own
      input rounding (2^-8), so the LCMA is invisible next to it.
    * ``f16`` accumulated in f16: ``3e-2`` (about 60 u).  Classical alone
      predicts 1.1e-2 at K = 512, 1.6e-2 at K = 1024 and 3.1e-2 at K = 4096;
      one Strassen level fits up to K ~ 1200 (2.7e-2 at 1024), two up to
      K ~ 350.  f16 accumulation is already coarse; the budget keeps an
      LCMA no worse than what a K ~ 4000 classical f16 GEMM gives.
    * ``bf16`` accumulated in bf16: ``1e-4``, below even classical
      (``u = 2^-8``).  The rewrite never accumulates in bf16 or f16: a
      bf16/f16 *result* accumulates in f32 and gets
      :func:`narrow_max_error` instead (relative to classical's error); the
      ``bf16``/``f16`` entries here describe a bf16/f16 accumulator as such.
    * ``f64``: ``None``: left classical unless the user forces a plan
      (design.md, Numerics).
    * integer types: ``None``; exactness is decided by :func:`.integer_bounds.integer_bound_ok`.

    ``lhs`` is accepted for symmetry with :func:`predicted_error`; the
    budget depends on the accumulator only.
    """
    key = _dtype(acc)
    if key.startswith(("i", "ui")):
        return None
    if key not in DEFAULT_MAX_ERROR:
        raise ValueError(f"no default error budget for element type {acc!r}")
    return DEFAULT_MAX_ERROR[key]

"""Exactness of integer contractions under an LCMA plan: the largest magnitude any intermediate
(combined operand, product partial sum, combine C partial sum) can reach, in exact Python ints, and
whether it fits the accumulator (:func:`integer_bound_ok`, which lcma-rewrite requires before it
rewrites an integer contraction). Ballard et al.'s stability factor gives a cruder bound
(:mod:`.numerics`, whose float error model this is not part of).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

from .numerics import plan_schemes

__all__ = ["integer_worst_case", "integer_bound_ok"]


def _int_rows(s) -> Tuple[list, list, list]:
    """Scheme ``s``'s U, V and W as one row of Python ints per product."""
    rows = lambda arr: [[int(x) for x in arr[r].reshape(-1)] for r in range(s.R)]  # noqa: E731
    return rows(s.U), rows(s.V), rows(s.W)


def _worst(ss: list, K: int, a: int, b: int, out: list) -> int:
    """Bound every intermediate of ``A @ B`` (|A| <= a, |B| <= b, reduction K)
    computed with levels ``ss``; append (value, where) to ``out``.  Returns the
    bound of the final block value (the exact product, ``K a b``)."""
    final = K * a * b
    if not ss:
        out.append((final, f"classical reduction of length {K}"))
        return final
    s, rest = ss[0], ss[1:]
    if K < s.k:
        out.append((final, f"classical reduction of length {K} (too small for {s.name})"))
        return final
    U, V, W = _int_rows(s)
    core = (K // s.k) * s.k
    rem = K - core              # peeled part of K, accumulated classically into C0
    c0 = rem * a * b
    if rem:
        out.append((c0, f"peeled K remainder {rem}"))
    Kb = core // s.k
    pbound = []
    for r in range(s.R):
        ar = sum(abs(x) for x in U[r]) * a      # combine A: every partial sum <= this
        br = sum(abs(x) for x in V[r]) * b
        out.append((ar, f"{s.name}: combine A, product {r}"))
        out.append((br, f"{s.name}: combine B, product {r}"))
        pbound.append(_worst(rest, Kb, ar, br, out))
    n_c = len(W[0])
    for c in range(n_c):
        # combine C: C0 + sum_r W[r,c] P_r in the pass's order (r ascending);
        # a prefix sum is bounded by the sum of its terms' bounds, the last
        # one (the whole sum) by the exact block value.
        running = c0
        terms = [r for r in range(s.R) if W[r][c] != 0]
        for idx, r in enumerate(terms):
            term = abs(W[r][c]) * pbound[r]
            out.append((term, f"{s.name}: combine C term W*P, product {r}"))
            running += term
            if idx < len(terms) - 1:
                out.append((running, f"{s.name}: combine C partial sum, entry {c}"))
        out.append((K * a * b, f"{s.name}: combine C result"))
    return final


def integer_worst_case(schemes: Sequence, K: int, lhs_bits: int,
                       rhs_bits: Optional[int] = None) -> Tuple[int, str]:
    """Largest magnitude any intermediate of the plan can reach (exact int) and where.

    Inputs are signed ``lhs_bits``/``rhs_bits`` integers, so ``|a| <= 2^(bits-1)``
    (``-2^(bits-1)`` is the worst case).  Follows the rewrite's structure
    exactly, with Python ints:

    * combine A of product r: every partial sum of ``sum_ij U[r,i,j] A_ij`` is
      at most ``|U_r|_1 * a`` (likewise ``|V_r|_1 * b`` for B), attained when
      the blocks' signs follow U's;
    * the products recurse with these bounds on K / k; a classical product of
      reduction ``K'`` has partial sums at most ``K' a' b'`` (attained by
      constant blocks of the right signs);
    * combine C: each term ``W[r,c] P_r`` is at most ``|W[r,c]| * K' a' b'``;
      each prefix of the sum at most the sum of its terms' bounds (plus the
      accumulator C0, which holds the peeled K remainder, if any); the full
      sum is the exact block of ``A @ B``, at most ``K a b``.

    The result is an upper bound of the true worst case (a prefix's terms
    need not all attain their bounds with one input); every term's own bound
    is attained.  Assumes a zero-initialised accumulator.

    Raises:
        ValueError: a scheme with non-integer coefficients.
    """
    ss = plan_schemes(schemes)
    for s in ss:
        if not s.is_integral:
            raise ValueError(f"scheme {s.name} has non-integer coefficients")
    rhs_bits = lhs_bits if rhs_bits is None else rhs_bits
    a, b = 2 ** (lhs_bits - 1), 2 ** (rhs_bits - 1)
    out: list = []
    _worst(ss, int(K), a, b, out)
    value, where = max(out, key=lambda t: t[0])
    return value, where


def integer_bound_ok(schemes: Sequence, K: int, lhs_bits: int, acc_bits: int,
                     rhs_bits: Optional[int] = None) -> Tuple[bool, str]:
    """Whether an integer contraction under the plan is exact for every input.

    Exact means: no intermediate (combined operand, partial sum of a product,
    product, partial sum of combine C) can exceed ``2^(acc_bits-1) - 1`` in
    magnitude for any signed ``lhs_bits`` x ``rhs_bits`` input, computed by
    :func:`integer_worst_case` with exact Python ints.  ``[]`` checks
    classical GEMM (``K * 2^(lhs_bits-1) * 2^(rhs_bits-1)``).

    Example: i8 x i8 -> i32, Strassen 2 levels, K = 4096: combined operands
    <= 4 * 128, bottom products <= 1024 * 512^2 = 2^28, worst partial sum of
    the inner combine C (M1 + M4 - M5 of Strassen's C11) 2^29 < 2^31 - 1: ok.
    Ballard's E gives the cruder ``K/4 * E^2 * 2^14 = 144 * 2^24 > 2^31``.

    Schemes with non-integer coefficients are never exact in integers
    (``False``).  Note: MLIR's ``arith.addi/subi/muli`` (no overflow flags)
    wrap modulo ``2^acc_bits``, and an integral scheme is a ring identity, so
    with wrapping arithmetic an overflowing intermediate still gives the right
    C whenever C itself fits (the classical bound).  This check is the
    conservative "no overflow anywhere" criterion, which does not rely on
    wrapping semantics surviving lowering.

    Returns:
        ``(ok, reason)`` where ``reason`` names the worst intermediate.
    """
    ss = plan_schemes(schemes)
    for s in ss:
        if not s.is_integral:
            return False, (f"scheme {s.name} has non-integer coefficients "
                           f"({s.coefficient_set}); not exact in integers")
    limit = 2 ** (acc_bits - 1) - 1
    value, where = integer_worst_case(ss, K, lhs_bits, rhs_bits)
    if value <= limit:
        return True, (f"worst-case magnitude {value} (~2^{math.log2(value):.2f}) at {where} "
                      f"fits i{acc_bits} (limit {limit})")
    return False, (f"worst-case magnitude {value} (~2^{math.log2(value):.2f}) at {where} "
                   f"exceeds i{acc_bits} (limit {limit})")

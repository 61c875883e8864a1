"""The decision: which plan, if any, a contraction gets.

Today this is one documented interim rule (the analytical cost model of the
decision issue replaces it):

    ``scheme=auto levels=auto``: Strassen-Winograd (``winograd``), one level,
    when M, N and K are all >= 1024 and the accumulator is a float type
    narrower than f64 (f32, f16, bf16); otherwise classical.

Under ``auto`` the plan must also meet the error budget (``max-error``, by
default :func:`falcon_mlir.numerics.default_max_error` of the accumulator
type): if Winograd's predicted error is over it, Strassen (smaller stability
factor) is tried, then fewer levels, then classical.

A forced scheme (``scheme=NAME``) is applied wherever it can serve the
contraction; ``levels=L`` with ``scheme=auto`` uses ``winograd`` for every
level, the size rule being checked on the whole contraction.
"""

from __future__ import annotations

from typing import Optional, Tuple

AUTO_MIN_SIZE = 1024
AUTO_SCHEME = "winograd"
#: Used instead when the AUTO_SCHEME plan's predicted error is over the
#: budget (Strassen's stability factor E = 12 against Winograd's 18).
FALLBACK_SCHEME = "strassen"


def interim_rule(M: int, N: int, K: int, acc_is_float: bool, acc_width: int,
                 levels: Optional[int] = None) -> Tuple[Optional[tuple], str]:
    """Apply the interim ``auto`` rule to one contraction.

    Args:
        M, N, K: contraction sizes (elements).
        acc_is_float: whether the accumulator element type is a float type.
        acc_width: its bit width (64 for f64).
        levels: levels asked for (``None`` = auto = 1).

    Returns:
        ``(schemes, reason)``: ``schemes`` is a tuple of scheme names, one per
        level, or ``None`` for classical; ``reason`` says why in one line.
    """
    if not acc_is_float:
        return None, "auto: integer contractions stay classical unless a scheme is forced"
    if acc_width >= 64:
        return None, "auto: f64 stays classical unless a scheme is forced"
    if min(M, N, K) < AUTO_MIN_SIZE:
        return None, (f"auto: min(M, N, K) = {min(M, N, K)} < {AUTO_MIN_SIZE} "
                      "(interim rule: classical below that)")
    L = levels or 1
    return (AUTO_SCHEME,) * L, (f"auto: M, N, K >= {AUTO_MIN_SIZE} and float "
                                f"accumulator (interim rule: {AUTO_SCHEME}, {L} level(s))")

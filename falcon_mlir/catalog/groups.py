"""Output groups of a scheme's combines: which combined blocks one pass forms from which inputs.

A combine (A, B or C) of a grouped plan forms every output of one tile
position from the inputs it needs (U: combined operand ``r`` needs the A
blocks with a nonzero ``U[r]``; W: C block ``(i, l)`` needs the products with
a nonzero ``W[:, i, l]``). Where one pass cannot keep all live inputs (or
accumulators) at once, the outputs are split into groups and each group
loads its inputs again. Both the generated CUDA combine kernels
(:mod:`falcon_mlir.kernels.lcma.combine`) and the decision's traffic model
(:mod:`falcon_mlir.decision.cost`) group this way, so it lives here, with the
schemes.
"""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple

import numpy as np

#: f32 values per thread the live input tiles (or accumulators) of one output group may hold: the
#: register budget of the generated combine kernels.
LIVE_BUDGET = 160
#: The group sizes (live tiles, or accumulators) a combine kernel chooses among.
MAX_LIVE_CHOICES = (16, 32, 64)


def greedy_groups(needs: Sequence[frozenset], max_live: int, merge: bool) -> List[List[int]]:
    """Outputs split into groups, greedily: the next output is the one adding the fewest new inputs (ties: the
    lower index). A split (``merge=False``, combine A/B) keeps each group's input union within ``max_live``;
    a merge (combine C) holds at most ``max_live`` accumulators per group. One group when everything fits.

    Args:
        needs: per output, the set of input indices it reads.
        max_live: input tiles (split) or accumulators (merge) one group may hold (>= 1).
    """
    remaining = list(range(len(needs)))
    groups = []
    while remaining:
        g = [remaining.pop(0)]
        union = set(needs[g[0]])
        while remaining:
            if merge and len(g) >= max_live:
                break
            best = None
            for t in remaining:
                grown = len(union | needs[t])
                if not merge and grown > max_live:
                    continue
                key = (grown - len(union), t)
                if best is None or key < best:
                    best = key
            if best is None:
                break
            g.append(best[1])
            remaining.remove(best[1])
            union |= needs[best[1]]
        groups.append(g)
    return groups


def group_loads(needs: Sequence[frozenset], groups: Sequence[Sequence[int]]) -> int:
    """Input loads of a grouped pass: the sum over groups of the inputs the group reads (each input once
    per group that needs it)."""
    return sum(len(frozenset().union(*(needs[t] for t in g))) for g in groups)


def combine_needs(scheme, role: str) -> List[frozenset]:
    """Per output of combine ``role`` (``"a"``: U, ``"b"``: V, ``"c"``: W) of ``scheme`` the inputs it reads:
    for A/B, input ``i * cols + j`` is block ``(i, j)``; for C, output ``i * n + l`` reads products ``r``."""
    if role in ("a", "b"):
        T = np.asarray(scheme.U if role == "a" else scheme.V, dtype=object)
        return [frozenset(int(x) for x in np.flatnonzero(T[r].reshape(-1) != 0)) for r in range(T.shape[0])]
    W = np.asarray(scheme.W, dtype=object)
    R, m, n = W.shape
    return [frozenset(r for r in range(R) if W[r, i, l] != 0) for i in range(m) for l in range(n)]


def live_tiles(needs: Sequence[frozenset], groups: Sequence[Sequence[int]], merge: bool) -> int:
    """Tiles one group keeps in registers: its input union (split), or its accumulators and one input (merge)."""
    if not merge:
        return max(len(frozenset().union(*(needs[t] for t in g))) for g in groups)
    return max(len(g) for g in groups) + 1


def choose_groups(needs: Sequence[frozenset], merge: bool, vector: int,
                  wide_offsets: bool = False) -> Tuple[int, List[List[int]], int]:
    """The output grouping a generated combine kernel takes: of the group sizes :data:`MAX_LIVE_CHOICES`,
    the one with the fewest input loads (:func:`group_loads`; the smaller size on ties) whose live tiles fit
    :data:`LIVE_BUDGET` f32 values per thread at ``vector // 2`` values per tile or more (``vector``: elements
    of a 16-byte vector of the wider element type, 8 for 16-bit, 4 for f32). Values per thread are at most
    32, halved when there are several groups (the compiler interleaves them) or ``wide_offsets`` (planes past
    2^31 elements: 64-bit offsets cost registers), rounded down to a power of two.

    So 16-bit combines of Strassen^3 split into groups of 16 and read A about 9 times, while f32 ones hold
    all 64 blocks in one group (2 values per thread) and read A once.

    Returns:
        (max_live, groups, values per thread); where no size fits: the smallest size, its groups and
        ``max(1, vector // 2)``.
    """
    best = None
    for cap in MAX_LIVE_CHOICES:
        groups = greedy_groups(needs, cap, merge)
        per_thread = min(32, LIVE_BUDGET // live_tiles(needs, groups, merge))
        if len(groups) > 1 or wide_offsets:
            per_thread //= 2
        if per_thread < max(1, vector // 2):
            continue
        loads = group_loads(needs, groups)
        if best is None or loads < best[0]:
            best = (loads, cap, groups, 1 << int(math.log2(per_thread)))
    if best is None:
        cap = MAX_LIVE_CHOICES[0]
        return cap, greedy_groups(needs, cap, merge), max(1, vector // 2)
    return best[1], best[2], best[3]

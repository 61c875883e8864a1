"""The candidate plans of one contraction (:class:`PlanSearch`): every catalog scheme and order at
level 1, deeper levels from the best :data:`BEAM` of the level before, in the allowed forms and edge
strategies, and one LCMA level over a classical blocking base; each priced by the cost model.
:func:`falcon_mlir.decision.decide` picks among them.
"""

from __future__ import annotations

import math
from typing import Dict, Optional

from .blocking import BLOCKING_BASE_GAIN, blocking_formats
from .cost import MAX_PRODUCTS, CostModel, Estimate, Problem
from .profile import Profile
from .rules import fits, follows_block_rules, grouped_ok, plan_rounding
from .scheme_stats import scheme_stats, single_level_names

__all__ = ["BEAM", "MAX_AUTO_LEVELS", "PlanSearch", "max_auto_levels"]

#: Schemes of level 1 (and plans of level 2) extended to the next level.
BEAM = 5
#: Most levels ``auto`` considers.
MAX_AUTO_LEVELS = 3


def max_auto_levels(profile: Profile) -> int:
    """Most levels ``auto`` searches on ``profile``: :data:`MAX_AUTO_LEVELS`, or the profile's
    ``max_levels`` where lower."""
    return min(MAX_AUTO_LEVELS, profile.max_levels or MAX_AUTO_LEVELS)


class PlanSearch:
    """The candidate plans of one contraction: every scheme and order at level
    1, then deeper levels from the best :data:`BEAM` of the level before, in
    the allowed forms and edge strategies (``seen``: (schemes, form, edge) ->
    estimate)."""

    def __init__(self, cm: CostModel, pb: Problem, profile: Profile, forms, edges,
                 budget: Optional[float] = None):
        self.cm, self.pb, self.profile, self.forms, self.edges = cm, pb, profile, forms, edges
        self.budget = budget  # a bf16/f16 result's sums: the input type where it fits
        self.seen: Dict[tuple, Estimate] = {}
        self.best: Dict[tuple, Estimate] = {}   # fastest estimate per scheme tuple
        self.rprod: Dict[tuple, int] = {}       # products of a scheme tuple
        self.blocking = False                    # also LCMA levels over a blocking base
        self.unfit: Dict[tuple, str] = {}        # (schemes, form) the target's kernels cannot run -> why

    def fits(self, schemes: tuple, form: str) -> bool:
        """Whether the target can run ``schemes`` in ``form`` (:meth:`CostModel.unfit`); if not, the
        reason is kept in :attr:`unfit` (the decision names it where nothing else is left)."""
        k = (schemes, form)
        if k not in self.unfit:
            why = self.cm.unfit(self.pb, schemes, form)
            if why is None:
                return True
            self.unfit[k] = why
        return False

    def aligned(self, schemes) -> bool:
        """Whether every level's blocks follow the profile's block rules (:func:`.rules.follows_block_rules`)."""
        return follows_block_rules(self.pb, schemes, self.profile)

    def consider(self, schemes: tuple, form: str, edge_list=None) -> None:
        """Price ``schemes`` in ``form`` with each edge strategy of ``edge_list`` (default: the allowed
        ones; one where the plan divides exactly) into :attr:`seen` and :attr:`best`, if the plan
        follows the block rules and the target runs it."""
        if not self.aligned(schemes) or not self.fits(schemes, form):
            return
        for edge in edge_list or self.edges:
            k = (schemes, form, edge)
            if k in self.seen:
                if not self.seen[k].parts.get("edges"):
                    break  # divisible: the other edge strategy would be the same code
                continue
            est = self.cm.plan(self.pb, schemes, edge, form,
                               plan_rounding(self.pb, self.profile, schemes, form, self.budget))
            self.seen[k] = est
            if schemes not in self.best or est.seconds < self.best[schemes].seconds:
                self.best[schemes] = est
            if not est.parts.get("edges"):
                break  # divisible at every level: the other edge strategy is the same plan

    def r_of(self, s: tuple) -> int:
        """Products of the scheme tuple ``s`` (the product of its levels' R), memoized."""
        if s not in self.rprod:
            self.rprod[s] = math.prod(scheme_stats(x).R for x in s)
        return self.rprod[s]

    def level_one(self) -> list:
        """Level 1: every scheme and order with the first edge strategy; the
        other edge strategy and the grouped form for the best ones (returned)."""
        forms = self.forms
        names = [n for n in single_level_names() if fits(self.pb, (n,))]
        if self.profile.auto_schemes is not None:
            names = [n for n in names if n in self.profile.auto_schemes]
        names = [n for n in names if self.aligned((n,))]
        if "per-product" not in forms and "grouped" not in forms:  # kernel form only: what the kernels run
            names = [n for n in names if self.fits((n,), "kernel")]
        if "per-product" in forms:
            for n in names:
                self.consider((n,), "per-product", self.edges[:1])
            ranked = sorted(names, key=lambda n: self.best[(n,)].seconds)
        else:
            ranked = sorted(names, key=lambda n: scheme_stats(n).R / (scheme_stats(n).m *
                                                                      scheme_stats(n).k *
                                                                      scheme_stats(n).n))
        top = list(dict.fromkeys(ranked[:BEAM] + [n for n in ("strassen", "winograd")
                                                  if n in names]))
        for n in top:
            if "per-product" in forms:
                self.consider((n,), "per-product")
            if "grouped" in forms and grouped_ok((n,)):
                self.consider((n,), "grouped")
            if "kernel" in forms:
                self.consider((n,), "kernel", ("pad",))
        return top

    def run(self, levels: Optional[int]) -> Dict[tuple, Estimate]:
        """Search up to ``levels`` (or the profile's auto maximum) levels."""
        allowed_levels = [levels] if levels else list(range(1, max_auto_levels(self.profile) + 1))
        max_l = max(allowed_levels)
        top = self.level_one()
        prefixes = [(n,) for n in top]
        for L in range(2, max_l + 1):
            if not top:
                break
            for pre in prefixes:
                for n in top:
                    s = pre + (n,)
                    if self.r_of(s) > MAX_PRODUCTS:
                        continue
                    if "per-product" in self.forms:
                        self.consider(s, "per-product")
                    if "grouped" in self.forms and grouped_ok(s):
                        self.consider(s, "grouped")
                    if "kernel" in self.forms:
                        self.consider(s, "kernel", ("pad",))
            min_r = min(scheme_stats(n).R for n in top)
            level_l = sorted((s for s in self.best
                              if len(s) == L and self.r_of(s) * min_r <= MAX_PRODUCTS),
                             key=lambda s: self.best[s].seconds)
            prefixes = level_l[:BEAM]
        if self.blocking:
            self.over_blocking(top)
        return self.seen

    def over_blocking(self, top) -> None:
        """One LCMA level over a classical blocking base: ``(n, "mxkxn:R")`` for
        each scheme ``n`` in ``top`` and each blocking format its blocks take
        (per-product; the blocking runs inside each of the R products). Kept
        only where predicted :data:`BLOCKING_BASE_GAIN` faster than ``n``
        alone (else the alternatives fill with equal plans)."""
        for n in top:
            alone = self.best.get((n,))
            for f in blocking_formats(self.pb, self.profile, (n,)):
                s = (n, f"{f[0]}x{f[1]}x{f[2]}:{f[0] * f[1] * f[2]}")
                if self.r_of(s) > MAX_PRODUCTS or (s, "per-product", "peel") in self.seen:
                    continue
                est = self.cm.plan(self.pb, s, "peel", "per-product",
                                   plan_rounding(self.pb, self.profile, s, "per-product", self.budget))
                if alone is None or est.seconds * (1.0 + BLOCKING_BASE_GAIN) <= alone.seconds:
                    self.seen[(s, "per-product", "peel")] = est
                    self.best[s] = est

"""How fast a per-product plan's products run for their block shape: the profile's ``product_blocks``.

The ``gemm`` table of a profile prices a GEMM by the square size of its work and footprint
(:meth:`~falcon_mlir.decision.profile.Profile.gemm_rate`). The products of a per-product plan are
not square and not alone: IREE runs the R independent products side by side on the cores, each
an ``Mb x Kb`` by ``Kb x Nb`` GEMM writing an ``Mb x Nb`` block. Measured on a 2-core Zen 4 with B
a module constant (docs/benchmarks.md, *Products by block shape*), products run slower the wider the
block ``Nb`` they write: at 2048x3584x3584, 4x2x4:26 (products 512 x 896 x 1792, Mb x Nb x Kb) took
0.220 s and 4x4x2:26 (512 x 1792 x 896) 0.260 s, where the ``gemm`` table prices both alike.

A profile states this as a power law around a reference block (``"product_blocks"``)::

    "product_blocks": {"reference": [256, 1024, 2048],      # Mb, Nb, Kb (elements)
                       "exponents": [0.0, -0.115, 0.0],     # d log(rate) / d log(size)
                       "range": [[256, 1024], [1024, 3584], [640, 3584]]}

The rate of a product with blocks ``Mb x Nb x Kb`` is the ``gemm`` table's times
``prod_d (clamp(size_d, range_d) / reference_d) ** exponent_d``: 1 at the reference block, the end
values held outside the measured range (as the ``gemm`` table holds its ends).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Tuple

__all__ = ["ProductBlocks"]

_DIMS = ("Mb", "Nb", "Kb")


@dataclass(frozen=True)
class ProductBlocks:
    """A per-product plan's product rate against the profile's ``gemm`` table, by block shape.

    Attributes:
        reference: ``(Mb, Nb, Kb)``, the block (elements) where the factor is 1.
        exponents: ``(e_m, e_n, e_k)``, the rate's exponent in each block size (dimensionless;
            negative: larger blocks run slower).
        range: ``((lo, hi), ...)`` per dimension (elements), where the law was measured; sizes are
            clamped into it.
    """

    reference: Tuple[float, float, float]
    exponents: Tuple[float, float, float]
    range: Tuple[Tuple[float, float], Tuple[float, float], Tuple[float, float]]

    def rate_factor(self, Mb: int, Nb: int, Kb: int) -> float:
        """The product's rate over the ``gemm`` table's for ``Mb x Kb`` by ``Kb x Nb`` blocks
        (dimensionless; the time is divided by it)."""
        f = 1.0
        for size, ref, e, (lo, hi) in zip((Mb, Nb, Kb), self.reference, self.exponents, self.range):
            if e:
                f *= (min(max(float(size), lo), hi) / ref) ** e
        return f

    def to_json(self) -> dict:
        """The profile field's JSON value (the module docstring's form)."""
        return {"reference": list(self.reference), "exponents": list(self.exponents),
                "range": [list(r) for r in self.range]}

    @classmethod
    def from_json(cls, v, where: str) -> "ProductBlocks":
        """Parse the profile field ``product_blocks``.

        Raises:
            falcon_mlir.decision.profile.ProfileError: not the module docstring's form: three
                positive reference sizes, three finite exponents, three ``[lo, hi]`` ranges with
                ``0 < lo <= hi``; the message starts with ``where``.
        """
        from .profile import ProfileError

        def bad(what: str) -> ProfileError:
            return ProfileError(f"{where}: field 'product_blocks' {what}")

        if not isinstance(v, dict) or set(v) != {"reference", "exponents", "range"}:
            raise bad("must be an object with 'reference', 'exponents' and 'range'")

        def numbers(x, name, positive):
            if not (isinstance(x, list) and len(x) == 3 and all(
                    isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a)
                    and (a > 0 or not positive) for a in x)):
                raise bad(f"'{name}' must be three {'positive' if positive else 'finite'} numbers"
                          f" ({', '.join(_DIMS)})")
            return tuple(float(a) for a in x)

        ref = numbers(v["reference"], "reference", True)
        exps = numbers(v["exponents"], "exponents", False)
        rng = v["range"]
        if not (isinstance(rng, list) and len(rng) == 3):
            raise bad("'range' must be three [lo, hi] pairs")
        pairs = []
        for d, r in zip(_DIMS, rng):
            if not (isinstance(r, list) and len(r) == 2 and all(
                    isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a)
                    and a > 0 for a in r) and r[0] <= r[1]):
                raise bad(f"'range' of {d} must be [lo, hi] with 0 < lo <= hi")
            pairs.append((float(r[0]), float(r[1])))
        return cls(ref, exps, tuple(pairs))

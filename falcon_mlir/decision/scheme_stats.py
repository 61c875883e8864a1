"""What the cost model needs to know of a scheme: counts read off its coefficient tables.

For a scheme ``<m,k,n;R>`` of the catalog (``U``: R x m x k, ``V``: R x k x n, ``W``: R x m x n;
design.md's names) and for compositions of schemes (Kronecker products, one name ``a*b``):
which products' operands are real combines and with how many terms (:class:`SchemeStats`,
:func:`scheme_stats`), what the kernel form's grouped combine passes load
(:func:`kernel_combine_loads`), and the names the decision enumerates (:func:`single_level_names`,
:func:`has_blocking`, :func:`lcma_levels`). No times here: :mod:`.cost` prices these counts.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence, Tuple

@dataclass(frozen=True)
class SchemeStats:
    """What the cost model needs of a scheme <m,k,n;R> (U: R x m x k, V: R x k x n, W: R x m x n).

    Attributes:
        name: catalog name (a permutation or a composition is its own name).
        m, k, n, R: format and rank.
        comb_a: nnz of U_r for every product r whose operand is a real
            combine (more than one block, or a coefficient other than 1).
        comb_b: the same for V.
        comb_c: nnz of W[:, i, l] for every output block (i, l) with terms.
        used_a, used_b: blocks of A / B any product reads (grouped combine).
        max_terms: most blocks one grouped combine reads.
        integral: integer coefficients only.
        blocking: classical blocking ``<m,k,n; m*k*n>``
            (:func:`falcon_mlir.catalog.blocking_scheme`): in the per-product
            form its products accumulate into their block of C, so it has no
            combine ops at all (:attr:`combine_c_ops` is 0).
    """

    name: str
    m: int
    k: int
    n: int
    R: int
    comb_a: Tuple[int, ...]
    comb_b: Tuple[int, ...]
    comb_c: Tuple[int, ...]
    used_a: int
    used_b: int
    max_terms: int
    integral: bool
    blocking: bool = False

    @property
    def combine_c_ops(self) -> int:
        """Combine-C ops one per-product level emits: one per output block with
        terms, none for classical blocking (its products accumulate into C)."""
        return 0 if self.blocking else len(self.comb_c)



@lru_cache(maxsize=256)
def kernel_combine_loads(name: str, wide: Tuple[int, int, int] = (2, 2, 2),
                         wide_offsets: Tuple[bool, bool, bool] = (False, False, False)) -> Tuple[int, int, int]:
    """Block loads of the kernel form's combine A, B and C of scheme ``name`` (a composition is one scheme):
    per pass, the blocks each output group reads, summed over the groups (one group reads each block it
    needs once), with the groups the generated kernels take
    (:func:`falcon_mlir.catalog.groups.choose_groups`): ``wide`` is each pass's wider element type in bytes
    (2: 16-bit, whose Strassen^3 combines split into groups of 16; 4: f32, which holds 64 tiles in one
    group), ``wide_offsets`` whether its planes pass 2^31 elements.

    Raises:
        falcon_mlir.catalog.UnknownSchemeError: unknown name.
    """
    from falcon_mlir.catalog import get_scheme
    from falcon_mlir.catalog.groups import choose_groups, combine_needs, group_loads

    s = get_scheme(name)
    out = []
    for role, w, wo in zip(("a", "b", "c"), wide, wide_offsets):
        needs = combine_needs(s, role)
        out.append(group_loads(needs, choose_groups(needs, role == "c", 16 // w, wo)[1]))
    return tuple(out)


@lru_cache(maxsize=4096)
def scheme_stats(name: str) -> SchemeStats:
    """:class:`SchemeStats` of a catalog scheme name (permutations, ``a*b`` compositions).

    Raises:
        falcon_mlir.catalog.UnknownSchemeError: unknown name.
    """
    import numpy as np

    from falcon_mlir.catalog import blocking_format, get_scheme

    if blocking_format(name) is not None:  # classical blocking: known without building the scheme
        m, k, n = blocking_format(name)
        return SchemeStats(name=name, m=m, k=k, n=n, R=m * k * n, comb_a=(), comb_b=(),
                           comb_c=(k,) * (m * n), used_a=m * k, used_b=k * n,
                           max_terms=max(m * k, k * n, k), integral=True, blocking=True)
    if "*" in name:  # a Kronecker composition: combine the parts' statistics exactly
        parts = [scheme_stats(p) for p in name.split("*")]
        st = parts[0]
        for q in parts[1:]:
            st = SchemeStats(
                name=name, m=st.m * q.m, k=st.k * q.k, n=st.n * q.n, R=st.R * q.R,
                comb_a=(), comb_b=(),  # the grouped form combines all operands in one op
                comb_c=tuple(x * y for x in st.comb_c for y in q.comb_c),
                used_a=st.used_a * q.used_a, used_b=st.used_b * q.used_b,
                max_terms=0, integral=st.integral and q.integral,
                blocking=st.blocking and q.blocking)
        return SchemeStats(**{**st.__dict__, "name": name,
                              "max_terms": max(st.used_a, st.used_b, max(st.comb_c))})
    s = get_scheme(name)
    U = np.array(s.U, dtype=object)
    V = np.array(s.V, dtype=object)
    W = np.array(s.W, dtype=object)

    def combs(X):
        out = []
        for r in range(s.R):
            nz = [x for x in X[r].ravel() if x != 0]
            if len(nz) > 1 or (len(nz) == 1 and nz[0] != 1):
                out.append(len(nz))
        return tuple(out)

    nzW = (W != 0).sum(axis=0).ravel()
    used_a = int((U != 0).any(axis=0).sum())
    used_b = int((V != 0).any(axis=0).sum())
    return SchemeStats(name=name, m=s.m, k=s.k, n=s.n, R=s.R, comb_a=combs(U), comb_b=combs(V),
                       comb_c=tuple(int(x) for x in nzW if x > 0), used_a=used_a, used_b=used_b,
                       max_terms=max(used_a, used_b, int(nzW.max())),
                       integral=bool(s.is_integral), blocking=bool(s.is_blocking))


def has_blocking(schemes: Sequence[str]) -> bool:
    """Whether a plan (per-level names) has a classical blocking level
    (:func:`falcon_mlir.catalog.is_blocking_name`); such per-product plans
    are emitted by recursion, never stacked."""
    from falcon_mlir.catalog import is_blocking_name

    return any(is_blocking_name(s) for s in schemes)


def lcma_levels(schemes: Sequence[str]) -> int:
    """The levels of a plan that are not classical blocking (the algebra's levels)."""
    from falcon_mlir.catalog import is_blocking_name

    return sum(1 for s in schemes if not is_blocking_name(s))


@lru_cache(maxsize=1)
def single_level_names() -> Tuple[str, ...]:
    """Every catalog scheme in every distinct permutation of its format (names).

    The 2x2x2 schemes appear under their aliases ``strassen`` and ``winograd``.
    """
    from falcon_mlir.catalog import load_catalog
    from falcon_mlir.catalog import permuted_name  # same naming as Catalog.find

    cat = load_catalog()
    alias = {v.lower(): k for k, v in cat.aliases().items() if k in ("strassen", "winograd")}
    names = []
    for s in cat:
        for perm in sorted(set(itertools.permutations((s.m, s.k, s.n)))):
            nm = permuted_name(s, *perm).lower()
            names.append(alias.get(nm, nm))
    return tuple(dict.fromkeys(names))

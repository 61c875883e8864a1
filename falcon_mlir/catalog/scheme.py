"""The bilinear matrix-multiplication scheme model of falcon-mlir.

Convention (fixed; the rewrite pass depends on it)
--------------------------------------------------
A is ``m x k``, B is ``k x n``, ``C = A @ B``.  A scheme ``<m,k,n;R>`` has
``R`` products::

    M_r    = (sum_ij U[r,i,j] * A[i,j]) * (sum_jl V[r,j,l] * B[j,l])
    C[i,l] = sum_r W[r,i,l] * M_r

``U`` has shape ``(R, m, k)``, ``V`` ``(R, k, n)`` and ``W`` ``(R, m, n)``
(``W`` is *not* transposed).  All coefficients are :class:`fractions.Fraction`
held in numpy ``object`` arrays.  Applied to block matrices, each ``A[i,j]``
is a block, so one *level* turns one GEMM into ``R`` smaller GEMMs.

A scheme is correct iff it satisfies the Brent equations (R. P. Brent,
"Algorithms for matrix multiplication", Stanford CS-TR-70-157, 1970)::

    sum_r U[r,i,j] * V[r,j2,l] * W[r,i2,l2] = [i == i2] [j == j2] [l == l2]

for all index tuples; :meth:`Scheme.verify` checks them exactly.

One file at about 520 lines: it is one class (the scheme, its exact
verification, permutations, Kronecker products and metrics), whose parts
share the coefficient arrays and their cached properties.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, reduce
from typing import Optional, Sequence, Tuple

import numpy as np

__all__ = ["Scheme", "to_fraction_array", "blocking_scheme"]

_INT64_SAFE = 2**62


def to_fraction_array(values, shape: Optional[Sequence[int]] = None) -> np.ndarray:
    """Convert ``values`` to a numpy object array of :class:`Fraction`.

    Args:
        values: anything ``np.asarray`` accepts whose leaves are ints,
            Fractions or strings such as ``"1/2"`` (floats are rejected:
            they are not exact).
        shape: if given, the result is reshaped to it.

    Returns:
        ``np.ndarray`` of dtype ``object`` whose entries are ``Fraction``.

    Raises:
        TypeError: a leaf is a float, bool or another non-exact type.
        ValueError: a string leaf does not parse as a fraction, or the
            reshape fails.
    """
    arr = np.asarray(values, dtype=object)
    out = np.empty(arr.shape, dtype=object)
    flat_in = arr.reshape(-1)
    flat_out = out.reshape(-1)
    for idx, x in enumerate(flat_in):
        if isinstance(x, Fraction):
            flat_out[idx] = x
        elif isinstance(x, (bool, np.bool_)):
            raise TypeError(f"boolean coefficient {x!r} is not allowed")
        elif isinstance(x, (int, np.integer)):
            flat_out[idx] = Fraction(int(x))
        elif isinstance(x, str):
            flat_out[idx] = Fraction(x.strip())
        else:
            raise TypeError(
                f"coefficient {x!r} of type {type(x).__name__} is not exact "
                "(use int, Fraction or a string like '1/2')"
            )
    if shape is not None:
        out = out.reshape(tuple(shape))
    return out


def _lcm_of_denominators(arr: np.ndarray) -> int:
    return reduce(math.lcm, (x.denominator for x in arr.reshape(-1)), 1)


def _scaled_ints(arr: np.ndarray) -> Tuple[np.ndarray, int]:
    """Return (python-int object array, scale) with arr * scale == ints."""
    d = _lcm_of_denominators(arr)
    ints = np.empty(arr.shape, dtype=object)
    fi = ints.reshape(-1)
    for idx, x in enumerate(arr.reshape(-1)):
        fi[idx] = x.numerator * (d // x.denominator)
    return ints, d


def _fmt(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


@dataclass(frozen=True, eq=False)
class Scheme:
    """A bilinear scheme ``<m,k,n;R>`` for ``C = A @ B`` (see module doc).

    Fields:
        m, k, n: format; A is m x k, B is k x n, C is m x n.
        U: object array ``(R, m, k)`` of ``Fraction`` (combine A).
        V: object array ``(R, k, n)`` of ``Fraction`` (combine B).
        W: object array ``(R, m, n)`` of ``Fraction`` (combine C), not
            transposed: ``C[i,l] = sum_r W[r,i,l] M_r``.
        name: catalog name, e.g. ``"3x3x3:23"``.
        source: where the coefficients came from (file inside the source
            data, paper), free text.
        tag: optional short tag (``"winograd"``) distinguishing several
            schemes of the same format and rank.
        aliases: other names the catalog accepts for this scheme.
        reduced_additions_data: additions of the source's
            common-subexpression-reduced program, if the source has one.
        notes: free text (provenance doubts, etc.).

    Construction converts ``U``, ``V``, ``W`` with :func:`to_fraction_array`
    and checks shapes.

    Raises:
        ValueError: shapes inconsistent with ``(m, k, n)`` or with each
            other, or non-positive dimensions.
        TypeError: a coefficient is not exact (e.g. a float).
    """

    m: int
    k: int
    n: int
    U: np.ndarray
    V: np.ndarray
    W: np.ndarray
    name: str = ""
    source: str = ""
    tag: Optional[str] = None
    aliases: Tuple[str, ...] = ()
    reduced_additions_data: Optional[int] = None
    notes: str = ""

    def __post_init__(self):
        m, k, n = int(self.m), int(self.k), int(self.n)
        if min(m, k, n) < 1:
            raise ValueError(f"bad format {m}x{k}x{n}")
        object.__setattr__(self, "m", m)
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "n", n)
        U = to_fraction_array(self.U)
        V = to_fraction_array(self.V)
        W = to_fraction_array(self.W)
        R = U.shape[0] if U.ndim >= 1 else -1
        for label, arr, shp in (("U", U, (R, m, k)), ("V", V, (R, k, n)), ("W", W, (R, m, n))):
            if arr.shape != shp:
                raise ValueError(
                    f"scheme {self.name or '?'}: {label} has shape {arr.shape}, "
                    f"expected {shp} for format {m}x{k}x{n}"
                )
        if R < 1:
            raise ValueError("a scheme needs at least one product")
        for arr in (U, V, W):
            arr.setflags(write=False)
        object.__setattr__(self, "U", U)
        object.__setattr__(self, "V", V)
        object.__setattr__(self, "W", W)
        object.__setattr__(self, "aliases", tuple(self.aliases))

    # ------------------------------------------------------------------ basics
    @property
    def R(self) -> int:
        """Rank: the number of products (int)."""
        return int(self.U.shape[0])

    @property
    def format(self) -> str:
        """The format as ``"mxkxn"`` (str)."""
        return f"{self.m}x{self.k}x{self.n}"

    @property
    def canonical_name(self) -> str:
        """``"mxkxn:R"``, plus ``"-tag"`` when the scheme has a tag."""
        base = f"{self.format}:{self.R}"
        return f"{base}-{self.tag}" if self.tag else base

    def _all_coeffs(self):
        for arr in (self.U, self.V, self.W):
            yield from arr.reshape(-1)

    @cached_property
    def coefficient_set(self) -> str:
        """``"ZT"`` if all coefficients are in {-1,0,1}, ``"Z"`` if all are
        integers, else ``"Q"`` (str)."""
        ring = "ZT"
        for x in self._all_coeffs():
            if x.denominator != 1:
                return "Q"
            if abs(x.numerator) > 1:
                ring = "Z"
        return ring

    @property
    def is_integral(self) -> bool:
        """True iff all coefficients are integers (bool)."""
        return self.coefficient_set != "Q"

    @cached_property
    def is_blocking(self) -> bool:
        """True iff this is classical blocking ``<m,k,n; m*k*n>``
        (:func:`blocking_scheme`): every product multiplies one block of A by
        one block of B (coefficient 1) and adds into one block of C
        (coefficient 1), so combine A and B are block extracts and combine C
        is accumulation (bool)."""
        if self.R != self.m * self.k * self.n:
            return False
        return all(sorted(x for x in X[r].reshape(-1) if x != 0) == [1]
                   for X in (self.U, self.V, self.W) for r in range(self.R))

    # ------------------------------------------------------------ verification
    def _brent_tensor(self) -> Tuple[np.ndarray, int]:
        """Scaled Brent tensor ``T`` (shape (m*k, k*n, m*n), exact ints) and
        the scale ``s`` such that the scheme is valid iff ``T == s * delta``."""
        R = self.R
        Ui, du = _scaled_ints(self.U.reshape(R, -1))
        Vi, dv = _scaled_ints(self.V.reshape(R, -1))
        Wi, dw = _scaled_ints(self.W.reshape(R, -1))
        scale = du * dv * dw
        mx = [max((abs(x) for x in a.reshape(-1)), default=0) for a in (Ui, Vi, Wi)]
        bound = R * mx[0] * mx[1] * mx[2]
        if bound < _INT64_SAFE and scale < _INT64_SAFE:
            Ui, Vi, Wi = (a.astype(np.int64) for a in (Ui, Vi, Wi))
        # else: stay with python ints in object arrays (exact, slower)
        UV = (Ui[:, :, None] * Vi[:, None, :]).reshape(R, -1)  # (R, mk*kn)
        T = (UV.T @ Wi).reshape(Ui.shape[1], Vi.shape[1], Wi.shape[1])
        return T, scale

    def _expected_tensor(self, scale: int) -> np.ndarray:
        m, k, n = self.m, self.k, self.n
        E = np.zeros((m, k, k, n, m, n), dtype=np.int64)
        for i in range(m):
            for j in range(k):
                for l in range(n):
                    E[i, j, j, l, i, l] = 1
        return E.reshape(m * k, k * n, m * n), scale

    def brent_residual(self) -> int:
        """Number of violated Brent equations (int; 0 iff the scheme is
        correct).  Exact integer arithmetic: every factor matrix is scaled by
        the LCM of its denominators, so no rounding is involved.  There are
        ``(m*k) * (k*n) * (m*n)`` equations in all."""
        T, scale = self._brent_tensor()
        E, _ = self._expected_tensor(scale)
        if T.dtype == object:
            diff = T - E * scale
            return int(sum(1 for x in diff.reshape(-1) if x != 0))
        return int(np.count_nonzero(T != E * scale))

    def verify(self) -> bool:
        """True iff the scheme satisfies all Brent equations exactly (bool).

        Exact: U, V and W are scaled to integers by the LCM of their
        denominators, the trilinear sums are formed with int64 (when a bound
        ``R * max|U| * max|V| * max|W|`` shows no overflow is possible) or
        Python ints, and compared with the scaled Kronecker-delta tensor.
        A 6x6x6 rank-153 scheme takes a few milliseconds."""
        return self.brent_residual() == 0

    # ------------------------------------------------------------- symmetries
    def _transposed(self) -> "Scheme":
        # (AB)^T = B^T A^T: <m,k,n> -> <n,k,m>
        return self._derived(
            self.n, self.k, self.m,
            self.V.transpose(0, 2, 1), self.U.transpose(0, 2, 1), self.W.transpose(0, 2, 1),
        )

    def _cycled(self) -> "Scheme":
        # tr(XYZ) = tr(YZX) with X=A (m x k), Y=B (k x n), Z (n x m) paired
        # with W_r^T: <m,k,n> -> <k,n,m>, U' = V, V' = W^T, W' = U^T.
        return self._derived(
            self.k, self.n, self.m,
            self.V, self.W.transpose(0, 2, 1), self.U.transpose(0, 2, 1),
        )

    def _derived(self, m, k, n, U, V, W, name=None) -> "Scheme":
        s = Scheme(m, k, n, U, V, W, name="", source=self.source, tag=self.tag,
                   aliases=(), reduced_additions_data=self.reduced_additions_data,
                   notes=self.notes)
        object.__setattr__(s, "name", name or s.canonical_name)
        return s

    def permuted(self, m: int, k: int, n: int, name: Optional[str] = None) -> "Scheme":
        """The scheme for the format ``<m,k,n>``, a permutation of this one's.

        Uses the standard symmetries of the matrix-multiplication tensor:
        transposition ``(AB)^T = B^T A^T`` maps ``<m,k,n>`` to ``<n,k,m>``
        (per product U' = V^T, V' = U^T, W' = W^T) and the cyclic symmetry
        of ``trace(A B Z)`` (Z the n x m dual of C, paired with W_r^T) maps
        ``<m,k,n>`` to ``<k,n,m>`` (U' = V, V' = W^T, W' = U^T); their
        compositions reach all six orders.

        Rank, coefficient set and ``nnz_u + nnz_v + nnz_w`` are invariant;
        ``naive_additions`` and ``stability_e`` are not in general (they
        treat W differently from U and V), so they are recomputed for the
        result.  Where several symmetries reach the format, one that keeps
        W in the W role is used, and only then is ``reduced_additions``
        (a property of the source's program for this orientation) carried
        over; otherwise it is None.

        Args:
            m, k, n: the wanted format.
            name: name of the result; default ``"mxkxn:R"`` (+ ``-tag``).

        Returns:
            A new :class:`Scheme` (``self`` if the format is already equal
            and no new name is asked for).

        Raises:
            ValueError: ``(m, k, n)`` is not a permutation of the format.
        """
        target = (int(m), int(k), int(n))
        if sorted(target) != sorted((self.m, self.k, self.n)):
            raise ValueError(
                f"{target[0]}x{target[1]}x{target[2]} is not a permutation of {self.format}"
            )
        if target == (self.m, self.k, self.n):
            if name is None or name == self.name:
                return self
            return self._derived(self.m, self.k, self.n, self.U, self.V, self.W, name)
        # breadth-first search over (scheme, roles); roles[i] says which
        # original factor (U, V or W) plays role i (U, V, W) now.
        start = (self, ("U", "V", "W"))
        seen = {((self.m, self.k, self.n), start[1])}
        queue = deque([start])
        hits = []
        while queue:
            s, roles = queue.popleft()
            for nxt, nroles in ((s._cycled(), (roles[1], roles[2], roles[0])),
                                (s._transposed(), (roles[1], roles[0], roles[2]))):
                state = ((nxt.m, nxt.k, nxt.n), nroles)
                if state in seen:
                    continue
                seen.add(state)
                if state[0] == target:
                    hits.append((nxt, nroles))
                queue.append((nxt, nroles))
        hits.sort(key=lambda h: h[1][2] != "W")  # stable: W-preserving first
        result, roles = hits[0]
        object.__setattr__(result, "name", name or result.canonical_name)
        if roles[2] != "W":
            object.__setattr__(result, "reduced_additions_data", None)
        return result

    # ------------------------------------------------------------ composition
    def kron(self, other: "Scheme", name: Optional[str] = None) -> "Scheme":
        """Kronecker composition ``self ⊗ other`` (self = outer level).

        Result format ``(m1*m2, k1*k2, n1*n2)``, rank ``R1*R2``, product
        index ``r = r1*R2 + r2``, row index ``i = i1*m2 + i2`` (i1 the outer
        block), same for j and l; so one application on contiguous blocks
        equals applying ``self`` and then ``other`` to each product's blocks.
        Coefficients are products of Fractions (exact).

        Args:
            other: the inner scheme.
            name: name of the result; default ``"<self.name>*<other.name>"``.

        Returns:
            A new :class:`Scheme` (``reduced_additions_data`` is None).
        """
        def kr(X, Y):
            a, b, c = X.shape
            d, e, f = Y.shape
            out = X[:, None, :, None, :, None] * Y[None, :, None, :, None, :]
            return out.reshape(a * d, b * e, c * f)

        return Scheme(
            self.m * other.m, self.k * other.k, self.n * other.n,
            kr(self.U, other.U), kr(self.V, other.V), kr(self.W, other.W),
            name=name or f"{self.name or self.canonical_name}*{other.name or other.canonical_name}",
            source=f"composition of [{self.source}] and [{other.source}]",
        )

    # ------------------------------------------------------------- evaluation
    def evaluate(self, A, B) -> np.ndarray:
        """Reference float64 evaluation of one level of the scheme.

        Args:
            A: array ``(m*p, k*q)``; with ``p = q = 1`` the entries are
                scalars, otherwise ``A`` is split into ``m x k`` contiguous
                blocks of size ``p x q``.
            B: array ``(k*q, n*s)``, split into ``k x n`` blocks.

        Returns:
            ``C`` as float64 array ``(m*p, n*s)``; each product of blocks is
            a plain matmul (so this is one level, not recursive).

        Raises:
            ValueError: shapes are not multiples of the format or do not
                agree on the reduction dimension.
        """
        A = np.asarray(A, dtype=np.float64)
        B = np.asarray(B, dtype=np.float64)
        if A.ndim != 2 or B.ndim != 2:
            raise ValueError("evaluate expects 2-D A and B")
        m, k, n = self.m, self.k, self.n
        if A.shape[0] % m or A.shape[1] % k or B.shape[0] % k or B.shape[1] % n:
            raise ValueError(
                f"shapes {A.shape} x {B.shape} are not multiples of format {self.format}"
            )
        p, q = A.shape[0] // m, A.shape[1] // k
        q2, s = B.shape[0] // k, B.shape[1] // n
        if q != q2:
            raise ValueError(f"inner dimensions differ: {A.shape} x {B.shape}")
        Uf, Vf, Wf = (x.astype(np.float64) for x in (self.U, self.V, self.W))
        Ab = A.reshape(m, p, k, q)
        Bb = B.reshape(k, q, n, s)
        L = np.einsum("rij,ipjq->rpq", Uf, Ab)
        Rt = np.einsum("rjl,jqls->rqs", Vf, Bb)
        P = L @ Rt  # (R, p, s)
        C = np.einsum("ril,rps->ipls", Wf, P)
        return C.reshape(m * p, n * s)

    # ---------------------------------------------------------------- metrics
    @property
    def nnz_u(self) -> int:
        """Number of nonzero coefficients of U (int)."""
        return int(sum(1 for x in self.U.reshape(-1) if x != 0))

    @property
    def nnz_v(self) -> int:
        """Number of nonzero coefficients of V (int)."""
        return int(sum(1 for x in self.V.reshape(-1) if x != 0))

    @property
    def nnz_w(self) -> int:
        """Number of nonzero coefficients of W (int)."""
        return int(sum(1 for x in self.W.reshape(-1) if x != 0))

    @cached_property
    def naive_additions(self) -> int:
        """Additions of the straightforward program (int):
        ``sum_r (nnz(U_r)-1) + sum_r (nnz(V_r)-1) + sum_{i,l} (nnz(W[:,i,l])-1)``
        (terms clamped at 0).  Strassen: 18, Strassen-Winograd: 24 (15 after
        common-subexpression reduction)."""
        R = self.R
        nzU = (self.U.reshape(R, -1) != 0).sum(axis=1)
        nzV = (self.V.reshape(R, -1) != 0).sum(axis=1)
        nzW = (self.W.reshape(R, -1) != 0).sum(axis=0)
        return int(sum(max(int(x) - 1, 0) for arr in (nzU, nzV, nzW) for x in arr))

    @property
    def reduced_additions(self) -> Optional[int]:
        """Additions after common-subexpression reduction, as given by the
        source's addition-reduced program (FastMatrixMultiplication
        ``addition_reduced_ZT``), or None where the source has none (int or
        None)."""
        return self.reduced_additions_data

    @cached_property
    def stability_e(self) -> Fraction:
        """Stability factor E (Ballard, Benson, Druinsky, Lipshitz, Schwartz,
        "Improving the numerical stability of fast matrix multiplication",
        SIMAX 37(4), 2016): ``e_c = sum_r |W[r,c]| * ||U_r||_1 * ||V_r||_1``
        over entries c of C, ``E = max_c e_c``.  Returned exactly as a
        Fraction (Strassen 12, Strassen-Winograd 18, Laderman 35)."""
        R = self.R
        nu = [sum(abs(x) for x in self.U[r].reshape(-1)) for r in range(R)]
        nv = [sum(abs(x) for x in self.V[r].reshape(-1)) for r in range(R)]
        Wf = self.W.reshape(R, -1)
        best = Fraction(0)
        for c in range(Wf.shape[1]):
            e = sum((abs(Wf[r, c]) * nu[r] * nv[r] for r in range(R)), Fraction(0))
            best = max(best, e)
        return best

    # ------------------------------------------------------------------ misc
    def to_dict(self) -> dict:
        """JSON-ready dict of the scheme (the catalog data format): each of
        U, V, W is a list of R strings, one per product, holding the
        product's matrix row-major as space-separated integers or fractions
        ``"p/q"``."""
        def rows(arr):
            R = arr.shape[0]
            return [" ".join(_fmt(x) for x in arr[r].reshape(-1)) for r in range(R)]

        d = {
            "name": self.name,
            "m": self.m, "k": self.k, "n": self.n, "R": self.R,
            "tag": self.tag,
            "aliases": list(self.aliases),
            "source": self.source,
            "coefficient_set": self.coefficient_set,
            "reduced_additions": self.reduced_additions_data,
            "notes": self.notes,
            "U": rows(self.U), "V": rows(self.V), "W": rows(self.W),
        }
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Scheme":
        """Inverse of :meth:`to_dict`.

        Raises:
            KeyError: a required key is missing.
            ValueError: a row has the wrong number of entries or an entry is
                not a fraction.
        """
        m, k, n = int(d["m"]), int(d["k"]), int(d["n"])

        def parse(rows, a, b):
            out = []
            for row in rows:
                toks = row.split()
                if len(toks) != a * b:
                    raise ValueError(f"scheme {d.get('name')}: row {row!r} has {len(toks)} entries, expected {a*b}")
                out.append([Fraction(t) for t in toks])
            return to_fraction_array(out).reshape(len(rows), a, b)

        return cls(
            m, k, n, parse(d["U"], m, k), parse(d["V"], k, n), parse(d["W"], m, n),
            name=d.get("name", ""), source=d.get("source", ""), tag=d.get("tag"),
            aliases=tuple(d.get("aliases", ())),
            reduced_additions_data=d.get("reduced_additions"), notes=d.get("notes", ""),
        )

    def matrices_text(self) -> str:
        """Human-readable listing of U_r, V_r, W_r per product (str)."""
        lines = []
        for r in range(self.R):
            def mat(X):
                return "[" + "; ".join(" ".join(_fmt(x) for x in row) for row in X) + "]"
            lines.append(f"M{r+1:<3} U={mat(self.U[r])}  V={mat(self.V[r])}  W={mat(self.W[r])}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Scheme({self.name or self.canonical_name!r}, {self.format}, R={self.R}, {self.coefficient_set})"


def blocking_scheme(m: int, k: int, n: int) -> Scheme:
    """Classical blocking as a scheme: ``<m,k,n; m*k*n>``, named ``"mxkxn:R"``.

    Product ``r = (i*k + j)*n + l`` multiplies block ``A[i,j]`` by block
    ``B[j,l]`` and adds into ``C[i,l]``: the R = m*k*n block products of
    classical GEMM, no algebra. As a plan level it splits one GEMM into
    smaller ones (the x86 host's IREE GEMM runs 4096^3 f32 at 0.6x the rate
    of 2048^3: docs/benchmarks.md); the rewrite emits its products as
    matmuls accumulating into their block of C (no combine ops).

    Args:
        m, k, n: the block format (each >= 1).

    Returns:
        :class:`Scheme` with U, V, W of 0/1 entries (stability factor E = k).

    Raises:
        ValueError: a size below 1.
    """
    m, k, n = int(m), int(k), int(n)
    if min(m, k, n) < 1:
        raise ValueError(f"bad format {m}x{k}x{n}")
    R = m * k * n
    U = np.zeros((R, m, k), dtype=int)
    V = np.zeros((R, k, n), dtype=int)
    W = np.zeros((R, m, n), dtype=int)
    for i in range(m):
        for j in range(k):
            for l in range(n):
                r = (i * k + j) * n + l
                U[r, i, j] = V[r, j, l] = W[r, i, l] = 1
    return Scheme(m, k, n, U.tolist(), V.tolist(), W.tolist(), name=f"{m}x{k}x{n}:{R}",
                  source="classical blocking (generated)")

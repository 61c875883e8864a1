"""Loaders of the text formats of the FMM catalogue and the flip-graph
papers: ``.m`` (Kauers/Moosbauer: ``{{U_r, V_r, W_r}, ...}`` with U ``m x k``,
V ``k x n``, W ``n x m``), ``.exp`` (trace form, one term per line, ``c_ij``
goes to ``C[j,i]``) and ``.mpl`` (Maple ``Triad`` lists, W ``n x m``); each
returns a :class:`~falcon_mlir.catalog.scheme.Scheme` in the project's
convention (see :mod:`falcon_mlir.catalog.loaders`)."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from .parsing import Poly, PolyParser, SchemeLoadError, format_from_name, parse_exact, tokenize
from .scheme import Scheme, to_fraction_array

__all__ = ["load_fmm_m", "load_fmm_exp", "load_fmm_mpl"]


# --------------------------------------------------------------------------
# .m (nested braces)
# --------------------------------------------------------------------------
def _parse_braces(text: str, path):
    """Parse ``{...}`` nested lists whose leaves are exact expressions."""
    pos = 0
    n = len(text)

    def skip():
        nonlocal pos
        while pos < n and text[pos].isspace():
            pos += 1

    def value():
        nonlocal pos
        skip()
        if pos < n and text[pos] == "{":
            pos += 1
            items = []
            skip()
            if pos < n and text[pos] == "}":
                pos += 1
                return items
            while True:
                items.append(value())
                skip()
                if pos >= n:
                    raise SchemeLoadError(f"{path}: unterminated '{{'")
                if text[pos] == ",":
                    pos += 1
                elif text[pos] == "}":
                    pos += 1
                    return items
                else:
                    raise SchemeLoadError(f"{path}: unexpected {text[pos]!r} at offset {pos}")
        start = pos
        while pos < n and text[pos] not in ",{}":
            pos += 1
        return parse_exact(text[start:pos])

    out = value()
    skip()
    if pos != n:
        raise SchemeLoadError(f"{path}: trailing text at offset {pos}")
    return out


def load_fmm_m(path, **kw) -> Scheme:
    """Load a Kauers/Moosbauer ``.m`` file.

    Layout: ``{{U_1, V_1, W_1}, ...}`` with U ``m x k``, V ``k x n``, W
    ``n x m`` nested lists; ``C = sum_r <U_r,A> <V_r,B> W_r^T``.  Entries may
    be fractions.  The format is read from the matrix shapes.

    Raises:
        SchemeLoadError: syntax error or ragged shapes.
    """
    text = Path(path).read_text()
    terms = _parse_braces(text, path)
    if not terms or any(len(t) != 3 for t in terms):
        raise SchemeLoadError(f"{path}: expected a list of {{U, V, W}} triples")
    try:
        U = np.array(terms[0][0], dtype=object)
        m, k = U.shape
        n = np.array(terms[0][1], dtype=object).shape[1]
        Us = to_fraction_array([t[0] for t in terms], (len(terms), m, k))
        Vs = to_fraction_array([t[1] for t in terms], (len(terms), k, n))
        Ws = to_fraction_array([t[2] for t in terms], (len(terms), n, m))
    except ValueError as exc:
        raise SchemeLoadError(f"{path}: inconsistent matrix shapes ({exc})") from None
    kw.setdefault("source", str(path))
    return Scheme(m, k, n, Us, Vs, Ws.transpose(0, 2, 1).copy(), **kw)


# --------------------------------------------------------------------------
# .exp (trace form, one term per line)
# --------------------------------------------------------------------------
_EXP_VAR = re.compile(r"^([abc])(\d)(\d)$")


def _split_factors(line: str, path) -> List[Poly]:
    """Split one ``.exp`` line into its top-level factors, each parsed as a
    polynomial.  At parenthesis depth 0 the line is a product, so a ``+``
    or ``-`` there is the sign of the next factor (``(..) -b13 (..)``);
    factors are separated by ``*`` or juxtaposition; ``/ number`` divides."""
    toks = tokenize(line)
    factors: List[Poly] = []
    sign = 1
    i = 0
    while i < len(toks):
        kind, val = toks[i]
        if (kind, val) in (("op", "+"), ("op", "-")):
            sign = -sign if val == "-" else sign
            i += 1
            continue
        if (kind, val) == ("op", "*"):
            i += 1
            continue
        if (kind, val) == ("op", "/"):
            if i + 1 >= len(toks) or toks[i + 1][0] != "num" or int(toks[i + 1][1]) == 0:
                raise SchemeLoadError(f"{path}: bad division in {line!r}")
            factors.append({(): Fraction(1, int(toks[i + 1][1]))})
            i += 2
            continue
        if (kind, val) == ("op", "("):
            depth, j = 0, i
            while j < len(toks):
                if toks[j] == ("op", "("):
                    depth += 1
                elif toks[j] == ("op", ")"):
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if depth != 0:
                raise SchemeLoadError(f"{path}: unbalanced parentheses in {line!r}")
            text = " ".join(t[1] for t in toks[i + 1:j])
            i = j + 1
        elif kind in ("num", "var"):
            text = val
            i += 1
        else:
            raise SchemeLoadError(f"{path}: unexpected {val!r} in {line!r}")
        poly = PolyParser(text).parse()
        if any(len(mono) > 1 for mono in poly):
            # a parenthesised product such as "(-a13 (b..) (c..))": split it
            inner = _split_factors(text, path)
            if sign < 0:
                inner.append({(): Fraction(-1)})
                sign = 1
            factors.extend(inner)
            continue
        if sign < 0:
            poly = {mono: -c for mono, c in poly.items()}
            sign = 1
        factors.append(poly)
    if sign < 0:
        raise SchemeLoadError(f"{path}: dangling sign in {line!r}")
    return factors


def _linear_factors(line: str, path):
    """Turn one ``.exp`` line into (fa, fb, fc): dicts mapping (row, col)
    (1-based) to the coefficient of a_rc, b_rc, c_rc.  Constant factors are
    multiplied into the a-factor; the source's own scaling is kept."""
    scalar = Fraction(1)
    forms: Dict[str, Dict[Tuple[int, int], Fraction]] = {}
    for poly in _split_factors(line, path):
        if set(poly) <= {()}:
            scalar *= poly.get((), Fraction(0))
            continue
        letters = set()
        form: Dict[Tuple[int, int], Fraction] = {}
        for mono, c in poly.items():
            if len(mono) != 1:
                raise SchemeLoadError(f"{path}: factor of {line!r} is not linear")
            mt = _EXP_VAR.match(mono[0])
            if mt is None:
                raise SchemeLoadError(f"{path}: unknown variable {mono[0]!r} in {line!r}")
            letters.add(mt.group(1))
            form[(int(mt.group(2)), int(mt.group(3)))] = c
        if len(letters) != 1:
            raise SchemeLoadError(f"{path}: factor of {line!r} mixes variables {sorted(letters)}")
        (letter,) = letters
        if letter in forms:
            raise SchemeLoadError(f"{path}: two {letter}-factors in {line!r}")
        forms[letter] = form
    if set(forms) != {"a", "b", "c"} or scalar == 0:
        raise SchemeLoadError(f"{path}: term {line!r} is not a product a*b*c")
    fa = {key: c * scalar for key, c in forms["a"].items()}
    return fa, forms["b"], forms["c"]


def load_fmm_exp(path, fmt: Optional[Tuple[int, int, int]] = None, **kw) -> Scheme:
    """Load a flip-graph ``.exp`` file: one product per line, written as a
    product of linear forms in ``a_ij``, ``b_jl``, ``c_li`` (trace form: a
    ``c_ij`` coefficient goes to ``C[j,i]``), e.g.
    ``(a11+a22)*(b11+b22)*(c11+c22)``, ``-(a21)*(b13-b11)*c12`` or
    ``a33 b33 c33``.  Each line is expanded exactly into a trilinear
    polynomial per factor; constant factors go into the a-factor.

    Args:
        path: the file.
        fmt: ``(m, k, n)``; default: from the file name (``-223-`` or
            ``555m93``), else the largest indices used.

    Raises:
        SchemeLoadError: a line is not a product of three linear forms.
    """
    terms = []
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        terms.append(_linear_factors(line, path))
    if not terms:
        raise SchemeLoadError(f"{path}: no terms")
    if fmt is None:
        fmt = format_from_name(path)
    if fmt is None:
        m = max(max(i for i, _ in fa) for fa, _, _ in terms)
        m = max(m, max(y for _, _, fc in terms for _, y in fc))
        k = max(max(j for _, j in fa) for fa, _, _ in terms)
        n = max(max(l for _, l in fb) for _, fb, _ in terms)
        fmt = (m, k, n)
    m, k, n = fmt
    R = len(terms)
    U = np.full((R, m, k), Fraction(0), dtype=object)
    V = np.full((R, k, n), Fraction(0), dtype=object)
    W = np.full((R, m, n), Fraction(0), dtype=object)
    try:
        for r, (fa, fb, fc) in enumerate(terms):
            for (i, j), c in fa.items():
                U[r, i - 1, j - 1] = c
            for (j, l), c in fb.items():
                V[r, j - 1, l - 1] = c
            for (l, i), c in fc.items():  # c_li -> C[i,l]
                W[r, i - 1, l - 1] = c
    except IndexError:
        raise SchemeLoadError(f"{path}: index out of range for format {m}x{k}x{n}") from None
    kw.setdefault("source", str(path))
    return Scheme(m, k, n, U, V, W, **kw)


# --------------------------------------------------------------------------
# .mpl (Maple TriadSet)
# --------------------------------------------------------------------------
_MPL_MATRIX = re.compile(r"Matrix\(\s*(\d+)\s*,\s*(\d+)\s*,\s*\[\[(.*?)\]\]\s*\)", re.S)


def load_fmm_mpl(path, **kw) -> Scheme:
    """Load a FMM-catalogue Maple file: ``Tensor:=TriadSet([Triad([Matrix(m,
    k,[[..]]), Matrix(k,n,[[..]]), Matrix(n,m,[[..]])]), ...])``, meaning
    ``C = sum_r Trace(U_r^T A) Trace(V_r^T B) W_r^T`` (W is ``n x m``).
    Entries may be unevaluated arithmetic such as ``(1*1-0*1+1)``; they are
    evaluated exactly.

    Raises:
        SchemeLoadError: no TriadSet, or matrices not in triples of
            consistent shapes.
    """
    text = Path(path).read_text()
    start = text.find("TriadSet(")
    if start < 0:
        raise SchemeLoadError(f"{path}: no TriadSet")
    body = text[start:]
    mats = []
    for mt in _MPL_MATRIX.finditer(body):
        r, c = int(mt.group(1)), int(mt.group(2))
        rows = mt.group(3).split("],[")
        if len(rows) != r:
            raise SchemeLoadError(f"{path}: Matrix({r},{c}) with {len(rows)} rows")
        mat = []
        for row in rows:
            ents = row.split(",")
            if len(ents) != c:
                raise SchemeLoadError(f"{path}: Matrix({r},{c}) row with {len(ents)} entries")
            mat.append([parse_exact(e) for e in ents])
        mats.append(mat)
    if not mats or len(mats) % 3:
        raise SchemeLoadError(f"{path}: {len(mats)} matrices, not triples")
    n_triads = body.count("Triad(")
    if n_triads != len(mats) // 3:
        raise SchemeLoadError(f"{path}: {n_triads} Triads but {len(mats)} matrices")
    m, k = len(mats[0]), len(mats[0][0])
    n = len(mats[1][0])
    R = len(mats) // 3
    try:
        U = to_fraction_array(mats[0::3], (R, m, k))
        V = to_fraction_array(mats[1::3], (R, k, n))
        Wt = to_fraction_array(mats[2::3], (R, n, m))
    except ValueError as exc:
        raise SchemeLoadError(f"{path}: inconsistent shapes ({exc})") from None
    kw.setdefault("source", str(path))
    return Scheme(m, k, n, U, V, Wt.transpose(0, 2, 1).copy(), **kw)

"""Loaders for the public scheme sources, each returning a :class:`Scheme`.

Every loader converts its source's layout to the project convention
(``U (R,m,k)``, ``V (R,k,n)``, ``W (R,m,n)`` with
``C[i,l] = sum_r W[r,i,l] M_r``; see :mod:`falcon_mlir.catalog.scheme`).
All arithmetic is exact (``fractions.Fraction``); entries written as
unevaluated arithmetic (``"(1*1-0*1+1)"``, ``"-1/8"``) are evaluated by a
small exact expression parser of this module, never by ``eval``.

Sources and layouts (see the source folder's README):

* AlphaTensor ``factorizations_r.npz`` (google-deepmind/alphatensor, data
  CC-BY-4.0): U ``(m*k, R)`` with A[i,j] at row ``i*k+j``, V ``(k*n, R)``,
  W ``(n*m, R)`` with C[i,l] at row ``l*m+i``.
* FastMatrixMultiplication JSON (dronperminov/FastMatrixMultiplication,
  MIT): ``u``/``v``/``w`` as ``R x (m*k)``, ``R x (k*n)``, ``R x (n*m)``
  (C transposed), fractions as strings; the ``*_reduced.json`` variant holds
  a straight-line program with fresh intermediate variables.
* ``.m`` (Kauers/Moosbauer): ``{{U_r, V_r, W_r}, ...}`` with U ``m x k``,
  V ``k x n``, W ``n x m``; ``C = sum_r <U_r,A><V_r,B> W_r^T``.
* ``.exp`` (flip graphs): one term per line ``(lin a)(lin b)(lin c)`` in
  trace form, ``c_ij`` goes to ``C[j,i]``.
* ``.mpl`` (FMM catalogue, Maple): ``Triad([Matrix(m,k,..), Matrix(k,n,..),
  Matrix(n,m,..)])``, W is ``n x m``.
* fast-matmul text (arbenson/fast-matmul, BSD-2): U rows = entries of A
  row-major, columns = products, ``#``, V likewise, ``#``, W rows = entries
  of C row-major (not transposed).
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from .scheme import Scheme, to_fraction_array

__all__ = [
    "SchemeLoadError",
    "load_alphatensor_npz",
    "alphatensor_keys",
    "load_fmm_json",
    "load_fmm_m",
    "load_fmm_exp",
    "load_fmm_mpl",
    "load_fast_matmul",
    "load_scheme_file",
    "parse_exact",
]


class SchemeLoadError(ValueError):
    """A source file could not be parsed or is inconsistent."""


# --------------------------------------------------------------------------
# exact expression evaluation (polynomials with Fraction coefficients)
# --------------------------------------------------------------------------
_TOKEN_RE = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<var>[A-Za-z_][A-Za-z_0-9]*)|(?P<op>[-+*/^()]))"
)

Poly = Dict[Tuple[str, ...], Fraction]


def _tokenize(text: str) -> List[Tuple[str, str]]:
    toks = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        mt = _TOKEN_RE.match(text, pos)
        if not mt or mt.end() == pos:
            if text[pos:].strip() == "":
                break
            raise SchemeLoadError(f"cannot parse {text!r} at {text[pos:pos+20]!r}")
        pos = mt.end()
        if mt.group("num") is not None:
            if "." in mt.group("num"):
                raise SchemeLoadError(f"inexact decimal {mt.group('num')!r} in {text!r}")
            toks.append(("num", mt.group("num")))
        elif mt.group("var") is not None:
            toks.append(("var", mt.group("var")))
        else:
            toks.append(("op", mt.group("op")))
    return toks


def _padd(p: Poly, q: Poly, sign: int = 1) -> Poly:
    out = dict(p)
    for mono, c in q.items():
        v = out.get(mono, Fraction(0)) + sign * c
        if v:
            out[mono] = v
        else:
            out.pop(mono, None)
    return out


def _pmul(p: Poly, q: Poly) -> Poly:
    out: Poly = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            mono = tuple(sorted(m1 + m2))
            v = out.get(mono, Fraction(0)) + c1 * c2
            if v:
                out[mono] = v
            else:
                out.pop(mono, None)
    return out


class _Parser:
    """Recursive-descent parser: + - * / ^ parentheses, juxtaposition as
    multiplication, integer and fraction literals, variables."""

    def __init__(self, text: str):
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def take(self):
        t = self.peek()
        self.i += 1
        return t

    def parse(self) -> Poly:
        p = self.expr()
        if self.i != len(self.toks):
            raise SchemeLoadError(f"trailing input in {self.text!r}")
        return p

    def expr(self) -> Poly:
        p = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            p = _padd(p, self.term(), 1 if op == "+" else -1)
        return p

    def term(self) -> Poly:
        p = self.unary()
        while True:
            kind, val = self.peek()
            if (kind, val) == ("op", "*"):
                self.take()
                p = _pmul(p, self.unary())
            elif (kind, val) == ("op", "/"):
                self.take()
                q = self.unary()
                if set(q) - {()} or not q.get((), 0):
                    raise SchemeLoadError(f"division by a non-constant or zero in {self.text!r}")
                p = {mono: c / q[()] for mono, c in p.items()}
            elif kind in ("num", "var") or (kind, val) == ("op", "("):
                p = _pmul(p, self.unary())  # juxtaposition
            else:
                return p

    def unary(self) -> Poly:
        kind, val = self.peek()
        if (kind, val) == ("op", "-"):
            self.take()
            return {mono: -c for mono, c in self.unary().items()}
        if (kind, val) == ("op", "+"):
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> Poly:
        base = self.atom()
        if self.peek() == ("op", "^"):
            self.take()
            kind, val = self.take()
            if kind != "num":
                raise SchemeLoadError(f"bad exponent in {self.text!r}")
            out: Poly = {(): Fraction(1)}
            for _ in range(int(val)):
                out = _pmul(out, base)
            return out
        return base

    def atom(self) -> Poly:
        kind, val = self.take()
        if kind == "num":
            return {(): Fraction(int(val))} if int(val) else {}
        if kind == "var":
            return {(val,): Fraction(1)}
        if (kind, val) == ("op", "("):
            p = self.expr()
            if self.take() != ("op", ")"):
                raise SchemeLoadError(f"missing ')' in {self.text!r}")
            return p
        raise SchemeLoadError(f"unexpected {val!r} in {self.text!r}")


def parse_exact(text: str) -> Fraction:
    """Evaluate a constant arithmetic expression exactly.

    Args:
        text: e.g. ``"-1/8"``, ``"(1*1-0*1+1)"``, ``"-(0-1)"``.

    Returns:
        The value as ``Fraction``.

    Raises:
        SchemeLoadError: syntax error, decimals, variables, or division by
            zero.
    """
    poly = _Parser(text).parse()
    if set(poly) - {()}:
        raise SchemeLoadError(f"expression {text!r} is not a constant")
    return poly.get((), Fraction(0))


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def _check_dims(rows: int, cols_expected: int, what: str, path) -> None:
    if rows != cols_expected:
        raise SchemeLoadError(f"{path}: {what} has {rows} entries, expected {cols_expected}")


def _fmt_from_name(path) -> Optional[Tuple[int, int, int]]:
    name = Path(path).name
    mt = re.search(r"(\d)x(\d)x(\d)", name) or re.search(r"(?<!\d)(\d)(\d)(\d)(?=[-m_]|$)", name)
    if mt:
        return tuple(int(x) for x in mt.groups())  # type: ignore[return-value]
    return None


def _flat_to_scheme(m, k, n, Uf, Vf, Wct, **kw) -> Scheme:
    """Uf (R, m*k) row-major A, Vf (R, k*n), Wct (R, n*m) with C[i,l] at l*m+i."""
    R = len(Uf)
    U = to_fraction_array(Uf).reshape(R, m, k)
    V = to_fraction_array(Vf).reshape(R, k, n)
    W = to_fraction_array(Wct).reshape(R, n, m).transpose(0, 2, 1).copy()
    return Scheme(m, k, n, U, V, W, **kw)


# --------------------------------------------------------------------------
# AlphaTensor npz
# --------------------------------------------------------------------------
def load_alphatensor_npz(path, key: str, **kw) -> Scheme:
    """Load one scheme of AlphaTensor's ``factorizations_r.npz``.

    Layout: U ``(m*k, R)`` (A[i,j] at row ``i*k+j``), V ``(k*n, R)``, W
    ``(n*m, R)`` with C[i,l] at row ``l*m+i``; square keys hold an int array
    ``(3, n^2, R)``, rectangular keys an object array of 3 arrays.

    Args:
        path: the ``.npz`` file.
        key: ``"m,k,n"``, e.g. ``"3,4,5"``.
        **kw: extra :class:`Scheme` fields (name, source, ...).

    Returns:
        :class:`Scheme` ``<m,k,n;R>``.

    Raises:
        KeyError: no such key.
        SchemeLoadError: array shapes do not fit the format.
    """
    with np.load(path, allow_pickle=True) as data:
        if key not in data:
            raise KeyError(f"{path}: no scheme {key!r}")
        arr = data[key]
    m, k, n = (int(x) for x in key.split(","))
    factors = [np.asarray(arr[i]) for i in range(3)]
    Uf, Vf, Wf = factors
    R = Uf.shape[1]
    _check_dims(Uf.shape[0], m * k, "U", path)
    _check_dims(Vf.shape[0], k * n, "V", path)
    _check_dims(Wf.shape[0], n * m, "W", path)
    if not (Vf.shape[1] == Wf.shape[1] == R):
        raise SchemeLoadError(f"{path}[{key}]: inconsistent ranks")
    conv = lambda a: [[_exact_from_number(x, path, key) for x in row] for row in a.T]  # noqa: E731
    kw.setdefault("source", f"alphatensor/{Path(path).name}[{key}]")
    return _flat_to_scheme(m, k, n, conv(Uf), conv(Vf), conv(Wf), **kw)


def _exact_from_number(x, path, key) -> Fraction:
    """Exact Fraction of an int or of a float that holds a short fraction
    (some AlphaTensor arrays are float64 with entries like 0.125)."""
    if isinstance(x, (int, np.integer)):
        return Fraction(int(x))
    fx = float(x)
    fr = Fraction(fx).limit_denominator(1 << 16)
    if float(fr) != fx:
        raise SchemeLoadError(f"{path}[{key}]: coefficient {fx!r} is not a short fraction")
    return fr


def alphatensor_keys(path) -> List[str]:
    """Keys (``"m,k,n"``) of an AlphaTensor npz file (list of str)."""
    with np.load(path, allow_pickle=True) as data:
        return list(data.keys())


# --------------------------------------------------------------------------
# FastMatrixMultiplication JSON
# --------------------------------------------------------------------------
def _expand_program(rows, fresh, n_base: int, path, what) -> List[Dict[int, Fraction]]:
    """Expand rows of sparse {index, value} over base + fresh variables into
    dicts over base indices.  Fresh variable t (0-based) has index n_base+t
    and may reference earlier fresh variables."""
    expanded_fresh: List[Dict[int, Fraction]] = []

    def expand(terms):
        out: Dict[int, Fraction] = {}
        for t in terms:
            idx, val = int(t["index"]), Fraction(str(t["value"]))
            if idx < n_base:
                out[idx] = out.get(idx, Fraction(0)) + val
            else:
                f = idx - n_base
                if f >= len(expanded_fresh):
                    raise SchemeLoadError(f"{path}: {what} uses fresh variable {idx} before it is defined")
                for j, c in expanded_fresh[f].items():
                    out[j] = out.get(j, Fraction(0)) + val * c
        return out

    for terms in fresh:
        expanded_fresh.append(expand(terms))
    return [expand(terms) for terms in rows]


def _dense(d: Dict[int, Fraction], size: int) -> List[Fraction]:
    row = [Fraction(0)] * size
    for j, c in d.items():
        if j >= size:
            raise SchemeLoadError(f"index {j} out of range {size}")
        row[j] = c
    return row


def load_fmm_json(path, **kw) -> Scheme:
    """Load a FastMatrixMultiplication JSON scheme.

    Plain files: keys ``n`` (``[m, k, n]``), ``u`` ``R x (m*k)``, ``v``
    ``R x (k*n)``, ``w`` ``R x (n*m)`` (C transposed: entry ``l*m+i`` is
    C[i,l]); coefficients are ints or strings such as ``"1/2"``.

    Addition-reduced files (``*_reduced.json``, with ``u_fresh``): ``u`` /
    ``v`` give, per product, sparse ``{index, value}`` terms over the
    entries of A (B) followed by fresh variables defined in ``u_fresh``
    (``v_fresh``); ``w`` gives, per entry of C (transposed order), terms
    over the R products followed by the fresh variables of ``w_fresh``.
    They are expanded to U, V, W; ``complexity.reduced`` becomes
    :attr:`Scheme.reduced_additions`.

    Args:
        path: the ``.json`` file.
        **kw: extra :class:`Scheme` fields.

    Returns:
        :class:`Scheme`.

    Raises:
        SchemeLoadError: missing keys or inconsistent sizes.
    """
    with open(path) as fh:
        d = json.load(fh)
    try:
        m, k, n = (int(x) for x in d["n"])
        u, v, w = d["u"], d["v"], d["w"]
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemeLoadError(f"{path}: not a scheme JSON ({exc})") from None
    kw.setdefault("source", str(path))
    if "u_fresh" in d:
        R = int(d["m"])
        Ud = _expand_program(u, d.get("u_fresh", []), m * k, path, "u")
        Vd = _expand_program(v, d.get("v_fresh", []), k * n, path, "v")
        Wd = _expand_program(w, d.get("w_fresh", []), R, path, "w")
        _check_dims(len(Ud), R, "u", path)
        _check_dims(len(Vd), R, "v", path)
        _check_dims(len(Wd), n * m, "w", path)
        Uf = [_dense(x, m * k) for x in Ud]
        Vf = [_dense(x, k * n) for x in Vd]
        Wrows = [_dense(x, R) for x in Wd]  # (n*m, R)
        Wf = [[Wrows[c][r] for c in range(n * m)] for r in range(R)]
        cx = d.get("complexity")
        if isinstance(cx, dict) and "reduced" in cx:
            kw.setdefault("reduced_additions_data", int(cx["reduced"]))
        return _flat_to_scheme(m, k, n, Uf, Vf, Wf, **kw)
    R = len(u)
    if not (len(v) == len(w) == R):
        raise SchemeLoadError(f"{path}: u, v, w have different lengths")
    for r in range(R):
        _check_dims(len(u[r]), m * k, f"u[{r}]", path)
        _check_dims(len(v[r]), k * n, f"v[{r}]", path)
        _check_dims(len(w[r]), n * m, f"w[{r}]", path)
    conv = lambda rows: [[Fraction(str(x)) for x in row] for row in rows]  # noqa: E731
    return _flat_to_scheme(m, k, n, conv(u), conv(v), conv(w), **kw)


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
    toks = _tokenize(line)
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
        poly = _Parser(text).parse()
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
        fmt = _fmt_from_name(path)
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


# --------------------------------------------------------------------------
# fast-matmul text
# --------------------------------------------------------------------------
def load_fast_matmul(path, fmt: Optional[Tuple[int, int, int]] = None, **kw) -> Scheme:
    """Load an arbenson/fast-matmul ``codegen/algorithms`` file.

    Layout: three blocks separated by lines holding only ``#``; lines
    starting with ``#`` followed by text are comments.  Block U has one row
    per entry of A (row-major) and one column per product; V likewise for
    B; W one row per entry of C (row-major, *not* transposed).  Entries are
    integers or fractions like ``1/8``.

    Args:
        path: the file.
        fmt: ``(m, k, n)``; default: from the row counts (``m*k``, ``k*n``,
            ``m*n`` determine m, k, n).

    Raises:
        SchemeLoadError: not three blocks, ragged rows, or row counts that
            fit no format.
    """
    blocks: List[List[List[Fraction]]] = [[]]
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if "substitution" in line.lower():
                raise SchemeLoadError(
                    f"{path}: eliminated (common-subexpression) form with substitution "
                    "information is not supported; load the uneliminated original"
                )
            if line == "#":
                blocks.append([])
            continue
        try:
            blocks[-1].append([Fraction(t) for t in line.split()])
        except ValueError:
            raise SchemeLoadError(f"{path}: bad entry in line {line!r}") from None
    blocks = [b for b in blocks if b]
    if len(blocks) != 3:
        raise SchemeLoadError(f"{path}: expected 3 blocks separated by '#', got {len(blocks)}")
    R = len(blocks[0][0])
    if any(len(row) != R for b in blocks for row in b):
        raise SchemeLoadError(f"{path}: ragged rows")
    a, b, c = (len(x) for x in blocks)  # m*k, k*n, m*n
    if fmt is None:
        m2, k2, n2 = a * c // b, a * b // c, b * c // a
        m, k, n = math.isqrt(m2), math.isqrt(k2), math.isqrt(n2)
        if (m * k, k * n, m * n) != (a, b, c):
            raise SchemeLoadError(f"{path}: row counts {a}, {b}, {c} fit no format")
    else:
        m, k, n = fmt
        if (m * k, k * n, m * n) != (a, b, c):
            raise SchemeLoadError(f"{path}: row counts {a}, {b}, {c} do not fit {m}x{k}x{n}")
    U = to_fraction_array(np.array(blocks[0], dtype=object).T, (R, m, k))
    V = to_fraction_array(np.array(blocks[1], dtype=object).T, (R, k, n))
    W = to_fraction_array(np.array(blocks[2], dtype=object).T, (R, m, n))
    kw.setdefault("source", str(path))
    return Scheme(m, k, n, U, V, W, **kw)


# --------------------------------------------------------------------------
def load_scheme_file(path, **kw) -> Scheme:
    """Load a scheme file of any supported kind, chosen by extension:
    ``.json`` (FastMatrixMultiplication), ``.m``, ``.exp``, ``.mpl``;
    anything else is read as fast-matmul text.  (AlphaTensor ``.npz`` holds
    many schemes: use :func:`load_alphatensor_npz`.)

    Raises:
        SchemeLoadError: unparsable file; ValueError for ``.npz``.
    """
    p = str(path)
    if p.endswith(".npz"):
        raise ValueError("an .npz holds many schemes: use load_alphatensor_npz(path, key)")
    if p.endswith(".json"):
        return load_fmm_json(path, **kw)
    if p.endswith(".m"):
        return load_fmm_m(path, **kw)
    if p.endswith(".exp"):
        return load_fmm_exp(path, **kw)
    if p.endswith(".mpl"):
        return load_fmm_mpl(path, **kw)
    return load_fast_matmul(path, **kw)

"""What every scheme loader shares: the error type, an exact expression
parser (integers, fractions, + - * / ^ and parentheses, evaluated with
``fractions.Fraction``, never ``eval``) and the layout helpers that turn a
source's flat factor rows into a :class:`~falcon_mlir.catalog.scheme.Scheme`."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .scheme import Scheme, to_fraction_array

__all__ = ["SchemeLoadError", "Poly", "tokenize", "poly_add", "poly_mul", "PolyParser", "parse_exact",
           "check_dims", "format_from_name", "flat_to_scheme"]


class SchemeLoadError(ValueError):
    """A source file could not be parsed or is inconsistent."""


# --------------------------------------------------------------------------
# exact expression evaluation (polynomials with Fraction coefficients)
# --------------------------------------------------------------------------
_TOKEN_RE = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<var>[A-Za-z_][A-Za-z_0-9]*)|(?P<op>[-+*/^()]))"
)

Poly = Dict[Tuple[str, ...], Fraction]


def tokenize(text: str) -> List[Tuple[str, str]]:
    """``(kind, text)`` tokens (``num``, ``var``, ``op``) of an expression.

    Raises:
        SchemeLoadError: an unknown character or an inexact decimal.
    """
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


def poly_add(p: Poly, q: Poly, sign: int = 1) -> Poly:
    """``p + sign * q`` (zero terms dropped)."""
    out = dict(p)
    for mono, c in q.items():
        v = out.get(mono, Fraction(0)) + sign * c
        if v:
            out[mono] = v
        else:
            out.pop(mono, None)
    return out


def poly_mul(p: Poly, q: Poly) -> Poly:
    """``p * q`` (zero terms dropped)."""
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


class PolyParser:
    """Recursive-descent parser: + - * / ^ parentheses, juxtaposition as
    multiplication, integer and fraction literals, variables."""

    def __init__(self, text: str):
        self.text = text
        self.toks = tokenize(text)
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
            p = poly_add(p, self.term(), 1 if op == "+" else -1)
        return p

    def term(self) -> Poly:
        p = self.unary()
        while True:
            kind, val = self.peek()
            if (kind, val) == ("op", "*"):
                self.take()
                p = poly_mul(p, self.unary())
            elif (kind, val) == ("op", "/"):
                self.take()
                q = self.unary()
                if set(q) - {()} or not q.get((), 0):
                    raise SchemeLoadError(f"division by a non-constant or zero in {self.text!r}")
                p = {mono: c / q[()] for mono, c in p.items()}
            elif kind in ("num", "var") or (kind, val) == ("op", "("):
                p = poly_mul(p, self.unary())  # juxtaposition
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
                out = poly_mul(out, base)
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
    poly = PolyParser(text).parse()
    if set(poly) - {()}:
        raise SchemeLoadError(f"expression {text!r} is not a constant")
    return poly.get((), Fraction(0))


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def check_dims(rows: int, cols_expected: int, what: str, path) -> None:
    """Raise SchemeLoadError unless ``rows == cols_expected``."""
    if rows != cols_expected:
        raise SchemeLoadError(f"{path}: {what} has {rows} entries, expected {cols_expected}")


def format_from_name(path) -> Optional[Tuple[int, int, int]]:
    """``(m, k, n)`` from a file name such as ``2x3x4_...`` or ``s333...``, else None."""
    name = Path(path).name
    mt = re.search(r"(\d)x(\d)x(\d)", name) or re.search(r"(?<!\d)(\d)(\d)(\d)(?=[-m_]|$)", name)
    if mt:
        return tuple(int(x) for x in mt.groups())  # type: ignore[return-value]
    return None


def flat_to_scheme(m, k, n, Uf, Vf, Wct, **kw) -> Scheme:
    """Uf (R, m*k) row-major A, Vf (R, k*n), Wct (R, n*m) with C[i,l] at l*m+i."""
    R = len(Uf)
    U = to_fraction_array(Uf).reshape(R, m, k)
    V = to_fraction_array(Vf).reshape(R, k, n)
    W = to_fraction_array(Wct).reshape(R, n, m).transpose(0, 2, 1).copy()
    return Scheme(m, k, n, U, V, W, **kw)

"""Loaders for the public scheme sources, each returning a :class:`Scheme`.

Every loader converts its source's layout to the project convention
(``U (R,m,k)``, ``V (R,k,n)``, ``W (R,m,n)`` with
``C[i,l] = sum_r W[r,i,l] M_r``; see :mod:`falcon_mlir.catalog.scheme`).
All arithmetic is exact (``fractions.Fraction``); entries written as
unevaluated arithmetic (``"(1*1-0*1+1)"``, ``"-1/8"``) are evaluated by the
exact expression parser of :mod:`falcon_mlir.catalog.parsing`, never by
``eval``. This module holds the JSON, ``.npz`` and fast-matmul loaders and
picks a loader by extension (:func:`load_scheme_file`); the catalogue's text
formats (``.m``, ``.exp``, ``.mpl``) are in :mod:`falcon_mlir.catalog.text_formats`.

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
from fractions import Fraction
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from .parsing import SchemeLoadError, check_dims, flat_to_scheme, parse_exact
from .scheme import Scheme, to_fraction_array
from .text_formats import load_fmm_exp, load_fmm_m, load_fmm_mpl

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
    check_dims(Uf.shape[0], m * k, "U", path)
    check_dims(Vf.shape[0], k * n, "V", path)
    check_dims(Wf.shape[0], n * m, "W", path)
    if not (Vf.shape[1] == Wf.shape[1] == R):
        raise SchemeLoadError(f"{path}[{key}]: inconsistent ranks")
    conv = lambda a: [[_exact_from_number(x, path, key) for x in row] for row in a.T]  # noqa: E731
    kw.setdefault("source", f"alphatensor/{Path(path).name}[{key}]")
    return flat_to_scheme(m, k, n, conv(Uf), conv(Vf), conv(Wf), **kw)


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
        check_dims(len(Ud), R, "u", path)
        check_dims(len(Vd), R, "v", path)
        check_dims(len(Wd), n * m, "w", path)
        Uf = [_dense(x, m * k) for x in Ud]
        Vf = [_dense(x, k * n) for x in Vd]
        Wrows = [_dense(x, R) for x in Wd]  # (n*m, R)
        Wf = [[Wrows[c][r] for c in range(n * m)] for r in range(R)]
        cx = d.get("complexity")
        if isinstance(cx, dict) and "reduced" in cx:
            kw.setdefault("reduced_additions_data", int(cx["reduced"]))
        return flat_to_scheme(m, k, n, Uf, Vf, Wf, **kw)
    R = len(u)
    if not (len(v) == len(w) == R):
        raise SchemeLoadError(f"{path}: u, v, w have different lengths")
    for r in range(R):
        check_dims(len(u[r]), m * k, f"u[{r}]", path)
        check_dims(len(v[r]), k * n, f"v[{r}]", path)
        check_dims(len(w[r]), n * m, f"w[{r}]", path)
    conv = lambda rows: [[Fraction(str(x)) for x in row] for row in rows]  # noqa: E731
    return flat_to_scheme(m, k, n, conv(u), conv(v), conv(w), **kw)


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

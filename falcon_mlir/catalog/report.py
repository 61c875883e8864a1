"""The catalog for people: one row of figures per scheme, a text table, a
scheme's full description, and exact verification of every stored scheme
(the library behind ``falcon-catalog``)."""

from __future__ import annotations

import re
import time
from fractions import Fraction
from typing import Iterator, List, Optional, Tuple

from falcon_mlir.catalog import Scheme, get_scheme, load_catalog

__all__ = ["scheme_row", "list_schemes", "format_table", "describe", "verify_catalog"]


def _e_str(e: Fraction) -> str:
    return str(e.numerator) if e.denominator == 1 else f"{float(e):.2f}"


def scheme_row(s: Scheme) -> dict:
    """The figures of one scheme: name, format, rank, coefficient set, naive
    and reduced additions, stability factor E (text), aliases, source."""
    return {
        "name": s.name,
        "format": s.format,
        "rank": s.R,
        "coefficients": s.coefficient_set,
        "naive_additions": s.naive_additions,
        "reduced_additions": s.reduced_additions,
        "E": _e_str(s.stability_e),
        "aliases": list(s.aliases),
        "source": s.source,
    }


def list_schemes(fmt: Optional[str] = None) -> List[Scheme]:
    """Every stored scheme, or with ``fmt`` (``"MxKxN"``, e.g. ``"3x2x4"``)
    the schemes for that format in that exact order (permuted from the stored ones).

    Raises:
        ValueError: ``fmt`` is not three integers joined by ``x``.
    """
    cat = load_catalog()
    if fmt is None:
        return list(cat)
    mt = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*", fmt.lower())
    if not mt:
        raise ValueError(f"bad --format {fmt!r} (expected MxKxN, e.g. 2x3x4)")
    return cat.find(*(int(x) for x in mt.groups()))


def format_table(rows: List[dict]) -> str:
    """Rows of :func:`scheme_row` as an aligned text table (NAME with its
    aliases, FORMAT, RANK, COEF, ADDS, E, SOURCE)."""
    alias_col = {r["name"]: (" (" + ", ".join(r["aliases"]) + ")" if r["aliases"] else "") for r in rows}
    heads = ["NAME", "FORMAT", "RANK", "COEF", "ADDS", "E", "SOURCE"]
    table = [[r["name"] + alias_col[r["name"]], r["format"], str(r["rank"]), r["coefficients"],
              str(r["naive_additions"]), r["E"], r["source"]] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(heads[:-1])]
    fmt = "  ".join(f"{{:{'>' if i in (2, 4, 5) else '<'}{w}}}" for i, w in enumerate(widths)) + "  {}"
    return "\n".join([fmt.format(*heads)] + [fmt.format(*t) for t in table])


def describe(s: Scheme) -> str:
    """Metrics, aliases, source, the exact verification and U/V/W of one scheme."""
    lines = [
        f"name:              {s.name}",
        f"aliases:           {', '.join(s.aliases) or '-'}",
        f"format:            {s.format} (A {s.m}x{s.k}, B {s.k}x{s.n}, C {s.m}x{s.n})",
        f"rank:              {s.R} (classical {s.m * s.k * s.n})",
        f"coefficients:      {s.coefficient_set}",
        f"nnz U/V/W:         {s.nnz_u}/{s.nnz_v}/{s.nnz_w}",
        f"naive additions:   {s.naive_additions}",
        f"reduced additions: {s.reduced_additions if s.reduced_additions is not None else '-'}",
        f"stability E:       {_e_str(s.stability_e)}",
        f"verified:          {'yes' if s.verify() else 'NO'}",
        f"source:            {s.source}",
    ]
    if s.notes:
        lines.append(f"notes:             {s.notes}")
    lines.append("products (M_r = <U_r,A><V_r,B>, C += W_r M_r; rows separated by ';'):")
    lines.append(s.matrices_text())
    return "\n".join(lines)


def verify_catalog() -> Iterator[Tuple[str, Scheme, int, float]]:
    """Check every stored scheme and strassen (x) strassen exactly against the
    Brent equations, one at a time: yields ``(name, scheme, violated
    equations, seconds)``."""
    checks = [(s.name, s) for s in load_catalog()]
    checks.append(("strassen*strassen", get_scheme("strassen*strassen")))
    for name, s in checks:
        t0 = time.perf_counter()
        bad = s.brent_residual()
        yield name, s, bad, time.perf_counter() - t0

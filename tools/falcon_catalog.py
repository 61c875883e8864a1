"""falcon-catalog: list, show and verify the schemes of falcon-mlir's catalog.

Usage::

    falcon-catalog list [--format mxkxn] [--json]
    falcon-catalog show NAME [--json]
    falcon-catalog verify

``list`` prints one row per stored scheme (name, format, rank, coefficient
set, naive additions, stability factor E, source); with ``--format`` the
schemes for that format in that exact order (permuted from the stored
ones).  ``show`` prints the metrics, aliases, source and U/V/W of one scheme
(any name ``get_scheme`` accepts: aliases, permuted formats,
``strassen*strassen``).  ``verify`` checks every stored scheme and
strassen⊗strassen exactly against the Brent equations; exit 0 only if all
hold.

Exit status: 0 success, 1 a scheme failed verification or is unknown, 2 bad
usage.  Errors are one line on stderr, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from fractions import Fraction
from typing import List, Optional

from falcon_mlir.catalog import Scheme, UnknownSchemeError, get_scheme, load_catalog


def _e_str(e: Fraction) -> str:
    return str(e.numerator) if e.denominator == 1 else f"{float(e):.2f}"


def _row(s: Scheme) -> dict:
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


class _ArgParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        print(f"falcon-catalog: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    ap = _ArgParser(prog="falcon-catalog", description="falcon-mlir scheme catalog")
    sub = ap.add_subparsers(dest="cmd", metavar="{list,show,verify}")
    sub.required = True
    p_list = sub.add_parser("list", help="table of the stored schemes")
    p_list.add_argument("--format", dest="fmt", metavar="MxKxN",
                        help="only this format, in this order (e.g. 3x2x4)")
    p_list.add_argument("--json", action="store_true", help="JSON instead of a table")
    p_show = sub.add_parser("show", help="metrics and U/V/W of one scheme")
    p_show.add_argument("name")
    p_show.add_argument("--json", action="store_true", help="JSON (catalog data format)")
    sub.add_parser("verify", help="exact verification of every stored scheme")
    return ap


def _cmd_list(args) -> int:
    cat = load_catalog()
    if args.fmt:
        mt = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*", args.fmt.lower())
        if not mt:
            print(f"falcon-catalog: error: bad --format {args.fmt!r} (expected MxKxN, e.g. 2x3x4)",
                  file=sys.stderr)
            return 2
        schemes = cat.find(*(int(x) for x in mt.groups()))
    else:
        schemes = list(cat)
    rows = [_row(s) for s in schemes]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print(f"no schemes for format {args.fmt}")
        return 0
    alias_col = {r["name"]: (" (" + ", ".join(r["aliases"]) + ")" if r["aliases"] else "") for r in rows}
    heads = ["NAME", "FORMAT", "RANK", "COEF", "ADDS", "E", "SOURCE"]
    table = [[r["name"] + alias_col[r["name"]], r["format"], str(r["rank"]), r["coefficients"],
              str(r["naive_additions"]), r["E"], r["source"]] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(heads[:-1])]
    fmt = "  ".join(f"{{:{'>' if i in (2, 4, 5) else '<'}{w}}}" for i, w in enumerate(widths)) + "  {}"
    print(fmt.format(*heads))
    for t in table:
        print(fmt.format(*t))
    return 0


def _cmd_show(args) -> int:
    s = get_scheme(args.name)
    if args.json:
        print(json.dumps(s.to_dict(), indent=1))
        return 0
    ok = s.verify()
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
        f"verified:          {'yes' if ok else 'NO'}",
        f"source:            {s.source}",
    ]
    if s.notes:
        lines.append(f"notes:             {s.notes}")
    lines.append("products (M_r = <U_r,A><V_r,B>, C += W_r M_r; rows separated by ';'):")
    lines.append(s.matrices_text())
    print("\n".join(lines))
    return 0


def _cmd_verify(args) -> int:
    cat = load_catalog()
    checks = [(s.name, s) for s in cat]
    checks.append(("strassen*strassen", get_scheme("strassen*strassen")))
    failed = 0
    t_all = time.perf_counter()
    for name, s in checks:
        t0 = time.perf_counter()
        bad = s.brent_residual()
        dt = (time.perf_counter() - t0) * 1e3
        status = "ok  " if bad == 0 else "FAIL"
        extra = "" if bad == 0 else f"  ({bad} Brent equations violated)"
        print(f"{status} {name:<20} {s.format:<6} R={s.R:<4} {s.coefficient_set:<2} {dt:7.1f} ms{extra}")
        failed += bad != 0
    total = len(checks)
    print(f"{total - failed}/{total} schemes verified exactly "
          f"({time.perf_counter() - t_all:.2f} s){'' if not failed else f'; {failed} FAILED'}")
    return 0 if failed == 0 else 1


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``falcon-catalog``; returns the exit status (int)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or usage error (2)
        return int(exc.code or 0)
    try:
        if args.cmd == "list":
            return _cmd_list(args)
        if args.cmd == "show":
            return _cmd_show(args)
        return _cmd_verify(args)
    except UnknownSchemeError as exc:
        print(f"falcon-catalog: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `falcon-catalog list | head`
        try:
            sys.stdout = open("/dev/null", "w")  # noqa: SIM115
        except OSError:
            pass
        return 0
    except (FileNotFoundError, ValueError) as exc:
        print(f"falcon-catalog: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

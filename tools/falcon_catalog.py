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

Exit status: 0 success (also when the reader of stdout goes away, as in
``falcon-catalog list | head``), 1 a scheme failed verification or is
unknown, 2 bad usage.  Errors are one line on stderr, without a traceback.
The work is done by :mod:`falcon_mlir.catalog` (:mod:`~falcon_mlir.catalog.report`);
this file is the command line.
"""

from __future__ import annotations

import json
import sys
import time
from typing import List, Optional

from falcon_mlir.catalog import UnknownSchemeError, get_scheme
from falcon_mlir.catalog.report import describe, format_table, list_schemes, scheme_row, verify_catalog
from falcon_mlir.cli import ArgumentParser, ToolError, run_tool, silence_stdout

PROG = "falcon-catalog"


def _parser() -> ArgumentParser:
    ap = ArgumentParser(prog=PROG, description="falcon-mlir scheme catalog", usage_status=2)
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
    try:
        schemes = list_schemes(args.fmt)
    except ValueError as e:
        raise ToolError(f"{PROG}: error: {e}", 2) from None
    rows = [scheme_row(s) for s in schemes]
    if args.json:
        print(json.dumps(rows, indent=1))
    elif not rows:
        print(f"no schemes for format {args.fmt}")
    else:
        print(format_table(rows))
    return 0


def _cmd_show(args) -> int:
    s = get_scheme(args.name)
    print(json.dumps(s.to_dict(), indent=1) if args.json else describe(s))
    return 0


def _cmd_verify(args) -> int:
    failed = total = 0
    t_all = time.perf_counter()
    for name, s, bad, seconds in verify_catalog():
        status = "ok  " if bad == 0 else "FAIL"
        extra = "" if bad == 0 else f"  ({bad} Brent equations violated)"
        print(f"{status} {name:<20} {s.format:<6} R={s.R:<4} {s.coefficient_set:<2} {seconds * 1e3:7.1f} ms{extra}")
        failed += bad != 0
        total += 1
    print(f"{total - failed}/{total} schemes verified exactly "
          f"({time.perf_counter() - t_all:.2f} s){'' if not failed else f'; {failed} FAILED'}")
    return 0 if failed == 0 else 1


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of ``falcon-catalog``; returns the exit status (int)."""
    return run_tool(PROG, _main, argv)


def _main(argv: list) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"list": _cmd_list, "show": _cmd_show, "verify": _cmd_verify}[args.cmd](args)
    except UnknownSchemeError as exc:
        raise ToolError(f"{PROG}: {exc}") from None
    except BrokenPipeError:  # e.g. `falcon-catalog list | head`: not an error
        silence_stdout()
        return 0
    except (FileNotFoundError, ValueError) as exc:
        raise ToolError(f"{PROG}: error: {exc}") from None


if __name__ == "__main__":
    sys.exit(main())

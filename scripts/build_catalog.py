#!/usr/bin/env python3
"""Build falcon-mlir's scheme catalog from the public source data.

Usage::

    python scripts/build_catalog.py --shared ../shared \\
        -o falcon_mlir/catalog/data/catalog.json

Reads ``<shared>/schemes`` (AlphaTensor npz, FastMatrixMultiplication with
its ``status_upto6.json`` index, fast-matmul), picks per format
``2 <= m <= k <= n <= 6`` the best-rank scheme with coefficients in
{-1,0,1} (fewest naive additions among those the sources hold) and, where
the best rank over Q is lower, the best rational scheme too; adds the named
classics (``strassen``, ``winograd``, ``laderman``); verifies every scheme
exactly (Brent equations) and writes the project's own data file.

Exit status: 0 on success; 1 if any scheme fails to load or verify (the
offending scheme is named on stderr) or a consistency check fails; 2 on bad
arguments.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

try:
    import falcon_mlir  # noqa: F401
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from falcon_mlir.catalog.loaders import (  # noqa: E402
    SchemeLoadError,
    alphatensor_keys,
    load_alphatensor_npz,
    load_fast_matmul,
    load_scheme_file,
)
from falcon_mlir.catalog.scheme import Scheme  # noqa: E402
from falcon_mlir.cli import ArgumentParser, ToolError, run_tool  # noqa: E402
from falcon_mlir.files import write_atomic  # noqa: E402

FMM = "fastmatrixmultiplication"
# short provenance labels (full credits: the data file's "sources" and NOTICE)
FMM_CREDIT = "FastMatrixMultiplication@d17309a"
FMM_CREDIT_ALPHATENSOR = "AlphaTensor via " + FMM_CREDIT
FMM_CREDIT_ALPHAEVOLVE = "AlphaEvolve via " + FMM_CREDIT
FAST_MATMUL_CREDIT = "fast-matmul"

# must-have entries (name -> (format, rank)) checked at the end of the build
REQUIRED = [
    "2x2x2:7", "2x2x3:11", "2x3x3:15", "2x3x4:20", "3x3x3:23", "2x4x5:32",
    "2x4x5:33", "3x4x5:47", "4x4x4:48", "4x4x4:49", "4x4x5:61", "4x5x5:76",
    "5x5x5:93", "6x6x6:153",
]

LADERMAN_NOTE = (
    "Laderman's own 1976 coefficients (3x3x3:23, 98 naive additions, E=35) are not in "
    "the source data (FastMatrixMultiplication's index names "
    "schemes/known/classic/Laderman-333-23-98.m, which the snapshot lacks; none of the "
    "3x3x3:23 schemes present has E=35). The alias 'laderman' therefore points to this "
    "3x3x3:23 scheme, a different scheme of the same format and rank."
)


class BuildError(RuntimeError):
    pass


def credit_for(rel: str) -> str:
    if rel.startswith(FMM + "/schemes/known/alpha_tensor/"):
        return FMM_CREDIT_ALPHATENSOR
    if rel.startswith(FMM + "/schemes/known/alpha_evolve/"):
        return FMM_CREDIT_ALPHAEVOLVE
    if rel.startswith(FMM):
        return FMM_CREDIT
    if rel.startswith("fast-matmul"):
        return FAST_MATMUL_CREDIT
    if rel.startswith("alphatensor"):
        return "AlphaTensor"
    return "?"


def load_rel(root: Path, rel: str) -> Scheme:
    path = root / rel
    try:
        s = load_scheme_file(path)
    except (SchemeLoadError, OSError, ValueError) as exc:
        raise BuildError(f"cannot load {rel}: {exc}") from None
    return s


def renamed(s: Scheme, name: str, source: str, tag: Optional[str] = None,
            aliases=(), notes: str = "", fmt: Optional[Tuple[int, int, int]] = None) -> Scheme:
    if fmt is not None and (s.m, s.k, s.n) != fmt:
        s = s.permuted(*fmt)
    return Scheme(s.m, s.k, s.n, s.U, s.V, s.W, name=name, source=source, tag=tag,
                  aliases=tuple(aliases), reduced_additions_data=s.reduced_additions_data,
                  notes=notes)


def same_products(a: Scheme, b: Scheme) -> bool:
    """True iff a and b have the same set of products (U_r, V_r, W_r)."""
    if (a.m, a.k, a.n, a.R) != (b.m, b.k, b.n, b.R):
        return False

    def key(s):
        return sorted(
            (tuple(s.U[r].reshape(-1)), tuple(s.V[r].reshape(-1)), tuple(s.W[r].reshape(-1)))
            for r in range(s.R)
        )

    return key(a) == key(b)


def pick(root: Path, cands: List[dict], fmt: Tuple[int, int, int], log) -> Tuple[Scheme, str, dict]:
    """Load the candidates (existing files only), verify, and choose the one
    with the fewest naive additions (ties: one with an addition-reduced
    program, then lower E, then path)."""
    loaded = []
    for c in cands:
        rel = f"{FMM}/{c['source']}"
        if not (root / rel).exists():
            continue
        s = load_rel(root, rel)
        if sorted((s.m, s.k, s.n)) != sorted(fmt) or s.R != c["rank"]:
            raise BuildError(f"{rel}: holds {s.format}:{s.R}, index says {fmt}:{c['rank']}")
        if not s.verify():
            raise BuildError(f"{rel}: FAILS exact verification ({s.brent_residual()} Brent equations violated)")
        if s.naive_additions != c.get("complexity"):
            log(f"  note: {rel}: naive additions {s.naive_additions}, index says {c.get('complexity')}")
        loaded.append((s.naive_additions, 0 if s.reduced_additions is not None else 1,
                       s.stability_e, rel, s, c))
    if not loaded:
        raise BuildError(f"{'x'.join(map(str, fmt))}: none of the best-rank files exists")
    loaded.sort(key=lambda t: t[:4])
    _, _, _, rel, s, c = loaded[0]
    return s, rel, c


def build(shared: Path, log=print) -> dict:
    """The catalog data (the dict written as catalog.json): the best scheme of
    each format up to 6 from the shared sources, checked exactly.

    Raises:
        BuildError: a missing index, a scheme that fails verification, a
            duplicate or missing name, or an AlphaTensor scheme that beats the catalog.
    """
    root = shared / "schemes"
    index_path = root / FMM / "status_upto6.json"
    if not index_path.exists():
        raise BuildError(f"index not found: {index_path}")
    index = json.loads(index_path.read_text())

    # ---- classics -------------------------------------------------------
    strassen = load_fast_matmul(root / "fast-matmul" / "strassen")
    fmm_strassen = load_rel(root, f"{FMM}/schemes/known/classic/Strassen-222-7-18.m")
    if not same_products(strassen, fmm_strassen):
        log("  note: fast-matmul strassen and FMM Strassen-222-7-18.m differ as product sets")
    else:
        log("  strassen: fast-matmul/strassen == FMM classic/Strassen-222-7-18.m (same 7 products)")
    winograd = load_rel(root, f"{FMM}/schemes/results/addition_reduced_ZT/2x2x2_m7_cr15_cn24_ZT_reduced.json")

    entries, best_over = _per_format(root, index, strassen, log)
    # Strassen-Winograd
    entries.append(renamed(
        winograd, "2x2x2:7-winograd",
        f"{FMM_CREDIT}: schemes/results/addition_reduced_ZT/2x2x2_m7_cr15_cn24_ZT_reduced.json",
        tag="winograd", aliases=("winograd", "strassen-winograd"),
        notes="Strassen-Winograd variant (Winograd 1971): 24 naive additions, 15 after "
              "common-subexpression reduction; E=18",
    ))
    best_over[entries[-1].name] = ["ZT", "Z", "Q"]
    _check(entries, strassen, winograd)
    _cross_check_alphatensor(root, entries, log)
    return _data(entries, best_over)


def _per_format(root: Path, index: dict, strassen: Scheme, log) -> Tuple[List[Scheme], Dict[str, List[str]]]:
    """The best ZT scheme of every format 2..6 (and the best over Q where its
    rank is lower), with the rings each is best over."""
    entries: List[Scheme] = []
    best_over: Dict[str, List[str]] = {}
    # ---- per format -----------------------------------------------------
    for key in sorted(index, key=lambda f: tuple(int(x) for x in f.split("x"))):
        fmt = tuple(int(x) for x in key.split("x"))
        if not (all(2 <= d <= 6 for d in fmt)):
            continue
        info = index[key]
        ranks = info["ranks"]
        q_rank = min(ranks.values())
        zt_rank = ranks["ZT"]
        zt_cands = [c for c in info["schemes"].get("ZT", []) if c["rank"] == zt_rank]
        if key == "2x2x2":
            s = renamed(strassen, "2x2x2:7",
                        f"{FAST_MATMUL_CREDIT}: strassen (Strassen 1969)", aliases=("strassen",),
                        notes="Strassen 1969, 7 products, 18 additions; identical to "
                              "FastMatrixMultiplication schemes/known/classic/Strassen-222-7-18.m")
            entries.append(s)
        else:
            chosen, rel, _ = pick(root, zt_cands, fmt, log)
            notes = ""
            aliases = ()
            if key == "3x3x3":
                aliases = ("laderman",)
                notes = LADERMAN_NOTE
            entries.append(renamed(chosen, f"{key}:{zt_rank}", f"{credit_for(rel)}: {rel[len(FMM)+1:]}",
                                   aliases=aliases, notes=notes, fmt=fmt))
        best_over[entries[-1].name] = ["ZT", "Z", "Q"] if q_rank == zt_rank else ["ZT", "Z"] \
            if ranks.get("Z") == zt_rank else ["ZT"]
        if q_rank < zt_rank:
            q_cands = [c for ring in ("Q", "Z") for c in info["schemes"].get(ring, [])
                       if c["rank"] == q_rank]
            chosen, rel, _ = pick(root, q_cands, fmt, log)
            name = f"{key}:{q_rank}"
            entries.append(renamed(chosen, name, f"{credit_for(rel)}: {rel[len(FMM)+1:]}", fmt=fmt,
                                   notes="best known rank over Q; rational coefficients"
                                   if chosen.coefficient_set == "Q" else ""))
            best_over[name] = ["Q"] if ranks.get("Z") != q_rank else ["Z", "Q"]
        log(f"  {key}: ranks {ranks} -> " + ", ".join(
            f"{e.name} [{e.coefficient_set}, {e.naive_additions} adds]" for e in entries
            if e.format == key))

    return entries, best_over


def _check(entries: List[Scheme], strassen: Scheme, winograd: Scheme) -> None:
    """Exact verification, unique and required names, strassen (x) strassen, the classics' figures."""
    names = set()
    for s in entries:
        if not s.verify():
            raise BuildError(f"{s.name} ({s.source}): FAILS exact verification "
                             f"({s.brent_residual()} Brent equations violated)")
        low = s.name.lower()
        if low in names:
            raise BuildError(f"duplicate name {s.name}")
        names.add(low)
    for req in REQUIRED:
        if req.lower() not in names:
            raise BuildError(f"required scheme {req} missing from the catalog")
    sq = strassen.kron(strassen)
    if not (sq.format == "4x4x4" and sq.R == 49 and sq.verify()):
        raise BuildError("strassen*strassen is not a valid 4x4x4:49 scheme")
    chk = {"strassen": (strassen, 12, 18), "winograd": (winograd, 18, 24)}
    for nm, (s, e, adds) in chk.items():
        if s.stability_e != e or s.naive_additions != adds:
            raise BuildError(f"{nm}: E={s.stability_e} adds={s.naive_additions}, expected {e}/{adds}")



def _cross_check_alphatensor(root: Path, entries: List[Scheme], log) -> None:
    """Every scheme of AlphaTensor's own npz (formats up to 6) must verify and
    none may beat the catalog's rank."""
    npz = root / "alphatensor" / "factorizations_r.npz"
    if npz.exists():
        best_rank = {}
        for s in entries:
            key = "x".join(map(str, sorted((s.m, s.k, s.n))))
            best_rank[key] = min(best_rank.get(key, 10**9), s.R)
        for akey in alphatensor_keys(npz):
            fmt = tuple(int(x) for x in akey.split(","))
            if max(fmt) > 6:
                continue
            a = load_alphatensor_npz(npz, akey)
            if not a.verify():
                raise BuildError(f"alphatensor[{akey}] FAILS exact verification")
            key = "x".join(map(str, sorted(fmt)))
            if a.R < best_rank.get(key, 10**9):
                raise BuildError(f"alphatensor[{akey}] rank {a.R} beats catalog {best_rank.get(key)}")
        log("  alphatensor factorizations_r.npz (formats <= 6): all verify, none beats the catalog")



def _data(entries: List[Scheme], best_over: Dict[str, List[str]]) -> dict:
    """The catalog.json dict: convention, sources, schemes sorted by format and rank."""
    entries.sort(key=lambda s: (sorted((s.m, s.k, s.n)), s.R, s.tag or ""))
    schemes = []
    for s in entries:
        d = s.to_dict()
        d["best_rank_over"] = best_over.get(s.name, [])
        schemes.append(d)
    return {
        "format_version": 1,
        "convention": (
            "A is m x k, B is k x n, C = A B. M_r = (sum_ij U[r,i,j] A[i,j]) * "
            "(sum_jl V[r,j,l] B[j,l]); C[i,l] = sum_r W[r,i,l] M_r. Each of U, V, W is a "
            "list of R strings, one per product, holding U_r (m x k), V_r (k x n), "
            "W_r (m x n, not transposed) row-major as space-separated integers or p/q."
        ),
        "sources": {
            "FastMatrixMultiplication@d17309a": "github.com/dronperminov/FastMatrixMultiplication "
            "at commit d17309a, MIT License (licenses/LICENSE-FastMatrixMultiplication)",
            "fast-matmul": "github.com/arbenson/fast-matmul codegen/algorithms, BSD-2-Clause "
            "(licenses/LICENSE-fast-matmul)",
            "AlphaTensor": "github.com/google-deepmind/alphatensor (Fawzi et al., Nature 2022), "
            "data CC-BY-4.0, code Apache-2.0",
            "AlphaEvolve": "Google DeepMind AlphaEvolve results (2025), as redistributed by "
            "FastMatrixMultiplication",
        },
        "schemes": schemes,
    }


def main(argv=None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    return run_tool("build_catalog", _main, argv)


def _main(argv: list) -> int:
    ap = ArgumentParser(prog="build_catalog", description=__doc__.split("\n\n")[0], usage_status=2)
    ap.add_argument("--shared", required=True, type=Path, help="the shared folder (holds schemes/)")
    ap.add_argument("-o", "--output", required=True, type=Path, help="catalog.json or catalog.json.gz")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, file=sys.stderr))
    try:
        data = build(args.shared, log)
    except BuildError as exc:
        raise ToolError(f"build_catalog: error: {exc}") from None
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True)
    out: Path = args.output
    out.parent.mkdir(parents=True, exist_ok=True)
    if len(text) > 3_000_000 and not str(out).endswith(".gz"):
        out = out.with_name(out.name + ".gz")
        log(f"  data larger than 3 MB: writing {out}")
    if str(out).endswith(".gz"):
        write_atomic(str(out), gzip.compress(text.encode("ascii")))
    else:
        write_atomic(str(out), (text + "\n").encode("ascii"))
    log(f"wrote {out}: {len(data['schemes'])} schemes, {os.path.getsize(out)} bytes")
    return 0

if __name__ == "__main__":
    sys.exit(main())

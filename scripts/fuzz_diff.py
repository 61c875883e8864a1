"""Differential fuzzer of lcma-rewrite: original vs rewritten module, both run with IREE.

Each case (drawn by hypothesis, seeded) is one contraction ``@f(A, B, C) -> C + A*B``
(:func:`cases.contraction_mlir`) with

* M, N, K in 1..``max_size`` (80; biased to 1, primes and multiples of 2, 3, 4),
* element types f32, f16, bf16 -> f32, f64, i8 -> i32,
* transposed A and/or B, batch 0 or 1..3, a live (random) accumulator C,
* op form ``linalg.matmul``/``batch_matmul`` or ``linalg.generic``,
* lcma-rewrite options: a forced scheme, levels 1..2 (3 with probability
  0.1), edge peel|pad, form per-product|grouped,
* IREE flags: with probability ``data_tiling`` (``--data-tiling``, 0.4) both modules
  compile with IREE's best CPU flags, data tiling and microkernels on
  (``--iree-opt-data-tiling=true --iree-llvmcpu-enable-ukernels=all``) and the rewrite
  puts blocks behind barriers (``barriers=true``, as falcon-compile does); the case
  prints as ``dt=1`` and its ``flags`` go into the saved case.json.

The ORIGINAL and the REWRITTEN module are compiled for the host CPU
(:func:`falcon_mlir.runner.run_mlir`) and run on the same random inputs, and
both are compared with a float64 (exact int64 for integers) reference. A case
fails when:

* anything raises (rewrite, verify, compile, run);
* the report claims a plan while the rewritten IR holds no contraction;
* floats, rewritten: the max-norm relative error exceeds
  ``max(2 * predicted_error(plan schemes, K, acc), 4 * classical module's error)``;
* integers: the rewritten result is not exactly the reference; a rational
  scheme (e.g. ``4x4x4:48``) is not kept classical;
* the report says classical and the rewritten module's output differs
  (bitwise) from the original's.

``max_products`` (``--max-products``) caps ``R_1 * ... * R_L`` of the drawn plan by
dropping levels (compile time grows ~13 ms per product: 2-level 4x4x4:49 is
2401 products, ~30 s to compile).

Usage::

    python3 scripts/fuzz_diff.py [--cases N] [--seed S] [--long] [--max-size 80]
                               [--max-products 600] [--data-tiling 0.4] [--shrink 40]
                               [--save-dir DIR]

Prints one summary line (cases, rewritten, classical, data-tiled, failures); each failing
case is saved under ``--save-dir`` (MLIR before/after, options, seed, error),
after a greedy shrink towards a minimal input. Exit status 1 on any failure.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from dataclasses import asdict, dataclass, replace
from typing import Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "test", "python", "helpers"))

from hypothesis import HealthCheck, Phase, given, seed as hyp_seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cases import contraction_mlir, random_inputs, reference, rewrite  # noqa: E402  (test helpers)

from falcon_mlir.cli import ArgumentParser, run_tool  # noqa: E402
from falcon_mlir.compare import rel_err  # noqa: E402
from falcon_mlir.files import write_files_atomic  # noqa: E402

SCHEMES = ["strassen", "winograd", "2x2x3:11", "2x3x3:15", "3x3x3:23", "2x3x4:20", "3x2x4:20",
           "4x4x4:49", "4x4x4:48"]
#: (lhs, acc) pairs.
TYPES = [("f32", "f32"), ("f16", "f16"), ("bf16", "f32"), ("f64", "f64"), ("i8", "i32")]
PRIMES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79]


@dataclass(frozen=True)
class Case:
    M: int
    N: int
    K: int
    lhs: str
    acc: str
    transpose_a: bool
    transpose_b: bool
    batch: int
    form: str          # op form: matmul | generic
    scheme: str
    levels: int
    edge: str          # peel | pad
    layout: str        # rewrite form: per-product | grouped
    seed: int          # input seed
    data_tiling: bool = False  # compile with IREE's best CPU flags (data tiling + ukernels)

    @property
    def flags(self) -> tuple:
        """The IREE flags both modules of this case compile with."""
        return _flags(self.acc, self.data_tiling)

    @property
    def options(self) -> str:
        # Under data tiling, as falcon-compile and the API rewrite (their pipeline default).
        return (f"scheme={self.scheme} levels={self.levels} edge={self.edge} form={self.layout}"
                + (" barriers=true" if self.data_tiling else ""))

    def mlir(self) -> tuple:
        return contraction_mlir(self.M, self.N, self.K, lhs=self.lhs, acc=self.acc, batch=self.batch,
                                transpose_a=self.transpose_a, transpose_b=self.transpose_b,
                                form=self.form)


@dataclass
class Outcome:
    status: str                    # rewritten | classical | fail
    signature: str = ""            # failure kind
    detail: str = ""
    original: str = ""
    rewritten: str = ""
    report: Optional[list] = None


# --------------------------------------------------------------------------
# Strategy
# --------------------------------------------------------------------------

def pick_size(rnd, max_size: int) -> int:
    """1..max_size from ``rnd`` (a ``random.Random``), biased to 1 (6%), primes (20%) and
    multiples of 2, 3, 4 (44%); the rest uniform."""
    x = rnd.random()
    if x < 0.06:
        return 1
    if x < 0.26:
        return rnd.choice([p for p in PRIMES if p <= max_size] or [1])
    if x < 0.70:
        d = rnd.choice([d for d in (2, 3, 4) if d <= max_size] or [1])
        return d * rnd.randint(1, max_size // d)
    return rnd.randint(1, max_size)


def case_strategy(max_size: int = 80, max_products: int = 0, rnd=None, data_tiling: float = 0.0):
    """Cases; sizes come from ``rnd`` (a ``random.Random`` the caller seeds), the rest from
    hypothesis. Hypothesis's own integer draws lean hard to the bounds (1 in ~25% of the
    draws, and its mutations repeat earlier draws), which would leave most cases too small
    for the schemes; an external Random keeps the size distribution as designed.
    ``data_tiling`` is the probability of a case compiled with data tiling on (drawn from
    ``rnd`` too; 0 draws nothing, keeping older seeds' cases)."""
    import random

    from falcon_mlir.catalog import get_scheme

    rnd = rnd or random.Random(0)

    @st.composite
    def case(draw):
        M, N, K = (pick_size(rnd, max_size) for _ in range(3))
        lhs, acc = draw(st.sampled_from(TYPES))
        scheme = draw(st.sampled_from(SCHEMES))
        levels = 3 if draw(st.integers(0, 9)) == 0 else draw(st.integers(1, 2))
        if max_products:
            R = get_scheme(scheme).R
            while levels > 1 and R ** levels > max_products:
                levels -= 1
        batch = draw(st.sampled_from([0, 0, 0, 1, 2, 3]))
        # From rnd, not hypothesis: its first examples are its simplest (integers(0, 19)
        # gave 0, tiled, in 19 of the first 25 cases for a 40% share).
        tiled = data_tiling > 0 and rnd.random() < data_tiling
        return Case(M=M, N=N, K=K, lhs=lhs, acc=acc, transpose_a=draw(st.booleans()),
                    transpose_b=draw(st.booleans()), batch=batch,
                    form=draw(st.sampled_from(["matmul", "generic"])), scheme=scheme,
                    levels=levels, edge=draw(st.sampled_from(["peel", "pad"])),
                    layout=draw(st.sampled_from(["per-product", "grouped"])),
                    seed=rnd.randrange(2 ** 31), data_tiling=bool(tiled))

    return case()


# --------------------------------------------------------------------------
# One case
# --------------------------------------------------------------------------

#: What data tiling adds to CPU_FLAGS: IREE's best CPU flags (runner.BEST_CPU_FLAGS).
DATA_TILING_FLAGS = ("--iree-opt-data-tiling=true", "--iree-llvmcpu-enable-ukernels=all")


def _flags(acc: str, data_tiling: bool = False) -> tuple:
    from falcon_mlir.runner import CPU_FLAGS

    flags = CPU_FLAGS + (DATA_TILING_FLAGS if data_tiling else ())
    # IREE demotes f64 to f32 by default; keep f64 real (as test_rewrite_numerics does).
    return flags + ("--iree-input-demote-f64-to-f32=false",) if acc == "f64" else flags


def _count_contractions(text: str) -> int:
    from iree.compiler import ir

    from falcon_mlir.ir.contraction import find_contractions

    with ir.Context():
        return len(find_contractions(ir.Module.parse(text).operation))


def run_case(case: Case) -> Outcome:
    """Rewrite, compile and run ``case``; never raises."""
    from falcon_mlir.catalog import get_scheme
    from falcon_mlir.decision.numerics import predicted_error
    from falcon_mlir.runner import run_mlir

    out = Outcome(status="fail")
    try:
        text, shapes = case.mlir()
        out.original = text
        new, report = rewrite(text, case.options)
        out.rewritten, out.report = new, report
        if len(report) != 1:
            return replace(out, signature="report-entries", detail=f"{len(report)} report entries")
        entry = report[0]
        plan = entry["plan"]
        is_int = case.acc.startswith("i")
        rational = not get_scheme(case.scheme).is_integral
        if plan != "classical":
            if is_int and rational:
                return replace(out, signature="int-rational-rewritten",
                               detail=f"integer contraction rewritten with {plan['schemes']}")
            n = _count_contractions(new)
            if n == 0 or not entry.get("products"):
                return replace(out, signature="plan-without-products",
                               detail=f"plan {plan} but {n} contractions in the IR, "
                                      f"report products={entry.get('products')}")
        elif is_int and rational:
            pass  # expected: kept classical
        a, b, c = random_inputs(shapes, [case.lhs, case.lhs, case.acc], seed=case.seed)
        flags = case.flags
        got_orig = run_mlir(text, "f", a, b, c, flags=flags)
        got_new = run_mlir(new, "f", a, b, c, flags=flags)
        ref = reference(a, b, c, batch=case.batch, transpose_a=case.transpose_a,
                        transpose_b=case.transpose_b)
        if got_new.shape != ref.shape or got_new.dtype != c.dtype:
            return replace(out, signature="shape-or-dtype",
                           detail=f"got {got_new.shape} {got_new.dtype}, want {ref.shape} {c.dtype}")
        if plan == "classical":
            if not np.array_equal(got_new.view(np.uint8), got_orig.view(np.uint8)):
                return replace(out, signature="classical-differs",
                               detail=f"report classical ({entry['reason']}) but output differs "
                                      f"from the original's: max |diff| "
                                      f"{np.abs(got_new.astype(np.float64) - got_orig.astype(np.float64)).max()}")
            return replace(out, status="classical", detail=entry["reason"])
        if is_int:
            if not np.array_equal(got_new.astype(np.int64), ref):
                bad = int((got_new.astype(np.int64) != ref).sum())
                return replace(out, signature="int-wrong",
                               detail=f"{bad} of {ref.size} entries differ from the exact result "
                                      f"(original exact: {np.array_equal(got_orig.astype(np.int64), ref)})")
            return replace(out, status="rewritten")
        err_new = rel_err(got_new, ref)
        err_orig = rel_err(got_orig, ref)
        pred = predicted_error(list(plan["schemes"]), case.K, case.acc)
        tol = max(2 * pred, 4 * err_orig)
        if not err_new <= tol:  # also catches NaN
            return replace(out, signature="float-wrong",
                           detail=f"rel err {err_new:.3e} > tol {tol:.3e} (predicted {pred:.3e}, "
                                  f"classical module {err_orig:.3e}, plan {plan['schemes']})")
        return replace(out, status="rewritten")
    except Exception as e:  # noqa: BLE001 -- any exception is a failure
        # A compiler error's first diagnostic says what failed; the traceback's tail is
        # mostly the target attribute and the command line.
        first = next((ln.strip() for ln in str(e).splitlines() if "error:" in ln), "")
        return replace(out, signature=f"exception:{type(e).__name__}",
                       detail=(first[:400] + "\n" if first else "")
                       + "".join(traceback.format_exception(e))[-4000:])


# --------------------------------------------------------------------------
# Shrinking and saving
# --------------------------------------------------------------------------

def _smaller(v: int) -> list:
    return sorted({x for x in (1, 2, 3, 4, 6, 8, v // 2, v - 1) if 1 <= x < v})


def shrink(case: Case, signature: str, budget: int) -> tuple:
    """Greedy shrink of a failing case, keeping its failure signature; ``(case, outcome, tries)``."""
    best, best_out = case, None
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        cands = []
        for f in ("M", "N", "K"):
            cands += [replace(best, **{f: v}) for v in _smaller(getattr(best, f))]
        cands += [replace(best, batch=0), replace(best, transpose_a=False),
                  replace(best, transpose_b=False), replace(best, form="matmul"),
                  replace(best, levels=best.levels - 1) if best.levels > 1 else best,
                  replace(best, edge="peel"), replace(best, layout="per-product"),
                  replace(best, lhs="f32", acc="f32"), replace(best, seed=0),
                  replace(best, data_tiling=False)]
        for cand in cands:
            if cand == best or tries >= budget:
                continue
            tries += 1
            o = run_case(cand)
            if o.status == "fail" and o.signature == signature:
                best, best_out, improved = cand, o, True
                break
    return best, best_out, tries


def save(save_dir: str, idx: int, case: Case, out: Outcome, run_seed: int, minimal=None) -> str:
    """Write a failing case (MLIR before/after, the minimal case if shrunk,
    case.json) into a folder of ``save_dir``, all files or none; returns the folder."""
    d = os.path.join(save_dir, f"{idx:04d}-{out.signature.replace(':', '-')}")
    os.makedirs(d, exist_ok=True)
    files = [("original.mlir", out.original), ("rewritten.mlir", out.rewritten)]
    info = {"run_seed": run_seed, "case": asdict(case), "options": case.options,
            "flags": list(case.flags),
            "signature": out.signature, "detail": out.detail, "report": out.report}
    if minimal is not None:
        mcase, mout = minimal
        info["minimal"] = {"case": asdict(mcase), "options": mcase.options,
                           "flags": list(mcase.flags), "detail": mout.detail}
        files += [("minimal.mlir", mout.original), ("minimal.rewritten.mlir", mout.rewritten)]
    files.append(("case.json", json.dumps(info, indent=2, default=str)))
    write_files_atomic([(os.path.join(d, name), text.encode()) for name, text in files])
    return d


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------

def fuzz(cases: int = 150, seed: int = 0, max_size: int = 80, max_products: int = 600,
         save_dir: Optional[str] = None, shrink_budget: int = 0, time_budget: float = 0,
         verbose: bool = False, log=print, data_tiling: float = 0.0) -> dict:
    """Run ``cases`` hypothesis-drawn cases with ``seed``, a ``data_tiling`` fraction of
    them compiled with data tiling on; returns the summary dict (counts, ``failed``,
    ``by_scheme``, and ``covered``: per axis of :data:`COVERAGE_AXES` the set of values drawn)."""
    stats = {"cases": 0, "rewritten": 0, "classical": 0, "data_tiled": 0, "failures": 0,
             "failed": [], "by_scheme": {}, "covered": {axis: set() for axis in COVERAGE_AXES}}
    t_start = time.time()
    rnd = random.Random(seed)

    @hyp_seed(seed)
    @settings(max_examples=cases, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=False)
    @given(case=case_strategy(max_size, max_products, rnd, data_tiling))
    def one(case: Case):
        if time_budget and time.time() - t_start > time_budget:
            return
        t0 = time.time()
        out = run_case(case)
        stats["cases"] += 1
        stats["data_tiled"] += case.data_tiling
        for axis, value in coverage(case).items():
            stats["covered"][axis].add(value)
        if out.status == "fail":
            stats["failures"] += 1
            rec = {"case": case, "options": case.options, "signature": out.signature,
                   "detail": out.detail}
            minimal = None
            if shrink_budget:
                mcase, mout, _ = shrink(case, out.signature, shrink_budget)
                if mout is not None:
                    minimal = (mcase, mout)
                    rec["minimal"] = mcase
                    rec["minimal_detail"] = mout.detail
            if save_dir:
                rec["saved"] = save(save_dir, stats["failures"], case, out, seed, minimal)
            stats["failed"].append(rec)
            log(f"FAIL [{out.signature}] {case}\n  {out.detail.splitlines()[0] if out.detail else ''}"
                + (f"\n  minimal: {rec['minimal']}" if "minimal" in rec else ""))
        else:
            stats[out.status] += 1
            key = case.scheme
            stats["by_scheme"].setdefault(key, [0, 0])[out.status == "rewritten"] += 1
        if verbose:
            log(f"{stats['cases']:5d} {out.status:10s} {time.time() - t0:5.1f}s {case.options} "
                f"{case.M}x{case.N}x{case.K} {case.lhs}->{case.acc} b{case.batch} "
                f"ta{int(case.transpose_a)} tb{int(case.transpose_b)} {case.form} "
                f"dt={int(case.data_tiling)}")

    one()
    stats["seconds"] = time.time() - t_start
    return stats


#: The case's axes :func:`coverage` reports, each with every value the strategy can draw
#: under ``max_products >= 49`` (so a short profile can check it drew them all).
COVERAGE_AXES = {
    "lhs": {t[0] for t in TYPES},
    "scheme": set(SCHEMES),
    "form": {"matmul", "generic"},
    "data_tiling": {False, True},
    "edge": {"peel", "pad"},
    "layout": {"per-product", "grouped"},
    "levels": {1, 2},
    "batched": {False, True},
    "transpose_a": {False, True},
    "transpose_b": {False, True},
    "lhs_data_tiled": {t[0] for t in TYPES},
}


def coverage(case: Case) -> dict:
    """The value of each axis of :data:`COVERAGE_AXES` for ``case`` (``lhs_data_tiled``:
    the element type when data tiling is on, else None)."""
    return {"lhs": case.lhs, "scheme": case.scheme, "form": case.form,
            "data_tiling": case.data_tiling, "edge": case.edge, "layout": case.layout,
            "levels": case.levels, "batched": case.batch > 0,
            "transpose_a": case.transpose_a, "transpose_b": case.transpose_b,
            "lhs_data_tiled": case.lhs if case.data_tiling else None}


def summary_line(stats: dict) -> str:
    return (f"fuzz_diff: {stats['cases']} cases run, {stats['rewritten']} rewritten, "
            f"{stats['classical']} classical, {stats['data_tiled']} data-tiled, "
            f"{stats['failures']} failures "
            f"({stats['seconds']:.0f} s)")


def main(argv=None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    return run_tool("fuzz_diff", _main, argv)


def _main(argv: list) -> int:
    p = ArgumentParser(prog="fuzz_diff", description=__doc__.split("\n")[0])
    p.add_argument("--cases", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--long", action="store_true", help="2000 cases")
    p.add_argument("--max-size", type=int, default=80)
    p.add_argument("--max-products", type=int, default=600,
                   help="cap R_1*...*R_L of drawn plans by dropping levels (0: no cap)")
    p.add_argument("--data-tiling", type=float, default=0.4,
                   help="fraction of cases compiled with data tiling + ukernels on (0..1)")
    p.add_argument("--shrink", type=int, default=40, help="shrink attempts per failure (0: off)")
    p.add_argument("--time-budget", type=float, default=0, help="stop drawing after this many s")
    p.add_argument("--save-dir", default="/tmp/falcon-fuzz-diff")
    p.add_argument("--verbose", "-v", action="store_true")
    args = p.parse_args(argv)
    n = 2000 if args.long else args.cases
    stats = fuzz(cases=n, seed=args.seed, max_size=args.max_size, max_products=args.max_products,
                 save_dir=args.save_dir, shrink_budget=args.shrink, time_budget=args.time_budget,
                 verbose=args.verbose, data_tiling=args.data_tiling)
    print(summary_line(stats))
    return 1 if stats["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Fit a profile's form factors to measured plans (the cost model's calibration step).

Micro-benchmarks (GEMM rate, bandwidth) are measured on isolated dispatches
whose operands stay hot in cache; inside a plan, products read operands that
the combines just wrote, and combines read products that just left the
GEMM. So for each form the model's time of a plan

    T = f * P + C / e

(``P``: the predicted products time, ``C``: the predicted combine time at
full bandwidth, both from :class:`falcon_mlir.decision.cost.CostModel` with
unit factors; ``e``: the combine efficiency the micro-benchmark measured,
``<form>_combine``) is fitted to measured times of real plans (one-level
Strassen in that form at two sizes): ``f`` (``<form>_products``) by least
squares on relative errors. Two free factors per form were tried and rejected:
with two noisy points they traded a slow product for an impossibly fast
combine.

Measurements: ``falcon_mlir.compile_str`` with IREE's best CPU flags (data
tiling + microkernels), random normal f32 inputs, round-robin medians.

The kernel form on the CPU (``x86-falcon``: LCMA plans on falcon's own kernel) is fitted the same way
from falcon-bench runs instead (:func:`fit_kernel_products`, ``falcon-calibrate --refit``): many shapes of
the workloads a user runs, each plan relative to the classical kernel in the same run.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from falcon_mlir.decision.cost import CostModel, Problem
from falcon_mlir.decision.profile import Profile

#: Sizes (n, square f32) of the plans measured per form.
FIT_SIZES = (2048, 4096)
QUICK_FIT_SIZES = (512, 1024)
#: Plans measured: (form, lcma option string).
FIT_PLANS = (("per-product", "scheme=strassen levels=1 form=per-product edge=peel"),
             ("grouped", "scheme=strassen levels=1 form=grouped edge=peel"))


def measure_plans(sizes: Sequence[int] = FIT_SIZES, seconds: float = 2.0,
                  step: Optional[Callable[[str], None]] = None) -> List[dict]:
    """Time classical and the :data:`FIT_PLANS` at each size on the local CPU.

    Returns:
        One dict per (size, form): ``n``, ``form``, ``seconds`` (median of
        round-robin calls, at least 3), ``classical`` (its median).

    Raises:
        falcon_mlir.CompileError: a module does not compile.
    """
    import numpy as np

    from falcon_mlir import compile_str
    from falcon_mlir.ir.matmul_text import matmul_mlir
    from falcon_mlir.runner import BEST_CPU_FLAGS, Module

    out = []
    for n in sizes:
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        runs = {}
        for name, lcma in [("classical", None)] + list(FIT_PLANS):
            if step:
                step(f"fit: compile {name} {n}^3")
            vmfb = compile_str(matmul_mlir(n, n, n), target_backends=["llvm-cpu"],
                               extra_args=list(BEST_CPU_FLAGS), lcma=lcma)
            mod = Module(vmfb)
            args = mod.on_device(a, b)
            runs[name] = (lambda mod=mod, args=args: mod("mm", *args))
        times: Dict[str, list] = {k: [] for k in runs}
        for fn in runs.values():
            fn()  # warm-up
        t_end = time.perf_counter() + seconds * len(runs)
        while min(len(v) for v in times.values()) < 3 or time.perf_counter() < t_end:
            for k, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
            if min(len(v) for v in times.values()) >= 50:
                break
        if step:
            step(f"fit: timed {n}^3 ({len(times['classical'])} rounds)")
        cls = statistics.median(times["classical"])
        for form, _ in FIT_PLANS:
            out.append({"n": n, "form": form, "seconds": statistics.median(times[form]),
                        "classical": cls})
    return out


def _parts(profile: Profile, n: int, form: str, dtype: str = "f32") -> Tuple[float, float]:
    """(products time, combine time at full bandwidth) of one-level Strassen, unit factors."""
    unit = replace(profile, forms={})
    est = CostModel(unit).plan(Problem(n, n, n, lhs=dtype, rhs=dtype, acc=dtype), ("strassen",),
                               "peel", form)
    comb = sum(v for k, v in est.parts.items() if k.startswith("combine"))
    return est.seconds - comb, comb


def fit_forms(profile: Profile, measured: Sequence[dict]) -> Tuple[Profile, Dict[str, float]]:
    """Fit ``<form>_products`` of ``profile`` to ``measured`` plans.

    Args:
        profile: the micro-benchmark profile.
        measured: dicts with ``n``, ``form``, ``seconds`` and optionally
            ``dtype`` (default f32; see :func:`measure_plans`).

    Returns:
        ``(profile with the fitted forms, forms dict)``.
    """
    forms = dict(profile.forms)
    for form in sorted({m["form"] for m in measured}):
        key = form.replace("-", "_")
        x = 1.0 / profile.form_efficiency(form)  # combine factor from the micro-benchmark
        rows = [(m["seconds"],) + _parts(profile, m["n"], form, m.get("dtype", "f32"))
                for m in measured if m["form"] == form]
        num = sum(p * (t - x * c) / t ** 2 for t, p, c in rows)
        den = sum(p * p / t ** 2 for t, p, c in rows)
        f = num / den if den > 0 else 1.0
        forms[f"{key}_products"] = round(max(f, 0.5), 4)
    return replace(profile, forms=forms), forms


# --------------------------------------------------------------------------- the CPU kernel form
#: A falcon-bench plan text (``falcon_mlir.bench.candidates.plan_text``) of a one-level kernel-form plan
#: that tiles the shape exactly: ``strassen x1 (7 products, kernel)``.
_KERNEL_PLAN = re.compile(r"^([\w.:-]+) x1 \((?:\d+ products, )?kernel\)$")
#: Columns :func:`read_bench_csv` needs.
BENCH_COLUMNS = ("M", "N", "K", "dtype", "const_weights", "candidate", "plan", "median_s", "status")


@dataclass(frozen=True)
class KernelFit:
    """What :func:`fit_kernel_products` fitted, and how well.

    Attributes:
        before, after: ``kernel_products`` of the profile given and fitted (dimensionless).
        used: shapes (a classical row and a one-level kernel-form plan timed in one run) the fit used.
        narrow: shapes left out because the plan's products are narrower than the kernel's column
            block (:func:`falcon_mlir.decision.cpu_kernel.narrow_factor` prices them, a bound, not a fit).
        other: shapes left out otherwise: no classical row or no such plan, several classical
            rows (runs appended to one CSV), not f32, constant weights, a plan of more levels or with
            padded edges, a row not ``ok``.
        resid_before, resid_after: geometric mean over the used shapes of measured gain (classical
            median / plan median) over the gain the profile predicts, before and after.
        spread: standard deviation of the log of that ratio, after (the measurements' noise plus what
            one factor cannot fit).
    """

    before: float
    after: float
    used: int
    narrow: int
    other: int
    resid_before: float
    resid_after: float
    spread: float


class BenchRows(list):
    """The rows of one falcon-bench CSV (a list of dicts, values as strings) and the file they came from
    (``path``), which errors about a row name."""

    path: str = ""


#: Sizes above this are not a falcon-bench run's (and overflow the cost model's floats).
_MAX_SIZE = 2**63 - 1


def read_bench_csv(path: str) -> List[dict]:
    """The rows of a falcon-bench ``--csv`` file (values as strings), as :class:`BenchRows` naming ``path``.

    Raises:
        OSError: the file cannot be read.
        ValueError: not a falcon-bench CSV (a column of :data:`BENCH_COLUMNS` missing, not UTF-8 text, a
            malformed line: more or fewer fields than the header, or M, N, K not a positive integer),
            naming the file (and the line).
    """
    import csv

    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in BENCH_COLUMNS if c not in header]
            if missing:
                raise ValueError(f"{path}: not a falcon-bench CSV (no column {', '.join(missing)})")
            rows = BenchRows()
            rows.path = path
            for r in reader:
                n = len(header) - sum(v is None for k, v in r.items() if k is not None) + len(r.get(None) or ())
                if n != len(header):
                    raise ValueError(f"{path}: line {reader.line_num}: not a falcon-bench CSV ({n} fields, the "
                                     f"header has {len(header)})")
                for c in ("M", "N", "K"):
                    v = r[c]
                    if not re.fullmatch(r"[0-9]+", v) or not 0 < int(v) <= _MAX_SIZE:
                        shown = v if len(v) <= 24 else v[:20] + "..."
                        raise ValueError(f"{path}: line {reader.line_num}: column {c} is not a positive integer "
                                         f"({shown!r})")
                rows.append(r)
            return rows
    except (UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"{path}: not a falcon-bench CSV ({e})") from None


def _seconds(row: dict) -> float:
    try:
        t = float(row["median_s"])
    except (TypeError, ValueError):
        return math.nan
    return t if row.get("status") == "ok" and math.isfinite(t) and t > 0 else math.nan


def _kernel_points(profile: Profile, tables: Sequence[Sequence[dict]]) -> Tuple[list, int, int]:
    """``(points, narrow, other)``: per usable shape ``(t, P, C, classical_pred)``, the plan's measured
    time in the profile's units (its median times the profile's classical time over the measured
    classical median), the part of its predicted time that ``kernel_products`` scales (at 1) and the
    rest (combines, dispatch overheads)."""
    from falcon_mlir.decision.cpu_kernel import narrow_factor

    cm = CostModel(profile)
    cu, c2 = (CostModel(replace(profile, forms={**profile.forms, "kernel_products": f})) for f in (1.0, 2.0))
    points, narrow, other = [], 0, 0
    for i, rows in enumerate(tables):
        where = getattr(rows, "path", "") or f"run {i + 1}"
        groups: Dict[tuple, list] = {}
        for r in rows:
            groups.setdefault((r["M"], r["N"], r["K"], r["dtype"], r["const_weights"]), []).append(r)
        for (M, N, K, dtype, const), g in groups.items():
            cls = [r for r in g if r["candidate"] == "classical"]
            plans = [(m.group(1), _seconds(r)) for r in g for m in [_KERNEL_PLAN.match(r["plan"])] if m]
            plans = [(s, t) for s, t in plans if math.isfinite(t)]
            if (dtype != "f32" or const not in ("0", "False", "") or len(cls) != 1
                    or not math.isfinite(_seconds(cls[0])) or not plans or len({s for s, _ in plans}) > 1):
                other += 1
                continue
            M, N, K = int(M), int(N), int(K)
            scheme = plans[0][0]
            pb = Problem(M, N, K, lhs="f32", rhs="f32", acc="f32")
            try:  # a scheme this catalog does not know (a CSV of another FALCON_SHARED, or edited)
                est = cu.plan(pb, (scheme,), "peel", "kernel")
            except ValueError as e:
                raise ValueError(f"{where}: {M}x{N}x{K}: {e}") from None
            if est.unfit or est.ragged:
                other += 1
                continue
            if narrow_factor(-(-N // _format_n(scheme))) > 1:
                narrow += 1
                continue
            pred_cls = cm.classical(pb).seconds
            t = min(t for _, t in plans) * pred_cls / _seconds(cls[0])
            # the part the factor scales (the products' dispatch overheads are not scaled)
            P = c2.plan(pb, (scheme,), "peel", "kernel").parts["products"] - est.parts["products"]
            points.append((t, P, est.seconds - P, pred_cls))
    return points, narrow, other


def _format_n(scheme: str) -> int:
    from falcon_mlir.decision.scheme_stats import scheme_stats

    return scheme_stats(scheme).n


def fit_kernel_products(profile: Profile, tables: Sequence[Sequence[dict]]) -> Tuple[Profile, KernelFit]:
    """Fit ``forms.kernel_products`` of a CPU profile to falcon-bench runs on this machine.

    Each shape of a run (``tables``: one list of CSV rows per falcon-bench run, :func:`read_bench_csv`)
    that timed ``classical`` and a one-level kernel-form plan (auto's or a forced candidate's, the
    faster median where both) gives one point. Rates differ between machines, ratios less: the plan's
    median is put in the profile's units by the ratio of the profile's classical time to the measured
    classical median, then ``T = f P + C`` (``P``: the plan's products at ``kernel_products = 1``,
    ``C``: its combines and dispatch overheads, :func:`falcon_mlir.decision.cpu_kernel.price`) is fitted for ``f``
    by least squares on relative errors, as :func:`fit_forms` does. Shapes whose products are priced
    by the narrow factor are left out (a bound, not a fit).

    Returns:
        ``(the profile with kernel_products = f rounded to 4 digits, KernelFit)``.

    Raises:
        ValueError: the profile has no kernel form on the CPU, no shape of ``tables`` is usable, or a
            plan names a scheme the catalog does not know (naming the CSV and the shape).
    """
    if profile.kind != "cpu" or "kernel" not in profile.plan_forms:
        raise ValueError(f"profile {profile.name} has no kernel form on the CPU (kind {profile.kind}, "
                         f"plan forms {', '.join(profile.plan_forms)})")
    points, narrow, other = _kernel_points(profile, tables)
    if not points:
        raise ValueError("no shape has both a classical row and a one-level kernel-form plan timed in one "
                         "run (falcon-bench --candidates classical,auto on shapes auto rewrites; a shape timed "
                         "in two runs appended to one CSV is left out)")
    num = sum(P * (t - C) / t ** 2 for t, P, C, _ in points)
    den = sum(P * P / t ** 2 for t, P, C, _ in points)
    before = profile.product_factor("kernel")
    after = round(max(num / den, 0.5), 4)

    def logs(f):  # log(measured gain / predicted gain) per point
        return [math.log((f * P + C) / t) for t, P, C, _ in points]

    la, lb = logs(after), logs(before)
    fitted = replace(profile, forms={**profile.forms, "kernel_products": after})
    return fitted, KernelFit(before, after, len(points), narrow, other, math.exp(statistics.mean(lb)),
                             math.exp(statistics.mean(la)), statistics.stdev(la) if len(la) > 1 else 0.0)

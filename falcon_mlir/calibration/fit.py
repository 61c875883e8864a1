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
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
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

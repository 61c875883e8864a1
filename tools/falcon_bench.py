"""falcon-bench: time falcon-mlir's LCMA candidates against classical IREE GEMM.

    falcon-bench [--shapes MxNxK,... | --workloads FILE [--model NAME] --m 512,1024,2048]
                 [--dtype f32|f16|bf16] [--acc same|f32]
                 [--candidates "classical,auto,scheme=strassen levels=1,..."]
                 [--flags best|default] [--iree-flag FLAG ...] [--const-weights]
                 [--repeat 5] [--warmup 1] [--numpy] [--seed 0]
                 [--csv out.csv] [--md out.md] [--plot out.png] [--append]
                 [--title TEXT] [--device local-task]

For every shape (M, N, K) it builds ``C = A @ B`` (A: M x K, B: K x N, C: M x N,
``linalg.matmul`` on a zero-filled C) and compiles it once per candidate with
:func:`falcon_mlir.compile_str` and the same IREE flags:

* ``classical``: the rewrite off (``lcma=None``), plain IREE; always run, since
  every ratio is taken against it;
* ``auto``: falcon's decision rule (``lcma="auto"``);
* ``scheme=S levels=L ...``: any ``lcma-rewrite`` option string, as is;
* ``numpy``: ``numpy.matmul`` (OpenBLAS) on the host arrays, as a peer (also
  ``--numpy``).  For f16/bf16 the numpy peer multiplies the float32 upcast.
* ``top``: per shape, the cost model's best plans (``--top N``, default 2,
  the choice's runners-up on the host profile, or the best ones when the
  choice is classical) as forced option strings, so falcon's choice is
  compared with the other top candidates in the same run.

``--quality`` adds the decision-quality table: per shape, the best measured
candidate (IREE candidates only), falcon's choice (``auto``) against it and
against classical, whether it is within 3% of the best; and the summary: the
share of shapes within 3%, the worst slowdown of ``auto`` against classical
and the geometric mean of classical / auto.

Candidates are separated by commas (option strings hold spaces, not commas).

Flags (``--flags``): ``default`` = llvm-cpu for the host CPU
(``--iree-llvmcpu-target-cpu=host``); ``best`` = that plus data tiling and
microkernels (``--iree-opt-data-tiling=true --iree-llvmcpu-enable-ukernels=all``).
``--iree-flag`` appends further iree-compile flags.

``--const-weights`` makes B a module constant (``dense_resource`` blob built
from the same random array, handed to IREE as MLIR bytecode, so no hex text is
made) and the function takes A only; IREE's constant evaluation then folds the
rewrite's combines of B (B11 + B22, ...) at compile time into module globals.

Inputs are random normal (seeded, ``--seed``), never zeros or ones.  Each
candidate's result is checked against a float64 numpy reference and against
the classical result: relative error = max|C - R| / max|R| (max norm,
dimensionless).  Timing: ``--warmup`` calls per candidate, then ``--repeat``
rounds in which every IREE candidate is called once (round-robin, so drift of
the shared machine spreads over all; the numpy peer is timed after them, as
OpenBLAS's spinning threads would slow the next call); inputs are already on the device; each call
waits for the result and maps it to the host (``runner.Module`` semantics).

Output, one row per (shape, candidate): median and min seconds, effective
GFLOP/s = 2*M*N*K / median / 1e9 (counts classical flops, so a scheme that
multiplies less can exceed the machine's peak), speedup vs classical =
classical median / candidate median (> 1: faster), relative errors, compile
seconds, the plan from falcon's report.  Written as CSV (``--csv``), markdown
(``--md``, the exact command line at the top), and a PNG plot (``--plot``,
matplotlib): effective GFLOP/s vs M per weight shape (K x N), one line per
candidate.  ``--append`` adds to existing CSV/markdown files (the plot is
redrawn from the whole CSV).  The markdown table is printed at the end.

Exit status: 0 all ran (individual compile/run failures are rows with a
status); 2 bad arguments (one line ``falcon-bench: error: ...`` on stderr);
1 nothing could be measured.

For a fair numpy peer, unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE in the
benchmark's own command (``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
falcon-bench ...``); the OpenBLAS core in use is printed and recorded.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import platform
import re
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from falcon_mlir.runner import BEST_CPU_FLAGS
from falcon_mlir.runner import matmul_mlir as runner_matmul_mlir

PROG = "falcon-bench"

#: iree-compile flags per ``--flags`` choice (the target backend comes from
#: ``compile_str(target_backends=["llvm-cpu"])``).
FLAG_SETS = {
    "default": ["--iree-llvmcpu-target-cpu=host"],
    "best": list(BEST_CPU_FLAGS),
}

#: Output columns (CSV header and markdown table), with units in the names.
COLUMNS = [
    "label", "M", "N", "K", "dtype", "flags", "const_weights", "candidate", "plan",
    "compile_s", "median_s", "min_s", "gflops", "speedup_vs_classical",
    "rel_err_f64", "rel_err_vs_classical", "status",
]

MD_COLUMNS = [
    ("shape MxNxK", None), ("weights", "label"), ("candidate", "candidate"), ("plan", "plan"),
    ("median s", "median_s"), ("min s", "min_s"), ("eff. GFLOP/s", "gflops"),
    ("vs classical", "speedup_vs_classical"), ("rel err (f64)", "rel_err_f64"),
    ("rel err vs classical", "rel_err_vs_classical"), ("compile s", "compile_s"),
    ("status", "status"),
]

_MLIR_TYPES = {"f32": "f32", "f16": "f16", "bf16": "bf16"}


class UsageError(Exception):
    """A bad command line; reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        raise UsageError(message)


# --------------------------------------------------------------------------- shapes


@dataclass
class Shape:
    """One GEMM: C (M x N) = A (M x K) @ B (K x N); ``label`` names the weight."""

    M: int
    N: int
    K: int
    label: str = ""

    @property
    def flops(self) -> float:
        """Classical floating-point operations, 2*M*N*K."""
        return 2.0 * self.M * self.N * self.K

    def text(self) -> str:
        return f"{self.M}x{self.N}x{self.K}"


def _int_list(text: str, what: str) -> list[int]:
    out = []
    for tok in text.split(","):
        tok = tok.strip()
        if not tok:
            continue
        if not re.fullmatch(r"[0-9]+", tok) or int(tok) <= 0:
            raise UsageError(f"{what}: {tok!r} is not a positive integer")
        out.append(int(tok))
    if not out:
        raise UsageError(f"{what}: empty list")
    return out


def parse_shapes(text: str) -> list[Shape]:
    """``"MxNxK,..."`` -> shapes (label: ``square`` when M = N = K, else ``KxN``).

    Raises:
        UsageError: a token that is not three positive integers joined by ``x``.
    """
    shapes = []
    for tok in text.split(","):
        tok = tok.strip()
        if not tok:
            continue
        m = re.fullmatch(r"([0-9]+)[xX]([0-9]+)[xX]([0-9]+)", tok)
        if not m or 0 in (int(m.group(1)), int(m.group(2)), int(m.group(3))):
            raise UsageError(f"--shapes: {tok!r} is not MxNxK with positive integers")
        M, N, K = (int(g) for g in m.groups())
        label = "square" if M == N == K else f"{K}x{N}"
        shapes.append(Shape(M, N, K, label))
    if not shapes:
        raise UsageError("--shapes: empty list")
    return shapes


def parse_workloads(path: str, model: Optional[str]) -> list[tuple[str, int, int]]:
    """Weight shapes ``(label, K, N)`` from a workloads file.

    Reads the markdown table of ``workloads.md`` (columns model | layer | K | N;
    an empty model cell continues the row above; ``"a / b"`` in K, N and layer
    lists several layers; ``k, v`` share one shape) or plain lines ``K N
    [label]``.  ``model`` keeps the rows whose model cell contains it
    (case-insensitive).  Duplicate (K, N) pairs are merged into one label.

    Raises:
        UsageError: unreadable file or no shape found.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise UsageError(f"--workloads: cannot read {path}: {e.strerror}") from None
    found: list[tuple[str, int, int]] = []
    current_model = ""
    for line in lines:
        s = line.strip()
        if s.startswith("|"):
            cells = [c.strip() for c in s.strip("|").split("|")]
            if len(cells) < 4 or set(cells[0]) <= set("-: ") and cells[0]:
                continue
            if cells[2].lower() == "k":
                continue  # header
            if cells[0]:
                current_model = cells[0]
            ks = [c.strip() for c in cells[2].split("/")]
            ns = [c.strip() for c in cells[3].split("/")]
            layers = [c.strip() for c in cells[1].split("/")]
            n = max(len(ks), len(ns))
            if not all(re.fullmatch(r"[0-9]+", x) for x in ks + ns):
                continue
            if len(ks) > 1 and len(ns) > 1 and len(ks) != len(ns):
                raise UsageError(f"--workloads: row '{s}' lists {len(ks)} K and {len(ns)} N values")
            if model and model.lower() not in current_model.lower():
                continue
            short = current_model.split("(")[0].strip()
            for i in range(n):
                K = int(ks[i] if len(ks) > 1 else ks[0])
                N = int(ns[i] if len(ns) > 1 else ns[0])
                layer = layers[i] if len(layers) == n else cells[1]
                found.append((f"{short} {layer}".strip(), K, N))
        else:
            m = re.fullmatch(r"([0-9]+)\s+([0-9]+)(?:\s+(.*))?", s)
            if m:
                found.append((m.group(3) or f"{m.group(1)}x{m.group(2)}", int(m.group(1)), int(m.group(2))))
    for label, K, N in found:
        if K < 1 or N < 1:
            raise UsageError(f"--workloads: {label}: K and N must be >= 1 (got K={K}, N={N})")
    merged: dict[tuple[int, int], str] = {}
    for label, K, N in found:
        if (K, N) in merged:
            merged[(K, N)] += ", " + label.split(" ", 1)[-1] if " " in label else ""
        else:
            merged[(K, N)] = label
    if not merged:
        raise UsageError(f"--workloads: no shapes found in {path}" + (f" for model {model!r}" if model else ""))
    return [(label, K, N) for (K, N), label in merged.items()]


# --------------------------------------------------------------------------- candidates


@dataclass
class Candidate:
    """A way to compute the product: ``kind`` is ``iree`` (with ``lcma``) or ``numpy``."""

    name: str
    kind: str
    lcma: Optional[str] = None


def parse_candidates(text: str, numpy_peer: bool) -> list[Candidate]:
    """Comma-separated candidates -> list, ``classical`` first (added when absent).

    Raises:
        UsageError: an empty list, or an lcma option string falcon rejects.
    """
    from falcon_mlir.api import make_lcma_rewrite

    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UsageError("--candidates: empty list")
    cands: list[Candidate] = []
    seen = set()
    for name in ["classical"] + names + (["numpy"] if numpy_peer else []):
        if name in seen:
            continue
        seen.add(name)
        if name in ("classical", "none", "off"):
            if "classical" in [c.name for c in cands]:
                continue
            cands.append(Candidate("classical", "iree", None))
        elif name == "numpy":
            cands.append(Candidate("numpy", "numpy"))
        elif name == "top":
            cands.append(Candidate("top", "top"))
        else:
            try:
                make_lcma_rewrite(name)
            except (ValueError, TypeError) as e:
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise UsageError(f"--candidates: bad lcma option {name!r}: {msg}") from None
            cands.append(Candidate(name, "iree", name))
    return cands


# --------------------------------------------------------------------------- IR


def _np_dtype(dtype: str):
    if dtype == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return {"f32": np.float32, "f16": np.float16}[dtype]


def matmul_mlir(shape: Shape, dtype: str, acc: str, const_weights: bool) -> str:
    """MLIR text of ``@mm``: ``C = A @ B`` on a zero-filled C.

    With ``const_weights`` B is ``arith.constant dense_resource<falcon_bench_B>``
    (the blob is attached by :func:`attach_weight`) and ``@mm`` takes A only.
    """
    t_in = _MLIR_TYPES[dtype]
    return runner_matmul_mlir(shape.M, shape.N, shape.K, t_in, t_in if acc == "same" else acc,
                              "dense_resource<falcon_bench_B>" if const_weights else None)


def attach_weight(text: str, b: np.ndarray, dtype: str) -> bytes:
    """MLIR bytecode of ``text`` with B's bytes as the ``dense_resource`` blob.

    The blob goes straight from the numpy buffer into the module (no hex text),
    so a 4096 x 14336 f32 weight (235 MB) costs its size once more in memory.
    """
    from iree.compiler import ir

    with ir.Context(), ir.Location.unknown():
        mod = ir.Module.parse(text.replace("dense_resource<falcon_bench_B>", "dense<1.0>"))
        elt = {"f32": ir.F32Type.get, "f16": ir.F16Type.get, "bf16": ir.BF16Type.get}[dtype]()
        ty = ir.RankedTensorType.get(list(b.shape), elt)
        raw = np.ascontiguousarray(b).view(np.uint16 if dtype != "f32" else np.float32)
        attr = ir.DenseResourceElementsAttr.get_from_buffer(memoryview(raw), "falcon_bench_B", ty)
        target = str(ty)

        def walk(op):
            for region in op.regions:
                for block in region.blocks:
                    for o in block.operations:
                        o = o.operation
                        if o.name == "arith.constant" and str(o.results[0].type) == target:
                            o.attributes["value"] = attr
                        walk(o)

        walk(mod.operation)
        buf = io.BytesIO()
        mod.operation.write_bytecode(buf)
        return buf.getvalue()


def plan_text(report: list) -> str:
    """One-line plan from falcon's report: ``classical`` or ``strassen x1 (7 products)``."""
    if not report:
        return "classical"
    parts = []
    for e in report:
        p = e.get("plan")
        if not isinstance(p, dict):
            parts.append("classical")
            continue
        schemes = p.get("schemes") or []
        levels = p.get("levels", len(schemes))
        if len(set(schemes)) == 1:
            s = f"{schemes[0]} x{levels}"
        else:
            s = "+".join(schemes)
        extra = []
        if e.get("products"):
            extra.append(f"{e['products']} products")
        if p.get("form") == "grouped":
            extra.append("grouped")
        if p.get("edge") and p.get("edge") != "peel":
            extra.append(p["edge"])
        parts.append(s + (f" ({', '.join(extra)})" if extra else ""))
    return "; ".join(parts)


# --------------------------------------------------------------------------- measuring


def rel_err(x: np.ndarray, ref: np.ndarray) -> float:
    """max|x - ref| / max|ref| in float64 (dimensionless); inf for non-finite x."""
    x64 = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x64)):
        return float("inf")
    den = float(np.max(np.abs(ref)))
    return float(np.max(np.abs(x64 - ref))) / (den if den else 1.0)


def openblas_core() -> str:
    """Name of the OpenBLAS kernel numpy runs (e.g. ``SkylakeX``), or ``?``."""
    import ctypes

    np.ones(2) @ np.ones(2)
    try:
        libs = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "openblas" in ln.lower()})
    except OSError:
        return "?"
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for sym in ("scipy_openblas_get_corename64_", "openblas_get_corename64_",
                    "scipy_openblas_get_corename", "openblas_get_corename"):
            f = getattr(lib, sym, None)
            if f is not None:
                f.restype = ctypes.c_char_p
                return f().decode()
    return "?"


@dataclass
class Result:
    """One row: times in seconds, errors dimensionless."""

    shape: Shape
    cand: Candidate
    plan: str = ""
    compile_s: float = float("nan")
    times: list = field(default_factory=list)
    rel_err_f64: float = float("nan")
    rel_err_cls: float = float("nan")
    status: str = "ok"


def expand_top(shape: Shape, cands: list[Candidate], args) -> list[Candidate]:
    """Replace the ``top`` candidate by the cost model's best plans for ``shape``."""
    if not any(c.kind == "top" for c in cands):
        return cands
    from falcon_mlir import decision
    from falcon_mlir.decision import numerics

    acc = args.dtype if args.acc == "same" else args.acc
    pb = decision.Problem(shape.M, shape.N, shape.K, lhs=args.dtype, rhs=args.dtype, acc=acc,
                          const_rhs=bool(args.const_weights))
    d = decision.decide(pb, decision.load_profile(None), budget=numerics.default_max_error(acc))
    plans = ([] if d.choice.is_classical else [d.choice]) + list(d.alternatives)
    extra, seen = [], {c.lcma for c in cands}
    for e in plans[1:] if not d.choice.is_classical else plans:
        opt = (f"scheme={','.join(e.schemes)} levels={len(e.schemes)} form={e.form} "
               f"edge={e.edge}")
        if opt not in seen and len(extra) < args.top:
            seen.add(opt)
            extra.append(Candidate(opt, "iree", opt))
    out = []
    for c in cands:
        out.extend(extra if c.kind == "top" else [c])
    return out


def _same_code(plan_a: str, plan_b: str, M: int, N: int, K: int) -> bool:
    """Whether two plan texts (:func:`plan_text`) compile to the same code on M x N x K:
    equal, or equal but for ``pad`` on a shape every level divides exactly."""
    if plan_a == plan_b:
        return True
    strip = lambda t: re.sub(r",? ?pad\b", "", t).replace(" ()", "")
    if strip(plan_a) != strip(plan_b):
        return False
    m = re.match(r"([^ ]+) x(\d+)", plan_a) or re.match(r"([^ ]+)", plan_a)
    try:
        from falcon_mlir.decision.cost import scheme_stats

        names = m.group(1).split("+")
        if m.lastindex and m.lastindex >= 2:
            names = names * int(m.group(2))
        for nm in names:
            st = scheme_stats(nm)
            if M % st.m or N % st.n or K % st.k:
                return False
            M, N, K = M // st.m, N // st.n, K // st.k
        return True
    except Exception:
        return False


def decision_quality(rows: list[dict], tolerance: float = 0.03) -> tuple[str, dict]:
    """Decision quality from measured rows: a markdown table and a summary dict.

    Per shape: the best measured IREE candidate (lowest median), ``auto``'s
    median, ``best / auto`` and ``classical / auto``. Summary: ``shapes``,
    ``within`` (share of shapes where auto is within ``tolerance`` of the best
    (when auto keeps a shape classical its module is classical's, so its time is
    classical's),
    i.e. best/auto >= 1 - tolerance), ``worst_vs_classical`` (lowest
    classical/auto), ``geomean_vs_classical``.
    """
    import math

    def num(v):
        try:
            return float(v)
        except (TypeError, ValueError):
            return float("nan")

    by_shape: dict[tuple, list[dict]] = {}
    for r in rows:
        r = dict(r, median_s=num(r["median_s"]))
        by_shape.setdefault((r["label"], int(r["M"]), int(r["N"]), int(r["K"])), []).append(r)
    lines = ["| shape MxNxK | weights | auto's plan | best measured | best / auto | "
             "classical / auto | within 3% |", "|---|---|---|---|---|---|---|"]
    ok = total = 0
    worst, logs = float("inf"), []
    for (label, M, N, K), group in by_shape.items():
        timed = [r for r in group if r["candidate"] != "numpy"
                 and isinstance(r["median_s"], float) and r["median_s"] == r["median_s"]]
        auto = next((r for r in timed if r["candidate"] == "auto"), None)
        cls = next((r for r in timed if r["candidate"] == "classical"), None)
        if not auto or not cls:
            continue
        # The same plan under another name (e.g. a forced candidate equal to
        # auto's choice, or its "pad" twin on a shape that needs no padding)
        # is the same code: its best time counts for auto too.
        same = [r for r in timed if _same_code(r["plan"], auto["plan"], M, N, K)]
        t_auto = min(r["median_s"] for r in same)
        if auto["plan"] == "classical":  # the very module classical runs: no difference but noise
            t_auto = cls["median_s"]
        timed = [r for r in timed if r is not auto and not _same_code(r["plan"], auto["plan"], M, N, K)]
        auto = dict(auto, median_s=t_auto)
        timed.append(auto)
        best = min(timed, key=lambda r: r["median_s"])
        q = best["median_s"] / auto["median_s"]
        vs = cls["median_s"] / auto["median_s"]
        good = q >= 1.0 - tolerance
        total += 1
        ok += good
        worst = min(worst, vs)
        logs.append(math.log(vs))
        best_name = best["candidate"] if best["candidate"] in ("classical", "auto") else best["plan"]
        lines.append(f"| {M}x{N}x{K} | {label} | {auto['plan']} | {best_name} | {q:.3f} | "
                     f"{vs:.3f} | {'yes' if good else 'NO'} |")
    summary = {"shapes": total, "within": ok / total if total else float("nan"),
               "worst_vs_classical": worst if total else float("nan"),
               "geomean_vs_classical": math.exp(sum(logs) / len(logs)) if logs else float("nan")}
    if total:
        lines.append("")
        lines.append(f"Decision quality: auto within {tolerance:.0%} of the best measured candidate "
                     f"on {ok} of {total} shapes ({summary['within']:.0%}); worst classical/auto "
                     f"{summary['worst_vs_classical']:.3f} (a slowdown of "
                     f"{max(0.0, 1 - summary['worst_vs_classical']):.1%}); geometric mean "
                     f"classical/auto {summary['geomean_vs_classical']:.3f}.")
    return "\n".join(lines), summary


def _log(msg: str) -> None:
    print(f"[{PROG}] {msg}", file=sys.stderr, flush=True)


def bench_shape(shape: Shape, cands: list[Candidate], args) -> list[Result]:
    """Compile, check and time every candidate on one shape."""
    import iree.runtime as rt
    from falcon_mlir import compile_str
    from falcon_mlir.runner import Module

    rng = np.random.default_rng([args.seed, shape.M, shape.N, shape.K])
    npd = _np_dtype(args.dtype)
    a = rng.standard_normal((shape.M, shape.K), dtype=np.float32).astype(npd)
    b = rng.standard_normal((shape.K, shape.N), dtype=np.float32).astype(npd)
    ref = a.astype(np.float64) @ b.astype(np.float64)

    text = matmul_mlir(shape, args.dtype, args.acc, args.const_weights)
    source = attach_weight(text, b, args.dtype) if args.const_weights else text
    flags = FLAG_SETS[args.flags] + list(args.iree_flag or [])

    cands = expand_top(shape, cands, args)
    results = [Result(shape, c) for c in cands]
    runners = {}  # index -> zero-arg callable returning a host array
    for i, (c, r) in enumerate(zip(cands, results)):
        if c.kind == "numpy":
            r.plan = f"numpy.matmul (OpenBLAS {args._blas_core}" + (", f32 upcast)" if args.dtype != "f32" else ")")
            r.compile_s = 0.0
            if args.dtype == "f32":
                runners[i] = lambda: a @ b
            else:
                a32, b32 = a.astype(np.float32), b.astype(np.float32)
                runners[i] = lambda a32=a32, b32=b32: a32 @ b32
            continue
        t0 = time.perf_counter()
        try:
            vmfb, report = compile_str(source, target_backends=["llvm-cpu"], extra_args=flags,
                                       lcma=c.lcma, return_report=True)
        except Exception as e:  # CompileError, RewriteError: keep going
            r.compile_s = time.perf_counter() - t0
            r.status = "compile failed: " + _first_line(e)
            _log(f"{shape.text()} {c.name}: {r.status}")
            continue
        r.compile_s = time.perf_counter() - t0
        r.plan = plan_text(report)
        try:
            if getattr(args, "_rt_config", None) is None:
                # One device for every module of the run: a device per module
                # keeps its own pool of transient buffers (the 2048 x 8192 x 8192
                # sweep grew past 24 GB that way).
                args._rt_config = rt.Config(args.device)
            mod = Module(vmfb, driver=args.device, config=args._rt_config)
            dev = mod._config.device
            host_args = [a] if args.const_weights else [a, b]
            dev_args = [rt.asdevicearray(dev, x) for x in host_args]
            runners[i] = lambda mod=mod, dev_args=dev_args: mod("mm", *dev_args)
        except Exception as e:
            r.status = "load failed: " + _first_line(e)
            _log(f"{shape.text()} {c.name}: {r.status}")
        del vmfb
        _log(f"{shape.text()} {c.name}: compiled in {r.compile_s:.1f} s, plan {r.plan}")

    # Correctness: first call of each (also a warmup call).
    outs = {}
    for i, run in list(runners.items()):
        try:
            out = run()
            outs[i] = out
            results[i].rel_err_f64 = rel_err(out, ref)
        except Exception as e:
            results[i].status = "run failed: " + _first_line(e)
            del runners[i]
    cls = outs.get(0)
    for i, out in outs.items():
        if cls is not None:
            results[i].rel_err_cls = rel_err(out, cls.astype(np.float64))
    outs.clear()
    del ref

    # IREE candidates round-robin; the numpy peer after them in a block of its
    # own: OpenBLAS threads keep spinning for a while after a call and would
    # slow whichever IREE call came next.
    iree = {i: run for i, run in runners.items() if cands[i].kind == "iree"}
    peers = {i: run for i, run in runners.items() if cands[i].kind != "iree"}
    for block in (iree, peers):
        for _ in range(max(args.warmup - 1, 0)):
            for run in block.values():
                run()
        for _ in range(args.repeat):
            for i, run in block.items():  # round-robin
                t0 = time.perf_counter()
                run()
                results[i].times.append(time.perf_counter() - t0)
    return results


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else type(e).__name__)
    return msg[:200]


# --------------------------------------------------------------------------- output


def rows_of(results: list[Result], args) -> list[dict]:
    """Rows (dicts keyed by :data:`COLUMNS`) with medians, ratios vs classical."""
    rows = []
    by_shape: dict[tuple, list[Result]] = {}
    for r in results:
        by_shape.setdefault((r.shape.M, r.shape.N, r.shape.K, r.shape.label), []).append(r)
    for group in by_shape.values():
        cls = next((r for r in group if r.cand.name == "classical" and r.times), None)
        t_cls = statistics.median(cls.times) if cls else float("nan")
        for r in group:
            med = statistics.median(r.times) if r.times else float("nan")
            mn = min(r.times) if r.times else float("nan")
            rows.append({
                "label": r.shape.label, "M": r.shape.M, "N": r.shape.N, "K": r.shape.K,
                "dtype": args.dtype + ("" if args.acc == "same" else f"->{args.acc}"),
                "flags": args.flags, "const_weights": int(bool(args.const_weights)),
                "candidate": r.cand.name, "plan": r.plan,
                "compile_s": r.compile_s, "median_s": med, "min_s": mn,
                "gflops": r.shape.flops / med / 1e9 if r.times else float("nan"),
                "speedup_vs_classical": t_cls / med if r.times else float("nan"),
                "rel_err_f64": r.rel_err_f64, "rel_err_vs_classical": r.rel_err_cls,
                "status": r.status,
            })
    return rows


def _fmt(key: str, v) -> str:
    if isinstance(v, float):
        if v != v:
            return "-"
        if key in ("rel_err_f64", "rel_err_vs_classical"):
            return f"{v:.2e}"
        if key in ("median_s", "min_s"):
            return f"{v:.4f}" if v < 1 else f"{v:.3f}"
        if key == "gflops":
            return f"{v:.1f}"
        if key == "speedup_vs_classical":
            return f"{v:.3f}x"
        if key == "compile_s":
            return f"{v:.1f}"
    return str(v)


def markdown_table(rows: list[dict]) -> str:
    """The rows as a GitHub markdown table (times in s, throughput in GFLOP/s)."""
    out = ["| " + " | ".join(h for h, _ in MD_COLUMNS) + " |",
           "|" + "|".join("---" for _ in MD_COLUMNS) + "|"]
    for row in rows:
        cells = []
        for h, key in MD_COLUMNS:
            if key is None:
                cells.append(f"{row['M']}x{row['N']}x{row['K']}")
            else:
                cells.append(_fmt(key, row[key]).replace("|", "/"))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def command_line(argv: Sequence[str]) -> str:
    """The exact command as typed (program name and quoted arguments), with
    OPENBLAS variables unset in front when they were unset for this run."""
    prefix = ""
    if "OPENBLAS_CORETYPE" not in os.environ and "OPENBLAS_L2_SIZE" not in os.environ:
        prefix = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "
    return prefix + " ".join(shlex.quote(a) for a in [PROG, *argv])


def environment_text(args) -> str:
    """One paragraph on the machine and software the numbers come from."""
    try:
        from importlib.metadata import version

        iree_v = version("iree-base-compiler")
    except Exception:
        iree_v = "?"
    cpu = "?"
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ""
    try:
        load = ", load average at start " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores{load}; Python {platform.python_version()}, "
            f"iree-base-compiler {iree_v}, numpy {np.__version__} (OpenBLAS core {args._blas_core}); "
            f"IREE flags ({args.flags}): `{' '.join(FLAG_SETS[args.flags] + list(args.iree_flag or []))}`; "
            f"device {args.device}; B {'a module constant (dense_resource)' if args.const_weights else 'a function argument'}; "
            f"repeat {args.repeat}, warmup {args.warmup}, seed {args.seed}.")


def write_csv(path: str, rows: list[dict], append: bool) -> None:
    exists = append and os.path.exists(path) and os.path.getsize(path) > 0
    with open(path, "a" if exists else "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if not exists:
            w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def read_csv(path: str) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_md(path: str, section: str, append: bool) -> None:
    exists = append and os.path.exists(path) and os.path.getsize(path) > 0
    with open(path, "a" if exists else "w", encoding="utf-8") as f:
        f.write(("\n" if exists else "") + section)


def plot(path: str, rows: list[dict]) -> None:
    """PNG: effective GFLOP/s vs M, one panel per (weight shape, dtype, flags,
    const), one line per candidate.  ``square`` panels put M = N = K on x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: dict[tuple, dict[str, list]] = {}
    for row in rows:
        try:
            g = float(row["gflops"])
        except (TypeError, ValueError):
            continue
        if g != g:
            continue
        label = row["label"] if row["label"] == "square" else f"{row['label']} (K={row['K']}, N={row['N']})"
        extra = f"{row['dtype']}, {row['flags']}" + (", const B" if str(row["const_weights"]) == "1" else "")
        key = (label, extra)
        panels.setdefault(key, {}).setdefault(row["candidate"], []).append((int(row["M"]), g))
    if not panels:
        return
    n = len(panels)
    cols = min(3, n)
    nrows = (n + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.8 * nrows), squeeze=False)
    names = sorted({c for lines in panels.values() for c in lines}, key=lambda c: (c != "classical", c))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {c: palette[i % len(palette)] for i, c in enumerate(names)}  # same colour in every panel
    for ax, ((label, extra), lines) in zip(axes.flat, sorted(panels.items())):
        for cand, pts in sorted(lines.items(), key=lambda kv: (kv[0] != "classical", kv[0])):
            pts = sorted(dict(pts).items())
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=cand, color=color[cand],
                    linewidth=2.2 if cand == "classical" else 1.4)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{label}\n{extra}", fontsize=9)
        ax.set_xlabel("M = N = K" if label == "square" else "M (tokens)")
        ax.set_ylabel("effective GFLOP/s (2MNK / t)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.split("\n\n", 2)[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--shapes", help="comma-separated MxNxK (C: MxN, A: MxK, B: KxN)")
    src.add_argument("--workloads", metavar="FILE", help="weight shapes (workloads.md table or 'K N' lines)")
    p.add_argument("--model", help="with --workloads: keep rows whose model contains this text")
    p.add_argument("--m", default="512,1024,2048", help="with --workloads: comma-separated M (tokens)")
    p.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32", help="element type of A and B")
    p.add_argument("--acc", choices=["same", "f32"], default="same", help="element type of C (default: as A, B)")
    p.add_argument("--candidates", default="classical,auto,scheme=strassen levels=1",
                   help="comma-separated: classical, auto, numpy, or lcma option strings")
    p.add_argument("--flags", choices=sorted(FLAG_SETS), default="best", help="IREE CPU flag set")
    p.add_argument("--iree-flag", action="append", metavar="FLAG", help="extra iree-compile flag (repeatable)")
    p.add_argument("--const-weights", action="store_true", help="B as a module constant (dense_resource)")
    p.add_argument("--repeat", type=int, default=5, help="timed calls per candidate (median reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per candidate first (>= 1)")
    p.add_argument("--numpy", action="store_true", help="add numpy.matmul (OpenBLAS) as a peer")
    p.add_argument("--top", type=int, default=2, help="with candidate 'top': how many model plans")
    p.add_argument("--quality", action="store_true",
                   help="add the decision-quality table (auto vs the best measured candidate)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    p.add_argument("--csv", help="write rows as CSV")
    p.add_argument("--md", help="write a markdown report")
    p.add_argument("--plot", help="write a PNG plot (matplotlib)")
    p.add_argument("--append", action="store_true", help="append to --csv/--md; plot the whole CSV")
    p.add_argument("--title", help="heading of this run's markdown section")
    p.add_argument("--device", default="local-task", help="IREE HAL driver (default local-task)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        if args.repeat < 1:
            raise UsageError("--repeat must be >= 1")
        if args.top < 1:
            raise UsageError("--top must be >= 1")
        if args.warmup < 1:
            raise UsageError("--warmup must be >= 1 (the first call also checks the result)")
        if args.shapes:
            shapes = parse_shapes(args.shapes)
        else:
            ms = _int_list(args.m, "--m")
            shapes = [Shape(M, N, K, label) for label, K, N in parse_workloads(args.workloads, args.model) for M in ms]
        cands = parse_candidates(args.candidates, args.numpy)
        if args.plot and args.append and not args.csv:
            raise UsageError("--plot with --append needs --csv (the plot is drawn from it)")
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2

    if any(c.kind == "numpy" for c in cands) and os.environ.get("OPENBLAS_CORETYPE"):
        _log(f"note: OPENBLAS_CORETYPE={os.environ['OPENBLAS_CORETYPE']} is set; numpy may run a slower "
             "kernel (run with env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)")
    args._blas_core = openblas_core()
    cmd = command_line(argv)
    print(cmd, flush=True)
    t_start = time.perf_counter()
    env_text = environment_text(args)

    results: list[Result] = []
    import gc

    for i, shape in enumerate(shapes):
        t0 = time.perf_counter()
        shape_results = bench_shape(shape, cands, args)
        results.extend(shape_results)
        if args.csv:  # written shape by shape: a run cut short keeps what it measured
            write_csv(args.csv, rows_of(shape_results, args), args.append or i > 0)
        gc.collect()  # free the shape's modules and buffers before the next one
        _log(f"{shape.text()} ({shape.label}) done in {time.perf_counter() - t0:.1f} s")
    rows = rows_of(results, args)
    elapsed = time.perf_counter() - t_start
    table = markdown_table(rows)

    if args.quality:
        qtable, _ = decision_quality(read_csv(args.csv) if (args.append and args.csv) else rows)
        table += "\n\n" + qtable
    if args.md:
        title = args.title or f"{args.dtype}, flags {args.flags}" + (", const weights" if args.const_weights else "")
        section = (f"## {title}\n\n```sh\n{cmd}\n```\n\n{env_text} Wall time of the run: {elapsed:.0f} s.\n\n"
                   "Times in seconds (median and min of the timed calls); effective GFLOP/s = 2MNK / median; "
                   "vs classical = classical median / this median (> 1: faster); rel err = max-norm relative "
                   "error vs a float64 numpy product and vs IREE classical.\n\n" + table + "\n")
        write_md(args.md, section, args.append)
    if args.plot:
        try:
            plot(args.plot, read_csv(args.csv) if (args.append and args.csv) else rows)
        except ImportError:
            _log("matplotlib is not installed: no plot")
    print(table)
    print(f"({elapsed:.0f} s)")
    return 0 if any(r.times for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

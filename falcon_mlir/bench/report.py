"""falcon-bench's outputs: result rows, the markdown table, CSV and markdown
files (written atomically), the environment paragraph, the decision-quality
table and the throughput plot. Every table carries the CPU peers (numpy,
torch) that were measured, with falcon ``auto``'s speed-up over each."""

from __future__ import annotations

import csv
import io
import math
import os
import platform
import re
import shlex
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from falcon_mlir.bench.measure import PEERS, BenchConfig, Result, openblas_threads, torch_info
from falcon_mlir.files import write_atomic

__all__ = ["COLUMNS", "MD_COLUMNS", "rows_of", "markdown_table", "command_line", "environment_text",
           "csv_mismatch", "write_csv", "read_csv", "write_md", "decision_quality", "plot"]

#: Output columns (CSV header and markdown table), with units in the names.
COLUMNS = [
    "label", "M", "N", "K", "dtype", "flags", "const_weights", "parameter_weights", "interleave", "external_transients",
    "candidate", "plan",
    "compile_s", "median_s", "min_s", "gflops", "speedup_vs_classical", "auto_speedup",
    "rel_err_f64", "rel_err_vs_classical", "status", "times_s",
]

#: Markdown columns: (heading, row key; None: the MxNxK shape).
MD_COLUMNS = [
    ("shape MxNxK", None), ("weights", "label"), ("candidate", "candidate"), ("plan", "plan"),
    ("median s", "median_s"), ("min s", "min_s"), ("eff. GFLOP/s", "gflops"),
    ("vs classical", "speedup_vs_classical"), ("auto speed-up", "auto_speedup"),
    ("rel err (f64)", "rel_err_f64"),
    ("rel err vs classical", "rel_err_vs_classical"), ("compile s", "compile_s"),
    ("status", "status"),
]


def rows_of(results: List[Result], config: BenchConfig) -> List[dict]:
    """Rows (dicts keyed by :data:`COLUMNS`): median and min seconds,
    effective GFLOP/s = 2MNK / median / 1e9, speedup = classical median /
    this median, auto_speedup = this median / the ``auto`` candidate's
    median (falcon auto's speed-up over this row, > 1: auto faster; the peers
    numpy and torch are compared with auto this way) (NaN where nothing was
    timed or auto was not run); ``times_s``: every timed call's seconds in round order, space-separated
    (the decision-quality table pairs candidates round by round from them)."""
    rows = []
    by_shape: Dict[tuple, List[Result]] = {}
    for r in results:
        by_shape.setdefault((r.shape.M, r.shape.N, r.shape.K, r.shape.label), []).append(r)
    for group in by_shape.values():
        cls = next((r for r in group if r.cand.name == "classical" and r.times), None)
        t_cls = statistics.median(cls.times) if cls else float("nan")
        auto = next((r for r in group if r.cand.name == "auto" and r.times), None)
        t_auto = statistics.median(auto.times) if auto else float("nan")
        for r in group:
            med = statistics.median(r.times) if r.times else float("nan")
            mn = min(r.times) if r.times else float("nan")
            rows.append({
                "label": r.shape.label, "M": r.shape.M, "N": r.shape.N, "K": r.shape.K,
                "dtype": config.dtype + ("" if config.acc == "same" else f"->{config.acc}"),
                "flags": config.flags, "const_weights": int(bool(config.const_weights)),
                "parameter_weights": int(bool(config.parameter_weights)),
                "interleave": int(bool(config.interleave)),
                "external_transients": int(bool(config.external_transients)),
                "candidate": r.cand.name, "plan": r.plan,
                "compile_s": r.compile_s, "median_s": med, "min_s": mn,
                "gflops": r.shape.flops / med / 1e9 if r.times else float("nan"),
                "speedup_vs_classical": t_cls / med if r.times else float("nan"),
                "auto_speedup": med / t_auto if r.times else float("nan"),
                "rel_err_f64": r.rel_err_f64, "rel_err_vs_classical": r.rel_err_cls,
                "status": r.status, "times_s": " ".join(f"{t:.6g}" for t in r.times),
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
        if key in ("speedup_vs_classical", "auto_speedup"):
            return f"{v:.3f}x"
        if key == "compile_s":
            return f"{v:.1f}"
    return str(v)


def markdown_table(rows: List[dict]) -> str:
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


def command_line(prog: str, argv: Sequence[str]) -> str:
    """The exact command as typed (program name and quoted arguments), with
    OPENBLAS variables unset in front when they were unset for this run."""
    prefix = ""
    if "OPENBLAS_CORETYPE" not in os.environ and "OPENBLAS_L2_SIZE" not in os.environ:
        prefix = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "
    return prefix + " ".join(shlex.quote(a) for a in [prog, *argv])


#: Environment variables that change OpenBLAS's kernel or thread count (or
#: torch's OpenMP/MKL threads); the environment paragraph says which were set.
THREAD_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
               "MKL_NUM_THREADS")


def _env_vars_text() -> str:
    set_ = [f"{v}={os.environ[v]}" for v in THREAD_VARS if v in os.environ]
    unset = [v for v in THREAD_VARS if v not in os.environ]
    parts = ([", ".join(unset) + " unset"] if unset else []) + ([", ".join(set_) + " set"] if set_ else [])
    return "; ".join(parts)


def environment_text(config: BenchConfig, peers: Sequence[str] = ()) -> str:
    """One paragraph on the machine and software the numbers come from: CPU,
    cores, load average, versions, IREE flags, and for each CPU peer in
    ``peers`` (``numpy``, ``torch``) its library and thread count, with the
    OpenBLAS/OpenMP/MKL variables that were set or unset."""
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
    peer_text = ""
    if "numpy" in peers:
        peer_text += f"; numpy peer: OpenBLAS {openblas_threads() or '?'} threads"
    if "torch" in peers:
        info = torch_info()
        if info:
            peer_text += (f"; torch peer: torch {info['version']} (oneDNN {'yes' if info['mkldnn'] else 'no'}, "
                          f"MKL {'yes' if info['mkl'] else 'no'}), {info['threads']} threads")
    if peers:
        peer_text += f" ({_env_vars_text()})"
    return (f"{cpu}, {os.cpu_count()} cores{load}; Python {platform.python_version()}, "
            f"iree-base-compiler {iree_v}, numpy {np.__version__} (OpenBLAS core {config.blas_core}){peer_text}; "
            f"IREE flags ({config.flags}): `{' '.join(config.compile_flags())}`; "
            f"device {config.device}; B {_weights_text(config)}; "
            + ("IREE's transients in one buffer per module, allocated once; " if config.external_transients else "")
            + f"repeat {config.repeat}, warmup {config.warmup}, seed {config.seed}.")


def _weights_text(config: BenchConfig) -> str:
    if config.parameter_weights:
        return "a module global read from an IREE parameter when the module loads"
    return "a module constant (dense_resource)" if config.const_weights else "a function argument"


def csv_mismatch(path: str) -> str:
    """Why rows cannot be appended to the CSV at ``path`` (its header is not
    :data:`COLUMNS`: written by an older falcon-bench), or ``""`` (it matches,
    or the file is missing or empty)."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return ""
    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f), [])
    if header == COLUMNS:
        return ""
    missing = [c for c in COLUMNS if c not in header]
    return ("its columns differ from this falcon-bench's (written by an older one"
            + (f"; missing {', '.join(missing)}" if missing else "") + "): write a new file")


def _existing(path: str, append: bool) -> bytes:
    """The file's bytes when appending to a non-empty file, else b""."""
    if append and os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path, "rb") as f:
            return f.read()
    return b""


def write_csv(path: str, rows: List[dict], append: bool) -> None:
    """Write ``rows`` as CSV (floats as ``%.6g``), after the file's rows when
    ``append`` (no second header); atomically (:func:`falcon_mlir.files.write_atomic`).

    Raises:
        OSError: the file cannot be written.
    """
    old = _existing(path, append)
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=COLUMNS)
    if not old:
        w.writeheader()
    for row in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    write_atomic(path, old + buf.getvalue().encode("utf-8"))


def read_csv(path: str) -> List[dict]:
    """The rows of a CSV written by :func:`write_csv` (values as strings)."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_md(path: str, section: str, append: bool) -> None:
    """Write the markdown ``section``, after the file's text (and a blank
    line) when ``append``; atomically.

    Raises:
        OSError: the file cannot be written.
    """
    old = _existing(path, append)
    write_atomic(path, old + (b"\n" if old else b"") + section.encode("utf-8"))


def _built(plan: str) -> str:
    """A plan text without its note of a kernel-form plan the kernels did not build (what ran)."""
    plan = re.sub(r" \(kernel-form [^;)]* not built\)", "", plan)
    return re.sub(r"; kernel-form [^;)]* not built", "", plan)


def _same_code(plan_a: str, plan_b: str, M: int, N: int, K: int) -> bool:
    """Whether two plan texts (:func:`plan_text`) compile to the same code on M x N x K:
    equal, equal but for a kernel-form plan the kernels did not build (``classical (falcon's kernel;
    kernel-form ... not built)`` is ``classical (falcon's kernel)``), or equal but for ``pad`` on a
    shape every level divides exactly."""
    plan_a, plan_b = _built(plan_a), _built(plan_b)
    if plan_a == plan_b:
        return True
    strip = lambda t: re.sub(r",? ?pad\b", "", t).replace(" ()", "")  # noqa: E731
    if strip(plan_a) != strip(plan_b):
        return False
    m = re.match(r"([^ ]+) x(\d+)", plan_a) or re.match(r"([^ ]+)", plan_a)
    try:
        from falcon_mlir.decision.scheme_stats import scheme_stats

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


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _quality_row(group: List[dict], M: int, N: int, K: int):
    """``(auto row with its best time, best row, classical row)`` of one shape,
    or None when auto or classical was not timed (no finite, positive median). The same plan under another
    name (a forced candidate equal to auto's choice, or its "pad" twin on a
    shape that needs no padding) is the same code: its best time counts for auto."""
    timed = [r for r in group if r["candidate"] not in PEERS
             and isinstance(r["median_s"], float) and math.isfinite(r["median_s"]) and r["median_s"] > 0]
    auto = next((r for r in timed if r["candidate"] == "auto"), None)
    cls = next((r for r in timed if r["candidate"] == "classical"), None)
    if not auto or not cls:
        return None
    same = [r for r in timed if _same_code(r["plan"], auto["plan"], M, N, K)]
    t_auto = min(r["median_s"] for r in same)
    if auto["plan"] == "classical":  # the very module classical runs: no difference but noise
        t_auto = cls["median_s"]
    timed = [r for r in timed if r is not auto and not _same_code(r["plan"], auto["plan"], M, N, K)]
    auto = dict(auto, median_s=t_auto)
    timed.append(auto)
    return auto, min(timed, key=lambda r: r["median_s"]), cls


def _round_times(row: dict) -> List[float]:
    """A row's per-round seconds (``times_s``: a list, or the CSV's space-separated text; [] if absent)."""
    t = row.get("times_s") or []
    if isinstance(t, str):
        t = [_num(v) for v in t.split()]
    return [float(v) for v in t]


def _paired(group: List[dict], M: int, N: int, K: int) -> Optional[Tuple[float, float, float]]:
    """Auto against the other IREE candidates of one shape round by round: ``(best / auto, its
    interquartile range, classical / auto)``, each the median over the rounds of the ratio of the two
    calls made in the same round (a drift of a shared machine that spans a round cancels in it; best /
    auto is at most 1, auto being a candidate, and the range is the closest rival's ratio's), or
    None where auto's row carries no per-round times (a CSV of an older falcon-bench) or where a rival
    that was timed cannot be paired with auto: another number of rounds, or no round in which both
    times are finite and positive (a hand-made or damaged CSV; a round with a NaN or zero time is left
    out of the pairing, not divided by). Candidates that ran auto's code (classical where auto kept the
    shape classical) and candidates never timed (failed) are left out, as in the median-based columns.
    The IREE candidates always share their rounds (:func:`falcon_mlir.bench.measure.bench_shape`);
    peers are not candidates here."""
    auto = next((r for r in group if r["candidate"] == "auto"), None)
    cls = next((r for r in group if r["candidate"] == "classical"), None)
    t_auto = _round_times(auto) if auto else []
    if not t_auto or cls is None:
        return None
    ratios = {}
    usable = lambda x: math.isfinite(x) and x > 0  # noqa: E731
    for r in group:
        t = _round_times(r)
        if not t or r["candidate"] in PEERS or r is auto or _same_code(r["plan"], auto["plan"], M, N, K):
            continue
        pairs = [x / y for x, y in zip(t, t_auto) if usable(x) and usable(y)]
        if len(t) != len(t_auto) or not pairs:  # a rival left out would make auto look best
            return None
        ratios[id(r)] = pairs
    if not ratios:  # nothing else ran a different module (auto classical, classical alone): auto is the best
        return 1.0, 0.0, 1.0
    best = min(ratios.values(), key=statistics.median)  # the closest rival (faster than auto or not)
    q1, _, q3 = statistics.quantiles(best, n=4) if len(best) > 1 else (best[0],) * 3
    vs = statistics.median(ratios[id(cls)]) if id(cls) in ratios else 1.0
    return min(1.0, statistics.median(best)), q3 - q1, vs


def _peer_medians(group: List[dict]) -> Dict[str, float]:
    """Peer name -> its median (seconds) in one shape's rows, timed peers only."""
    out = {}
    for r in group:
        if r["candidate"] in PEERS and r["median_s"] == r["median_s"]:
            out[r["candidate"]] = r["median_s"]
    return out


def decision_quality(rows: List[dict], tolerance: float = 0.03) -> Tuple[str, dict]:
    """Decision quality from measured rows: a markdown table and a summary dict.

    Per shape and run (a CSV that ``--append`` wrote several runs into holds a shape once per run:
    a candidate seen again starts the next run's rows; rows of another dtype, flags or const
    weights are another run; runs are never mixed, in the medians or in the pairing): the best
    measured IREE candidate (lowest median), ``auto``'s
    median, ``best / auto`` and ``classical / auto``, and for each CPU peer
    measured (numpy, torch) ``peer / auto`` (its median / auto's: auto's
    speed-up over it, > 1: auto faster). Summary: ``shapes``, ``within``
    (share of shapes where auto is within ``tolerance`` of the best, i.e.
    best/auto >= 1 - tolerance; when auto keeps a shape classical its module
    is classical's, so its time is classical's), ``worst_vs_classical``
    (lowest classical/auto), ``geomean_vs_classical``, and per peer
    ``geomean_vs_<peer>`` (geometric mean of peer/auto over the shapes it was
    timed on).

    The same comparisons paired round by round (:func:`_paired`; "-" for rows without per-round times):
    ``best / auto, paired`` with the interquartile range of that per-round ratio (how noisy the
    comparison was), ``classical / auto, paired`` and ``within 3%, paired``; summary ``within_paired``,
    ``worst_vs_classical_paired`` and ``geomean_vs_classical_paired`` over the shapes that have them.
    The median-based columns stay the criterion's own; the paired ones say which verdicts a drift of
    the machine between calls could have made.
    """
    by_shape: Dict[tuple, List[dict]] = {}  # (label, M, N, K, dtype, flags, const, parameter, interleave, transients, n) -> rows
    current: Dict[tuple, tuple] = {}
    for r in rows:
        r = dict(r, median_s=_num(r["median_s"]))
        shape = (r["label"], int(r["M"]), int(r["N"]), int(r["K"]), str(r.get("dtype")), str(r.get("flags")),
                 str(r.get("const_weights")), str(r.get("parameter_weights", "")), str(r.get("interleave", "")),
                 str(r.get("external_transients", "")))
        key = current.get(shape)
        if key is None or any(x["candidate"] == r["candidate"] for x in by_shape[key]):  # the next run's
            key = current[shape] = shape + (len(by_shape),)
            by_shape[key] = []
        by_shape[key].append(r)
    peers = [p for p in PEERS if any(r["candidate"] == p for r in rows)]
    lines = ["| shape MxNxK | weights | auto's plan | best measured | best / auto | "
             "classical / auto | within 3% | best / auto, paired (IQR) | classical / auto, paired | "
             "within 3%, paired |" + "".join(f" {p} / auto |" for p in peers),
             "|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(peers)]
    ok = total = 0
    worst, logs = float("inf"), []
    paired_ok, paired_logs = 0, []
    peer_logs: Dict[str, list] = {p: [] for p in peers}
    for (label, M, N, K, *_), group in by_shape.items():
        found = _quality_row(group, M, N, K)
        if found is None:
            continue
        auto, best, cls = found
        q = best["median_s"] / auto["median_s"]
        vs = cls["median_s"] / auto["median_s"]
        good = q >= 1.0 - tolerance
        total += 1
        ok += good
        worst = min(worst, vs)
        logs.append(math.log(vs))
        best_name = best["candidate"] if best["candidate"] in ("classical", "auto") else best["plan"]
        paired = _paired(group, M, N, K)
        if paired is None:
            cells = [" - | - | - |"]
        else:
            pq, iqr, pvs = paired
            paired_ok += pq >= 1.0 - tolerance
            paired_logs.append(math.log(pvs))
            cells = [f" {pq:.3f} ({iqr:.3f}) | {pvs:.3f} | {'yes' if pq >= 1.0 - tolerance else 'NO'} |"]
        pm = _peer_medians(group)
        for p in peers:
            if p in pm:
                peer_logs[p].append(math.log(pm[p] / auto["median_s"]))
                cells.append(f" {pm[p] / auto['median_s']:.3f} |")
            else:
                cells.append(" - |")
        lines.append(f"| {M}x{N}x{K} | {label} | {auto['plan']} | {best_name} | {q:.3f} | "
                     f"{vs:.3f} | {'yes' if good else 'NO'} |" + "".join(cells))
    summary = {"shapes": total, "within": ok / total if total else float("nan"),
               "worst_vs_classical": worst if total else float("nan"),
               "geomean_vs_classical": math.exp(sum(logs) / len(logs)) if logs else float("nan"),
               "paired_shapes": len(paired_logs),
               "within_paired": paired_ok / len(paired_logs) if paired_logs else float("nan"),
               "worst_vs_classical_paired": math.exp(min(paired_logs)) if paired_logs else float("nan"),
               "geomean_vs_classical_paired": (math.exp(sum(paired_logs) / len(paired_logs)) if paired_logs
                                               else float("nan"))}
    for p, pl in peer_logs.items():
        summary[f"geomean_vs_{p}"] = math.exp(sum(pl) / len(pl)) if pl else float("nan")
    if total:
        lines.append("")
        peer_text = "".join(f"; geometric mean {p}/auto {summary[f'geomean_vs_{p}']:.3f}"
                            for p in peers if peer_logs[p])
        lines.append(f"Decision quality: auto within {tolerance:.0%} of the best measured candidate "
                     f"on {ok} of {total} shapes ({summary['within']:.0%}); worst classical/auto "
                     f"{summary['worst_vs_classical']:.3f} (a slowdown of "
                     f"{max(0.0, 1 - summary['worst_vs_classical']):.1%}); geometric mean "
                     f"classical/auto {summary['geomean_vs_classical']:.3f}{peer_text}.")
        if paired_logs:
            n = len(paired_logs)
            lines.append(f"Paired round by round: auto within {tolerance:.0%} of the best on {paired_ok} of {n} "
                         f"shapes ({summary['within_paired']:.0%}); worst classical/auto "
                         f"{summary['worst_vs_classical_paired']:.3f}; geometric mean classical/auto "
                         f"{summary['geomean_vs_classical_paired']:.3f}.")
    return "\n".join(lines), summary


def _panels(rows: List[dict]) -> Dict[tuple, Dict[str, list]]:
    """(weight label, dtype/flags text) -> candidate -> [(M, GFLOP/s)]."""
    panels: Dict[tuple, Dict[str, list]] = {}
    for row in rows:
        g = _num(row["gflops"])
        if g != g:
            continue
        label = row["label"] if row["label"] == "square" else f"{row['label']} (K={row['K']}, N={row['N']})"
        const = ", B a parameter" if str(row.get("parameter_weights")) == "1" else ", const B"
        extra = (f"{row['dtype']}, {row['flags']}" + (const if str(row["const_weights"]) == "1" else "")
                 + (", transients once" if str(row.get("external_transients")) == "1" else ""))
        panels.setdefault((label, extra), {}).setdefault(row["candidate"], []).append((int(row["M"]), g))
    return panels


def plot(path: str, rows: List[dict]) -> None:
    """PNG at ``path`` (written atomically): effective GFLOP/s vs M, one panel
    per (weight shape, dtype, flags, const), one line per candidate.
    ``square`` panels put M = N = K on x. Nothing is written without timed rows.

    Raises:
        ImportError: matplotlib is not installed.
        OSError: the file cannot be written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(rows)
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
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    plt.close(fig)
    write_atomic(path, buf.getvalue())

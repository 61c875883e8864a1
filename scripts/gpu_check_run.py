#!/usr/bin/env python3
"""The GPU half of ``scripts/gpu_check.py``: run a bundle's modules, check and
time them, write and summarize the results.

Runs where falcon_mlir may be missing: it needs only numpy and the
``iree-base-runtime`` wheel (torch for the cuBLAS peer, matplotlib for the
plot). A bundle carries this file, ``gpu_check.py`` (the command line) and
unmodified copies of the standalone library modules imported below
(:mod:`falcon_mlir.cli`, :mod:`falcon_mlir.compare`, :mod:`falcon_mlir.dtypes`, :mod:`falcon_mlir.files`,
:mod:`falcon_mlir.bench.shapes`; see :mod:`falcon_mlir.bundles`), so
``python gpu_bundle/gpu_check.py run gpu_bundle`` works there. See
``gpu_check.py``'s docstring for what is measured.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

try:  # falcon_mlir installed
    from falcon_mlir import cli, compare, dtypes, files
    from falcon_mlir.bench import shapes
except ImportError:  # in a bundle: the copies beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import falcon_cli as cli
    import falcon_compare as compare
    import falcon_dtypes as dtypes
    import falcon_files as files
    import falcon_shapes as shapes

rel_err = compare.rel_err
#: For gpu_check.py, which imports them from here in a bundle as well.
__all__ = ["cli", "shapes", "rel_err", "MANIFEST", "FORMAT", "TOLERANCE", "CUDA_RUNTIME_FLAGS",
           "TORCH_VARIANT", "shape_str", "entry_mnk", "make_inputs", "make_config", "run_bundle",
           "markdown", "write_results", "load_rows", "summary_table", "plot_results"]

MANIFEST = "manifest.json"
#: 2: entries carry M, N, K (and ``n`` for squares only); 1: ``n`` only.
FORMAT = 2
#: Pass/fail bounds on the relative error (max-norm), per element type. The
#: H200 measurements in iree-notes.md at 8192: f32 1.6e-6 .. 3.2e-6,
#: f16 3.3e-3 .. 6.8e-3.
TOLERANCE = {"f32": 1e-4, "f16": 3e-2}
#: IREE runtime flags of falcon's CUDA runtime settings (the same as
#: falcon_mlir.runner.CUDA_RUNTIME_FLAGS; with the caching allocator).
CUDA_RUNTIME_FLAGS = ("--cuda_async_allocations=false",)
TORCH_VARIANT = "torch (cuBLAS)"


# --------------------------------------------------------------------------
# Shapes and inputs (both machines).

def shape_str(M: int, N: int, K: int) -> str:
    """``"MxNxK"``."""
    return f"{M}x{N}x{K}"


def entry_mnk(e: dict) -> tuple:
    """``(M, N, K)`` of a manifest entry or result row; ``n`` (format 1) for
    whatever is missing."""
    n = e.get("n")
    return tuple(int(e[k] if e.get(k) is not None else n) for k in ("M", "N", "K"))



def make_inputs(M: int, N, K=None, dtype=None, seed=None):
    """The operands A (M x K) and B (K x N), standard normal, drawn in float32
    from ``numpy.random.default_rng(seed)`` (A first) then cast to ``dtype``
    (``f32``/``f16``). The same on both machines (numpy's PCG64 stream does not
    depend on the platform). ``make_inputs(n, dtype, seed)`` (square, the old
    form) still works and draws the same arrays as before."""
    if isinstance(N, str):                      # old form: (n, dtype, seed)
        dtype, seed, N, K = N, K, M, M
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K), dtype=np.float32).astype(dtypes.np_type(dtype))
    b = rng.standard_normal((K, N), dtype=np.float32).astype(dtypes.np_type(dtype))
    return a, b



# --------------------------------------------------------------------------
# GPU side (numpy + iree.runtime only).

def _load(config, vmfb: bytes):
    import iree.runtime as rt

    ctx = rt.SystemContext(config=config)
    vm = rt.VmModule.copy_buffer(ctx.instance, vmfb)
    ctx.add_vm_module(vm)
    return ctx.modules[vm.name]


def _time_calls(fn, args, warmup: int, repeat: int, budget_s: float):
    for _ in range(warmup):
        res = fn(*args)
        del res
    times = []
    t_start = time.perf_counter()
    for i in range(repeat):
        t0 = time.perf_counter()
        res = fn(*args)          # synchronous: returns after the device fence
        times.append(time.perf_counter() - t0)
        del res
        if i >= 2 and time.perf_counter() - t_start > budget_s:
            break
    return times


def make_config(driver: str, allocator=None):
    """``iree.runtime.Config`` for ``driver``; ``allocator`` (e.g. ``"caching"``)
    creates the device with ``create_default_device(allocators=[allocator])``.
    None or ``"none"``: the driver's default allocator (``Config(driver)``)."""
    import iree.runtime as rt

    if allocator in (None, "", "none"):
        return rt.Config(driver)
    dev = rt.get_driver(driver).create_default_device(allocators=[allocator])
    return rt.Config(device=dev)


def _wanted(e, sizes, shapes, dtypes, variants) -> bool:
    if dtypes and e["dtype"] not in dtypes or variants and e["variant"] not in variants:
        return False
    if not sizes and not shapes:
        return True
    M, N, K = entry_mnk(e)
    return bool(sizes and M == N == K and M in sizes or shapes and (M, N, K) in shapes)


def run_bundle(bundle, *, driver="cuda", repeat=10, warmup=2, check_rows=256,
               full_ref_max=2048, sizes=None, dtypes=None, variants=None, budget_s=30.0,
               shapes=None, allocator=None, log=print) -> list:
    """Runs the modules of ``bundle`` on ``driver``; returns one row (dict)
    per module (and a torch peer row per shape on ``cuda``). See the module
    docstring.

    Args:
        sizes, shapes: keep square entries with n in ``sizes`` and entries with
            (M, N, K) in ``shapes`` (``(M, N, K)`` tuples); both
            None: all. ``dtypes``, ``variants``: lists of names to keep.
        allocator: None/``"none"`` or ``"caching"`` (see :func:`make_config`).
        budget_s: seconds of timed calls per module (at least 3 calls).

    Rows have ``dtype``, ``M``, ``N``, ``K`` (``n`` too when square, ``label``
    when the entry has one), ``variant``, ``median_ms``/``min_ms`` (ms),
    ``gflops`` (2*M*N*K / median, GFLOP/s), ``rel_err`` (vs float64),
    ``rel_diff_vs_classical``, ``speedup_vs_classical``, ``ok``,
    ``allocator``; or ``error``.
    """
    import iree.runtime as rt

    bundle = Path(bundle)
    manifest = json.loads((bundle / MANIFEST).read_text())
    tol = {**TOLERANCE, **manifest.get("tolerance", {})}
    allocator = allocator or "none"
    config = make_config(driver, allocator)
    shapes = {tuple(s) for s in shapes} if shapes else None
    groups = {}
    for e in manifest["entries"]:
        if _wanted(e, sizes, shapes, dtypes, variants):
            groups.setdefault((e["dtype"], *entry_mnk(e)), []).append(e)
    timing = dict(warmup=warmup, repeat=repeat, budget_s=budget_s)
    rows = []
    for (dtype, M, N, K), entries in groups.items():
        entries.sort(key=lambda e: e["variant"] != "classical")  # classical first
        base = {"dtype": dtype, **({"n": M} if M == N == K else {}), "M": M, "N": N, "K": K}
        label = next((e["label"] for e in entries if e.get("label")), None)
        if label:
            base["label"] = label
        t0 = time.perf_counter()
        a, b, idx, ref = _shape_inputs(bundle, entries[0], dtype, M, N, K, check_rows, full_ref_max)
        log(f"[{dtype} {shape_str(M, N, K)}{f' {label}' if label else ''}] inputs + reference "
            f"({len(idx)} rows): {time.perf_counter() - t0:.1f} s")
        dev = [rt.asdevicearray(config.device, x) for x in (a, b)]
        classical: dict = {}
        for e in entries:
            row = dict(base)
            row.update({k: e[k] for k in ("variant", "lcma", "file", "products")})
            row.update({k: e[k] for k in ("tiles", "tile_choices") if k in e})
            row.update(driver=driver, allocator=allocator, ref_rows=int(len(idx)))
            _run_entry(row, bundle, config, e, dev, idx, ref, classical, timing, tol[dtype])
            rows.append(row)
            log(f"  {e['variant']:<10} " + (
                f"median {row['median_ms']:.3f} ms ({row['reps']} reps), rel_err {row['rel_err']:.2e}"
                + (f", vs classical {row['rel_diff_vs_classical']:.2e}"
                   if "rel_diff_vs_classical" in row else "")
                if "error" not in row else f"FAILED {row['error']}"))
        # free the device buffers before the peer and the next shape
        dev = classical = None
        if allocator != "none":
            try:
                config.device.allocator.trim()   # give pooled buffers back
            except Exception:
                pass
        if driver == "cuda":
            peer = _torch_peer(a, b, idx, ref, dtype, M, N, K, repeat, warmup, tol, log)
            rows.append({**base, **peer, "allocator": allocator})
        a = b = ref = None
    return rows


def _shape_inputs(bundle: Path, entry: dict, dtype: str, M: int, N: int, K: int, check_rows: int,
                  full_ref_max: int) -> tuple:
    """``(A, B, checked row indices, float64 reference of those rows)``: the
    bundle's ``.npy`` inputs or ones made from the entry's seed; every row when
    the shape is at most ``full_ref_max`` (cubed for M*N*K), else ``check_rows``
    random rows."""
    if entry.get("inputs"):
        a, b = (np.load(bundle / f) for f in entry["inputs"])
    else:
        a, b = make_inputs(M, N, K, dtype, entry["seed"])
    rng = np.random.default_rng(12345 + M)
    if M <= full_ref_max and M * N * K <= full_ref_max ** 3:
        idx = np.arange(M)
    else:
        idx = np.sort(rng.choice(M, size=min(check_rows, M), replace=False))
    return a, b, idx, a[idx].astype(np.float64) @ b.astype(np.float64)


def _run_entry(row: dict, bundle: Path, config, e: dict, dev: list, idx, ref, classical: dict,
               timing: dict, tol: float) -> None:
    """Load, check and time one module into ``row``; a failure becomes
    ``row["error"]`` (the run goes on). ``classical`` keeps the classical
    variant's output and median for the ones after it."""
    M, N, K = row["M"], row["N"], row["K"]
    fn = out = None
    try:
        vmfb = (bundle / e["file"]).read_bytes()
        if hashlib.sha256(vmfb).hexdigest() != e["sha256"]:
            raise RuntimeError("sha256 mismatch")
        fn = _load(config, vmfb)[e["function"]]
        out = np.asarray(fn(*dev).to_host())
        row["rel_err"] = rel_err(out[idx], ref)
        if classical.get("out") is not None and e["variant"] != "classical":
            row["rel_diff_vs_classical"] = rel_err(out, classical["out"])
        times = _time_calls(fn, dev, timing["warmup"], timing["repeat"], timing["budget_s"])
        row["median_ms"] = float(np.median(times) * 1e3)
        row["min_ms"] = float(np.min(times) * 1e3)
        row["reps"] = len(times)
        row["gflops"] = 2.0 * M * N * K / (row["median_ms"] * 1e-3) / 1e9
        if e["variant"] == "classical":
            classical.update(out=out, ms=row["median_ms"])
        elif classical.get("ms"):
            row["speedup_vs_classical"] = classical["ms"] / row["median_ms"]
        row["ok"] = bool(row["rel_err"] <= tol)
    except Exception as exc:  # keep going: report the failure in the table
        row["ok"] = False
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        fn = out = None


def _torch_peer(a, b, idx, ref, dtype, M, N, K, repeat, warmup, tol, log) -> dict:
    """torch.matmul (cuBLAS) on the same inputs (A: M x K, B: K x N), timed with
    CUDA events (the peer)."""
    row = {"variant": TORCH_VARIANT, "lcma": "-", "file": "-",
           "products": 1, "driver": "cuda", "ref_rows": int(len(idx))}
    ta = tb = out = None
    try:
        import torch

        ta = torch.from_numpy(np.ascontiguousarray(a)).cuda()
        tb = torch.from_numpy(np.ascontiguousarray(b)).cuda()
        out = torch.matmul(ta, tb)
        torch.cuda.synchronize()
        row["rel_err"] = rel_err(out[torch.from_numpy(idx).cuda()].cpu().numpy(), ref)
        out = None
        for _ in range(warmup):
            torch.matmul(ta, tb)
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(ta, tb)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        row["median_ms"] = float(np.median(times) * 1e3)
        row["min_ms"] = float(np.min(times) * 1e3)
        row["reps"] = len(times)
        row["gflops"] = 2.0 * M * N * K / (row["median_ms"] * 1e-3) / 1e9
        row["ok"] = bool(row["rel_err"] <= tol[dtype])
        row["note"] = f"torch {torch.__version__}, allow_tf32={torch.backends.cuda.matmul.allow_tf32}"
    except Exception as exc:
        row["ok"] = False
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        ta = tb = out = None
        try:
            import torch

            torch.cuda.empty_cache()
        except Exception:
            pass
    log(f"  {row['variant']:<10} " + (f"median {row['median_ms']:.3f} ms, rel_err {row['rel_err']:.2e}"
                                      if "error" not in row else f"FAILED {row['error']}"))
    return row


def markdown(rows) -> str:
    """The rows as a markdown table (shape column ``MxNxK``)."""
    head = ("| dtype | shape | variant | median ms | speedup vs classical | GFLOP/s | rel err vs f64 "
            "(rows) | rel diff vs classical | ok |\n|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        shape = shape_str(*entry_mnk(r))
        if "error" in r:
            lines.append(f"| {r['dtype']} | {shape} | {r['variant']} | - | - | - | - | - | "
                         f"FAILED: {r['error'][:80]} |")
            continue
        sp = r.get("speedup_vs_classical")
        dv = r.get("rel_diff_vs_classical")
        lines.append(
            f"| {r['dtype']} | {shape} | {r['variant']} | {r['median_ms']:.3f} | "
            f"{f'{sp:.2f}x' if sp else '-'} | {r['gflops']:.0f} | "
            f"{r['rel_err']:.2e} ({r['ref_rows']}) | {f'{dv:.2e}' if dv is not None else '-'} | "
            f"{'yes' if r['ok'] else 'NO'} |")
    return head + "\n".join(lines) + "\n"


def _env_info(driver, allocator="none"):
    info = {"python": sys.version.split()[0], "platform": platform.platform(),
            "numpy": np.__version__, "driver": driver, "allocator": allocator or "none"}
    try:
        from importlib.metadata import version
        info["iree_base_runtime"] = version("iree-base-runtime")
    except Exception:
        pass
    return info


def write_results(rows, outdir: Path, driver: str, log=print, allocator="none", runtime_flags=()):
    """Write ``gpu_check.md`` (:func:`markdown`) and ``gpu_check.json`` (the
    environment and the rows) into ``outdir``, both or neither; log the table."""
    outdir.mkdir(parents=True, exist_ok=True)
    md = markdown(rows)
    env = _env_info(driver, allocator)
    env["runtime_flags"] = list(runtime_flags)
    files.write_files_atomic([
        (str(outdir / "gpu_check.md"), md.encode()),
        (str(outdir / "gpu_check.json"), (json.dumps({"env": env, "rows": rows}, indent=1) + "\n").encode())])
    log(md)
    log(f"wrote {outdir / 'gpu_check.md'} and {outdir / 'gpu_check.json'}")


# --------------------------------------------------------------------------
# Results: summary table and plot (numpy; matplotlib for the plot).

def load_rows(paths) -> list:
    """Rows of one or more ``gpu_check.json`` files (``{"env", "rows"}`` or a
    bare list), in order."""
    rows = []
    for p in [paths] if isinstance(paths, (str, Path)) else paths:
        data = json.loads(Path(p).read_text())
        rows += data["rows"] if isinstance(data, dict) else data
    return rows


def _baseline(rows) -> str:
    return "classical_t" if any(r.get("variant") == "classical_t" for r in rows) else "classical"


def summary_table(rows) -> str:
    """Markdown: one row per (dtype, shape), columns dtype, shape (``MxNxK``),
    label, then per variant its median ms, effective TFLOP/s (2*M*N*K / median
    / 1e12) and speedup vs the baseline (``classical_t`` if any row has it,
    else ``classical``): baseline ms / variant ms, > 1 is faster. Failed
    modules read ``FAIL``; results above the error bound get a ``!``."""
    base = _baseline(rows)
    shapes, variants = {}, []
    for r in rows:
        shapes.setdefault((r["dtype"], *entry_mnk(r)), {})[r["variant"]] = r
        if r["variant"] not in variants:
            variants.append(r["variant"])
    variants.sort(key=lambda v: (v != base, v == TORCH_VARIANT))  # baseline first, torch last
    head = ["dtype", "shape", "label"]
    for v in variants:
        head += [f"{v} ms", f"{v} TFLOP/s"] + ([] if v == base else [f"{v} vs {base}"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (dtype, M, N, K), by_v in shapes.items():
        label = next((r["label"] for r in by_v.values() if r.get("label")), "")
        b = by_v.get(base)
        b_ms = b.get("median_ms") if b else None
        cells = [dtype, shape_str(M, N, K), label]
        for v in variants:
            r = by_v.get(v)
            if r is None or "median_ms" not in r:
                cells += ["FAIL" if r is not None else "-", "-"] + ([] if v == base else ["-"])
                continue
            bang = "" if r.get("ok", True) else "!"
            tf = 2.0 * M * N * K / r["median_ms"] / 1e9
            cells += [f"{r['median_ms']:.3f}{bang}", f"{tf:.1f}" if tf >= 1 else f"{tf:.3f}"]
            if v != base:
                cells.append(f"{b_ms / r['median_ms']:.2f}x" if b_ms else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_results(rows, path, title=None) -> None:
    """PNG at ``path``: effective TFLOP/s (2*M*N*K / median) against M (log2
    axis), one panel per (dtype, weight shape N x K) (squares share one
    ``square`` panel per dtype, x = n), panels of a dtype on their own rows;
    one line per variant, same colour in every panel, torch (cuBLAS) dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "median_ms" in r]
    swept = {(r["dtype"], *entry_mnk(r)[1:]) for r in rows if len(set(entry_mnk(r))) > 1}
    panels, variants = {}, []
    for r in rows:
        M, N, K = entry_mnk(r)
        square = M == N == K and not r.get("label") and (r["dtype"], N, K) not in swept
        key = (r["dtype"], "square" if square else (N, K))
        lines = panels.setdefault(key, {"labels": [], "lines": {}})
        if r.get("label") and r["label"] not in lines["labels"]:
            lines["labels"].append(r["label"])
        lines["lines"].setdefault(r["variant"], {})[M] = 2.0 * M * N * K / r["median_ms"] / 1e9
        if r["variant"] not in variants:
            variants.append(r["variant"])
    if not panels:
        raise ValueError("no timed rows to plot")
    base = _baseline(rows)
    variants.sort(key=lambda v: (v != base, v == TORCH_VARIANT))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {v: palette[i % len(palette)] for i, v in enumerate(variants)}
    dtypes = sorted({d for d, _ in panels})
    per = {d: sorted((k for k in panels if k[0] == d), key=lambda k: (k[1] != "square", str(k[1])))
           for d in dtypes}
    ncols = min(4, max(len(v) for v in per.values()))
    layout = []                                     # (row, col, key)
    row0 = 0
    for d in dtypes:
        for i, key in enumerate(per[d]):
            layout.append((row0 + i // ncols, i % ncols, key))
        row0 += -(-len(per[d]) // ncols)
    fig, axes = plt.subplots(row0, ncols, figsize=(4.3 * ncols, 3.4 * row0), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for r_, c_, key in layout:
        ax = axes[r_][c_]
        ax.axis("on")
        for v in variants:
            pts = panels[key]["lines"].get(v)
            if pts:
                ms = sorted(pts)
                ax.plot(ms, [pts[m] for m in ms], marker="o", ms=3, color=color[v], label=v,
                        linestyle="--" if v == TORCH_VARIANT else "-")
        dtype, wk = key
        labels = "; ".join(panels[key]["labels"])
        head = f"{dtype} square (M=N=K)" if wk == "square" else f"{dtype} N={wk[0]} K={wk[1]}"
        ax.set_title(head + (f"\n{labels[:60]}" if labels else ""), fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("n" if wk == "square" else "M")
        ax.set_ylabel("effective TFLOP/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


"""The main job: a real transformer block compiled by plain IREE and by
falcon, run on the same inputs on the CPU, compared (the library behind
``python3 tools/run_model.py``).

keras-hub's Llama decoder block (:mod:`falcon_mlir.models.llama_block`) is
exported to StableHLO, compiled once with plain IREE (classical) and once
with falcon (``falcon_mlir.api.compile_str`` with ``lcma``); both run on
``local-task`` with the inputs already on the device, one warm-up call each,
then ``repeat`` calls interleaved (drift of the machine hits both alike).
Errors are max-norm relative errors (:func:`falcon_mlir.compare.rel_err`)
against the classical module's output and, optionally, a float64 numpy
evaluation of the block. Needs the ``models`` extra (jax, keras, keras-hub).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from falcon_mlir.compare import rel_err
from falcon_mlir.files import write_files_atomic

__all__ = ["BASE_FLAGS", "DATA_TILING_FLAGS", "MainJob", "run_main_job", "compile_classical",
           "compile_falcon", "analyze_only", "plan_text", "what_is", "print_contractions", "result_lines",
           "error_text", "fmt_s"]

#: Host CPU code for both builds.
BASE_FLAGS = ("--iree-hal-target-device=local",
              "--iree-hal-local-target-device-backends=llvm-cpu",
              "--iree-llvmcpu-target-cpu=host")
#: IREE's best CPU matmul flags (data tiling and ukernels, about 3.4x faster
#: than IREE's defaults at 2048^3 on the 2-core machine), on by default for
#: both builds.
DATA_TILING_FLAGS = ("--iree-opt-data-tiling=true", "--iree-llvmcpu-enable-ukernels=all")

#: keras-hub variable names -> the usual Llama projection names.
LAYER_NAMES = {
    "query": "q_proj", "key": "k_proj", "value": "v_proj", "attention_output": "o_proj",
    "feedforward_gate_dense": "gate_proj", "feedforward_intermediate_dense": "up_proj",
    "feedforward_output_dense": "down_proj",
}
_ARG = re.compile(r"%arg(\d+)\b")


# -- compile --------------------------------------------------------------------
def compile_classical(mlir_text: str, flags: Sequence[str]) -> bytes:
    """Plain IREE (``iree.compiler.compile_str``, StableHLO input), no falcon code involved."""
    from iree.compiler import compile_str

    return compile_str(mlir_text, input_type="stablehlo", extra_args=list(flags))


def analyze_only(module_op) -> List[dict]:
    """A stand-in rewrite for ``lcma="analyze"``: reports every contraction
    and what the ``auto`` decision (cost model, host profile) would do, and
    changes nothing."""
    from falcon_mlir.ir.contraction import find_contractions, format_location
    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, plan_for

    root = module_op.operation if hasattr(module_op, "operation") else module_op
    options = LcmaOptions.parse("")
    report = []
    for c in find_contractions(root):
        plan, why = plan_for(c, options)
        report.append({
            "location": format_location(c.op.location, "llama_block.mlir"),
            "op": c.op.name, "kind": c.describe_kind(), "M": c.M, "N": c.N, "K": c.K,
            "batch": list(c.batch), "plan": "classical",
            "reason": ("not applied (analyze): " + why) if plan else why,
        })
    return report


def compile_falcon(mlir_text: str, lcma, flags: Sequence[str]) -> Tuple[bytes, List[dict]]:
    """falcon's build: ``(vmfb, report)``; the report has one dict per
    contraction found (location, kind, M, N, K, batch, plan, reason).
    ``lcma``: an option string for ``falcon_mlir.api.compile_str``, None (no
    rewrite), or ``"analyze"`` (report only, see :func:`analyze_only`)."""
    from falcon_mlir.api import compile_str

    if lcma == "analyze":
        lcma = analyze_only
    vmfb, report = compile_str(mlir_text, target_backends=(), extra_args=list(flags),
                               input_type="stablehlo", lcma=lcma, return_report=True,
                               input_name="llama_block.mlir")
    return vmfb, list(report or [])


# -- report ---------------------------------------------------------------------
def plan_text(plan) -> str:
    """A report entry's plan as text: ``classical``, ``strassen + strassen (pad)``."""
    if not plan or plan == "classical":
        return "classical"
    if isinstance(plan, dict):
        text = " + ".join(plan.get("schemes", [])) or "?"
        if plan.get("edge"):
            text += f" ({plan['edge']})"
        return text
    return str(plan)


def what_is(location: str, mlir_text: str, weight_names: Sequence[str]) -> str:
    """Names the layer a report location points at, from the exported text's
    line: the weight argument it reads (``q_proj`` ...), else ``attention
    scores`` / ``attention values`` for the batched products; ``""`` if unknown."""
    m = re.search(r":(\d+):\d+$", location or "")
    if not m:
        return ""
    lines = mlir_text.splitlines()
    line_no = int(m.group(1))
    if not 1 <= line_no <= len(lines):
        return ""
    line = lines[line_no - 1]
    for a in _ARG.findall(line):
        i = int(a)
        if 1 <= i <= len(weight_names):
            name = weight_names[i - 1]
            name = name.split("/")[-2] if "/" in name else name
            return LAYER_NAMES.get(name, name)
    if "batching_dims" in line:
        earlier = sum("batching_dims" in ln for ln in lines[:line_no - 1])
        return "attention scores" if earlier == 0 else "attention values"
    return ""


def fmt_s(t: float) -> str:
    """Seconds as ``12.3 ms`` or ``1.23 s``."""
    return f"{t * 1e3:.1f} ms" if t < 1.0 else f"{t:.2f} s"


def error_text(entry: dict) -> str:
    """The report entry's predicted max-norm relative error: ``plan (classical)``
    for a rewritten contraction, classical's alone otherwise, ``-`` for
    integers; a bf16/f16 result adds where the plan rounds (``sums f32``)."""
    pe = entry.get("predicted_error")
    if not pe:
        return "-"
    if "plan" not in pe:
        return f"{pe['classical']:.1e}"
    text = f"{pe['plan']:.1e} ({pe['classical']:.1e})"
    rd = entry.get("rounding")
    return text + (f", sums {rd['sums']}, f32 acc" if rd else "")


def print_contractions(report: List[dict], layers: Sequence[str], file=None) -> None:
    """Print one row per contraction (falcon's report, ``layers`` from
    :func:`what_is`): a rich table when ``rich`` is installed, else plain columns."""
    file = file or sys.stdout
    headers = ["#", "location", "layer", "kind", "M", "N", "K", "batch", "types", "plan",
               "pred. error", "reason"]
    body = []
    for i, (r, layer) in enumerate(zip(report, layers), 1):
        batch = r.get("batch") or []
        et = r.get("element_types") or {}
        types = f"{et.get('lhs')}->{et.get('acc')}" if et else "-"
        body.append([str(i), str(r.get("location", "")), layer,
                     str(r.get("kind", "")), str(r.get("M", "")), str(r.get("N", "")),
                     str(r.get("K", "")), "x".join(str(b) for b in batch) or "-", types,
                     plan_text(r.get("plan")), error_text(r), str(r.get("reason", ""))])
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        Console = None
    if Console is not None:
        t = Table(title="contractions (falcon report)")
        for h in headers:
            t.add_column(h, justify="right" if h in ("#", "M", "N", "K") else "left", overflow="fold")
        for row in body:
            t.add_row(*row)
        Console(width=max(120, _term_width()), file=file).print(t)
        return
    widths = [max(len(h), *(len(row[j]) for row in body)) if body else len(h)
              for j, h in enumerate(headers)]
    print("contractions (falcon report)", file=file)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)), file=file)
    for row in body:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)), file=file)


def _term_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 200


# -- run ------------------------------------------------------------------------
@dataclass
class MainJob:
    """What :func:`run_main_job` measured: ``data`` (JSON-ready: model,
    config, lcma, flags, compile_s, time_s and times_s in seconds,
    rel_err_vs_classical, rel_err_vs_f64, report, summary) and ``layers``
    (one layer name per report entry, for :func:`print_contractions`)."""

    data: dict
    layers: List[str] = field(default_factory=list)


def _export(small: bool, tokens: int, seed: int, log: Callable, dtype: str = "float32"):
    import dataclasses

    from falcon_mlir.models.llama_block import LLAMA3_8B, SMALL, LlamaBlock, library_versions

    cfg = dataclasses.replace((SMALL if small else LLAMA3_8B).with_tokens(tokens), dtype=dtype)
    cfg.validate()
    t0 = time.perf_counter()
    block = LlamaBlock(cfg)
    text = block.export_mlir()
    log(f"exported {cfg.name} block ({len(text.splitlines())} lines of StableHLO, "
        f"{sum(int(np.prod(s)) for _, s in block.weight_specs()) / 1e6:.0f} M weights as arguments) "
        f"in {time.perf_counter() - t0:.1f} s; {library_versions()}")
    t0 = time.perf_counter()
    x = block.random_inputs(seed)
    weights = block.random_weights(seed + 1)
    if dtype != "float32":  # the block's arguments are in its dtype (bf16: via ml_dtypes)
        from falcon_mlir.dtypes import np_type

        t = np_type({"bfloat16": "bf16", "float16": "f16"}[dtype])
        x, weights = x.astype(t), [w.astype(t) for w in weights]
    log(f"random inputs and weights ({dtype}) in {time.perf_counter() - t0:.1f} s")
    return cfg, block, text, x, weights


def _time_both(vm_classical: bytes, vm_falcon: bytes, inputs: list, repeat: int) -> tuple:
    """Outputs of the warm-up calls and the interleaved call times (seconds)."""
    from falcon_mlir.runner import Module

    mods = [Module(vm) for vm in (vm_classical, vm_falcon)]
    args = [m.on_device(*inputs) for m in mods]

    def call(i):
        out = mods[i]("main", *args[i])
        return out[0] if isinstance(out, tuple) else out

    outs = [call(0), call(1)]  # warm-up calls
    times: list = [[], []]
    for _ in range(repeat):
        for i in (0, 1):
            t0 = time.perf_counter()
            call(i)
            times[i].append(time.perf_counter() - t0)
    return outs, times


def run_main_job(*, tokens: int = 1024, lcma: Optional[str] = "auto", repeat: int = 3, seed: int = 0,
                 small: bool = False, data_tiling: bool = True, iree_flags: Sequence[str] = (),
                 reference: bool = True, save_dir: Optional[str] = None,
                 log: Optional[Callable[[str], None]] = None, dtype: str = "float32") -> MainJob:
    """Export, compile both ways, run, time and compare the block.

    ``tokens``: sequence length M; ``lcma``: falcon's option string, None or
    ``"none"``/``"off"`` (no rewrite), or ``"analyze"``; ``small``: the small
    test block; ``save_dir``: also write block.mlir, classical.vmfb,
    falcon.vmfb and report.json there (atomically); ``dtype``: the layer's
    dtype, ``"float32"``, ``"bfloat16"`` or ``"float16"`` (weights,
    activations and the arguments; JAX exports the projections as
    ``dot_general`` with a result in that dtype; the float64 reference uses
    the same rounded inputs).

    Raises:
        ValueError: an unknown ``dtype``.
        RuntimeError: non-finite values in an output; anything the export,
            compilers or runtime raise.
    """
    log = log or (lambda msg: None)
    spec = (lcma or "").strip()
    spec = None if spec.lower() in ("none", "off", "") else spec
    flags = list(BASE_FLAGS) + (list(DATA_TILING_FLAGS) if data_tiling else []) + list(iree_flags)
    cfg, block, text, x, weights = _export(small, tokens, seed, log, dtype)

    t0 = time.perf_counter()
    vm_classical = compile_classical(text, flags)
    t_cc = time.perf_counter() - t0
    log(f"classical compile {t_cc:.1f} s")
    t0 = time.perf_counter()
    vm_falcon, report = compile_falcon(text, spec, flags)
    t_cf = time.perf_counter() - t0
    log(f"falcon compile {t_cf:.1f} s ({len(report)} contractions in the report)")
    if save_dir:
        os.makedirs(save_dir, exist_ok=True)
        write_files_atomic([(os.path.join(save_dir, name), data) for name, data in (
            ("block.mlir", text.encode()), ("classical.vmfb", vm_classical), ("falcon.vmfb", vm_falcon),
            ("report.json", json.dumps(report, indent=1).encode()))])

    (y_c, y_f), (times_c, times_f) = _time_both(vm_classical, vm_falcon, [x, *weights], repeat)
    log("classical: " + ", ".join(fmt_s(t) for t in times_c))
    log("falcon:    " + ", ".join(fmt_s(t) for t in times_f))
    if not (np.all(np.isfinite(y_c)) and np.all(np.isfinite(y_f))):
        raise RuntimeError("non-finite values in the output")
    res = {
        "model": cfg.name, "config": {k: getattr(cfg, k) for k in (
            "hidden", "intermediate", "heads", "kv_heads", "head_dim", "tokens", "batch", "dtype")},
        "lcma": lcma, "flags": flags,
        "compile_s": {"classical": t_cc, "falcon": t_cf},
        "time_s": {"classical": statistics.median(times_c), "falcon": statistics.median(times_f)},
        "times_s": {"classical": times_c, "falcon": times_f},
        "rel_err_vs_classical": rel_err(y_f, y_c),
        "report": report,
    }
    if reference:
        t0 = time.perf_counter()
        y64 = block.reference_f64(x, weights)
        res["rel_err_vs_f64"] = {"classical": rel_err(y_c, y64), "falcon": rel_err(y_f, y64)}
        log(f"float64 reference in {time.perf_counter() - t0:.1f} s")
    tc, tf = res["time_s"]["classical"], res["time_s"]["falcon"]
    rewritten = sum(1 for r in report if r.get("plan") not in (None, "classical"))
    res["summary"] = (f"{cfg.name} block{'' if cfg.dtype == 'float32' else f' ({cfg.dtype})'}, "
                      f"{cfg.tokens} tokens: falcon {fmt_s(tf)} vs classical {fmt_s(tc)} "
                      f"({tc / tf:.2f}x), rel. error {res['rel_err_vs_classical']:.1e}, "
                      f"{rewritten} of {len(report)} contractions rewritten")
    names = [n for n, _ in block.weight_specs()]
    return MainJob(res, [what_is(str(r.get("location", "")), text, names) for r in report])


def result_lines(res: dict) -> List[str]:
    """The lines printed after the table: errors, times and speed-up, compile times."""
    tc, tf = res["time_s"]["classical"], res["time_s"]["falcon"]
    lines = [f"relative error (max-norm) falcon vs classical: {res['rel_err_vs_classical']:.2e}"]
    if "rel_err_vs_f64" in res:
        e = res["rel_err_vs_f64"]
        lines.append(f"relative error vs float64 numpy: classical {e['classical']:.2e}, "
                     f"falcon {e['falcon']:.2e}")
    lines.append(f"time (median of {len(res['times_s']['classical'])}): classical {fmt_s(tc)}, "
                 f"falcon {fmt_s(tf)}, speed-up classical/falcon {tc / tf:.2f}x; compile classical "
                 f"{res['compile_s']['classical']:.1f} s, falcon {res['compile_s']['falcon']:.1f} s")
    return lines

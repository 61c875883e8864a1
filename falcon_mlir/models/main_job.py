"""The main job: a real transformer block compiled by plain IREE and by
falcon, run on the same inputs on the CPU, compared with each other and with
the same block under ``jax.jit`` (the library behind ``python3
tools/run_model.py``).

keras-hub's Llama decoder block (:mod:`falcon_mlir.models.llama_block`) is
exported to StableHLO, compiled once with plain IREE (classical) and once
with falcon (``falcon_mlir.api.compile_str`` with ``lcma``); both run on
``local-task`` with the inputs already on the device; by default the weights
are IREE parameters (module globals served from host memory, loaded once:
:mod:`falcon_mlir.parameters`), so IREE hoists what depends on them alone
into the modules' initializers. The peer is what a JAX
user gets without IREE: the same keras-hub block, same weights and input,
run by :meth:`LlamaBlock.jit <falcon_mlir.models.llama_block.LlamaBlock.jit>`
on JAX's CPU device (XLA's CPU backend; arguments placed with
``jax.device_put`` once, each call waits for the result). IREE's
``local-task`` and XLA's CPU client both use every core. Each runs one
warm-up call (XLA compiles there), then ``repeat`` calls interleaved
(classical, falcon, JAX: drift of the machine hits all alike); times are
medians. Errors are max-norm relative errors
(:func:`falcon_mlir.compare.rel_err`) between the outputs and, optionally,
against a float64 numpy evaluation of the block; there is no pass/fail
threshold: a non-finite value in any output raises, the errors are printed.
Needs the ``models`` extra (jax, keras, keras-hub).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from falcon_mlir.compare import rel_err
from falcon_mlir.files import write_files_atomic
from falcon_mlir.parameters import GLOBAL_PREFIX

__all__ = ["BASE_FLAGS", "DATA_TILING_FLAGS", "MATMUL_TILE_BYTES", "MAX_MATMUL_TILE_BYTES", "SPLIT_PHASE",
           "MainJob", "WEIGHTS", "saved_files", "run_main_job", "compile_classical", "compile_falcon", "compile_split", "tile_flags",
           "analyze_only", "plan_text", "what_is", "print_contractions", "result_lines", "error_text", "fmt_s",
           "RUN_LABELS"]

#: Host CPU code for both builds.
BASE_FLAGS = ("--iree-hal-target-device=local",
              "--iree-hal-local-target-device-backends=llvm-cpu",
              "--iree-llvmcpu-target-cpu=host")
#: IREE's best CPU matmul flags (data tiling and ukernels, about 3.4x faster
#: than IREE's defaults at 2048^3 on the 2-core machine), on by default for
#: both builds.
DATA_TILING_FLAGS = ("--iree-opt-data-tiling=true", "--iree-llvmcpu-enable-ukernels=all")
#: Bytes of each matrix operand one workgroup of a data-tiled matmul reads
#: (``--iree-llvmcpu-matmul-tile-bytes``), for both builds: 8 MiB, a quarter
#: of the 2-core machine's 32 MB L3. With IREE's default a workgroup computes
#: one 16x16 tile of C over all of K, so the packed weights stream from DRAM
#: once per 16 rows: in the main job gate/up/down then ran at 190-240
#: GFLOP/s in context and the block took 2.4-3.6 s; with 8 MiB tiles
#: (128x112 of C per workgroup for 1024x14336x4096) 1.9-2.1 s, and falcon's
#: products gained alike (docs/benchmarks.md, "The main job per dispatch").
MATMUL_TILE_BYTES = 8 << 20
#: The largest ``--iree-llvmcpu-matmul-tile-bytes`` iree-compile takes (a 32-bit int option).
MAX_MATMUL_TILE_BYTES = 2**31 - 1
#: The IREE phase where :func:`compile_split` splits both builds (falcon's
#: rewrite runs after it: ``falcon_mlir.pipeline.phases.DEFAULT_REWRITE_PHASE``).
SPLIT_PHASE = "input"

#: keras-hub variable names -> the usual Llama projection names.
LAYER_NAMES = {
    "query": "q_proj", "key": "k_proj", "value": "v_proj", "attention_output": "o_proj",
    "feedforward_gate_dense": "gate_proj", "feedforward_intermediate_dense": "up_proj",
    "feedforward_output_dense": "down_proj",
}
_ARG = re.compile(r"%arg(\d+)\b")
#: A weight's load in :func:`falcon_mlir.parameters.with_weight_parameters`' text: SSA value, weight name.
_LOAD = re.compile(r'(%[\w.$-]+) = util\.global\.load @"?' + re.escape(GLOBAL_PREFIX) + r'([^"\s]+)"?')


# -- compile --------------------------------------------------------------------
def compile_classical(mlir_text: str, flags: Sequence[str]) -> bytes:
    """Plain IREE (``iree.compiler.compile_str``, StableHLO input), no falcon code involved."""
    from iree.compiler import compile_str

    return compile_str(mlir_text, input_type="stablehlo", extra_args=list(flags))


def analyze_only(module_op) -> List[dict]:
    """A stand-in rewrite for ``lcma="analyze"``: reports every contraction
    and what the ``auto`` decision (cost model, host profile) would do, with
    the predicted errors (of classical, and of the plan auto would take), and
    changes nothing."""
    from falcon_mlir.ir.contraction import find_contractions
    from falcon_mlir.passes.lcma_rewrite import LcmaOptions, plan_for, report_entry

    root = module_op.operation if hasattr(module_op, "operation") else module_op
    options = replace(LcmaOptions.parse(""), filename="llama_block.mlir")
    report = []
    for c in find_contractions(root):
        plan, why = plan_for(c, options)
        entry = report_entry(c, plan, why, options)  # the predicted errors of the plan auto takes
        entry["plan"] = "classical"
        entry["reason"] = ("not applied (analyze): " + why) if plan else why
        report.append(entry)
    return report


def compile_falcon(mlir_text: str, lcma, flags: Sequence[str], kernels="auto") -> Tuple[bytes, List[dict]]:
    """falcon's build: ``(vmfb, report)``; the report has one dict per
    contraction found (location, kind, M, N, K, batch, plan, reason).
    ``lcma``: an option string for ``falcon_mlir.api.compile_str``, None (no
    rewrite), or ``"analyze"`` (report only, see :func:`analyze_only`).
    ``kernels``: ``falcon_mlir.api.compile_str``'s (``"auto"``: on the host
    CPU with AVX-512, f32 GEMMs run on falcon's CPU kernel; None: IREE's)."""
    from falcon_mlir.api import compile_str

    if lcma == "analyze":
        lcma = analyze_only
    vmfb, report = compile_str(mlir_text, target_backends=(), extra_args=list(flags),
                               input_type="stablehlo", lcma=lcma, return_report=True,
                               input_name="llama_block.mlir", kernels=kernels)
    return vmfb, list(report or [])


def tile_flags(tile_bytes: int) -> Tuple[str, ...]:
    """The iree-compile flag giving data-tiled matmuls ``tile_bytes`` bytes per
    operand tile (:data:`MATMUL_TILE_BYTES`); ``()`` for 0 (IREE's default).
    It is a global LLVM option: an in-process session rejects it, so the
    builds pass it to :func:`compile_split`'s back half.

    Raises:
        ValueError: ``tile_bytes`` < 0 or > :data:`MAX_MATMUL_TILE_BYTES`.
    """
    if not 0 <= tile_bytes <= MAX_MATMUL_TILE_BYTES:
        raise ValueError(f"matmul tile bytes must be >= 0 (0: IREE's default) and <= {MAX_MATMUL_TILE_BYTES} "
                         f"(iree-compile's 32-bit option), got {tile_bytes}")
    return (f"--iree-llvmcpu-matmul-tile-bytes={int(tile_bytes)}",) if tile_bytes else ()


def compile_split(text: str, flags: Sequence[str], lcma=None, *, falcon: bool = True,
                  extra_flags: Sequence[str] = (), kernels="auto") -> Tuple[bytes, List[dict]]:
    """Compiles the exported StableHLO ``text`` to a vmfb in two halves: to
    :data:`SPLIT_PHASE` (``falcon``: by :func:`compile_falcon` with ``lcma``
    and ``kernels``, whose rewrite and falcon-kernels run there; else by plain iree-compile,
    :func:`compile_classical`), then from there to the end by one
    iree-compile process with ``flags`` plus ``extra_flags`` (global LLVM
    options such as :func:`tile_flags` included: they stay in that process,
    nothing is set process-wide). Both builds take the same path, only the
    rewrite differs.

    Returns:
        ``(vmfb, report)``: falcon's report (one dict per contraction), ``[]``
        for the plain build.

    Raises:
        falcon's ``CompileError`` / ``OptionError`` or iree.compiler's
        ``CompilerToolError``: a half failed.
    """
    from iree.compiler import compile_str

    to = [f"--compile-to={SPLIT_PHASE}"]
    if falcon:
        mid, report = compile_falcon(text, lcma, list(flags) + to, kernels)
    else:
        mid, report = compile_classical(text, list(flags) + to), []
    vmfb = compile_str(mid, extra_args=list(flags) + list(extra_flags) + [f"--compile-from={SPLIT_PHASE}"])
    return vmfb, report


# -- report ---------------------------------------------------------------------
def plan_text(entry: dict) -> str:
    """A report entry's plan as text: ``classical``, ``strassen + strassen``, ``strassen (M edge
    padded)`` (the edge policy only where the blocks do not divide the shape:
    :func:`falcon_mlir.decision.explain.edges_text`)."""
    from falcon_mlir.decision.explain import edges_text

    plan = entry.get("plan")
    if not plan or plan == "classical":
        return "classical"
    if isinstance(plan, dict):
        text = " + ".join(plan.get("schemes", [])) or "?"
        edges = edges_text(entry)
        return text + (f" ({edges})" if edges else "")
    return str(plan)


def what_is(location: str, mlir_text: str, weight_names: Sequence[str]) -> str:
    """Names the layer a report location points at, from the exported text's
    line: the weight it reads (``q_proj`` ...: an argument, or the load of its
    parameter-backed global, :func:`falcon_mlir.parameters.with_weight_parameters`),
    else ``attention scores`` / ``attention values`` for the batched products;
    ``""`` if unknown."""
    m = re.search(r":(\d+):\d+$", location or "")
    if not m:
        return ""
    lines = mlir_text.splitlines()
    line_no = int(m.group(1))
    if not 1 <= line_no <= len(lines):
        return ""
    line = lines[line_no - 1]
    loads = dict(m.groups() for m in map(_LOAD.search, lines) if m)  # SSA value -> weight name
    read = [weight_names[int(a) - 1] for a in _ARG.findall(line) if 1 <= int(a) <= len(weight_names)]
    read += [loads[v] for v in re.findall(r"%[\w.$-]+", line) if v in loads and loads[v] in weight_names]
    for name in read[:1]:
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
    integers; a bf16/f16 result adds where the plan rounds (``sums f32``) and
    what its products multiply (``f32 x f32``, ``mixed`` or ``bf16 x bf16``)."""
    pe = entry.get("predicted_error")
    if not pe:
        return "-"
    if "plan" not in pe:
        return f"{pe['classical']:.1e}"
    text = f"{pe['plan']:.1e} ({pe['classical']:.1e})"
    rd = entry.get("rounding")
    if not rd:
        return text
    ops = rd.get("product_operands", "")
    ops = "mixed" if "mixed" in ops else ops.replace(" (operands extended)", "")
    return text + f", sums {rd['sums']}, f32 acc" + (f", products {ops}" if ops else "")


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
                     plan_text(r), error_text(r), str(r.get("reason", ""))])
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
    config, lcma, flags, compile_s, time_s and times_s in seconds keyed by
    run (``classical``, ``falcon``, ``jax``), rel_err_vs_classical,
    rel_err_vs_jax, rel_err_vs_f64, rel_err_update_vs_f64, report, summary) and ``layers``
    (one layer name per report entry, for :func:`print_contractions`)."""

    data: dict
    layers: List[str] = field(default_factory=list)


def _export(small: bool, tokens: int, log: Callable, dtype: str = "float32"):
    """``(config, block, StableHLO text)`` of the block at these sizes."""
    import dataclasses

    from falcon_mlir.models.llama_block import LLAMA3_8B, SMALL, LlamaBlock, library_versions

    cfg = dataclasses.replace((SMALL if small else LLAMA3_8B).with_tokens(tokens), dtype=dtype)
    cfg.validate()
    t0 = time.perf_counter()
    block = LlamaBlock(cfg)
    text = block.export_mlir()
    log(f"exported {cfg.name} block ({len(text.splitlines())} lines of StableHLO, "
        f"{sum(int(np.prod(s)) for _, s in block.weight_specs()) / 1e6:.0f} M weights) "
        f"in {time.perf_counter() - t0:.1f} s; {library_versions()}")
    return cfg, block, text


def _random_data(block, seed: int, dtype: str, log: Callable, what: str = "random inputs and weights") -> tuple:
    """``(x, weights)``: the block's random input (``seed``) and weights
    (``seed + 1``) in ``dtype``; the same arrays on every call (``what``: the log line's words)."""
    t0 = time.perf_counter()
    x = block.random_inputs(seed)
    weights = block.random_weights(seed + 1)
    if dtype != "float32":  # the block's arguments are in its dtype (bf16: via ml_dtypes)
        from falcon_mlir.dtypes import np_type

        t = np_type({"bfloat16": "bf16", "float16": "f16"}[dtype])
        x, weights = x.astype(t), [w.astype(t) for w in weights]
    log(f"{what} ({dtype}) in {time.perf_counter() - t0:.1f} s")
    return x, weights


def _iree_call(vmfb: bytes, inputs: list, external_transients: bool = False,
               parameters: Optional[dict] = None, parameter_types: Optional[dict] = None) -> Callable[[], np.ndarray]:
    """A zero-argument call of the module's ``main`` on ``inputs`` (placed on
    ``local-task`` once), returning the output on the host; ``external_transients``:
    ``main`` takes IREE's transient storage last, one buffer reused by every call
    (:meth:`falcon_mlir.runner.Module.call_with_transients`); ``parameters``: the values of
    the module's parameter-backed weights (key -> array), served when the module loads, checked
    against ``parameter_types``."""
    from falcon_mlir.runner import Module

    mod = Module(vmfb, parameters=parameters, parameter_types=parameter_types)
    args = mod.on_device(*inputs)

    def call():
        if external_transients:
            return mod.call_with_transients("main", *args)
        out = mod("main", *args)
        return out[0] if isinstance(out, tuple) else out

    return call


def _time_all(calls: Sequence[Callable[[], np.ndarray]], repeat: int) -> tuple:
    """Outputs of one warm-up call each and ``repeat`` interleaved call times
    per call (seconds)."""
    outs = [call() for call in calls]  # warm-up calls
    times: list = [[] for _ in calls]
    for _ in range(repeat):
        for i, call in enumerate(calls):
            t0 = time.perf_counter()
            call()
            times[i].append(time.perf_counter() - t0)
    return outs, times


#: How the IREE builds get the block's weights (:func:`run_main_job`'s ``weights``).
WEIGHTS = ("arguments", "parameters")


def saved_files(weights: str = "parameters") -> Tuple[str, ...]:
    """The files :func:`run_main_job` writes into ``save_dir`` (``weights.irpa`` with parameter weights)."""
    return ("block.mlir", "classical.vmfb", "falcon.vmfb", "report.json") + (
        ("weights.irpa",) if weights == "parameters" else ())

#: Row labels of the three runs in the printed table and summary.
RUN_LABELS = {"classical": "plain IREE", "falcon": "falcon", "jax": "JAX/XLA (jax.jit)"}


def _jax_compiled(block, inputs: list, log: Callable) -> Tuple[Callable[[], np.ndarray], float]:
    """The block compiled by XLA for JAX's default device (the CPU) and a
    zero-argument call of it on ``inputs`` (placed once with
    ``jax.device_put``; ``np.asarray`` waits for the result and maps it to
    the host); ``(call, compile seconds)``."""
    import jax

    args = [jax.device_put(a) for a in inputs]
    t0 = time.perf_counter()
    compiled = block.jit().lower(*args).compile()
    t_c = time.perf_counter() - t0
    log(f"JAX/XLA compile {t_c:.1f} s on {args[0].devices()}")
    return (lambda: np.asarray(compiled(*args))), t_c


def run_main_job(*, tokens: int = 1024, lcma: Optional[str] = "auto", repeat: int = 3, seed: int = 0,
                 small: bool = False, data_tiling: bool = True, iree_flags: Sequence[str] = (),
                 reference: bool = True, save_dir: Optional[str] = None,
                 log: Optional[Callable[[str], None]] = None, dtype: str = "float32",
                 jax: bool = True, tile_bytes: int = MATMUL_TILE_BYTES,
                 external_transients: bool = False, weights: str = "parameters") -> MainJob:
    """Export, compile both ways, run, time and compare the block (and,
    with ``jax``, the same block under ``jax.jit`` on the CPU, the peer).

    ``tokens``: sequence length M; ``lcma``: falcon's option string, None or
    ``"none"``/``"off"`` (no rewrite), or ``"analyze"``; ``small``: the small
    test block; ``save_dir``: also write block.mlir, classical.vmfb,
    falcon.vmfb and report.json there (atomically); ``dtype``: the layer's
    dtype, ``"float32"``, ``"bfloat16"`` or ``"float16"`` (weights,
    activations and the arguments; JAX exports the projections as
    ``dot_general`` with a result in that dtype; the float64 reference uses
    the same rounded inputs); ``jax``: also time and compare the block under
    ``jax.jit`` (XLA's CPU backend, same inputs, interleaved with the IREE
    calls); adds ``"jax"`` to ``time_s``, ``times_s``, ``compile_s`` and
    ``rel_err_vs_f64``, and ``rel_err_vs_jax`` (classical's and falcon's
    output against JAX's); ``tile_bytes``: with ``data_tiling``, both builds'
    matmul tile bytes (:func:`tile_flags`; 0: IREE's default). Both builds go
    through :func:`compile_split`. ``external_transients``: both IREE builds with
    IREE's external transients (:func:`falcon_mlir.runner.with_external_transients`):
    each call's transient memory is one buffer allocated before the timed calls
    and reused, where by default IREE allocates it every call and the kernel maps
    it fresh (page faults); JAX/XLA is run as always. ``weights``: how both IREE builds get the
    block's weights: ``"arguments"`` (passed to every call, as exported) or ``"parameters"``
    (:data:`WEIGHTS`: module globals backed by IREE parameters, served from the same host arrays
    when the module loads; IREE hoists what is computed from them alone, its packs of the weights
    and falcon's combines of B, into the module's initializer, run once at load, not timed; the
    load seconds are ``load_s``). JAX/XLA gets the weights as arguments either way, as keras does.
    ``reference``: also each run's error against the float64 reference, of the output
    (``rel_err_vs_f64``) and of the block's update, output minus input (``rel_err_update_vs_f64``):
    the residual input dominates the output, so the update's error is the one that shows a wrong
    projection (one weight's columns rolled by one moved the small block's output by 0.9-12% and its
    update by 11-145%).

    Raises:
        ValueError: an unknown ``dtype`` or ``weights``, ``tile_bytes`` out of :func:`tile_flags`' range.
        RuntimeError: non-finite values in an output; anything the export,
            compilers or runtime raise.
    """
    log = log or (lambda msg: None)
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
    spec = (lcma or "").strip()
    spec = None if spec.lower() in ("none", "off", "") else spec
    flags = list(BASE_FLAGS) + (list(DATA_TILING_FLAGS) if data_tiling else []) + list(iree_flags)
    tiles = tile_flags(tile_bytes)  # checked before the export; global options: the back halves only
    back = list(tiles) if data_tiling else []
    cfg, block, text = _export(small, tokens, log, dtype)
    if external_transients:
        from falcon_mlir.runner import with_external_transients

        text = with_external_transients(text)
    names = [n for n, _ in block.weight_specs()]
    types = None
    if weights == "parameters":
        from falcon_mlir.parameters import parameter_types, weight_keys, with_weight_parameters

        text = with_weight_parameters(text, weight_keys(names))
        types = parameter_types(text)

    t0 = time.perf_counter()
    vm_classical, _ = compile_split(text, flags, falcon=False, extra_flags=back)
    t_cc = time.perf_counter() - t0
    log(f"classical compile {t_cc:.1f} s")
    t0 = time.perf_counter()
    vm_falcon, report = compile_split(text, flags, spec, extra_flags=back)
    t_cf = time.perf_counter() - t0
    log(f"falcon compile {t_cf:.1f} s ({len(report)} contractions in the report)")
    if save_dir:
        os.makedirs(save_dir, exist_ok=True)
        write_files_atomic([(os.path.join(save_dir, name), data) for name, data in (
            ("block.mlir", text.encode()), ("classical.vmfb", vm_classical), ("falcon.vmfb", vm_falcon),
            ("report.json", json.dumps(report, indent=1).encode()))])

    x, ws = _random_data(block, seed, dtype, log)
    inputs = [x, *ws]
    params = dict(zip(names, ws)) if weights == "parameters" else None
    if save_dir and params:
        from falcon_mlir.parameters import write_archive

        write_archive(os.path.join(save_dir, "weights.irpa"), params)
    iree_inputs = [x] if params else inputs
    del x, ws
    calls, load_s = [], {}
    for name, vm in (("classical", vm_classical), ("falcon", vm_falcon)):
        t0 = time.perf_counter()
        calls.append(_iree_call(vm, iree_inputs, external_transients, params, types))
        load_s[name] = time.perf_counter() - t0
    if params:
        log("modules loaded with the weights as parameters (initializers run): "
            + ", ".join(f"{n} {t:.1f} s" for n, t in load_s.items()))
    del params, iree_inputs
    compile_s = {"classical": t_cc, "falcon": t_cf}
    if jax:
        jax_call, compile_s["jax"] = _jax_compiled(block, inputs, log)
        calls.append(jax_call)
        del jax_call
    # Each runtime holds its own copy now (IREE's and JAX's placement copy);
    # the host arrays (0.87 GB at full size) go, the reference makes them again.
    del inputs
    runs = list(RUN_LABELS)[:len(calls)]
    outs, times = _time_all(calls, repeat)
    del calls  # the modules and JAX's copy of the arguments, before the float64 reference
    y = dict(zip(runs, outs))
    for name, ts in zip(runs, times):
        log(f"{name + ':':10} " + ", ".join(fmt_s(t) for t in ts))
    bad = [RUN_LABELS[n] for n in runs if not np.all(np.isfinite(y[n]))]
    if bad:
        raise RuntimeError("non-finite values in the output of " + ", ".join(bad))
    res = {
        "model": cfg.name, "config": {k: getattr(cfg, k) for k in (
            "hidden", "intermediate", "heads", "kv_heads", "head_dim", "tokens", "batch", "dtype")},
        "lcma": lcma, "flags": flags + back,
        "compile_s": compile_s,
        "time_s": {n: statistics.median(ts) for n, ts in zip(runs, times)},
        "times_s": dict(zip(runs, times)),
        "rel_err_vs_classical": rel_err(y["falcon"], y["classical"]),
        "report": report,
        "external_transients": external_transients,
        "weights": weights, "load_s": load_s,
    }
    if jax:
        res["rel_err_vs_jax"] = {n: rel_err(y[n], y["jax"]) for n in ("classical", "falcon")}
    if reference:
        t0 = time.perf_counter()
        x, ws = _random_data(block, seed, dtype, log, "the same inputs and weights again, for the float64 reference")
        y64 = block.reference_f64(x, ws)
        res["rel_err_vs_f64"] = {n: rel_err(y[n], y64) for n in runs}
        x64 = np.asarray(x, dtype=np.float64)
        del x, ws
        upd64 = y64 - x64
        res["rel_err_update_vs_f64"] = {n: rel_err(np.asarray(y[n], dtype=np.float64) - x64, upd64)
                                        for n in runs}
        del x64, upd64
        log(f"float64 reference in {time.perf_counter() - t0:.1f} s")
    tc, tf = res["time_s"]["classical"], res["time_s"]["falcon"]
    rewritten = sum(1 for r in report if r.get("plan") not in (None, "classical"))
    vs_jax = ""
    if jax:
        tj = res["time_s"]["jax"]
        vs_jax = f", JAX/XLA {fmt_s(tj)} ({tj / tf:.2f}x)"
    res["summary"] = (f"{cfg.name} block{'' if cfg.dtype == 'float32' else f' ({cfg.dtype})'}, "
                      f"{cfg.tokens} tokens: falcon {fmt_s(tf)} vs classical {fmt_s(tc)} "
                      f"({tc / tf:.2f}x){vs_jax}, rel. error {res['rel_err_vs_classical']:.1e}, "
                      f"{rewritten} of {len(report)} contractions rewritten"
                      + ("; IREE's transients in one buffer per module, allocated once" if external_transients else "")
                      + ("; weights as IREE parameters, hoisted work done at load (JAX/XLA: arguments)"
                         if weights == "parameters" else ""))
    return MainJob(res, [what_is(str(r.get("location", "")), text, names) for r in report])


def result_lines(res: dict) -> List[str]:
    """The lines printed after the table: errors between the outputs and
    against float64, then one row per run (plain IREE, falcon, JAX/XLA when
    measured): median, the timed calls, compile seconds and falcon's
    speed-up over it (its median / falcon's median; > 1: falcon faster)."""
    lines = [f"relative error (max-norm) falcon vs classical: {res['rel_err_vs_classical']:.2e}"]
    if "rel_err_vs_jax" in res:
        e = res["rel_err_vs_jax"]
        lines.append(f"relative error (max-norm) vs JAX/XLA: classical {e['classical']:.2e}, "
                     f"falcon {e['falcon']:.2e}")
    for key, what in (("rel_err_vs_f64", "relative error vs float64 numpy"),
                      ("rel_err_update_vs_f64", "relative error of the block's update (output - input) vs float64")):
        if key in res:
            lines.append(f"{what}: " + ", ".join(f"{n if n != 'jax' else 'JAX/XLA'} {v:.2e}"
                                                  for n, v in res[key].items()))
    runs = list(res["time_s"])
    tf = res["time_s"]["falcon"]
    rows = [["run", f"median of {len(res['times_s']['classical'])}", "calls", "compile",
             "falcon speed-up (its median / falcon's)"]]
    for n in runs:
        t = res["time_s"][n]
        rows.append([RUN_LABELS.get(n, n), fmt_s(t), ", ".join(fmt_s(v) for v in res["times_s"][n]),
                     f"{res['compile_s'][n]:.1f} s", "-" if n == "falcon" else f"{t / tf:.2f}x"])
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return lines

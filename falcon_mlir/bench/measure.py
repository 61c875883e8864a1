"""Measuring one GEMM shape: compile every candidate once, check its result
against a float64 product and against classical, then time the candidates
round-robin (falcon-bench's measuring part).

Times are wall-clock seconds of synchronous calls with the inputs already on
the device (each call waits for the result and maps it to the host:
:class:`falcon_mlir.runner.Module` semantics); errors are max-norm relative
errors (:func:`falcon_mlir.compare.rel_err`).
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from falcon_mlir.bench.candidates import Candidate, expand_top, plan_text
from falcon_mlir.bench.shapes import Shape
from falcon_mlir.cli import error_line
from falcon_mlir.compare import rel_err
from falcon_mlir.dtypes import np_type
from falcon_mlir.ir.matmul_text import matmul_mlir
from falcon_mlir.parameters import parameter_types, with_weight_parameters
from falcon_mlir.runner import BEST_CPU_FLAGS

__all__ = ["FLAG_SETS", "TARGET_BACKENDS", "PEERS", "PEER_SETTLE_S", "BenchConfig", "Result", "bench_shape", "attach_weight", "openblas_core",
           "openblas_threads", "torch_info"]

#: iree-compile flags per ``--flags`` choice (the target backend comes from
#: ``compile_str(target_backends=TARGET_BACKENDS)``).
FLAG_SETS = {
    "default": ["--iree-llvmcpu-target-cpu=host"],
    "best": list(BEST_CPU_FLAGS),
}
#: The CPU libraries timed beside IREE (candidate kinds that are not IREE
#: modules): numpy (OpenBLAS) and torch (oneDNN/MKL), in this order.
PEERS = ("numpy", "torch")
#: IREE target backends every IREE candidate is compiled for.
TARGET_BACKENDS = ("llvm-cpu",)
#: Seconds of idle after each timed peer call when the peers are interleaved with the IREE candidates
#: (:attr:`BenchConfig.interleave`): OpenBLAS's threads spin about 2^28 cycles (0.13 s at 2 GHz,
#: its THREAD_TIMEOUT default) after a call, libgomp's a little less, and would slow the next call.
PEER_SETTLE_S = 0.3
#: Name of the ``dense_resource`` blob that holds B with ``const_weights``.
WEIGHT_BLOB = "falcon_bench_B"
#: Key of the IREE parameter that holds B with ``parameter_weights`` (scope
#: :data:`falcon_mlir.parameters.DEFAULT_SCOPE`).
PARAMETER_KEY = "B"


@dataclass
class BenchConfig:
    """How every shape of a run is measured (falcon-bench's options).

    ``dtype``: element type of A and B (``f32``, ``f16``, ``bf16``); ``acc``:
    C's (``same`` or ``f32``); ``flags``: a :data:`FLAG_SETS` key, plus
    ``iree_flags``; ``const_weights``: B is a module constant (a ``dense_resource``
    blob, or with ``parameter_weights`` a module global read from an IREE parameter
    served when the module loads, as ``tools/run_model.py`` serves the block's
    weights: IREE hoists its pack of B and the rewrite's combines of B into the
    module's initializer instead of folding them at compile time); ``repeat``
    timed rounds after ``warmup`` calls (the first call checks the result);
    ``seed`` of the inputs; ``device``: IREE HAL driver; ``top``: plans for
    the ``top`` candidate; ``blas_core``: the OpenBLAS kernel (for labels);
    ``interleave``: the peers join the IREE candidates' rounds (each round
    calls every candidate once, starting one further along each round, with
    :data:`PEER_SETTLE_S` of idle after each peer call), so a shared
    machine's drift hits falcon and the library it is compared with alike
    (by default each peer is timed in a block of its own after them).
    ``external_transients``: every IREE candidate compiled with IREE's
    external transients and called with one buffer allocated once
    (:func:`falcon_mlir.runner.with_external_transients`), where by default each
    call's transients are allocated and mapped fresh (page faults that differ
    with a plan's temporaries). Peers (``numpy``, ``torch``) run with their libraries' own thread
    counts (:func:`openblas_threads`, :func:`torch_info`; on this machine
    every core, as IREE's ``local-task``).
    """

    dtype: str = "f32"
    acc: str = "same"
    flags: str = "best"
    iree_flags: tuple = ()
    const_weights: bool = False
    parameter_weights: bool = False
    repeat: int = 5
    warmup: int = 1
    seed: int = 0
    device: str = "local-task"
    top: int = 2
    blas_core: str = "?"
    interleave: bool = False
    external_transients: bool = False
    _runtime: object = field(default=None, repr=False, compare=False)

    @property
    def acc_type(self) -> str:
        """C's element type (``dtype`` when ``acc`` is ``same``)."""
        return self.dtype if self.acc == "same" else self.acc

    def compile_flags(self) -> List[str]:
        """The iree-compile flags of every candidate."""
        return FLAG_SETS[self.flags] + list(self.iree_flags)

    def target_flags(self) -> List[str]:
        """:meth:`compile_flags` with the target's (:data:`TARGET_BACKENDS`): what falcon compiles the
        candidates for, so what decides its defaults (falcon's CPU kernel on an AVX-512 host)."""
        from falcon_mlir.api import backend_flags

        return backend_flags(list(TARGET_BACKENDS)) + self.compile_flags()

    def auto_profile(self) -> Optional[str]:
        """The profile ``auto`` decides on when the candidates are compiled (falcon-compile's defaults
        for :meth:`target_flags`: ``x86-falcon`` where falcon's CPU kernel runs), or ``None``: the host
        profile (``$FALCON_PROFILE`` where set)."""
        from falcon_mlir.pipeline.assemble import make_rewrite

        rewrite = make_rewrite("auto", tiles=None, flags=self.target_flags())
        return rewrite.options.profile if rewrite is not None and rewrite.options is not None else None

    def __post_init__(self):
        if self.parameter_weights and not self.const_weights:
            raise ValueError("parameter_weights needs const_weights (a parameter is a constant B)")

    def runtime_config(self):
        """One ``iree.runtime.Config`` for every module of the run: a device per
        module keeps its own pool of transient buffers (the 2048 x 8192 x 8192
        sweep grew past 24 GB that way)."""
        if self._runtime is None:
            import iree.runtime as rt

            self._runtime = rt.Config(self.device)
        return self._runtime


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


def attach_weight(text: str, b: np.ndarray, dtype: str) -> bytes:
    """MLIR bytecode of ``text`` with B's bytes as the ``dense_resource`` blob.

    The blob goes straight from the numpy buffer into the module (no hex text),
    so a 4096 x 14336 f32 weight (235 MB) costs its size once more in memory.
    """
    from iree.compiler import ir

    with ir.Context(), ir.Location.unknown():
        mod = ir.Module.parse(text.replace(f"dense_resource<{WEIGHT_BLOB}>", "dense<1.0>"))
        elt = {"f32": ir.F32Type.get, "f16": ir.F16Type.get, "bf16": ir.BF16Type.get}[dtype]()
        ty = ir.RankedTensorType.get(list(b.shape), elt)
        raw = np.ascontiguousarray(b).view(np.uint16 if dtype != "f32" else np.float32)
        attr = ir.DenseResourceElementsAttr.get_from_buffer(memoryview(raw), WEIGHT_BLOB, ty)
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


def _openblas_libs() -> list:
    """ctypes handles of the OpenBLAS libraries loaded in this process (numpy's)."""
    import ctypes

    np.ones(2) @ np.ones(2)
    try:
        paths = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "openblas" in ln.lower()})
    except OSError:
        return []
    libs = []
    for path in paths:
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


def _openblas_call(names: Sequence[str], restype):
    """The first of the OpenBLAS functions ``names`` found, called with no
    arguments; None when none is found."""
    for lib in _openblas_libs():
        for sym in names:
            f = getattr(lib, sym, None)
            if f is not None:
                f.restype = restype
                return f()
    return None


def openblas_core() -> str:
    """Name of the OpenBLAS kernel numpy runs (e.g. ``SkylakeX``), or ``?``."""
    import ctypes

    core = _openblas_call(("scipy_openblas_get_corename64_", "openblas_get_corename64_",
                           "scipy_openblas_get_corename", "openblas_get_corename"), ctypes.c_char_p)
    return core.decode() if core else "?"


def openblas_threads() -> int:
    """Threads numpy's OpenBLAS runs a GEMM on (0 when unknown)."""
    import ctypes

    n = _openblas_call(("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                        "scipy_openblas_get_num_threads", "openblas_get_num_threads"), ctypes.c_int)
    return int(n or 0)


def torch_info() -> Optional[dict]:
    """``{"version", "threads", "mkldnn", "mkl"}`` of the installed torch (its
    CPU GEMM: oneDNN, called mkldnn in torch, and MKL), or None when torch
    is not installed. Imports torch."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return {"version": torch.__version__, "threads": torch.get_num_threads(),
            "mkldnn": bool(torch.backends.mkldnn.is_available()), "mkl": bool(torch.backends.mkl.is_available())}


def _numpy_runner(a, b, config: BenchConfig, r: Result) -> Callable:
    r.plan = (f"numpy.matmul (OpenBLAS {config.blas_core}, {openblas_threads() or '?'} threads"
              + (", f32 upcast)" if config.dtype != "f32" else ")"))
    r.compile_s = 0.0
    if config.dtype == "f32":
        return lambda: a @ b
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    return lambda: a32 @ b32


def _torch_runner(a, b, config: BenchConfig, r: Result) -> Callable:
    """``torch.matmul`` on CPU tensors sharing ``a``'s and ``b``'s memory, in
    the inputs' own type when C has it (bf16 and f16 products with a bf16/f16
    result, as IREE's); with ``acc=f32`` on bf16/f16 inputs torch has no f32
    result (``out_dtype`` is CUDA only), so it multiplies the f32 upcast, as
    the numpy peer does. Returns a call giving a numpy array (bf16 via
    ml_dtypes). Raises ImportError without torch."""
    import torch

    info = torch_info()
    lib = "oneDNN" if info["mkldnn"] else "ATen"
    lib += "/MKL" if info["mkl"] else ""
    r.compile_s = 0.0
    native = config.dtype == "f32" or config.acc == "same"
    r.plan = (f"torch.matmul ({lib}, torch {info['version']}, {info['threads']} threads"
              + (")" if config.dtype == "f32" else f", {config.dtype})" if native else ", f32 upcast)"))
    if not native:
        a, b = a.astype(np.float32), b.astype(np.float32)
    if a.dtype == np_type("bf16"):
        ta = torch.from_numpy(np.ascontiguousarray(a).view(np.uint16)).view(torch.bfloat16)
        tb = torch.from_numpy(np.ascontiguousarray(b).view(np.uint16)).view(torch.bfloat16)
        return lambda: torch.matmul(ta, tb).view(torch.int16).numpy().view(a.dtype)
    ta, tb = torch.from_numpy(np.ascontiguousarray(a)), torch.from_numpy(np.ascontiguousarray(b))
    return lambda: torch.matmul(ta, tb).numpy()


_PEER_RUNNERS = {"numpy": _numpy_runner, "torch": _torch_runner}


def _iree_runner(source, a, b, c: Candidate, config: BenchConfig, r: Result,
                 log: Callable) -> Optional[Callable]:
    """Compile ``source`` for candidate ``c`` and load it; None (``r.status``
    says why) when either fails."""
    from falcon_mlir import compile_str
    from falcon_mlir.runner import Module

    t0 = time.perf_counter()
    try:
        vmfb, report = compile_str(source, target_backends=list(TARGET_BACKENDS), extra_args=config.compile_flags(),
                                   lcma=c.lcma, kernels=c.kernels, return_report=True)
    except Exception as e:  # CompileError, RewriteError: keep going
        r.compile_s = time.perf_counter() - t0
        r.status = "compile failed: " + error_line(e, 200)
        log(f"{r.shape.text()} {c.name}: {r.status}")
        return None
    r.compile_s = time.perf_counter() - t0
    r.plan = plan_text(report)
    run = None
    try:
        params = {PARAMETER_KEY: b} if config.parameter_weights else None
        mod = Module(vmfb, driver=config.device, config=config.runtime_config(), parameters=params,
                     parameter_types=parameter_types(source) if params else None)
        dev_args = mod.on_device(*([a] if config.const_weights else [a, b]))
        call = mod.call_with_transients if config.external_transients else mod
        run = lambda: call("mm", *dev_args)  # noqa: E731
    except Exception as e:
        r.status = "load failed: " + error_line(e, 200)
        log(f"{r.shape.text()} {c.name}: {r.status}")
    log(f"{r.shape.text()} {c.name}: compiled in {r.compile_s:.1f} s, plan {r.plan}")
    return run


def _check(runners: Dict[int, Callable], results: List[Result], ref: np.ndarray) -> None:
    """First call of each runner (also a warm-up call): errors vs ``ref`` and
    vs classical (index 0); a runner that fails is dropped."""
    outs = {}
    for i, run in list(runners.items()):
        try:
            outs[i] = run()
            results[i].rel_err_f64 = rel_err(outs[i], ref)
        except Exception as e:
            results[i].status = "run failed: " + error_line(e, 200)
            del runners[i]
    cls = outs.get(0)
    if cls is not None:
        for i, out in outs.items():
            results[i].rel_err_cls = rel_err(out, cls)


def bench_shape(shape: Shape, cands: List[Candidate], config: BenchConfig,
                log: Optional[Callable[[str], None]] = None) -> List[Result]:
    """Compile, check and time every candidate on one shape.

    Inputs are random normal (seeded by ``config.seed`` and the shape). IREE
    candidates are timed round-robin (drift of a shared machine spreads over
    all); each peer (numpy, torch) after them in a block of its own, since
    OpenBLAS's and OpenMP's threads keep spinning for a while after a call
    and would slow whichever call came next; with ``config.interleave`` the
    peers join the rounds instead, each call followed by :data:`PEER_SETTLE_S`
    of idle (not timed), and each round starts one candidate further along. A candidate that fails to
    compile, load or run is a result with that ``status`` and no times.
    """
    log = log or (lambda msg: None)
    rng = np.random.default_rng([config.seed, shape.M, shape.N, shape.K])
    npd = np_type(config.dtype)
    a = rng.standard_normal((shape.M, shape.K), dtype=np.float32).astype(npd)
    b = rng.standard_normal((shape.K, shape.N), dtype=np.float32).astype(npd)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    blob = config.const_weights and not config.parameter_weights
    text = matmul_mlir(shape.M, shape.N, shape.K, config.dtype, config.acc_type,
                       b_const=f"dense_resource<{WEIGHT_BLOB}>" if blob else None)
    if config.parameter_weights:  # B, argument 1, a global read from parameter PARAMETER_KEY
        text = with_weight_parameters(text, {1: PARAMETER_KEY}, func="mm")
    if config.external_transients:  # before the weight's blob is attached (the rewrite reads text)
        from falcon_mlir.runner import with_external_transients

        text = with_external_transients(text, "mm")
    source = attach_weight(text, b, config.dtype) if blob else text

    if any(c.kind in ("top", "blocked") for c in cands):  # the plans of auto's profile
        cands = expand_top(shape, cands, dtype=config.dtype, acc=config.acc_type,
                           const_weights=config.const_weights, top=config.top, profile=config.auto_profile())
    results = [Result(shape, c) for c in cands]
    runners: Dict[int, Callable] = {}  # index -> zero-arg callable returning a host array
    for i, (c, r) in enumerate(zip(cands, results)):
        if c.kind in _PEER_RUNNERS:
            run = _PEER_RUNNERS[c.kind](a, b, config, r)
        else:
            run = _iree_runner(source, a, b, c, config, r, log)
        if run is not None:
            runners[i] = run
    _check(runners, results, ref)
    del ref

    if config.interleave:
        blocks = [runners]
    else:
        blocks = [{i: run for i, run in runners.items() if cands[i].kind == "iree"}]
        blocks += [{i: run} for i, run in runners.items() if cands[i].kind != "iree"]
    for block in blocks:
        order = list(block)
        if not order:  # every candidate failed (a shape IREE cannot compile, no peers): nothing to time
            continue
        settle = {i: PEER_SETTLE_S if config.interleave and cands[i].kind != "iree" else 0.0 for i in order}
        for _ in range(max(config.warmup - 1, 0)):
            for i in order:
                block[i]()
                if settle[i]:
                    time.sleep(settle[i])
        for rnd in range(config.repeat):
            shift = rnd % len(order) if config.interleave else 0
            for i in order[shift:] + order[:shift]:  # round-robin
                t0 = time.perf_counter()
                block[i]()
                results[i].times.append(time.perf_counter() - t0)
                if settle[i]:
                    time.sleep(settle[i])
    return results

"""Triton runs in a child process: ``python -m falcon_mlir.kernels._worker`` compiles a batch of kernels.

Why a child: Triton and TensorFlow each ship LLVM, and importing ``triton``
into a process that has already imported TensorFlow (keras-hub does, through
tensorflow-text) aborts the whole process ("CommandLine Error: Option
'bitcode-mdindex-threshold' registered more than once! LLVM ERROR:
inconsistency in registered CommandLine options"). So nothing on the compile
path imports Triton into the caller: :func:`run_jobs` (parent side, no
Triton) starts one child for a whole batch of kernels (Triton's import is paid
once per batch) and reads back one result per job. The disk cache stays with
the caller (:mod:`falcon_mlir.kernels.aot`), so a fully cached batch starts no
child at all.

Protocol: the jobs go to the child's stdin as JSON ``{"jobs": [...]}``; the
child moves its own stdout to stderr (Triton, ptxas and warnings print
there) and writes ``{"results": [...]}`` to the original stdout. A job is

* ``{"kind": "gemm", "spec": GemmSpec dict, "config": KernelConfig dict,
  "capability": 90, "num_sms": 132}``: the GEMM of :mod:`.triton_gemm`;
* ``{"kind": "nvrtc", "source": CUDA C, "arch": "sm_90a", "label": TEXT,
  "num_programs": N}``: the f32 FMA GEMM of :mod:`.fma_gemm`, compiled by NVRTC;
* ``{"kind": "source", "path": FILE, "fn": NAME, "signature": {...},
  "constexprs": {...}, "pointers": N, "options": {...}, "capability": 90,
  "label": TEXT}``: the ``@triton.jit`` function ``NAME`` of a generated
  source file (the LCMA combine kernels), its first ``N`` parameters
  pointers 16-byte aligned.

A result is ``{"ok": true, "cubin": BASE64, "metadata": {...}, "seconds": S,
"triton_version": V, "usage": {"registers": R, "stack_bytes": S}}`` (GEMM
jobs add ``"num_programs"``) or ``{"ok": false, "error": ONE LINE}`` naming
what failed (the spec and config, or the label).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

from falcon_mlir.kernels.aot import resource_usage  # imports no Triton

#: The kernel metadata fields a result carries (Triton's ``CompiledKernel.metadata``).
METADATA_FIELDS = ("name", "num_warps", "num_stages", "shared", "num_ctas", "cluster_dims",
                   "global_scratch_size", "global_scratch_align", "profile_scratch_size",
                   "profile_scratch_align", "launch_cooperative_grid", "launch_pdl")
#: Seconds a whole batch may take (cold Triton compiles are 0.2-3 s each).
DEFAULT_TIMEOUT = 1800.0


class WorkerError(RuntimeError):
    """The child process failed as a whole (not one job): crashed, timed out or wrote no result."""


def _package_root() -> str:
    """The folder holding ``falcon_mlir`` (so the child imports this very copy of the package)."""
    return str(Path(__file__).resolve().parents[2])


def run_jobs(jobs: Sequence[dict], timeout: Optional[float] = None) -> list:
    """Compile ``jobs`` in one child process; one result dict per job (see the module docstring).

    No child is started for an empty batch.

    Raises:
        WorkerError: the child crashed, timed out or answered nothing readable (the
            message has the exit status and the last line of its stderr).
    """
    jobs = list(jobs)
    if not jobs:
        return []
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_package_root()] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                               if p])
    env.pop("TRITON_INTERPRET", None)  # compile, never interpret
    try:
        r = subprocess.run([sys.executable, "-m", "falcon_mlir.kernels._worker"], input=json.dumps({"jobs": jobs}),
                           capture_output=True, text=True, env=env, timeout=timeout or DEFAULT_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise WorkerError(f"Triton worker timed out after {e.timeout:.0f}s compiling {len(jobs)} kernel(s)") from None
    try:
        results = json.loads(r.stdout)["results"]
        if len(results) != len(jobs):
            raise ValueError("wrong count")
    except (ValueError, KeyError, TypeError):
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        last = lines[-1].strip() if lines else "no output"
        raise WorkerError(f"Triton worker failed (exit {r.returncode}) compiling {len(jobs)} kernel(s): {last}") \
            from None
    return results


# --------------------------------------------------------------------------- child side (imports Triton)

def _one_line(e: BaseException) -> str:
    """The line of Triton's message that says what went wrong: ptxas's own
    ``ptxas fatal`` / ``ptxas error`` line where there is one (Triton ends a
    PTXAS error with its "Repro command" line, which says nothing), else the
    last line (a compilation error's message follows its source excerpt)."""
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("Repro command")] or lines
    ptxas = [ln for ln in lines if re.match(r"ptxas\s*(fatal|error)", ln, re.IGNORECASE)]
    if ptxas:
        return ptxas[-1]
    return lines[-1] if lines else type(e).__name__


def _load_source(path: str, fn: str):
    """The ``@triton.jit`` function ``fn`` of a generated source file (imported by path, once)."""
    import hashlib
    import importlib.util

    name = "falcon_generated_" + hashlib.sha256(path.encode()).hexdigest()[:16]
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # Triton's JIT reads the source through inspect, which needs the module
        spec.loader.exec_module(mod)
    return getattr(mod, fn)


def _compile(fn, signature: dict, constexprs: dict, pointers: int, options: dict, capability: int):
    import time

    import triton
    from triton.backends.compiler import GPUTarget

    sig = dict(signature)
    sig.update({k: "constexpr" for k in constexprs})
    # Every binding IREE passes is at least 16-byte aligned: vector loads and TMA bases.
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(pointers)}
    src = triton.compiler.ASTSource(fn, sig, constexprs, attrs)
    t0 = time.perf_counter()
    k = triton.compile(src, target=GPUTarget("cuda", capability, 32), options=options)
    seconds = time.perf_counter() - t0
    md = {}
    for f in METADATA_FIELDS:
        v = getattr(k.metadata, f, None)
        md[f] = list(v) if isinstance(v, tuple) else v
    cubin = bytes(k.asm["cubin"])
    return {"ok": True, "cubin": base64.b64encode(cubin).decode("ascii"), "metadata": md, "seconds": seconds,
            "triton_version": triton.__version__, "usage": resource_usage(cubin)}


def _gemm_job(job: dict) -> dict:
    from . import triton_gemm as tg
    from .configs import KernelConfig
    from .spec import GemmSpec

    spec, config = GemmSpec.from_dict(job["spec"]), KernelConfig.from_dict(job["config"])
    label = f"{spec.name} with {config.label}"
    try:
        programs = tg.num_programs(spec.M, spec.N, spec.batch, config.block_m, config.block_n, job["num_sms"])
        cx = tg.kernel_constexprs(
            M=spec.M, N=spec.N, K=spec.K, batch=spec.batch, trans_a=spec.trans_a, trans_b=spec.trans_b,
            in_dtype=spec.a_dtype, f32_mode=spec.f32_mode, block_m=config.block_m,
            block_n=config.block_n, block_k=config.block_k, group_m=config.group_m,
            warp_specialize=config.warp_specialize, epilogue_subtile=config.epilogue_subtile,
            tma_store=config.tma_store, num_programs=programs)
        signature = {"a_ptr": tg.POINTER_TYPES[spec.a_dtype], "b_ptr": tg.POINTER_TYPES[spec.b_dtype],
                     "c_ptr": tg.POINTER_TYPES[spec.out_dtype]}
        # enable_fp_fusion: f32 products are fused multiply-adds (what "IEEE f32" means here).
        options = dict(num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)
        out = _compile(tg.falcon_gemm, signature, cx, len(tg.POINTER_ARGS), options, job["capability"])
    except Exception as e:
        return {"ok": False, "error": f"Triton failed to compile {label}: {_one_line(e)}"}
    out["num_programs"] = programs
    return out


def _source_job(job: dict) -> dict:
    try:
        fn = _load_source(job["path"], job["fn"])
        return _compile(fn, job["signature"], job["constexprs"], job["pointers"], job["options"], job["capability"])
    except Exception as e:
        return {"ok": False, "error": f"Triton failed to compile {job.get('label', job.get('fn'))}: {_one_line(e)}"}


def _nvrtc_job(job: dict) -> dict:
    """The f32 FMA GEMM (:mod:`.fma_gemm`): CUDA C source compiled by NVRTC, launch facts as Triton's."""
    import time

    from . import fma_gemm

    try:
        t0 = time.perf_counter()
        cubin = fma_gemm.compile_cubin(job["source"], job["arch"])
        seconds = time.perf_counter() - t0
    except Exception as e:
        return {"ok": False, "error": f"NVRTC failed to compile {job.get('label')}: {_one_line(e)}"}
    md = {"name": fma_gemm.KERNEL_NAME, "num_warps": fma_gemm.THREADS // 32, "num_stages": 2, "shared": 0,
          "num_ctas": 1, "cluster_dims": [1, 1, 1], "global_scratch_size": 0, "global_scratch_align": 1,
          "profile_scratch_size": 0, "profile_scratch_align": 1, "launch_cooperative_grid": False,
          "launch_pdl": False}
    return {"ok": True, "cubin": base64.b64encode(cubin).decode("ascii"), "metadata": md, "seconds": seconds,
            "triton_version": fma_gemm.nvrtc_version(), "usage": resource_usage(cubin),
            "num_programs": job["num_programs"]}


def main() -> int:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever Triton or ptxas print goes to stderr, not into the results
    sys.stdout = sys.stderr
    jobs = json.loads(sys.stdin.read())["jobs"]
    import warnings
    warnings.simplefilter("ignore")  # the caller warns about what matters (spills, versions)
    results = []
    for job in jobs:
        kind = job.get("kind")
        if kind == "gemm":
            results.append(_gemm_job(job))
        elif kind == "source":
            results.append(_source_job(job))
        elif kind == "nvrtc":
            results.append(_nvrtc_job(job))
        else:
            results.append({"ok": False, "error": f"unknown job kind {kind!r}"})
    out.write(json.dumps({"results": results}))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

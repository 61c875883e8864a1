"""Compile the Triton GEMM ahead of time to an sm_90a cubin (no GPU needed), with a disk cache.

``compile_kernel(spec, config)`` runs ``triton.compile`` on the kernel of
:mod:`falcon_mlir.kernels.triton_gemm` with every size as a constexpr, for
``GPUTarget("cuda", 90, 32)`` (Triton emits ``sm_90a``: wgmma and TMA), and
returns the **cubin** with the launch facts IREE needs (threads, dynamic
shared memory, scratch sizes, grid). Cubin, not PTX: the H200's driver (580,
CUDA 13.0) rejected Triton 3.9's PTX ``.version 9.4``.

The compiler is **Triton 3.6** (``TRITON_VERSION``; pinned by the ``cuda``
extra), the version the H200 machine runs, so a configuration tuned there
by JIT is the same code here. Triton 3.9 is not used: its IEEE f32 (FMA)
kernels put a CTA barrier between the shared-memory loads of a K step and
its FMAs, so every operand of the step is live at once; ptxas then falls back
to 32 registers and ~5.5 KB of local-memory spills per thread (1.3 s instead
of ~26 ms at 8192^3 on the H200). ``docs/kernels.md`` has the evidence. Each
kernel's register count and stack (spill) bytes are read from the cubin
(``cuobjdump -res-usage``) and a kernel that spills is reported.

Cache: one JSON file per kernel (cubin base64-encoded inside), named by a
SHA-256 over the kernel source text, the spec, the configuration, Triton's
version, the arch and the SM count, in ``$FALCON_KERNEL_CACHE`` or
``~/.cache/falcon-mlir/kernels``; written to a temporary file and renamed
into place (``os.replace``), so readers never see half a file. An unreadable
entry is compiled again; an unwritable cache directory only costs the cache.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .configs import SHARED_MEMORY_LIMIT, KernelConfig, choose_config
from .spec import GemmSpec, require_supported

#: Compute capability per accepted ``arch`` spelling (the kernels need TMA and wgmma).
ARCHES = {"sm_90a": 90, "sm_90": 90}
#: Streaming multiprocessors of an H200 (and H100 SXM): programs of the persistent grid.
H200_SMS = 132
#: Bump when the cache entry's layout changes.
CACHE_FORMAT = 2
#: The Triton that compiles the kernels (the H200 machine's JIT runs the same).
TRITON_VERSION = "3.6.0"
#: CUDA allows at most this many threads per block.
MAX_THREADS = 1024


@dataclass(frozen=True)
class CompiledKernel:
    """A cubin for one GEMM and the facts needed to launch it.

    Attributes:
        spec, config, arch: what was compiled.
        name: the kernel's entry symbol in the cubin.
        cubin: the sm_90a ELF image (bytes).
        num_warps: warps per block as compiled (12 for warp-specialized 4-warp configs).
        shared: dynamic shared memory per block (bytes).
        global_scratch_size, global_scratch_align: Triton's global scratch per
            program (bytes; holds the device-side TMA descriptors) and its alignment.
        profile_scratch_size, profile_scratch_align: the same for profiling (0 unless instrumented).
        num_programs: blocks of the 1-D persistent grid.
        triton_version: Triton that compiled it.
        key: the cache key (hex SHA-256).
        registers: registers per thread in the cubin (None: no cuobjdump to read it).
        stack_bytes: per-thread stack frame (local memory: spills), None as above.
        compile_seconds: time ``triton.compile`` took (0.0 when read from the cache).
        from_cache: read from the disk cache.
    """

    spec: GemmSpec
    config: KernelConfig
    arch: str
    name: str
    cubin: bytes = field(repr=False)
    num_warps: int
    shared: int
    global_scratch_size: int
    global_scratch_align: int
    profile_scratch_size: int
    profile_scratch_align: int
    num_programs: int
    triton_version: str
    key: str
    registers: Optional[int] = None
    stack_bytes: Optional[int] = None
    compile_seconds: float = 0.0
    from_cache: bool = False

    @property
    def threads(self) -> int:
        """Threads per block (``32 * num_warps``)."""
        return 32 * self.num_warps

    @property
    def grid(self) -> tuple:
        """Blocks per grid dimension: ``(num_programs, 1, 1)``."""
        return (self.num_programs, 1, 1)

    @property
    def global_scratch_bytes(self) -> int:
        """Global scratch for the whole grid (bytes): per program times programs."""
        return self.global_scratch_size * self.num_programs

    @property
    def profile_scratch_bytes(self) -> int:
        """Profile scratch for the whole grid (bytes)."""
        return self.profile_scratch_size * self.num_programs

    def metadata(self) -> dict:
        """The launch facts as a JSON-ready dict (no cubin)."""
        keys = ("arch", "name", "num_warps", "shared", "global_scratch_size", "global_scratch_align",
                "profile_scratch_size", "profile_scratch_align", "num_programs", "triton_version", "key",
                "registers", "stack_bytes")
        d = {k: getattr(self, k) for k in keys}
        d.update(threads=self.threads, cubin_bytes=len(self.cubin), config=self.config.label)
        return d

    def _to_json(self) -> str:
        d = self.metadata()
        for k in ("threads", "cubin_bytes", "config"):
            d.pop(k)
        d.update(format=CACHE_FORMAT, spec=self.spec.to_dict(), config=self.config.to_dict(),
                 cubin=base64.b64encode(self.cubin).decode("ascii"))
        return json.dumps(d, sort_keys=True)

    @classmethod
    def _from_json(cls, text: str) -> "CompiledKernel":
        d = json.loads(text)
        if d.pop("format") != CACHE_FORMAT:
            raise ValueError("old cache format")
        d["spec"] = GemmSpec.from_dict(d["spec"])
        d["config"] = KernelConfig.from_dict(d["config"])
        d["cubin"] = base64.b64decode(d["cubin"])
        return cls(**d, from_cache=True)


def cache_dir() -> Path:
    """The kernel cache directory: ``$FALCON_KERNEL_CACHE`` or ``~/.cache/falcon-mlir/kernels``."""
    env = os.environ.get("FALCON_KERNEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "falcon-mlir" / "kernels"


#: The kernel's source file (imported only when compiling: it needs Triton).
KERNEL_SOURCE = Path(__file__).with_name("triton_gemm.py")


def kernel_source() -> str:
    """The text of the kernel's module (part of every cache key)."""
    return KERNEL_SOURCE.read_text()


_VERSION_WARNED = False


def _triton():
    global _VERSION_WARNED
    try:
        import triton
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("compiling kernels needs Triton: pip install 'falcon-mlir[cuda]' "
                          f"(triton=={TRITON_VERSION})") from e
    if triton.__version__ != TRITON_VERSION and not _VERSION_WARNED:
        _VERSION_WARNED = True
        warnings.warn(f"falcon_mlir.kernels is built and tuned with Triton {TRITON_VERSION}, this is "
                      f"{triton.__version__}: configurations may not carry over (Triton 3.9 spills "
                      "IEEE f32 kernels to local memory, see docs/kernels.md)", RuntimeWarning, stacklevel=3)
    return triton


def cache_key(spec: GemmSpec, config: KernelConfig, arch: str, num_sms: int) -> str:
    """Hex SHA-256 over (format, kernel source, spec, config, Triton version, arch, SM count)."""
    payload = json.dumps({"format": CACHE_FORMAT, "source": kernel_source(), "spec": spec.to_dict(),
                          "config": config.to_dict(), "triton": _triton().__version__,
                          "arch": arch, "num_sms": num_sms}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _check_arch(arch: str) -> int:
    if arch not in ARCHES:
        raise ValueError(f"arch {arch!r} not served: the kernels use TMA and wgmma, "
                         f"which need one of {', '.join(ARCHES)}")
    return ARCHES[arch]


def _check_config(spec: GemmSpec, config: KernelConfig) -> None:
    if config.tma_store and not spec.c_row_aligned():
        raise ValueError(f"{spec.name}: C's row stride (N = {spec.N} x {spec.out_dtype}) is not a multiple "
                         "of 16 bytes, so TMA cannot store it: use tma_store=False (',masked'), "
                         "e.g. configs.adapt(spec, config)")


def _compile(spec: GemmSpec, config: KernelConfig, capability: int, arch: str, num_sms: int,
             key: str) -> CompiledKernel:
    triton = _triton()
    from triton.backends.compiler import GPUTarget

    from . import triton_gemm as tg

    programs = tg.num_programs(spec.M, spec.N, spec.batch, config.block_m, config.block_n, num_sms)
    cx = tg.kernel_constexprs(
        M=spec.M, N=spec.N, K=spec.K, batch=spec.batch, trans_a=spec.trans_a, trans_b=spec.trans_b,
        in_dtype=spec.a_dtype, f32_mode=spec.f32_mode, block_m=config.block_m,
        block_n=config.block_n, block_k=config.block_k, group_m=config.group_m,
        warp_specialize=config.warp_specialize, epilogue_subtile=config.epilogue_subtile,
        tma_store=config.tma_store, num_programs=programs)
    signature = {"a_ptr": tg.POINTER_TYPES[spec.a_dtype], "b_ptr": tg.POINTER_TYPES[spec.b_dtype],
                 "c_ptr": tg.POINTER_TYPES[spec.out_dtype]}
    signature.update({k: "constexpr" for k in cx})
    # Every binding IREE passes is at least 16-byte aligned: vector loads and TMA bases.
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(tg.POINTER_ARGS))}
    src = triton.compiler.ASTSource(tg.falcon_gemm, signature, cx, attrs)
    # enable_fp_fusion: f32 products are fused multiply-adds (what "IEEE f32" means here).
    options = dict(num_warps=config.num_warps, num_stages=config.num_stages, enable_fp_fusion=True)
    t0 = time.perf_counter()
    try:
        k = triton.compile(src, target=GPUTarget("cuda", capability, 32), options=options)
    except Exception as e:
        first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise RuntimeError(f"Triton failed to compile {spec.name} with {config.label}: {first}") from e
    seconds = time.perf_counter() - t0
    md = k.metadata
    if md.num_ctas != 1 or tuple(getattr(md, "cluster_dims", (1, 1, 1))) != (1, 1, 1):
        raise RuntimeError(f"{spec.name}: kernel compiled for {md.num_ctas} CTAs per cluster; "
                           "IREE launches single-CTA blocks only")
    for flag in ("launch_cooperative_grid", "launch_pdl"):
        if getattr(md, flag, False):
            raise RuntimeError(f"{spec.name}: kernel needs {flag}, which IREE's launch does not set")
    if 32 * md.num_warps > MAX_THREADS:
        raise RuntimeError(f"{spec.name}: {32 * md.num_warps} threads per block exceed {MAX_THREADS}")
    if md.shared > SHARED_MEMORY_LIMIT:
        raise ValueError(f"{spec.name} with {config.label} needs {md.shared} bytes of shared memory, "
                         f"more than the {SHARED_MEMORY_LIMIT} an sm_90 block may use: "
                         "use fewer stages, smaller tiles or epilogue subtiling (',sub')")
    cubin = bytes(k.asm["cubin"])
    usage = resource_usage(cubin)
    if usage.get("stack_bytes"):
        warnings.warn(f"{spec.name} with {config.label}: {usage['stack_bytes']} bytes of stack per thread "
                      f"({usage['registers']} registers): the kernel spills to local memory and will be "
                      "slow; use smaller tiles or fewer stages", RuntimeWarning, stacklevel=3)
    return CompiledKernel(
        spec=spec, config=config, arch=arch, name=md.name, cubin=cubin,
        num_warps=md.num_warps, shared=md.shared,
        global_scratch_size=md.global_scratch_size or 0, global_scratch_align=md.global_scratch_align or 1,
        profile_scratch_size=md.profile_scratch_size or 0,
        profile_scratch_align=md.profile_scratch_align or 1,
        num_programs=programs, triton_version=triton.__version__, key=key,
        registers=usage.get("registers"), stack_bytes=usage.get("stack_bytes"), compile_seconds=seconds)


def compile_kernel(spec: GemmSpec, config: Optional[KernelConfig] = None, arch: str = "sm_90a",
                   num_sms: int = H200_SMS, cache: bool = True) -> CompiledKernel:
    """Compile (or read from the cache) the kernel for ``spec`` with ``config``.

    Args:
        spec: the GEMM.
        config: the configuration; default :func:`~falcon_mlir.kernels.configs.choose_config`.
            Used as given otherwise (see ``configs.adapt`` for the C store).
        arch: ``"sm_90a"`` (``"sm_90"`` means the same: Triton compiles
            capability 90 as sm_90a).
        num_sms: programs of the persistent grid at most (132 on an H200).
        cache: read and write the disk cache (:func:`cache_dir`).

    Returns:
        A :class:`CompiledKernel`.

    Raises:
        ValueError: ``spec`` not served (the reason), another arch, a config
            that cannot store this C by TMA, or a kernel over the shared-memory limit.
        ImportError: Triton is not installed.
        RuntimeError: Triton failed, or compiled a kernel IREE cannot launch.
    """
    capability = _check_arch(arch)
    require_supported(spec)
    if isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms < 1:
        raise ValueError(f"num_sms must be a positive int, got {num_sms!r}")
    config = config if config is not None else choose_config(spec)
    _check_config(spec, config)
    key = cache_key(spec, config, arch, num_sms)
    path = cache_dir() / f"{key}.json"
    if cache and path.is_file():
        try:
            return CompiledKernel._from_json(path.read_text())
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable or stale entry: compile again and overwrite it
    kernel = _compile(spec, config, capability, arch, num_sms, key)
    if cache:
        try:
            _write_atomic(path, kernel._to_json())
        except OSError:
            pass  # a read-only cache costs only the cache
    return kernel


def cuobjdump_path() -> Optional[str]:
    """The ``cuobjdump`` that Triton's package carries (else one on PATH), or None."""
    try:
        import triton.backends.nvidia as nv
        p = Path(nv.__file__).parent / "bin" / "cuobjdump"
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    except ImportError:
        pass
    return shutil.which("cuobjdump")


_RES_USAGE = re.compile(r"REG:(\d+)\s+STACK:(\d+)")


def resource_usage(cubin: bytes) -> dict:
    """``{"registers": N, "stack_bytes": N}`` of the cubin's kernel (``cuobjdump -res-usage``).

    The stack frame is local memory, i.e. register spills for these kernels.
    Empty when no cuobjdump is found or its output cannot be read.
    """
    tool = cuobjdump_path()
    if tool is None:
        return {}
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "kernel.cubin"
        p.write_bytes(cubin)
        r = subprocess.run([tool, "-res-usage", str(p)], capture_output=True, text=True)
    m = _RES_USAGE.search(r.stdout) if r.returncode == 0 else None
    return {"registers": int(m.group(1)), "stack_bytes": int(m.group(2))} if m else {}


def sass(kernel: CompiledKernel) -> str:
    """The kernel's SASS (disassembly of the cubin, by ``cuobjdump --dump-sass``).

    Raises:
        FileNotFoundError: no cuobjdump found.
        RuntimeError: cuobjdump failed.
    """
    tool = cuobjdump_path()
    if tool is None:
        raise FileNotFoundError("cuobjdump not found (Triton's package carries one in triton/backends/nvidia/bin)")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "kernel.cubin"
        p.write_bytes(kernel.cubin)
        r = subprocess.run([tool, "--dump-sass", str(p)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"cuobjdump failed: {r.stderr.strip()}")
    return r.stdout


_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def sass_opcodes(text: str) -> collections.Counter:
    """Count of each SASS opcode (without modifiers: ``HGMMA``, ``UTMALDG``, ...) in ``text``."""
    return collections.Counter(m.group(1) for m in _SASS_LINE.finditer(text))

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

Triton runs in a child process (:mod:`falcon_mlir.kernels._worker`), one per
batch of kernels (:func:`compile_kernels`, :func:`compile_batch`): importing
Triton into a process that already imported TensorFlow aborts it (both ship
LLVM), and falcon's main job imports TensorFlow through keras-hub. Nothing
here imports Triton; its version is read from the package metadata.

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
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Optional, Sequence

from . import fma_gemm
from .configs import KernelConfig, choose_config
from .fma_gemm import FmaConfig
from .launched import LaunchedKernel, launch_facts
from .launched import MAX_THREADS, check_launchable, warn_spills  # noqa: F401  (re-exported: aot.check_launchable, ...)
from .spec import GemmSpec, require_supported

#: Compute capability per accepted ``arch`` spelling (the kernels need TMA and wgmma).
ARCHES = {"sm_90a": 90, "sm_90": 90}
#: Streaming multiprocessors of an H200 (and H100 SXM): programs of the persistent grid.
H200_SMS = 132
#: Bump when the cache entry's layout changes.
CACHE_FORMAT = 2
#: The Triton that compiles the kernels (the H200 machine's JIT runs the same).
TRITON_VERSION = "3.6.0"


@dataclass(frozen=True)
class CompiledKernel(LaunchedKernel):
    """A cubin for one GEMM and the facts needed to launch it (the fields are :class:`LaunchedKernel`'s).

    Attributes:
        spec: the GEMM.
        config: its kernel configuration.
        num_programs: blocks of the 1-D persistent grid.
    """

    spec: GemmSpec
    config: KernelConfig
    #: The configuration class a cache entry is read back with.
    CONFIG_TYPE: ClassVar[type] = KernelConfig

    def metadata(self) -> dict:
        """The launch facts as a JSON-ready dict (no cubin)."""
        return self._facts(("arch", "name", "num_warps", "shared", "global_scratch_size", "global_scratch_align",
                            "profile_scratch_size", "profile_scratch_align", "num_programs", "triton_version",
                            "key", "registers", "stack_bytes"))

    def _to_json(self) -> str:
        d = self.metadata()
        for k in ("threads", "cubin_bytes", "config"):
            d.pop(k)
        d.update(format=CACHE_FORMAT, spec=self.spec.to_dict(), config=self.config.to_dict(),
                 **encode_cubin(self.cubin))
        return json.dumps(d, sort_keys=True)

    @classmethod
    def _from_json(cls, text: str) -> "CompiledKernel":
        d = read_entry(text)
        if d.pop("format") != CACHE_FORMAT:
            raise ValueError("old cache format")
        d["spec"] = GemmSpec.from_dict(d["spec"])
        d["config"] = cls.CONFIG_TYPE.from_dict(d["config"])
        d["cubin"] = decode_cubin(d)
        return cls(**d, from_cache=True)


@dataclass(frozen=True)
class FmaKernel(CompiledKernel):
    """The f32 FMA GEMM (:mod:`falcon_mlir.kernels.fma_gemm`) compiled by NVRTC: a :class:`CompiledKernel`
    whose ``config`` is an :class:`~falcon_mlir.kernels.fma_gemm.FmaConfig`, ``triton_version`` the NVRTC
    (``"nvrtc 12.9.86"``) and ``num_programs`` one block per tile (not a persistent grid)."""

    config: FmaConfig
    CONFIG_TYPE: ClassVar[type] = FmaConfig


def encode_cubin(cubin: bytes) -> dict:
    """A cache entry's ``cubin`` (base64) and ``cubin_sha256`` fields."""
    return {"cubin": base64.b64encode(cubin).decode("ascii"), "cubin_sha256": hashlib.sha256(cubin).hexdigest()}


def decode_cubin(d: dict) -> bytes:
    """The cubin of a cache entry ``d`` (its two fields popped), checked against its SHA-256.

    Raises:
        ValueError: no digest (an entry of an older falcon), a cubin that does
            not match it (a damaged entry) or is not an ELF image.
    """
    digest = d.pop("cubin_sha256", None)
    cubin = base64.b64decode(d.pop("cubin"), validate=True)
    if not isinstance(digest, str) or hashlib.sha256(cubin).hexdigest() != digest:
        raise ValueError("cache entry's cubin does not match its digest")
    if cubin[:4] != b"\x7fELF":
        raise ValueError("cache entry's cubin is not an ELF image")
    return cubin


def read_entry(text: str) -> dict:
    """A cache entry's JSON object.

    Raises:
        ValueError: not JSON, or JSON that is not an object.
    """
    d = json.loads(text)
    if not isinstance(d, dict):
        raise ValueError("cache entry is not a JSON object")
    return d


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


def triton_version() -> str:
    """The installed Triton's version, read from its package metadata (Triton itself is not imported).

    Raises:
        ImportError: Triton is not installed.
    """
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError as e:
        raise ImportError("compiling kernels needs Triton: pip install 'falcon-mlir[cuda]' "
                          f"(triton=={TRITON_VERSION})") from e


def _check_version() -> str:
    global _VERSION_WARNED
    version = triton_version()
    if version != TRITON_VERSION and not _VERSION_WARNED:
        _VERSION_WARNED = True
        warnings.warn(f"falcon_mlir.kernels is built and tuned with Triton {TRITON_VERSION}, this is "
                      f"{version}: configurations may not carry over (Triton 3.9 spills "
                      "IEEE f32 kernels to local memory, see docs/kernels.md)", RuntimeWarning, stacklevel=4)
    return version


def cache_key(spec: GemmSpec, config: KernelConfig, arch: str, num_sms: int) -> str:
    """Hex SHA-256 over (format, kernel source, spec, config, Triton version, arch, SM count)."""
    payload = json.dumps({"format": CACHE_FORMAT, "source": kernel_source(), "spec": spec.to_dict(),
                          "config": config.to_dict(), "triton": triton_version(),
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


def _build_gemm(spec: GemmSpec, config: KernelConfig, arch: str, key: str, result: dict) -> CompiledKernel:
    """A :class:`CompiledKernel` from a worker result (checked, spills warned)."""
    facts = launch_facts(f"{spec.name} with {config.label}", result,
                         ": use fewer stages, smaller tiles or epilogue subtiling (',sub')")
    return CompiledKernel(spec=spec, config=config, arch=arch, num_programs=result["num_programs"], key=key, **facts)


@dataclass(frozen=True)
class CompileRequest:
    """One kernel for :func:`compile_batch`: its cache key, the worker job, and how to turn a worker
    result or a cache entry into the compiled object (and back).

    Attributes:
        key: hex cache key (the file ``{key}.json`` in :func:`cache_dir`).
        job: the worker job (:mod:`falcon_mlir.kernels._worker`).
        build: worker result dict -> compiled object (raises with one line when it failed).
        load: cache text -> compiled object (raises ValueError/KeyError/TypeError when stale).
        dump: compiled object -> cache text.
    """

    key: str
    job: dict
    build: Callable[[dict], object]
    load: Callable[[str], object]
    dump: Callable[[object], str]


def compile_batch(requests: Sequence[CompileRequest], cache: bool = True, errors: str = "raise",
                  timeout: Optional[float] = None) -> list:
    """Compile every request not in the disk cache, all in one Triton child process.

    Args:
        requests: the kernels.
        cache: read and write the disk cache (:func:`cache_dir`).
        errors: ``"raise"``: the first failure raises; ``"return"``: a failed
            kernel's entry is the exception (others still compile).
        timeout: seconds for the whole batch (default :data:`_worker.DEFAULT_TIMEOUT`).

    Returns:
        One compiled object (or exception) per request, in order.

    Raises:
        RuntimeError, ValueError: a kernel failed (``errors="raise"``); the
            message is one line naming it.
        WorkerError: the child process failed as a whole.
    """
    from ._worker import run_jobs

    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' or 'return', got {errors!r}")
    out, todo = [None] * len(requests), []
    for i, req in enumerate(requests):
        path = cache_dir() / f"{req.key}.json"
        if cache and path.is_file():
            try:
                out[i] = req.load(path.read_text())
                continue
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                pass  # unreadable, damaged or stale entry: compile again and overwrite it
        todo.append(i)
    results = run_jobs([requests[i].job for i in todo], timeout=timeout) if todo else []
    for i, result in zip(todo, results):
        try:
            out[i] = requests[i].build(result)
        except (RuntimeError, ValueError) as e:
            if errors == "raise":
                raise type(e)(str(e)) from None
            out[i] = e
            continue
        if cache:
            try:
                _write_atomic(cache_dir() / f"{requests[i].key}.json", requests[i].dump(out[i]))
            except OSError:
                pass  # a read-only cache costs only the cache
    return out


def use_fma(spec: GemmSpec) -> bool:
    """Whether ``spec`` gets the f32 FMA kernel by default: served by it (IEEE f32, sizes in whole tiles,
    :func:`~falcon_mlir.kernels.fma_gemm.fma_reason`), NVRTC installed, and ``$FALCON_FMA_KERNEL`` not
    ``0`` (set it to compare with the Triton kernel)."""
    return (os.environ.get("FALCON_FMA_KERNEL", "1") != "0" and fma_gemm.fma_reason(spec) is None
            and fma_gemm.available())


def default_config(spec: GemmSpec):
    """The configuration ``spec`` compiles with when none is given: :class:`FmaConfig` where :func:`use_fma`,
    else the Triton table's (:func:`~falcon_mlir.kernels.configs.choose_config`)."""
    return FmaConfig() if use_fma(spec) else choose_config(spec)


def fma_request(spec: GemmSpec, config: FmaConfig, arch: str) -> CompileRequest:
    """The :class:`CompileRequest` of the f32 FMA kernel for ``spec`` (NVRTC runs in the worker).

    Raises:
        ValueError: ``spec`` not served by it (:func:`~falcon_mlir.kernels.fma_gemm.fma_reason`).
        ImportError: NVRTC is not installed (the message says how to get it).
    """
    source = fma_gemm.kernel_source(spec, config)
    fma_gemm.require_nvrtc()
    payload = json.dumps({"format": CACHE_FORMAT, "source": source, "spec": spec.to_dict(),
                          "config": config.to_dict(), "nvrtc": fma_gemm.nvrtc_version(), "arch": arch},
                         sort_keys=True)
    key = hashlib.sha256(payload.encode()).hexdigest()
    programs = fma_gemm.num_programs(spec, config)
    job = {"kind": "nvrtc", "source": source, "arch": arch, "label": f"{spec.name} with {config.label}",
           "num_programs": programs}

    def build(result: dict) -> FmaKernel:
        facts = launch_facts(f"{spec.name} with {config.label}", result)
        return FmaKernel(spec=spec, config=config, arch=arch, num_programs=programs, key=key, **facts)

    return CompileRequest(key=key, job=job, build=build, load=FmaKernel._from_json, dump=lambda k: k._to_json())


def gemm_request(spec: GemmSpec, config: Optional[KernelConfig] = None, arch: str = "sm_90a",
                 num_sms: int = H200_SMS) -> CompileRequest:
    """The :class:`CompileRequest` of one GEMM kernel (validated as :func:`compile_kernel` says): the f32
    FMA kernel where :func:`use_fma` (or ``config`` is an :class:`~falcon_mlir.kernels.fma_gemm.FmaConfig`),
    else the Triton kernel with ``config`` (default: the table's)."""
    capability = _check_arch(arch)
    config = config if config is not None else default_config(spec)
    if isinstance(config, FmaConfig):
        return fma_request(spec, config, arch)
    require_supported(spec)
    if isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms < 1:
        raise ValueError(f"num_sms must be a positive int, got {num_sms!r}")
    _check_config(spec, config)
    _check_version()
    key = cache_key(spec, config, arch, num_sms)
    job = {"kind": "gemm", "spec": spec.to_dict(), "config": config.to_dict(), "capability": capability,
           "num_sms": num_sms}
    return CompileRequest(key=key, job=job, build=lambda r: _build_gemm(spec, config, arch, key, r),
                          load=CompiledKernel._from_json, dump=lambda k: k._to_json())


def compile_kernels(items: Sequence[tuple], arch: str = "sm_90a", num_sms: int = H200_SMS, cache: bool = True,
                    errors: str = "raise") -> list:
    """Compile several GEMM kernels, the uncached ones in one Triton child process.

    Args:
        items: ``(spec, config)`` pairs (``config`` None: the table's choice).
        arch, num_sms, cache: as :func:`compile_kernel`.
        errors: ``"raise"`` or ``"return"`` (failed entries are the exceptions), as :func:`compile_batch`.

    Returns:
        One :class:`CompiledKernel` (or exception) per item.
    """
    reqs = []
    for spec, config in items:
        try:
            reqs.append(gemm_request(spec, config, arch, num_sms))
        except ValueError as e:
            if errors == "raise":
                raise
            reqs.append(e)
    live = [r for r in reqs if isinstance(r, CompileRequest)]
    done = iter(compile_batch(live, cache=cache, errors=errors))
    return [r if isinstance(r, Exception) else next(done) for r in reqs]


def compile_kernel(spec: GemmSpec, config: Optional[KernelConfig] = None, arch: str = "sm_90a",
                   num_sms: int = H200_SMS, cache: bool = True) -> CompiledKernel:
    """Compile (or read from the cache) the kernel for ``spec`` with ``config``.

    Triton runs in a child process (:mod:`falcon_mlir.kernels._worker`); none
    is started when the kernel is in the cache. Use :func:`compile_kernels`
    for several kernels (one child for all).

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
        ImportError: Triton is not installed (or NVRTC, for the f32 FMA kernel).
        RuntimeError: Triton failed (one line naming the spec and config), or
            compiled a kernel IREE cannot launch.
        WorkerError: the Triton child process failed as a whole.
    """
    return compile_batch([gemm_request(spec, config, arch, num_sms)], cache=cache)[0]


def cuobjdump_path() -> Optional[str]:
    """The ``cuobjdump`` that Triton's package carries (else one on PATH), or None.

    Found from the package's location on the import path
    (``importlib.machinery.PathFinder``: it also works where ``sys.modules``
    holds ``triton = None`` to keep Triton out of a process), without importing Triton.
    """
    import importlib.machinery

    found = importlib.machinery.PathFinder.find_spec("triton")
    if found is not None and found.origin:
        p = Path(found.origin).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
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

"""A compiled kernel as IREE launches it: :class:`LaunchedKernel`, the cubin and its launch facts.

The GEMM (:class:`~falcon_mlir.kernels.aot.CompiledKernel`) and the LCMA
combine kernels (:class:`~falcon_mlir.kernels.lcma.CombineKernel`) are both
one: the same ABI (pointer parameters, then Triton's global and profile
scratch), a 1-D grid, and the same facts read back from the compile worker
(:func:`launch_facts`). Here too: the checks that IREE's launch can run a
compiled kernel (:func:`check_launchable`) and the spill warning.
"""

from __future__ import annotations

import base64
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from .configs import SHARED_MEMORY_LIMIT

#: CUDA allows at most this many threads per block.
MAX_THREADS = 1024


@dataclass(frozen=True)
class LaunchedKernel:
    """A cubin and the facts needed to launch it (subclasses give ``spec`` and ``config`` their types).

    Attributes:
        spec, config, arch: what was compiled.
        name: the kernel's entry symbol in the cubin.
        cubin: the sm_90a ELF image (bytes).
        num_warps: warps per block as compiled (12 for warp-specialized 4-warp GEMM configs).
        shared: dynamic shared memory per block (bytes).
        global_scratch_size, global_scratch_align: Triton's global scratch per
            program (bytes; holds the device-side TMA descriptors) and its alignment.
        profile_scratch_size, profile_scratch_align: the same for profiling (0 unless instrumented).
        num_programs: blocks of the 1-D grid.
        triton_version: Triton that compiled it (``nvrtc X`` for the FMA kernel; see :attr:`compiler`).
        key: the cache key (hex SHA-256).
        registers: registers per thread in the cubin (None: no cuobjdump to read it).
        stack_bytes: per-thread stack frame (local memory: spills), None as above.
        compile_seconds: time ``triton.compile`` took (0.0 when read from the cache).
        from_cache: read from the disk cache.
    """

    spec: Any
    config: Any
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
    def compiler(self) -> str:
        """What compiled the cubin: ``Triton 3.6.0`` or ``nvrtc 12.9.86`` (kept in ``triton_version``)."""
        v = self.triton_version
        return v if v.startswith("nvrtc") else f"Triton {v}"

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

    def _facts(self, keys: Sequence[str]) -> dict:
        """The fields ``keys`` (in that order), then threads, cubin bytes and the config's label: JSON-ready."""
        d = {k: getattr(self, k) for k in keys}
        d.update(threads=self.threads, cubin_bytes=len(self.cubin), config=self.config.label)
        return d


def check_launchable(what: str, md: dict, config_hint: str = "") -> None:
    """Refuse compiled kernels IREE's launch cannot run (clusters, cooperative/PDL launches, too many
    threads, too much shared memory); ``md`` is a worker result's metadata.

    Raises:
        RuntimeError: clusters, launch flags or threads.
        ValueError: over the shared-memory limit.
    """
    if md.get("num_ctas", 1) != 1 or tuple(md.get("cluster_dims") or (1, 1, 1)) != (1, 1, 1):
        raise RuntimeError(f"{what}: kernel compiled for {md.get('num_ctas')} CTAs per cluster; "
                           "IREE launches single-CTA blocks only")
    for flag in ("launch_cooperative_grid", "launch_pdl"):
        if md.get(flag):
            raise RuntimeError(f"{what}: kernel needs {flag}, which IREE's launch does not set")
    if 32 * md["num_warps"] > MAX_THREADS:
        raise RuntimeError(f"{what}: {32 * md['num_warps']} threads per block exceed {MAX_THREADS}")
    if md["shared"] > SHARED_MEMORY_LIMIT:
        raise ValueError(f"{what} needs {md['shared']} bytes of shared memory, more than the "
                         f"{SHARED_MEMORY_LIMIT} an sm_90 block may use{config_hint}")


def warn_spills(what: str, usage: dict, stacklevel: int = 4) -> None:
    """Warn when a cubin has a stack frame (register spills to local memory)."""
    if usage.get("stack_bytes"):
        warnings.warn(f"{what}: {usage['stack_bytes']} bytes of stack per thread ({usage['registers']} "
                      "registers): the kernel spills to local memory and will be slow; use smaller tiles "
                      "or fewer stages", RuntimeWarning, stacklevel=stacklevel)


def launch_facts(what: str, result: dict, config_hint: str = "") -> dict:
    """The :class:`LaunchedKernel` fields a worker result gives (:mod:`falcon_mlir.kernels._worker`), from
    ``name`` to ``compile_seconds`` but ``num_programs`` and ``key``; checked by :func:`check_launchable`
    (``what`` names the kernel in its errors), spills warned.

    Raises:
        RuntimeError: the compile failed (the worker's one-line error), or as :func:`check_launchable`.
        ValueError: as :func:`check_launchable`.
    """
    if not result["ok"]:
        raise RuntimeError(result["error"])
    md = result["metadata"]
    check_launchable(what, md, config_hint)
    usage = result.get("usage") or {}
    warn_spills(what, usage, stacklevel=5)
    return dict(name=md["name"], cubin=base64.b64decode(result["cubin"]), num_warps=md["num_warps"],
                shared=md["shared"], global_scratch_size=md.get("global_scratch_size") or 0,
                global_scratch_align=md.get("global_scratch_align") or 1,
                profile_scratch_size=md.get("profile_scratch_size") or 0,
                profile_scratch_align=md.get("profile_scratch_align") or 1,
                triton_version=result["triton_version"], registers=usage.get("registers"),
                stack_bytes=usage.get("stack_bytes"), compile_seconds=result["seconds"])

"""The compile target as iree-compile's flags give it: the devices they select (:func:`target_devices`,
:func:`targets_cuda`, :func:`targets_llvm_cpu`, :func:`target_kind`), the target CPU
(:func:`target_cpu`) and CUDA target (:func:`cuda_target`), the llvm-cpu flags falcon's CPU kernel
is keyed on (:func:`cpu_target_flags`) and why that kernel cannot serve them
(:func:`cpu_kernel_blocker`); the default target when they select none (:func:`with_default_target`)
and the check of a CUDA target (:func:`check_cuda_target`). The pass defaults keyed on these are
in :mod:`.assemble`.
"""

from __future__ import annotations

from typing import Optional, Sequence

from falcon_mlir import targets

__all__ = ["DEFAULT_TARGET", "DEFAULT_CUDA_TARGET", "CPU_TARGET_FLAG_PREFIXES", "target_devices",
           "targets_cuda", "targets_llvm_cpu", "target_kind", "target_cpu", "cuda_target",
           "cpu_target_flags", "cpu_kernel_blocker", "with_default_target", "check_cuda_target"]


#: The compile target (:data:`falcon_mlir.targets.TARGETS`) when the flags name
#: no device (no ``--iree-hal-target-device`` / ``--iree-hal-target-backends``):
#: llvm-cpu for this machine's CPU (``--iree-llvmcpu-target-cpu=host``).
DEFAULT_TARGET = "host"

_DEVICE_FLAGS = ("iree-hal-target-device", "iree-hal-target-backends")


def _flag_name(flag) -> str:
    return str(flag).lstrip("-").partition("=")[0]


def _flag_value(flags: Sequence[str], name: str) -> Optional[str]:
    """The value of the last ``--name=value`` of ``flags`` (``None``: not given)."""
    value = None
    for f in flags:
        n, _, v = str(f).lstrip("-").partition("=")
        if n == name:
            value = v
    return value


def target_devices(flags: Sequence[str]) -> list:
    """The devices iree-compile ``flags`` select (``--iree-hal-target-device``
    or the older ``--iree-hal-target-backends``, comma lists included)."""
    out = []
    for f in flags:
        name, _, value = str(f).lstrip("-").partition("=")
        if name in _DEVICE_FLAGS:
            out += [v.strip() for v in value.split(",") if v.strip()]
    return out


def targets_cuda(flags: Sequence[str]) -> bool:
    """Whether iree-compile ``flags`` select the cuda device."""
    return any(d.startswith("cuda") for d in target_devices(flags))


def targets_llvm_cpu(flags: Sequence[str]) -> bool:
    """Whether iree-compile ``flags`` select an llvm-cpu executable (IREE's local device with the
    llvm-cpu backend, or ``--iree-hal-target-backends=llvm-cpu``) and no cuda device."""
    if targets_cuda(flags) or target_kind(flags) != "cpu":
        return False
    for f in flags:
        name, _, value = str(f).lstrip("-").partition("=")
        if name in ("iree-hal-local-target-device-backends", "iree-hal-target-backends") and \
                "llvm-cpu" in value.split(","):
            return True
    return False


#: The iree-compile flags (by prefix) that make IREE's llvm-cpu executable target attribute, the
#: CPU kernel's object key: the device and the llvm-cpu options (target CPU, features, triple,
#: ukernels, stack limit).
CPU_TARGET_FLAG_PREFIXES = ("iree-hal-", "iree-llvmcpu-")


def cpu_target_flags(flags: Sequence[str]) -> tuple:
    """The flags of ``flags`` that make the llvm-cpu executable target (:data:`CPU_TARGET_FLAG_PREFIXES`),
    as falcon-kernels' ``cpu-flags`` takes them."""
    return tuple(str(f) for f in flags if str(f).lstrip("-").startswith(CPU_TARGET_FLAG_PREFIXES))


def cpu_kernel_blocker(flags: tuple, isa: str = "avx512") -> Optional[str]:
    """Why falcon's CPU kernel of ``isa`` (``avx512``, ``avx2``) cannot serve an llvm-cpu compile with
    ``flags``, or None when it can: ``"not-x86"`` (the target triple, or without one this machine, is of
    another architecture: the kernel does not apply, no default is stated), ``isa`` itself (the x86-64
    target CPU lacks its features, :data:`falcon_mlir.kernels.cpu_object.ISA_FEATURES`: AVX-512
    F/BW/DQ/VL, or AVX2 and FMA) or ``"compiler"`` (no C compiler,
    :func:`falcon_mlir.kernels.cpu_object.compiler`).

    The ``host`` CPU (without ``--iree-llvmcpu-target-cpu-features``) is this machine's
    (:func:`~falcon_mlir.kernels.cpu_object.host_has`); any other target's features are read
    from the executable target IREE makes of ``flags`` (a child iree-compile, cached per flags by
    :func:`falcon_mlir.kernels.cpu_embed.cpu_target_attribute`).
    """
    from falcon_mlir.kernels import cpu_embed, cpu_object

    cpu = _flag_value(flags, "iree-llvmcpu-target-cpu")
    features = _flag_value(flags, "iree-llvmcpu-target-cpu-features")
    if target_cpu(flags) == "":  # a triple (or, without one, this machine) of another architecture
        return "not-x86"
    if cpu == "host" and not features:
        ok = cpu_object.host_has(isa)
    elif cpu is None and not features:  # LLVM's generic x86-64
        ok = False
    else:
        try:
            target = cpu_embed.cpu_target_attribute(flags)
        except Exception:  # IREE rejects the flags: the compile itself says why
            return isa
        ok = 'cpu_features = "' in target and not cpu_object.missing_target_features(target, isa)
    if not ok:
        return isa
    try:
        cpu_object.compiler()
    except RuntimeError:
        return "compiler"
    return None


#: The CUDA target (``--iree-cuda-target``) for a cuda device whose flags name
#: none: falcon's CUDA target (:data:`falcon_mlir.targets.TARGETS` ``cuda-sm80``).
#: IREE's own default, sm_60, has no bf16/f16 MMA: with falcon-tiles' sm_80
#: table IREE aborted the whole process ("LLVM ERROR: Cannot select:
#: intrinsic %llvm.nvvm.mma.m16n8k16.row.col.bf16").
DEFAULT_CUDA_TARGET = "sm_80"


def with_default_target(flags: Sequence[str]) -> list:
    """``flags`` with :data:`DEFAULT_TARGET`'s flags in front when they select
    no device (flags the user gave, e.g. ``--iree-llvmcpu-target-cpu``, are
    not given twice); with ``--iree-cuda-target=``:data:`DEFAULT_CUDA_TARGET`
    after them when they select the cuda device and name no CUDA target;
    ``flags`` unchanged otherwise."""
    flags = [str(f) for f in flags]
    if targets_cuda(flags) and not cuda_target(flags):
        return flags + [f"--iree-cuda-target={DEFAULT_CUDA_TARGET}"]
    if target_devices(flags):
        return flags
    given = {_flag_name(f) for f in flags}
    return [f for f in targets.target_flags(DEFAULT_TARGET) if _flag_name(f) not in given] + flags


def check_cuda_target(flags: Sequence[str]) -> None:
    """For a cuda device: that IREE knows the ``--iree-cuda-target`` the flags
    give, asked in a child process (IREE 3.13 reports an unknown one and then
    crashes; in process that is a segmentation fault of the caller).

    Raises:
        CompileError: IREE rejects the target (one line: IREE's message).
    """
    if not targets_cuda(flags):
        return
    from falcon_mlir.kernels.embed import cuda_target_attribute

    target = cuda_target(flags)
    try:
        cuda_target_attribute(("--iree-hal-target-device=cuda",) + ((f"--iree-cuda-target={target}",)
                                                                     if target else ()))
    except Exception as e:  # CompilerToolError (the tool crashed after its message), no CUDA target
        from .diagnostics import CompileError

        lines = [ln.strip() for ln in str(e).splitlines() if "error:" in ln]
        why = lines[0].split("error:", 1)[1].strip() if lines else " ".join(str(e).split())[:200]
        raise CompileError(f"--iree-cuda-target={target}: {why}", stage="flags") from None


def target_cpu(flags: Sequence[str]) -> str:
    """The ``--iree-llvmcpu-target-cpu`` the flags give (the last one);
    ``"generic"`` where they select llvm-cpu devices only (no vmvx) and name
    no target CPU (IREE then compiles for LLVM's generic CPU); ``""`` where they name none
    and select no device (the default target adds one), or where
    ``--iree-llvmcpu-target-triple`` (or, without one, this machine) is of
    another architecture than x86 (the CPU names of
    :data:`NO_NATIVE_BF16_CPUS` are x86's)."""
    cpu = _flag_value(flags, "iree-llvmcpu-target-cpu")
    triple = _flag_value(flags, "iree-llvmcpu-target-triple")
    vmvx = any("vmvx" in str(f).partition("=")[2] for f in flags
               if _flag_name(f) in _DEVICE_FLAGS + ("iree-hal-local-target-device-backends",))
    import platform

    arch = triple or platform.machine().lower()  # no triple: IREE targets this machine's
    if not arch.startswith(("x86_64", "x86-64", "amd64", "i386", "i686")):
        return ""
    if cpu is None:
        return "generic" if target_kind(flags) == "cpu" and not vmvx else ""
    return cpu


def target_kind(flags: Sequence[str]) -> Optional[str]:
    """``"gpu"`` for a cuda device, ``"cpu"`` when every device the flags select
    is IREE's local one (llvm-cpu, vmvx), ``None`` otherwise (none, or others)."""
    devices = [d.split(":")[0] for d in target_devices(flags)]
    if not devices:
        return None
    if targets_cuda(flags):
        return "gpu"
    return "cpu" if all(d in ("local", "llvm-cpu", "vmvx") for d in devices) else None


def cuda_target(flags: Sequence[str]) -> str:
    """The ``--iree-cuda-target`` the flags give (``""``: IREE's default)."""
    for f in flags:
        name, _, value = str(f).lstrip("-").partition("=")
        if name == "iree-cuda-target" and value:
            return value
    return ""

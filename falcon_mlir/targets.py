"""Named compilation targets and a runner for aarch64 modules under qemu-user.

Targets (``iree-compile`` flag sets, see :data:`TARGETS`):

* ``host``: llvm-cpu for the machine compiling (``--iree-llvmcpu-target-cpu=host``),
  run with ``iree.runtime`` on ``local-task``.
* ``aarch64-n1``: llvm-cpu for ``aarch64-unknown-linux-gnu``, Neoverse N1 (NEON).
* ``aarch64-v1``: likewise, Neoverse V1 (SVE).
* ``cuda-sm80``: CUDA, ``sm_80`` PTX (IREE 3.13 has no Hopper target; the driver
  JIT-compiles sm_80 PTX on an H100/H200).

Use them with :func:`compile_for` (a thin wrapper over
:func:`falcon_mlir.api.compile_str` that passes the flags and no
``target_backends``)::

    from falcon_mlir import targets
    vmfb, report = targets.compile_for("aarch64-n1", text,
                                       lcma="scheme=strassen levels=1",
                                       return_report=True)
    out = targets.QemuAarch64Runner(cpu="neoverse-n1").run(vmfb, "f", a, b, c)

aarch64 modules run on an x86-64 host under qemu-user with the aarch64
``iree-run-module`` (:class:`QemuAarch64Runner`). Its tools live in one folder
made by ``scripts/fetch_aarch64.sh`` (env ``FALCON_AARCH64_ROOT``, default
``~/.cache/falcon-mlir/aarch64``)::

    <root>/usr/bin/qemu-aarch64          qemu-user, unpacked from the Debian package
    <root>/usr/lib/x86_64-linux-gnu/     qemu's shared libs the host may lack
    <root>/usr/aarch64-linux-gnu/        aarch64 glibc, libstdc++, libgcc_s (qemu -L)
    <root>/bin/iree-run-module           from the aarch64 iree-base-runtime wheel

Known IREE 3.13 problem (seen here): llvm-cpu codegen for ``neoverse-v1``
(SVE) aborts the compiling process with "LLVM ERROR: out of memory" (after
~16 GB and ~1 min, in ``eliminateVectorMasks``) on some small odd-shaped
matmuls, classical ones included (e.g. 1x45 @ 45x53, 23x15 @ 15x18).
A compile that hits it kills the Python process, not just the call.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

__all__ = [
    "Target",
    "TARGETS",
    "get_target",
    "target_flags",
    "compile_for",
    "aarch64_root",
    "QemuAarch64Runner",
    "QemuRunError",
    "find_qemu_runner",
]

_LOCAL_CPU = ("--iree-hal-target-device=local",
              "--iree-hal-local-target-device-backends=llvm-cpu")
_AARCH64 = _LOCAL_CPU + ("--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu",)


@dataclass(frozen=True)
class Target:
    """One compilation target.

    Attributes:
        name: key in :data:`TARGETS`.
        flags: iree-compile flags selecting the device, triple and CPU/GPU.
        driver: IREE runtime driver that runs the module (``local-task``,
            ``cuda``).
        arch: ``"host"``, ``"aarch64"`` (run under qemu from an x86-64 host)
            or ``"cuda"``.
        qemu_cpu: ``qemu-aarch64 -cpu`` model to run it under (aarch64 only;
            qemu 7.2 has ``neoverse-n1`` but no V1 model: ``max`` has SVE).
        description: one line for humans.
    """

    name: str
    flags: tuple
    driver: str
    arch: str
    qemu_cpu: Optional[str] = None
    description: str = ""


#: The targets falcon-mlir is checked on, by name.
TARGETS = {
    t.name: t
    for t in (
        Target("host", _LOCAL_CPU + ("--iree-llvmcpu-target-cpu=host",), "local-task", "host",
               description="llvm-cpu for this machine's CPU"),
        Target("aarch64-n1", _AARCH64 + ("--iree-llvmcpu-target-cpu=neoverse-n1",), "local-task",
               "aarch64", qemu_cpu="neoverse-n1",
               description="AArch64 Linux, Neoverse N1 (NEON, no SVE)"),
        Target("aarch64-v1", _AARCH64 + ("--iree-llvmcpu-target-cpu=neoverse-v1",), "local-task",
               "aarch64", qemu_cpu="max",
               description="AArch64 Linux, Neoverse V1 (SVE)"),
        Target("cuda-sm80", ("--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"), "cuda",
               "cuda", description="CUDA sm_80 PTX (runs on A100 and, JIT-compiled, H100/H200)"),
    )
}


def get_target(name: Union[str, Target]) -> Target:
    """The :class:`Target` called ``name`` (a Target is returned as is).

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    if isinstance(name, Target):
        return name
    try:
        return TARGETS[name]
    except KeyError:
        raise KeyError(f"unknown target {name!r} (known: {', '.join(TARGETS)})") from None


def target_flags(name: Union[str, Target]) -> list:
    """iree-compile flags of target ``name`` (a new list)."""
    return list(get_target(name).flags)


def compile_for(target: Union[str, Target], source, *, extra_args: Sequence[str] = (), **kwargs):
    """:func:`falcon_mlir.api.compile_str` for ``target``.

    ``source`` is MLIR text or bytecode; ``extra_args`` are appended after the
    target's flags; other keyword arguments (``lcma``, ``return_report``,
    ``output_file`` ...) go to ``compile_str`` unchanged.
    """
    from .api import compile_str

    flags = target_flags(target) + [str(a) for a in extra_args]
    return compile_str(source, target_backends=(), extra_args=flags, **kwargs)


def aarch64_root(root: Optional[Union[str, os.PathLike]] = None) -> Path:
    """Folder of the aarch64 tools: ``root``, else ``$FALCON_AARCH64_ROOT``,
    else ``~/.cache/falcon-mlir/aarch64`` (it may not exist)."""
    if root is None:
        root = os.environ.get("FALCON_AARCH64_ROOT") or "~/.cache/falcon-mlir/aarch64"
    return Path(os.path.expanduser(os.fspath(root)))


class QemuRunError(RuntimeError):
    """iree-run-module under qemu exited non-zero (message: its command and output)."""


# numpy dtypes iree-run-module reads from / writes to .npy files; other types
# (bf16) are passed as raw little-endian bytes with an explicit SHAPExTYPE.
_NPY_DTYPES = {np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int16,
                                     np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                                     np.uint64, np.bool_)}


def _iree_type(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16":
        return "bf16"
    kind = {"f": "f", "i": "i", "u": "ui", "b": "i"}[dtype.kind]
    return f"{kind}{8 if dtype.kind == 'b' else dtype.itemsize * 8}"


class QemuAarch64Runner:
    """Runs aarch64 ``.vmfb`` modules on an x86-64 host under qemu-user.

    Each call writes the inputs as ``.npy`` files (raw bytes for types numpy
    files cannot hold, e.g. bf16), runs
    ``qemu-aarch64 -cpu CPU -L <root>/usr/aarch64-linux-gnu <root>/bin/iree-run-module
    --module=M --device=D --function=F --input=@in0.npy ... --output=@out0.npy ...``
    and reads the outputs back.

    Args:
        root: tools folder (see :func:`aarch64_root`); made by
            ``scripts/fetch_aarch64.sh``.
        cpu: qemu CPU model (``max`` has SVE/SVE2; ``neoverse-n1`` has none).
        device: IREE device of ``iree-run-module`` (``local-sync`` or
            ``local-task``).
        timeout: seconds before a run is killed.
    """

    def __init__(self, root=None, *, cpu: str = "max", device: str = "local-sync",
                 timeout: float = 600.0):
        self.root = aarch64_root(root)
        self.cpu = cpu
        self.device = device
        self.timeout = timeout
        self.qemu = self.root / "usr/bin/qemu-aarch64"
        self.sysroot = self.root / "usr/aarch64-linux-gnu"
        self.run_module = self.root / "bin/iree-run-module"
        self.libdir = self.root / "usr/lib/x86_64-linux-gnu"

    @classmethod
    def for_target(cls, target: Union[str, Target], root=None, **kwargs) -> "QemuAarch64Runner":
        """A runner with the qemu CPU model of an aarch64 ``target``."""
        t = get_target(target)
        if t.arch != "aarch64":
            raise ValueError(f"target {t.name} is not an aarch64 target")
        return cls(root, cpu=kwargs.pop("cpu", t.qemu_cpu or "max"), **kwargs)

    def missing(self) -> list:
        """Paths of the needed tools that are absent (empty: ready to run)."""
        need = [self.qemu, self.sysroot / "lib/ld-linux-aarch64.so.1", self.run_module]
        return [str(p) for p in need if not (p.exists() and (p.is_dir() or os.access(p, os.R_OK)))]

    @property
    def available(self) -> bool:
        """True when the tools are present (see :meth:`missing`)."""
        return not self.missing()

    def _env(self) -> dict:
        env = dict(os.environ)
        if self.libdir.is_dir():
            old = env.get("LD_LIBRARY_PATH")
            env["LD_LIBRARY_PATH"] = str(self.libdir) + (":" + old if old else "")
        return env

    def command(self, module_path, function: str, input_flags: Sequence[str],
                output_flags: Sequence[str]) -> list:
        """The argv that runs ``function`` of the module file at ``module_path``."""
        return [str(self.qemu), "-cpu", self.cpu, "-L", str(self.sysroot), str(self.run_module),
                f"--module={module_path}", f"--device={self.device}", f"--function={function}",
                *input_flags, *output_flags]

    def run(self, vmfb: Union[bytes, str, os.PathLike], function: str, *args,
            num_outputs: int = 1):
        """Calls ``function`` of ``vmfb`` (bytes or a path) on numpy ``args``.

        Returns:
            A numpy array, or a tuple of them when ``num_outputs != 1``.

        Raises:
            FileNotFoundError: tools missing (run ``scripts/fetch_aarch64.sh``).
            QemuRunError: iree-run-module failed (wrong signature, trap ...).
            subprocess.TimeoutExpired: the run took longer than ``timeout``.
        """
        missing = self.missing()
        if missing:
            raise FileNotFoundError("aarch64 tools missing (run scripts/fetch_aarch64.sh): "
                                    + ", ".join(missing))
        with tempfile.TemporaryDirectory(prefix="falcon-qemu-") as tmp:
            tmpd = Path(tmp)
            if isinstance(vmfb, (bytes, bytearray, memoryview)):
                module_path = tmpd / "module.vmfb"
                module_path.write_bytes(bytes(vmfb))
            else:
                module_path = Path(os.fspath(vmfb)).resolve()
            in_flags = []
            for i, a in enumerate(args):
                a = np.ascontiguousarray(a)
                if a.dtype in _NPY_DTYPES:
                    p = tmpd / f"in{i}.npy"
                    np.save(p, a)
                    in_flags.append(f"--input=@{p}")
                else:
                    p = tmpd / f"in{i}.bin"
                    a.astype(a.dtype.newbyteorder("<")).tofile(p)
                    shape = "x".join(str(d) for d in a.shape)
                    ty = (shape + "x" if shape else "") + _iree_type(a.dtype)
                    in_flags.append(f"--input={ty}=@{p}")
            outs = [tmpd / f"out{i}.npy" for i in range(num_outputs)]
            out_flags = [f"--output=@{p}" for p in outs]
            argv = self.command(module_path, function, in_flags, out_flags)
            proc = subprocess.run(argv, env=self._env(), capture_output=True, text=True,
                                  timeout=self.timeout)
            if proc.returncode != 0:
                raise QemuRunError(f"{' '.join(argv)}\nexit {proc.returncode}\n"
                                   f"{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
            results = tuple(np.load(p) for p in outs)
        return results[0] if num_outputs == 1 else results


def find_qemu_runner(target: Union[str, Target] = "aarch64-n1", root=None, **kwargs):
    """A ready :class:`QemuAarch64Runner` for ``target``, or None when its tools
    are missing (for tests that skip without them)."""
    r = QemuAarch64Runner.for_target(target, root, **kwargs)
    return r if r.available else None


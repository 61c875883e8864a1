"""Compile MLIR with IREE and run it (CPU, or CUDA with falcon's runtime settings).

Used by the tests and the benchmarks to compare a rewritten module with the
original on the same inputs. Compilation uses ``iree.compiler.compile_str``
(llvm-cpu for the host unless flags say otherwise); execution uses
``iree.runtime`` on the ``local-task`` driver.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

#: iree-compile flags for the host CPU.
CPU_FLAGS = ("--iree-hal-target-device=local",
             "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=host")
#: IREE's best CPU flags (data tiling + microkernels), what benchmarks and the
#: profile calibration compare against (the llvm-cpu backend comes from
#: ``compile_str(target_backends=["llvm-cpu"])``).
BEST_CPU_FLAGS = ("--iree-llvmcpu-target-cpu=host", "--iree-opt-data-tiling=true",
                  "--iree-llvmcpu-enable-ukernels=all")


def compile_mlir(text: str, flags: Sequence[str] = CPU_FLAGS, input_type: str = "auto") -> bytes:
    """Compile MLIR text to a .vmfb (bytes) with iree-compile's in-process API.

    Raises:
        iree.compiler.CompilerToolError: when IREE rejects the module.
    """
    from iree.compiler import compile_str

    return compile_str(text, input_type=input_type, extra_args=list(flags))

#: IREE runtime flags falcon uses on CUDA devices, parsed before the driver is
#: made (:func:`device_config`). IREE 3.13's default (stream-ordered
#: allocations from a CUDA memory pool that returns memory at every sync)
#: pays for mapping each call's transient buffers again: on the H200 grouped
#: Strassen^2 at 16384^3 f32 took 215.5 ms that way and 184.7 ms with these
#: settings (classical 237.3 / 235.5 ms; docs/benchmarks.md). Classical calls
#: change by under 2%.
CUDA_RUNTIME_FLAGS = ("--cuda_async_allocations=false",)
#: HAL allocator stack falcon puts on CUDA devices (buffers reused across calls).
CUDA_ALLOCATORS = ("caching",)


def device_config(driver: str = "local-task", tuned: bool = True):
    """An ``iree.runtime.Config`` for ``driver``.

    On ``cuda`` (or a ``cuda://...`` device URI) with ``tuned`` (the default)
    the device gets falcon's runtime
    settings: :data:`CUDA_RUNTIME_FLAGS` (parsed process-wide; they take effect
    only if no CUDA device was made before in this process) and the caching
    allocator :data:`CUDA_ALLOCATORS`. Other drivers, or ``tuned=False``:
    IREE's defaults (``Config(driver)``).

    Raises:
        RuntimeError: the driver is not available (from ``iree.runtime``).
    """
    import iree.runtime as rt

    name = driver.split(":", 1)[0]
    if name != "cuda" or not tuned:
        return rt.Config(driver)
    rt.flags.parse_flags(*CUDA_RUNTIME_FLAGS)
    drv = rt.get_driver("cuda")
    if "://" in driver:  # a device URI such as cuda://0
        dev = drv.create_device_by_uri(driver, allocators=list(CUDA_ALLOCATORS))
    else:
        dev = drv.create_default_device(allocators=list(CUDA_ALLOCATORS))
    return rt.Config(device=dev)


class Module:
    """A compiled module loaded into an ``iree.runtime`` context.

    Args:
        vmfb: the compiled module (bytes).
        driver: IREE HAL driver name (``"local-task"``, ``"cuda"``).
        config: an ``iree.runtime.Config`` to share (one device and allocator
            for many modules; a new one per module otherwise, from
            :func:`device_config`).
    """

    def __init__(self, vmfb: bytes, driver: str = "local-task", config=None):
        import iree.runtime as rt

        self._config = config if config is not None else device_config(driver)
        self._ctx = rt.SystemContext(config=self._config)
        self._vm = rt.VmModule.copy_buffer(self._ctx.instance, vmfb)
        self._ctx.add_vm_module(self._vm)
        self.functions = self._ctx.modules[self._vm.name]

    @property
    def device(self):
        """The ``iree.runtime`` HAL device the module runs on."""
        return self._config.device

    def on_device(self, *arrays) -> list:
        """The numpy ``arrays`` copied to the module's device (``DeviceArray`` list),
        to time calls without the host-to-device copies."""
        import iree.runtime as rt

        return [rt.asdevicearray(self._config.device, a) for a in arrays]

    def __call__(self, name: str, *args):
        """Call exported function ``name`` on numpy arrays; returns numpy array(s)."""
        out = self.functions[name](*args)
        if isinstance(out, (tuple, list)):
            return tuple(np.asarray(o.to_host()) for o in out)
        return np.asarray(out.to_host())

    def time(self, name: str, *args, repeat: int = 5, warmup: int = 1) -> list:
        """Wall-clock seconds of ``repeat`` calls (after ``warmup`` calls), results synced to host."""
        dev_args = self.on_device(*args)
        for _ in range(warmup):
            self(name, *dev_args)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self(name, *dev_args)
            times.append(time.perf_counter() - t0)
        return times


def run_mlir(text: str, name: str, *args, flags: Sequence[str] = CPU_FLAGS):
    """Compile ``text`` for the host and call ``name`` on ``args`` (numpy arrays)."""
    return Module(compile_mlir(text, flags))(name, *args)

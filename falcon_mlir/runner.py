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

    def transients_size(self, name: str):
        """Bytes of transient storage function ``name`` states (IREE's external transients,
        :func:`with_external_transients`), or None where it states no constant size."""
        size = self._vm.lookup_function(name).reflection.get(TRANSIENTS_SIZE)
        return None if size is None else int(size)

    def call_with_transients(self, name: str, *args) -> np.ndarray:
        """Call ``name``, a function compiled with IREE's external transients (its last argument a
        ``!hal.buffer {iree.abi.transients}``, :func:`with_external_transients`), on ``args``
        (``DeviceArray`` s, :meth:`on_device`), its transient memory in one buffer of the size the
        module states, allocated on the first call and reused: no allocation, and no page faults, in the
        steady state. Returns the single result on the host.

        Raises:
            ValueError: ``name`` states no constant transient size (no such argument, or a size that
                depends on the inputs).
        """
        import iree.runtime as rt

        storages = self.__dict__.setdefault("_transients", {})
        fn = self._vm.lookup_function(name)
        if name not in storages:
            size = self.transients_size(name)
            if size is None:
                raise ValueError(f"function {name!r} states no constant transient size ({TRANSIENTS_SIZE}): "
                                 "compile it with with_external_transients")
            storages[name] = self.device.allocator.allocate_buffer(
                memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
                allocation_size=max(size, 64))
        storage = storages[name]
        arg_list = rt.VmVariantList(len(args) + 1)
        for a in args:
            arg_list.push_ref(a._buffer_view)
        arg_list.push_ref(storage)
        results = rt.VmVariantList(1)
        self._ctx.vm_context.invoke(fn, arg_list, results)
        return np.asarray(rt.DeviceArray(self.device, results.get_as_object(0, rt.HalBufferView)).to_host())

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


#: The reflection key of a function's transient storage size (bytes) when it does not depend on the inputs.
TRANSIENTS_SIZE = "iree.abi.transients.size.constant"


def with_external_transients(text: str, func: str = "main") -> str:
    """``text`` with its ``func`` given IREE's external transients: a last argument ``%falcon_transients:
    !hal.buffer {iree.abi.transients}`` and its single result passed through ``hal.tensor.transients``,
    so that iree-compile places every transient allocation of the function in that buffer and states its
    size (:data:`TRANSIENTS_SIZE`; IREE 3.13). The call then allocates nothing
    (:meth:`Module.call_with_transients`). Text-level: ``func`` must be a ``func.func`` with one result,
    written ``-> (T ...)`` or ``-> T``, and one ``return`` in its body.

    Raises:
        ValueError: no such function, another result list, or not one ``return`` in its body.
    """
    import re

    m = re.search(r"func\.func\s+(?:public\s+)?@" + re.escape(func) + r"\(", text)
    if not m:
        raise ValueError(f"with_external_transients: no func.func @{func}")
    depth, i = 1, m.end()
    while depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    res = re.match(r"\s*->\s*(?:\(\s*)?(tensor<[^>]*>)", text[i:])
    if not res:
        raise ValueError(f"with_external_transients: @{func} has not one tensor result")
    opened = re.compile(r"\{[ \t]*\n").search(text, i + res.end())  # the body's brace ends its line
    if not opened:
        raise ValueError(f"with_external_transients: @{func} has no body")
    body_start = opened.start()
    depth, j = 1, body_start + 1
    while depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    body = text[body_start:j]
    rets = list(re.finditer(r"\n(\s*)(?:func\.)?return\s+(%[\w#]+)\s*:\s*(tensor<[^>]*>)", body))
    if len(rets) != 1 or len(re.findall(r"(?<![\w.])return\b", body)) != 1:  # not stablehlo.return etc.
        raise ValueError(f"with_external_transients: @{func} needs exactly one return of one tensor")
    r = rets[0]
    new_ret = (f"\n{r.group(1)}%falcon_transients_result = hal.tensor.transients {r.group(2)} : {r.group(3)} "
               f"from %falcon_transients : !hal.buffer\n{r.group(1)}return %falcon_transients_result : {r.group(3)}")
    body = body[:r.start()] + new_ret + body[r.end():]
    sig = text[m.start():i - 1] + (", " if text[i - 2] != "(" else "") + \
        "%falcon_transients: !hal.buffer {iree.abi.transients})"
    return text[:m.start()] + sig + text[i:body_start] + body + text[j:]


def run_mlir(text: str, name: str, *args, flags: Sequence[str] = CPU_FLAGS):
    """Compile ``text`` for the host and call ``name`` on ``args`` (numpy arrays)."""
    return Module(compile_mlir(text, flags))(name, *args)
